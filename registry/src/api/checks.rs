//! The registry's own checks of a write, run before the gateways' validation
//! ([`super::validation`]) and reported together with it, every problem at once:
//!
//! - references: a switch, an alert rule or an app naming an API, a topic or an app naming an
//!   app or a topic, an API naming a cluster, must name a document the tree holds after the
//!   change (`*` excepted). Gateways accept a switch or a rule on no API (it does nothing) and
//!   a grant of a missing app or API: only a mistake writes them.
//! - numbers within their documented ranges (docs/OPERATIONS.md), each named with its range.
//! - sizes: a document over [`MAX_DOCUMENT_BYTES`], ZooKeeper's real node limit, is 413.
//!
//! Only the changed documents are checked: a reference left dangling by a delete elsewhere
//! (a rule on an API since removed) does not block unrelated writes.

use crate::error::Detail;
use crate::zk_store::Env;
use portico_control::{DocKind, Tree};
use serde_json::Value;

// The limits are the store's: it refuses a write over them too.
pub use crate::zk_store::{too_large_reason, JUTE_MAXBUFFER, MAX_DOCUMENT_BYTES};

/// The problems of writing `data` at `rel` (tree path relative to the env) that ZooKeeper would
/// not hold: one per document over [`MAX_DOCUMENT_BYTES`].
pub fn size_problems(env: Env, changes: &[(String, Option<Vec<u8>>)]) -> Vec<Detail> {
    changes
        .iter()
        .filter_map(|(rel, data)| {
            let len = data.as_ref()?.len();
            (len > MAX_DOCUMENT_BYTES).then(|| Detail {
                path: Some(env.path(rel)),
                field: None,
                reason: too_large_reason(len),
            })
        })
        .collect()
}

/// The references and ranges problems of the changed documents, checked against `after` (the
/// env's tree with the changes applied). A reference the document already held in `before`
/// is not a problem of this change (an app granted an API since deleted can still be
/// disabled; a switch left on a deleted API can still be turned off).
pub fn problems(
    before: &Tree,
    after: &Tree,
    env: Env,
    changes: &[(String, Option<Vec<u8>>)],
) -> Vec<Detail> {
    let mut out = Vec::new();
    for (rel, data) in changes {
        let Some(doc) = data
            .as_deref()
            .and_then(|d| serde_json::from_slice::<Value>(d).ok())
        else {
            continue;
        };
        let Some((kind, name)) = DocKind::classify(rel) else {
            continue;
        };
        let old = before
            .docs
            .get(rel)
            .and_then(|d| serde_json::from_slice::<Value>(d).ok());
        let mut p = Problems {
            out: &mut out,
            path: env.path(rel),
            after,
            old: old.as_ref(),
        };
        match kind {
            DocKind::Api => {
                if let Some(c) = doc.pointer("/backend/cluster").and_then(Value::as_str) {
                    p.reference("backend.cluster", "clusters", c, "cluster");
                }
                p.api_ranges(&doc);
            }
            DocKind::Switch => {
                let api = name.split_once('@').map_or(name, |(api, _)| api);
                if !after.docs.contains_key(&format!("apis/{api}")) && old.is_none() {
                    p.push(
                        "name",
                        format!(
                            "no API {api:?} in the {} tree: a switch names an API",
                            env.name()
                        ),
                    );
                }
                p.range(&doc, "fallback.status", 100.0, 599.0, true);
            }
            DocKind::Alert => {
                if let Some(api) = doc.get("api").and_then(Value::as_str) {
                    p.reference("api", "apis", api, "API");
                }
                p.range(&doc, "for_s", 0.0, 86_400.0, true);
                let fraction =
                    doc.get("condition").and_then(Value::as_str) == Some("availability_below");
                match doc.get("threshold").and_then(Value::as_f64) {
                    Some(t) if fraction && !(0.0..=1.0).contains(&t) => p.push(
                        "threshold",
                        format!(
                            "{t} is out of range: availability is a fraction, 0 to 1 \
                             (0.999 for 99.9%)"
                        ),
                    ),
                    _ => p.range(&doc, "threshold", 0.0, f64::MAX, false),
                }
            }
            DocKind::Topic => {
                p.references(&doc, "apps", "apps", "app");
                let max = portico_control::validate::MAX_RETENTION_S as f64;
                p.range(&doc, "retention_s", 1.0, max, true);
            }
            DocKind::App => {
                p.references(&doc, "apis", "apis", "API");
                p.references(&doc, "topics", "topics", "topic");
                p.rate_limits(&doc, "rate_limits");
            }
            _ => {}
        }
    }
    out
}

/// Collects the problems of one document.
struct Problems<'a> {
    out: &'a mut Vec<Detail>,
    path: String,
    after: &'a Tree,
    /// The document as it was before the change, if it existed.
    old: Option<&'a Value>,
}

const U32_MAX: f64 = u32::MAX as f64;
const MAX_TIMEOUT_MS: f64 = portico_control::validate::MAX_TIMEOUT_MS as f64;
const DAY_MS: f64 = 86_400_000.0;

impl Problems<'_> {
    fn push(&mut self, field: &str, reason: String) {
        self.out.push(Detail {
            path: Some(self.path.clone()),
            field: Some(field.to_owned()),
            reason,
        });
    }

    /// `field` names `<dir>/<name>`, which must exist after the change (`*` excepted), unless
    /// the document named it before the change already.
    fn reference(&mut self, field: &str, dir: &str, name: &str, what: &str) {
        let top = field.split(['.', '[']).next().unwrap_or(field);
        let held = self.old.is_some_and(|old| {
            let v = match top {
                "backend" => old.pointer("/backend/cluster"),
                _ => old.get(top),
            };
            match v {
                Some(Value::String(s)) => s == name,
                Some(Value::Array(a)) => a.iter().any(|x| x.as_str() == Some(name)),
                _ => false,
            }
        });
        if name != "*" && !held && !self.after.docs.contains_key(&format!("{dir}/{name}")) {
            self.push(
                field,
                format!("no {what} {name:?} ({dir}/{name} does not exist)"),
            );
        }
    }

    /// Each string of the array `field` is a reference (see [`Self::reference`]).
    fn references(&mut self, doc: &Value, field: &str, dir: &str, what: &str) {
        let names = doc.get(field).and_then(Value::as_array);
        for (i, name) in names.into_iter().flatten().enumerate() {
            if let Some(name) = name.as_str() {
                self.reference(&format!("{field}[{i}]"), dir, name, what);
            }
        }
    }

    /// The number at `field` (a dotted path), if present and a number, is within
    /// `[min, max]` (and whole, with `integer`).
    fn range(&mut self, doc: &Value, field: &str, min: f64, max: f64, integer: bool) {
        let pointer = format!("/{}", field.replace('.', "/"));
        let Some(n) = doc.pointer(&pointer).and_then(Value::as_f64) else {
            return;
        };
        let whole = !integer || n.fract() == 0.0;
        if !(min..=max).contains(&n) || !whole {
            let kind = if integer {
                "a whole number"
            } else {
                "a number"
            };
            let range = if max == f64::MAX {
                format!("at least {min}")
            } else {
                format!("between {min} and {max}")
            };
            self.push(
                field,
                format!("{n} is out of range: must be {kind} {range}"),
            );
        }
    }

    /// An API's numbers: deadline, bulkhead, breaker, rate limits, body limit.
    fn api_ranges(&mut self, doc: &Value) {
        self.range(doc, "backend.timeout_ms", 1.0, MAX_TIMEOUT_MS, true);
        self.range(doc, "policy.bulkhead.max_concurrent", 1.0, U32_MAX, true);
        self.range(
            doc,
            "policy.bulkhead.max_wait_ms",
            0.0,
            MAX_TIMEOUT_MS,
            true,
        );
        for f in [
            "consecutive_failures",
            "consecutive_slow_calls",
            "half_open_probes",
            "min_calls",
        ] {
            self.range(doc, &format!("policy.breaker.{f}"), 1.0, U32_MAX, true);
        }
        self.range(
            doc,
            "policy.breaker.slow_call_ms",
            1.0,
            MAX_TIMEOUT_MS,
            true,
        );
        self.range(doc, "policy.breaker.open_ms", 1.0, DAY_MS, true);
        self.range(doc, "policy.breaker.window_ms", 1.0, DAY_MS, true);
        if let Some(r) = doc
            .pointer("/policy/breaker/error_ratio")
            .and_then(Value::as_f64)
        {
            if !(r > 0.0 && r <= 1.0) {
                self.push(
                    "policy.breaker.error_ratio",
                    format!("{r} is out of range: must be in (0, 1] (0.5 for half the calls)"),
                );
            }
        }
        self.range(doc, "policy.max_body_bytes", 1.0, u64::MAX as f64, true);
        self.rate_limits(doc, "policy.rate_limits");
    }

    /// `limit` and `burst` of each rule of the array at `field`: 1 to 2^32 − 1.
    fn rate_limits(&mut self, doc: &Value, field: &str) {
        let pointer = format!("/{}", field.replace('.', "/"));
        let n = doc
            .pointer(&pointer)
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        for i in 0..n {
            let Some(rule) = doc.pointer(&format!("{pointer}/{i}")) else {
                continue;
            };
            for part in ["limit", "burst"] {
                let at = format!("{field}[{i}].{part}");
                let Some(v) = rule.get(part).and_then(Value::as_f64) else {
                    continue;
                };
                if !(1.0..=U32_MAX).contains(&v) || v.fract() != 0.0 {
                    self.push(
                        &at,
                        format!(
                            "{v} is out of range: must be a whole number between 1 and {}",
                            u32::MAX
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(docs: &[(&str, &str)]) -> Tree {
        let mut t = Tree::default();
        for (path, doc) in docs {
            t.docs.insert((*path).to_owned(), doc.as_bytes().to_vec());
        }
        t
    }

    fn change(rel: &str, doc: &str) -> (String, Option<Vec<u8>>) {
        (rel.to_owned(), Some(doc.as_bytes().to_vec()))
    }

    #[test]
    fn every_unknown_reference_and_out_of_range_number_is_listed() {
        let t = tree(&[("apis/a", "{}"), ("apps/m", "{}")]);
        let changes = [
            change("switches/nope", r#"{"degraded":true}"#),
            change("switches/a@vip", r#"{"degraded":true}"#),
            change(
                "alerts/r",
                r#"{"api":"gone","for_s":-1,"condition":"availability_below","threshold":2}"#,
            ),
            change("topics/t", r#"{"apps":["m","x","*"],"retention_s":0}"#),
            change("apps/n", r#"{"apis":["*","a","b"],"topics":["t","u"]}"#),
            change(
                "apis/b",
                r#"{"backend":{"cluster":"c"},"policy":{"bulkhead":{"max_concurrent":99999999999999999999999},
                   "breaker":{"error_ratio":2}}}"#,
            ),
        ];
        let mut after = t.clone();
        for (rel, d) in &changes {
            after.docs.insert(rel.clone(), d.clone().unwrap());
        }
        let got: Vec<(String, String)> = problems(&t, &after, Env::Live, &changes)
            .into_iter()
            .map(|d| (d.path.unwrap(), d.field.unwrap()))
            .collect();
        let want = [
            ("switches/nope", "name"),
            ("alerts/r", "api"),
            ("alerts/r", "for_s"),
            ("alerts/r", "threshold"),
            ("topics/t", "apps[1]"),
            ("topics/t", "retention_s"),
            ("apps/n", "topics[1]"),
            ("apis/b", "backend.cluster"),
            ("apis/b", "policy.bulkhead.max_concurrent"),
            ("apis/b", "policy.breaker.error_ratio"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(p, f)| ((*p).to_owned(), (*f).to_owned()))
            .collect();
        assert_eq!(got, want);
        // apis/b is written by the same change: the app's grant of it stands.

        // A reference the document held before is not this change's problem: the app granted
        // a deleted API is disabled, the switch on a deleted API turned off.
        let before = tree(&[
            ("apps/m", r#"{"apis":["gone"]}"#),
            ("switches/gone", r#"{"degraded":true}"#),
        ]);
        let edits = [
            change("apps/m", r#"{"apis":["gone"],"status":"disabled"}"#),
            change("switches/gone", r#"{"degraded":false}"#),
        ];
        let mut after = before.clone();
        for (rel, d) in &edits {
            after.docs.insert(rel.clone(), d.clone().unwrap());
        }
        assert_eq!(problems(&before, &after, Env::Live, &edits), vec![]);
        let grant = [change("apps/m", r#"{"apis":["gone","new"]}"#)];
        let p = problems(&before, &after, Env::Live, &grant);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].field.as_deref(), Some("apis[1]"));
    }

    #[test]
    fn documents_over_the_zookeeper_limit_are_named() {
        let big = vec![b' '; MAX_DOCUMENT_BYTES + 1];
        let fits = vec![b' '; MAX_DOCUMENT_BYTES];
        let changes = [
            ("apis/a".to_owned(), Some(fits)),
            ("apis/b".to_owned(), Some(big)),
            ("apis/c".to_owned(), None),
        ];
        let p = size_problems(Env::Sandbox, &changes);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].path.as_deref(), Some("sandbox/apis/b"));
    }
}
