//! The HTTP/2 client of the gRPC backends: one unary call over one cleartext HTTP/2
//! connection (prior knowledge, as every gRPC backend speaks it), with the `h2` crate
//! directly.
//!
//! A [`GrpcChannel`] is one endpoint's connection, dialled on first use and dialled again
//! once it has closed (the backend went away, sent GOAWAY, or stopped answering PINGs).
//! One call dials at a time; the calls waiting for it take its outcome, a failure included
//! (so an endpoint that drops SYNs costs them one connect timeout, not one each in turn). Its
//! calls are multiplexed on it: a call takes a handle to the connection, opens a stream,
//! sends the request's HEADERS and its one DATA frame, and reads the reply's HEADERS, DATA
//! and trailers; nothing is buffered or re-scheduled between the caller and the connection
//! (tonic's `Channel` runs every call through a `tower::Buffer` task and a stack of boxed
//! services: one task hop and several allocations per call, which this client leaves out;
//! benches/RESULTS.md, "Transcoded gRPC vs HTTP passthrough").
//!
//! The connection's I/O runs in a task of its own on the runtime that dialled it. By
//! default it sends no HTTP/2 PINGs at all, as gRPC's own clients default: grpc-core servers
//! allow one ping per 5 minutes at most (none without data) and answer more with GOAWAY
//! `ENHANCE_YOUR_CALM` ("too_many_pings"), killing every call on the connection; a dead
//! peer is noticed by the call's deadline. When a keep-alive interval is configured, the
//! task PINGs every interval *while calls are in flight* (a backend that does not answer
//! one within the keep-alive timeout is taken as dead and the connection dropped); an idle
//! connection is never pinged, and a connection closed with `ENHANCE_YOUR_CALM` doubles the
//! channel's interval for the next connection (grpc-go's client does the same).
//!
//! What the call reports ([`CallError`]) is what the invoke tier needs to decide: whether
//! anything reached the backend ([`CallError::Unreachable`]: the connection could not be
//! made, or the backend refused the stream unprocessed, so another endpoint may be
//! tried), a transport failure after the request went out, a reply over the size limit,
//! or the backend's own status (from the trailers, from a trailers-only reply, or, for a
//! reply that is not gRPC at all, the HTTP status mapped as gRPC's
//! `http-grpc-status-mapping` says).

use bytes::{Buf, Bytes, BytesMut};
use h2::client::SendRequest;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, TE};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Uri};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::{Code, Status};

/// The receive window per stream: a reply up to this size arrives without waiting for a
/// WINDOW_UPDATE (HTTP/2's default is 64 KiB).
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
/// The receive window of the whole connection.
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// How many times a stream the backend refused (`REFUSED_STREAM`) is sent again on the same
/// connection before the call is reported [`CallError::Unreachable`].
const REFUSED_RETRIES: u32 = 2;
/// The largest header block accepted from a backend.
const MAX_HEADER_LIST: u32 = 64 * 1024;

static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
static GRPC_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("grpc-accept-encoding");
/// The encodings the gateway takes in replies (gRPC's compression spec): a backend may
/// compress its replies with gzip; requests are compressed only where the cluster says
/// ([`ChannelSettings::compress_min_bytes`]).
static ACCEPTED_ENCODINGS: HeaderValue = HeaderValue::from_static("identity,gzip");
static GZIP: HeaderValue = HeaderValue::from_static("gzip");

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// Nothing reached the backend: no connection could be made, or the backend refused
    /// the stream before processing it (`REFUSED_STREAM`). Safe to try elsewhere.
    Unreachable(String),
    /// The connection or the stream failed after the request went out, or the reply
    /// broke the gRPC protocol.
    Transport(String),
    /// The reply's message is larger than the limit (bytes).
    TooLarge(usize),
    /// The backend answered a non-OK status.
    Status(Status),
}

/// A successful reply: the response headers (the backend's metadata) and the message.
#[derive(Debug)]
pub struct Reply {
    pub headers: HeaderMap,
    pub message: Bytes,
}

/// Settings of a channel's connection (a cluster's `grpc` settings with the gateway's
/// defaults filled in; docs/operations/clusters.md, "gRPC client settings"). Channels are pooled per
/// endpoint *and* settings, so two clusters naming one address with different settings
/// each get their own connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelSettings {
    /// How long dialling may take (TCP connect and the HTTP/2 preface).
    pub connect_timeout: Duration,
    /// PING interval while calls are in flight (zero: no pings).
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is taken as dead.
    pub keepalive_timeout: Duration,
    /// Requests whose message has at least this many bytes are sent gzip-compressed
    /// (`None`: never).
    pub compress_min_bytes: Option<usize>,
}

/// One endpoint's HTTP/2 connection (see the module docs).
#[derive(Debug)]
pub struct GrpcChannel {
    addr: String,
    authority: Authority,
    settings: ChannelSettings,
    live: Mutex<Option<Live>>,
    /// Held while dialling, so concurrent first calls make one connection.
    dialling: tokio::sync::Mutex<()>,
    /// The last dial that failed: when, and why. Calls that were waiting for it take its
    /// outcome instead of dialling again one after another (an endpoint that drops SYNs
    /// would otherwise hold each for the whole connect timeout in turn).
    failed: Mutex<Option<(tokio::time::Instant, String)>>,
    /// Dials attempted (for the tests).
    dials: AtomicUsize,
    /// The keep-alive interval in force (ms; 0: none): the configured one, doubled each
    /// time a connection was closed for pinging too often.
    keepalive_ms: AtomicU64,
}

/// The connection in use: a handle to open streams on it, and its shared state.
#[derive(Debug, Clone)]
struct Live {
    send: SendRequest<Bytes>,
    state: Arc<ConnState>,
}

#[derive(Debug)]
struct ConnState {
    /// Set when the connection's task has ended, or a call found it unusable.
    closed: AtomicBool,
    /// Calls in flight (the keep-alive pings only while there are some).
    in_flight: AtomicUsize,
    /// Writes to the socket so far ([`Counted`]).
    writes: AtomicU64,
    /// `writes` when the socket ended: its read side reached the end or failed, or a write
    /// failed (the backend closed or reset the connection); `u64::MAX` while it works.
    ended_at: AtomicU64,
    /// Set when the backend closed the connection with GOAWAY `ENHANCE_YOUR_CALM` (too
    /// many pings): the next connection pings half as often.
    calm_down: AtomicBool,
}

impl Default for ConnState {
    fn default() -> Self {
        ConnState {
            closed: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            writes: AtomicU64::new(0),
            ended_at: AtomicU64::new(u64::MAX),
            calm_down: AtomicBool::new(false),
        }
    }
}

impl ConnState {
    /// Whether the socket ended before anything was written after `queued_at` (a value of
    /// `writes`): then a stream queued at that point never reached the backend. This is how
    /// a backend that went away while the connection sat idle is found by the next call:
    /// h2 reads the socket before it writes queued streams, and the write of the call's
    /// frames to a reset socket fails whole.
    fn ended_before_write(&self, queued_at: u64) -> bool {
        self.ended_at.load(Ordering::Acquire) <= queued_at
    }

    /// Notes that the socket ended (the first time only).
    fn end(&self) {
        let writes = self.writes.load(Ordering::Acquire);
        let _ =
            self.ended_at
                .compare_exchange(u64::MAX, writes, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The connection's socket, counting writes and noting when it ends, so a call
/// failed by the connection can tell whether any of it was sent ([`ConnState::ended_before_write`]).
#[derive(Debug)]
struct Counted {
    io: tokio::net::TcpStream,
    state: Arc<ConnState>,
}

impl Counted {
    fn wrote(&self, r: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        match &r {
            Poll::Ready(Ok(n)) if *n > 0 => {
                self.state.writes.fetch_add(1, Ordering::Release);
            }
            Poll::Ready(Err(_)) => self.state.end(),
            _ => {}
        }
        r
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let ended = match &r {
            Poll::Ready(Ok(())) => room && buf.filled().len() == before,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            self.state.end();
        }
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Counts a call in flight for as long as it lives.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn enter(state: &Arc<ConnState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl GrpcChannel {
    /// A channel to `addr` (`host:port`); nothing is dialled until the first call.
    pub fn new(addr: &str, settings: ChannelSettings) -> Result<Self, String> {
        let authority: Authority = addr
            .parse()
            .map_err(|e| format!("bad gRPC endpoint address {addr}: {e}"))?;
        if authority.port_u16().is_none() {
            return Err(format!("bad gRPC endpoint address {addr}: no port"));
        }
        Ok(GrpcChannel {
            addr: addr.to_owned(),
            authority,
            settings,
            live: Mutex::new(None),
            dialling: tokio::sync::Mutex::new(()),
            failed: Mutex::new(None),
            dials: AtomicUsize::new(0),
            keepalive_ms: AtomicU64::new(
                u64::try_from(settings.keepalive_interval.as_millis()).unwrap_or(u64::MAX),
            ),
        })
    }

    /// Calls `path` with one `frame` (the length-prefixed message, [`frame`]) and `headers`
    /// (the metadata; `content-type`, `te` and `grpc-timeout` are set here), and reads the
    /// reply, refusing a message over `max_reply` bytes. The caller bounds the whole call
    /// with its deadline; dropping the future resets the stream.
    pub async fn unary(
        &self,
        path: &PathAndQuery,
        mut headers: HeaderMap,
        frame: Bytes,
        timeout: Duration,
        max_reply: usize,
    ) -> Result<Reply, CallError> {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        headers.insert(GRPC_TIMEOUT.clone(), grpc_timeout(timeout));
        headers.insert(GRPC_ACCEPT_ENCODING.clone(), ACCEPTED_ENCODINGS.clone());
        let frame = match self.settings.compress_min_bytes {
            Some(min) if frame.len().saturating_sub(5) >= min => {
                match compressed_frame(frame.get(5..).unwrap_or_default()) {
                    Some(gz) => {
                        headers.insert(GRPC_ENCODING.clone(), GZIP.clone());
                        gz
                    }
                    None => frame,
                }
            }
            _ => frame,
        };
        let uri = self.uri(path)?;
        let started = tokio::time::Instant::now();
        let mut refused = 0;
        let mut redialled = false;
        // A stream the backend refused (`REFUSED_STREAM`: never processed, RFC 9113 §8.7) is
        // sent again on the same connection, as gRPC's own clients do transparently: a
        // backend refuses a stream over its `SETTINGS_MAX_CONCURRENT_STREAMS` when the
        // stream went out before its SETTINGS arrived (h2 queues streams over the limit
        // once it knows it). A stream above a GOAWAY's last stream, or queued on a connection
        // the backend closed before any of it was written, was not processed either: it is
        // sent once more on a fresh connection (a backend stopping gracefully, or restarted
        // while the connection sat idle). The caller's deadline bounds the whole.
        let (response, _in_flight) = loop {
            let mut request = Request::new(());
            *request.method_mut() = Method::POST;
            *request.uri_mut() = uri.clone();
            *request.headers_mut() = if refused < REFUSED_RETRIES || !redialled {
                headers.clone()
            } else {
                std::mem::take(&mut headers)
            };
            let (response, state, queued_at, mut send) = self.open(request, frame.clone()).await?;
            let in_flight = InFlight::enter(&state);
            let answered = response.await;
            let left = timeout.saturating_sub(started.elapsed());
            let e = match answered {
                Ok(response) => {
                    if redialled || left.is_zero() || !cancelled_at_shutdown(&response, &mut send) {
                        break (response, in_flight);
                    }
                    // grpc-core's graceful stop cancels the calls that reached it after its
                    // GOAWAY but before a handler took them: never processed.
                    redialled = true;
                    state.closed.store(true, Ordering::Relaxed);
                    tracing::info!(addr = %self.addr, "gRPC call cancelled by a backend going away; sending it on a fresh connection");
                    headers.insert(GRPC_TIMEOUT.clone(), grpc_timeout(left));
                    continue;
                }
                Err(e) => e,
            };
            if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
                if refused >= REFUSED_RETRIES || left.is_zero() {
                    return Err(failed_before_reply(e, &state, queued_at));
                }
                refused += 1;
                tracing::debug!(addr = %self.addr, refused, "gRPC stream refused; sending it again");
                tokio::time::sleep(Duration::from_millis(2 * refused as u64)).await;
            } else {
                let failed = failed_before_reply(e, &state, queued_at);
                if redialled || left.is_zero() || !matches!(failed, CallError::Unreachable(_)) {
                    return Err(failed);
                }
                redialled = true;
                state.closed.store(true, Ordering::Relaxed);
                if let CallError::Unreachable(why) = &failed {
                    tracing::debug!(addr = %self.addr, "gRPC call not taken ({why}); sending it on a fresh connection");
                }
            }
            let left = timeout.saturating_sub(started.elapsed());
            headers.insert(GRPC_TIMEOUT.clone(), grpc_timeout(left));
        };
        let (parts, mut body) = response.into_parts();
        if parts.status != http::StatusCode::OK {
            // Not a gRPC reply (a proxy's, or a plain HTTP server's).
            return Err(CallError::Status(Status::new(
                code_of_http_status(parts.status.as_u16()),
                format!("the backend answered HTTP status {}", parts.status.as_u16()),
            )));
        }
        if let Some(status) = status_of(&parts.headers)? {
            // Trailers-only: a status and nothing else.
            return Err(CallError::Status(if status.code() == Code::Ok {
                Status::internal("the backend answered OK without a message")
            } else {
                status
            }));
        }
        let (compressed, message) = read_message(&mut body, max_reply).await?;
        let message = if compressed {
            decompress(parts.headers.get(&GRPC_ENCODING), &message, max_reply)?
        } else {
            message
        };
        let trailers = body
            .trailers()
            .await
            .map_err(|e| CallError::Transport(e.to_string()))?
            .unwrap_or_default();
        match status_of(&trailers)? {
            Some(status) if status.code() == Code::Ok => Ok(Reply {
                headers: parts.headers,
                message,
            }),
            Some(status) => Err(CallError::Status(status)),
            None => Err(CallError::Transport(
                "the reply ended without a grpc-status".into(),
            )),
        }
    }

    fn uri(&self, path: &PathAndQuery) -> Result<Uri, CallError> {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path.clone());
        Uri::from_parts(parts).map_err(|e| {
            CallError::Unreachable(format!("bad request URI for {}{path}: {e}", self.addr))
        })
    }

    /// Opens the call's stream and sends the request on it. A connection found closed
    /// before anything was sent on it is replaced once by a fresh one.
    async fn open(
        &self,
        request: Request<()>,
        frame: Bytes,
    ) -> Result<
        (
            h2::client::ResponseFuture,
            Arc<ConnState>,
            u64,
            SendRequest<Bytes>,
        ),
        CallError,
    > {
        let mut fresh = false;
        let (mut send, state) = loop {
            let live = match self.current() {
                Some(live) => live,
                None => {
                    fresh = true;
                    self.connect().await.map_err(CallError::Unreachable)?
                }
            };
            match live.send.ready().await {
                Ok(send) => break (send, live.state),
                Err(e) => {
                    // The connection cannot take a stream (closed, GOAWAY): nothing was
                    // sent on it.
                    live.state.closed.store(true, Ordering::Relaxed);
                    if fresh {
                        return Err(CallError::Unreachable(format!(
                            "the connection failed before the call went out: {e}"
                        )));
                    }
                    fresh = true;
                    tracing::debug!(addr = %self.addr, "gRPC connection unusable ({e}); dialling again");
                }
            }
        };
        let queued_at = state.writes.load(Ordering::Acquire);
        let (response, mut stream) = send.send_request(request, false).map_err(|e| {
            // The connection went away since `ready` (not a header h2 refuses to send).
            if e.is_go_away() || e.is_io() {
                state.closed.store(true, Ordering::Relaxed);
            }
            CallError::Unreachable(format!(
                "the connection failed before the call went out: {e}"
            ))
        })?;
        stream
            .send_data(frame, true)
            .map_err(|e| CallError::Transport(e.to_string()))?;
        Ok((response, state, queued_at, send))
    }

    /// The open connection, if any.
    fn current(&self) -> Option<Live> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.as_ref()
            .filter(|l| !l.state.closed.load(Ordering::Relaxed))
            .cloned()
    }

    /// Dials (or waits for a concurrent call's dial) and installs the new connection.
    async fn connect(&self) -> Result<Live, String> {
        let asked = tokio::time::Instant::now();
        let _dialling = self.dialling.lock().await;
        if let Some(live) = self.current() {
            return Ok(live);
        }
        if let Some((at, why)) = &*self.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            if *at >= asked {
                // A dial that failed while this call waited for it.
                return Err(why.clone());
            }
        }
        self.dials.fetch_add(1, Ordering::Relaxed);
        let calmed = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|l| l.state.calm_down.swap(false, Ordering::Relaxed));
        if calmed {
            let ms = self.keepalive_ms.load(Ordering::Relaxed);
            if ms > 0 {
                let doubled = ms.saturating_mul(2);
                self.keepalive_ms.store(doubled, Ordering::Relaxed);
                tracing::warn!(addr = %self.addr, keepalive_ms = doubled, "the gRPC backend closed the connection for too many pings; pinging half as often");
            }
        }
        let dialled = tokio::time::timeout(self.settings.connect_timeout, self.dial())
            .await
            .map_err(|_| {
                format!(
                    "no connection within {} ms",
                    self.settings.connect_timeout.as_millis()
                )
            })
            .and_then(|r| r);
        match dialled {
            Ok(live) => {
                *self.live.lock().unwrap_or_else(|e| e.into_inner()) = Some(live.clone());
                Ok(live)
            }
            Err(why) => {
                *self.failed.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((tokio::time::Instant::now(), why.clone()));
                Err(why)
            }
        }
    }

    async fn dial(&self) -> Result<Live, String> {
        let tcp = tokio::net::TcpStream::connect(self.addr.as_str())
            .await
            .map_err(|e| format!("tcp connect error: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let state = Arc::new(ConnState::default());
        let tcp = Counted {
            io: tcp,
            state: state.clone(),
        };
        let (send, mut connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(MAX_HEADER_LIST)
            .enable_push(false)
            // Until the backend's SETTINGS arrive its stream limit is unknown; h2 would take
            // it as unlimited and a burst of calls on a fresh connection would be refused
            // past the backend's limit (and a backend refusing many streams at once may reset
            // them with something else than REFUSED_STREAM). One stream goes out, the others
            // wait in h2's queue for the SETTINGS, a round trip at most.
            .initial_max_send_streams(1)
            .handshake::<_, Bytes>(tcp)
            .await
            .map_err(|e| format!("HTTP/2 handshake failed: {e}"))?;
        let ping = connection.ping_pong();
        let settings = ChannelSettings {
            keepalive_interval: Duration::from_millis(self.keepalive_ms.load(Ordering::Relaxed)),
            ..self.settings
        };
        tokio::spawn(drive(
            connection,
            ping,
            state.clone(),
            self.addr.clone(),
            settings,
        ));
        Ok(Live { send, state })
    }
}

/// The connection's task: its I/O, and the keep-alive pings while calls are in flight.
async fn drive(
    connection: h2::client::Connection<Counted, Bytes>,
    mut ping: Option<h2::PingPong>,
    state: Arc<ConnState>,
    addr: String,
    settings: ChannelSettings,
) {
    let interval = settings.keepalive_interval;
    let mut connection = std::pin::pin!(connection);
    let ended = |done: Result<(), h2::Error>| {
        let e = done.err()?;
        if e.is_go_away() && e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) {
            state.calm_down.store(true, Ordering::Relaxed);
        }
        Some(e.to_string())
    };
    let why = loop {
        tokio::select! {
            biased;
            done = &mut connection => break ended(done),
            _ = tokio::time::sleep(interval), if !interval.is_zero() => {}
        }
        let Some(ping) = ping.as_mut() else { continue };
        if state.in_flight.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let pong = tokio::time::timeout(settings.keepalive_timeout, ping.ping(h2::Ping::opaque()));
        tokio::select! {
            biased;
            done = &mut connection => break ended(done),
            answered = pong => match answered {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => break Some(format!("PING failed: {e}")),
                Err(_) => break Some(format!(
                    "no PING answer within {} ms", settings.keepalive_timeout.as_millis()
                )),
            },
        }
    };
    state.closed.store(true, Ordering::Relaxed);
    match why {
        Some(why) => tracing::info!(addr = %addr, "gRPC connection closed: {why}"),
        None => tracing::debug!(addr = %addr, "gRPC connection closed"),
    }
}

/// Whether `response` is a trailers-only `CANCELLED` on a connection the backend has sent
/// GOAWAY on (`send` cannot open streams any more): what grpc-core answers, during a graceful
/// stop, to the calls that reached it after its GOAWAY but before a handler took them. Such a
/// call was never processed, so it is sent again on a fresh connection. (A handler that
/// cancels its own call with nothing sent, on a server that happens to be shutting down, is
/// the one case sent twice; gRPC servers do not answer CANCELLED of their own accord.)
fn cancelled_at_shutdown(
    response: &http::Response<h2::RecvStream>,
    send: &mut SendRequest<Bytes>,
) -> bool {
    let cancelled = response.status() == http::StatusCode::OK
        && response
            .headers()
            .get(&GRPC_STATUS)
            .is_some_and(|v| v.as_bytes() == b"1");
    if !cancelled {
        return false;
    }
    // A handle with no stream pending answers at once: an error once a GOAWAY arrived.
    let mut cx = Context::from_waker(std::task::Waker::noop());
    matches!(send.poll_ready(&mut cx), Poll::Ready(Err(_)))
}

/// What a stream that failed before its reply's headers means: the backend did not take
/// the call ([`CallError::Unreachable`], so another endpoint may be tried) when it refused
/// the stream, when its GOAWAY named an earlier last stream (RFC 9113 §6.8: streams above it
/// were not processed), or when it closed the connection before any of the call was
/// written (`queued_at`, [`ConnState::ended_before_write`]); otherwise the call may have
/// reached it ([`CallError::Transport`]).
fn failed_before_reply(e: h2::Error, state: &ConnState, queued_at: u64) -> CallError {
    if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        CallError::Unreachable(format!("the backend refused the stream: {e}"))
    } else if e.is_go_away() && e.is_remote() {
        CallError::Unreachable(format!(
            "the backend is going away and did not take the call: {e}"
        ))
    } else if e.is_io() && state.ended_before_write(queued_at) {
        CallError::Unreachable(format!(
            "the backend closed the connection before the call was sent: {e}"
        ))
    } else {
        CallError::Transport(e.to_string())
    }
}

/// The gRPC frame of `message` gzip-compressed: the compression flag (1), the compressed
/// length, the compressed bytes (`None` if gzip failed, which writing into memory does not).
fn compressed_frame(message: &[u8]) -> Option<Bytes> {
    use std::io::Write;
    let mut out = Vec::with_capacity(5 + message.len() / 2);
    out.extend_from_slice(&[1, 0, 0, 0, 0]);
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    gz.write_all(message).ok()?;
    let mut out = gz.finish().ok()?;
    let len = u32::try_from(out.len() - 5).ok()?.to_be_bytes();
    out[1..5].copy_from_slice(&len);
    Some(Bytes::from(out))
}

/// The gRPC frame of one message: the compression flag (0), its length, the message.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

/// Reads the reply's one message (unframed) and whether it is compressed, refusing one over
/// `max` bytes as soon as its length is known (a compressed one may be a little larger: gzip
/// of incompressible data is; its size once decompressed is bounded by [`decompress`]).
async fn read_message(body: &mut h2::RecvStream, max: usize) -> Result<(bool, Bytes), CallError> {
    let mut buf = BytesMut::new();
    let mut expected: Option<usize> = None;
    let mut first: Option<Bytes> = None;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| CallError::Transport(e.to_string()))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if first.is_none() && buf.is_empty() {
            first = Some(chunk);
        } else {
            if let Some(f) = first.take() {
                buf.extend_from_slice(&f);
            }
            buf.extend_from_slice(&chunk);
        }
        let seen: &[u8] = first.as_deref().unwrap_or(&buf);
        if expected.is_none() && seen.len() >= 5 {
            let limit = match seen[0] {
                0 => max,
                1 => max.saturating_add(max / 1024 + 1024),
                flag => {
                    return Err(CallError::Transport(format!(
                        "the reply's message has an unknown compressed flag {flag}"
                    )))
                }
            };
            let len = u32::from_be_bytes([seen[1], seen[2], seen[3], seen[4]]) as usize;
            if len > limit {
                return Err(CallError::TooLarge(max));
            }
            expected = Some(5 + len);
        }
        if let Some(n) = expected {
            if seen.len() > n {
                return Err(CallError::Transport(
                    "the reply holds more than one message".into(),
                ));
            }
        }
    }
    let mut whole = match first {
        Some(f) => f,
        None => buf.freeze(),
    };
    match expected {
        Some(n) if whole.len() == n => {
            let compressed = whole[0] == 1;
            whole.advance(5);
            Ok((compressed, whole))
        }
        Some(_) => Err(CallError::Transport(
            "the reply's message is cut short".into(),
        )),
        None if whole.is_empty() => Err(CallError::Transport(
            "the backend answered OK without a message".into(),
        )),
        None => Err(CallError::Transport(
            "the reply's frame is cut short".into(),
        )),
    }
}

/// The message of a compressed reply, decompressed by the reply's `grpc-encoding`: gzip is
/// the only one the gateway asks for ([`ACCEPTED_ENCODINGS`]); any other (or none) is a
/// broken reply. The decompressed size is bounded by `max` as it is produced, so a small
/// compressed "bomb" is refused ([`CallError::TooLarge`]) with at most `max` + 8 KiB held.
fn decompress(
    encoding: Option<&HeaderValue>,
    message: &[u8],
    max: usize,
) -> Result<Bytes, CallError> {
    use std::io::Read;
    match encoding.map(HeaderValue::as_bytes) {
        Some(b"gzip") => {}
        Some(other) => {
            return Err(CallError::Transport(format!(
                "the reply is compressed with {:?}, which the gateway does not take (it accepts identity and gzip)",
                String::from_utf8_lossy(other)
            )))
        }
        None => {
            return Err(CallError::Transport(
                "the reply is compressed but names no grpc-encoding".into(),
            ))
        }
    }
    let mut out = Vec::with_capacity(message.len().saturating_mul(4).min(max).min(1 << 20));
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    flate2::read::GzDecoder::new(message)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| CallError::Transport(format!("the reply's gzip data is broken: {e}")))?;
    if out.len() > max {
        return Err(CallError::TooLarge(max));
    }
    Ok(Bytes::from(out))
}

/// The status in `headers` (`grpc-status`, `grpc-message` percent-decoded), if any.
fn status_of(headers: &HeaderMap) -> Result<Option<Status>, CallError> {
    let Some(code) = headers.get(&GRPC_STATUS) else {
        return Ok(None);
    };
    let code = code
        .to_str()
        .ok()
        .and_then(|c| c.parse::<i32>().ok())
        .ok_or_else(|| CallError::Transport(format!("bad grpc-status {code:?}")))?;
    let message = headers
        .get(&GRPC_MESSAGE)
        .map(|m| {
            percent_encoding::percent_decode(m.as_bytes())
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    Ok(Some(Status::with_metadata(
        Code::from_i32(code),
        message,
        tonic::metadata::MetadataMap::from_headers(headers.clone()),
    )))
}

/// The gRPC code of a reply that is not gRPC, by its HTTP status (gRPC's
/// `doc/http-grpc-status-mapping.md`).
fn code_of_http_status(status: u16) -> Code {
    match status {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// `grpc-timeout` for `timeout`: whole milliseconds rounded up (at most 8 digits, as the
/// protocol allows), else whole seconds, else hours. Never indexed by HPACK: it changes
/// with every call, and indexing it would only push the constant headers out of the table.
fn grpc_timeout(timeout: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let ms = timeout.as_nanos().div_ceil(1_000_000).max(1);
    let text = if ms <= MAX {
        format!("{ms}m")
    } else if ms.div_ceil(1000) <= MAX {
        format!("{}S", ms.div_ceil(1000))
    } else {
        format!("{}H", ms.div_ceil(3_600_000).min(MAX))
    };
    // Digits and a unit are always a header value; the fallback is the longest deadline.
    let mut value =
        HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static("99999999H"));
    value.set_sensitive(true);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn gzip_replies_are_decompressed_within_the_limit() {
        let gz = HeaderValue::from_static("gzip");
        let message: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
        let out = decompress(Some(&gz), &gzip(&message), 100_000).unwrap();
        assert_eq!(&out[..], &message[..]);
        // One byte over the limit once decompressed.
        assert!(matches!(
            decompress(Some(&gz), &gzip(&message), 99_999),
            Err(CallError::TooLarge(99_999))
        ));
    }

    #[test]
    fn a_compression_bomb_is_refused_without_growing_memory() {
        // 1 GiB of zeros is ~1 MiB gzipped; decompression stops past the 4 MiB limit.
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            std::io::Write::write_all(&mut e, &zeros).unwrap();
        }
        let bomb = e.finish().unwrap();
        assert!(bomb.len() < 2 << 20, "{}", bomb.len());
        let started = std::time::Instant::now();
        let gz = HeaderValue::from_static("gzip");
        assert!(matches!(
            decompress(Some(&gz), &bomb, 4 << 20),
            Err(CallError::TooLarge(_))
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn unknown_or_missing_encodings_and_broken_gzip_are_refused() {
        let data = gzip(b"hello");
        for (encoding, says) in [
            (Some(HeaderValue::from_static("snappy")), "\"snappy\""),
            (Some(HeaderValue::from_static("deflate")), "\"deflate\""),
            (None, "names no grpc-encoding"),
        ] {
            match decompress(encoding.as_ref(), &data, 1024) {
                Err(CallError::Transport(why)) => assert!(why.contains(says), "{why}"),
                other => panic!("{other:?}"),
            }
        }
        let gz = HeaderValue::from_static("gzip");
        match decompress(Some(&gz), b"not gzip at all", 1024) {
            Err(CallError::Transport(why)) => assert!(why.contains("gzip data is broken"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn grpc_timeout_fits_eight_digits_and_rounds_up() {
        let t = |d: Duration| grpc_timeout(d).to_str().unwrap().to_owned();
        assert_eq!(t(Duration::from_micros(1)), "1m");
        assert_eq!(t(Duration::from_micros(1500)), "2m");
        assert_eq!(t(Duration::from_secs(30)), "30000m");
        assert_eq!(t(Duration::from_secs(100_000)), "100000S");
        assert_eq!(t(Duration::from_secs(400_000_000)), "111112H");
        assert!(grpc_timeout(Duration::from_secs(1)).is_sensitive());
    }

    #[test]
    fn frames_are_length_prefixed() {
        assert_eq!(&frame(b"abc")[..], &[0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(&frame(b"")[..], &[0, 0, 0, 0, 0]);
    }

    #[test]
    fn statuses_come_from_grpc_status_and_grpc_message() {
        let mut h = HeaderMap::new();
        assert!(status_of(&h).unwrap().is_none());
        h.insert(&GRPC_STATUS, HeaderValue::from_static("5"));
        h.insert(
            &GRPC_MESSAGE,
            HeaderValue::from_static("order%2042%20not%20found"),
        );
        let s = status_of(&h).unwrap().unwrap();
        assert_eq!(
            (s.code(), s.message()),
            (Code::NotFound, "order 42 not found")
        );
        h.insert(&GRPC_STATUS, HeaderValue::from_static("five"));
        assert!(matches!(status_of(&h), Err(CallError::Transport(_))));
    }

    #[test]
    fn http_statuses_map_as_grpc_says() {
        for (http, code) in [
            (400, Code::Internal),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::Unimplemented),
            (429, Code::Unavailable),
            (502, Code::Unavailable),
            (503, Code::Unavailable),
            (504, Code::Unavailable),
            (500, Code::Unknown),
            (302, Code::Unknown),
        ] {
            assert_eq!(code_of_http_status(http), code, "{http}");
        }
    }

    fn settings() -> ChannelSettings {
        ChannelSettings {
            connect_timeout: Duration::from_secs(1),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            compress_min_bytes: None,
        }
    }

    #[test]
    fn addresses_need_a_port() {
        let s = settings();
        assert!(GrpcChannel::new("127.0.0.1:50051", s).is_ok());
        assert!(GrpcChannel::new("backend.internal:50051", s).is_ok());
        assert!(GrpcChannel::new("127.0.0.1", s).is_err());
        assert!(GrpcChannel::new("not a host:port", s).is_err());
    }

    /// How the test server answers a call.
    #[derive(Clone, Copy, Debug)]
    enum Answer {
        /// The request's message back, then OK.
        Echo,
        /// Echo, then GOAWAY: the connection closes after the call.
        EchoThenGoAway,
        /// An HTTP status and no gRPC at all.
        Http(u16),
        /// A status in the headers and nothing else.
        TrailersOnly(&'static str),
        /// The message twice.
        TwoMessages,
        /// A message marked compressed.
        Compressed,
        /// `REFUSED_STREAM` before looking at the call.
        Refuse,
        /// `REFUSED_STREAM` for the first two streams of a connection, then Echo.
        RefuseTwice,
        /// Takes the call, then stops reading the connection (PINGs go unanswered).
        Freeze,
    }

    /// A plaintext HTTP/2 server on a free loopback port answering every call as `answer`
    /// says; counts the connections it accepts.
    async fn server(answer: Answer) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tcp).await.unwrap();
                    let mut streams = 0;
                    while let Some(call) = conn.accept().await {
                        let Ok((request, mut respond)) = call else {
                            return;
                        };
                        streams += 1;
                        match answer {
                            Answer::RefuseTwice if streams <= 2 => {
                                respond.send_reset(h2::Reason::REFUSED_STREAM);
                            }
                            Answer::RefuseTwice => {
                                tokio::spawn(reply(Answer::Echo, request, respond));
                            }
                            Answer::Freeze => {
                                std::future::pending::<()>().await;
                            }
                            Answer::EchoThenGoAway => {
                                tokio::spawn(reply(answer, request, respond));
                                conn.graceful_shutdown();
                            }
                            _ => {
                                tokio::spawn(reply(answer, request, respond));
                            }
                        }
                    }
                });
            }
        });
        (addr, connections)
    }

    async fn reply(
        answer: Answer,
        request: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Bytes>,
    ) {
        if let Answer::Refuse = answer {
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            return;
        }
        // An echo is compressed as the request was.
        let encoding = request.headers().get(&GRPC_ENCODING).cloned();
        let mut body = request.into_body();
        let mut received = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            received.extend_from_slice(&chunk);
        }
        let grpc = |status: u16| {
            http::Response::builder()
                .status(status)
                .header("content-type", "application/grpc")
                .body(())
                .unwrap()
        };
        let ok = || {
            let mut t = HeaderMap::new();
            t.insert(&GRPC_STATUS, HeaderValue::from_static("0"));
            t
        };
        match answer {
            Answer::Http(status) => {
                respond.send_response(grpc(status), true).unwrap();
            }
            Answer::TrailersOnly(code) => {
                let mut r = grpc(200);
                r.headers_mut()
                    .insert(&GRPC_STATUS, HeaderValue::from_static(code));
                r.headers_mut()
                    .insert(&GRPC_MESSAGE, HeaderValue::from_static("not%20here"));
                respond.send_response(r, true).unwrap();
            }
            _ => {
                let mut out = BytesMut::from(&received[..]);
                match answer {
                    Answer::TwoMessages => out.extend_from_slice(&received),
                    Answer::Compressed => out[0] = 1,
                    _ => {}
                }
                let mut head = grpc(200);
                if let Some(e) = encoding {
                    head.headers_mut().insert(&GRPC_ENCODING, e);
                }
                let mut stream = respond.send_response(head, false).unwrap();
                stream.send_data(out.freeze(), false).unwrap();
                stream.send_trailers(ok()).unwrap();
            }
        }
    }

    async fn call(channel: &GrpcChannel, message: &[u8]) -> Result<Reply, CallError> {
        let path = PathAndQuery::from_static("/test.Echo/Echo");
        let call = channel.unary(
            &path,
            HeaderMap::new(),
            frame(message),
            Duration::from_secs(5),
            1024,
        );
        tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the call ends")
    }

    #[tokio::test]
    async fn requests_from_the_clusters_size_up_are_gzip_compressed() {
        let (addr, _) = server(Answer::Echo).await;
        let channel = GrpcChannel::new(
            &addr,
            ChannelSettings {
                compress_min_bytes: Some(100),
                ..settings()
            },
        )
        .unwrap();
        // 99 bytes go as they are; 1000 go gzip'd (the echo comes back compressed as the
        // request went, and is decompressed).
        let small = call(&channel, &[7; 99]).await.unwrap();
        assert!(!small.headers.contains_key(&GRPC_ENCODING));
        let message: Vec<u8> = (0..1000u32).map(|i| (i % 7) as u8).collect();
        let big = call(&channel, &message).await.unwrap();
        assert_eq!(big.headers[&GRPC_ENCODING], "gzip");
        assert_eq!(&big.message[..], &message[..]);
        let gz = compressed_frame(&message).unwrap();
        assert!(gz.len() < 100 && gz[0] == 1, "{}", gz.len());
    }

    #[tokio::test]
    async fn calls_share_one_connection() {
        let (addr, connections) = server(Answer::Echo).await;
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        for i in 0..5u8 {
            let reply = call(&channel, &[i; 3]).await.unwrap();
            assert_eq!(&reply.message[..], &[i; 3]);
            assert_eq!(reply.headers["content-type"], "application/grpc");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn large_messages_wait_for_flow_control_both_ways() {
        let (addr, _) = server(Answer::Echo).await;
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        // Larger than HTTP/2's default window of 64 KiB (the server's, for the request).
        let message: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let path = PathAndQuery::from_static("/test.Echo/Echo");
        for _ in 0..3 {
            let call = channel.unary(
                &path,
                HeaderMap::new(),
                frame(&message),
                Duration::from_secs(5),
                1 << 20,
            );
            let reply = tokio::time::timeout(Duration::from_secs(5), call)
                .await
                .expect("the call ends")
                .unwrap();
            assert_eq!(reply.message.len(), message.len());
            assert!(reply.message[..] == message[..]);
        }
    }

    #[tokio::test]
    async fn a_closed_connection_is_dialled_again() {
        let (addr, connections) = server(Answer::EchoThenGoAway).await;
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        for i in 0..3u8 {
            let reply = call(&channel, &[i]).await.unwrap();
            assert_eq!(&reply.message[..], &[i]);
            // The GOAWAY arrives; the next call finds the connection closed.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(connections.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        for _ in 0..2 {
            match call(&channel, b"x").await {
                Err(CallError::Unreachable(why)) => assert!(why.contains("tcp connect"), "{why}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn calls_waiting_on_a_dial_that_fails_share_its_outcome() {
        // A listener that never accepts, its queue filled: further SYNs are dropped, as by
        // a host that is down behind a firewall.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(s)) = tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(addr),
            )
            .await
            {
                queued.push(s);
            }
        }
        let probe = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await;
        if probe.is_ok() {
            // `net.ipv4.tcp_abort_on_overflow` answers RST instead: nothing hangs here.
            eprintln!("this kernel does not drop SYNs past a full accept queue; skipped");
            return;
        }
        let channel = Arc::new(
            GrpcChannel::new(
                &addr.to_string(),
                ChannelSettings {
                    connect_timeout: Duration::from_millis(300),
                    ..settings()
                },
            )
            .unwrap(),
        );
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let channel = channel.clone();
                tokio::spawn(async move { call(&channel, b"x").await })
            })
            .collect();
        for c in calls {
            match c.await.unwrap() {
                Err(CallError::Unreachable(why)) => {
                    assert!(why.contains("no connection within 300 ms"), "{why}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            channel.dials.load(Ordering::Relaxed),
            1,
            "one dial for five calls"
        );
        // A later call dials again.
        let _ = call(&channel, b"x").await;
        assert_eq!(channel.dials.load(Ordering::Relaxed), 2);
        drop(queued);
    }

    #[tokio::test]
    async fn a_refused_stream_is_sent_again_on_the_same_connection() {
        let (addr, connections) = server(Answer::RefuseTwice).await;
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        let reply = call(&channel, b"again").await.unwrap();
        assert_eq!(&reply.message[..], b"again");
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_refused_stream_is_unreachable() {
        let (addr, _) = server(Answer::Refuse).await;
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        assert!(matches!(
            call(&channel, b"x").await,
            Err(CallError::Unreachable(_))
        ));
    }

    /// What the hand-written server does with a call's HEADERS.
    #[derive(Clone, Copy, Debug)]
    enum Raw {
        /// GOAWAY naming no stream as processed (a server shutting down).
        GoAway,
        /// Closes the connection at once.
        Close,
        /// `REFUSED_STREAM`; then, when the test says so, closes the connection.
        RefuseThenCloseWhenTold,
        /// A trailers-only `CANCELLED`, after a GOAWAY naming every stream (a grpc-core
        /// server's graceful stop) when the flag is set.
        Cancel { going_away: bool },
        /// Holds the call; answers a PING with GOAWAY `ENHANCE_YOUR_CALM` "too_many_pings"
        /// and closes the connection, as grpc-core does past its ping policy.
        CalmOnPing,
    }

    /// A hand-written HTTP/2 server on a thread of its own, for the orderings h2's server
    /// cannot be made to produce; it serves one connection at a time, each the same way.
    fn raw_server(mode: Raw) -> (String, std::sync::mpsc::Sender<()>) {
        use std::io::{Read, Write};
        fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
            let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
            f.extend_from_slice(&[kind, flags]);
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(payload);
            f
        }
        const HEADERS: u8 = 1;
        const RST_STREAM: u8 = 3;
        const SETTINGS: u8 = 4;
        const PING: u8 = 6;
        const GOAWAY: u8 = 7;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tell, told) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || loop {
            let Ok((mut tcp, _)) = listener.accept() else {
                return;
            };
            let mut preface = [0u8; 24];
            if tcp.read_exact(&mut preface).is_err() {
                continue;
            }
            let _ = tcp.write_all(&frame(SETTINGS, 0, 0, &[]));
            let mut refusals = 0;
            'frames: loop {
                let mut head = [0u8; 9];
                if tcp.read_exact(&mut head).is_err() {
                    break 'frames;
                }
                let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                let mut payload = vec![0; len];
                if tcp.read_exact(&mut payload).is_err() {
                    break 'frames;
                }
                let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
                match (head[3], mode) {
                    (SETTINGS, _) if head[4] & 1 == 0 => {
                        tcp.write_all(&frame(SETTINGS, 1, 0, &[])).unwrap();
                    }
                    (HEADERS, Raw::GoAway) => {
                        // Last stream 0, NO_ERROR.
                        tcp.write_all(&frame(GOAWAY, 0, 0, &[0; 8])).unwrap();
                    }
                    (HEADERS, Raw::Close) => break 'frames,
                    (HEADERS, Raw::Cancel { going_away }) => {
                        if going_away {
                            let mut goaway = 0x7fff_ffffu32.to_be_bytes().to_vec();
                            goaway.extend_from_slice(&[0; 4]);
                            let _ = tcp.write_all(&frame(GOAWAY, 0, 0, &goaway));
                        }
                        // HPACK: `:status: 200` (static index 8), then `grpc-status: 1`
                        // as a literal without indexing; END_STREAM | END_HEADERS.
                        let mut block = vec![0x88, 0x00, 11];
                        block.extend_from_slice(b"grpc-status");
                        block.extend_from_slice(&[1, b'1']);
                        let _ = tcp.write_all(&frame(HEADERS, 0x5, stream, &block));
                    }
                    (PING, Raw::CalmOnPing) if head[4] & 1 == 0 => {
                        let mut goaway = 1u32.to_be_bytes().to_vec();
                        goaway.extend_from_slice(&0xbu32.to_be_bytes());
                        goaway.extend_from_slice(b"too_many_pings");
                        tcp.write_all(&frame(GOAWAY, 0, 0, &goaway)).unwrap();
                        std::thread::sleep(Duration::from_millis(200));
                        break 'frames;
                    }
                    (HEADERS, Raw::RefuseThenCloseWhenTold) => {
                        let refused = 7u32.to_be_bytes();
                        tcp.write_all(&frame(RST_STREAM, 0, stream, &refused))
                            .unwrap();
                        refusals += 1;
                        if refusals > REFUSED_RETRIES {
                            // The call and its retries all refused.
                            let _ = told.recv();
                            break 'frames;
                        }
                    }
                    _ => {}
                }
            }
        });
        (addr, tell)
    }

    #[tokio::test]
    async fn a_stream_above_the_goaway_last_stream_is_unreachable() {
        let (addr, _) = raw_server(Raw::GoAway);
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        match call(&channel, b"x").await {
            Err(CallError::Unreachable(why)) => assert!(why.contains("going away"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Not processed, so sent once more on a fresh connection (which went away too).
        assert_eq!(channel.dials.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_call_cancelled_by_a_backend_going_away_is_sent_on_a_fresh_connection() {
        for (going_away, dials) in [(true, 2), (false, 1)] {
            let (addr, _) = raw_server(Raw::Cancel { going_away });
            let channel = GrpcChannel::new(&addr, settings()).unwrap();
            match call(&channel, b"x").await {
                Err(CallError::Status(s)) => assert_eq!(s.code(), Code::Cancelled),
                other => panic!("{other:?}"),
            }
            // Sent again once (this server cancels every call) only when the backend was
            // going away: a CANCELLED from a server that is not is its answer.
            assert_eq!(channel.dials.load(Ordering::SeqCst), dials, "{going_away}");
        }
    }

    #[tokio::test]
    async fn a_connection_the_backend_closed_before_the_call_went_out_is_unreachable() {
        let (addr, close) = raw_server(Raw::RefuseThenCloseWhenTold);
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        // The refusal leaves the connection open.
        assert!(matches!(
            call(&channel, b"1").await,
            Err(CallError::Unreachable(_))
        ));
        close.send(()).unwrap();
        // The backend's end arrives while the connection's task cannot run (this runtime
        // has one thread, blocked here): the next call is queued on a connection that
        // still looks open, as when a backend goes away between two calls.
        std::thread::sleep(Duration::from_millis(200));
        // Never sent, so sent again on a fresh connection (whose streams this server
        // refuses: the call stays unreachable).
        match call(&channel, b"2").await {
            Err(CallError::Unreachable(why)) => assert!(why.contains("refused"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            channel.dials.load(Ordering::SeqCst),
            2,
            "one fresh connection"
        );
    }

    #[tokio::test]
    async fn no_pings_by_default_and_too_many_pings_halves_a_configured_rate() {
        // Nothing configured: the held call is never pinged (a PING would close it).
        let (addr, _) = raw_server(Raw::CalmOnPing);
        let channel = GrpcChannel::new(
            &addr,
            ChannelSettings {
                keepalive_interval: Duration::ZERO,
                ..settings()
            },
        )
        .unwrap();
        let held = tokio::time::timeout(Duration::from_millis(600), call(&channel, b"x")).await;
        assert!(held.is_err(), "still waiting for its reply: {held:?}");
        assert!(channel.current().is_some(), "the connection is still up");

        // Pinging every 50 ms: the server's GOAWAY ends the call and the connection, and the
        // next connection pings every 100 ms.
        let (addr, _) = raw_server(Raw::CalmOnPing);
        let channel = GrpcChannel::new(
            &addr,
            ChannelSettings {
                keepalive_interval: Duration::from_millis(50),
                ..settings()
            },
        )
        .unwrap();
        let pinged = call(&channel, b"x").await;
        assert!(
            matches!(&pinged, Err(CallError::Transport(_))),
            "{pinged:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = call(&channel, b"y").await;
        assert_eq!(channel.keepalive_ms.load(Ordering::Relaxed), 100);
    }

    #[tokio::test]
    async fn a_connection_closed_after_the_call_went_out_is_a_transport_failure() {
        let (addr, _) = raw_server(Raw::Close);
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        // The call may have reached the backend: not to be tried elsewhere.
        match call(&channel, b"x").await {
            Err(CallError::Transport(_)) => {}
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn statuses_and_broken_replies() {
        for (answer, check) in [
            (
                Answer::Http(404),
                (|e: &CallError| matches!(e, CallError::Status(s) if s.code() == Code::Unimplemented))
                    as fn(&CallError) -> bool,
            ),
            (
                Answer::Http(503),
                |e| matches!(e, CallError::Status(s) if s.code() == Code::Unavailable),
            ),
            (
                Answer::TrailersOnly("5"),
                |e| matches!(e, CallError::Status(s) if s.code() == Code::NotFound && s.message() == "not here"),
            ),
            (
                Answer::TrailersOnly("0"),
                |e| matches!(e, CallError::Status(s) if s.code() == Code::Internal),
            ),
            (
                Answer::TwoMessages,
                |e| matches!(e, CallError::Transport(w) if w.contains("more than one message")),
            ),
            (
                Answer::Compressed,
                |e| matches!(e, CallError::Transport(w) if w.contains("compressed")),
            ),
        ] {
            let (addr, _) = server(answer).await;
            let channel = GrpcChannel::new(&addr, settings()).unwrap();
            let e = call(&channel, b"hello").await.unwrap_err();
            assert!(check(&e), "{answer:?}: {e:?}");
        }
    }

    #[tokio::test]
    async fn a_reply_over_the_limit_is_refused() {
        let (addr, _) = server(Answer::Echo).await;
        let channel = GrpcChannel::new(&addr, settings()).unwrap();
        assert!(call(&channel, &[7; 1024]).await.is_ok());
        assert!(matches!(
            call(&channel, &[7; 1025]).await,
            Err(CallError::TooLarge(1024))
        ));
        // The connection is still good.
        assert!(call(&channel, b"ok").await.is_ok());
    }

    #[tokio::test]
    async fn a_backend_that_stops_answering_pings_is_dropped() {
        let (addr, connections) = server(Answer::Freeze).await;
        let channel = GrpcChannel::new(
            &addr,
            ChannelSettings {
                keepalive_interval: Duration::from_millis(100),
                keepalive_timeout: Duration::from_millis(200),
                ..settings()
            },
        )
        .unwrap();
        let started = std::time::Instant::now();
        // No deadline on the call itself: only the keep-alive can end it.
        match call(&channel, b"x").await {
            Err(CallError::Transport(_)) => {}
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(channel.current().is_none(), "the connection is given up");
        // The next call dials again.
        let _ = tokio::time::timeout(Duration::from_millis(300), call(&channel, b"y")).await;
        assert_eq!(connections.load(Ordering::SeqCst), 2);
    }
}
