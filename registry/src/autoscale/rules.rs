//! What the registry reads of a cluster document for autoscale and sleep marking (the
//! `autoscale` and `sleep` blocks of `clusters/<name>`, docs/OPERATIONS.md, "Autoscale"), and
//! when a rule holds long enough to fire.

use portico_control::v1;
use serde_json::Value;
use std::time::{Duration, Instant};

/// `autoscale` of a cluster document (the contract's, `control/src/v1.rs`).
pub type Autoscale = v1::Autoscale;
/// One rule of `autoscale.rules`.
pub type Rule = v1::AutoscaleRule;

/// Whether `rule` holds at `rps` (a rule with neither bound never holds).
pub fn holds(rule: &Rule, rps: f64) -> bool {
    (rule.rps_above.is_some() || rule.rps_below.is_some())
        && rule.rps_above.is_none_or(|a| rps > a)
        && rule.rps_below.is_none_or(|b| rps < b)
}

/// The registry's part of `sleep`: call `sleep_url` after `idle_s` without requests.
#[derive(Debug, Clone, PartialEq)]
pub struct SleepMark {
    /// POSTed once the cluster has been idle for `idle_s`.
    pub sleep_url: String,
    /// Seconds without a request on any gateway.
    pub idle_s: u64,
}

/// A cluster document as the contract reads it (`None` if it does not fit).
fn cluster_of(doc: &Value) -> Option<v1::Cluster> {
    serde_json::from_value(doc.clone()).ok()
}

/// The `autoscale` block of a cluster document, if it has a usable one.
pub fn autoscale_of(doc: &Value) -> Option<Autoscale> {
    let a = cluster_of(doc)?.autoscale?;
    (!a.webhook.is_empty() && !a.rules.is_empty()).then_some(a)
}

/// The `sleep` block's `sleep_url` and `idle_s`, if the document has both.
pub fn sleep_of(doc: &Value) -> Option<SleepMark> {
    let s = cluster_of(doc)?.sleep?;
    let sleep_url = s.sleep_url.filter(|u| !u.is_empty())?;
    Some(SleepMark {
        sleep_url,
        idle_s: s.idle_s?,
    })
}

/// Since when each rule of a cluster has held (reset when the rules change).
#[derive(Debug, Default)]
pub struct Holding {
    rules: Vec<Rule>,
    since: Vec<Option<Instant>>,
}

impl Holding {
    /// Records the rate observed at `now` and answers the first rule (index) that has held for
    /// its `for_s`. A rule that stops holding starts again from zero.
    pub fn observe(&mut self, rules: &[Rule], rps: f64, now: Instant) -> Option<usize> {
        if self.rules != rules {
            self.rules = rules.to_vec();
            self.since = vec![None; rules.len()];
        }
        let mut due = None;
        for (i, rule) in rules.iter().enumerate() {
            if holds(rule, rps) {
                let since = *self.since[i].get_or_insert(now);
                if due.is_none() && now.duration_since(since) >= Duration::from_secs(rule.for_s) {
                    due = Some(i);
                }
            } else {
                self.since[i] = None;
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_contract_blocks_are_read() {
        let doc = json!({
            "protocol": "http", "endpoints": [{"addr": "127.0.0.1:1"}],
            "autoscale": {"webhook": "http://h/scale", "rules": [
                {"rps_above": 500, "for_s": 10, "action": "up"},
                {"rps_below": 10, "for_s": 60, "action": "down"}
            ], "cooldown_s": 30},
            "sleep": {"wake_url": "http://h/wake", "sleep_url": "http://h/sleep", "idle_s": 600}
        });
        let a = autoscale_of(&doc).unwrap();
        assert_eq!(a.cooldown_s, 30);
        assert_eq!(a.rules[0].rps_above, Some(500.0));
        assert_eq!(a.rules[1].action, v1::ScaleAction::Down);
        assert_eq!(
            sleep_of(&doc),
            Some(SleepMark {
                sleep_url: "http://h/sleep".into(),
                idle_s: 600
            })
        );
        let base = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:1"}]});
        let with = |k: &str, v: Value| {
            let mut d = base.clone();
            d[k] = v;
            d
        };
        assert!(sleep_of(&with("sleep", json!({"wake_url": "x"}))).is_none());
        assert!(autoscale_of(&base).is_none());
        assert!(autoscale_of(&with("autoscale", json!({"webhook": "x", "rules": []}))).is_none());
    }

    #[test]
    fn a_rule_fires_after_holding_for_its_duration() {
        let rules = vec![
            Rule {
                rps_above: Some(100.0),
                rps_below: None,
                for_s: 4,
                action: v1::ScaleAction::Up,
            },
            Rule {
                rps_above: None,
                rps_below: Some(1.0),
                for_s: 0,
                action: v1::ScaleAction::Down,
            },
        ];
        let mut h = Holding::default();
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        assert_eq!(h.observe(&rules, 150.0, s(0)), None);
        assert_eq!(h.observe(&rules, 150.0, s(2)), None);
        assert_eq!(h.observe(&rules, 50.0, s(3)), None, "a dip resets the hold");
        assert_eq!(h.observe(&rules, 150.0, s(4)), None);
        assert_eq!(h.observe(&rules, 150.0, s(8)), Some(0));
        assert_eq!(
            h.observe(&rules, 0.0, s(9)),
            Some(1),
            "for_s 0 fires at once"
        );
        let never = Rule {
            rps_above: None,
            rps_below: None,
            for_s: 0,
            action: v1::ScaleAction::Up,
        };
        assert!(!holds(&never, 1.0));
    }
}
