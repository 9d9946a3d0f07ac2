//! The arithmetic of the health report: counter deltas between two scrapes (a counter that
//! went down — the node restarted — counts from zero, as Prometheus' `rate()` does), latency
//! histogram deltas, and quantiles from a histogram as Prometheus' `histogram_quantile` computes
//! them (linear interpolation inside the bucket that holds the rank).

use super::prometheus::{Key, NodeMetrics};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// `new - old` for a counter; a reset (new < old) counts from zero.
pub fn counter_delta(new: f64, old: Option<f64>) -> f64 {
    match old {
        Some(old) if new >= old => new - old,
        _ => new,
    }
}

/// The `q` quantile (0..1) of a cumulative histogram `(le, count)` sorted by `le`, in the
/// unit of `le`; `None` without observations. As `histogram_quantile`: the bucket holding the
/// rank is found and the value interpolated linearly inside it (from 0 for the first bucket);
/// a rank in the `+Inf` bucket answers the largest finite bound.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 || !q.is_finite() {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total;
    let mut prev_le = 0.0;
    let mut prev_count = 0.0;
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(prev_le);
            }
            let in_bucket = count - prev_count;
            if in_bucket <= 0.0 {
                return Some(le);
            }
            return Some(prev_le + (le - prev_le) * ((rank - prev_count) / in_bucket));
        }
        prev_le = if le.is_finite() { le } else { prev_le };
        prev_count = count;
    }
    Some(prev_le)
}

/// A histogram being summed: bucket `(le, count)` by the bits of `le`.
pub type Buckets = BTreeMap<u64, (f64, f64)>;

/// Adds the delta of histogram `new` over `old` into `acc` (by `le`).
pub fn add_bucket_deltas(acc: &mut Buckets, new: &[(f64, f64)], old: Option<&[(f64, f64)]>) {
    // A reset of any bucket means the node restarted: take the new histogram whole.
    let reset = old.is_some_and(|old| {
        new.iter()
            .any(|(le, c)| old.iter().any(|(ole, oc)| ole == le && c < oc))
    });
    for &(le, count) in new {
        let before = if reset {
            None
        } else {
            old.and_then(|o| o.iter().find(|(ole, _)| *ole == le).map(|(_, c)| *c))
        };
        let e = acc.entry(le.to_bits()).or_insert((le, 0.0));
        e.1 += counter_delta(count, before);
    }
}

/// The latency quantiles of a report, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Quantiles {
    /// TP50.
    pub p50: Option<f64>,
    /// TP90.
    pub p90: Option<f64>,
    /// TP99.
    pub p99: Option<f64>,
    /// TP99.9.
    pub p999: Option<f64>,
}

/// Figures of one key over one interval, summed over the nodes.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Requests answered.
    pub requests: f64,
    /// Of which 5xx failures (degraded answers excluded).
    pub errors: f64,
    /// Of which degraded answers (a switch that is on: 503 `API_DEGRADED` or its fallback).
    pub degraded: f64,
    /// The latency histogram's deltas.
    pub buckets: Buckets,
}

impl Figures {
    /// Adds `other` (another key's or another interval's figures) into these.
    pub fn add(&mut self, other: &Figures) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.degraded += other.degraded;
        for (bits, (le, c)) in &other.buckets {
            self.buckets.entry(*bits).or_insert((*le, 0.0)).1 += c;
        }
    }

    /// TP50/90/99/999 in milliseconds (rounded to the microsecond).
    pub fn quantiles_ms(&self) -> Quantiles {
        let mut b: Vec<(f64, f64)> = self.buckets.values().copied().collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        let q = |p| histogram_quantile(p, &b).map(|s| round3(s * 1000.0));
        Quantiles {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
        }
    }

    /// The share of answers that are not 5xx failures, over the answers that were not
    /// deliberately degraded; `None` without such answers (docs/operations/history-and-reports.md, "Availability
    /// and degraded answers").
    pub fn availability(&self) -> Option<f64> {
        let served = self.requests - self.degraded;
        (served > 0.0).then(|| round6(1.0 - self.errors / served))
    }
}

/// Rounded to 3 decimals.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round6(x: f64) -> f64 {
    (x * 1_000_000.0).round() / 1_000_000.0
}

/// Figures per key between two scrapes of the nodes (node id → metrics). A node missing from
/// the older scrape (new, or its scrape failed then) has no interval yet and counts nothing.
pub fn between(
    old: &BTreeMap<String, NodeMetrics>,
    new: &BTreeMap<String, NodeMetrics>,
) -> HashMap<Key, Figures> {
    let mut out: HashMap<Key, Figures> = HashMap::new();
    for (node, m) in new {
        let Some(prev) = old.get(node) else {
            continue;
        };
        for (k, &(total, errors, degraded)) in &m.requests {
            let before = prev.requests.get(k);
            let f = out.entry(k.clone()).or_default();
            let reset = before.is_some_and(|b| total < b.0);
            f.requests += counter_delta(total, before.filter(|_| !reset).map(|b| b.0));
            f.errors += counter_delta(errors, before.filter(|_| !reset).map(|b| b.1));
            f.degraded += counter_delta(degraded, before.filter(|_| !reset).map(|b| b.2));
        }
        for (k, b) in &m.buckets {
            let before = prev.buckets.get(k).map(Vec::as_slice);
            add_bucket_deltas(&mut out.entry(k.clone()).or_default().buckets, b, before);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_like_prometheus() {
        let b = [
            (0.001, 0.0),
            (0.002, 50.0),
            (0.005, 90.0),
            (0.01, 100.0),
            (f64::INFINITY, 100.0),
        ];
        // Rank 50 is the top of the (1ms, 2ms] bucket.
        assert!((histogram_quantile(0.5, &b).unwrap() - 0.002).abs() < 1e-12);
        // Rank 90 → 5 ms; rank 99 → 5 + 5 * 9/10 ms.
        assert!((histogram_quantile(0.9, &b).unwrap() - 0.005).abs() < 1e-12);
        assert!((histogram_quantile(0.99, &b).unwrap() - 0.0095).abs() < 1e-12);
        // Rank in +Inf → the largest finite bound.
        let tail = [(0.1, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(histogram_quantile(0.99, &tail), Some(0.1));
        assert_eq!(
            histogram_quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 0.0)]),
            None
        );
        assert_eq!(histogram_quantile(0.5, &[]), None);
    }

    #[test]
    fn counters_that_go_down_count_from_zero() {
        assert_eq!(counter_delta(10.0, Some(4.0)), 6.0);
        assert_eq!(counter_delta(3.0, Some(4.0)), 3.0);
        assert_eq!(counter_delta(3.0, None), 3.0);
        // One bucket going down resets the whole histogram.
        let mut acc = Buckets::new();
        add_bucket_deltas(
            &mut acc,
            &[(0.1, 5.0), (1.0, 9.0)],
            Some(&[(0.1, 2.0), (1.0, 3.0)]),
        );
        add_bucket_deltas(
            &mut acc,
            &[(0.1, 1.0), (1.0, 4.0)],
            Some(&[(0.1, 2.0), (1.0, 3.0)]),
        );
        let counts: Vec<f64> = acc.values().map(|(_, c)| *c).collect();
        assert_eq!(counts, [3.0 + 1.0, 6.0 + 4.0]);
    }

    #[test]
    fn figures_add_up_and_give_availability() {
        let mut a = Figures {
            requests: 8.0,
            errors: 2.0,
            ..Figures::default()
        };
        assert_eq!(a.availability(), Some(0.75));
        a.add(&Figures {
            requests: 2.0,
            ..Figures::default()
        });
        assert_eq!(a.availability(), Some(0.8));
        // Ten deliberately degraded answers more: availability unchanged, counted apart.
        a.add(&Figures {
            requests: 10.0,
            degraded: 10.0,
            ..Figures::default()
        });
        assert_eq!((a.availability(), a.degraded), (Some(0.8), 10.0));
        let only_degraded = Figures {
            requests: 3.0,
            degraded: 3.0,
            ..Figures::default()
        };
        assert_eq!(only_degraded.availability(), None);
        assert_eq!(Figures::default().availability(), None);
        assert_eq!(Figures::default().quantiles_ms(), Quantiles::default());
    }
}
