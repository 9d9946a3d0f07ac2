//! A notification session, whatever carries it (docs/PROTOCOL.md, "Notifications"): the
//! Server-Sent Events stream (`sse.rs`) and the WebSocket (`ws.rs`) differ only in how they
//! write events, heartbeats and the close, and in whether the merchant can talk back; the
//! rest lives here once: pending events of an earlier session first, then new ones in
//! publish order; unacknowledged events again after the ack timeout; at most `max_backlog`
//! events unacknowledged at a time (new ones are sent as acks make room, so nothing buffers
//! without bound); and the gateway's close when the app's grant is revoked (`revoked`), a
//! newer session of the app replaced it (`replaced`), or the merchant let `max_backlog`
//! delivered events wait for an ack for longer than the ack timeout (`slow_consumer`).

use super::hub::{granted, granted_topics, Notifier};
use super::store::{Event, EventId};
use crate::error::{Code, GatewayError};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Events read from the store per poll at most.
const BATCH: usize = 200;
/// How often a session checks that it still holds its app (a newer stream of the app on
/// another node closes it as `replaced` within this).
const HOLD_CHECK: Duration = Duration::from_secs(1);

/// Why the gateway ended a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// `revoked`, `replaced`, `slow_consumer`, `unavailable` (the store failed).
    pub reason: &'static str,
    pub message: String,
}

/// How a session reaches the merchant: the one difference between SSE and WebSocket.
pub(super) trait Transport {
    /// Writes these events, in order; `Err` when the merchant is gone.
    fn events(&mut self, events: &[&Event]) -> impl Future<Output = Result<(), ()>> + Send;

    /// Writes a heartbeat (after `heartbeat` of silence); `Err` when the merchant is gone.
    fn heartbeat(&mut self) -> impl Future<Output = Result<(), ()>> + Send;

    /// Waits at most `wait`, or until `woken` fires, for something to do; answers the event
    /// ids the merchant acknowledged meanwhile (none for SSE), or `Err` when the session
    /// must end (the merchant went away or broke the protocol: the transport has told it).
    fn wait(
        &mut self,
        wait: Duration,
        woken: Pin<&mut tokio::sync::futures::Notified<'_>>,
    ) -> impl Future<Output = Result<Vec<EventId>, ()>> + Send;

    /// Ends the session with the gateway's reason.
    fn close(&mut self, close: &Close) -> impl Future<Output = ()> + Send;
}

/// Counts the session open for its lifetime.
pub(super) struct Open<'a>(&'a Notifier);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics.connections.dec();
    }
}

/// Before a session starts, whatever its transport: refuses an app that receives callbacks
/// (403 `APP_FORBIDDEN`) and a node at `max_streams` (503 `CONNECTION_LIMIT`); counts the
/// session open until the guard drops.
pub(super) fn open<'a>(n: &'a Notifier, app: &str) -> Result<Open<'a>, GatewayError> {
    let snap = n.snapshot();
    if snap.apps.get(app).is_some_and(|a| a.callback_url.is_some()) {
        return Err(GatewayError::new(
            Code::AppForbidden,
            "this app receives its notifications by callback (callback_url); it cannot open a stream",
        ));
    }
    if n.streams.fetch_add(1, Ordering::Relaxed) >= n.config.max_streams {
        n.streams.fetch_sub(1, Ordering::Relaxed);
        return Err(GatewayError::new(
            Code::ConnectionLimit,
            "this gateway holds as many notification streams as it may; try another",
        )
        .with_retry_after(1));
    }
    n.metrics.connections.inc();
    Ok(Open(n))
}

/// One session's delivery state.
pub(super) struct Delivery<'a> {
    pub n: &'a Notifier,
    pub app: &'a str,
    /// The hold token ([`Notifier::hold`]).
    pub token: u64,
    last_write: Instant,
    last_hold_check: Instant,
}

impl<'a> Delivery<'a> {
    pub fn new(n: &'a Notifier, app: &'a str, token: u64) -> Delivery<'a> {
        Delivery {
            n,
            app,
            token,
            last_write: Instant::now(),
            last_hold_check: Instant::now(),
        }
    }

    /// Why the session must end now, if it must: revoked, replaced.
    async fn check(&mut self) -> Option<Close> {
        let snap = self.n.snapshot();
        let active = snap
            .apps
            .get(self.app)
            .is_some_and(|a| a.status == portico_control::v1::AppStatus::Active);
        if !active || granted_topics(&snap, self.app).is_empty() {
            return Some(Close {
                reason: "revoked",
                message: "this app is no longer granted any notification topic".into(),
            });
        }
        if self.last_hold_check.elapsed() >= HOLD_CHECK {
            self.last_hold_check = Instant::now();
            if !self.n.holds(self.app, self.token).await {
                return Some(Close {
                    reason: "replaced",
                    message: "a newer stream of this app was opened".into(),
                });
            }
        }
        None
    }

    /// Sends `events` (dropping expired ones and topics no longer granted, which are
    /// acknowledged); `Err` when the merchant is gone.
    async fn send<T: Transport>(
        &mut self,
        t: &mut T,
        events: Vec<Event>,
        again: bool,
    ) -> Result<(), ()> {
        if events.is_empty() {
            return Ok(());
        }
        let snap = self.n.snapshot();
        let now = portico_control::clock::now_ms();
        let mut dropped = Vec::new();
        let mut out = Vec::with_capacity(events.len());
        for e in &events {
            let allowed = snap
                .apps
                .get(self.app)
                .is_some_and(|a| granted(&snap, self.app, a, &e.topic));
            if !allowed || (e.expires_at_ms > 0 && e.expires_at_ms <= now) {
                dropped.push(e.id);
                continue;
            }
            out.push(e);
        }
        if !dropped.is_empty() {
            let _ = self.n.store.ack(self.app, &dropped).await;
        }
        if out.is_empty() {
            return Ok(());
        }
        self.last_write = Instant::now();
        t.events(&out).await?;
        let sent = out.len() as u64;
        if again {
            self.n.metrics.redelivered.inc_by(sent);
        } else {
            self.n.metrics.delivered.inc_by(sent);
        }
        Ok(())
    }

    /// The session's loop, from the events `resumed` of an earlier session; `Some(close)`
    /// when the gateway ends it (the caller tells the merchant), `None` when the merchant
    /// went away.
    pub async fn run<T: Transport>(&mut self, t: &mut T, resumed: Vec<Event>) -> Option<Close> {
        let mut pending = resumed.len() as u64;
        if self.send(t, resumed, true).await.is_err() {
            return None;
        }
        let limit = self.n.config.max_backlog;
        let mut full_since: Option<Instant> = None;
        let waker = self.n.waker(self.app);
        let ack_timeout = self.n.config.ack_timeout.as_millis() as u64;
        loop {
            if let Some(close) = self.check().await {
                return Some(close);
            }
            // Register for a wake-up before looking, so a publish in between is not missed.
            let woken = waker.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let room = usize::try_from(limit.saturating_sub(pending)).unwrap_or(BATCH);
            let batch = match self
                .n
                .store
                .poll(self.app, ack_timeout, room.min(BATCH))
                .await
            {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(app = self.app, error = %e, "notify: polling the store failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            self.n
                .metrics
                .backlog
                .with_label_values(&[self.app])
                .set(i64::try_from(batch.pending).unwrap_or(i64::MAX));
            let busy = !batch.fresh.is_empty() || !batch.redeliver.is_empty();
            if self.send(t, batch.redeliver, true).await.is_err()
                || self.send(t, batch.fresh, false).await.is_err()
            {
                return None;
            }
            pending = batch.pending;
            if pending < limit {
                full_since = None;
            } else if full_since.get_or_insert_with(Instant::now).elapsed()
                >= self.n.config.ack_timeout
            {
                return Some(Close {
                    reason: "slow_consumer",
                    message: format!(
                        "{pending} notifications have waited for an ack for more than {} ms (at most {limit} may); ack as you go, then reconnect",
                        ack_timeout
                    ),
                });
            }
            if busy {
                continue;
            }
            let heartbeat = self.n.config.heartbeat;
            let until_beat = heartbeat.saturating_sub(self.last_write.elapsed());
            if until_beat.is_zero() {
                self.last_write = Instant::now();
                if t.heartbeat().await.is_err() {
                    return None;
                }
                continue;
            }
            let wait = self.n.poll_every().min(until_beat);
            match t.wait(wait, woken).await {
                Ok(acked) if !acked.is_empty() => {
                    if let Err(e) = self.n.ack_ids(self.app, &acked).await {
                        tracing::warn!(app = self.app, error = %e, "notify: an ack failed");
                    }
                }
                Ok(_) => {}
                Err(()) => return None,
            }
        }
    }
}
