//! Connections over real processes (docs/SECURITY.md, "Connections"; docs/operations/gateway.md,
//! "Connection limits"): nobody holds what others need. HTTP/2 idle timeout, the
//! per-address cap, the TLS handshake deadline counted from accept, caps per listener, the
//! HTTP/2 reset budget, stream slots that bound backend calls per connection, and resets
//! counted as `499 CLIENT_CLOSED`, never as `500`.
//!
//! HTTP/2 is served by ALPN on the TLS listener, so the raw `h2` client runs over a small
//! rustls adapter ([`TlsIo`]). Other client addresses are other loopback addresses
//! (127.0.0.2, 127.0.0.3: Linux routes all of 127.0.0.0/8 to lo).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, CertifiedKey as Issued, DnType, IsCa, KeyPair};
use rustls::pki_types::ServerName;
use serde_json::json;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

// ---- the gateway -------------------------------------------------------------------------------

struct Env {
    _tree: ConfigTree,
    backend: BackendProcess,
    gw: GatewayProcess,
    tls: SocketAddr,
    client: Arc<rustls::ClientConfig>,
    _certs: tempfile::TempDir,
}

/// A test CA, a server certificate issued by it (for 127.0.0.1) in a temporary directory,
/// and a client configuration that trusts the CA and offers `alpn`.
fn pki(
    alpn: &[&[u8]],
) -> (
    tempfile::TempDir,
    PathBuf,
    PathBuf,
    Arc<rustls::ClientConfig>,
) {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "Portico connections test CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "gw");
    let leaf: Issued = Issued {
        cert: params.signed_by(&key, &ca, &ca_key).unwrap(),
        key_pair: key,
    };
    let dir = tempfile::tempdir().unwrap();
    let (cert, keyfile) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, format!("{}{}", leaf.cert.pem(), ca.pem())).unwrap();
    std::fs::write(&keyfile, leaf.key_pair.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    (dir, cert, keyfile, Arc::new(config))
}

/// The demo backend, and a gateway with a TLS listener serving `GET /v1/health` (no
/// signature) and `GET /v1/slow` (the same backend route, bulkhead of 64, 30 s timeout:
/// slowed by the client's `X-Demo-Delay-Ms`), plus `args`.
fn env(args: &[&str], alpn: &[&[u8]]) -> Env {
    let backend = BackendProcess::start_http().expect("demo backend");
    let tree = ConfigTree::new();
    tree.put(
        "clusters/demo-http",
        &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string(), "weight": 1}]}),
    );
    tree.put(
        "apis/public.health",
        &json!({
            "id": "public.health",
            "http": {"method": "GET", "path": "/v1/health"},
            "backend": {"cluster": "demo-http", "http": {"path": "/health"}},
            "auth": "none"
        }),
    );
    tree.put(
        "apis/public.slow",
        &json!({
            "id": "public.slow",
            "http": {"method": "GET", "path": "/v1/slow"},
            "backend": {"cluster": "demo-http", "timeout_ms": 30000, "http": {"path": "/health"}},
            "auth": "none",
            "policy": {"bulkhead": {"max_concurrent": 64}}
        }),
    );
    // A signed API, for the unauthenticated-body test.
    tree.put(
        "apis/signed.post",
        &json!({
            "id": "signed.post",
            "http": {"method": "POST", "path": "/v1/signed", "body": "*"},
            "backend": {"cluster": "demo-http", "http": {"path": "/health"}},
            "auth": "signature"
        }),
    );
    let (certs, cert, key, client) = pki(alpn);
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut all = vec![
        "--tls-listen".to_owned(),
        tls.to_string(),
        "--tls-cert".to_owned(),
        cert.display().to_string(),
        "--tls-key".to_owned(),
        key.display().to_string(),
    ];
    all.extend(args.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let gw = GatewayProcess::start(tree.path(), &all);
    Env {
        _tree: tree,
        backend,
        gw,
        tls,
        client,
        _certs: certs,
    }
}

/// The sum of the series of `name` whose labels contain every one of `labels`.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `/metrics` from inside the test's runtime (the blocking client may not run on it).
async fn metrics(gw: &GatewayProcess) -> String {
    let admin = gw.admin;
    tokio::task::spawn_blocking(move || {
        client()
            .get(format!("http://{admin}/metrics"))
            .send()
            .unwrap()
            .text()
            .unwrap()
    })
    .await
    .unwrap()
}

/// Waits until `check` holds on `/metrics`, up to `limit`.
async fn metrics_until(gw: &GatewayProcess, limit: Duration, check: impl Fn(&str) -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if check(&metrics(gw).await) {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---- clients -----------------------------------------------------------------------------------

/// A TCP connection to `to` from the loopback address `from`.
async fn tcp_from(from: IpAddr, to: SocketAddr) -> io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let stream = socket.connect(to).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// rustls over a tokio TCP stream, just enough for the `h2` client.
struct TlsIo {
    tcp: tokio::net::TcpStream,
    tls: rustls::ClientConnection,
    /// TLS bytes made but not yet written to the socket.
    out: Vec<u8>,
    eof: bool,
}

impl TlsIo {
    async fn connect(
        tcp: tokio::net::TcpStream,
        config: &Arc<rustls::ClientConfig>,
    ) -> io::Result<Self> {
        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let tls = rustls::ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
        let mut io = TlsIo {
            tcp,
            tls,
            out: Vec::new(),
            eof: false,
        };
        poll_fn(|cx| io.poll_handshake(cx)).await?;
        Ok(io)
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.tls.is_handshaking() {
            ready!(self.poll_send(cx))?;
            if self.tls.is_handshaking()
                && self.tls.wants_read()
                && ready!(self.poll_receive(cx))? == 0
            {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
        }
        self.poll_send(cx)
    }

    /// Writes every TLS byte made so far to the socket.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.out.is_empty() {
                if !self.tls.wants_write() {
                    return Poll::Ready(Ok(()));
                }
                self.tls.write_tls(&mut self.out)?;
            }
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.drain(..n);
        }
    }

    /// Reads TLS bytes from the socket into rustls; 0 at the end of the stream.
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut chunk = [0u8; 16 * 1024];
        let mut buf = ReadBuf::new(&mut chunk);
        ready!(Pin::new(&mut self.tcp).poll_read(cx, &mut buf))?;
        let mut got = buf.filled();
        let n = got.len();
        while !got.is_empty() {
            self.tls.read_tls(&mut got)?;
            self.tls.process_new_packets().map_err(io::Error::other)?;
        }
        Poll::Ready(Ok(n))
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.tls.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e)),
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let _ = this.poll_send(cx)?;
            if ready!(this.poll_receive(cx))? == 0 {
                this.eof = true;
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = this.tls.writer().write(buf)?;
        let _ = this.poll_send(cx)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.tls.send_close_notify();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

/// An HTTP/2 connection (over TLS, ALPN h2) from `from`: the request handle and the
/// connection's task, which ends with the connection.
type H2Conn = (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
);

async fn h2_connect(e: &Env, from: IpAddr) -> io::Result<H2Conn> {
    let tcp = tcp_from(from, e.tls).await?;
    let tls = TlsIo::connect(tcp, &e.client).await?;
    assert_eq!(tls.tls.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = h2::client::handshake(tls).await.map_err(io::Error::other)?;
    Ok((send, tokio::spawn(conn)))
}

fn get(path: &str, delay_ms: Option<u64>) -> http::Request<()> {
    let mut req = http::Request::get(format!("https://127.0.0.1{path}"));
    if let Some(ms) = delay_ms {
        req = req.header("x-demo-delay-ms", ms.to_string());
    }
    req.body(()).unwrap()
}

/// One request on `send`, to its answer's status (the body is read to its end).
async fn status_of(send: &mut h2::client::SendRequest<Bytes>, path: &str) -> u16 {
    try_status(send, path).await.expect("an answer")
}

/// One request on `send`, to its answer's status; `None` when the connection failed.
async fn try_status(send: &mut h2::client::SendRequest<Bytes>, path: &str) -> Option<u16> {
    let mut ready = send.clone().ready().await.ok()?;
    let (resp, _) = ready.send_request(get(path, None), true).ok()?;
    let resp = resp.await.ok()?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Some(status)
}

// ---- tests -------------------------------------------------------------------------------------

#[test]
fn an_idle_h2_connection_gets_a_goaway_and_is_closed() {
    let e = env(&["--h2-idle-timeout-ms", "400"], &[b"h2"]);
    runtime().block_on(async {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let (mut send, conn) = h2_connect(&e, local).await.unwrap();
        // A connection that sends its preface and SETTINGS and nothing more.
        let (_silent, silent) = h2_connect(&e, local).await.unwrap();
        let silent_from = Instant::now();
        // Busy time is not idle time: a request slower than the idle timeout is answered.
        let mut ready = send.clone().ready().await.unwrap();
        let (resp, _) = ready
            .send_request(get("/v1/slow", Some(800)), true)
            .unwrap();
        assert_eq!(resp.await.unwrap().status(), 200);
        assert_eq!(status_of(&mut send, "/v1/health").await, 200);
        let idle_from = Instant::now();
        // Then nothing: the gateway says GOAWAY (NO_ERROR: a clean end) and closes.
        let ended = tokio::time::timeout(Duration::from_secs(10), conn).await;
        let waited = idle_from.elapsed();
        let result = ended
            .expect("the idle connection was never closed")
            .unwrap();
        assert!(result.is_ok(), "a clean GOAWAY, not an error: {result:?}");
        assert!(
            waited >= Duration::from_millis(350) && waited < Duration::from_secs(3),
            "closed after {waited:?} idle"
        );
        println!("idle h2 connection closed after {waited:?} (timeout 400 ms)");
        let silent = tokio::time::timeout(Duration::from_secs(10), silent)
            .await
            .expect("the silent connection was never closed")
            .unwrap();
        assert!(silent.is_ok(), "a clean GOAWAY, not an error: {silent:?}");
        let lived = silent_from.elapsed();
        assert!(lived < Duration::from_secs(3), "{lived:?}");
        println!("an h2 connection idle after its SETTINGS was closed (seen {lived:?} after it opened, having waited on the other)");
        assert!(
            metrics_until(&e.gw, Duration::from_secs(5), |m| {
                metric(
                    m,
                    "portico_h2_goaway_total",
                    &["portico-live-tls", "reason=\"idle\""],
                ) == 2.0
            })
            .await
        );
    });
}

#[test]
fn idle_h2_connections_from_one_address_leave_another_served_at_once() {
    // The listener could take 150; one address may hold 40 of them.
    let e = env(
        &[
            "--max-connections",
            "150",
            "--max-connections-per-address",
            "40",
        ],
        &[b"h2"],
    );
    runtime().block_on(async {
        let hog: IpAddr = "127.0.0.2".parse().unwrap();
        let mut held = Vec::new();
        let mut refused = 0;
        for _ in 0..100 {
            // Over its cap, the hog's connection is closed: at the handshake, or at once
            // after it.
            // Over its cap, the hog's connection is closed right after the TLS handshake.
            let Ok((mut send, conn)) = h2_connect(&e, hog).await else {
                refused += 1;
                continue;
            };
            let answered =
                tokio::time::timeout(Duration::from_secs(5), try_status(&mut send, "/v1/health"));
            if answered.await.ok().flatten() == Some(200) {
                held.push((send, conn));
            } else {
                refused += 1;
            }
        }
        // Held connections stay open and idle; count those the gateway refused.
        assert!(
            metrics_until(&e.gw, Duration::from_secs(10), |m| {
                metric(
                    m,
                    "portico_connections_refused_per_address_total",
                    &["portico-live-tls"],
                ) == 60.0
                    && metric(
                        m,
                        "portico_connections_open",
                        &["listener=\"portico-live-tls\""],
                    ) == 40.0
            })
            .await,
            "40 held, 60 refused: {}",
            metrics(&e.gw).await
        );
        assert_eq!((held.len(), refused), (40, 60));
        // Another address is served at once, over h2 and HTTP/1.
        let other: IpAddr = "127.0.0.3".parse().unwrap();
        let started = Instant::now();
        let (mut send, _conn) = h2_connect(&e, other).await.unwrap();
        assert_eq!(status_of(&mut send, "/v1/health").await, 200);
        let took = started.elapsed();
        println!("127.0.0.3 served in {took:?} while 127.0.0.2 holds 40 idle h2 connections");
        assert!(took < Duration::from_secs(2), "{took:?}");
        drop(held);
    });
}

#[test]
fn a_silent_tls_connection_counts_and_is_closed_at_the_handshake_deadline_and_caps_are_per_listener(
) {
    let e = env(
        &[
            "--tls-handshake-timeout-ms",
            "600",
            "--max-connections",
            "2",
        ],
        &[b"http/1.1"],
    );
    // Two TCP connections to the TLS listener that never send a ClientHello.
    let mut silent: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(e.tls).unwrap()).collect();
    let opened = Instant::now();
    let full = wait_until(Duration::from_secs(5), || {
        metric(
            &e.gw.metrics(),
            "portico_connections_open",
            &["listener=\"portico-live-tls\""],
        ) == 2.0
    });
    assert!(
        full,
        "silent connections count from accept: {}",
        e.gw.metrics()
    );
    // The TLS listener is full; the plain listener has its own cap and serves.
    let plain = client().get(e.gw.url("/v1/health")).send().unwrap();
    assert_eq!(plain.status(), 200);
    // Closed by the gateway at the deadline.
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "the gateway sent something to a silent connection");
    }
    let lived = opened.elapsed();
    println!("silent TLS connections closed after {lived:?} (deadline 600 ms)");
    assert!(
        lived >= Duration::from_millis(500) && lived < Duration::from_secs(3),
        "{lived:?}"
    );
    let m = e.gw.metrics();
    assert_eq!(
        metric(
            &m,
            "portico_tls_handshake_failures_total",
            &["portico-live-tls", "reason=\"timeout\""]
        ),
        2.0,
        "{m}"
    );
    // The places are free again: HTTPS is served.
    let served = wait_until(Duration::from_secs(5), || {
        let tcp = TcpStream::connect(e.tls).unwrap();
        https_health(&e.client, tcp) == Some(200)
    });
    assert!(served);
}

/// `GET /v1/health` over HTTP/1.1 in TLS on `tcp`: its status.
fn https_health(config: &Arc<rustls::ClientConfig>, mut tcp: TcpStream) -> Option<u16> {
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let mut conn = rustls::ClientConnection::new(config.clone(), name).ok()?;
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    tls.write_all(b"GET /v1/health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = Vec::new();
    let _ = tls.read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text);
    text.split(' ').nth(1)?.parse().ok()
}

#[test]
fn a_reset_flood_gets_enhance_your_calm_and_frees_every_permit() {
    let e = env(&["--h2-reset-budget", "50"], &[b"h2"]);
    runtime().block_on(async {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let (send, conn) = h2_connect(&e, local).await.unwrap();
        // Ten calls held in the backend (30 s), each with a bulkhead permit.
        let mut held = Vec::new();
        for _ in 0..10 {
            let mut ready = send.clone().ready().await.unwrap();
            let (resp, stream) = ready
                .send_request(get("/v1/slow", Some(30_000)), true)
                .unwrap();
            held.push((resp, stream));
        }
        assert!(
            metrics_until(&e.gw, Duration::from_secs(10), |m| {
                metric(m, "portico_bulkhead_in_flight", &["public.slow"]) == 10.0
            })
            .await
        );
        // Then requests each reset once it has reached the backend (so the gateway has taken
        // it, and h2's own guard, which counts resets of streams not yet taken, never sees
        // them): the spaced pattern that went through 3,000 times on one connection.
        let backend = e.backend.http;
        let arrived = move || tokio::task::spawn_blocking(move || backend_count(backend));
        let mut reached = arrived().await.unwrap();
        let mut sent = 0;
        for _ in 0..80 {
            let Ok(mut ready) = send.clone().ready().await else {
                break;
            };
            let Ok((_resp, mut stream)) = ready.send_request(get("/v1/slow", Some(30_000)), true)
            else {
                break;
            };
            sent += 1;
            let until = Instant::now() + Duration::from_secs(5);
            while arrived().await.unwrap() == reached && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            reached += 1;
            stream.send_reset(h2::Reason::CANCEL);
            if conn.is_finished() {
                break;
            }
        }
        let ended = tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .expect("the connection outlived its reset budget")
            .unwrap();
        let err = ended.expect_err("closed with an error code");
        assert_eq!(err.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{err:?}");
        assert!(err.is_go_away(), "{err:?}");
        assert!((50..=60).contains(&sent), "closed after {sent} resets");
        // Every permit is free at once: held calls and reset ones alike.
        let closed = Instant::now();
        assert!(
            metrics_until(&e.gw, Duration::from_secs(2), |m| {
                metric(m, "portico_bulkhead_in_flight", &["public.slow"]) == 0.0
            })
            .await,
            "{}",
            metrics(&e.gw).await
        );
        println!(
            "{sent} resets: GOAWAY ENHANCE_YOUR_CALM; permits free {:?} after the close",
            closed.elapsed()
        );
        // Counted once the connection is gone: after its lingering close (1 s).
        assert!(
            metrics_until(&e.gw, Duration::from_secs(5), |m| {
                metric(
                    m,
                    "portico_h2_goaway_total",
                    &["portico-live-tls", "reason=\"reset_budget\""],
                ) == 1.0
            })
            .await
        );
        let m = metrics(&e.gw).await;
        // None of it is a gateway failure.
        assert_eq!(
            metric(&m, "portico_requests_total", &["status=\"500\""]),
            0.0,
            "{m}"
        );
        assert!(
            metric(
                &m,
                "portico_requests_total",
                &["status=\"499\"", "CLIENT_CLOSED"]
            ) >= 10.0
        );
        drop(held);
    });
}

#[test]
fn one_connection_never_has_more_backend_calls_than_its_stream_limit() {
    let e = env(&["--h2-max-streams", "10"], &[b"h2"]);
    runtime().block_on(async {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let (send, _conn) = h2_connect(&e, local).await.unwrap();
        // Ten slow calls fill the connection's stream limit.
        let mut open = std::collections::VecDeque::new();
        for _ in 0..10 {
            let mut ready = send.clone().ready().await.unwrap();
            open.push_back(
                ready
                    .send_request(get("/v1/slow", Some(3000)), true)
                    .unwrap(),
            );
        }
        assert!(
            metrics_until(&e.gw, Duration::from_secs(10), |m| {
                metric(m, "portico_bulkhead_in_flight", &["public.slow"]) == 10.0
            })
            .await
        );
        // Backend calls in flight, sampled all along.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let admin = e.gw.admin;
        let sampler = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let (mut max, mut samples) = (0.0f64, 0);
                let http = client();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let text = http
                        .get(format!("http://{admin}/metrics"))
                        .send()
                        .unwrap()
                        .text()
                        .unwrap();
                    max = max.max(metric(
                        &text,
                        "portico_bulkhead_in_flight",
                        &["public.slow"],
                    ));
                    samples += 1;
                }
                (max, samples)
            }
        });
        // The pattern that drove 256 calls on one connection: reset a stream, open the next at
        // once (h2 frees a reset stream's place immediately), 100 times.
        for _ in 0..100 {
            let (_resp, mut stream) = open.pop_front().unwrap();
            stream.send_reset(h2::Reason::CANCEL);
            let mut ready = send.clone().ready().await.unwrap();
            open.push_back(
                ready
                    .send_request(get("/v1/slow", Some(3000)), true)
                    .unwrap(),
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Let the last ones start, then stop sampling.
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (max, samples) = tokio::task::spawn_blocking(move || sampler.join().unwrap())
            .await
            .unwrap();
        let backend = e.backend.http;
        let reached = tokio::task::spawn_blocking(move || backend_count(backend))
            .await
            .unwrap();
        println!(
            "100 resets and reopens on one connection (limit 10): {reached} backend calls, \
             at most {max} at once over {samples} samples"
        );
        assert_eq!(max, 10.0, "backend calls at once on one connection");
        assert!(reached > 10, "the reset streams were served too: {reached}");
        drop(open);
    });
}

/// Requests the demo backend has received.
fn backend_count(addr: SocketAddr) -> u64 {
    let v: serde_json::Value = client()
        .get(format!("http://{addr}/__stats"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    v["requests"].as_u64().unwrap_or(0)
}

#[test]
fn a_reset_stream_stops_its_backend_call_at_once_and_is_a_499_not_a_500() {
    let e = env(&[], &[b"h2"]);
    runtime().block_on(async {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let (mut send, _conn) = h2_connect(&e, local).await.unwrap();
        let mut ready = send.clone().ready().await.unwrap();
        // 30 s in the backend.
        let (_resp, mut stream) = ready
            .send_request(get("/v1/slow", Some(30_000)), true)
            .unwrap();
        assert!(
            metrics_until(&e.gw, Duration::from_secs(10), |m| {
                metric(m, "portico_bulkhead_in_flight", &["public.slow"]) == 1.0
            })
            .await
        );
        stream.send_reset(h2::Reason::CANCEL);
        let reset = Instant::now();
        assert!(
            metrics_until(&e.gw, Duration::from_secs(2), |m| {
                metric(m, "portico_bulkhead_in_flight", &["public.slow"]) == 0.0
            })
            .await,
            "the permit is still held"
        );
        let freed = reset.elapsed();
        assert!(
            metrics_until(&e.gw, Duration::from_secs(2), |m| {
                metric(
                    m,
                    "portico_requests_total",
                    &["public.slow", "status=\"499\"", "code=\"CLIENT_CLOSED\""],
                ) == 1.0
            })
            .await,
            "{}",
            metrics(&e.gw).await
        );
        println!("a reset stream's bulkhead permit was free {freed:?} after the reset");
        let m = metrics(&e.gw).await;
        assert_eq!(
            metric(&m, "portico_requests_total", &["status=\"500\""]),
            0.0,
            "{m}"
        );
        assert_eq!(
            metric(&m, "portico_rejections_total", &["CLIENT_CLOSED"]),
            0.0,
            "{m}"
        );
        // The connection itself is fine.
        assert_eq!(status_of(&mut send, "/v1/health").await, 200);
    });
    let log = std::fs::read_to_string(&e.gw.access_log).unwrap();
    assert!(
        log.contains("\"status\":499") && log.contains("\"code\":\"CLIENT_CLOSED\""),
        "{log}"
    );
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// docs/SECURITY.md, "Bounded work before authentication": one unsigned HTTP/2 connection holding
/// 100 streams of unfinished 1 MiB bodies grew the gateway by 50 MB. The signature headers are
/// checked on the head, before any body byte is kept: every stream is answered 401 at once and the
/// gateway's memory stays within a few MiB.
#[test]
fn unfinished_unsigned_h2_bodies_are_answered_at_once_and_never_buffered() {
    let e = env(&[], &[b"h2"]);
    runtime().block_on(async {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        // Warm up: the allocator's arenas and the connection machinery exist before the count.
        let (mut warm, _c) = h2_connect(&e, local).await.unwrap();
        assert_eq!(status_of(&mut warm, "/v1/health").await, 200);
        // The same 100 streams without a body byte first: what 100 refused requests cost
        // whatever their bodies (tasks, sessions, the allocator's arenas).
        let (bare, _b) = h2_connect(&e, local).await.unwrap();
        let mut refused = Vec::new();
        for _ in 0..100 {
            let mut ready = bare.clone().ready().await.unwrap();
            let req = http::Request::post("https://127.0.0.1/v1/signed")
                .header("content-length", (1 << 20).to_string())
                .body(())
                .unwrap();
            let (resp, body) = ready.send_request(req, false).unwrap();
            refused.push((resp, body));
        }
        for (resp, _) in refused.iter_mut() {
            assert_eq!(resp.await.unwrap().status(), 401);
        }
        drop(refused);
        let before = rss_kib(e.gw.pid());
        let (send, conn) = h2_connect(&e, local).await.unwrap();
        let started = Instant::now();
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let mut answers = Vec::new();
        let mut bodies = Vec::new();
        for _ in 0..100 {
            let mut ready = send.clone().ready().await.unwrap();
            let req = http::Request::post("https://127.0.0.1/v1/signed")
                .header("content-length", (1 << 20).to_string())
                .header("content-type", "application/json")
                .body(())
                .unwrap();
            let (resp, mut body) = ready.send_request(req, false).unwrap();
            // 512 KiB of the 1 MiB announced, and never the end of the stream.
            for _ in 0..8 {
                body.send_data(chunk.clone(), false).unwrap();
            }
            answers.push(resp);
            bodies.push(body);
        }
        let mut statuses = Vec::new();
        for resp in answers {
            let resp = tokio::time::timeout(Duration::from_secs(10), resp)
                .await
                .expect("answered without waiting for the body")
                .unwrap();
            statuses.push(resp.status().as_u16());
        }
        let took = started.elapsed();
        assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
        let after = rss_kib(e.gw.pid());
        let grown = after.saturating_sub(before);
        println!(
            "100 unsigned streams of unfinished 1 MiB bodies: all 401 in {took:?}; RSS {before} KiB -> {after} KiB (+{grown} KiB)"
        );
        assert!(grown < 8 * 1024, "the gateway grew by {grown} KiB");
        drop(bodies);
        drop(send);
        conn.abort();
    });
}
