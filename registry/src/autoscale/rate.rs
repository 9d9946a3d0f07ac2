//! A cluster's request rate, from the gateways' metrics the health monitor scrapes
//! ([`crate::health::scraper`]): the sum, over the live APIs whose backend is the cluster and
//! over every gateway, of the `portico_requests_total` increase between the oldest sample within
//! the window and the newest, divided by the seconds between them (docs/OPERATIONS.md,
//! "Autoscale").

use crate::health::quantiles::between;
use crate::health::scraper::{Sample, INTERVAL};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

/// The plane whose traffic counts (sandbox calls never scale or wake a cluster).
pub const PLANE: &str = "live";

/// The oldest sample within `window` of the newest (at least the one before the newest), and
/// the newest; `None` with fewer than two samples.
pub fn window(samples: &VecDeque<Sample>, window: Duration) -> Option<(&Sample, &Sample)> {
    let latest = samples.back()?;
    let start = samples
        .iter()
        .find(|s| latest.at.duration_since(s.at) <= window + INTERVAL / 2)
        .filter(|s| !std::ptr::eq(*s, latest))
        .or_else(|| samples.iter().rev().nth(1))?;
    Some((start, latest))
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
    use std::time::Instant;

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
    fn the_window_starts_at_the_oldest_sample_within_it() {
        let t0 = Instant::now();
        let mut ring = VecDeque::new();
        assert!(window(&ring, Duration::from_secs(10)).is_none());
        for i in 0..10u32 {
            ring.push_back(sample(t0 + INTERVAL * i, &[]));
        }
        let (start, end) = window(&ring, Duration::from_secs(10)).unwrap();
        assert_eq!(end.at, t0 + INTERVAL * 9);
        assert_eq!(end.at.duration_since(start.at), Duration::from_secs(10));
    }
}
