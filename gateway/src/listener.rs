//! The traffic listeners: Pingora's HTTP proxy service behind [`CappedApp`], which owns every
//! connection from its accept (docs/SECURITY.md, "Connections"): the caps per listener and per
//! client address (`address.rs`), the TLS handshake and its deadline, HTTP/2 by Portico's own
//! accept loop (`h2.rs`: idle timeout, stream slots, reset budget, reset cancellation), and a
//! total deadline for reading an HTTP/1 request head (slowloris, [`HeadDeadlineApp`]).
//!
//! Why the TLS handshake is done here: Pingora's TLS listener handshakes before the service's
//! app sees the connection, with nothing but its 60 s read timeout, so a connection that never
//! sends a ClientHello was neither counted nor bounded. The TLS endpoint therefore listens as
//! plain TCP, and [`CappedApp`] counts the connection, then runs Pingora's own acceptor
//! (`Acceptor::tls_handshake`, the same rustls configuration and callbacks) within
//! `--tls-handshake-timeout-ms`.
//!
//! Pingora 0.9 only bounds each *read* of a request head (60 s, and no bound at all on a
//! reused keepalive connection), so a client trickling one byte a minute holds a connection
//! forever. `HttpProxy` reads the head itself, so the deadline lives one layer down, in the
//! connection: [`HeadDeadlineApp`] runs Pingora's own HTTP/1 keepalive loop (the
//! `impl ServerApp for T: HttpServerApp` of pingora-core `apps/mod.rs`) with the connection
//! wrapped in [`HeadDeadlineStream`], and hands what is not HTTP/1 (h2c, custom: Portico
//! enables neither) untouched to `HttpProxy`'s own `ServerApp`. HTTP/2 by ALPN never reaches
//! it: [`CappedApp`] serves it with `h2.rs`.
//!
//! [`HeadDeadlineStream`] is armed at the start of each request (connection start, and again
//! each time Pingora hands the connection back for keepalive reuse). While armed and before
//! any byte has arrived, nothing is timed: the idle keepalive rules of Pingora apply. The
//! first byte of a head starts the deadline; the read that brings the end of the head (the
//! empty line) disarms it. After that, reads and writes are passed straight through. When
//! the deadline passes first, the stream answers `408` (one non-blocking write, best effort)
//! and fails the read with `TimedOut`, so Pingora gives up the request head and closes the
//! connection.
//!
//! Cost on the hot path: one extra allocation per connection and one extra virtual call per
//! read/write. While armed, a read whose bytes end with the end of the head (a GET arriving
//! in one segment) is recognised in O(1) without a clock read or a timer; otherwise the bytes
//! are scanned up to the end of the head. A timer (and a clock read) exists only while a head
//! spans more than one read.
//!
//! The same stream bounds the work of reading a head (docs/SECURITY.md, "Bounded work before
//! authentication"): Pingora parses the whole head again after every read that does not
//! complete it, so a head trickled in small pieces would cost its length squared. While a
//! head is incomplete the stream holds what it reads and hands it on only when the head ends
//! or [`HEAD_RELEASE_BYTES`] are held, and a head over [`MAX_HEAD_BYTES`] is answered `431`
//! and the connection closed: a head is parsed at most a handful of times.
//!
//! Draining (docs/OPERATIONS.md, "Restarts and upgrades"): when Pingora stops accepting (a
//! SIGTERM, or the end of an upgrade's hand-over) it calls the app's `cleanup`, and
//! `HttpProxy::http_cleanup` closes every idle keepalive connection at once; a client whose
//! next request crosses that close sees a reset with no answer. [`CappedApp::cleanup`] holds
//! that close back for the drain ([`drain_linger`]): meanwhile an idle connection stays open,
//! and the next request on it is served with `Connection: close` (Pingora turns keepalive off
//! for every request read once shutdown is signalled) and the connection closed after the
//! answer, so the client moves to a new connection without losing a request. Connections still
//! idle when the linger ends are closed then, just before the process exits.

mod address;
pub mod h2;
mod wrap;

pub use address::{AddressCap, AddressSlot, DEFAULT_MAX_PER_ADDRESS};
pub use h2::H2Limits;

use crate::deadline::within;
use crate::error::{Code, GatewayError};
use crate::observe::metrics::Metrics;
use crate::proxy::Gateway;
use crate::request_id;
use async_trait::async_trait;
use pingora_core::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora_core::listeners::tls::Acceptor;
use pingora_core::listeners::L4BufferSettings;
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::raw_connect::ProxyDigest;
use pingora_core::protocols::tls::{SslDigest, TlsRef};
use pingora_core::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::listening::Service;
use pingora_proxy::HttpProxy;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use wrap::Raw;

pub use crate::deadline::DEFAULT_HEAD_DEADLINE;

/// Pingora's default idle keepalive for a connection's first request, in seconds (as in
/// pingora-core's `ServerApp` for `HttpServerApp`).
const FIRST_REQUEST_KEEPALIVE_SECS: u64 = 60;

/// The HTTP/2 connection preface (RFC 9113 §3.4), for h2c detection.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The longest request head read (request line and header fields): a head over it is
/// answered `431` and the connection closed. Routing takes 8 KiB of target and the header
/// limits 32 KiB of fields (docs/PROTOCOL.md, "Limits"), so nothing over this could be
/// served anyway; Pingora's own limit is 1 MiB.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// While a head is incomplete, bytes are handed to Pingora once this many are held (or the
/// head ends): Pingora re-parses the head from its start after every read.
const HEAD_RELEASE_BYTES: usize = 16 * 1024;

/// The default for `--max-connections`: open connections per traffic listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The default for `--read-buffer-bytes`: the read buffer every accepted connection holds
/// for its whole life. Pingora's default is 64 KiB, nearly all of the ≈ 88 KiB an idle
/// keep-alive connection cost (benches/RESULTS.md, "Memory per idle keep-alive connection").
/// 4 KiB loses nothing: a read at least as large as the buffer bypasses it, and heads and
/// bodies are read into the HTTP session's own buffers of at least that size; it still
/// gathers the small reads a TLS record layer makes.
pub const DEFAULT_READ_BUFFER_BYTES: usize = 4096;

/// The L4 buffers of a traffic listener: `read` bytes of read buffer (0: unbuffered) and
/// Pingora's default write buffer (one TCP segment).
pub fn buffers(read: usize) -> L4BufferSettings {
    L4BufferSettings::default().read(read)
}

/// The longest a connection refused at the limit is kept (to read its request head and
/// answer it); then it is closed, answered or not.
const REFUSAL_LIMIT: Duration = Duration::from_secs(5);

/// The `ServerApp` of a traffic listener: the head deadline over Pingora's `HttpProxy`.
pub type TrafficApp = HeadDeadlineApp<HttpProxy<Gateway>>;

/// The default for `--tls-handshake-timeout-ms`: a TLS handshake must be done within this of
/// the connection's accept.
pub const DEFAULT_TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// The connection limits and deadlines of a plane's traffic listeners (docs/OPERATIONS.md,
/// "Connection limits").
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    /// Total time to read an HTTP/1 request head; zero: off (plain Pingora behaviour).
    pub head_deadline: Duration,
    /// Open connections per listener (`--max-connections`).
    pub max_connections: usize,
    /// Open connections per client address on the plane's listeners; zero: no cap.
    pub max_per_address: usize,
    /// A TLS handshake must be done within this of the accept.
    pub tls_handshake: Duration,
    /// HTTP/2: idle timeout, stream limit, reset budget.
    pub h2: H2Limits,
    /// The grace period Pingora gives requests in flight once it stops accepting
    /// (`grace_period_seconds`, `--drain-seconds`): idle keepalive connections are kept open
    /// for most of it ([`drain_linger`]).
    pub drain: Duration,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        ConnectionSettings {
            head_deadline: DEFAULT_HEAD_DEADLINE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_address: address::DEFAULT_MAX_PER_ADDRESS,
            tls_handshake: DEFAULT_TLS_HANDSHAKE,
            h2: H2Limits::default(),
            drain: Duration::from_secs(5),
        }
    }
}

/// The TLS endpoint of a plane: its address (a plain TCP listener of the service: the
/// handshake is done by [`CappedApp`], after the connection is counted) and the acceptor.
pub struct TlsEndpoint {
    pub addr: SocketAddr,
    pub acceptor: Arc<Acceptor>,
}

/// The proxy service of one plane's traffic listeners (`portico-live`, `portico-sandbox`):
/// Pingora's `HttpProxy` over `gateway` behind [`CappedApp`]. Add the plain listener with
/// `add_tcp`/`add_listener` as usual, and the TLS endpoint's address as a plain TCP listener
/// too: its connections are recognised by their local address. Its metric label is `name`,
/// the TLS endpoint's `name-tls`.
pub fn service(
    conf: &Arc<ServerConf>,
    gateway: Gateway,
    name: &str,
    settings: &ConnectionSettings,
    tls: Option<TlsEndpoint>,
) -> Service<CappedApp> {
    let metrics = &gateway.plane.shared.metrics;
    let plain = Listener::new(metrics, name.to_owned(), settings.max_connections, None);
    let tls = tls.map(|t| {
        let label = format!("{name}-tls");
        Listener::new(metrics, label, settings.max_connections, Some(t))
    });
    let refuser = gateway.clone();
    let mut proxy = HttpProxy::new(gateway, conf.clone());
    proxy.handle_init_modules();
    let proxy = Arc::new(proxy);
    let app = Arc::new(HeadDeadlineApp::new(proxy.clone(), settings.head_deadline));
    Service::new(
        name.to_owned(),
        CappedApp {
            app,
            proxy,
            refuser,
            plain,
            tls,
            per_address: AddressCap::new(settings.max_per_address),
            settings: settings.clone(),
            linger: drain_linger(settings.drain),
        },
    )
}

/// Whether this process holds a listening TCP socket for `addr` (an unspecified address,
/// on either side, matches any): Pingora has bound it, or received it from the process it replaces
/// (`--upgrade`). `/readyz` waits for it (docs/OPERATIONS.md, "Admin endpoints"); unlike a
/// test connection, it is not fooled by another process serving the same address, such as
/// the gateway being replaced during an upgrade. Reads `/proc/net/tcp{,6}` and
/// `/proc/self/fd` (Linux); `false` when they cannot be read.
pub fn holds_listener(addr: std::net::SocketAddr) -> bool {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        inodes.extend(
            text.lines()
                .skip(1)
                .filter_map(|l| listening_inode(l, addr)),
        );
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

/// The socket inode of a `/proc/net/tcp{,6}` line when it is a socket in `LISTEN` state on
/// `addr`'s port and address (either may be the unspecified address).
fn listening_inode(line: &str, addr: std::net::SocketAddr) -> Option<u64> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
    if *state != "0A" {
        return None;
    }
    let (ip_hex, port_hex) = local.split_once(':')?;
    if u16::from_str_radix(port_hex, 16).ok()? != addr.port() {
        return None;
    }
    // The kernel prints the address as 32-bit words in host byte order.
    let mut bytes = Vec::with_capacity(16);
    for i in (0..ip_hex.len()).step_by(8) {
        let word = u32::from_str_radix(ip_hex.get(i..i + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip: std::net::IpAddr = match bytes.len() {
        4 => std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into(),
        16 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&bytes);
            let v6 = std::net::Ipv6Addr::from(b);
            v6.to_ipv4_mapped().map_or(v6.into(), Into::into)
        }
        _ => return None,
    };
    let matches = ip.is_unspecified() || addr.ip().is_unspecified() || ip == addr.ip();
    matches.then(|| inode.parse().ok())?
}

/// How long idle keepalive connections stay open once the listener stops accepting: the
/// drain less one second (so they are closed in order before Pingora ends the runtimes),
/// nothing for a drain of a second or less.
pub fn drain_linger(drain: Duration) -> Duration {
    drain.saturating_sub(Duration::from_secs(1))
}

/// Counts a listener's open connections against its limit.
pub struct ConnectionCap {
    max: usize,
    open: AtomicUsize,
    open_gauge: prometheus::IntGauge,
    refused: prometheus::IntCounter,
}

impl ConnectionCap {
    /// The cap of listener `name` (its metric series) at `max` connections.
    pub fn new(metrics: &Metrics, name: &str, max: usize) -> Arc<ConnectionCap> {
        Arc::new(ConnectionCap {
            max,
            open: AtomicUsize::new(0),
            open_gauge: metrics.connections_open.with_label_values(&[name]),
            refused: metrics.connections_refused.with_label_values(&[name]),
        })
    }

    /// Counts a new connection in, unless the listener is at its limit (then it is counted as
    /// refused). The connection counts until the returned guard is dropped.
    pub fn try_open(self: &Arc<Self>) -> Option<OpenConnection> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.refused.inc();
            return None;
        }
        self.open_gauge.inc();
        Some(OpenConnection(self.clone()))
    }

    /// Connections open right now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// One open connection of a [`ConnectionCap`]; dropping it frees its place.
pub struct OpenConnection(Arc<ConnectionCap>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.open_gauge.dec();
    }
}

/// One listener of a plane (plain or TLS): its connection cap and metric series.
struct Listener {
    label: String,
    cap: Arc<ConnectionCap>,
    refused_per_address: prometheus::IntCounter,
    tls: Option<TlsEndpoint>,
    handshake_timeouts: prometheus::IntCounter,
    handshake_errors: prometheus::IntCounter,
}

impl Listener {
    fn new(metrics: &Metrics, label: String, max: usize, tls: Option<TlsEndpoint>) -> Self {
        Listener {
            cap: ConnectionCap::new(metrics, &label, max),
            refused_per_address: metrics
                .connections_refused_per_address
                .with_label_values(&[&label]),
            handshake_timeouts: metrics
                .tls_handshake_failures
                .with_label_values(&[&label, "timeout"]),
            handshake_errors: metrics
                .tls_handshake_failures
                .with_label_values(&[&label, "error"]),
            tls,
            label,
        }
    }

    /// The TLS handshake of a connection to this listener, within `deadline` of now; the
    /// stream as it is for a plain listener. `None`: failed or too slow (counted), the
    /// connection is closed.
    async fn handshake(&self, stream: Stream, deadline: Duration) -> Option<Stream> {
        let Some(tls) = &self.tls else {
            return Some(stream);
        };
        match within(deadline, tls.acceptor.tls_handshake(Raw::new(stream))).await {
            Some(Ok(tls)) => Some(Box::new(tls)),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                self.handshake_errors.inc();
                None
            }
            None => {
                self.handshake_timeouts.inc();
                None
            }
        }
    }
}

/// Why a connection is refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The listener is at `--max-connections`.
    Listener,
    /// The client address is at `--max-connections-per-address`.
    Address,
}

/// The `ServerApp` of a plane's traffic listeners (docs/OPERATIONS.md, "Connection
/// limits"), for every connection from its accept:
///
/// 1. counted against its listener's cap (`--max-connections`, one counter per listener:
///    plain and TLS apart) and its client address's (`--max-connections-per-address`, plain
///    and TLS together; trusted proxies are not capped). A connection beyond either is
///    refused at once, without using the limit's memory: an HTTP/1 connection gets `503
///    CONNECTION_LIMIT` (the envelope, `Retry-After: 1`, `Connection: close`) for its first
///    request through the rescue point (`Gateway::refuse_connection`), an HTTP/2 one is
///    closed. Refusals are counted in `portico_connections_refused_total` and
///    `portico_connections_refused_per_address_total`.
/// 2. on the TLS endpoint, handshaken here, within `--tls-handshake-timeout-ms` of the
///    accept (Pingora's TLS listener would handshake before the app sees the connection,
///    uncounted and for as long as its 60 s read timeout allows).
/// 3. served: HTTP/2 (ALPN `h2`) by Portico's own accept loop (`h2.rs`: idle timeout, stream
///    slots, reset budget), everything else by [`TrafficApp`].
pub struct CappedApp {
    app: Arc<TrafficApp>,
    proxy: Arc<HttpProxy<Gateway>>,
    refuser: Gateway,
    plain: Listener,
    tls: Option<Listener>,
    per_address: Arc<AddressCap>,
    settings: ConnectionSettings,
    /// How long idle keepalive connections stay open after the listener stops accepting.
    linger: Duration,
}

impl CappedApp {
    /// The connection counter of the plain listener.
    pub fn cap(&self) -> &Arc<ConnectionCap> {
        &self.plain.cap
    }

    /// The listener `stream` was accepted on: the TLS endpoint when its local address is
    /// the endpoint's (an unspecified endpoint address matches by port), else the plain one.
    fn listener_of(&self, stream: &Stream) -> &Listener {
        let Some(tls) = &self.tls else {
            return &self.plain;
        };
        let local = stream
            .get_socket_digest()
            .and_then(|d| d.local_addr().and_then(|a| a.as_inet()).copied());
        let is_tls = tls.tls.as_ref().zip(local).is_some_and(|(t, local)| {
            t.addr.port() == local.port()
                && (t.addr.ip().is_unspecified() || t.addr.ip() == local.ip())
        });
        if is_tls {
            tls
        } else {
            &self.plain
        }
    }

    /// The connection's place under the per-address cap: `None` when its address is at the
    /// cap; an uncounted place for a trusted proxy or a connection without an address.
    fn address_slot(&self, stream: &Stream) -> Option<AddressSlot> {
        let peer = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let Some(ip) = peer else {
            return Some(AddressSlot::uncounted());
        };
        let trusted = self
            .refuser
            .plane
            .current
            .load()
            .snapshot
            .ipacl
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&ip));
        if trusted {
            return Some(AddressSlot::uncounted());
        }
        self.per_address.try_open(ip)
    }

    async fn refuse(&self, listener: &Listener, stream: Stream, why: Refusal) {
        let Some(mut stream) = listener
            .handshake(stream, self.settings.tls_handshake)
            .await
        else {
            return;
        };
        if self.app.is_http1(&mut stream).await != Some(true) {
            return;
        }
        let deadline = if self.app.head_deadline.is_zero() {
            DEFAULT_HEAD_DEADLINE
        } else {
            self.app.head_deadline
        };
        let stream: Stream = Box::new(HeadDeadlineStream::new(stream, deadline));
        let message = match why {
            Refusal::Listener => "the gateway is at its connection limit; retry shortly",
            Refusal::Address => {
                "too many connections from this address; close some or retry shortly"
            }
        };
        let error = GatewayError::new(Code::ConnectionLimit, message).with_retry_after(1);
        self.refuser.refuse_connection(stream, error).await;
    }

    /// Serves an HTTP/2 connection with Portico's accept loop and counts what it came to.
    async fn serve_h2(&self, listener: &Listener, stream: Stream, shutdown: &ShutdownWatch) {
        let served = h2::serve(&self.proxy, stream, shutdown, &self.settings.h2).await;
        let metrics = &self.refuser.plane.shared.metrics;
        if let Some(why) = served.goaway {
            metrics
                .h2_goaways
                .with_label_values(&[&listener.label, why.as_str()])
                .inc();
        }
        if served.aborted > 0 {
            // Streams whose client went away before their answer: 499, as a reset stream is.
            let plane = self.refuser.plane.kind.as_str();
            metrics
                .requests
                .with_label_values(&[plane, "-", "499", crate::proxy::CLIENT_CLOSED])
                .inc_by(served.aborted);
        }
    }
}

#[async_trait]
impl ServerApp for CappedApp {
    /// Connection phase, once per accepted connection: counts it, handshakes TLS, serves it,
    /// every request of it (keepalive reuse is looped here, so the connection keeps its
    /// place between requests and counts until it closes), while it counts within the
    /// limits; refuses it (see the type's docs) beyond. Always returns `None`: the
    /// connection is done.
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let listener = self.listener_of(&stream);
        let Some(_open) = listener.cap.try_open() else {
            // A refused connection costs one small task for a bounded time, whatever it sends.
            let refusal = self.refuse(listener, stream, Refusal::Listener);
            let _ = tokio::time::timeout(REFUSAL_LIMIT, refusal).await;
            return None;
        };
        let Some(_address) = self.address_slot(&stream) else {
            listener.refused_per_address.inc();
            let refusal = self.refuse(listener, stream, Refusal::Address);
            let _ = tokio::time::timeout(REFUSAL_LIMIT, refusal).await;
            return None;
        };
        let stream = listener
            .handshake(stream, self.settings.tls_handshake)
            .await?;
        if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
            self.serve_h2(listener, stream, shutdown).await;
            return None;
        }
        let mut stream = stream;
        loop {
            stream = ServerApp::process_new(&self.app, stream, shutdown).await?;
        }
    }

    /// Shutdown phase, once, when the listener has stopped accepting (SIGTERM, or the end of
    /// an upgrade's hand-over): waits out the linger, then lets `HttpProxy` close the
    /// keepalive connections still idle. Until then an idle connection's next request is
    /// answered with `Connection: close` rather than met by a close (see the module docs).
    async fn cleanup(&self) {
        if !self.linger.is_zero() {
            tracing::info!(
                linger_ms = self.linger.as_millis() as u64,
                open = self.plain.cap.open(),
                "draining: idle keepalive connections stay open; their next request is answered with Connection: close"
            );
            tokio::time::sleep(self.linger).await;
        }
        ServerApp::cleanup(&*self.app).await;
    }
}

/// A `ServerApp` that serves HTTP/1 connections of an `HttpServerApp` with a total request
/// head deadline, and everything else exactly as the app's own `ServerApp` does.
pub struct HeadDeadlineApp<A> {
    app: Arc<A>,
    head_deadline: Duration,
}

impl<A> HeadDeadlineApp<A> {
    pub fn new(app: Arc<A>, head_deadline: Duration) -> Self {
        HeadDeadlineApp { app, head_deadline }
    }
}

impl<A> HeadDeadlineApp<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    /// Whether `stream` is served as HTTP/1 by Pingora's own dispatch (same decisions, same
    /// order as pingora-core `apps/mod.rs`). `None`: the h2c preface peek failed (the client
    /// went away), which Pingora treats as the end of the connection.
    async fn is_http1(&self, stream: &mut Stream) -> Option<bool> {
        let opts = self.app.server_options();
        let h2c = opts.is_some_and(|o| o.h2c);
        if opts.is_some_and(|o| o.force_custom) {
            return Some(false);
        }
        if stream.get_ssl_digest().is_none() && h2c {
            let mut buf = [0u8; H2_PREFACE.len()];
            // Peeking does not consume: whichever side serves the stream reads it again.
            let peeked = match stream.try_peek(&mut buf).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "read error while peeking the h2c preface");
                    return None;
                }
            };
            if !peeked || buf == H2_PREFACE {
                return Some(false);
            }
        }
        Some(matches!(
            stream.selected_alpn_proto(),
            None | Some(ALPN::H1) | Some(ALPN::H2H1)
        ))
    }

    /// Pingora's HTTP/1 keepalive loop, with the head deadline armed for each request.
    async fn serve_http1(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) {
        let stream: Stream = Box::new(HeadDeadlineStream::new(stream, self.head_deadline));
        let mut session = ServerSession::new_http1(stream);
        if *shutdown.borrow() {
            // Stop the client from reusing the connection: the service is shutting down.
            session.set_keepalive(None);
        } else {
            session.set_keepalive(Some(FIRST_REQUEST_KEEPALIVE_SECS));
        }
        session.set_keepalive_reuses_remaining(
            self.app
                .server_options()
                .and_then(|o| o.keepalive_request_limit),
        );
        let mut result = self.app.process_new_http(session, shutdown).await;
        while let Some((stream, settings)) = result.map(|r| r.consume()) {
            let Some(stream) = rearm(stream) else {
                return;
            };
            let mut session = ServerSession::new_http1(stream);
            apply_settings(settings, &mut session);
            result = self.app.process_new_http(session, shutdown).await;
        }
    }
}

fn apply_settings(settings: Option<HttpPersistentSettings>, session: &mut ServerSession) {
    if let Some(settings) = settings {
        settings.apply_to_session(session);
    }
    // Pingora carries "no limit" (0) over to a reused connection when the client sent no
    // Keep-Alive header, so an idle client could hold a connection forever: bound the idle
    // wait between requests as for the first one.
    if session.get_keepalive() == Some(0) {
        session.set_keepalive(Some(FIRST_REQUEST_KEEPALIVE_SECS));
    }
    // With pipelining, bytes of this head may have been read during the previous request (the
    // pipelined prefix) and never pass through the armed stream, so its end could be missed.
    // Pipelining is off in Portico (Pingora then refuses reuse when bytes were over-read);
    // should it be turned on, such requests go without the deadline rather than risk a false
    // timeout.
    if session.pipelining_enabled() {
        if let Some(s) = session
            .stream()
            .and_then(|s| s.as_any().downcast_ref::<HeadDeadlineStream>())
        {
            s.skip_this_head();
        }
    }
}

/// Arms the head deadline of a connection handed back for keepalive reuse.
fn rearm(stream: Stream) -> Option<Stream> {
    match stream.into_any().downcast::<HeadDeadlineStream>() {
        Ok(mut s) => {
            s.arm();
            Some(s)
        }
        Err(_) => {
            // Unreachable: the connection is the stream `serve_http1` wrapped.
            tracing::error!("keepalive connection lost its head deadline wrapper; closing it");
            None
        }
    }
}

#[async_trait]
impl<A> ServerApp for HeadDeadlineApp<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // h2c and custom protocols (not enabled in Portico; h2 by ALPN is served by
        // `CappedApp`): Pingora's own dispatch, unchanged.
        if self.head_deadline.is_zero() || !self.is_http1(&mut stream).await? {
            return ServerApp::process_new(&self.app, stream, shutdown).await;
        }
        self.serve_http1(stream, shutdown).await;
        None
    }

    async fn cleanup(&self) {
        ServerApp::cleanup(&*self.app).await;
    }
}

/// Where a connection is in reading a request head.
enum Head {
    /// Between requests, or before the first byte of this one: not timed here.
    AwaitingFirstByte,
    /// Part of the head has arrived; the timer fires at the deadline.
    Reading(Pin<Box<Sleep>>),
    /// The head has been read: reads (the body, draining it) pass straight through.
    Done,
    /// The deadline passed: every read fails.
    Expired,
}

/// A connection that fails a request head read that takes longer than its deadline (see the
/// module doc). Implements Pingora's `IO` bundle by delegating to the wrapped stream.
pub struct HeadDeadlineStream {
    inner: Stream,
    deadline: Duration,
    head: Head,
    end: HeadEnd,
    /// Bytes of an unfinished head read from the connection but not yet handed to Pingora
    /// (see [`HEAD_RELEASE_BYTES`]), and how many of them were handed over already.
    held: Vec<u8>,
    held_from: usize,
    /// Bytes of the current head read so far (see [`MAX_HEAD_BYTES`]).
    head_bytes: usize,
    /// Set through a shared reference (the stream is inside Pingora's session by then): the
    /// current head is not timed. Checked only while armed.
    skip: AtomicBool,
}

impl HeadDeadlineStream {
    /// Wraps `inner`, armed for the first request.
    pub fn new(inner: Stream, deadline: Duration) -> Self {
        HeadDeadlineStream {
            inner,
            deadline,
            head: Head::AwaitingFirstByte,
            end: HeadEnd::default(),
            held: Vec::new(),
            held_from: 0,
            head_bytes: 0,
            skip: AtomicBool::new(false),
        }
    }

    /// Arms the deadline for the next request head (starts at its first byte).
    pub fn arm(&mut self) {
        self.head = Head::AwaitingFirstByte;
        self.end = HeadEnd::default();
        self.head_bytes = 0;
        // Bytes read with the previous request but not taken by Pingora yet begin this head.
        let early = &self.held[self.held_from..];
        if !early.is_empty() {
            self.head_bytes = early.len();
            self.head = if self.end.feed(early) {
                Head::Done
            } else {
                Head::Reading(Box::pin(tokio::time::sleep(self.deadline)))
            };
        }
        *self.skip.get_mut() = false;
    }

    /// Leaves the head of the current request untimed (see `apply_settings`).
    pub fn skip_this_head(&self) {
        self.skip.store(true, Ordering::Relaxed);
    }

    /// Stops timing the current head.
    pub fn disarm(&mut self) {
        self.head = Head::Done;
    }

    /// Whether a head is being timed or awaited.
    pub fn is_armed(&self) -> bool {
        matches!(self.head, Head::AwaitingFirstByte | Head::Reading(_))
    }

    /// A head over [`MAX_HEAD_BYTES`]: one non-blocking attempt at a `431`, then the read
    /// error (as for [`HeadDeadlineStream::expire`]).
    fn too_large(&mut self, cx: &mut Context<'_>) -> io::Error {
        self.head = Head::Expired;
        self.held.clear();
        self.held_from = 0;
        let reply = format!(
            "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
             connection: close\r\n{}: {}\r\n\r\n",
            request_id::HEADER,
            request_id::make()
        );
        if let Poll::Ready(Ok(n)) = Pin::new(&mut self.inner).poll_write(cx, reply.as_bytes()) {
            if n == reply.len() {
                let _ = Pin::new(&mut self.inner).poll_flush(cx);
            }
        }
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("request head over {MAX_HEAD_BYTES} bytes"),
        )
    }

    /// Hands held bytes to the reader, as many as fit.
    fn release(&mut self, buf: &mut ReadBuf<'_>) {
        let rest = &self.held[self.held_from..];
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        self.held_from += n;
        if self.held_from == self.held.len() {
            self.held.clear();
            self.held_from = 0;
        }
    }

    /// The first read of a head, straight into `buf`: `Some` is the answer to the caller
    /// (the head ended, the stream ended, an error, pending, or enough is held to release);
    /// `None`: the bytes read are now held and the caller reads on.
    fn read_direct(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Option<Poll<io::Result<()>>> {
        match &mut self.head {
            Head::Expired => return Some(Poll::Ready(Err(self.timed_out()))),
            Head::Reading(timer) => {
                if timer.as_mut().poll(cx).is_ready() {
                    return Some(Poll::Ready(Err(self.expire(cx))));
                }
            }
            Head::AwaitingFirstByte | Head::Done => {}
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending => return Some(Poll::Pending),
            Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
            Poll::Ready(Ok(())) => {}
        }
        let got = &buf.filled()[before..];
        if got.is_empty() {
            return Some(Poll::Ready(Ok(())));
        }
        // One read may bring a whole oversized head (Pingora's buffer grows): the cap is on
        // the head's own bytes, not on a body read with it.
        let ended = self.end.feed_end(got);
        let head_len = self.head_bytes + ended.unwrap_or(got.len());
        self.head_bytes += got.len();
        if head_len > MAX_HEAD_BYTES {
            return Some(Poll::Ready(Err(self.too_large(cx))));
        }
        if ended.is_some() {
            self.head = Head::Done;
            return Some(Poll::Ready(Ok(())));
        }
        self.held.extend_from_slice(got);
        buf.set_filled(before);
        if matches!(self.head, Head::AwaitingFirstByte) {
            self.head = Head::Reading(Box::pin(tokio::time::sleep(self.deadline)));
        }
        if self.held.len() >= HEAD_RELEASE_BYTES {
            self.release(buf);
            return Some(Poll::Ready(Ok(())));
        }
        None
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "request head not complete within {:?} of its first byte",
                self.deadline
            ),
        )
    }

    /// The deadline passed: one non-blocking attempt at a `408`, then the read error. Nothing
    /// of this request has been answered (its head was never parsed), so the reply cannot
    /// interleave with another response.
    fn expire(&mut self, cx: &mut Context<'_>) -> io::Error {
        self.head = Head::Expired;
        let reply = format!(
            "HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\
             {}: {}\r\n\r\n",
            request_id::HEADER,
            request_id::make()
        );
        if let Poll::Ready(Ok(n)) = Pin::new(&mut self.inner).poll_write(cx, reply.as_bytes()) {
            if n == reply.len() {
                let _ = Pin::new(&mut self.inner).poll_flush(cx);
            }
        }
        self.timed_out()
    }
}

impl fmt::Debug for HeadDeadlineStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl AsyncRead for HeadDeadlineStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.held_from < this.held.len() {
            // Bytes already read and released (the end of a head and what followed it).
            this.release(buf);
            return Poll::Ready(Ok(()));
        }
        if this.skip.load(Ordering::Relaxed) && matches!(this.head, Head::AwaitingFirstByte) {
            this.head = Head::Done;
        }
        if matches!(this.head, Head::Done) {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        // A head is being read: read on until it ends or HEAD_RELEASE_BYTES are held, so
        // that Pingora, which parses the whole head again after every read that does not
        // complete it, parses a head at most a few times (docs/SECURITY.md, "Bounded work
        // before authentication").
        if this.held.is_empty() && buf.remaining() > 0 {
            // The usual case, a head that arrives in one read: read straight into Pingora's
            // buffer (no copy, no zeroed chunk); an unfinished head is taken back and held.
            if let Some(ready) = this.read_direct(cx, buf) {
                return ready;
            }
        }
        let mut chunk = [0u8; 4096];
        loop {
            match &mut this.head {
                Head::Expired => return Poll::Ready(Err(this.timed_out())),
                Head::Reading(timer) => {
                    // Checked before reading so a steady trickle cannot outrun it.
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(this.expire(cx)));
                    }
                }
                Head::AwaitingFirstByte | Head::Done => {}
            }
            let mut read = ReadBuf::new(&mut chunk);
            if Pin::new(&mut this.inner)
                .poll_read(cx, &mut read)?
                .is_pending()
            {
                return Poll::Pending;
            }
            let got = read.filled();
            if got.is_empty() {
                // End of stream: what is held first, then Pingora sees the end.
                this.release(buf);
                return Poll::Ready(Ok(()));
            }
            this.head_bytes += got.len();
            this.held.extend_from_slice(got);
            if this.end.feed(got) {
                this.head = Head::Done;
                this.release(buf);
                return Poll::Ready(Ok(()));
            }
            if this.head_bytes > MAX_HEAD_BYTES {
                return Poll::Ready(Err(this.too_large(cx)));
            }
            if matches!(this.head, Head::AwaitingFirstByte) {
                this.head = Head::Reading(Box::pin(tokio::time::sleep(this.deadline)));
            }
            if this.held.len() >= HEAD_RELEASE_BYTES {
                this.release(buf);
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl AsyncWrite for HeadDeadlineStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
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

#[async_trait]
impl Shutdown for HeadDeadlineStream {
    async fn shutdown(&mut self) {
        Shutdown::shutdown(&mut *self.inner).await;
    }
}

impl UniqueID for HeadDeadlineStream {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for HeadDeadlineStream {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for HeadDeadlineStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for HeadDeadlineStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest);
    }
}

impl GetSocketDigest for HeadDeadlineStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, socket_digest: SocketDigest) {
        self.inner.set_socket_digest(socket_digest);
    }
}

#[async_trait]
impl Peek for HeadDeadlineStream {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

/// Finds the end of a request head across reads, as httparse does: the first empty line
/// (`LF [CR] LF`) after the request line. Empty lines before the request line are skipped
/// (httparse skips them too), so they cannot end the head early. Bare `CR`s are ignored: a
/// `CR` not followed by `LF` is a parse error in httparse, so ignoring it can only end the
/// head where httparse fails anyway.
#[derive(Debug, Default, Clone, Copy)]
struct HeadEnd {
    /// A byte other than CR/LF has been seen (the request line has started).
    started: bool,
    /// The last line end seen is followed only by CRs so far.
    at_line_start: bool,
}

impl HeadEnd {
    /// Feeds the next bytes read; true when the head ended within them.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        self.feed_end(bytes).is_some()
    }

    /// Feeds the next bytes read; `Some(n)` when the head ended within them, after their
    /// first `n` bytes.
    fn feed_end(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut rest = bytes;
        if !self.started {
            // Empty lines before the request line (rare): skipped.
            match rest.iter().position(|&b| b != b'\r' && b != b'\n') {
                Some(i) => rest = &rest[i..],
                None => return None,
            }
            self.started = true;
            self.at_line_start = false;
        }
        let skipped = bytes.len() - rest.len();
        // Fast path, O(1): the bytes end with an empty line (a head arriving in one segment
        // without a body). The head may have ended earlier in them: the length reported is
        // then an upper bound, which is what the size cap needs.
        if rest.ends_with(b"\n\n") || rest.ends_with(b"\n\r\n") {
            return Some(bytes.len());
        }
        // Otherwise from line end to line end: the head ends at an LF that follows the previous
        // LF with nothing but CRs in between.
        let mut after_lf = self.at_line_start;
        let mut from = 0;
        while let Some(i) = find_lf(&rest[from..]) {
            if after_lf && rest[from..from + i].iter().all(|&b| b == b'\r') {
                return Some(skipped + from + i + 1);
            }
            after_lf = true;
            from += i + 1;
        }
        self.at_line_start = after_lf && rest[from..].iter().all(|&b| b == b'\r');
        None
    }
}

/// The index of the first LF in `hay`, eight bytes at a time.
fn find_lf(hay: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const LFS: u64 = ONES * b'\n' as u64;
    let mut words = hay.chunks_exact(8);
    let mut base = 0;
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        // Bytes equal to LF become zero; the lowest zero byte is flagged exactly.
        let x = u64::from_le_bytes(w) ^ LFS;
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        if zeros != 0 {
            return Some(base + (zeros.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| base + i)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    fn ends(chunks: &[&[u8]]) -> Option<usize> {
        let mut h = HeadEnd::default();
        chunks.iter().position(|c| h.feed(c))
    }

    #[test]
    fn head_end_is_found_across_reads() {
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"]), Some(0));
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\n\r\n{\"a\":1}"]), Some(0));
        assert_eq!(ends(&[b"GET / HTTP/1.1\n\n"]), Some(0));
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nHost: a\r\n", b"\r\n"]), Some(1));
        assert_eq!(
            ends(&[b"GET / HTTP/1.1\r\nHost: a\r", b"\n\r", b"\n"]),
            Some(2)
        );
        assert_eq!(
            ends(&[b"G", b"E", b"T / HTTP/1.1\r\n", b"H: v\r\n", b"\r\n"]),
            Some(4)
        );
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nHost: a\r\n"]), None);
        // Header line ends are not the end of the head.
        assert_eq!(
            ends(&[b"GET / HTTP/1.1\r\n", b"A: 1\r\n", b"B: 2\r\n"]),
            None
        );
    }

    #[test]
    fn leading_empty_lines_do_not_end_the_head() {
        assert_eq!(ends(&[b"\r\n\r\n\r\n"]), None);
        assert_eq!(ends(&[b"\r\n", b"\n\n", b"GET / HTTP/1.1\r\n"]), None);
        assert_eq!(ends(&[b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"]), Some(0));
        assert_eq!(ends(&[b"\n\n", b"GET / HTTP/1.1\r\n", b"\r\n"]), Some(2));
    }

    /// The rule byte by byte, as a reference.
    fn naive_end(bytes: &[u8]) -> Option<usize> {
        let (mut started, mut at_line_start) = (false, false);
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'\n' if at_line_start => return Some(i),
                b'\n' => at_line_start = started,
                b'\r' => {}
                _ => (started, at_line_start) = (true, false),
            }
        }
        None
    }

    #[test]
    fn head_end_matches_the_byte_rule_for_any_split() {
        let alphabet = b"\r\n\r\nab: ";
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let len = rng.usize(0..40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let expected = naive_end(&bytes);
            let mut h = HeadEnd::default();
            let mut at = 0;
            let mut found = None;
            while at < bytes.len() {
                let n = rng.usize(1..=bytes.len() - at);
                if let Some(used) = h.feed_end(&bytes[at..at + n]) {
                    found = Some(at..at + n);
                    // The head's length within the read is never under-counted (the size
                    // cap relies on it) and never past the read.
                    let end = naive_end(&bytes).unwrap();
                    assert!(at + used > end && used <= n, "{bytes:?} {at} {used}");
                    break;
                }
                at += n;
            }
            // Reported by the very read that holds the end of the head.
            match (expected, found) {
                (Some(end), Some(chunk)) => assert!(chunk.contains(&end), "{bytes:?} {chunk:?}"),
                (None, None) => {}
                (e, f) => panic!("{bytes:?}: expected {e:?}, reported in {f:?}"),
            }
        }
    }

    #[test]
    fn find_lf_finds_the_first() {
        for len in 0..40 {
            for at in 0..=len {
                let mut v = vec![b'a'; len];
                if at < len {
                    v[at] = b'\n';
                    if at + 3 < len {
                        v[at + 3] = b'\n';
                    }
                }
                let want = (at < len).then_some(at);
                assert_eq!(find_lf(&v), want, "{len} {at}");
            }
        }
    }

    fn pair(deadline: Duration) -> (HeadDeadlineStream, DuplexStream) {
        let (server, client) = tokio::io::duplex(4096);
        (HeadDeadlineStream::new(Box::new(server), deadline), client)
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_head_times_out_with_a_408() {
        let (mut s, mut c) = pair(Duration::from_millis(500));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => {
                        drop(s);
                        return Err(e);
                    }
                }
            }
        });
        c.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let mut result = None;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if reader.is_finished() {
                result = Some(reader.await.unwrap());
                break;
            }
            let _ = c.write_all(b"x").await;
        }
        let err = result.expect("the head deadline fired").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let mut reply = String::new();
        c.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 408 "), "{reply}");
        assert!(reply.contains("x-portico-request-id: "), "{reply}");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_before_the_first_byte_is_not_counted() {
        let (mut s, mut c) = pair(Duration::from_millis(500));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            c.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            c.write_all(b"Host: a\r\n\r\nbody").await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            c.write_all(b"more body").await.unwrap();
            c
        });
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while !got.ends_with(b"more body") {
            let n = s.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert!(!s.is_armed());
        // Re-armed for the next request: idle again is fine, a slow head is not.
        s.arm();
        assert!(s.is_armed());
    }

    #[tokio::test]
    async fn a_head_in_one_read_arms_no_timer() {
        let (mut s, mut c) = pair(Duration::from_millis(500));
        c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(n, 27);
        assert!(matches!(s.head, Head::Done));
    }

    #[test]
    fn a_listening_socket_of_this_process_is_found_and_a_connection_is_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(holds_listener(addr));
        let any: std::net::SocketAddr = format!("0.0.0.0:{}", addr.port()).parse().unwrap();
        let other: std::net::SocketAddr = format!("127.0.0.2:{}", addr.port()).parse().unwrap();
        assert!(holds_listener(any));
        assert!(!holds_listener(other));
        // A connected socket on the port is not a listener.
        let client = std::net::TcpStream::connect(addr).unwrap();
        drop(listener);
        assert!(!holds_listener(addr));
        drop(client);
        let line = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1";
        let port8080: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(listening_inode(line, port8080), Some(4242));
        }
        let port8081: std::net::SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert_eq!(listening_inode(line, port8081), None);
    }

    #[test]
    fn rearm_recovers_the_wrapper_from_a_stream() {
        let (server, _client) = tokio::io::duplex(64);
        let mut s = HeadDeadlineStream::new(Box::new(server), Duration::from_secs(1));
        s.disarm();
        let stream: Stream = Box::new(s);
        let stream = rearm(stream).expect("our stream");
        let s = stream
            .into_any()
            .downcast::<HeadDeadlineStream>()
            .expect("still ours");
        assert!(s.is_armed());
    }
}
