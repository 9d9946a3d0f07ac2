//! `portico-load`: the benchmark load generator.
//!
//! N keep-alive HTTP/1.1 connections (hyper 1), each sending one request at a time for a
//! fixed duration (at most 900 s) or a fixed request count. Every request is signed per
//! docs/PROTOCOL.md ("Signing a request") with a fresh nonce and the current timestamp when `--app-key` and
//! `--secret` are given, whatever the target: nginx, the bare Pingora proxy and the direct
//! backend simply carry the headers along, so the client's cost is the same for every
//! target.
//!
//! ```text
//! portico-load --url http://127.0.0.1:8080/v1/orders/42 --connections 32 --duration 10 \
//!     --app-key bench-app --secret bench-secret [--method POST --body '{"a":1}'] \
//!     [--header 'X-Demo-Hang: 1'] [--rate 2000] [--warmup 1] [--label portico]
//! ```
//!
//! Prints one JSON object on stdout: requests, ok (2xx), errors by status (and `transport`
//! / `timeout`), rps, and latency percentiles in µs over every completed request.
//!
//! Modes:
//! - closed loop (default): no coordinated-omission correction;
//! - `--rate R`: paces each connection, but a late request is sent at once and timed from
//!   when it was sent (not back-dated);
//! - `--rate R --open-loop`: every request has a scheduled send time (connection k sends
//!   requests k, k + N, k + 2N, ... of a fixed-rate schedule); a request whose connection
//!   is still busy is sent as soon as it is free, and its latency is measured **from its
//!   scheduled send time**, so a stalled server is charged for the requests it delayed (no
//!   coordinated omission, as in wrk2);
//! - `--sync`: for instruction counting: `--warmup-requests W` requests, then prints
//!   `warm` and waits for a line on stdin, then sends exactly `--requests N`, prints `done`
//!   and waits for another line before closing its connections and printing the report;
//! - `--idle`: opens `--connections` connections, sends one request on each, prints
//!   `held <open connections>` and keeps them open and idle until a line arrives on stdin;
//! - `--replay-every K`: every K-th request of a connection re-sends the previous request's
//!   exact signature (same nonce and timestamp): a replay the gateway must refuse; its
//!   answers are counted apart (`replays`), not in the figures;
//! - `--series`: per-second counts of 2xx, 429 and other answers (`series`).
//!
//! TLS: `--url https://IP:PORT/...` with `--tls-ca FILE` (the PEM authority to trust) and
//! `--tls-name NAME` (the name to verify, sent as SNI) runs the same modes over TLS 1.3
//! (rustls, ring; ALPN `http/1.1`). `--handshakes` sends no request: every unit of work is
//! a new connection (TCP connect, the TLS handshake, `close_notify`, read until the server
//! closes), counted as one 2xx "answer" when the handshake completes, its latency the
//! handshake's; with `--tls-resume` each connection's client keeps the tickets servers give
//! it and resumes with them (its first handshake is a full one), and `resumed` counts the
//! handshakes that did.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Parser;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST};
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpStream;

mod tls_client;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The longest run allowed (benchmarks are bounded; the replay-cache soak runs minutes).
const MAX_DURATION_S: f64 = 900.0;

#[derive(Parser, Debug, Clone)]
#[command(about = "Portico's load generator: signed keep-alive HTTP/1.1 load, JSON report")]
struct Args {
    /// Target: http://HOST:PORT/path?query (HOST must be an IP address).
    #[arg(long)]
    url: String,
    /// HTTP method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Request body (sent with Content-Type: application/json).
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Request body from a file.
    #[arg(long)]
    body_file: Option<PathBuf>,
    /// Concurrent keep-alive connections (one request in flight on each).
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Measured duration in seconds (at most 900).
    #[arg(long, conflicts_with = "requests")]
    duration: Option<f64>,
    /// Stop after this many requests instead (still cut at 900 s).
    #[arg(long)]
    requests: Option<u64>,
    /// Seconds of load before the measurement starts (not counted).
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Target total request rate (requests/s over all connections); unpaced when absent.
    #[arg(long)]
    rate: Option<f64>,
    /// App key to sign with (docs/PROTOCOL.md, "Signing a request").
    #[arg(long, requires = "secret")]
    app_key: Option<String>,
    /// App secret to sign with.
    #[arg(long, requires = "app_key")]
    secret: Option<String>,
    /// Sign as `KEY:SECRET` (repeatable; connection i signs as app i mod n, so several apps
    /// share the load as merchants would).
    #[arg(long = "app", conflicts_with = "app_key")]
    apps: Vec<String>,
    /// Extra request header `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// A header whose value differs on every request (`<run>-<connection>-<seq>`), e.g. to
    /// make every request a new cache or hot-key key.
    #[arg(long)]
    unique_header: Option<String>,
    /// Tokio worker threads (1: a current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Per-request timeout in ms (the connection is dropped and re-opened after one).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// A label copied into the report.
    #[arg(long, default_value = "")]
    label: String,
    /// With `--rate`: open loop, latency from each request's scheduled send time.
    #[arg(long, requires = "rate")]
    open_loop: bool,
    /// Instruction-count mode: warm up, wait for stdin, exactly `--requests`, wait again.
    #[arg(long, requires = "requests", conflicts_with_all = ["duration", "rate", "idle"])]
    sync: bool,
    /// Requests before the measured ones in `--sync` mode.
    #[arg(long, default_value_t = 0)]
    warmup_requests: u64,
    /// Open `--connections` connections, one request each, and hold them idle until stdin
    /// gets a line.
    #[arg(long, conflicts_with_all = ["duration", "requests", "rate"])]
    idle: bool,
    /// Every K-th request of a connection re-sends the previous signature (a replay).
    #[arg(long)]
    replay_every: Option<u64>,
    /// Report per-second answer counts.
    #[arg(long)]
    series: bool,
    /// The certificate authority to trust for an `https://` URL (PEM).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// The server name to verify for an `https://` URL (sent as SNI).
    #[arg(long, default_value = "localhost")]
    tls_name: String,
    /// Handshake-only load: every unit is a new TLS connection and no request is sent.
    #[arg(long, conflicts_with_all = ["sync", "idle", "replay_every"])]
    handshakes: bool,
    /// With `--handshakes`: clients resume their sessions (TLS 1.3 tickets).
    #[arg(long, requires = "handshakes")]
    tls_resume: bool,
}

/// What one run measured.
#[derive(Debug, Serialize)]
struct Report {
    label: String,
    url: String,
    method: String,
    connections: usize,
    /// Length of the measured window in seconds.
    duration_s: f64,
    /// Completed requests (any status) in the window.
    requests: u64,
    /// 2xx answers.
    ok: u64,
    /// Non-2xx answers by status, plus `transport` (connect/IO errors) and `timeout`.
    errors: BTreeMap<String, u64>,
    /// Every answer by status (2xx included).
    statuses: BTreeMap<u16, u64>,
    rps: f64,
    ok_rps: f64,
    /// Connections opened (the first ones included).
    connects: u64,
    /// Latency over every completed request, in µs.
    latency_us: Latency,
    /// This load generator's own CPU time (user + system) during the window, in seconds.
    client_cpu_s: f64,
    /// `--open-loop`: requests sent more than 1 ms after their scheduled time.
    late_sends: u64,
    /// `--replay-every`: answers to the deliberate replays, by status.
    replays: BTreeMap<u16, u64>,
    /// `--series`: `[second, 2xx, 429, other]` per second of the measured window.
    series: Vec<[u64; 4]>,
    /// `--sync` / `--idle`: connections still open when released.
    held: Option<u64>,
    /// `--handshakes`: handshakes in the window that resumed a session.
    resumed: u64,
}

#[derive(Debug, Serialize, Default)]
struct Latency {
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
    mean: f64,
}

/// One connection's tallies.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    statuses: BTreeMap<u16, u64>,
    transport: u64,
    timeouts: u64,
    connects: u64,
    late_sends: u64,
    replays: BTreeMap<u16, u64>,
    /// Per second of the measured window: [2xx, 429, other].
    series: Vec<[u64; 3]>,
    /// `--handshakes`: resumed handshakes.
    resumed: u64,
}

impl Tally {
    fn merge(&mut self, t: Tally) {
        self.latencies_us.extend_from_slice(&t.latencies_us);
        for (s, n) in t.statuses {
            *self.statuses.entry(s).or_default() += n;
        }
        for (s, n) in t.replays {
            *self.replays.entry(s).or_default() += n;
        }
        if self.series.len() < t.series.len() {
            self.series.resize(t.series.len(), [0; 3]);
        }
        for (a, b) in self.series.iter_mut().zip(&t.series) {
            for i in 0..3 {
                a[i] += b[i];
            }
        }
        self.transport += t.transport;
        self.timeouts += t.timeouts;
        self.connects += t.connects;
        self.late_sends += t.late_sends;
        self.resumed += t.resumed;
    }

    fn record_series(&mut self, second: usize, status: u16) {
        if self.series.len() <= second {
            self.series.resize(second + 1, [0; 3]);
        }
        let i = match status {
            200..=299 => 0,
            429 => 1,
            _ => 2,
        };
        self.series[second][i] += 1;
    }
}

/// The fixed part of every request.
struct Plan {
    addr: SocketAddr,
    host: HeaderValue,
    method: Method,
    /// Path and query as sent on the request line.
    path_and_query: String,
    path: String,
    query: Option<String>,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// `--unique-header`.
    unique_header: Option<HeaderName>,
    /// (app key, secret) pairs; empty: unsigned.
    signers: Vec<(String, Vec<u8>)>,
    timeout: Duration,
    /// Unique per run, so nonces never repeat across runs against one gateway.
    run_id: u64,
    /// An `https://` URL: how to handshake.
    tls: Option<TlsPlan>,
    /// `--handshakes`: new connections, no requests.
    handshakes: bool,
}

/// The TLS side of a run.
struct TlsPlan {
    ca: rustls::pki_types::CertificateDer<'static>,
    name: rustls::pki_types::ServerName<'static>,
    /// The shared client (no resumption) of the keep-alive and handshake loads.
    shared: Arc<rustls::ClientConfig>,
    resume: bool,
}

impl TlsPlan {
    /// The client of one connection's loop: its own session store when it resumes.
    fn client(&self) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        if self.resume {
            tls_client::config(&self.ca, true, &[b"http/1.1"])
        } else {
            Ok(self.shared.clone())
        }
    }
}

impl Plan {
    fn from_args(args: &Args) -> anyhow::Result<Self> {
        let (rest, https) = match (
            args.url.strip_prefix("http://"),
            args.url.strip_prefix("https://"),
        ) {
            (Some(r), _) => (r, false),
            (_, Some(r)) => (r, true),
            _ => bail!("--url must start with http:// or https://"),
        };
        let tls = if https {
            let ca = tls_client::read_ca(
                args.tls_ca
                    .as_deref()
                    .context("an https:// URL needs --tls-ca")?,
            )?;
            Some(TlsPlan {
                shared: tls_client::config(&ca, false, &[b"http/1.1"])?,
                name: tls_client::server_name(&args.tls_name)?,
                ca,
                resume: args.tls_resume,
            })
        } else {
            None
        };
        if args.handshakes && tls.is_none() {
            bail!("--handshakes needs an https:// URL");
        }
        let (authority, path_and_query) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let addr: SocketAddr = authority
            .parse()
            .with_context(|| format!("--url host must be IP:PORT, got {authority}"))?;
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
            None => (path_and_query.to_owned(), None),
        };
        let body = match (&args.body, &args.body_file) {
            (Some(b), _) => Bytes::from(b.clone().into_bytes()),
            (None, Some(f)) => {
                Bytes::from(std::fs::read(f).with_context(|| format!("reading {}", f.display()))?)
            }
            (None, None) => Bytes::new(),
        };
        let mut headers = Vec::new();
        for h in &args.headers {
            let (name, value) = h
                .split_once(':')
                .with_context(|| format!("--header {h:?}: expected `Name: value`"))?;
            headers.push((
                HeaderName::from_bytes(name.trim().as_bytes())
                    .with_context(|| format!("header name {name:?}"))?,
                HeaderValue::from_str(value.trim())
                    .with_context(|| format!("header value {value:?}"))?,
            ));
        }
        let method =
            Method::from_bytes(args.method.to_ascii_uppercase().as_bytes()).context("--method")?;
        let mut signers = Vec::new();
        if let (Some(k), Some(s)) = (&args.app_key, &args.secret) {
            signers.push((k.clone(), s.clone().into_bytes()));
        }
        for a in &args.apps {
            let (k, s) = a
                .split_once(':')
                .with_context(|| format!("--app {a:?}: expected KEY:SECRET"))?;
            signers.push((k.to_owned(), s.as_bytes().to_vec()));
        }
        Ok(Plan {
            addr,
            host: HeaderValue::from_str(authority).context("host header")?,
            method,
            path_and_query: path_and_query.to_owned(),
            path,
            query,
            body,
            headers,
            unique_header: args
                .unique_header
                .as_deref()
                .map(|n| HeaderName::from_bytes(n.trim().as_bytes()))
                .transpose()
                .context("--unique-header")?,
            signers,
            timeout: Duration::from_millis(args.timeout_ms.max(1)),
            run_id: fastrand::u64(..),
            tls,
            handshakes: args.handshakes,
        })
    }

    /// Builds request number `seq` of connection `conn`, signed with a fresh nonce and the
    /// current time.
    fn request(&self, conn: usize, seq: u64) -> anyhow::Result<Request<Full<Bytes>>> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        self.request_at(conn, seq, now_ms)
    }

    /// Builds request number `seq` of connection `conn` signed at `now_ms`: the same
    /// arguments give the same nonce and signature (a replay).
    fn request_at(
        &self,
        conn: usize,
        seq: u64,
        now_ms: u64,
    ) -> anyhow::Result<Request<Full<Bytes>>> {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(self.path_and_query.as_str())
            .header(HOST, self.host.clone());
        if !self.body.is_empty() {
            b = b.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        for (n, v) in &self.headers {
            b = b.header(n, v);
        }
        if let Some(n) = &self.unique_header {
            b = b.header(n, format!("{:x}-{conn}-{seq}", self.run_id));
        }
        if !self.signers.is_empty() {
            let (key, secret) = &self.signers[conn % self.signers.len()];
            let nonce = format!("n{:016x}-{conn}-{seq}", self.run_id);
            let signed = portico_control::sign::sign_request(
                secret,
                self.method.as_str(),
                &self.path,
                self.query.as_deref(),
                key,
                now_ms,
                &nonce,
                &self.body,
            );
            for (name, value) in signed.pairs() {
                b = b.header(name, value);
            }
        }
        Ok(b.body(Full::new(self.body.clone()))?)
    }
}

/// Shared run state: when to start counting, when to stop, how many requests remain.
struct Clock {
    measure_from: Instant,
    stop_at: Instant,
    /// Requests left when `--requests` is given (negative: none left); `i64::MAX` otherwise.
    remaining: AtomicI64,
}

async fn connect(plan: &Plan) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    if let Some(tls) = &plan.tls {
        let stream = tls_client::connect(&tls.shared, &tls.name, plan.addr).await?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        return Ok(sender);
    }
    let stream = TcpStream::connect(plan.addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// `--handshakes`: one new TLS connection, no request (a completed handshake is a 200).
async fn handshake_unit(
    plan: &Plan,
    client: &Arc<rustls::ClientConfig>,
    connects: &mut u64,
    resumed: &mut bool,
) -> Outcome {
    let Some(tls) = &plan.tls else {
        return Outcome::Connect;
    };
    *connects += 1;
    match tls_client::handshake_once(client, &tls.name, plan.addr, plan.timeout).await {
        Ok(r) => {
            *resumed = r;
            Outcome::Status(200)
        }
        Err(e) if e.to_string().contains("timed out") => Outcome::Timeout,
        Err(_) => Outcome::Transport,
    }
}

type Sender = http1::SendRequest<Full<Bytes>>;

/// How a connection paces its requests.
#[derive(Debug, Clone, Copy)]
enum Pace {
    /// The next request as soon as the previous answer is in.
    Closed,
    /// One request per interval; a late one is sent at once and timed from its sending.
    Paced(Duration),
    /// One request per interval, timed from its scheduled send time (no coordinated
    /// omission).
    OpenLoop(Duration),
}

/// What became of one request.
enum Outcome {
    Status(u16),
    /// No connection could be opened.
    Connect,
    Transport,
    Timeout,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Sends `req` on the connection (opening one when there is none or it closed) and reads
/// the whole answer.
async fn exchange(
    plan: &Plan,
    sender: &mut Option<Sender>,
    connects: &mut u64,
    req: Request<Full<Bytes>>,
) -> Outcome {
    if sender.as_ref().is_none_or(|s| s.is_closed()) {
        match connect(plan).await {
            Ok(s) => {
                *connects += 1;
                *sender = Some(s);
            }
            Err(_) => {
                *sender = None;
                return Outcome::Connect;
            }
        }
    }
    let Some(s) = sender.as_mut() else {
        return Outcome::Connect;
    };
    let outcome = tokio::time::timeout(plan.timeout, async {
        s.ready().await?;
        let resp = s.send_request(req).await?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok::<u16, hyper::Error>(status)
    })
    .await;
    match outcome {
        Ok(Ok(status)) => Outcome::Status(status),
        Ok(Err(_)) => {
            *sender = None;
            Outcome::Transport
        }
        Err(_) => {
            *sender = None;
            Outcome::Timeout
        }
    }
}

/// Per-connection options of a duration run.
#[derive(Debug, Clone, Copy)]
struct Mode {
    pace: Pace,
    replay_every: Option<u64>,
    series: bool,
    connections: usize,
}

/// One connection's loop (closed, paced or open-loop).
async fn worker(plan: Arc<Plan>, clock: Arc<Clock>, conn: usize, mode: Mode) -> Tally {
    let mut tally = Tally::default();
    let handshake_client = match plan.tls.as_ref().filter(|_| plan.handshakes) {
        Some(tls) => match tls.client() {
            Ok(c) => Some(c),
            Err(_) => {
                tally.transport += 1;
                return tally;
            }
        },
        None => None,
    };
    let mut sender: Option<Sender> = None;
    let mut seq: u64 = 0;
    let mut sent: u64 = 0;
    let mut last_signed: Option<(u64, u64)> = None;
    // Spread the connections' schedules over one interval so they do not fire together.
    let first = match mode.pace {
        Pace::Closed => Instant::now(),
        Pace::Paced(p) => Instant::now() + p.mul_f64(fastrand::f64()),
        Pace::OpenLoop(p) => {
            Instant::now() + p.mul_f64(conn as f64 / mode.connections.max(1) as f64)
        }
    };
    let mut slot: u32 = 0;
    loop {
        let scheduled = match mode.pace {
            Pace::Closed => None,
            Pace::Paced(p) | Pace::OpenLoop(p) => Some(first + p * slot),
        };
        if let Some(at) = scheduled {
            if at > clock.stop_at {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
        }
        slot = slot.saturating_add(1);
        let now = Instant::now();
        if now >= clock.stop_at {
            break;
        }
        let counted = now >= clock.measure_from;
        sent += 1;
        let replay = match (mode.replay_every, last_signed) {
            (Some(k), Some(prev)) if k > 0 && sent.is_multiple_of(k) => Some(prev),
            _ => None,
        };
        if replay.is_none() && counted && clock.remaining.fetch_sub(1, Ordering::Relaxed) <= 0 {
            break;
        }
        let req = match (replay, &handshake_client) {
            (_, Some(_)) => None,
            (Some((s, ms)), None) => Some(plan.request_at(conn, s, ms)),
            (None, None) => {
                seq += 1;
                let ms = now_ms();
                last_signed = Some((seq, ms));
                Some(plan.request_at(conn, seq, ms))
            }
        };
        let req = match req.transpose() {
            Ok(r) => r,
            Err(_) => {
                tally.transport += 1;
                break;
            }
        };
        let start = match (mode.pace, scheduled) {
            (Pace::OpenLoop(_), Some(at)) => {
                if counted && now > at + Duration::from_millis(1) {
                    tally.late_sends += 1;
                }
                at
            }
            _ => Instant::now(),
        };
        let mut resumed = false;
        let outcome = match (req, &handshake_client) {
            (Some(req), _) => exchange(&plan, &mut sender, &mut tally.connects, req).await,
            (None, Some(client)) => {
                handshake_unit(&plan, client, &mut tally.connects, &mut resumed).await
            }
            (None, None) => Outcome::Connect,
        };
        let elapsed = start.elapsed();
        if counted && resumed {
            tally.resumed += 1;
        }
        if !counted {
            if matches!(outcome, Outcome::Connect) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            continue;
        }
        match outcome {
            Outcome::Status(status) if replay.is_some() => {
                *tally.replays.entry(status).or_default() += 1;
            }
            Outcome::Status(status) => {
                tally
                    .latencies_us
                    .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
                *tally.statuses.entry(status).or_default() += 1;
                if mode.series {
                    let second = now.duration_since(clock.measure_from).as_secs() as usize;
                    tally.record_series(second, status);
                }
            }
            Outcome::Connect => {
                tally.transport += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Outcome::Transport => tally.transport += 1,
            Outcome::Timeout => tally.timeouts += 1,
        }
    }
    tally
}

/// Records one measured answer of `--sync` / `--idle` mode.
fn record(tally: &mut Tally, outcome: Outcome, elapsed: Duration) {
    match outcome {
        Outcome::Status(status) => {
            tally
                .latencies_us
                .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
            *tally.statuses.entry(status).or_default() += 1;
        }
        Outcome::Connect | Outcome::Transport => tally.transport += 1,
        Outcome::Timeout => tally.timeouts += 1,
    }
}

/// `--sync`: warm-up requests (shared count), the barrier, then the measured requests
/// (shared count); the connection is handed back open.
async fn worker_sync(
    plan: Arc<Plan>,
    conn: usize,
    warm_left: Arc<AtomicI64>,
    remaining: Arc<AtomicI64>,
    warmed: Arc<tokio::sync::Barrier>,
    mut go: tokio::sync::watch::Receiver<bool>,
) -> (Tally, Option<Sender>) {
    let mut tally = Tally::default();
    let mut sender: Option<Sender> = None;
    let mut seq: u64 = 0;
    let mut connects = 0;
    while warm_left.fetch_sub(1, Ordering::Relaxed) > 0 {
        seq += 1;
        let Ok(req) = plan.request(conn, seq) else {
            break;
        };
        let _ = exchange(&plan, &mut sender, &mut connects, req).await;
    }
    // Open the connection now if the warm-up did not, so the measured part has none to open.
    if sender.is_none() {
        if let Ok(s) = connect(&plan).await {
            connects += 1;
            sender = Some(s);
        }
    }
    warmed.wait().await;
    let _ = go.wait_for(|v| *v).await;
    while remaining.fetch_sub(1, Ordering::Relaxed) > 0 {
        seq += 1;
        let Ok(req) = plan.request(conn, seq) else {
            tally.transport += 1;
            break;
        };
        let start = Instant::now();
        let outcome = exchange(&plan, &mut sender, &mut tally.connects, req).await;
        record(&mut tally, outcome, start.elapsed());
    }
    tally.connects += connects;
    (tally, sender)
}

/// `--idle`: opens a connection (at most `opening` at a time), sends one request and hands
/// the connection back open.
async fn worker_idle(
    plan: Arc<Plan>,
    conn: usize,
    opening: Arc<tokio::sync::Semaphore>,
) -> (Tally, Option<Sender>) {
    let mut tally = Tally::default();
    let mut sender: Option<Sender> = None;
    let Ok(_permit) = opening.acquire().await else {
        return (tally, None);
    };
    let Ok(req) = plan.request(conn, 1) else {
        tally.transport += 1;
        return (tally, None);
    };
    let start = Instant::now();
    let outcome = exchange(&plan, &mut sender, &mut tally.connects, req).await;
    record(&mut tally, outcome, start.elapsed());
    (tally, sender)
}

/// Prints `what` on stdout (flushed) and waits for a line on stdin.
async fn handshake(what: &str) -> anyhow::Result<()> {
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{what}")?;
        out.flush()?;
    }
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| ())
    })
    .await??;
    Ok(())
}

/// utime + stime of this process from `/proc/self/stat`, in seconds (0 if unreadable;
/// assumes the usual 100 clock ticks per second).
fn self_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

fn percentile(sorted: &[u32], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    u64::from(sorted[rank - 1])
}

async fn run(args: Args) -> anyhow::Result<Report> {
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    if !(0.0..=10.0).contains(&args.warmup) {
        bail!("--warmup must be in [0, 10]");
    }
    let plan = Arc::new(Plan::from_args(&args)?);
    if args.sync || args.idle {
        return run_held(args, plan).await;
    }
    let duration = match (args.duration, args.requests) {
        (Some(d), _) if d > 0.0 && d <= MAX_DURATION_S => d,
        (Some(d), _) => bail!("--duration must be in (0, {MAX_DURATION_S}], got {d}"),
        (None, Some(_)) => MAX_DURATION_S,
        (None, None) => bail!("give --duration SECS or --requests N"),
    };
    let pace = match args.rate {
        Some(r) if r > 0.0 => {
            let interval = Duration::from_secs_f64(args.connections as f64 / r);
            if args.open_loop {
                Pace::OpenLoop(interval)
            } else {
                Pace::Paced(interval)
            }
        }
        Some(r) => bail!("--rate must be positive, got {r}"),
        None => Pace::Closed,
    };
    let mode = Mode {
        pace,
        replay_every: args.replay_every,
        series: args.series,
        connections: args.connections,
    };
    let begin = Instant::now();
    let measure_from = begin + Duration::from_secs_f64(args.warmup);
    let clock = Arc::new(Clock {
        measure_from,
        stop_at: measure_from + Duration::from_secs_f64(duration),
        remaining: AtomicI64::new(
            args.requests
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
                .unwrap_or(i64::MAX),
        ),
    });
    let cpu_at_start = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        self_cpu_seconds()
    });
    let mut tasks = Vec::with_capacity(args.connections);
    for conn in 0..args.connections {
        tasks.push(tokio::spawn(worker(
            plan.clone(),
            clock.clone(),
            conn,
            mode,
        )));
    }
    let mut all = Tally::default();
    for t in tasks {
        all.merge(t.await.context("a connection task panicked")?);
    }
    let end = Instant::now().min(clock.stop_at).max(measure_from);
    let client_cpu_s = (self_cpu_seconds() - cpu_at_start.await.unwrap_or(0.0)).max(0.0);
    let window = end.duration_since(measure_from).as_secs_f64().max(1e-9);
    Ok(report(&args, all, window, client_cpu_s, None))
}

/// `--sync` and `--idle`: connections kept open across stdin handshakes.
async fn run_held(args: Args, plan: Arc<Plan>) -> anyhow::Result<Report> {
    let mut held: Vec<Sender> = Vec::new();
    let mut all = Tally::default();
    let (window, cpu) = if args.sync {
        let n = args.requests.context("--sync needs --requests")?;
        let warm_left = Arc::new(AtomicI64::new(
            i64::try_from(args.warmup_requests).unwrap_or(i64::MAX),
        ));
        let remaining = Arc::new(AtomicI64::new(i64::try_from(n).unwrap_or(i64::MAX)));
        let warmed = Arc::new(tokio::sync::Barrier::new(args.connections + 1));
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::with_capacity(args.connections);
        for conn in 0..args.connections {
            tasks.push(tokio::spawn(worker_sync(
                plan.clone(),
                conn,
                warm_left.clone(),
                remaining.clone(),
                warmed.clone(),
                go_rx.clone(),
            )));
        }
        warmed.wait().await;
        handshake("warm").await?;
        let cpu0 = self_cpu_seconds();
        let started = Instant::now();
        go_tx.send_replace(true);
        for t in tasks {
            let (tally, sender) = t.await.context("a connection task panicked")?;
            all.merge(tally);
            held.extend(sender);
        }
        let window = started.elapsed().as_secs_f64();
        let cpu = (self_cpu_seconds() - cpu0).max(0.0);
        handshake("done").await?;
        (window, cpu)
    } else {
        let opening = Arc::new(tokio::sync::Semaphore::new(128));
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(args.connections);
        for conn in 0..args.connections {
            tasks.push(tokio::spawn(worker_idle(
                plan.clone(),
                conn,
                opening.clone(),
            )));
        }
        for t in tasks {
            let (tally, sender) = t.await.context("a connection task panicked")?;
            all.merge(tally);
            held.extend(sender);
        }
        let window = started.elapsed().as_secs_f64();
        let open = held.iter().filter(|s| !s.is_closed()).count();
        handshake(&format!("held {open}")).await?;
        (window, 0.0)
    };
    let still_open = held.iter().filter(|s| !s.is_closed()).count() as u64;
    drop(held);
    Ok(report(&args, all, window.max(1e-9), cpu, Some(still_open)))
}

fn report(
    args: &Args,
    mut all: Tally,
    window: f64,
    client_cpu_s: f64,
    held: Option<u64>,
) -> Report {
    all.latencies_us.sort_unstable();
    let lat = &all.latencies_us;
    let latency = Latency {
        p50: percentile(lat, 0.50),
        p90: percentile(lat, 0.90),
        p99: percentile(lat, 0.99),
        p999: percentile(lat, 0.999),
        max: lat.last().map(|v| u64::from(*v)).unwrap_or(0),
        mean: if lat.is_empty() {
            0.0
        } else {
            lat.iter().map(|v| f64::from(*v)).sum::<f64>() / lat.len() as f64
        },
    };
    let requests: u64 = all.statuses.values().sum();
    let ok: u64 = all
        .statuses
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum();
    let mut errors: BTreeMap<String, u64> = all
        .statuses
        .iter()
        .filter(|(s, _)| !(200..300).contains(*s))
        .map(|(s, n)| (s.to_string(), *n))
        .collect();
    if all.transport > 0 {
        errors.insert("transport".into(), all.transport);
    }
    if all.timeouts > 0 {
        errors.insert("timeout".into(), all.timeouts);
    }
    Report {
        label: args.label.clone(),
        url: args.url.clone(),
        method: args.method.to_ascii_uppercase(),
        connections: args.connections,
        duration_s: window,
        requests,
        ok,
        errors,
        statuses: all.statuses,
        rps: requests as f64 / window,
        ok_rps: ok as f64 / window,
        connects: all.connects,
        latency_us: latency,
        client_cpu_s,
        late_sends: all.late_sends,
        replays: all.replays,
        series: all
            .series
            .iter()
            .enumerate()
            .map(|(i, c)| [i as u64, c[0], c[1], c[2]])
            .collect(),
        held,
        resumed: all.resumed,
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    let report = rt.block_on(run(args))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
