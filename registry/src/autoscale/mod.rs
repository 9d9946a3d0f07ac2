//! Autoscale and sleep marking (docs/operations/clusters.md, "Autoscale" and "Sleep marking"): one
//! background task per registry evaluates, every [`crate::cadence::interval`] (2 s) whether or
//! not anyone watches, each live cluster's `autoscale` rules on its request rate over the last
//! [`WINDOW`] (10 s at that cadence, as many scrapes at a shorter one) ([`rate`]),
//! and POSTs `{"cluster","action","rps","rule","at"}` to the cluster's `webhook` when a rule
//! has held for its `for_s`, at most once per `cooldown_s`; a cluster with `sleep.sleep_url`
//! and `sleep.idle_s` gets `sleep_url` POSTed once it has had no request on any gateway for
//! `idle_s`.
//!
//! Several registries may run against one tree: a firing is claimed first by a compare-and-set
//! write of the cluster's state node `<root>/cluster-ops/<cluster>` (its last firing time and
//! its recent events), so only the registry whose write wins calls the webhook, and the
//! cooldown holds across registries and restarts. Every firing, sleep call and failed call is
//! appended to the audit log and kept (newest [`EVENTS_KEEP`]) on the state node, which the
//! console lists (`GET /api/v1/clusters/<name>/autoscale/events`).

pub mod rate;
pub mod rules;

use crate::audit::record;
use crate::error::{ApiError, ApiResult};
use crate::health::scraper;
use crate::state::{AppState, Shared};
use crate::zk_store::{Env, Precondition};
use rules::{Autoscale, Holding, Idle, SleepMark};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// The rate a rule is evaluated on is measured over this window at the production cadence (at
/// another, [`crate::cadence::scaled`]).
pub const WINDOW: Duration = Duration::from_secs(10);
/// Samples older than this many intervals mean the monitor is behind: no evaluation.
const STALE_AFTER_INTERVALS: u32 = 3;
/// Deadline of a webhook or `sleep_url` call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Events kept on a cluster's state node.
pub const EVENTS_KEEP: usize = 50;
/// Where the clusters' state nodes live, relative to the root.
pub const STATE_DIR: &str = "cluster-ops";

/// What one registry's task knows between ticks.
#[derive(Default)]
struct Known {
    /// The rate of each cluster at the last tick that had data.
    rates: BTreeMap<String, f64>,
    /// Since when each cluster's rules have held.
    holding: HashMap<String, Holding>,
    /// Since when each cluster has been idle.
    active: HashMap<String, Idle>,
    /// The newest sample the last evaluation read (sleep marking counts traffic from it).
    last_read: Option<Instant>,
    /// When the last evaluation that had data started, in Unix ms; set once its webhook and
    /// `sleep_url` calls are done.
    evaluated_at_ms: Option<u64>,
}

/// The autoscaler of one registry.
struct Autoscaler {
    state: Weak<AppState>,
    known: Mutex<Known>,
}

/// The running autoscalers, by the address of their registry's state.
static RUNNING: Mutex<Vec<(usize, Arc<Autoscaler>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the autoscale task of `state` (once; later calls do nothing). It stops when the
/// registry's state is dropped.
pub fn start(state: &Shared) {
    let key = Arc::as_ptr(state) as usize;
    let mut all = lock(&RUNNING);
    if all.iter().any(|(k, _)| *k == key) {
        return;
    }
    let a = Arc::new(Autoscaler {
        state: Arc::downgrade(state),
        known: Mutex::new(Known::default()),
    });
    all.push((key, a.clone()));
    tokio::spawn(run(a, key));
}

/// The request rate of a cluster at the last evaluation, if there was data (a cluster without
/// `autoscale` or `sleep` is not evaluated).
pub fn current_rate(state: &Shared, cluster: &str) -> Option<f64> {
    let key = Arc::as_ptr(state) as usize;
    let all = lock(&RUNNING);
    let (_, a) = all.iter().find(|(k, _)| *k == key)?;
    let known = lock(&a.known);
    known.rates.get(cluster).copied()
}

/// When this registry last evaluated the clusters on data (Unix ms at the start of that
/// evaluation, published once its calls were done): a firing or sleep call it decided on has
/// been made by then. `None` before the first such evaluation.
pub fn evaluated_at_ms(state: &Shared) -> Option<u64> {
    let key = Arc::as_ptr(state) as usize;
    let all = lock(&RUNNING);
    let (_, a) = all.iter().find(|(k, _)| *k == key)?;
    let known = lock(&a.known);
    known.evaluated_at_ms
}

/// A cluster's recent events, newest first.
pub async fn events(state: &Shared, cluster: &str) -> ApiResult<Vec<Value>> {
    Ok(read_state(state, cluster)
        .await?
        .map(|(v, _)| v["events"].as_array().cloned().unwrap_or_default())
        .unwrap_or_default())
}

async fn run(a: Arc<Autoscaler>, key: usize) {
    // Webhooks and sleep URLs name any URL an author wrote: through the egress policy
    // (`crate::egress`), never redirected.
    let client = match crate::egress::client_builder()
        .timeout(CALL_TIMEOUT)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "autoscale: no HTTP client; autoscale and sleep marking are off");
            lock(&RUNNING).retain(|(k, _)| *k != key);
            return;
        }
    };
    let mut ticker = tokio::time::interval(crate::cadence::interval());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(state) = a.state.upgrade() else {
            lock(&RUNNING).retain(|(k, _)| *k != key);
            return;
        };
        if let Err(e) = tick(&a, &state, &client).await {
            tracing::debug!(error = %e.message, "autoscale: evaluation skipped");
        }
    }
}

/// The live clusters that have `autoscale` or `sleep_url`, and the live APIs' clusters.
struct Config {
    autoscale: BTreeMap<String, Autoscale>,
    sleep: BTreeMap<String, SleepMark>,
    api_cluster: HashMap<String, String>,
}

async fn read_config(state: &AppState) -> ApiResult<Config> {
    let mut config = Config {
        autoscale: BTreeMap::new(),
        sleep: BTreeMap::new(),
        api_cluster: HashMap::new(),
    };
    for (name, doc) in state.store.list_docs("clusters").await? {
        let Ok(v) = serde_json::from_slice::<Value>(&doc.data) else {
            continue;
        };
        if let Some(a) = rules::autoscale_of(&v) {
            config.autoscale.insert(name.clone(), a);
        }
        if let Some(s) = rules::sleep_of(&v) {
            config.sleep.insert(name, s);
        }
    }
    if config.autoscale.is_empty() && config.sleep.is_empty() {
        return Ok(config);
    }
    for (id, doc) in state.store.list_docs("apis").await? {
        let cluster = serde_json::from_slice::<Value>(&doc.data)
            .ok()
            .and_then(|v| v.pointer("/backend/cluster")?.as_str().map(str::to_owned));
        if let Some(cluster) = cluster {
            config.api_cluster.insert(id, cluster);
        }
    }
    Ok(config)
}

/// One evaluation: the rates from the monitor's samples, then each cluster's rules and idle
/// time.
async fn tick(a: &Autoscaler, state: &Shared, client: &reqwest::Client) -> ApiResult<()> {
    let config = read_config(state).await?;
    if config.autoscale.is_empty() && config.sleep.is_empty() {
        return Ok(());
    }
    // Asking the monitor keeps it scraping while clusters need it.
    let monitor = scraper::monitor(state);
    let last_read = lock(&a.known).last_read;
    let (rates, recent, all_read, read) = {
        let inner = monitor.inner();
        let interval = crate::cadence::interval();
        let window = crate::cadence::scaled(WINDOW);
        let Some((old, new)) = rate::window(&inner.samples, window, interval) else {
            return Ok(());
        };
        if new.at.elapsed() > interval * STALE_AFTER_INTERVALS {
            return Ok(()); // The monitor is behind (ZooKeeper unreachable, say): no data.
        }
        let mut rates = rate::cluster_rates(old, new, &config.api_cluster);
        // A cluster no live API uses has no traffic at all.
        for name in config.autoscale.keys().chain(config.sleep.keys()) {
            rates.entry(name.clone()).or_insert(0.0);
        }
        // Traffic since the previous evaluation's newest sample, and at least since the
        // sample two rounds back: no request between two evaluations goes uncounted.
        let prev = rate::recent_start(&inner.samples, last_read, 2).unwrap_or(old);
        let recent = rate::cluster_rates(prev, new, &config.api_cluster);
        let all_read = !new.nodes.is_empty() && inner.nodes.values().all(|n| n.ok);
        (rates, recent, all_read, new.at)
    };
    let now = Instant::now();
    let now_ms = portico_control::clock::now_ms();
    let mut due = Vec::new();
    let mut sleepy = Vec::new();
    {
        let mut known = lock(&a.known);
        known.rates = rates.clone();
        known.last_read = Some(read);
        for (name, auto) in &config.autoscale {
            let rps = rates.get(name).copied().unwrap_or(0.0);
            let holding = known.holding.entry(name.clone()).or_default();
            if let Some(i) = holding.observe(&auto.rules, rps, now) {
                due.push((name.clone(), auto.clone(), i, rps));
            }
        }
        known
            .holding
            .retain(|n, _| config.autoscale.contains_key(n));
        for (name, mark) in &config.sleep {
            let busy = recent.get(name).copied().unwrap_or(0.0) > 0.0;
            let idle = known
                .active
                .entry(name.clone())
                .or_insert_with(|| Idle::new(now_ms));
            if idle.observe(busy, all_read, now_ms, mark.idle_s) {
                sleepy.push((name.clone(), mark.clone(), *idle));
            }
        }
        known.active.retain(|n, _| config.sleep.contains_key(n));
    }
    for (name, auto, rule, rps) in due {
        fire(state, client, &name, &auto, rule, rps).await;
    }
    for (name, mark, idle) in sleepy {
        mark_asleep(state, client, &name, &mark, idle).await;
    }
    lock(&a.known).evaluated_at_ms = Some(now_ms);
    Ok(())
}

/// The state node of a cluster and its version, if it exists.
async fn read_state(state: &AppState, cluster: &str) -> ApiResult<Option<(Value, i32)>> {
    let rel = format!("{STATE_DIR}/{cluster}");
    Ok(state.store.get(&rel).await?.map(|doc| {
        let v = serde_json::from_slice::<Value>(&doc.data).unwrap_or_else(|_| json!({}));
        (v, doc.stat.version)
    }))
}

/// Changes a cluster's state node with compare-and-set: `change` sees the current value (`{}`
/// when absent) and answers `false` to give up. Answers whether the change was written.
async fn update_state(
    state: &AppState,
    cluster: &str,
    mut change: impl FnMut(&mut Value) -> bool,
) -> ApiResult<bool> {
    let rel = format!("{STATE_DIR}/{cluster}");
    for _ in 0..5 {
        let (mut value, pre) = match read_state(state, cluster).await? {
            Some((v, version)) => (v, Precondition::Version(version)),
            None => (json!({}), Precondition::Absent),
        };
        if !value.is_object() {
            value = json!({});
        }
        if !change(&mut value) {
            return Ok(false);
        }
        let data = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;
        match state.store.put(&rel, &data, pre).await {
            Ok(_) => return Ok(true),
            Err(e) if e.code == "CONFLICT" || e.code == "NOT_FOUND" => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Adds an event (newest first, [`EVENTS_KEEP`] kept).
fn push_event(value: &mut Value, event: Value) {
    let mut events = value["events"].as_array().cloned().unwrap_or_default();
    events.insert(0, event);
    events.truncate(EVENTS_KEEP);
    value["events"] = Value::Array(events);
}

/// Sets the outcome of the event `id`.
fn set_outcome(value: &mut Value, id: &str, outcome: &Value) -> bool {
    let Some(events) = value["events"].as_array_mut() else {
        return false;
    };
    match events.iter_mut().find(|e| e["id"] == id) {
        Some(e) => {
            if let (Some(e), Some(o)) = (e.as_object_mut(), outcome.as_object()) {
                e.extend(o.clone());
            }
            true
        }
        None => false,
    }
}

/// POSTs `body` to `url`: the answer's status, or why it failed (a non-2xx answer fails).
async fn call(client: &reqwest::Client, url: &str, body: &Value) -> Result<u16, String> {
    crate::egress::check_call(url).map_err(|e| format!("POST {url}: {e}"))?;
    let resp = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("POST {url}: {e}"))?;
    let status = resp.status().as_u16();
    if resp.status().is_success() {
        Ok(status)
    } else {
        Err(format!("POST {url} answered {status}"))
    }
}

/// The webhook payload of a firing (docs/operations/clusters.md, "Autoscale"): `rule` is the index of the
/// rule in `autoscale.rules`, from 0.
pub fn payload(cluster: &str, action: &str, rps: f64, rule: usize, at: &str) -> Value {
    json!({
        "cluster": cluster,
        "action": action,
        "rps": (rps * 1000.0).round() / 1000.0,
        "rule": rule,
        "at": at,
    })
}

/// Claims a firing of `rule` (compare-and-set on the state node, refused inside the cooldown),
/// calls the webhook, records the outcome and audits it.
async fn fire(
    state: &Shared,
    client: &reqwest::Client,
    cluster: &str,
    auto: &Autoscale,
    rule: usize,
    rps: f64,
) {
    let Some(r) = auto.rules.get(rule) else {
        return;
    };
    let now_ms = portico_control::clock::now_ms();
    // `at` says the very time the claim records (a cooldown counts from it).
    let at = portico_control::clock::rfc3339_ms(i64::try_from(now_ms).unwrap_or(i64::MAX));
    let id = format!("as-{:016x}", fastrand::u64(..));
    let body = payload(cluster, r.action.as_str(), rps, rule, &at);
    let event = json!({
        "id": id, "kind": "autoscale", "at": at, "action": r.action.as_str(), "rps": body["rps"],
        "rule": rule, "webhook": auto.webhook, "outcome": "pending",
    });
    let claimed = update_state(state, cluster, |v| {
        let last = v["last_fired_ms"].as_u64().unwrap_or(0);
        if !rules::past_cooldown(last, now_ms, auto.cooldown_s) {
            return false;
        }
        v["last_fired_ms"] = json!(now_ms);
        push_event(v, event.clone());
        true
    })
    .await;
    match claimed {
        Ok(true) => {}
        Ok(false) => return, // In the cooldown (maybe another registry fired).
        Err(e) => {
            tracing::warn!(cluster, error = %e.message, "autoscale: cannot claim the firing");
            return;
        }
    }
    let result = call(client, &auto.webhook, &body).await;
    let outcome = match &result {
        Ok(status) => json!({"outcome": "ok", "status": status}),
        Err(e) => json!({"outcome": "failed", "error": e}),
    };
    let _ = update_state(state, cluster, |v| set_outcome(v, &id, &outcome)).await;
    let target = Env::Live.path(&format!("clusters/{cluster}"));
    let mut detail = body.clone();
    detail["webhook"] = json!(auto.webhook);
    detail["outcome"] = outcome["outcome"].clone();
    record(
        state,
        &id,
        "autoscale",
        "cluster.autoscale",
        &target,
        detail,
    )
    .await;
    match result {
        Ok(status) => {
            tracing::info!(
                cluster,
                action = r.action.as_str(),
                rps,
                rule,
                status,
                "autoscale: webhook called"
            )
        }
        Err(e) => {
            tracing::warn!(cluster, action = r.action.as_str(), rps, rule, error = %e, "autoscale: webhook failed");
            let detail = json!({"webhook": auto.webhook, "error": e, "event": id});
            record(
                state,
                &id,
                "autoscale",
                "cluster.autoscale.webhook_failed",
                &target,
                detail,
            )
            .await;
        }
    }
}

/// Claims the sleep call of an idle cluster (not again until it has had traffic), calls
/// `sleep_url`, records and audits it.
async fn mark_asleep(
    state: &Shared,
    client: &reqwest::Client,
    cluster: &str,
    mark: &SleepMark,
    idle: Idle,
) {
    let now_ms = portico_control::clock::now_ms();
    // `at` says the very time the claim records (a cooldown counts from it).
    let at = portico_control::clock::rfc3339_ms(i64::try_from(now_ms).unwrap_or(i64::MAX));
    let id = format!("sl-{:016x}", fastrand::u64(..));
    let event = json!({
        "id": id, "kind": "sleep", "at": at, "idle_s": mark.idle_s,
        "sleep_url": mark.sleep_url, "outcome": "pending",
    });
    let claimed = update_state(state, cluster, |v| {
        // Already called since the cluster's last request (by this or another registry), or
        // called before this registry saw any request (it started later, or again).
        if !rules::may_sleep(v["slept_at_ms"].as_u64(), idle) {
            return false;
        }
        v["slept_at_ms"] = json!(now_ms);
        push_event(v, event.clone());
        true
    })
    .await;
    if !matches!(claimed, Ok(true)) {
        return;
    }
    let body = json!({"cluster": cluster, "idle_s": mark.idle_s, "at": at});
    let result = call(client, &mark.sleep_url, &body).await;
    let outcome = match &result {
        Ok(status) => json!({"outcome": "ok", "status": status}),
        Err(e) => json!({"outcome": "failed", "error": e}),
    };
    let _ = update_state(state, cluster, |v| set_outcome(v, &id, &outcome)).await;
    let target = Env::Live.path(&format!("clusters/{cluster}"));
    let mut detail = body;
    detail["sleep_url"] = json!(mark.sleep_url);
    detail["outcome"] = outcome["outcome"].clone();
    if let Err(e) = &result {
        detail["error"] = json!(e);
        tracing::warn!(cluster, error = %e, "sleep marking: sleep_url failed");
    } else {
        tracing::info!(
            cluster,
            idle_s = mark.idle_s,
            "sleep marking: sleep_url called"
        );
    }
    record(state, &id, "autoscale", "cluster.sleep", &target, detail).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_bounded_newest_first_and_outcomes_land_on_theirs() {
        let mut v = json!({});
        for i in 0..EVENTS_KEEP + 3 {
            push_event(&mut v, json!({"id": format!("e{i}"), "outcome": "pending"}));
        }
        let events = v["events"].as_array().unwrap();
        assert_eq!(events.len(), EVENTS_KEEP);
        assert_eq!(events[0]["id"], format!("e{}", EVENTS_KEEP + 2));
        assert!(set_outcome(
            &mut v,
            "e10",
            &json!({"outcome": "ok", "status": 200})
        ));
        assert!(
            !set_outcome(&mut v, "e0", &json!({"outcome": "ok"})),
            "dropped"
        );
        let e10 = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == "e10")
            .unwrap();
        assert_eq!(e10["status"], 200);
    }

    #[test]
    fn the_payload_is_the_documented_one() {
        let p = payload("orders", "up", 123.45678, 0, "2026-01-01T00:00:00.000Z");
        assert_eq!(
            p,
            json!({"cluster": "orders", "action": "up", "rps": 123.457, "rule": 0,
                   "at": "2026-01-01T00:00:00.000Z"})
        );
    }
}
