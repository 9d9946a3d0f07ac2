//! Evaluating the rules: what the gateways show over the last [`WINDOW`] ([`Observation`],
//! from the health monitor's samples), each rule's value per API, and each alert's state over
//! time ([`Tracker`]): an alert fires once its condition has held for `for_s`, and resolves
//! once it has been false for `for_s` (docs/operations/alerts.md, "Alerts").

use super::rules::{Condition, Rule};
use crate::cadence;
use crate::health::quantiles::{between, Figures};
use crate::health::scraper::Inner;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// The span the per-API figures cover at the production cadence (at another,
/// [`cadence::scaled`]: the same number of scrapes).
pub const WINDOW: Duration = Duration::from_secs(10);
/// A gateway gone from ZooKeeper counts as missing for this long after it was last read.
pub const NODE_MEMORY: Duration = Duration::from_secs(600);

/// The plane whose traffic the rules watch.
const PLANE: &str = "live";

/// What the gateways show now.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// Seconds the figures cover.
    pub secs: f64,
    /// Each live API's figures over the window, summed over the nodes.
    pub figures: HashMap<String, Figures>,
    /// Each live API's breaker state per node at the latest scrape (0 closed, 1 open, 2
    /// half-open).
    pub breakers: HashMap<String, Vec<i64>>,
    /// The live APIs: published, or seen in the metrics.
    pub apis: BTreeSet<String>,
    /// The gateway nodes registered now, and whether their last scrape read them.
    pub nodes: BTreeMap<String, bool>,
    /// Each node's applied live configuration generation (as its metrics last said).
    pub generations: BTreeMap<String, u64>,
    /// Why the nodes could not be listed (ZooKeeper away): the node conditions have no data.
    pub nodes_error: Option<String>,
}

impl Observation {
    /// The observation of the monitor's samples over [`WINDOW`] at the cadence in force; `None`
    /// before two samples (no window yet).
    pub fn of(inner: &Inner) -> Option<Observation> {
        Observation::over(inner, cadence::scaled(WINDOW), cadence::interval())
    }

    /// The observation of the monitor's samples over `window`, scraped every `interval`.
    pub fn over(inner: &Inner, window: Duration, interval: Duration) -> Option<Observation> {
        let latest = inner.samples.back()?;
        let start = inner
            .samples
            .iter()
            .find(|s| latest.at.duration_since(s.at) <= window + interval / 2)
            .filter(|s| !std::ptr::eq(*s, latest))
            .or_else(|| inner.samples.iter().rev().nth(1))?;
        let secs = latest.at.duration_since(start.at).as_secs_f64().max(0.001);
        let mut o = Observation {
            secs,
            ..Observation::default()
        };
        for ((plane, api), f) in between(&start.nodes, &latest.nodes) {
            if plane == PLANE && api != "-" {
                o.apis.insert(api.clone());
                o.figures.insert(api, f);
            }
        }
        for m in latest.nodes.values() {
            for ((plane, api), state) in &m.breaker {
                if plane == PLANE && api != "-" {
                    o.apis.insert(api.clone());
                    o.breakers.entry(api.clone()).or_default().push(*state);
                }
            }
        }
        o.apis.extend(inner.published.iter().cloned());
        for (id, n) in &inner.nodes {
            o.nodes.insert(id.clone(), n.ok);
            if let Some(g) = n.generation.get(PLANE) {
                o.generations
                    .insert(id.clone(), u64::try_from(*g).unwrap_or(0));
            }
        }
        o.nodes_error = inner.error.clone();
        Some(o)
    }
}

/// What the evaluator remembers of the gateways between rounds: when it last read each node,
/// and when it first saw each configuration generation of the live tree.
#[derive(Debug, Clone, Default)]
pub struct Gateways {
    /// Node id → when its metrics were last read, Unix ms.
    last_read: BTreeMap<String, u64>,
    /// Live tree generation → when this registry first saw it, Unix ms.
    first_seen: BTreeMap<u64, u64>,
}

impl Gateways {
    /// Records a round: nodes read, and the live tree's generation (if read).
    pub fn note(&mut self, o: &Observation, tree_generation: Option<u64>, now_ms: u64) {
        for (id, ok) in &o.nodes {
            if *ok {
                self.last_read.insert(id.clone(), now_ms);
            }
        }
        let memory = NODE_MEMORY.as_millis() as u64;
        self.last_read
            .retain(|id, at| o.nodes.contains_key(id) || now_ms.saturating_sub(*at) < memory);
        if let Some(g) = tree_generation {
            self.first_seen.entry(g).or_insert(now_ms);
            // Generations every node has applied are of no more use.
            if let Some(oldest_applied) = o.generations.values().min() {
                let keep_from = (*oldest_applied).min(g);
                self.first_seen.retain(|gen, _| *gen >= keep_from);
            }
        }
    }

    /// The missing nodes: registered but not read at the last scrape, or gone from ZooKeeper
    /// less than [`NODE_MEMORY`] after they were last read.
    pub fn missing(&self, o: &Observation) -> Vec<String> {
        let mut missing: Vec<String> = o
            .nodes
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(id, _)| id.clone())
            .collect();
        missing.extend(
            self.last_read
                .keys()
                .filter(|id| !o.nodes.contains_key(*id))
                .cloned(),
        );
        missing
    }

    /// The longest time, in seconds, a registered node has served a generation older than the
    /// live tree's `current`: since this registry first saw the oldest generation the node
    /// has not applied.
    pub fn lag_s(&self, o: &Observation, current: u64, now_ms: u64) -> f64 {
        o.generations
            .values()
            .filter(|applied| **applied < current)
            .map(|applied| {
                let since = self
                    .first_seen
                    .range(applied + 1..)
                    .next()
                    .map(|(_, at)| *at)
                    .unwrap_or(now_ms);
                now_ms.saturating_sub(since) as f64 / 1000.0
            })
            .fold(0.0, f64::max)
    }
}

/// A rule's value for each API it watches (gateway-wide conditions: one value, API `*`).
pub fn values(
    rule: &Rule,
    o: &Observation,
    gateways: &Gateways,
    tree_generation: Option<u64>,
    now_ms: u64,
) -> Vec<(String, Option<f64>)> {
    match rule.condition {
        Condition::NodeMissing => {
            let v = o
                .nodes_error
                .is_none()
                .then(|| gateways.missing(o).len() as f64);
            vec![("*".to_owned(), v)]
        }
        Condition::ConfigLagAbove => {
            let v = tree_generation.map(|g| gateways.lag_s(o, g, now_ms));
            vec![("*".to_owned(), v)]
        }
        _ => {
            let apis: Vec<String> = if rule.api == "*" {
                o.apis.iter().cloned().collect()
            } else {
                vec![rule.api.clone()]
            };
            apis.into_iter()
                .map(|api| {
                    let v = api_value(rule.condition, &api, o);
                    (api, v)
                })
                .collect()
        }
    }
}

/// One API's value of a per-API condition.
fn api_value(c: Condition, api: &str, o: &Observation) -> Option<f64> {
    let empty = Figures::default();
    let f = o.figures.get(api).unwrap_or(&empty);
    match c {
        Condition::Tp99MsAbove => f.quantiles_ms().p99,
        Condition::AvailabilityBelow => f.availability(),
        Condition::QpsAbove | Condition::QpsBelow => {
            Some(((f.requests / o.secs) * 1000.0).round() / 1000.0)
        }
        Condition::BreakerOpen => Some(
            o.breakers
                .get(api)
                .map(|states| states.iter().filter(|s| **s == 1 || **s == 2).count())
                .unwrap_or(0) as f64,
        ),
        Condition::NodeMissing | Condition::ConfigLagAbove => None,
    }
}

/// Where an alert is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The condition is false, since then (Unix ms).
    Clear { since: u64 },
    /// The condition holds since `since`, not yet for `for_s`.
    Pending { since: u64 },
    /// Fired at `fired`; the condition began to hold at `started`.
    Firing { started: u64, fired: u64 },
    /// Firing, but the condition is false since `since` (not yet for `for_s`).
    Resolving {
        started: u64,
        fired: u64,
        since: u64,
    },
}

/// One alert: a rule on one API.
#[derive(Debug, Clone)]
pub struct Alert {
    /// The rule as last evaluated (kept when the rule is deleted, to resolve it).
    pub rule: Arc<Rule>,
    pub api: String,
    pub phase: Phase,
    /// The latest value.
    pub value: Option<f64>,
    /// The id of the history event of its latest firing, if recorded.
    pub event_id: Option<i64>,
}

impl Alert {
    /// `rule@api`: the alert's key (in the notified records too).
    pub fn key(&self) -> String {
        key(&self.rule.name, &self.api)
    }

    /// Whether it is firing (or resolving, which still counts as firing).
    pub fn is_firing(&self) -> bool {
        matches!(self.phase, Phase::Firing { .. } | Phase::Resolving { .. })
    }

    /// When its condition began to hold (`None` when clear).
    pub fn started(&self) -> Option<u64> {
        match self.phase {
            Phase::Clear { .. } => None,
            Phase::Pending { since } => Some(since),
            Phase::Firing { started, .. } | Phase::Resolving { started, .. } => Some(started),
        }
    }
}

/// `rule@api`.
pub fn key(rule: &str, api: &str) -> String {
    format!("{rule}@{api}")
}

/// What changed in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The alert of this key fired.
    Fired(String),
    /// The alert of this key resolved (it fired at `fired`, its condition began at `started`).
    Resolved {
        key: String,
        started: u64,
        fired: u64,
    },
}

/// Every alert's state, updated each round.
#[derive(Debug, Default)]
pub struct Tracker {
    /// By key.
    pub alerts: BTreeMap<String, Alert>,
}

impl Tracker {
    /// One round: the values of every rule's APIs at `now_ms`. Alerts no longer evaluated (the
    /// rule or the API is gone) count as false: a firing one resolves after its `for_s`, then
    /// is forgotten.
    pub fn round(
        &mut self,
        now_ms: u64,
        evaluated: Vec<(Arc<Rule>, String, Option<f64>)>,
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (rule, api, value) in evaluated {
            let k = key(&rule.name, &api);
            let holds = rule.condition.holds(value, rule.threshold);
            let alert = self.alerts.entry(k.clone()).or_insert_with(|| Alert {
                rule: rule.clone(),
                api: api.clone(),
                phase: Phase::Clear { since: now_ms },
                value: None,
                event_id: None,
            });
            alert.rule = rule;
            alert.value = value;
            if let Some(t) = step(alert, holds, now_ms) {
                out.push(t);
            }
            seen.insert(k);
        }
        let gone: Vec<String> = self
            .alerts
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            let Some(alert) = self.alerts.get_mut(&k) else {
                continue;
            };
            alert.value = None;
            if let Some(t) = step(alert, false, now_ms) {
                out.push(t);
            }
            if matches!(alert.phase, Phase::Clear { .. }) {
                self.alerts.remove(&k);
            }
        }
        out
    }
}

/// Moves one alert on; the transition it makes, if any.
fn step(alert: &mut Alert, holds: bool, now: u64) -> Option<Transition> {
    let for_ms = alert.rule.for_s * 1000;
    let (phase, t) = match (alert.phase, holds) {
        (Phase::Clear { .. }, true) | (Phase::Pending { .. }, true) => {
            let since = match alert.phase {
                Phase::Pending { since } => since,
                _ => now,
            };
            if now.saturating_sub(since) >= for_ms {
                (
                    Phase::Firing {
                        started: since,
                        fired: now,
                    },
                    Some(Transition::Fired(alert.key())),
                )
            } else {
                (Phase::Pending { since }, None)
            }
        }
        (Phase::Clear { since }, false) => (Phase::Clear { since }, None),
        (Phase::Pending { .. }, false) => (Phase::Clear { since: now }, None),
        (Phase::Firing { started, fired }, true)
        | (Phase::Resolving { started, fired, .. }, true) => {
            (Phase::Firing { started, fired }, None)
        }
        (Phase::Firing { started, fired }, false)
        | (Phase::Resolving { started, fired, .. }, false) => {
            let since = match alert.phase {
                Phase::Resolving { since, .. } => since,
                _ => now,
            };
            if now.saturating_sub(since) >= for_ms {
                (
                    Phase::Clear { since },
                    Some(Transition::Resolved {
                        key: alert.key(),
                        started,
                        fired,
                    }),
                )
            } else {
                (
                    Phase::Resolving {
                        started,
                        fired,
                        since,
                    },
                    None,
                )
            }
        }
    };
    alert.phase = phase;
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::prometheus::{parse_metrics, TEST_TEXT};
    use crate::health::scraper::{NodeStatus, Sample};
    use std::time::Instant;

    fn rule(condition: Condition, threshold: f64, for_s: u64) -> Arc<Rule> {
        Arc::new(Rule {
            name: "r".into(),
            api: "*".into(),
            condition,
            threshold,
            for_s,
            severity: "page".into(),
            receivers: vec![],
            description: None,
        })
    }

    #[test]
    fn alerts_fire_after_for_s_and_resolve_after_for_s() {
        let r = rule(Condition::Tp99MsAbove, 200.0, 10);
        let mut t = Tracker::default();
        let mut at =
            |secs: u64, v: f64| t.round(secs * 1000, vec![(r.clone(), "a".into(), Some(v))]);
        assert_eq!(at(0, 300.0), vec![]);
        assert_eq!(at(8, 300.0), vec![]);
        // A dip resets the wait.
        assert_eq!(at(9, 100.0), vec![]);
        assert_eq!(at(10, 300.0), vec![]);
        assert_eq!(at(19, 300.0), vec![]);
        assert_eq!(at(20, 300.0), vec![Transition::Fired("r@a".into())]);
        // Stays firing: nothing more (duplicates are never made here).
        assert_eq!(at(22, 300.0), vec![]);
        // False for less than for_s, then true again: still the same firing.
        assert_eq!(at(24, 100.0), vec![]);
        assert_eq!(at(30, 300.0), vec![]);
        assert_eq!(at(32, 100.0), vec![]);
        assert_eq!(at(41, 100.0), vec![]);
        assert_eq!(
            at(42, 100.0),
            vec![Transition::Resolved {
                key: "r@a".into(),
                started: 10_000,
                fired: 20_000
            }]
        );
        assert_eq!(at(44, 100.0), vec![]);
        // Clear since the condition went false (32 s), not since it resolved.
        assert_eq!(t.alerts["r@a"].phase, Phase::Clear { since: 32_000 });
    }

    #[test]
    fn zero_for_s_fires_and_resolves_at_once_and_gone_alerts_resolve() {
        let r = rule(Condition::QpsBelow, 1.0, 0);
        let mut t = Tracker::default();
        assert_eq!(
            t.round(0, vec![(r.clone(), "a".into(), Some(0.0))]),
            vec![Transition::Fired("r@a".into())]
        );
        // The rule was deleted: the alert resolves and is forgotten.
        assert!(matches!(
            t.round(2000, vec![])[..],
            [Transition::Resolved { .. }]
        ));
        assert!(t.alerts.is_empty());
        // No data never fires.
        assert_eq!(t.round(4000, vec![(r, "a".into(), None)]), vec![]);
    }

    fn inner_of(texts: &[(u64, &[(&str, &str)])]) -> Inner {
        let base = Instant::now();
        let mut inner = Inner::default();
        for (secs, nodes) in texts {
            inner.samples.push_back(Sample {
                at: base + Duration::from_secs(*secs),
                unix_ms: secs * 1000,
                nodes: nodes
                    .iter()
                    .map(|(n, t)| ((*n).to_owned(), parse_metrics(t)))
                    .collect(),
            });
        }
        inner
    }

    #[test]
    fn values_come_from_the_window() {
        let later = TEST_TEXT
            .replace("status=\"200\"} 90", "status=\"200\"} 170")
            .replace("status=\"502\"} 10", "status=\"502\"} 30")
            .replace("le=\"0.002\"} 50", "le=\"0.002\"} 60")
            .replace("le=\"0.005\"} 90", "le=\"0.005\"} 100")
            .replace("le=\"0.01\"} 100", "le=\"0.01\"} 200")
            .replace("le=\"+Inf\"} 100", "le=\"+Inf\"} 200");
        // An old sample outside the window, then the window's two.
        let mut inner = inner_of(&[
            (0, &[("a", TEST_TEXT)]),
            (30, &[("a", TEST_TEXT)]),
            (40, &[("a", &later)]),
        ]);
        inner.published.insert("idle".into());
        inner.nodes.insert(
            "a".into(),
            NodeStatus {
                node_id: "a".into(),
                admin_addr: "x".into(),
                ok: true,
                error: None,
                last_ok_ms_ago: None,
                last_ok: None,
                generation: [("live".to_owned(), 42)].into_iter().collect(),
            },
        );
        let o = Observation::of(&inner).unwrap();
        assert_eq!(o.secs, 10.0);
        let g = Gateways::default();
        let v = |c, api: &str| {
            values(&rule(c, 0.0, 0), &o, &g, Some(42), 0)
                .into_iter()
                .find(|(a, _)| a == api)
                .unwrap()
                .1
        };
        // 100 requests (80 OK, 20 502) in 10 s.
        assert_eq!(v(Condition::QpsAbove, "order.get"), Some(10.0));
        assert_eq!(v(Condition::AvailabilityBelow, "order.get"), Some(0.8));
        // Cumulative deltas 0, 10, 10, 100: rank 99 is the 89th of the 90 in (5, 10] ms.
        assert_eq!(v(Condition::Tp99MsAbove, "order.get"), Some(9.944));
        assert_eq!(v(Condition::BreakerOpen, "order.get"), Some(1.0));
        // An idle published API: no latency, zero QPS.
        assert_eq!(v(Condition::Tp99MsAbove, "idle"), None);
        assert_eq!(v(Condition::QpsBelow, "idle"), Some(0.0));
        assert_eq!(v(Condition::NodeMissing, "*"), Some(0.0));
        assert_eq!(v(Condition::ConfigLagAbove, "*"), Some(0.0));
        // One sample only: no window.
        assert!(Observation::of(&inner_of(&[(0, &[("a", TEST_TEXT)])])).is_none());
    }

    #[test]
    fn gateways_missing_and_lagging() {
        let mut g = Gateways::default();
        let mut o = Observation::default();
        o.nodes.insert("a".into(), true);
        o.nodes.insert("b".into(), true);
        o.generations.insert("a".into(), 10);
        o.generations.insert("b".into(), 10);
        g.note(&o, Some(10), 1_000);
        assert!(g.missing(&o).is_empty());
        assert_eq!(g.lag_s(&o, 10, 1_000), 0.0);
        // The tree moves to 12 at 5 s; b applies it, a does not; b then stops answering.
        g.note(&o, Some(12), 5_000);
        o.generations.insert("b".into(), 12);
        o.nodes.insert("b".into(), false);
        g.note(&o, Some(12), 9_000);
        assert_eq!(g.lag_s(&o, 12, 9_000), 4.0);
        assert_eq!(g.missing(&o), ["b"]);
        // a leaves ZooKeeper: missing until NODE_MEMORY after it was last read.
        o.nodes.remove("a");
        o.generations.remove("a");
        g.note(&o, Some(12), 10_000);
        assert_eq!(g.missing(&o), ["b", "a"]);
        let later = 9_000 + NODE_MEMORY.as_millis() as u64;
        g.note(&o, Some(12), later);
        assert_eq!(g.missing(&o), ["b"]);
    }
}
