//! A cluster's request rate, from the gateways' metrics the health monitor scrapes
//! ([`crate::health::scraper`]): the sum, over the live APIs whose backend is the cluster and
//! over every gateway, of the `portico_requests_total` increase between the oldest sample within
//! the window and the newest, divided by the seconds between them (docs/operations/clusters.md,
//! "Autoscale").

use crate::health::quantiles::between;
use crate::health::scraper::Sample;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The plane whose traffic counts (sandbox calls never scale or wake a cluster).
pub const PLANE: &str = "live";

/// The oldest sample within `window` of the newest (at least the one before the newest; samples
/// are `interval` apart, so half of one is tolerated), and the newest; `None` with fewer than
/// two samples.
pub fn window(
    samples: &VecDeque<Sample>,
    window: Duration,
    interval: Duration,
) -> Option<(&Sample, &Sample)> {
    let latest = samples.back()?;
    let start = samples
        .iter()
        .find(|s| latest.at.duration_since(s.at) <= window + interval / 2)
        .filter(|s| !std::ptr::eq(*s, latest))
        .or_else(|| samples.iter().rev().nth(1))?;
    Some((start, latest))
}

/// Where to count a cluster's recent traffic from (for sleep marking): the older of the sample
/// `back` scrapes before the newest and the newest sample the previous evaluation read
/// (`last_read`; the oldest kept if the ring has dropped it). Evaluations and scrapes run apart,
/// and an evaluation may run late: counting from what the previous one read leaves no scrape
/// uncounted between two evaluations. `None` without samples.
pub fn recent_start(
    samples: &VecDeque<Sample>,
    last_read: Option<Instant>,
    back: usize,
) -> Option<&Sample> {
    let back = samples.iter().rev().nth(back).or_else(|| samples.front())?;
    let read = last_read.and_then(|at| samples.iter().find(|s| s.at >= at));
    Some(match read {
        Some(r) if r.at < back.at => r,
        _ => back,
    })
}

/// Requests per second by cluster between two samples, over the live APIs of `api_cluster`
/// (API id → cluster name). Every cluster named in `api_cluster` is present (0 when idle).
pub fn cluster_rates(
    old: &Sample,
    new: &Sample,
    api_cluster: &HashMap<String, String>,
) -> BTreeMap<String, f64> {
    let seconds = new.at.duration_since(old.at).as_secs_f64().max(0.001);
    let mut out: BTreeMap<String, f64> = api_cluster.values().map(|c| (c.clone(), 0.0)).collect();
    for ((plane, api), figures) in between(&old.nodes, &new.nodes) {
        if plane != PLANE {
            continue;
        }
        if let Some(cluster) = api_cluster.get(&api) {
            *out.entry(cluster.clone()).or_default() += figures.requests / seconds;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::prometheus::parse_metrics;
    use crate::health::scraper::INTERVAL;

    fn sample(at: Instant, nodes: &[(&str, &str)]) -> Sample {
        Sample {
            at,
            unix_ms: 0,
            nodes: nodes
                .iter()
                .map(|(id, text)| (id.to_string(), parse_metrics(text)))
                .collect(),
        }
    }

    fn counter(plane: &str, api: &str, n: u32) -> String {
        format!(
            "portico_requests_total{{api=\"{api}\",code=\"OK\",plane=\"{plane}\",status=\"200\"}} {n}\n"
        )
    }

    #[test]
    fn rate_sums_the_cluster_apis_over_gateways_live_only() {
        let t0 = Instant::now();
        let old_a = counter("live", "a.get", 100) + &counter("live", "b.get", 0);
        let old_b = counter("live", "a.get", 10) + &counter("sandbox", "a.get", 0);
        let new_a = counter("live", "a.get", 300) + &counter("live", "b.get", 50);
        let new_b = counter("live", "a.get", 110) + &counter("sandbox", "a.get", 1000);
        let old = sample(t0, &[("gw1", &old_a), ("gw2", &old_b)]);
        let new = sample(
            t0 + Duration::from_secs(10),
            &[("gw1", &new_a), ("gw2", &new_b)],
        );
        let map: HashMap<String, String> = [
            ("a.get".to_owned(), "orders".to_owned()),
            ("b.get".to_owned(), "billing".to_owned()),
            ("c.get".to_owned(), "idle".to_owned()),
        ]
        .into();
        let rates = cluster_rates(&old, &new, &map);
        // (200 + 100) / 10 s on orders; sandbox traffic is ignored.
        assert!((rates["orders"] - 30.0).abs() < 1e-9, "{rates:?}");
        assert!((rates["billing"] - 5.0).abs() < 1e-9);
        assert_eq!(rates["idle"], 0.0);
    }

    #[test]
    fn recent_traffic_counts_from_what_the_previous_evaluation_read() {
        let t0 = Instant::now();
        let at = |i: u32| t0 + INTERVAL * i;
        let mut ring: VecDeque<Sample> = VecDeque::new();
        assert!(recent_start(&ring, None, 2).is_none());
        ring.push_back(sample(at(0), &[]));
        assert_eq!(
            recent_start(&ring, None, 2).unwrap().at,
            at(0),
            "the oldest kept"
        );
        ring.extend((1..10).map(|i| sample(at(i), &[])));
        // On time: two scrapes back covers what the previous evaluation read.
        assert_eq!(recent_start(&ring, None, 2).unwrap().at, at(7));
        assert_eq!(recent_start(&ring, Some(at(8)), 2).unwrap().at, at(7));
        // Late: five scrapes since the previous evaluation read at(4).
        assert_eq!(recent_start(&ring, Some(at(4)), 2).unwrap().at, at(4));
        // What it read is gone from the ring: from the oldest kept.
        ring.pop_front();
        ring.pop_front();
        assert_eq!(
            recent_start(&ring, Some(at(1)), 2).unwrap().at,
            at(2),
            "the oldest kept"
        );
    }

    #[test]
    fn the_window_starts_at_the_oldest_sample_within_it() {
        let t0 = Instant::now();
        let mut ring = VecDeque::new();
        assert!(window(&ring, Duration::from_secs(10), INTERVAL).is_none());
        for i in 0..10u32 {
            ring.push_back(sample(t0 + INTERVAL * i, &[]));
        }
        let (start, end) = window(&ring, Duration::from_secs(10), INTERVAL).unwrap();
        assert_eq!(end.at, t0 + INTERVAL * 9);
        assert_eq!(end.at.duration_since(start.at), Duration::from_secs(10));

        // At a shorter cadence the window holds as many scrapes.
        let short = Duration::from_millis(250);
        let ring: VecDeque<Sample> = (0..10u32).map(|i| sample(t0 + short * i, &[])).collect();
        let (start, end) = window(&ring, Duration::from_millis(1250), short).unwrap();
        assert_eq!(end.at.duration_since(start.at), Duration::from_millis(1250));
    }
}
