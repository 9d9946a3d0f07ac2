//! The monitor: one background task per registry, started by the first request for the report
//! and stopped after [`IDLE_STOP`] without one (a registry nobody watches scrapes nothing). Each
//! [`INTERVAL`] it lists the live gateway nodes (`<root>/nodes/*`, each with its
//! `admin_addr`), scrapes every node's `http://<admin_addr>/metrics` and keeps the last
//! [`RING`] samples.

use super::prometheus::{parse_metrics, NodeMetrics};
use crate::state::{AppState, Shared};
use portico_control::zk::NodeInfo;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// How often the gateways are scraped in production (the interval in force is
/// [`crate::cadence::interval`], shorter in tests).
pub const INTERVAL: Duration = Duration::from_secs(2);
/// Samples kept (3 minutes at [`INTERVAL`]).
pub const RING: usize = 90;
/// A monitor nobody asked for this long stops.
pub const IDLE_STOP: Duration = Duration::from_secs(120);
/// Deadline of one scrape.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_millis(1500);

/// One scrape round: every node's metrics (nodes that failed are absent).
#[derive(Debug, Clone)]
pub struct Sample {
    /// When the round ended.
    pub at: Instant,
    /// The same, in Unix milliseconds (for the report's series).
    pub unix_ms: u64,
    /// Metrics by node id.
    pub nodes: BTreeMap<String, NodeMetrics>,
}

/// How the last scrape of a node went.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// The node's id.
    pub node_id: String,
    /// Where its `/metrics` is.
    pub admin_addr: String,
    /// Whether the last scrape read it.
    pub ok: bool,
    /// Why the last scrape failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Milliseconds since the node's metrics were last read, if ever (set by the report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_ok_ms_ago: Option<u64>,
    /// When the node's metrics were last read, if ever.
    #[serde(skip)]
    pub last_ok: Option<Instant>,
    /// Applied config generation by plane, from the node's metrics.
    pub generation: BTreeMap<String, i64>,
}

/// What the monitor knows.
#[derive(Debug, Default)]
pub struct Inner {
    /// The ring of samples, oldest first.
    pub samples: VecDeque<Sample>,
    /// The nodes of the last round.
    pub nodes: BTreeMap<String, NodeStatus>,
    /// The last problem listing the nodes (ZooKeeper unreachable, say).
    pub error: Option<String>,
    /// Published API ids (shown with zero traffic when idle).
    pub published: BTreeSet<String>,
}

/// A registry's monitor.
pub struct Monitor {
    state: Weak<AppState>,
    inner: Mutex<Inner>,
    last_asked: Mutex<Instant>,
    started: Instant,
    rounds: AtomicU64,
}

/// The running monitors, by the address of their registry's state.
static MONITORS: Mutex<Vec<(usize, Arc<Monitor>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The monitor of `state`, started if none runs; asking keeps it running.
pub fn monitor(state: &Shared) -> Arc<Monitor> {
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

impl Monitor {
    /// What the monitor knows now (held briefly: the scraper waits for it).
    pub fn inner(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// A monitor just started: waits (at most one scrape's deadline) for its first round, so
    /// the first report has a sample rather than nothing.
    pub async fn first_round(&self) {
        if self.rounds.load(Ordering::Relaxed) != 0
            || self.started.elapsed() >= crate::cadence::interval()
        {
            return;
        }
        let deadline = Instant::now() + SCRAPE_TIMEOUT + Duration::from_millis(500);
        while self.rounds.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// The monitor's task: a round every [`INTERVAL`] until the registry is gone or nobody asked
/// for [`IDLE_STOP`].
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
    let mut ticker = tokio::time::interval(crate::cadence::interval());
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

/// One scrape of every live node, recorded as the newest sample.
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
    let scrapes = futures::future::join_all(infos.iter().map(|info| scrape(client, info))).await;
    let mut inner = lock(&m.inner);
    record(&mut inner, scrapes, Instant::now());
    inner.published = published;
    m.rounds.fetch_add(1, Ordering::Relaxed);
}

/// A node's `/metrics` text, or why it could not be read.
async fn scrape<'a>(
    client: &reqwest::Client,
    info: &'a NodeInfo,
) -> (&'a NodeInfo, Result<String, String>) {
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
}

/// Records a round's scrapes: the nodes' statuses (a failed node keeps when it was last read
/// and its last generation) and a new sample of the nodes read, the oldest beyond [`RING`]
/// dropped.
fn record(inner: &mut Inner, scrapes: Vec<(&NodeInfo, Result<String, String>)>, now: Instant) {
    let mut sample = Sample {
        at: now,
        unix_ms: portico_control::clock::now_ms(),
        nodes: BTreeMap::new(),
    };
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
    inner.samples.push_back(sample);
    while inner.samples.len() > RING {
        inner.samples.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::prometheus::TEST_TEXT;

    fn node(id: &str) -> NodeInfo {
        let admin_addr = format!("127.0.0.1:{}", id.len());
        NodeInfo::new(id, "127.0.0.1:1", &admin_addr)
    }

    #[test]
    fn failed_nodes_keep_their_last_reading_and_the_ring_is_bounded() {
        let (a, b) = (node("a"), node("bb"));
        let mut inner = Inner::default();
        let t0 = Instant::now();
        record(
            &mut inner,
            vec![(&a, Ok(TEST_TEXT.to_owned())), (&b, Err("refused".into()))],
            t0,
        );
        assert!(inner.nodes["a"].ok);
        assert_eq!(inner.nodes["a"].generation["live"], 42);
        assert!(!inner.nodes["bb"].ok);
        assert_eq!(
            inner.nodes["bb"].error.as_deref(),
            Some("scraping 127.0.0.1:2: refused")
        );
        assert_eq!(
            inner.samples[0].nodes.len(),
            1,
            "only nodes read are sampled"
        );

        // a fails next: it keeps when it was last read and its generation.
        record(&mut inner, vec![(&a, Err("timeout".into()))], t0 + INTERVAL);
        assert!(!inner.nodes["a"].ok);
        assert_eq!(inner.nodes["a"].last_ok, Some(t0));
        assert_eq!(inner.nodes["a"].generation["live"], 42);
        assert!(!inner.nodes.contains_key("bb"), "gone from ZooKeeper: gone");

        for i in 0..RING as u32 + 5 {
            record(&mut inner, vec![], t0 + INTERVAL * (i + 2));
        }
        assert_eq!(inner.samples.len(), RING);
        assert_eq!(
            inner.samples.back().unwrap().at,
            t0 + INTERVAL * (RING as u32 + 6)
        );
    }
}
