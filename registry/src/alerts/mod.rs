//! Real-time alerts (docs/operations/alerts.md, "Alerts"): one background task per registry evaluates
//! every `alerts/<name>` rule of the live tree every [`crate::cadence::interval`] (2 s) over
//! the last [`evaluate::WINDOW`] (10 s at that cadence, the same number of rounds at a shorter
//! one) of the metrics the health monitor scrapes from every gateway (it keeps
//! the monitor running while rules exist, whether or not anyone has the console open). An alert
//! fires once its condition has held for `for_s` and resolves once it has been false for
//! `for_s`; each transition is recorded in the history store (the console's Alerts page) and,
//! by the registry that leads `leader/alerts` only ([`leader`]), sent to the rule's receivers
//! ([`notify`]: signed webhooks with retries, emails through [`mail`]). An alert that stays
//! firing is never sent again.
//!
//! - [`rules`]: the rules as the evaluator uses them;
//! - [`evaluate`]: the window's figures, each rule's values, each alert's state;
//! - [`leader`]: which registry sends;
//! - [`notify`], [`mail`]: the notifications.

pub mod evaluate;
pub mod leader;
pub mod mail;
pub mod notify;
pub mod rules;

use crate::health::scraper::monitor;
use crate::history::{AlertBoard, AlertEvent, AlertNow, HistoryStore};
use crate::state::{AppState, Shared};
use crate::zk_store::Env;
use evaluate::{Alert, Gateways, Observation, Phase, Tracker, Transition};
use leader::Leadership;
use notify::{Payload, Sender};
use rules::Condition;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// How a registry sends notifications.
pub struct Settings {
    /// The webhook secret (`--webhook-secret-file`, `PORTICO_WEBHOOK_SECRET`); `None`: webhooks
    /// go unsigned.
    pub secret: Option<Vec<u8>>,
    /// The SMTP server for `email` receivers (`--smtp`).
    pub mailer: Option<mail::Mailer>,
    /// This registry's id in the election and in payloads (`host:pid listen-address`).
    pub registry_id: String,
    /// The console's address as people reach it (`--public-url`), for links.
    pub public_url: Option<String>,
}

/// One registry's alerting.
struct Engine {
    state: Weak<AppState>,
    history: Arc<HistoryStore>,
    leadership: Leadership,
    sender: Sender,
    public_url: Option<String>,
}

/// The running engines, by the address of their registry's state.
static RUNNING: Mutex<Vec<(usize, Arc<Engine>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the alerting task of `state` (once; later calls do nothing); it records into
/// `history` and stops when the registry's state is dropped.
pub fn start(state: &Shared, history: Arc<HistoryStore>, settings: Settings) -> Result<(), String> {
    let key = Arc::as_ptr(state) as usize;
    let mut all = lock(&RUNNING);
    if all.iter().any(|(k, _)| *k == key) {
        return Ok(());
    }
    let sender = Sender::new(settings.secret, settings.mailer)?;
    let engine = Arc::new(Engine {
        state: Arc::downgrade(state),
        history,
        leadership: Leadership::new(&settings.registry_id),
        sender,
        public_url: settings.public_url,
    });
    all.push((key, engine.clone()));
    tokio::spawn(run(engine, key));
    Ok(())
}

/// Whether `state`'s registry leads `leader/alerts` now (it sends notifications and the
/// scheduled reports); `false` when alerting does not run.
pub fn is_leader(state: &Shared) -> bool {
    let key = Arc::as_ptr(state) as usize;
    lock(&RUNNING)
        .iter()
        .find(|(k, _)| *k == key)
        .is_some_and(|(_, e)| e.leadership.is_leader())
}

/// The task: a round every [`crate::cadence::interval`] until the registry is gone.
async fn run(engine: Arc<Engine>, key: usize) {
    let mut tracker = Tracker::default();
    let mut gateways = Gateways::default();
    let mut ticker = tokio::time::interval(crate::cadence::interval());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(state) = engine.state.upgrade() else {
            lock(&RUNNING).retain(|(k, _)| *k != key);
            return;
        };
        round(&engine, &state, &mut tracker, &mut gateways).await;
    }
}

/// One evaluation of every rule.
async fn round(
    engine: &Arc<Engine>,
    state: &Shared,
    tracker: &mut Tracker,
    gateways: &mut Gateways,
) {
    let mut board = AlertBoard {
        evaluating: true,
        ..AlertBoard::default()
    };
    let (rules, problems) = match rules::load(state).await {
        Ok(found) => found,
        Err(e) => {
            board.leader = engine.leadership.is_leader();
            board.problem = Some(e);
            board.alerts = now_alerts(tracker);
            engine.history.set_board(board);
            return;
        }
    };
    board.leader = engine.leadership.check(state).await;
    board.rules = rules.len();
    if !problems.is_empty() {
        board.problem = Some(problems.join("; "));
    }
    if rules.is_empty() && tracker.alerts.is_empty() {
        board.evaluated_at_ms = Some(now_i64());
        engine.history.set_board(board);
        return;
    }
    // Asking keeps the monitor scraping while rules exist.
    let m = monitor(state);
    let observation = Observation::of(&m.inner());
    let Some(o) = observation else {
        board.problem = Some("waiting for two scrapes of the gateways' metrics".to_owned());
        engine.history.set_board(board);
        return;
    };
    let generation = if rules
        .iter()
        .any(|r| r.condition == Condition::ConfigLagAbove)
    {
        state.store.generation(Env::Live).await.ok()
    } else {
        None
    };
    let now = portico_control::clock::now_ms();
    gateways.note(&o, generation, now);
    let mut evaluated = Vec::new();
    for rule in &rules {
        for (api, value) in evaluate::values(rule, &o, gateways, generation, now) {
            evaluated.push((rule.clone(), api, value));
        }
    }
    let before = tracker.alerts.clone();
    let transitions = tracker.round(now, evaluated);
    for t in transitions {
        let (key, state_word) = match &t {
            Transition::Fired(k) => (k.clone(), "firing"),
            Transition::Resolved { key, .. } => (key.clone(), "resolved"),
        };
        let Some(alert) = tracker
            .alerts
            .get(&key)
            .or_else(|| before.get(&key))
            .cloned()
        else {
            continue;
        };
        notify_transition(engine, &alert, &t, state_word, now, board.leader).await;
    }
    board.evaluated_at_ms = Some(now_i64());
    board.alerts = now_alerts(tracker);
    engine.history.set_board(board);
}

fn now_i64() -> i64 {
    i64::try_from(portico_control::clock::now_ms()).unwrap_or(i64::MAX)
}

fn ms_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The alerts that are not clear, for the board.
fn now_alerts(tracker: &Tracker) -> Vec<AlertNow> {
    tracker
        .alerts
        .values()
        .filter_map(|a| {
            let (state, fired) = match a.phase {
                Phase::Clear { .. } => return None,
                Phase::Pending { .. } => ("pending", None),
                Phase::Firing { fired, .. } => ("firing", Some(fired)),
                Phase::Resolving { fired, .. } => ("resolving", Some(fired)),
            };
            Some(AlertNow {
                rule: a.rule.name.clone(),
                api: a.api.clone(),
                condition: a.rule.condition.name().to_owned(),
                severity: a.rule.severity.clone(),
                state: state.to_owned(),
                value: a.value,
                threshold: a.rule.threshold,
                started_at_ms: ms_i64(a.started().unwrap_or(0)),
                fired_at_ms: fired.map(ms_i64),
                summary: a.rule.condition.describe(&a.api, a.value, a.rule.threshold),
            })
        })
        .collect()
}

/// Records a transition in the history and, when this registry leads, sends it.
async fn notify_transition(
    engine: &Arc<Engine>,
    alert: &Alert,
    t: &Transition,
    state_word: &str,
    now: u64,
    leader: bool,
) {
    let (started, fired, resolved) = match t {
        Transition::Fired(_) => (alert.started().unwrap_or(now), now, None),
        Transition::Resolved { started, fired, .. } => (*started, *fired, Some(now)),
    };
    let rule = &alert.rule;
    let event = AlertEvent {
        id: 0,
        at_ms: ms_i64(now),
        rule: rule.name.clone(),
        api: alert.api.clone(),
        condition: rule.condition.name().to_owned(),
        severity: rule.severity.clone(),
        state: state_word.to_owned(),
        value: alert.value,
        threshold: rule.threshold,
        started_at_ms: ms_i64(started),
        notifications: None,
    };
    tracing::info!(rule = %rule.name, api = %alert.api, state = state_word, value = ?alert.value,
        threshold = rule.threshold, leader, "alert {state_word}");
    let store = engine.history.clone();
    let id = tokio::task::spawn_blocking(move || store.add_event(&event))
        .await
        .ok()
        .and_then(|r| {
            r.map_err(|e| tracing::warn!(error = %e, "alert event not recorded"))
                .ok()
        });
    if !leader {
        return;
    }
    let payload = Payload {
        id: format!("{}/{started}/{state_word}", alert.key()),
        rule: rule.name.clone(),
        api: alert.api.clone(),
        condition: rule.condition.name().to_owned(),
        value: alert.value,
        threshold: rule.threshold,
        for_s: rule.for_s,
        severity: rule.severity.clone(),
        state: state_word.to_owned(),
        started_at: portico_control::clock::rfc3339_ms(ms_i64(started)),
        fired_at: portico_control::clock::rfc3339_ms(ms_i64(fired)),
        resolved_at: resolved.map(|r| portico_control::clock::rfc3339_ms(ms_i64(r))),
        summary: rule
            .condition
            .describe(&alert.api, alert.value, rule.threshold),
        description: rule.description.clone(),
        registry: engine.leadership.id().to_owned(),
        console_url: engine
            .public_url
            .as_ref()
            .map(|u| format!("{}/alerts", u.trim_end_matches('/'))),
        sent_at: portico_control::clock::now_rfc3339(),
    };
    if rule.receivers.is_empty() {
        return;
    }
    // Deliveries retry for minutes: they run beside the evaluation, never in its way.
    let engine = engine.clone();
    let receivers = rule.receivers.clone();
    tokio::spawn(async move {
        let outcomes = engine.sender.deliver(&payload, &receivers).await;
        let Some(id) = id else { return };
        let record = notify::outcomes_json(&payload.state, &outcomes);
        let store = engine.history.clone();
        let _ = tokio::task::spawn_blocking(move || store.set_notifications(id, &record)).await;
    });
}
