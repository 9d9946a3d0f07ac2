//! The recorder: turns the health monitor's scrapes (every gateway's `/metrics`, every 2 s) into
//! per-API per-minute rollups in the [`HistoryStore`], continuously (it keeps the monitor
//! running), and prunes the store every hour.
//!
//! Between two scrapes of a node it counts, for each live API: the calls by status and code
//! (counter deltas; a counter that went down means the node restarted and counts from zero),
//! the latency histogram's deltas, and breaker openings (the node's breaker gauge went to open).
//! Switch flips come from the live tree: a switch whose `degraded` changed between two reads.
//! Everything lands in the minute of the later scrape.

use crate::health::prometheus::{Key, NodeMetrics};
use crate::health::quantiles::{add_bucket_deltas, counter_delta, Buckets};
use crate::health::scraper::{monitor, Sample, INTERVAL};
use crate::history::store::{HistoryStore, Rollup};
use crate::state::Shared;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the store is pruned.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The plane whose traffic is recorded (drafts in the sandbox are not reported).
const PLANE: &str = "live";

/// Starts the recorder on the current runtime; it runs as long as the registry's state lives.
pub fn start(state: &Shared, store: Arc<HistoryStore>) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut rec = Recorder::default();
        let mut ticker = tokio::time::interval(INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_prune: Option<Instant> = None;
        loop {
            ticker.tick().await;
            let Some(state) = weak.upgrade() else { return };
            let samples = new_samples(&state, rec.last_at);
            let switches = switch_states(&state).await;
            let rollups = rec.step(&samples, switches, portico_control::clock::now_ms());
            drop(state);
            let prune = last_prune.is_none_or(|t| t.elapsed() >= PRUNE_EVERY);
            if prune {
                last_prune = Some(Instant::now());
            }
            let s = store.clone();
            let done = tokio::task::spawn_blocking(move || {
                if !rollups.is_empty() {
                    s.add(&rollups)?;
                }
                if prune {
                    let now_minute = minute_of(portico_control::clock::now_ms());
                    let p = s.prune(now_minute)?;
                    if p.for_size > 0 {
                        tracing::warn!(
                            dropped_minutes = p.for_size,
                            oldest_minute = ?p.oldest_minute,
                            max_bytes = s.limits().max_bytes,
                            "history store over its bound: dropped its oldest minutes (raise --history-max-mb to keep more)"
                        );
                    }
                }
                Ok::<_, crate::history::store::HistoryError>(())
            })
            .await;
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "history: cannot record"),
                Err(e) => tracing::warn!(error = %e, "history: the recording task failed"),
            }
        }
    })
}

/// The Unix minute of Unix milliseconds.
pub fn minute_of(unix_ms: u64) -> i64 {
    i64::try_from(unix_ms / 60_000).unwrap_or(i64::MAX)
}

/// The monitor's samples newer than `after` (keeping the monitor running), oldest first.
fn new_samples(state: &Shared, after: Option<Instant>) -> Vec<Sample> {
    let m = monitor(state);
    let inner = m.inner();
    inner
        .samples
        .iter()
        .filter(|s| after.is_none_or(|t| s.at > t))
        .cloned()
        .collect()
}

/// Whether each live API's switch is on (`None` when the tree cannot be read now).
async fn switch_states(state: &Shared) -> Option<BTreeMap<String, bool>> {
    let docs = state.store.list_docs("switches").await.ok()?;
    Some(
        docs.into_iter()
            .map(|(api, doc)| {
                let degraded = serde_json::from_slice::<portico_control::v1::Switch>(&doc.data)
                    .map(|s| s.degraded)
                    .unwrap_or(false);
                (api, degraded)
            })
            .collect(),
    )
}

/// What the recorder remembers between ticks.
#[derive(Default)]
pub struct Recorder {
    /// The last sample turned into rollups.
    last: Option<Sample>,
    /// Its time (for picking the newer ones).
    last_at: Option<Instant>,
    /// The switches as last read.
    switches: Option<BTreeMap<String, bool>>,
}

impl Recorder {
    /// The rollups of the samples newer than the last one seen, and of the switch flips since
    /// the last read (`now_ms` places them).
    pub fn step(
        &mut self,
        samples: &[Sample],
        switches: Option<BTreeMap<String, bool>>,
        now_ms: u64,
    ) -> Vec<Rollup> {
        let mut out: BTreeMap<(String, i64), Rollup> = BTreeMap::new();
        for sample in samples {
            if let Some(prev) = &self.last {
                let minute = minute_of(sample.unix_ms);
                for (api, r) in between(prev, sample) {
                    let entry = out.entry((api.clone(), minute)).or_insert_with(|| Rollup {
                        api,
                        minute,
                        ..Rollup::default()
                    });
                    entry.add(&r);
                }
            }
            self.last = Some(sample.clone());
            self.last_at = Some(sample.at);
        }
        if let Some(now) = switches {
            if let Some(before) = &self.switches {
                let minute = minute_of(now_ms);
                // A switch turned on or off, or a degraded one deleted (the API is back on).
                let flipped = now
                    .iter()
                    .filter(|(api, on)| before.get(*api).copied().unwrap_or(false) != **on)
                    .chain(
                        before
                            .iter()
                            .filter(|(api, on)| **on && !now.contains_key(*api)),
                    );
                for (api, _) in flipped {
                    out.entry((api.clone(), minute))
                        .or_insert_with(|| Rollup {
                            api: api.clone(),
                            minute,
                            ..Rollup::default()
                        })
                        .switch_flips += 1;
                }
            }
            self.switches = Some(now);
        }
        out.into_values().filter(|r| !r.is_empty()).collect()
    }
}

/// Each live API's figures between two samples, summed over the nodes read in both.
fn between(old: &Sample, new: &Sample) -> HashMap<String, Rollup> {
    let mut out: HashMap<String, Rollup> = HashMap::new();
    for (node, m) in &new.nodes {
        let Some(prev) = old.nodes.get(node) else {
            continue;
        };
        node_between(prev, m, &mut out);
    }
    out
}

fn wanted(k: &Key) -> bool {
    k.0 == PLANE && k.1 != "-"
}

fn rollup_of<'a>(out: &'a mut HashMap<String, Rollup>, api: &str) -> &'a mut Rollup {
    out.entry(api.to_owned()).or_insert_with(|| Rollup {
        api: api.to_owned(),
        ..Rollup::default()
    })
}

/// Adds one node's deltas into `out`.
fn node_between(prev: &NodeMetrics, m: &NodeMetrics, out: &mut HashMap<String, Rollup>) {
    for (k, answers) in m.answers.iter().filter(|(k, _)| wanted(k)) {
        let before = prev.answers.get(k);
        // Any counter of the API that went down: the node restarted; count from zero.
        let reset =
            before.is_some_and(|b| answers.iter().any(|(a, n)| b.get(a).is_some_and(|o| n < o)));
        let r = rollup_of(out, &k.1);
        for (answer, &n) in answers {
            let old = if reset {
                None
            } else {
                before.and_then(|b| b.get(answer).copied())
            };
            let d = counter_delta(n, old).round();
            if d > 0.0 {
                *r.answers.entry(answer.clone()).or_default() += d as u64;
            }
        }
    }
    for (k, buckets) in m.buckets.iter().filter(|(k, _)| wanted(k)) {
        // Cumulative deltas by bound (in `le` order), then per bucket.
        let mut cumulative = Buckets::new();
        add_bucket_deltas(
            &mut cumulative,
            buckets,
            prev.buckets.get(k).map(Vec::as_slice),
        );
        let mut below = 0.0;
        let mut hist = Vec::with_capacity(cumulative.len());
        for (le, c) in cumulative.into_values() {
            let n = (c - below).max(0.0).round();
            below = below.max(c);
            if n > 0.0 {
                hist.push((le, n as u64));
            }
        }
        let r = rollup_of(out, &k.1);
        r.latency = crate::history::store::merge_histograms(&r.latency, &hist);
    }
    for (k, &state) in m.breaker.iter().filter(|(k, _)| wanted(k)) {
        let was_open = prev.breaker.get(k).is_some_and(|s| *s == 1);
        if state == 1 && !was_open {
            rollup_of(out, &k.1).breaker_openings += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::prometheus::{parse_metrics, TEST_TEXT};

    fn sample(at: Instant, unix_ms: u64, nodes: &[(&str, &str)]) -> Sample {
        Sample {
            at,
            unix_ms,
            nodes: nodes
                .iter()
                .map(|(n, t)| ((*n).to_owned(), parse_metrics(t)))
                .collect(),
        }
    }

    #[test]
    fn deltas_become_minute_rollups() {
        let t0 = Instant::now();
        let later = TEST_TEXT
            .replace("status=\"200\"} 90", "status=\"200\"} 150")
            .replace("status=\"502\"} 10", "status=\"502\"} 14")
            .replace("le=\"0.002\"} 50", "le=\"0.002\"} 100")
            .replace("le=\"0.005\"} 90", "le=\"0.005\"} 150")
            .replace("le=\"0.01\"} 100", "le=\"0.01\"} 164")
            .replace("le=\"+Inf\"} 100", "le=\"+Inf\"} 164");
        // Node b restarted: everything went down; its breaker closed.
        let restarted = TEST_TEXT
            .replace("status=\"200\"} 90", "status=\"200\"} 5")
            .replace("status=\"502\"} 10", "status=\"502\"} 0")
            .replace("le=\"0.002\"} 50", "le=\"0.002\"} 5")
            .replace("le=\"0.005\"} 90", "le=\"0.005\"} 5")
            .replace("le=\"0.01\"} 100", "le=\"0.01\"} 5")
            .replace("le=\"+Inf\"} 100", "le=\"+Inf\"} 5")
            .replace("plane=\"live\"} 1\n", "plane=\"live\"} 0\n");
        let closed = TEST_TEXT.replace(
            "portico_breaker_state{api=\"order.get\",plane=\"live\"} 1",
            "portico_breaker_state{api=\"order.get\",plane=\"live\"} 0",
        );
        let mut rec = Recorder::default();
        // The first sample only sets the base.
        let first = rec.step(
            &[sample(
                t0,
                60_000 * 10 + 1000,
                &[("a", &closed), ("b", TEST_TEXT)],
            )],
            Some(BTreeMap::new()),
            60_000 * 10,
        );
        assert!(first.is_empty());
        let mut switches = BTreeMap::new();
        switches.insert("order.get".to_owned(), true);
        let rollups = rec.step(
            &[sample(
                t0 + Duration::from_secs(2),
                60_000 * 10 + 3000,
                &[("a", &later), ("b", &restarted), ("c", TEST_TEXT)],
            )],
            Some(switches),
            60_000 * 10 + 3000,
        );
        assert_eq!(rollups.len(), 1);
        let r = &rollups[0];
        assert_eq!((r.api.as_str(), r.minute), ("order.get", 10));
        // a: +60 OK, +4 502; b restarted: 5 OK; c is new: nothing yet.
        assert_eq!(r.answers[&(200, "OK".to_owned())], 65);
        assert_eq!(r.answers[&(502, "UPSTREAM_ERROR".to_owned())], 4);
        // a: +50 in (1, 2] ms, +10 in (2, 5], +4 in (5, 10]; b: 5 in (1, 2].
        assert_eq!(r.latency, vec![(0.002, 55), (0.005, 10), (0.01, 4)]);
        // a's breaker went from closed to open: one opening; b's stayed or closed.
        assert_eq!(r.breaker_openings, 1);
        assert_eq!(r.switch_flips, 1);
        // Nothing new: nothing recorded.
        assert!(rec.step(&[], None, 0).is_empty());
    }
}
