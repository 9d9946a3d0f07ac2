//! Per-API health, aggregated from the live gateways: `GET /api/v1/health/apis`.
//!
//! A background task (one per registry, started by the first request and stopped after two
//! idle minutes, so a registry nobody watches scrapes nothing) reads the live nodes from
//! ZooKeeper (`<root>/nodes/*`, each with its `admin_addr`), scrapes every node's
//! `http://<admin_addr>/metrics` every [`INTERVAL`] and keeps a short ring of samples. From the
//! counter deltas between samples it computes, per plane and API and summed over the nodes:
//! QPS, availability (the share of answers that are not 5xx), TP50/90/99/999 from the latency
//! histogram's bucket deltas (as Prometheus' `histogram_quantile` does: linear interpolation
//! inside the bucket that holds the rank), calls in flight, and each node's breaker state.
//!
//! A counter that went down between two samples (the node restarted) counts from zero, as
//! Prometheus' `rate()` does.

use crate::api::reply::json_response;
use crate::error::ApiResult;
use crate::route::Route;
use crate::state::{AppState, Shared};
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use portico_control::zk::NodeInfo;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often the gateways are scraped.
pub const INTERVAL: Duration = Duration::from_secs(2);
/// Samples kept (3 minutes at [`INTERVAL`]).
pub const RING: usize = 90;
/// A monitor nobody asked for this long stops.
pub const IDLE_STOP: Duration = Duration::from_secs(120);
/// Deadline of one scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(1500);
/// Default window of the summary figures.
const DEFAULT_WINDOW_S: u64 = 10;

pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/health/apis",
        "ops",
        "Per-API health aggregated from the live gateways' /metrics (scraped every 2 s while \
         someone asks): QPS, TP50/90/99/999, availability (non-5xx share), calls in flight and \
         each node's breaker state, with a short history for charts",
        get(apis_health),
    )
    .query(
        "window",
        "seconds the summary figures cover (default 10, 2 to 180)",
    )
    .query("plane", "live (default), sandbox or all")
    .query(
        "series",
        "comma-separated API ids whose history to include; `*` (default) all, `none` none",
    )]
}

// ---- Prometheus text ----------------------------------------------------------------------

/// One sample line of the text exposition format.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Line {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Parses one line (`name{a="x",b="y"} 1.5 [timestamp]`); `None` for comments, blanks and
/// anything malformed.
fn parse_line(line: &str) -> Option<Line> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        loop {
            // Skip separators.
            while let Some((_, c)) = chars.peek() {
                if *c == ',' || c.is_whitespace() {
                    chars.next();
                } else {
                    break;
                }
            }
            let (start, c) = chars.next()?;
            if c == '}' {
                rest = &after[start + 1..];
                break;
            }
            let mut key = String::from(c);
            loop {
                let (_, c) = chars.next()?;
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next()?.1 != '"' {
                return None;
            }
            let mut value = String::new();
            loop {
                let (_, c) = chars.next()?;
                match c {
                    '"' => break,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    other => value.push(other),
                }
            }
            labels.push((key.trim().to_owned(), value));
        }
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Line {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// (plane, api).
type Key = (String, String);

/// What one scrape of one node says about the APIs.
#[derive(Debug, Clone, Default, PartialEq)]
struct NodeMetrics {
    /// Requests by key: (all, 5xx).
    requests: HashMap<Key, (f64, f64)>,
    /// Latency histogram by key: cumulative (le, count), sorted by le.
    buckets: HashMap<Key, Vec<(f64, f64)>>,
    /// Breaker gauge by key: 0 closed, 1 open, 2 half-open.
    breaker: HashMap<Key, i64>,
    in_flight: HashMap<Key, f64>,
    /// Applied config generation by plane.
    generation: HashMap<String, i64>,
}

fn parse_metrics(text: &str) -> NodeMetrics {
    let mut m = NodeMetrics::default();
    for line in text.lines().filter_map(parse_line) {
        let key = || -> Option<Key> {
            Some((
                line.label("plane")?.to_owned(),
                line.label("api")?.to_owned(),
            ))
        };
        match line.name.as_str() {
            "portico_requests_total" => {
                let Some(k) = key() else { continue };
                let five = line.label("status").is_some_and(|s| s.starts_with('5'));
                let e = m.requests.entry(k).or_default();
                e.0 += line.value;
                if five {
                    e.1 += line.value;
                }
            }
            "portico_request_duration_seconds_bucket" => {
                let Some(k) = key() else { continue };
                let Some(le) = line.label("le").and_then(parse_value) else {
                    continue;
                };
                m.buckets.entry(k).or_default().push((le, line.value));
            }
            "portico_breaker_state" => {
                let Some(k) = key() else { continue };
                m.breaker.insert(k, line.value as i64);
            }
            "portico_bulkhead_in_flight" => {
                let Some(k) = key() else { continue };
                m.in_flight.insert(k, line.value);
            }
            "portico_config_generation" => {
                if let Some(plane) = line.label("plane") {
                    m.generation.insert(plane.to_owned(), line.value as i64);
                }
            }
            _ => {}
        }
    }
    for b in m.buckets.values_mut() {
        b.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    m
}

// ---- the arithmetic -------------------------------------------------------------------------

/// `new - old` for a counter; a reset (new < old) counts from zero.
fn counter_delta(new: f64, old: Option<f64>) -> f64 {
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

/// Adds the delta of histogram `new` over `old` into `acc` (by `le`).
fn add_bucket_deltas(
    acc: &mut BTreeMap<u64, (f64, f64)>,
    new: &[(f64, f64)],
    old: Option<&[(f64, f64)]>,
) {
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

/// Figures of one key over one interval, summed over the nodes.
#[derive(Debug, Clone, Default)]
struct Figures {
    requests: f64,
    errors: f64,
    buckets: BTreeMap<u64, (f64, f64)>,
}

impl Figures {
    fn quantiles_ms(&self) -> Quantiles {
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

    fn availability(&self) -> Option<f64> {
        (self.requests > 0.0).then(|| round6(1.0 - self.errors / self.requests))
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round6(x: f64) -> f64 {
    (x * 1_000_000.0).round() / 1_000_000.0
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Quantiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
}

/// One scrape round: every node's metrics (nodes that failed are absent).
#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    unix_ms: u64,
    nodes: BTreeMap<String, NodeMetrics>,
}

/// Figures per key between two samples.
fn between(old: &Sample, new: &Sample) -> HashMap<Key, Figures> {
    let mut out: HashMap<Key, Figures> = HashMap::new();
    for (node, m) in &new.nodes {
        // A node not in the older sample (new, or its scrape failed then) has no interval yet.
        let Some(prev) = old.nodes.get(node) else {
            continue;
        };
        let prev = Some(prev);
        for (k, &(total, errors)) in &m.requests {
            let before = prev.and_then(|p| p.requests.get(k));
            let f = out.entry(k.clone()).or_default();
            let reset = before.is_some_and(|b| total < b.0);
            f.requests += counter_delta(total, before.filter(|_| !reset).map(|b| b.0));
            f.errors += counter_delta(errors, before.filter(|_| !reset).map(|b| b.1));
        }
        for (k, b) in &m.buckets {
            let before = prev.and_then(|p| p.buckets.get(k)).map(Vec::as_slice);
            add_bucket_deltas(&mut out.entry(k.clone()).or_default().buckets, b, before);
        }
    }
    out
}

fn seconds(old: &Sample, new: &Sample) -> f64 {
    new.at.duration_since(old.at).as_secs_f64().max(0.001)
}

// ---- the monitor ---------------------------------------------------------------------------

/// How the last scrape of a node went.
#[derive(Debug, Clone, Serialize)]
struct NodeStatus {
    node_id: String,
    admin_addr: String,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Milliseconds since the node's metrics were last read, if ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_ok_ms_ago: Option<u64>,
    #[serde(skip)]
    last_ok: Option<Instant>,
    /// Applied config generation by plane, from the node's metrics.
    generation: BTreeMap<String, i64>,
}

#[derive(Default)]
struct Inner {
    samples: VecDeque<Sample>,
    nodes: BTreeMap<String, NodeStatus>,
    /// The last problem listing the nodes (ZooKeeper unreachable, say).
    error: Option<String>,
    /// Published API ids (shown with zero traffic when idle).
    published: BTreeSet<String>,
}

struct Monitor {
    state: Weak<AppState>,
    inner: Mutex<Inner>,
    last_asked: Mutex<Instant>,
    started: Instant,
    rounds: AtomicU64,
}

/// The running monitors, by the address of their registry's state.
static MONITORS: Mutex<Vec<(usize, Arc<Monitor>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The monitor of `state`, started if none runs.
fn monitor(state: &Shared) -> Arc<Monitor> {
    let key = Arc::as_ptr(state) as usize;
    let mut all = lock(&MONITORS);
    if let Some((_, m)) = all.iter().find(|(k, _)| *k == key) {
        *lock(&m.last_asked) = Instant::now();
        return m.clone();
    }
    let m = Arc::new(Monitor {
        state: Arc::downgrade(state),
        inner: Mutex::new(Inner::default()),
        last_asked: Mutex::new(Instant::now()),
        started: Instant::now(),
        rounds: AtomicU64::new(0),
    });
    all.push((key, m.clone()));
    tokio::spawn(run(m.clone(), key));
    m
}

async fn run(m: Arc<Monitor>, key: usize) {
    let client = match reqwest::Client::builder()
        .timeout(SCRAPE_TIMEOUT)
        .no_proxy()
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "health monitor: no HTTP client");
            lock(&MONITORS).retain(|(k, _)| *k != key);
            return;
        }
    };
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let idle = lock(&m.last_asked).elapsed() > IDLE_STOP;
        let Some(state) = m.state.upgrade().filter(|_| !idle) else {
            lock(&MONITORS).retain(|(k, _)| *k != key);
            tracing::debug!("health monitor stopped (idle)");
            return;
        };
        round(&m, &state, &client).await;
        drop(state);
    }
}

/// One scrape of every live node.
async fn round(m: &Monitor, state: &AppState, client: &reqwest::Client) {
    let docs = match state.store.list_docs("nodes").await {
        Ok(d) => d,
        Err(e) => {
            lock(&m.inner).error = Some(format!("cannot list the gateway nodes: {}", e.message));
            return;
        }
    };
    let published: BTreeSet<String> = state
        .store
        .list("apis")
        .await
        .map(|v| v.into_iter().collect())
        .unwrap_or_default();
    let infos: Vec<NodeInfo> = docs
        .iter()
        .filter_map(|(_, d)| serde_json::from_slice::<NodeInfo>(&d.data).ok())
        .collect();
    let scrapes = futures::future::join_all(infos.iter().map(|info| async move {
        let url = format!("http://{}/metrics", info.admin_addr);
        let result = async {
            let resp = client.get(&url).send().await.map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("{url} answered {}", resp.status()));
            }
            resp.text().await.map_err(|e| e.to_string())
        }
        .await;
        (info, result)
    }))
    .await;
    let now = Instant::now();
    let mut sample = Sample {
        at: now,
        unix_ms: portico_control::clock::now_ms(),
        nodes: BTreeMap::new(),
    };
    let mut inner = lock(&m.inner);
    let mut statuses = BTreeMap::new();
    for (info, result) in scrapes {
        let previous = inner.nodes.get(&info.node_id);
        let mut status = NodeStatus {
            node_id: info.node_id.clone(),
            admin_addr: info.admin_addr.clone(),
            ok: false,
            error: None,
            last_ok_ms_ago: None,
            last_ok: previous.and_then(|p| p.last_ok),
            generation: previous.map(|p| p.generation.clone()).unwrap_or_default(),
        };
        match result {
            Ok(text) => {
                let metrics = parse_metrics(&text);
                status.ok = true;
                status.last_ok = Some(now);
                status.generation = metrics
                    .generation
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect();
                sample.nodes.insert(info.node_id.clone(), metrics);
            }
            Err(e) => status.error = Some(format!("scraping {}: {e}", info.admin_addr)),
        }
        statuses.insert(info.node_id.clone(), status);
    }
    inner.nodes = statuses;
    inner.error = None;
    inner.published = published;
    inner.samples.push_back(sample);
    while inner.samples.len() > RING {
        inner.samples.pop_front();
    }
    m.rounds.fetch_add(1, Ordering::Relaxed);
}

// ---- the report ----------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
struct Point {
    /// Unix milliseconds at the end of the interval.
    t: u64,
    qps: f64,
    availability: Option<f64>,
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

#[derive(Debug, Clone)]
enum SeriesFilter {
    All,
    None,
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

/// Builds the report from the samples.
fn report(
    inner: &Inner,
    window: Duration,
    plane: Option<&str>,
    series: &SeriesFilter,
) -> serde_json::Value {
    let samples = &inner.samples;
    let latest = samples.back();
    // The oldest sample within the window (at least the one before the latest).
    let earliest = latest.and_then(|l| {
        samples
            .iter()
            .find(|s| l.at.duration_since(s.at) <= window + INTERVAL / 2)
            .filter(|s| !std::ptr::eq(*s, l))
            .or_else(|| samples.iter().rev().nth(1))
    });
    let plane_ok = |p: &str| plane.is_none_or(|want| want == p);

    // Every key seen in the ring, plus the published APIs.
    let mut keys: BTreeSet<Key> = BTreeSet::new();
    for s in samples {
        for m in s.nodes.values() {
            keys.extend(m.requests.keys().cloned());
            keys.extend(m.breaker.keys().cloned());
        }
    }
    for id in &inner.published {
        keys.insert(("live".to_owned(), id.clone()));
    }
    keys.retain(|(p, a)| plane_ok(p) && a != "-");

    let window_figures = match (earliest, latest) {
        (Some(e), Some(l)) => Some((between(e, l), seconds(e, l))),
        _ => None,
    };
    // Per-interval figures for the series (and the totals).
    let steps: Vec<(u64, HashMap<Key, Figures>, f64)> = samples
        .iter()
        .zip(samples.iter().skip(1))
        .map(|(a, b)| (b.unix_ms, between(a, b), seconds(a, b)))
        .collect();

    let mut apis = Vec::new();
    let mut total = Figures::default();
    for key in &keys {
        let (f, secs) = match &window_figures {
            Some((figs, secs)) => (figs.get(key).cloned().unwrap_or_default(), *secs),
            None => (Figures::default(), 1.0),
        };
        if plane_ok(&key.0) {
            total.requests += f.requests;
            total.errors += f.errors;
            for (bits, (le, c)) in &f.buckets {
                total.buckets.entry(*bits).or_insert((*le, 0.0)).1 += c;
            }
        }
        let mut breaker_nodes = Vec::new();
        let mut in_flight = 0.0;
        if let Some(l) = latest {
            for (node, m) in &l.nodes {
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
        let points = series.wants(&key.1).then(|| {
            steps
                .iter()
                .map(|(t, figs, secs)| {
                    let f = figs.get(key).cloned().unwrap_or_default();
                    Point {
                        t: *t,
                        qps: round3(f.requests / secs),
                        availability: f.availability(),
                        latency_ms: f.quantiles_ms(),
                    }
                })
                .collect()
        });
        apis.push(ApiHealth {
            plane: key.0.clone(),
            api: key.1.clone(),
            published: key.0 == "live" && inner.published.contains(&key.1),
            qps: round3(f.requests / secs),
            requests: f.requests,
            errors_5xx: f.errors,
            availability: f.availability(),
            latency_ms: f.quantiles_ms(),
            in_flight,
            breaker,
            breaker_nodes,
            series: points,
        });
    }
    let total_series: Vec<Point> = steps
        .iter()
        .map(|(t, figs, secs)| {
            let mut f = Figures::default();
            for (k, v) in figs {
                if plane_ok(&k.0) && k.1 != "-" {
                    f.requests += v.requests;
                    f.errors += v.errors;
                    for (bits, (le, c)) in &v.buckets {
                        f.buckets.entry(*bits).or_insert((*le, 0.0)).1 += c;
                    }
                }
            }
            Point {
                t: *t,
                qps: round3(f.requests / secs),
                availability: f.availability(),
                latency_ms: f.quantiles_ms(),
            }
        })
        .collect();
    let window_secs = window_figures.as_ref().map(|(_, s)| *s).unwrap_or(0.0);
    let nodes: Vec<NodeStatus> = inner
        .nodes
        .values()
        .map(|n| NodeStatus {
            last_ok_ms_ago: n.last_ok.map(|t| t.elapsed().as_millis() as u64),
            ..n.clone()
        })
        .collect();
    json!({
        "interval_ms": INTERVAL.as_millis() as u64,
        "window_s": round3(window_secs),
        "samples": samples.len(),
        "warming_up": window_figures.is_none(),
        "sampled_at_ms": latest.map(|l| l.unix_ms),
        "error": inner.error,
        "nodes": nodes,
        "totals": {
            "qps": round3(if window_secs > 0.0 { total.requests / window_secs } else { 0.0 }),
            "requests": total.requests,
            "errors_5xx": total.errors,
            "availability": total.availability(),
            "latency_ms": total.quantiles_ms(),
            "series": total_series,
        },
        "apis": apis,
    })
}

async fn apis_health(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let window = match q.get("window") {
        Some(w) => w
            .parse::<u64>()
            .map_err(|_| {
                crate::error::ApiError::bad_request(format!(
                    "window: {w:?} is not a number of seconds"
                ))
            })?
            .clamp(2, 180),
        None => DEFAULT_WINDOW_S,
    };
    let plane = match q.get("plane").map(String::as_str) {
        None | Some("live") => Some("live"),
        Some("sandbox") => Some("sandbox"),
        Some("all") => None,
        Some(other) => {
            return Err(crate::error::ApiError::bad_request(format!(
                "plane: {other:?} is not live, sandbox or all"
            )))
        }
    };
    let series = match q.get("series").map(String::as_str) {
        None | Some("*") | Some("all") => SeriesFilter::All,
        Some("none") | Some("") => SeriesFilter::None,
        Some(list) => SeriesFilter::Only(
            list.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
    };
    let m = monitor(&state);
    // A fresh monitor: take the first sample now rather than answer with nothing.
    if m.rounds.load(Ordering::Relaxed) == 0 && m.started.elapsed() < INTERVAL {
        let deadline = Instant::now() + SCRAPE_TIMEOUT + Duration::from_millis(500);
        while m.rounds.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    let body = report(&lock(&m.inner), Duration::from_secs(window), plane, &series);
    Ok(json_response(StatusCode::OK, &body, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP portico_requests_total Requests by plane, API, status and code
# TYPE portico_requests_total counter
portico_requests_total{api="order.get",code="OK",plane="live",status="200"} 90
portico_requests_total{api="order.get",code="UPSTREAM_ERROR",plane="live",status="502"} 10
portico_requests_total{api="-",code="API_NOT_FOUND",plane="live",status="404"} 3
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.001"} 0
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.002"} 50
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.005"} 90
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.01"} 100
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="+Inf"} 100
portico_request_duration_seconds_sum{api="order.get",plane="live"} 0.3
portico_breaker_state{api="order.get",plane="live"} 1
portico_bulkhead_in_flight{api="order.get",plane="live"} 2
portico_config_generation{plane="live"} 42
"#;

    #[test]
    fn parses_the_text_format() {
        let l = parse_line(r#"a_b{x="1",y="q\"uo\\te"} 2.5 1700000000"#).unwrap();
        assert_eq!(l.name, "a_b");
        assert_eq!(l.label("y"), Some("q\"uo\\te"));
        assert_eq!(l.value, 2.5);
        assert_eq!(parse_line("up 1").unwrap().value, 1.0);
        assert!(parse_line("# HELP x").is_none());
        assert!(parse_line("broken{x=\"1\" 2").is_none());
        let m = parse_metrics(TEXT);
        let k = ("live".to_owned(), "order.get".to_owned());
        assert_eq!(m.requests[&k], (100.0, 10.0));
        assert_eq!(m.buckets[&k].len(), 5);
        assert_eq!(m.breaker[&k], 1);
        assert_eq!(m.in_flight[&k], 2.0);
        assert_eq!(m.generation["live"], 42);
    }

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
    fn one_sample_is_warming_up() {
        let inner = Inner {
            samples: [sample(0, &[("a", TEXT)])].into_iter().collect(),
            ..Inner::default()
        };
        let r = report(&inner, Duration::from_secs(10), None, &SeriesFilter::All);
        assert_eq!(r["warming_up"], true);
        assert_eq!(r["apis"][0]["breaker"], "open");
    }
}
