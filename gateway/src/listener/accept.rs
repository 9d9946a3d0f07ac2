//! The connection phase of the traffic listeners: [`service`] builds a plane's Pingora
//! service, whose `ServerApp` [`CappedApp`] owns every connection from its accept
//! (docs/SECURITY.md, "Connections"): counted against its listener's cap (`cap.rs`) and its
//! client address's (`address.rs`) and refused beyond either, TLS-handshaken within a
//! deadline, then served: HTTP/2 by `h2.rs`, HTTP/1 by `head_deadline.rs`.
//!
//! Why the TLS handshake is done here: Pingora's TLS listener handshakes before the service's
//! app sees the connection, with nothing but its 60 s read timeout, so a connection that never
//! sends a ClientHello was neither counted nor bounded. The TLS endpoint therefore listens as
//! plain TCP, and [`CappedApp`] counts the connection, then runs Pingora's own acceptor
//! (`Acceptor::tls_handshake`, the same rustls configuration and callbacks) within
//! `--tls-handshake-timeout-ms`.
//!
//! Draining (docs/operations/upgrades.md, "Restarts and upgrades"): when Pingora stops accepting (a
//! SIGTERM, or the end of an upgrade's hand-over) it calls the app's `cleanup`, and
//! `HttpProxy::http_cleanup` closes every idle keepalive connection at once; a client whose
//! next request crosses that close sees a reset with no answer. [`CappedApp::cleanup`] holds
//! that close back for the drain ([`drain_linger`]): meanwhile an idle connection stays open,
//! and the next request on it is served with `Connection: close` (Pingora turns keepalive off
//! for every request read once shutdown is signalled) and the connection closed after the
//! answer, so the client moves to a new connection without losing a request. Connections still
//! idle when the linger ends are closed then, just before the process exits.

use super::address::{self, AddressCap, AddressSlot};
use super::cap::{ConnectionCap, DEFAULT_MAX_CONNECTIONS};
use super::h2::{self, H2Limits};
use super::head_deadline::HeadDeadlineApp;
use super::head_stream::HeadDeadlineStream;
use super::wrap::Raw;
use crate::deadline::{within, DEFAULT_HEAD_DEADLINE};
use crate::error::{Code, GatewayError};
use crate::observe::metrics::Metrics;
use crate::proxy::Gateway;
use async_trait::async_trait;
use pingora_core::apps::ServerApp;
use pingora_core::listeners::tls::Acceptor;
use pingora_core::protocols::{Stream, ALPN};
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::listening::Service;
use pingora_proxy::HttpProxy;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The longest a connection refused at the limit is kept (to read its request head and
/// answer it); then it is closed, answered or not.
const REFUSAL_LIMIT: Duration = Duration::from_secs(5);

/// The `ServerApp` of a traffic listener: the head deadline over Pingora's `HttpProxy`.
pub type TrafficApp = HeadDeadlineApp<HttpProxy<Gateway>>;

/// The default for `--tls-handshake-timeout-ms`: a TLS handshake must be done within this of
/// the connection's accept.
pub const DEFAULT_TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// The connection limits and deadlines of a plane's traffic listeners (docs/operations/gateway.md,
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

/// How long idle keepalive connections stay open once the listener stops accepting: the
/// drain less one second (so they are closed in order before Pingora ends the runtimes),
/// nothing for a drain of a second or less.
pub fn drain_linger(drain: Duration) -> Duration {
    drain.saturating_sub(Duration::from_secs(1))
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

/// The `ServerApp` of a plane's traffic listeners (docs/operations/gateway.md, "Connection
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
