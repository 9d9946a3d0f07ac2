//! HTTP/2 connections of the traffic listeners, served by Portico's own accept loop
//! ([`serve`]) instead of Pingora's (`accept_downstream_sessions` in pingora-core
//! `protocols/http/v2/server.rs`, reached through `HttpProxy`'s `ServerApp`).
//!
//! Why not Pingora's loop (docs/SECURITY.md, "Connections"):
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
use crate::model::STREAM;
pub use crate::model::{current_stream, StreamReset};
use pingora_core::apps::HttpServerApp;
use pingora_core::protocols::http::v2::server::{self, H2Accept, HttpSession};
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::{Digest, Stream};
use pingora_core::server::ShutdownWatch;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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

/// Streams opened and not yet accepted that [`Frames`] follows at most. h2 holds no more than
/// the stream limit of them, and stops reading while a refusal it owes cannot be written; past
/// this the mapping is given up for the connection (its resets still count, its requests are
/// no longer stopped one by one: the stream slots still bound them).
const MAX_PENDING: usize = 4096;

/// How long a closing connection is given to send its GOAWAY.
const GOAWAY_FLUSH: Duration = Duration::from_secs(1);

/// How long the socket of a connection the gateway closed with a GOAWAY stays open after
/// the GOAWAY and the FIN went out, unread (a lingering close, as nginx's
/// `lingering_close`): a client still sending (a reset flood, a request racing the idle
/// timeout) would otherwise meet a socket closed with its frames unread, which the kernel
/// answers with a RST, and could see `EPIPE`/`ECONNRESET` before it reads the GOAWAY that
/// says why.
const GOAWAY_LINGER: Duration = Duration::from_secs(1);

/// The client connection preface (RFC 9113 §3.4), which precedes the client's frames.
const PREFACE_LEN: usize = 24;

/// The `HEADERS` frame type (RFC 9113 §6.2).
const HEADERS: u8 = 0x1;

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
            handshake: crate::deadline::DEFAULT_HEAD_DEADLINE,
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
    let frames = Arc::new(Frames::new(limits.reset_budget));
    let stream: Stream = Box::new(FrameTap::new(stream, frames.clone()));
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
    // The reset signals of the streams in flight, by stream id.
    let mut in_flight: HashMap<u32, Arc<StreamReset>> = HashMap::new();
    let mut cancelled = 0;
    let mut idle_since = Instant::now();
    let mut draining = false;
    let mut malformed = 0;
    let mut watch = shutdown.clone();
    let end = loop {
        let idle_at =
            (tasks.is_empty() && !limits.idle.is_zero()).then(|| idle_since + limits.idle);
        tokio::select! {
            biased;
            () = frames.event.notified() => {
                if frames.over_budget() {
                    break End::GoAway(GoAway::ResetBudget);
                }
                for id in frames.take_resets() {
                    if let Some(stream) = in_flight.remove(&id) {
                        stream.fire();
                    }
                }
            }
            _ = watch.changed(), if !draining => {
                // Pingora's drain: no new streams past the GOAWAY, those in flight finish.
                conn.graceful_shutdown();
                draining = true;
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                cancelled += u64::from(joined.is_err_and(|e| e.is_cancelled()));
                in_flight.retain(|_, s| Arc::strong_count(s) > 1);
                if tasks.is_empty() {
                    idle_since = Instant::now();
                }
            }
            () = tokio::time::sleep_until(idle_at.unwrap_or(idle_since)), if idle_at.is_some() => {
                break End::GoAway(GoAway::Idle);
            }
            next = next_stream(&mut conn, &slots, &digest) => match next {
                Next::Session(session, slot) => {
                    let reset = Arc::new(StreamReset::default());
                    match frames.accepted() {
                        Some(Accepted { id, reset: false }) => {
                            in_flight.insert(id, reset.clone());
                        }
                        // Reset before it was accepted: its request never starts.
                        Some(Accepted { reset: true, .. }) => reset.fire(),
                        None => {}
                    }
                    let app = app.clone();
                    let shutdown = shutdown.clone();
                    tasks.spawn(STREAM.scope(reset, async move {
                        // The slot is the stream's until its task ends, answered or aborted.
                        let _slot = slot;
                        app.process_new_http(ServerSession::new_http2(*session), &shutdown)
                            .await;
                    }));
                }
                Next::Rejected => {
                    let _ = frames.accepted();
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
    while let Some(joined) = tasks.join_next().await {
        cancelled += u64::from(joined.is_err_and(|e| e.is_cancelled()));
    }
    if goaway.is_some() {
        // The socket (in `conn`) stays open, unread, for the client to read the GOAWAY.
        tokio::time::sleep(GOAWAY_LINGER).await;
    }
    drop(conn);
    Served {
        goaway,
        aborted: cancelled,
    }
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

/// A stream h2 handed to the accept loop, as the frames tell it.
#[derive(Debug, PartialEq, Eq)]
struct Accepted {
    id: u32,
    /// The client reset it before it was accepted.
    reset: bool,
}

/// What the frames of one connection tell that h2 does not: the client's `RST_STREAM`s
/// (against the budget) and which stream each accepted request is.
///
/// h2 hands streams to the accept loop in the order their `HEADERS` arrived (client stream
/// ids only grow), except those it refuses or resets itself (past the stream limit,
/// malformed headers), for which it writes a `RST_STREAM` before the next accept returns. So
/// the accepted stream is the oldest opened one not reset by the gateway. Where that does not
/// hold (the gateway's `RST_STREAM` still unwritten because the client does not read; or h2
/// resetting a stream it had already queued, say a body that broke its content-length before
/// the request was accepted), a reset meant for one of a client's streams could stop another
/// of the same connection's: never another client's.
struct Frames {
    budget: u64,
    /// Woken when the client resets a stream.
    event: Notify,
    state: Mutex<FrameState>,
}

#[derive(Default)]
struct FrameState {
    /// `RST_STREAM`s received.
    resets: u64,
    /// The highest stream id opened so far.
    last_opened: u32,
    /// Streams opened and not yet accepted, oldest first, and whether the client reset them.
    pending: VecDeque<(u32, bool)>,
    /// Accepted streams the client has reset since the loop last looked.
    reset_ids: Vec<u32>,
    /// Set when more than [`MAX_PENDING`] streams were waiting: which stream a request is is
    /// no longer known.
    lost: bool,
}

impl Frames {
    fn new(budget: u64) -> Self {
        Frames {
            budget,
            event: Notify::new(),
            state: Mutex::new(FrameState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FrameState> {
        // Only this connection's task locks it, never across a wait: not poisoned in practice,
        // and a poisoned state is still a valid one.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the client has sent more resets than the budget.
    fn over_budget(&self) -> bool {
        self.budget != 0 && self.state().resets > self.budget
    }

    /// The accepted streams reset since the last call.
    fn take_resets(&self) -> Vec<u32> {
        std::mem::take(&mut self.state().reset_ids)
    }

    /// The stream h2 has just handed to the accept loop.
    fn accepted(&self) -> Option<Accepted> {
        let mut state = self.state();
        if state.lost {
            return None;
        }
        let (id, reset) = state.pending.pop_front()?;
        Some(Accepted { id, reset })
    }

    /// A frame header the client sent.
    fn received(&self, kind: u8, stream: u32) {
        match kind {
            HEADERS => {
                let mut state = self.state();
                // Trailers come on an open stream; a new stream has a higher id than any.
                if stream > state.last_opened {
                    state.last_opened = stream;
                    if state.pending.len() >= MAX_PENDING {
                        state.lost = true;
                        state.pending = VecDeque::new();
                    }
                    if !state.lost {
                        state.pending.push_back((stream, false));
                    }
                }
            }
            RST_STREAM => {
                let mut state = self.state();
                state.resets += 1;
                if let Some(pending) = state.pending.iter_mut().find(|(id, _)| *id == stream) {
                    pending.1 = true;
                } else if stream <= state.last_opened && !state.lost {
                    state.reset_ids.push(stream);
                }
                drop(state);
                self.event.notify_one();
            }
            _ => {}
        }
    }

    /// A frame header the gateway sent: a stream h2 reset before accepting it is never
    /// accepted.
    fn sent(&self, kind: u8, stream: u32) {
        if kind == RST_STREAM {
            self.state().pending.retain(|(id, _)| *id != stream);
        }
    }
}

/// Follows the frame headers in one direction of a connection.
struct FrameReader {
    /// Bytes still to skip before the first frame (the client preface).
    skip: usize,
    header: [u8; 9],
    have: usize,
    /// Bytes of the current frame's payload still to skip.
    payload: usize,
}

impl FrameReader {
    fn new(skip: usize) -> Self {
        FrameReader {
            skip,
            header: [0; 9],
            have: 0,
            payload: 0,
        }
    }

    /// Reads the next bytes of the direction, calling `frame(type, stream id)` for each frame
    /// header completed in them.
    fn feed(&mut self, mut bytes: &[u8], mut frame: impl FnMut(u8, u32)) {
        let skip = self.skip.min(bytes.len());
        self.skip -= skip;
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
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                frame(h[3], stream);
            }
        }
    }
}

/// A connection whose HTTP/2 frame headers are read as they pass, both ways (see
/// [`Frames`]). Costs a few comparisons per frame.
struct FrameTap {
    inner: Stream,
    frames: Arc<Frames>,
    incoming: FrameReader,
    outgoing: FrameReader,
}

impl FrameTap {
    fn new(inner: Stream, frames: Arc<Frames>) -> Self {
        FrameTap {
            inner,
            frames,
            incoming: FrameReader::new(PREFACE_LEN),
            outgoing: FrameReader::new(0),
        }
    }

    fn wrote(&mut self, bufs: &[io::IoSlice<'_>], mut n: usize) {
        let frames = &self.frames;
        for buf in bufs {
            if n == 0 {
                break;
            }
            let part = &buf[..n.min(buf.len())];
            n -= part.len();
            self.outgoing.feed(part, |kind, id| frames.sent(kind, id));
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
            let frames = &this.frames;
            this.incoming.feed(&buf.filled()[before..], |kind, id| {
                frames.received(kind, id)
            });
        }
        polled
    }
}

impl AsyncWrite for FrameTap {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.wrote(&[io::IoSlice::new(buf)], n);
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            this.wrote(bufs, n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
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

    /// Feeds `bytes` to a client-side reader in random pieces.
    fn received(frames: &Frames, bytes: &[u8], rng: &mut fastrand::Rng) {
        let mut reader = FrameReader::new(PREFACE_LEN);
        let mut at = 0;
        while at < bytes.len() {
            let n = rng.usize(1..=(bytes.len() - at).min(50));
            reader.feed(&bytes[at..at + n], |kind, id| frames.received(kind, id));
            at += n;
        }
    }

    #[test]
    fn resets_and_opened_streams_are_read_across_any_split_of_the_bytes() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(0x4, 6, 0)); // SETTINGS
        for id in 0..5u32 {
            bytes.extend(frame(HEADERS, 40, 2 * id + 1));
            // A payload full of bytes that look like frame types.
            let mut data = frame(0x0, 27, 2 * id + 1);
            data[9..].fill(RST_STREAM);
            bytes.extend(data);
            bytes.extend(frame(HEADERS, 3, 2 * id + 1)); // trailers: not a new stream
        }
        bytes.extend(frame(RST_STREAM, 4, 9));
        bytes.extend(frame(RST_STREAM, 4, 1));
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..200 {
            let frames = Frames::new(1);
            received(&frames, &bytes, &mut rng);
            assert_eq!(frames.state().resets, 2);
            assert!(frames.over_budget());
            let ids: Vec<_> = std::iter::from_fn(|| frames.accepted()).collect();
            let expected: Vec<_> = [1, 3, 5, 7, 9]
                .into_iter()
                .map(|id| Accepted {
                    id,
                    reset: id == 1 || id == 9,
                })
                .collect();
            assert_eq!(ids, expected);
        }
    }

    #[test]
    fn a_stream_the_gateway_reset_is_never_accepted_and_later_resets_are_reported() {
        let frames = Frames::new(0);
        for id in [1, 3, 5] {
            frames.received(HEADERS, id);
        }
        // h2 refused stream 3 (past the stream limit).
        let mut out = FrameReader::new(0);
        let mut written = frame(0x4, 0, 0);
        written.extend(frame(RST_STREAM, 4, 3));
        out.feed(&written, |kind, id| frames.sent(kind, id));
        assert_eq!(
            frames.accepted(),
            Some(Accepted {
                id: 1,
                reset: false
            })
        );
        assert_eq!(
            frames.accepted(),
            Some(Accepted {
                id: 5,
                reset: false
            })
        );
        assert_eq!(frames.accepted(), None);
        frames.received(RST_STREAM, 5);
        frames.received(RST_STREAM, 99); // never opened: nothing to stop
        assert_eq!(frames.take_resets(), vec![5]);
        assert!(frames.take_resets().is_empty());
        assert!(!frames.over_budget(), "no budget: never over");
    }

    #[test]
    fn too_many_waiting_streams_give_the_mapping_up_but_resets_still_count() {
        let frames = Frames::new(10);
        for i in 0..=MAX_PENDING as u32 {
            frames.received(HEADERS, 2 * i + 1);
        }
        assert_eq!(frames.accepted(), None);
        frames.received(RST_STREAM, 1);
        assert!(frames.take_resets().is_empty());
        assert_eq!(frames.state().resets, 1);
    }

    #[tokio::test]
    async fn a_stream_reset_wakes_its_waiter_and_stays_reset() {
        let reset = Arc::new(StreamReset::default());
        let waiter = tokio::spawn({
            let reset = reset.clone();
            async move { reset.reset().await }
        });
        tokio::task::yield_now().await;
        reset.fire();
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(1), reset.reset())
            .await
            .unwrap();
        assert!(current_stream().is_none(), "not in a stream's task");
        let inside = STREAM.scope(reset.clone(), async { current_stream().is_some() });
        assert!(inside.await);
    }
}
