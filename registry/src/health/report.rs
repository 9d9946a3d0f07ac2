//! The report of `GET /api/v1/health/apis`, computed from the monitor's samples: per plane
//! and API, summed over the nodes, QPS, availability (the share of answers that are not 5xx,
//! deliberately degraded answers left out and counted apart as `degraded`), TP50/90/99/999, calls in flight and each node's breaker state, with a short history for
//! charts; and the same totals over every API.

use super::prometheus::Key;
use super::quantiles::{between, round3, Figures, Quantiles};
use super::scraper::{Inner, NodeStatus, Sample};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

/// Which APIs' history (`series`) the report includes.
#[derive(Debug, Clone)]
pub enum SeriesFilter {
    /// Every API's.
    All,
    /// None.
    None,
    /// These API ids'.
    Only(BTreeSet<String>),
}

impl SeriesFilter {
    fn wants(&self, api: &str) -> bool {
        match self {
            SeriesFilter::All => true,
            SeriesFilter::None => false,
            SeriesFilter::Only(ids) => ids.contains(api),
        }
    }
}

/// One point of a series: the figures of one interval between two samples.
#[derive(Debug, Clone, Serialize)]
struct Point {
    /// Unix milliseconds at the end of the interval.
    t: u64,
    qps: f64,
    availability: Option<f64>,
    /// Deliberately degraded answers in the interval (not counted against availability).
    degraded: f64,
    #[serde(flatten)]
    latency_ms: Quantiles,
}

#[derive(Debug, Clone, Serialize)]
struct NodeBreaker {
    node_id: String,
    state: &'static str,
}

#[derive(Debug, Clone, Serialize)]
struct ApiHealth {
    plane: String,
    api: String,
    published: bool,
    qps: f64,
    requests: f64,
    errors_5xx: f64,
    /// Deliberately degraded answers (a switch that is on), counted apart from failures.
    degraded: f64,
    availability: Option<f64>,
    latency_ms: Quantiles,
    in_flight: f64,
    /// `closed`, `open`, `half_open`, or `unknown` without data; the worst over the nodes.
    breaker: &'static str,
    breaker_nodes: Vec<NodeBreaker>,
    #[serde(skip_serializing_if = "Option::is_none")]
    series: Option<Vec<Point>>,
}

fn breaker_name(v: i64) -> &'static str {
    match v {
        0 => "closed",
        1 => "open",
        2 => "half_open",
        _ => "unknown",
    }
}

/// Worse first: open, half-open, closed, unknown.
fn breaker_rank(s: &str) -> u8 {
    match s {
        "open" => 3,
        "half_open" => 2,
        "closed" => 1,
        _ => 0,
    }
}

/// Seconds between two samples (at least a millisecond).
fn seconds(old: &Sample, new: &Sample) -> f64 {
    new.at.duration_since(old.at).as_secs_f64().max(0.001)
}

/// The figures of each interval between consecutive samples: (end in Unix ms, figures by key,
/// seconds).
type Steps = Vec<(u64, HashMap<Key, Figures>, f64)>;

/// The oldest sample within `window` of the latest (at least the one before the latest).
fn window_start(samples: &VecDeque<Sample>, window: Duration) -> Option<&Sample> {
    let latest = samples.back()?;
    samples
        .iter()
        .find(|s| latest.at.duration_since(s.at) <= window + crate::cadence::interval() / 2)
        .filter(|s| !std::ptr::eq(*s, latest))
        .or_else(|| samples.iter().rev().nth(1))
}

/// Every key seen in the ring, plus the published APIs (live), in `plane`; never the
/// unrouted `-`.
fn keys(inner: &Inner, plane_ok: &dyn Fn(&str) -> bool) -> BTreeSet<Key> {
    let mut keys: BTreeSet<Key> = BTreeSet::new();
    for s in &inner.samples {
        for m in s.nodes.values() {
            keys.extend(m.requests.keys().cloned());
            keys.extend(m.breaker.keys().cloned());
        }
    }
    for id in &inner.published {
        keys.insert(("live".to_owned(), id.clone()));
    }
    keys.retain(|(p, a)| plane_ok(p) && a != "-");
    keys
}

/// A series: for each step, the figures `pick` takes from it.
fn points(steps: &Steps, pick: impl Fn(&HashMap<Key, Figures>) -> Figures) -> Vec<Point> {
    steps
        .iter()
        .map(|(t, figs, secs)| {
            let f = pick(figs);
            Point {
                t: *t,
                qps: round3(f.requests / secs),
                availability: f.availability(),
                degraded: f.degraded,
                latency_ms: f.quantiles_ms(),
            }
        })
        .collect()
}

/// One API's entry: its window figures, and its breakers and calls in flight at the latest
/// sample.
fn api_health(key: &Key, f: &Figures, secs: f64, inner: &Inner) -> ApiHealth {
    let mut breaker_nodes = Vec::new();
    let mut in_flight = 0.0;
    if let Some(latest) = inner.samples.back() {
        for (node, m) in &latest.nodes {
            if let Some(v) = m.breaker.get(key) {
                breaker_nodes.push(NodeBreaker {
                    node_id: node.clone(),
                    state: breaker_name(*v),
                });
            }
            in_flight += m.in_flight.get(key).copied().unwrap_or(0.0);
        }
    }
    let breaker = breaker_nodes
        .iter()
        .map(|b| b.state)
        .max_by_key(|s| breaker_rank(s))
        .unwrap_or("unknown");
    ApiHealth {
        plane: key.0.clone(),
        api: key.1.clone(),
        published: key.0 == "live" && inner.published.contains(&key.1),
        qps: round3(f.requests / secs),
        requests: f.requests,
        errors_5xx: f.errors,
        degraded: f.degraded,
        availability: f.availability(),
        latency_ms: f.quantiles_ms(),
        in_flight,
        breaker,
        breaker_nodes,
        series: None,
    }
}

/// Builds the report from the samples: figures over the last `window`, in `plane` (`None`:
/// all), with the history of the APIs `series` wants.
pub fn report(
    inner: &Inner,
    window: Duration,
    plane: Option<&str>,
    series: &SeriesFilter,
) -> Value {
    let samples = &inner.samples;
    let latest = samples.back();
    let plane_ok = |p: &str| plane.is_none_or(|want| want == p);
    let window_figures = window_start(samples, window)
        .zip(latest)
        .map(|(e, l)| (between(&e.nodes, &l.nodes), seconds(e, l)));
    let steps: Steps = samples
        .iter()
        .zip(samples.iter().skip(1))
        .map(|(a, b)| (b.unix_ms, between(&a.nodes, &b.nodes), seconds(a, b)))
        .collect();
    let mut total = Figures::default();
    let mut apis = Vec::new();
    for key in &keys(inner, &plane_ok) {
        let (f, secs) = match &window_figures {
            Some((figs, secs)) => (figs.get(key).cloned().unwrap_or_default(), *secs),
            None => (Figures::default(), 1.0),
        };
        total.add(&f);
        let mut api = api_health(key, &f, secs, inner);
        api.series = series
            .wants(&key.1)
            .then(|| points(&steps, |figs| figs.get(key).cloned().unwrap_or_default()));
        apis.push(api);
    }
    let total_series = points(&steps, |figs| {
        let mut sum = Figures::default();
        for (_, f) in figs.iter().filter(|(k, _)| plane_ok(&k.0) && k.1 != "-") {
            sum.add(f);
        }
        sum
    });
    let window_secs = window_figures.as_ref().map(|(_, s)| *s).unwrap_or(0.0);
    json!({
        "interval_ms": crate::cadence::interval().as_millis() as u64,
        "window_s": round3(window_secs),
        "samples": samples.len(),
        "warming_up": window_figures.is_none(),
        "sampled_at_ms": latest.map(|l| l.unix_ms),
        "error": inner.error,
        "nodes": node_views(inner),
        "totals": {
            "qps": round3(if window_secs > 0.0 { total.requests / window_secs } else { 0.0 }),
            "requests": total.requests,
            "errors_5xx": total.errors,
            "degraded": total.degraded,
            "availability": total.availability(),
            "latency_ms": total.quantiles_ms(),
            "series": total_series,
        },
        "apis": apis,
    })
}

/// The nodes' statuses, with how long ago each was last read.
fn node_views(inner: &Inner) -> Vec<NodeStatus> {
    inner
        .nodes
        .values()
        .map(|n| NodeStatus {
            last_ok_ms_ago: n.last_ok.map(|t| t.elapsed().as_millis() as u64),
            ..n.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::prometheus::{parse_metrics, TEST_TEXT as TEXT};
    use std::time::Instant;

    fn sample(secs: u64, nodes: &[(&str, &str)]) -> Sample {
        // One base instant for every sample, so the windows are exact.
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let base = *BASE.get_or_init(|| Instant::now() - Duration::from_secs(100));
        Sample {
            at: base + Duration::from_secs(secs),
            unix_ms: secs * 1000,
            nodes: nodes
                .iter()
                .map(|(n, t)| ((*n).to_owned(), parse_metrics(t)))
                .collect(),
        }
    }
    #[test]
    fn rates_sum_over_nodes_and_survive_restarts() {
        let later = TEXT
            .replace("status=\"200\"} 90", "status=\"200\"} 170")
            .replace("status=\"502\"} 10", "status=\"502\"} 30")
            .replace("le=\"0.002\"} 50", "le=\"0.002\"} 130")
            .replace("le=\"0.005\"} 90", "le=\"0.005\"} 190")
            .replace("le=\"0.01\"} 100", "le=\"0.01\"} 200")
            .replace("le=\"+Inf\"} 100", "le=\"+Inf\"} 200");
        // Node b restarted: its counters went down to a quarter.
        let restarted = TEXT
            .replace("status=\"200\"} 90", "status=\"200\"} 20")
            .replace("status=\"502\"} 10", "status=\"502\"} 0")
            .replace("le=\"0.002\"} 50", "le=\"0.002\"} 20")
            .replace("le=\"0.005\"} 90", "le=\"0.005\"} 20")
            .replace("le=\"0.01\"} 100", "le=\"0.01\"} 20")
            .replace("le=\"+Inf\"} 100", "le=\"+Inf\"} 20")
            .replace(
                "portico_breaker_state{api=\"order.get\",plane=\"live\"} 1",
                "portico_breaker_state{api=\"order.get\",plane=\"live\"} 0",
            );
        let inner = Inner {
            samples: [
                sample(0, &[("a", TEXT), ("b", TEXT)]),
                sample(10, &[("a", &later), ("b", &restarted)]),
            ]
            .into_iter()
            .collect(),
            published: ["order.get".to_owned(), "idle.api".to_owned()]
                .into_iter()
                .collect(),
            ..Inner::default()
        };
        let r = report(
            &inner,
            Duration::from_secs(10),
            Some("live"),
            &SeriesFilter::All,
        );
        assert_eq!(r["warming_up"], false);
        let apis = r["apis"].as_array().unwrap();
        let api = apis.iter().find(|a| a["api"] == "order.get").unwrap();
        // a: +100 requests (+20 5xx); b: restart, counts 20 (0 5xx) → 120 in 10 s.
        assert_eq!(api["requests"], 120.0);
        assert_eq!(api["errors_5xx"], 20.0);
        assert_eq!(api["qps"], 12.0);
        assert!((api["availability"].as_f64().unwrap() - 100.0 / 120.0).abs() < 1e-5);
        // Worst breaker over the nodes: a is open.
        assert_eq!(api["breaker"], "open");
        assert_eq!(api["breaker_nodes"].as_array().unwrap().len(), 2);
        assert_eq!(api["in_flight"], 4.0);
        assert!(api["latency_ms"]["p50"].as_f64().unwrap() > 1.0);
        assert_eq!(api["series"].as_array().unwrap().len(), 1);
        // The unrouted `-` is left out; an idle published API is listed with zero traffic.
        assert!(apis.iter().all(|a| a["api"] != "-"));
        let idle = apis.iter().find(|a| a["api"] == "idle.api").unwrap();
        assert_eq!(idle["qps"], 0.0);
        assert!(idle["availability"].is_null());
        assert_eq!(idle["breaker"], "unknown");
        assert_eq!(r["totals"]["requests"], 120.0);

        let none = report(
            &inner,
            Duration::from_secs(10),
            Some("live"),
            &SeriesFilter::None,
        );
        assert!(none["apis"][0].get("series").is_none());
    }

    #[test]
    fn degraded_answers_do_not_lower_availability() {
        // promo.list: +20 answers 503 API_DEGRADED, +5 fallbacks, +1 502 and +24 OK.
        let later = TEXT
            .replace("code=\"API_DEGRADED\",plane=\"live\",status=\"503\"} 6", "code=\"API_DEGRADED\",plane=\"live\",status=\"503\"} 26")
            .replace("code=\"DEGRADED_FALLBACK\",plane=\"live\",status=\"200\"} 4", "code=\"DEGRADED_FALLBACK\",plane=\"live\",status=\"200\"} 9")
            .replace("api=\"promo.list\",code=\"UPSTREAM_ERROR\",plane=\"live\",status=\"502\"} 1\n", "api=\"promo.list\",code=\"UPSTREAM_ERROR\",plane=\"live\",status=\"502\"} 2\n")
            + "portico_requests_total{api=\"promo.list\",code=\"OK\",plane=\"live\",status=\"200\"} 24\n";
        assert_ne!(later, TEXT);
        let inner = Inner {
            samples: [sample(0, &[("a", TEXT)]), sample(10, &[("a", &later)])]
                .into_iter()
                .collect(),
            ..Inner::default()
        };
        let r = report(
            &inner,
            Duration::from_secs(10),
            Some("live"),
            &SeriesFilter::All,
        );
        let apis = r["apis"].as_array().unwrap();
        let promo = apis.iter().find(|a| a["api"] == "promo.list").unwrap();
        assert_eq!(promo["requests"], 50.0);
        assert_eq!(promo["degraded"], 25.0);
        assert_eq!(promo["errors_5xx"], 1.0);
        // 1 failure in the 25 answers that were not degraded: 96 %, not 48 %.
        assert_eq!(promo["availability"], 0.96);
        assert_eq!(promo["series"][0]["degraded"], 25.0);
        assert_eq!(promo["series"][0]["availability"], 0.96);
        assert_eq!(r["totals"]["degraded"], 25.0, "{:#}", r["totals"]);
        assert_eq!(r["totals"]["availability"], 0.96);
    }

    #[test]
    fn one_sample_is_warming_up() {
        let inner = Inner {
            samples: [sample(0, &[("a", TEXT)])].into_iter().collect(),
            ..Inner::default()
        };
        let r = report(&inner, Duration::from_secs(10), None, &SeriesFilter::All);
        assert_eq!(r["warming_up"], true);
        assert_eq!(r["apis"][0]["breaker"], "open");
    }

    #[test]
    fn the_window_starts_at_the_oldest_sample_within_it() {
        let at = |secs, ok: u32| {
            let text = TEXT.replace("status=\"200\"} 90", &format!("status=\"200\"}} {ok}"));
            sample(secs, &[("a", &text)])
        };
        // Requests (200s plus the ten 502s): 100, 200, 300, 600.
        let inner = Inner {
            samples: [at(0, 90), at(5, 190), at(10, 290), at(15, 590)]
                .into_iter()
                .collect(),
            ..Inner::default()
        };
        let r = report(
            &inner,
            Duration::from_secs(5),
            Some("live"),
            &SeriesFilter::All,
        );
        assert_eq!(r["window_s"], 5.0);
        assert_eq!(r["apis"][0]["requests"], 300.0);
        assert_eq!(r["apis"][0]["qps"], 60.0);
        assert_eq!(r["apis"][0]["series"].as_array().unwrap().len(), 3);
        assert_eq!(r["totals"]["series"][0]["qps"], 20.0);
        let r = report(
            &inner,
            Duration::from_secs(60),
            Some("live"),
            &SeriesFilter::All,
        );
        assert_eq!(r["window_s"], 15.0);
        assert_eq!(r["apis"][0]["qps"], 33.333);
        // Another plane has nothing.
        let r = report(
            &inner,
            Duration::from_secs(5),
            Some("sandbox"),
            &SeriesFilter::All,
        );
        assert_eq!(r["apis"], json!([]));
        assert_eq!(r["totals"]["requests"], 0.0);
    }
}
