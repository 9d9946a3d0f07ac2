//! What the registry reads of a cluster document for autoscale and sleep marking (the
//! `autoscale` and `sleep` blocks of `clusters/<name>`, docs/operations/clusters.md, "Autoscale"), and
//! the timing of both: when a rule holds long enough to fire, the cooldown between firings, and
//! when a cluster has been idle long enough to be put to sleep, and again.

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

/// Whether a firing at `now_ms` is past the cooldown of the cluster's last one
/// (`last_fired_ms`, Unix ms; 0: it never fired).
pub fn past_cooldown(last_fired_ms: u64, now_ms: u64, cooldown_s: u64) -> bool {
    last_fired_ms == 0 || now_ms.saturating_sub(last_fired_ms) >= cooldown_s.saturating_mul(1000)
}

/// Since when a cluster has been idle as one registry sees it: the last request it saw (or when
/// it first watched the cluster), in Unix ms, and whether it has seen real traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Idle {
    /// Unix ms of the last request seen, or of the first look.
    pub since_ms: u64,
    /// Whether a request was seen at all.
    pub seen_traffic: bool,
}

impl Idle {
    /// First seen at `now_ms`.
    pub fn new(now_ms: u64) -> Idle {
        Idle {
            since_ms: now_ms,
            seen_traffic: false,
        }
    }

    /// Records an evaluation at `now_ms`: `busy` (requests since the previous one) or not
    /// `all_read` (a gateway could not be read: maybe busy) restarts the idle time. Answers
    /// whether the cluster has now been idle for `idle_s`.
    pub fn observe(&mut self, busy: bool, all_read: bool, now_ms: u64, idle_s: u64) -> bool {
        if busy || !all_read {
            self.since_ms = now_ms;
            self.seen_traffic |= busy;
        }
        now_ms.saturating_sub(self.since_ms) >= idle_s.saturating_mul(1000)
    }
}

/// Whether an idle cluster may be put to sleep now, given when it last was (`slept_at_ms`, on
/// its state node, by any registry): not again since its last request, and not again before
/// this registry has seen any request (it started later, or again).
pub fn may_sleep(slept_at_ms: Option<u64>, idle: Idle) -> bool {
    slept_at_ms.is_none_or(|s| s < idle.since_ms && idle.seen_traffic)
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

    /// The rounds of one registry, `every` ms apart, over `rate(t_ms)`: the Unix-ms times of
    /// the firings (`holding`, then the cooldown, as the task applies them).
    fn firings(auto: &Autoscale, every: u64, until: u64, rate: impl Fn(u64) -> f64) -> Vec<u64> {
        let t0 = Instant::now();
        let mut h = Holding::default();
        let mut last = 0;
        let mut fired = Vec::new();
        for t in (every..=until).step_by(every as usize) {
            let due = h.observe(&auto.rules, rate(t), t0 + Duration::from_millis(t));
            if due.is_some() && past_cooldown(last, t, auto.cooldown_s) {
                last = t;
                fired.push(t);
            }
        }
        fired
    }

    fn rule_above(rps: f64, for_s: u64, cooldown_s: u64) -> Autoscale {
        serde_json::from_value(
            json!({"webhook": "http://h/scale", "cooldown_s": cooldown_s,
            "rules": [{"rps_above": rps, "for_s": for_s, "action": "up"}]}),
        )
        .unwrap()
    }

    #[test]
    fn a_held_rule_fires_once_per_cooldown_at_any_cadence() {
        // Production: rounds every 2 s, load above the rule from 10 s to 30 s.
        let load = |t: u64| {
            if (10_000..30_000).contains(&t) {
                25.0
            } else {
                0.0
            }
        };
        let auto = rule_above(5.0, 2, 6);
        assert_eq!(firings(&auto, 2000, 60_000, load), [12_000, 18_000, 24_000]);
        // The same document at the tests' 250 ms rounds: the same seconds.
        assert_eq!(firings(&auto, 250, 60_000, load), [12_000, 18_000, 24_000]);
        // Cooldown 0: every round the rule is due.
        let eager = rule_above(5.0, 2, 0);
        assert_eq!(firings(&eager, 2000, 60_000, load).len(), 9);
        // Below the rule, or held for less than for_s: nothing.
        assert!(firings(&auto, 2000, 60_000, |_| 5.0).is_empty());
        let blip = |t: u64| {
            if (10_000..11_000).contains(&t) {
                25.0
            } else {
                0.0
            }
        };
        assert!(firings(&auto, 250, 60_000, blip).is_empty());
        assert!(past_cooldown(0, 1, 60), "never fired");
        assert!(!past_cooldown(10_000, 69_999, 60));
        assert!(past_cooldown(10_000, 70_000, 60));
    }

    /// The rounds of one registry over `busy(t_ms)`, with a state node shared by all rounds:
    /// the times `sleep_url` is called.
    fn sleeps(idle_s: u64, every: u64, until: u64, busy: impl Fn(u64) -> bool) -> Vec<u64> {
        let mut idle = Idle::new(0);
        let mut slept_at = None;
        let mut called = Vec::new();
        for t in (every..=until).step_by(every as usize) {
            if idle.observe(busy(t), true, t, idle_s) && may_sleep(slept_at, idle) {
                slept_at = Some(t);
                called.push(t);
            }
        }
        called
    }

    #[test]
    fn an_idle_cluster_sleeps_once_per_idle_period_at_any_cadence() {
        let traffic_at = |at: u64, every: u64| move |t: u64| t > at && t <= at + every;
        // Production rounds: idle from the first look, a request seen at the round of 20 s.
        assert_eq!(
            sleeps(3, 2000, 40_000, traffic_at(18_000, 2000)),
            [4000, 24_000]
        );
        // The tests' rounds, idle_s 1.
        assert_eq!(sleeps(1, 250, 10_000, traffic_at(5000, 250)), [1000, 6250]);
        // Never idle long enough.
        assert!(sleeps(3, 2000, 40_000, |t| t % 4000 == 0).is_empty());
        // A gateway that cannot be read keeps the cluster awake.
        let mut idle = Idle::new(0);
        assert!(!idle.observe(false, false, 5000, 3));
        assert!(!idle.observe(false, true, 7000, 3));
        assert!(idle.observe(false, true, 8000, 3));
        assert!(!idle.seen_traffic);
        // Slept before this registry saw any request: not again until it sees one.
        assert!(!may_sleep(Some(1), idle));
        assert!(may_sleep(None, idle));
    }
}
