//! HTTP/2 connections of the traffic listeners, served by Portico's own accept loop
//! ([`serve`]) instead of Pingora's (`accept_downstream_sessions` in pingora-core
//! `protocols/http/v2/server.rs`, reached through `HttpProxy`'s `ServerApp`).
//!
//! Why not Pingora's loop (docs/SECURITY.md, "Connections"; issue 24):
//!
//! - **Idle connections.** Pingora closes an idle h2 connection only when
//!   `h2_idle_timeout` is set (it is not by default) and then drops the socket without a
//!   GOAWAY. Here a connection with no stream in flight for [`H2Limits::idle`] gets a
//!   `GOAWAY(NO_ERROR)` and is closed: an h2 client cannot hold a connection (and a place
//!   under the connection caps) by sending SETTINGS and nothing else.
//! - **Detached streams.** Pingora spawns each stream's task and forgets it. When the client
//!   resets a stream, h2 frees its place under `max_concurrent_streams` at once, but the task
//!   (the pipeline, the backend call, its bulkhead permit) runs on to the backend's timeout:
//!   one connection opening and resetting streams drove 256 backend calls at once despite
//!   the 100-stream limit. Here each stream's task holds one of the connection's
//!   [`H2Limits::max_streams`] slots until it ends, and the next stream is accepted only
//!   with a free slot (meanwhile the connection is still driven: h2 answers pings, reads
//!   resets and refuses streams past its limit), so a connection never has more backend
//!   calls than its stream limit. The tasks belong to the connection: when it ends, those
//!   still running are aborted (their answer has nobody to go to), which drops the request
//!   future, cancels the backend call and frees its bulkhead permit; they are counted as
//!   `499 CLIENT_CLOSED` in `portico_requests_total`.
//! - **Resets are free.** h2's own rapid-reset guard counts only streams reset before they
//!   are accepted (`max_pending_accept_reset_streams`); a client that waits for each stream
//!   to be accepted before resetting it is never stopped. Here every `RST_STREAM` the client
//!   sends is counted ([`FrameTap`] reads the frame headers of the connection's plaintext as
//!   h2 reads them), and past [`H2Limits::reset_budget`] the connection gets
//!   `GOAWAY(ENHANCE_YOUR_CALM)` and is closed, its tasks aborted.
//!
//! Requests are still served by `HttpProxy::process_new_http` (the same pipeline, logging
//! and rescue point as HTTP/1). Draining on shutdown is Pingora's: a GOAWAY, then streams in
//! flight finish.

use super::wrap::delegate_io;
use crate::deadline::within;
use pingora_core::apps::HttpServerApp;
use pingora_core::protocols::http::v2::server::{self, H2Accept, HttpSession};
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::{Digest, Stream};
use pingora_core::server::ShutdownWatch;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The default for `--h2-idle-timeout-ms`, like HTTP/1's keep-alive.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(60);

/// The default for `--h2-max-streams`: Pingora's and most servers' stream limit.
pub const DEFAULT_MAX_STREAMS: u32 = 100;

/// The default for `--h2-reset-budget`: `RST_STREAM`s a client may send over one
/// connection's life. A browser resets a stream when a page is left or a fetch aborted;
/// 200 on one connection is far past that, and far below a flood.
pub const DEFAULT_RESET_BUDGET: u64 = 200;

/// Streams refused as malformed while being accepted (Pingora's per-connection budget,
/// `MAX_MALFORMED_STREAMS_PER_CONN`, which its public accept call does not keep across
/// calls): past it, the connection is closed.
const MAX_MALFORMED: usize = 32;

/// How long a closing connection is given to send its GOAWAY.
const GOAWAY_FLUSH: Duration = Duration::from_secs(1);

/// The client connection preface (RFC 9113 §3.4), which precedes the client's frames.
const PREFACE_LEN: usize = 24;

/// The `RST_STREAM` frame type (RFC 9113 §6.4).
const RST_STREAM: u8 = 0x3;

/// The HTTP/2 limits of one connection.
#[derive(Debug, Clone)]
pub struct H2Limits {
    /// Closed after this long without a stream in flight; zero: never.
    pub idle: Duration,
    /// Streams open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`), and requests in flight.
    pub max_streams: u32,
    /// `RST_STREAM`s the client may send over the connection's life; zero: no limit.
    pub reset_budget: u64,
    /// The client's preface and SETTINGS must arrive within this.
    pub handshake: Duration,
}

impl Default for H2Limits {
    fn default() -> Self {
        H2Limits {
            idle: DEFAULT_IDLE,
            max_streams: DEFAULT_MAX_STREAMS,
            reset_budget: DEFAULT_RESET_BUDGET,
            handshake: super::DEFAULT_HEAD_DEADLINE,
        }
    }
}

/// Why [`serve`] closed a connection itself (the `reason` label of `portico_h2_goaway_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoAway {
    Idle,
    ResetBudget,
    Malformed,
}

impl GoAway {
    pub fn as_str(self) -> &'static str {
        match self {
            GoAway::Idle => "idle",
            GoAway::ResetBudget => "reset_budget",
            GoAway::Malformed => "malformed",
        }
    }
}

/// What one connection came to.
#[derive(Debug, Default)]
pub struct Served {
    /// Closed by the gateway with a GOAWAY, and why.
    pub goaway: Option<GoAway>,
    /// Streams still in flight when the connection ended, aborted.
    pub aborted: u64,
}

/// How [`serve`]'s loop ended.
enum End {
    /// The client closed the connection, or it broke.
    Closed,
    GoAway(GoAway),
}

/// Serves one HTTP/2 connection (ALPN `h2`) with `app` until it closes (see the module
/// docs).
pub async fn serve<A>(
    app: &Arc<A>,
    stream: Stream,
    shutdown: &ShutdownWatch,
    limits: &H2Limits,
) -> Served
where
    A: HttpServerApp + Send + Sync + 'static,
{
    // One digest for every stream of the connection, as Pingora's loop makes it.
    let digest = Arc::new(Digest {
        ssl_digest: stream.get_ssl_digest(),
        timing_digest: stream.get_timing_digest(),
        proxy_digest: stream.get_proxy_digest(),
        socket_digest: stream.get_socket_digest(),
    });
    let resets = Arc::new(ResetCount::new(limits.reset_budget));
    let stream: Stream = Box::new(FrameTap::new(stream, resets.clone()));
    let mut options = server::default_h2_options();
    options.max_concurrent_streams(limits.max_streams);
    let mut conn = match within(limits.handshake, server::handshake(stream, Some(options))).await {
        Some(Ok(conn)) => conn,
        Some(Err(e)) => {
            tracing::debug!(error = %e, "h2 handshake failed");
            return Served::default();
        }
        None => {
            tracing::debug!("h2 handshake not done within its deadline");
            return Served::default();
        }
    };
    let slots = Arc::new(Semaphore::new(limits.max_streams.max(1) as usize));
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut idle_since = Instant::now();
    let mut draining = false;
    let mut malformed = 0;
    let mut watch = shutdown.clone();
    let end = loop {
        let idle_at =
            (tasks.is_empty() && !limits.idle.is_zero()).then(|| idle_since + limits.idle);
        tokio::select! {
            biased;
            () = resets.exceeded() => break End::GoAway(GoAway::ResetBudget),
            _ = watch.changed(), if !draining => {
                // Pingora's drain: no new streams past the GOAWAY, those in flight finish.
                conn.graceful_shutdown();
                draining = true;
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {
                if tasks.is_empty() {
                    idle_since = Instant::now();
                }
            }
            () = tokio::time::sleep_until(idle_at.unwrap_or(idle_since)), if idle_at.is_some() => {
                break End::GoAway(GoAway::Idle);
            }
            next = next_stream(&mut conn, &slots, &digest) => match next {
                Next::Session(session, slot) => {
                    let app = app.clone();
                    let shutdown = shutdown.clone();
                    tasks.spawn(async move {
                        // The slot is the stream's until its task ends, answered or aborted.
                        let _slot = slot;
                        app.process_new_http(ServerSession::new_http2(*session), &shutdown)
                            .await;
                    });
                }
                Next::Rejected => {
                    malformed += 1;
                    if malformed >= MAX_MALFORMED {
                        break End::GoAway(GoAway::Malformed);
                    }
                }
                Next::Closed => break End::Closed,
            },
        }
    };
    // Whatever still runs has nobody to answer to: aborted at once, which cancels its backend
    // call and frees its bulkhead permit.
    let aborted = tasks.len() as u64;
    tasks.abort_all();
    let goaway = match end {
        End::Closed => None,
        End::GoAway(why) => {
            let reason = match why {
                GoAway::Idle => h2::Reason::NO_ERROR,
                GoAway::ResetBudget => h2::Reason::ENHANCE_YOUR_CALM,
                GoAway::Malformed => h2::Reason::PROTOCOL_ERROR,
            };
            conn.abrupt_shutdown(reason);
            let _ = within(GOAWAY_FLUSH, poll_fn(|cx| conn.poll_closed(cx))).await;
            Some(why)
        }
    };
    // The aborted tasks finish dropping before the connection's place is given back.
    while tasks.join_next().await.is_some() {}
    Served { goaway, aborted }
}

/// The next event of a connection's accept loop.
enum Next {
    /// A new stream, with the slot it holds.
    Session(Box<HttpSession>, OwnedSemaphorePermit),
    /// A stream refused while being accepted (already answered or reset by Pingora).
    Rejected,
    /// The connection is done (closed by the client, drained, or broken).
    Closed,
}

/// Waits for a free slot, driving the connection meanwhile, then accepts the next stream.
/// Cancel-safe: dropped between the two, the slot is given back; Pingora's accept is
/// cancel-safe.
async fn next_stream(
    conn: &mut h2::server::Connection<Stream, bytes::Bytes>,
    slots: &Arc<Semaphore>,
    digest: &Arc<Digest>,
) -> Next {
    let slot = match slots.clone().try_acquire_owned() {
        Ok(slot) => slot,
        Err(_) => {
            tokio::select! {
                slot = slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return Next::Closed,
                },
                closed = poll_fn(|cx| conn.poll_closed(cx)) => {
                    if let Err(e) = closed {
                        tracing::debug!(error = %e, "h2 connection error");
                    }
                    return Next::Closed;
                }
            }
        }
    };
    match HttpSession::from_h2_conn(conn, digest.clone()).await {
        Ok(Some(H2Accept::Session(session))) => Next::Session(Box::new(session), slot),
        Ok(Some(H2Accept::Rejected)) => Next::Rejected,
        Ok(None) => Next::Closed,
        Err(e) => {
            // Usually a client that closed without a GOAWAY.
            tracing::debug!(error = %e, "h2 connection ended");
            Next::Closed
        }
    }
}

/// The `RST_STREAM`s a client sent on one connection, against its budget.
struct ResetCount {
    budget: u64,
    seen: AtomicU64,
    over: Notify,
}

impl ResetCount {
    fn new(budget: u64) -> Self {
        ResetCount {
            budget,
            seen: AtomicU64::new(0),
            over: Notify::new(),
        }
    }

    fn note(&self) {
        let seen = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self.budget != 0 && seen == self.budget + 1 {
            // Stored if the loop is not waiting right now: the next wait returns at once.
            self.over.notify_one();
        }
    }

    /// Resolves once the client has sent more resets than the budget.
    async fn exceeded(&self) {
        if self.budget == 0 {
            return std::future::pending().await;
        }
        self.over.notified().await;
    }
}

/// A connection whose incoming HTTP/2 frame headers are read as they pass, to count the
/// client's `RST_STREAM`s (h2 does not report them). Costs a few comparisons per frame.
struct FrameTap {
    inner: Stream,
    resets: Arc<ResetCount>,
    /// Bytes of the client preface still to skip.
    preface: usize,
    /// The frame header being read, and how much of it has arrived.
    header: [u8; 9],
    have: usize,
    /// Bytes of the current frame's payload still to skip.
    payload: usize,
}

impl FrameTap {
    fn new(inner: Stream, resets: Arc<ResetCount>) -> Self {
        FrameTap {
            inner,
            resets,
            preface: PREFACE_LEN,
            header: [0; 9],
            have: 0,
            payload: 0,
        }
    }

    /// Follows the frames in the next bytes the connection read.
    fn feed(&mut self, mut bytes: &[u8]) {
        let skip = self.preface.min(bytes.len());
        self.preface -= skip;
        bytes = &bytes[skip..];
        while !bytes.is_empty() {
            if self.payload > 0 {
                let n = self.payload.min(bytes.len());
                self.payload -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 9 {
                self.have = 0;
                let h = self.header;
                self.payload = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                if h[3] == RST_STREAM {
                    self.resets.note();
                }
            }
        }
    }
}

impl AsyncRead for FrameTap {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.feed(&buf.filled()[before..]);
        }
        polled
    }
}

delegate_io!(FrameTap);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn frame(ty: u8, len: usize, stream: u32) -> Vec<u8> {
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, 0];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend(std::iter::repeat_n(0xAA, len));
        f
    }

    #[test]
    fn resets_are_counted_across_any_split_of_the_bytes() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(0x4, 6, 0)); // SETTINGS
        for id in 0..5u32 {
            bytes.extend(frame(0x1, 40, 2 * id + 1)); // HEADERS
                                                      // A payload full of bytes that look like RST_STREAM frame types.
            let mut data = frame(0x0, 27, 2 * id + 1);
            data[9..].fill(RST_STREAM);
            bytes.extend(data);
            bytes.extend(frame(RST_STREAM, 4, 2 * id + 1));
        }
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..200 {
            let (server, _client) = tokio::io::duplex(64);
            let count = Arc::new(ResetCount::new(3));
            let mut tap = FrameTap::new(Box::new(server), count.clone());
            let mut at = 0;
            while at < bytes.len() {
                let n = rng.usize(1..=(bytes.len() - at).min(50));
                tap.feed(&bytes[at..at + n]);
                at += n;
            }
            assert_eq!(count.seen.load(Ordering::Relaxed), 5);
        }
    }

    #[tokio::test]
    async fn the_budget_is_exceeded_by_one_reset_more() {
        let count = ResetCount::new(2);
        count.note();
        count.note();
        let over = tokio::time::timeout(Duration::from_millis(20), count.exceeded()).await;
        assert!(over.is_err(), "two resets are within a budget of two");
        count.note();
        // Noted before anyone waited: the wait returns at once.
        tokio::time::timeout(Duration::from_secs(1), count.exceeded())
            .await
            .unwrap();
        let unlimited = ResetCount::new(0);
        for _ in 0..1000 {
            unlimited.note();
        }
        let over = tokio::time::timeout(Duration::from_millis(20), unlimited.exceeded()).await;
        assert!(over.is_err());
    }
}
