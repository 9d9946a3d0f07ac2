//! `degrade`: the last edge stage; answers for an API whose degradation switch is on.
//!
//! A switch with `degraded: true` and a `fallback` answers with the fallback: its status,
//! its headers, and its `body` serialised as JSON, with `content-type: application/json`
//! added unless the fallback sets a content type itself. A `null` (or absent) body is an
//! empty body, and then no content type is added. A switch without a fallback answers 503
//! `API_DEGRADED` with the switch's public `message` (default "the API is temporarily
//! unavailable"); its `reason` is for operators and goes to the access log only. Replies are prepared when the
//! stage is built, so a degraded API costs one map lookup and a cheap clone per request.
//!
//! Key-level switches (`switches/<api_id>@<label>`, docs/operations/degrading.md, "Key-level
//! switches") degrade only the requests their `match` selects: every selector's value must
//! be one of its list. The API-wide switch wins; among labelled switches the first by label
//! that matches answers, with its own fallback or 503 `API_DEGRADED`. Matchers are built with
//! the stage (value sets), so an API with no labelled switch on costs the same one lookup.

use crate::edge::{keys, Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use crate::model::{Response, Whole};
use bytes::Bytes;
use portico_control::selector::Selector;
use portico_control::{v1, KeySwitch, Snapshot};
use std::collections::{HashMap, HashSet};

/// Answers degraded APIs from their switches.
#[derive(Debug, Clone, Default)]
pub struct DegradeStage {
    /// API id → the prepared answer, for switches that are on: the fallback, or the refusal.
    degraded: HashMap<String, Result<Whole, GatewayError>>,
    /// API id → its key-level switches that are on, in label order.
    keyed: HashMap<String, Vec<KeyMatcher>>,
}

/// A key-level switch that is on: what it matches and its prepared answer.
#[derive(Debug, Clone)]
struct KeyMatcher {
    matches: Vec<(Selector, HashSet<String>)>,
    reply: Result<Whole, GatewayError>,
}

impl KeyMatcher {
    fn new(ks: &KeySwitch) -> KeyMatcher {
        let matches = ks
            .matches
            .iter()
            .map(|(sel, values)| (sel.clone(), values.iter().cloned().collect()))
            .collect();
        let name = format!("{}@{}", ks.api_id, ks.label);
        KeyMatcher {
            matches,
            reply: reply_for(&name, &ks.switch),
        }
    }

    /// Whether every selector's value in this request is one of its values.
    fn selects(&self, req: &EdgeRequest<'_>, ctx: &EdgeCtx) -> bool {
        self.matches.iter().all(|(sel, values)| {
            keys::value(sel, req, ctx).is_some_and(|v| values.contains(v.as_ref()))
        })
    }
}

/// The answer of a switch that is on.
fn reply_for(api_id: &str, switch: &v1::Switch) -> Result<Whole, GatewayError> {
    match &switch.fallback {
        Some(fallback) => {
            let mut headers: Vec<(String, String)> = fallback
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let body = if fallback.body.is_null() {
                Bytes::new()
            } else {
                // Serialising a `serde_json::Value` cannot fail.
                Bytes::from(serde_json::to_vec(&fallback.body).unwrap_or_default())
            };
            let has_type = headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
            if !has_type && !body.is_empty() {
                headers.push(("content-type".to_owned(), "application/json".to_owned()));
            }
            Ok(Whole {
                status: fallback.status,
                headers,
                body,
            })
        }
        None => {
            // Merchants read the switch's public message; the operators' reason (which may
            // name incidents, hosts or documents) goes to the access log only.
            let message = match switch.message.as_deref().map(str::trim) {
                Some(m) if !m.is_empty() => m.to_owned(),
                _ => v1::DEFAULT_DEGRADED_MESSAGE.to_owned(),
            };
            let detail = match switch.reason.as_deref().map(str::trim) {
                Some(reason) if !reason.is_empty() => {
                    format!("API {api_id} is degraded: {reason}")
                }
                _ => format!("API {api_id} is degraded"),
            };
            Err(GatewayError::new(Code::ApiDegraded, message).with_detail(detail))
        }
    }
}

impl Stage for DegradeStage {
    /// Reload phase: prepares the answers of the snapshot's switches that are on. Carries
    /// nothing.
    fn build(snapshot: &Snapshot, _carried: &Carried) -> Self {
        let degraded = snapshot
            .switches
            .iter()
            .filter(|(_, switch)| switch.degraded)
            .filter(|(name, _)| !name.contains(portico_control::selector::LABEL_SEPARATOR))
            .map(|(api_id, switch)| (api_id.clone(), reply_for(api_id, switch)))
            .collect();
        let keyed = snapshot
            .key_switches
            .iter()
            .map(|(api_id, list)| {
                let on: Vec<KeyMatcher> = list
                    .iter()
                    .filter(|ks| ks.switch.degraded)
                    .map(|ks| KeyMatcher::new(ks))
                    .collect();
                (api_id.clone(), on)
            })
            .filter(|(_, on)| !on.is_empty())
            .collect();
        DegradeStage { degraded, keyed }
    }

    fn name(&self) -> &'static str {
        "degrade"
    }

    /// Request phase, the last edge stage (after `rate_limit`, so degraded calls still count
    /// against limits). `Continue`: neither the API's switch nor a key-level switch matching
    /// this request is on; `Respond`: the fallback answer, or 503 `API_DEGRADED`. Without a
    /// route (a pipeline bug) it fails closed with 500.
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow {
        let Some(api) = ctx.api() else {
            return GatewayError::new(Code::Internal, "degrade ran before route").into();
        };
        if let Some(reply) = self.degraded.get(&api.id) {
            ctx.degraded = true;
            return Flow::Respond(reply.clone().map(Response::Whole));
        }
        if let Some(list) = self.keyed.get(&api.id) {
            if let Some(m) = list.iter().find(|m| m.selects(req, ctx)) {
                let reply = m.reply.clone();
                ctx.degraded = true;
                return Flow::Respond(reply.map(Response::Whole));
            }
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{api, get, routed};
    use http::HeaderMap;
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use v1::AuthMode;

    fn snapshot(switches: &[(&str, v1::Switch)]) -> Snapshot {
        let mut s = Snapshot::default();
        for (id, sw) in switches {
            s.switches.insert((*id).to_owned(), Arc::new(sw.clone()));
        }
        s
    }

    fn run(stage: &DegradeStage, api_id: &str) -> Flow {
        let headers = HeaderMap::new();
        let req = get("/x", &headers, None);
        let mut ctx = routed(&api(api_id, AuthMode::None, vec![]));
        stage.apply(&req, &mut ctx)
    }

    fn fallback(status: u16, headers: &[(&str, &str)], body: serde_json::Value) -> v1::Fallback {
        v1::Fallback {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            body,
        }
    }

    #[test]
    fn switch_off_or_absent_continues() {
        let off = v1::Switch {
            degraded: false,
            fallback: None,
            ..v1::Switch::default()
        };
        let stage = DegradeStage::build(&snapshot(&[("order.get", off)]), &Carried::default());
        assert!(matches!(run(&stage, "order.get"), Flow::Continue));
        assert!(matches!(run(&stage, "other"), Flow::Continue));
    }

    #[test]
    fn fallback_is_canned_json() {
        let sw = v1::Switch {
            degraded: true,
            reason: Some("db failover".into()),
            fallback: Some(fallback(
                200,
                &[("X-Degraded", "1")],
                serde_json::json!({"items": []}),
            )),
            ..v1::Switch::default()
        };
        let stage = DegradeStage::build(&snapshot(&[("order.get", sw)]), &Carried::default());
        match run(&stage, "order.get") {
            Flow::Respond(Ok(Response::Whole(Whole {
                status,
                headers,
                body,
            }))) => {
                assert_eq!(status, 200);
                assert_eq!(&body[..], br#"{"items":[]}"#);
                assert!(headers.contains(&("X-Degraded".to_owned(), "1".to_owned())));
                assert!(
                    headers.contains(&("content-type".to_owned(), "application/json".to_owned()))
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(run(&stage, "order.list"), Flow::Continue));
    }

    #[test]
    fn fallback_content_type_is_kept_and_null_body_is_empty() {
        let sw = v1::Switch {
            degraded: true,
            fallback: Some(fallback(
                200,
                &[("Content-Type", "text/plain")],
                serde_json::json!("busy"),
            )),
            ..v1::Switch::default()
        };
        let empty = v1::Switch {
            degraded: true,
            fallback: Some(fallback(204, &[], serde_json::Value::Null)),
            ..v1::Switch::default()
        };
        let stage = DegradeStage::build(&snapshot(&[("a", sw), ("b", empty)]), &Carried::default());
        match run(&stage, "a") {
            Flow::Respond(Ok(Response::Whole(Whole { headers, body, .. }))) => {
                assert_eq!(
                    headers,
                    vec![("Content-Type".to_owned(), "text/plain".to_owned())]
                );
                assert_eq!(&body[..], br#""busy""#);
            }
            other => panic!("unexpected {other:?}"),
        }
        match run(&stage, "b") {
            Flow::Respond(Ok(Response::Whole(Whole {
                status,
                headers,
                body,
            }))) => {
                assert_eq!(status, 204);
                assert!(headers.is_empty());
                assert!(body.is_empty());
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn no_fallback_is_api_degraded_with_the_public_message_only() {
        let sw = v1::Switch {
            degraded: true,
            reason: Some("db failover".into()),
            message: Some("ordering is paused for maintenance".into()),
            ..v1::Switch::default()
        };
        let bare = v1::Switch {
            degraded: true,
            ..v1::Switch::default()
        };
        let stage = DegradeStage::build(
            &snapshot(&[("order.get", sw), ("x", bare)]),
            &Carried::default(),
        );
        match run(&stage, "order.get") {
            Flow::Respond(Err(e)) => {
                assert_eq!(e.code, Code::ApiDegraded);
                assert_eq!(e.status(), 503);
                // The operators' reason is in the log's detail, never in the answer.
                assert_eq!(e.message, "ordering is paused for maintenance");
                assert_eq!(
                    e.detail.as_deref(),
                    Some("API order.get is degraded: db failover")
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        match run(&stage, "x") {
            Flow::Respond(Err(e)) => {
                assert_eq!(e.message, "the API is temporarily unavailable");
                assert_eq!(e.detail.as_deref(), Some("API x is degraded"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// A stage from switch documents (name → JSON), validated like a real tree.
    fn keyed_stage(docs: &[(&str, serde_json::Value)]) -> DegradeStage {
        let docs: Vec<(String, serde_json::Value)> = docs
            .iter()
            .map(|(n, v)| (format!("switches/{n}"), v.clone()))
            .collect();
        let refs: Vec<(&str, serde_json::Value)> =
            docs.iter().map(|(p, v)| (p.as_str(), v.clone())).collect();
        let snap = portico_control::build_snapshot(&crate::testing::tree(&refs), None);
        assert!(snap.rejected.is_empty(), "{:?}", snap.rejected);
        DegradeStage::build(&snap, &Carried::default())
    }

    fn run_keyed(stage: &DegradeStage, sku: &str, headers: &[(&str, &str)]) -> Flow {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let req = get("/x", &map, None);
        let mut ctx = routed(&api("sku.get", AuthMode::None, vec![]));
        if let Some(route) = ctx.route.as_mut() {
            route.vars = vec![("sku".to_owned(), sku.to_owned())];
        }
        stage.apply(&req, &mut ctx)
    }

    #[test]
    fn key_level_switches_degrade_only_what_they_match() {
        let stage = keyed_stage(&[
            (
                "sku.get@sku-BK-1",
                serde_json::json!({"degraded": true, "match": {"path:sku": ["BK-1"]},
                    "fallback": {"status": 200, "body": {"sku": "BK-1", "stock": 0}}}),
            ),
            (
                "sku.get@north-cm",
                serde_json::json!({"degraded": true, "reason": "carrier outage",
                    "match": {"header:X-Region": ["north"], "header:X-Carrier": ["cm"]}}),
            ),
            (
                "sku.get@off",
                serde_json::json!({"degraded": false, "match": {"path:sku": ["BK-2"]}}),
            ),
        ]);
        match run_keyed(&stage, "BK-1", &[]) {
            Flow::Respond(Ok(Response::Whole(Whole { status, body, .. }))) => {
                assert_eq!(status, 200);
                assert_eq!(&body[..], br#"{"sku":"BK-1","stock":0}"#);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(run_keyed(&stage, "BK-2", &[]), Flow::Continue));
        assert!(matches!(run_keyed(&stage, "BK-3", &[]), Flow::Continue));
        // Only the combination: one dimension alone is not enough.
        let both = [("x-region", "north"), ("x-carrier", "cm")];
        match run_keyed(&stage, "BK-3", &both) {
            Flow::Respond(Err(e)) => {
                assert_eq!(e.code, Code::ApiDegraded);
                let detail = e.detail.as_deref().unwrap_or_default();
                assert!(detail.contains("carrier outage"), "{detail}");
                assert!(!e.message.contains("carrier outage"), "{}", e.message);
            }
            other => panic!("unexpected {other:?}"),
        }
        let one = [("x-region", "north"), ("x-carrier", "ct")];
        assert!(matches!(run_keyed(&stage, "BK-3", &one), Flow::Continue));
        assert!(matches!(
            run_keyed(&stage, "BK-3", &[("x-region", "north")]),
            Flow::Continue
        ));
    }

    #[test]
    fn a_router_style_call_is_matched_by_its_body_fields() {
        let stage = keyed_stage(&[(
            "sku.get@sku-BK-1",
            serde_json::json!({"degraded": true, "match": {"path:sku": ["BK-1"]}}),
        )]);
        let run_router = |body: &'static [u8]| {
            let map = HeaderMap::new();
            let mut req = get("/router", &map, None);
            req.method = "POST";
            req.query = Some("method=sku.get&sku=BK-2");
            req.body = body;
            let mut ctx = routed(&api("sku.get", AuthMode::None, vec![]));
            if let Some(route) = ctx.route.as_mut() {
                route.router_style = true;
                route.binding = None;
            }
            stage.apply(&req, &mut ctx)
        };
        // The same key as the RESTful GET /skus/BK-1, sent as the body.
        match run_router(br#"{"sku":"BK-1"}"#) {
            Flow::Respond(Err(e)) => assert_eq!(e.code, Code::ApiDegraded),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(run_router(br#"{"sku":"BK-2"}"#), Flow::Continue));
        // The router's own query is not the request: `sku=BK-1` there matches nothing.
        assert!(matches!(run_router(b"{}"), Flow::Continue));
    }

    #[test]
    fn the_api_wide_switch_wins() {
        let stage = keyed_stage(&[
            (
                "sku.get@sku-BK-1",
                serde_json::json!({"degraded": true, "match": {"path:sku": ["BK-1"]},
                    "fallback": {"status": 200, "body": "keyed"}}),
            ),
            (
                "sku.get",
                serde_json::json!({"degraded": true, "reason": "all off"}),
            ),
        ]);
        for sku in ["BK-1", "BK-9"] {
            match run_keyed(&stage, sku, &[]) {
                Flow::Respond(Err(e)) => {
                    assert!(e.detail.as_deref().unwrap_or_default().contains("all off"))
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        // No labelled switch on for an API: no matcher is kept for it.
        let off = keyed_stage(&[(
            "sku.get@x",
            serde_json::json!({"degraded": false, "match": {"app": ["m1"]}}),
        )]);
        assert!(off.keyed.is_empty());
    }
}
