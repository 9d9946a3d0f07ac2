//! The notifications benchmark (benches/RESULTS.md, "Notifications"): notifications end to end
//! (docs/PROTOCOL.md "Notifications", docs/operations/notifications.md "Notifications").
//!
//! One release gateway (`--threads 1`, pinned like every proxy under test) with `--redis` (a
//! local `redis-server`), and again with the in-memory store; a tree of [`APPS`] apps, each
//! granted the one topic `orders` (its own `"topics": ["orders"]`). In this process:
//!
//! - **merchants**: one tokio task per merchant, each on **its own TCP connection**, holding a
//!   signed `GET /notify/v1/stream` (docs/PROTOCOL.md, "Signing a request") (HTTP/1.1, chunked SSE
//!   decoded here) and acking in batches with signed `POST /notify/v1/ack` on a keep-alive
//!   connection of its own;
//! - **a publisher**: open loop, event `k` scheduled at `start + k / rate`, sent on one of
//!   [`PUBLISH_CONNS`] keep-alive connections to the internal listener (`POST
//!   /internal/v1/notifications`, bearer token), to app `k mod merchants`; the payload
//!   carries `k` and its scheduled time (Unix µs). Latency = receive time − scheduled time
//!   (so a publisher that falls behind counts against the gateway, not for it).
//!
//! Figures: latency p50/p90/p99/max at 1,000 events/s over 1,000 merchants (after a
//! warm-up), lost and duplicated events; gateway RSS with 0, 1,000 and 5,000 idle signed
//! streams, (ΔRSS)/N, with what the idle streams cost in CPU and Redis commands (each idle
//! stream polls its store and checks its hold once a second while publishes wake it); and stepped open-loop rates until delivery lags (p99 > 1
//! s, events missing after the drain, or the publisher cannot hold the rate).

use crate::fleet::redis_counters;
use crate::procs::{rss_kib, Launch, Proc};
use crate::report::{f0, f1, table, write_section};
use crate::services::{start_portico_with, Proxy};
use crate::trees::write_doc;
use crate::{loadavg, preamble, Ctx};
use anyhow::{anyhow, bail, Context};
use portico_testkit::Redis;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// Apps in the tree (the most idle streams opened).
const APPS: usize = 5_000;
/// Merchants connected during the latency and throughput runs.
const MERCHANTS: usize = 1_000;
/// Idle stream counts of the memory runs.
const IDLE_STEPS: &[usize] = &[1_000, 5_000];
/// The fixed rate of the latency run.
const RATE: f64 = 1_000.0;
/// Seconds of warm-up and of measurement of the latency run.
const WARMUP_S: f64 = 5.0;
const MEASURE_S: f64 = 30.0;
/// Stepped rates of the throughput run, and each step's warm-up and measurement.
const STEPS: &[f64] = &[
    1_000.0, 2_000.0, 4_000.0, 6_000.0, 8_000.0, 12_000.0, 16_000.0,
];
const STEP_WARMUP_S: f64 = 2.0;
const STEP_MEASURE_S: f64 = 8.0;
/// A step keeps up while its p99 stays under this.
const LAG_P99_US: u64 = 1_000_000;
/// Keep-alive connections of the publisher.
const PUBLISH_CONNS: usize = 64;
/// A merchant acks what it received at this interval (one signed POST per batch).
const ACK_EVERY: Duration = Duration::from_secs(1);
/// Events still missing this long after the last publish count as lost.
const DRAIN: Duration = Duration::from_secs(10);
/// The publisher token of the bench gateway.
const TOKEN: &str = "bench-publisher-token-0123456789";
/// Open files of the gateway and of this process (5,000 streams + acks + publisher).
const NOFILE: u64 = 20_000;

fn app_key(i: usize) -> String {
    format!("notify-app-{i:05}")
}

fn app_secret(i: usize) -> String {
    format!("notify-secret-{i:05}-0123456789abcdef")
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The tree: [`APPS`] apps granted `orders` in their own documents, the topic (a day's
/// retention), an IP list admitting loopback.
fn write_tree(root: &std::path::Path) -> anyhow::Result<()> {
    for i in 0..APPS {
        write_doc(
            root,
            &format!("apps/{}.json", app_key(i)),
            &json!({
                "name": format!("Notification merchant {i}"),
                "secret": app_secret(i),
                "status": "active",
                "apis": [],
                "topics": ["orders"]
            }),
        )?;
    }
    write_doc(
        root,
        "topics/orders.json",
        &json!({"owner": "bench", "description": "benchmark events", "apps": [], "retention_s": 3600}),
    )?;
    write_doc(root, "ipacl.json", &json!({"allow": ["127.0.0.0/8"]}))?;
    std::fs::write(root.join("publish.token"), TOKEN)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// HTTP/1.1 on raw sockets: chunked decoding, one request/response on a keep-alive stream.

/// A chunked transfer-encoding decoder fed with whatever the socket gave.
#[derive(Default)]
struct Dechunk {
    /// Bytes left in the current chunk.
    left: usize,
    /// The CRLF after a chunk's data is still to skip.
    crlf: bool,
    /// The last chunk (size 0) was seen.
    done: bool,
}

impl Dechunk {
    /// Moves the decoded bytes of `raw` to `out`, leaving an incomplete size line in `raw`.
    fn feed(&mut self, raw: &mut Vec<u8>, out: &mut Vec<u8>) -> anyhow::Result<()> {
        let mut at = 0;
        loop {
            if self.done {
                break;
            }
            if self.left > 0 {
                let n = self.left.min(raw.len() - at);
                out.extend_from_slice(&raw[at..at + n]);
                at += n;
                self.left -= n;
                if self.left > 0 {
                    break;
                }
                self.crlf = true;
            }
            if self.crlf {
                if raw.len() - at < 2 {
                    break;
                }
                at += 2;
                self.crlf = false;
            }
            let Some(end) = raw[at..].windows(2).position(|w| w == b"\r\n") else {
                break;
            };
            let line = std::str::from_utf8(&raw[at..at + end])?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| anyhow!("bad chunk size line {line:?}"))?;
            at += end + 2;
            if size == 0 {
                self.done = true;
            } else {
                self.left = size;
            }
        }
        raw.drain(..at);
        Ok(())
    }
}

/// Reads from `s` until `buf` holds a whole response head; returns (status, chunked,
/// content-length) and leaves the bytes after the head in `buf`.
async fn read_head(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> anyhow::Result<(u16, bool, Option<usize>)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            buf.drain(..end + 4);
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .context("no status in the response head")?;
            let chunked = head.contains("transfer-encoding: chunked");
            let length = head.lines().find_map(|l| {
                l.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse().ok())
            });
            return Ok((status, chunked, length));
        }
        if s.read_buf(buf).await? == 0 {
            bail!("connection closed before the response head");
        }
    }
}

/// One request on the keep-alive stream `s`: (status, body).
async fn exchange(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    request: &[u8],
) -> anyhow::Result<(u16, Vec<u8>)> {
    s.write_all(request).await?;
    let (status, chunked, length) = read_head(s, buf).await?;
    let mut body = Vec::new();
    if chunked {
        let mut d = Dechunk::default();
        loop {
            d.feed(buf, &mut body)?;
            if d.done {
                // The trailer section: an empty line.
                while buf.len() < 2 {
                    if s.read_buf(buf).await? == 0 {
                        bail!("connection closed in the chunked trailer");
                    }
                }
                buf.drain(..2);
                break;
            }
            if s.read_buf(buf).await? == 0 {
                bail!("connection closed in a chunked body");
            }
        }
    } else {
        let n = length.unwrap_or(0);
        while buf.len() < n {
            if s.read_buf(buf).await? == 0 {
                bail!("connection closed in the body");
            }
        }
        body.extend(buf.drain(..n));
    }
    Ok((status, body))
}

/// A signed request (docs/PROTOCOL.md, "Signing a request") of app `i`.
fn signed_request(
    addr: SocketAddr,
    i: usize,
    method: &str,
    path: &str,
    body: &[u8],
    extra: &str,
) -> Vec<u8> {
    static NONCE: AtomicU64 = AtomicU64::new(0);
    let nonce = format!(
        "nb{:x}x{:x}",
        NONCE.fetch_add(1, Ordering::Relaxed),
        fastrand::u64(..)
    );
    let s = portico_control::sign::sign_request(
        app_secret(i).as_bytes(),
        method,
        path,
        None,
        &app_key(i),
        unix_us() / 1000,
        &nonce,
        body,
    );
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}");
    for (k, v) in s.pairs() {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    out.extend_from_slice(body);
    out
}

// ---------------------------------------------------------------------------------------
// What the merchants saw.

/// One publishing phase: the events `0..count` of phase `id`.
struct Phase {
    id: u64,
    /// Per event: 1 once its publish was answered 200.
    published: Vec<AtomicU32>,
    /// Per event: how many times a merchant received it.
    received: Vec<AtomicU32>,
    /// (event, latency µs) of every first receipt.
    latency: Mutex<Vec<(u32, i64)>>,
    /// Receipts of every event (duplicates included).
    receipts: AtomicU64,
}

impl Phase {
    fn new(id: u64, count: usize) -> Phase {
        Phase {
            id,
            published: (0..count).map(|_| AtomicU32::new(0)).collect(),
            received: (0..count).map(|_| AtomicU32::new(0)).collect(),
            latency: Mutex::new(Vec::with_capacity(count)),
            receipts: AtomicU64::new(0),
        }
    }
}

/// State shared by the merchants and the run.
struct Shared {
    addr: SocketAddr,
    phase: RwLock<Arc<Phase>>,
    /// Streams whose `200` head arrived.
    open: AtomicUsize,
    /// Events of no current phase (an earlier phase's late redelivery).
    stray: AtomicU64,
    acked: AtomicU64,
    ack_failures: AtomicU64,
    /// Opening requests refused, by status (0: no answer): count and the first body.
    refused: Mutex<std::collections::BTreeMap<u16, (u64, String)>>,
    /// Open streams that broke (then opened again), and the first few reasons.
    dropped: AtomicU64,
    drop_reasons: Mutex<Vec<String>>,
    /// Streams opened again after a refusal or a drop.
    reopened: AtomicU64,
    /// Whether merchants ack (the idle runs do not need to).
    acking: bool,
}

impl Shared {
    /// Refusals and drops so far, in words ("none" when there were none).
    fn troubles(&self) -> String {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<String> = refused
            .iter()
            .map(|(status, (n, body))| {
                format!("{n} openings refused with {status} (first: {body:?})")
            })
            .collect();
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            out.push(format!(
                "{dropped} open streams dropped (first: {:?})",
                self.drop_reasons.lock().unwrap_or_else(|p| p.into_inner())
            ));
        }
        if out.is_empty() {
            "none".into()
        } else {
            out.join("; ")
        }
    }

    fn current(&self) -> Arc<Phase> {
        Arc::clone(&self.phase.read().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Handles one SSE event block (`id:`, `event:`, `data:` lines); returns a close reason
/// when it is the gateway's `close` event.
fn on_event(shared: &Shared, block: &str, acks: &mpsc::UnboundedSender<String>) -> Option<String> {
    let now = unix_us() as i64;
    let mut event = "message";
    let mut data = "";
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim();
        } else if let Some(v) = line.strip_prefix("data:") {
            data = v.trim();
        }
    }
    match event {
        "notification" => {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
                return None;
            };
            if shared.acking {
                if let Some(id) = v["id"].as_str() {
                    let _ = acks.send(id.to_owned());
                }
            }
            let p = &v["payload"];
            let (Some(ph), Some(k), Some(t)) = (p["ph"].as_u64(), p["k"].as_u64(), p["t"].as_i64())
            else {
                return None;
            };
            let phase = shared.current();
            if phase.id != ph || k as usize >= phase.received.len() {
                shared.stray.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            phase.receipts.fetch_add(1, Ordering::Relaxed);
            if phase.received[k as usize].fetch_add(1, Ordering::Relaxed) == 0 {
                phase
                    .latency
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((k as u32, now - t));
            }
            None
        }
        "close" => Some(data.to_owned()),
        _ => None,
    }
}

/// How a stream session ended.
enum Ended {
    /// The run asked the merchants to stop.
    Stopped,
    /// The opening request was refused with this status and body.
    Refused(u16, String),
    /// The stream broke after it was open (the gateway closed it, an I/O error).
    Dropped(String),
}

/// One merchant: its own connection holding the signed stream, events acked in batches
/// through [`acker`]. As docs/PROTOCOL.md tells merchants, a refused or dropped stream is
/// opened again (with a fresh signature), after 0.2 s, doubling up to 2 s; every refusal
/// and drop is counted. Ends when `stop` turns true.
async fn merchant(i: usize, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let ack = tokio::spawn(acker(i, Arc::clone(&shared), rx));
    let mut first = true;
    let mut backoff = Duration::from_millis(200);
    loop {
        match session(i, &shared, &mut stop, &tx, &mut first).await {
            Ended::Stopped => break,
            Ended::Refused(status, body) => {
                let mut r = shared.refused.lock().unwrap_or_else(|p| p.into_inner());
                let e = r.entry(status).or_insert((0, body));
                e.0 += 1;
            }
            Ended::Dropped(why) => {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
                let mut d = shared
                    .drop_reasons
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if d.len() < 5 {
                    d.push(why);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => break,
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
    drop(tx);
    let _ = ack.await;
}

/// One signed stream, from the opening request until it ends.
async fn session(
    i: usize,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
    tx: &mpsc::UnboundedSender<String>,
    first: &mut bool,
) -> Ended {
    let addr = shared.addr;
    let io = |e: std::io::Error| Ended::Dropped(format!("I/O: {e}"));
    let mut s = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => return Ended::Refused(0, format!("connect: {e}")),
    };
    let _ = s.set_nodelay(true);
    let req = signed_request(
        addr,
        i,
        "GET",
        "/notify/v1/stream",
        b"",
        "Accept: text/event-stream\r\n",
    );
    if let Err(e) = s.write_all(&req).await {
        return io(e);
    }
    let mut raw = Vec::with_capacity(1024);
    let (status, chunked, _) = match read_head(&mut s, &mut raw).await {
        Ok(h) => h,
        Err(e) => return Ended::Refused(0, format!("{e:#}")),
    };
    if status != 200 {
        // The envelope follows (small): keep what already arrived.
        let _ = tokio::time::timeout(Duration::from_millis(200), s.read_buf(&mut raw)).await;
        return Ended::Refused(
            status,
            String::from_utf8_lossy(&raw).chars().take(300).collect(),
        );
    }
    if std::mem::take(first) {
        shared.open.fetch_add(1, Ordering::Relaxed);
    } else {
        shared.reopened.fetch_add(1, Ordering::Relaxed);
    }
    let mut d = Dechunk::default();
    let mut text = Vec::new();
    loop {
        if chunked {
            if let Err(e) = d.feed(&mut raw, &mut text) {
                return Ended::Dropped(format!("{e:#}"));
            }
        } else {
            text.append(&mut raw);
        }
        while let Some(end) = text.windows(2).position(|w| w == b"\n\n") {
            let block = String::from_utf8_lossy(&text[..end]).into_owned();
            text.drain(..end + 2);
            if let Some(reason) = on_event(shared, &block, tx) {
                return Ended::Dropped(format!("close event: {reason}"));
            }
        }
        tokio::select! {
            r = s.read_buf(&mut raw) => match r {
                Ok(0) => return Ended::Dropped("the gateway closed the connection".into()),
                Ok(_) => {}
                Err(e) => return io(e),
            },
            _ = stop.changed() => return Ended::Stopped,
        }
    }
}

/// Acks merchant `i`'s ids every [`ACK_EVERY`] in one signed POST on a keep-alive
/// connection of its own (opened again when the gateway closed it).
async fn acker(i: usize, shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<String>) {
    let mut ids: Vec<String> = Vec::new();
    let mut conn: Option<(TcpStream, Vec<u8>)> = None;
    let mut tick = tokio::time::interval(ACK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let closed = tokio::select! {
            id = rx.recv() => match id {
                Some(id) => { ids.push(id); false }
                None => true,
            },
            _ = tick.tick() => false,
        };
        if !ids.is_empty() && (closed || rx.is_empty()) {
            let body = serde_json::to_vec(&json!({ "ids": ids })).unwrap_or_default();
            let mut ok = false;
            for _try in 0..2 {
                if conn.is_none() {
                    if let Ok(s) = TcpStream::connect(shared.addr).await {
                        let _ = s.set_nodelay(true);
                        conn = Some((s, Vec::new()));
                    }
                }
                let Some((s, buf)) = conn.as_mut() else {
                    continue;
                };
                let req = signed_request(shared.addr, i, "POST", "/notify/v1/ack", &body, "");
                match exchange(s, buf, &req).await {
                    Ok((200, _)) => {
                        ok = true;
                        break;
                    }
                    Ok(_) => break,
                    Err(_) => conn = None,
                }
            }
            if ok {
                shared.acked.fetch_add(ids.len() as u64, Ordering::Relaxed);
            } else {
                shared.ack_failures.fetch_add(1, Ordering::Relaxed);
            }
            ids.clear();
            // Batches: wait for the next tick before acking again.
            if !closed {
                tick.tick().await;
            }
        }
        if closed {
            return;
        }
    }
}

/// Merchants `from..to` connected to the gateway.
struct Merchants {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Merchants {
    fn new(addr: SocketAddr, acking: bool) -> Merchants {
        let (stop, _) = watch::channel(false);
        Merchants {
            shared: Arc::new(Shared {
                addr,
                phase: RwLock::new(Arc::new(Phase::new(0, 0))),
                open: AtomicUsize::new(0),
                stray: AtomicU64::new(0),
                acked: AtomicU64::new(0),
                ack_failures: AtomicU64::new(0),
                refused: Mutex::default(),
                dropped: AtomicU64::new(0),
                drop_reasons: Mutex::default(),
                reopened: AtomicU64::new(0),
                acking,
            }),
            stop,
            tasks: Vec::new(),
        }
    }

    /// Opens the streams of apps `from..to` (at most 200 opening at once) and waits until
    /// every one has its `200` head.
    async fn open(&mut self, from: usize, to: usize) -> anyhow::Result<()> {
        let want = self.shared.open.load(Ordering::Relaxed) + (to - from);
        for chunk in (from..to).collect::<Vec<_>>().chunks(200) {
            let target = self.shared.open.load(Ordering::Relaxed) + chunk.len();
            for &i in chunk {
                let shared = Arc::clone(&self.shared);
                let stop = self.stop.subscribe();
                self.tasks.push(tokio::spawn(merchant(i, shared, stop)));
            }
            self.wait_open(target).await?;
        }
        self.wait_open(want).await
    }

    async fn wait_open(&mut self, target: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.shared.open.load(Ordering::Relaxed) < target {
            if Instant::now() > deadline {
                bail!(
                    "only {} of {target} streams opened within 120 s ({})",
                    self.shared.open.load(Ordering::Relaxed),
                    self.shared.troubles()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn close(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The publisher.

/// What one open-loop run measured.
struct Run {
    rate: f64,
    published: u64,
    publish_failures: u64,
    /// Events of the measured window received (first receipts), and their latency.
    p50_us: u64,
    p90_us: u64,
    p99_us: u64,
    max_us: u64,
    measured: usize,
    lost: u64,
    duplicated: u64,
    /// Publish answers later than 1 s after their scheduled time / all.
    publisher_late: u64,
    /// Events not yet received when the last one was due.
    behind_at_end: u64,
    gateway_cpu: f64,
    redis_cpu: f64,
    rss_kib: u64,
}

fn percentile(sorted: &[i64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].max(0) as u64
}

/// Publishes `rate` events/s for `warmup_s + measure_s` over `merchants` apps (event `k`
/// to app `k mod merchants`), then waits up to [`DRAIN`] for every one.
#[allow(clippy::too_many_arguments)]
async fn publish_run(
    m: &Merchants,
    internal: SocketAddr,
    phase_id: u64,
    rate: f64,
    warmup_s: f64,
    measure_s: f64,
    merchants: usize,
    gateway: &Proc,
    redis_port: Option<u16>,
) -> anyhow::Result<Run> {
    let count = (rate * (warmup_s + measure_s)).round() as usize;
    let phase = Arc::new(Phase::new(phase_id, count));
    *m.shared.phase.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&phase);
    let failures = Arc::new(AtomicU64::new(0));
    let late = Arc::new(AtomicU64::new(0));
    let failed_once = Arc::new(AtomicBool::new(false));
    // Scheduled times start a little ahead so every connection is ready.
    let start = Instant::now() + Duration::from_millis(200);
    let start_us = unix_us() + 200_000;
    let warm_end = (rate * warmup_s).round() as usize;
    let mut workers = Vec::new();
    let cpu_now = || -> anyhow::Result<(f64, f64)> {
        let (u, s) = gateway.cpu_times()?;
        let r = match redis_port {
            Some(p) => redis_counters(p)?.0,
            None => 0.0,
        };
        Ok((u + s, r))
    };
    for j in 0..PUBLISH_CONNS.min(count.max(1)) {
        let phase = Arc::clone(&phase);
        let failures = Arc::clone(&failures);
        let late = Arc::clone(&late);
        let failed_once = Arc::clone(&failed_once);
        workers.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(internal).await?;
            s.set_nodelay(true)?;
            let mut buf = Vec::new();
            let mut k = j;
            while k < count {
                let offset = Duration::from_secs_f64(k as f64 / rate);
                tokio::time::sleep_until((start + offset).into()).await;
                let t = start_us + offset.as_micros() as u64;
                let body = serde_json::to_vec(&json!({
                    "app": app_key(k % merchants),
                    "topic": "orders",
                    "payload": {"ph": phase_id, "k": k, "t": t, "order_id": format!("order-{k}")}
                }))?;
                let head = format!(
                    "POST /internal/v1/notifications HTTP/1.1\r\nHost: {internal}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let mut req = head.into_bytes();
                req.extend_from_slice(&body);
                match exchange(&mut s, &mut buf, &req).await {
                    Ok((200, _)) => phase.published[k].store(1, Ordering::Relaxed),
                    Ok((status, b)) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        if !failed_once.swap(true, Ordering::Relaxed) {
                            eprintln!(
                                "  publish answered {status}: {}",
                                String::from_utf8_lossy(&b)
                            );
                        }
                    }
                    Err(e) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        if !failed_once.swap(true, Ordering::Relaxed) {
                            eprintln!("  publish failed: {e:#}");
                        }
                        s = TcpStream::connect(internal).await?;
                        s.set_nodelay(true)?;
                        buf.clear();
                    }
                }
                if unix_us() > t + 1_000_000 {
                    late.fetch_add(1, Ordering::Relaxed);
                }
                k += PUBLISH_CONNS;
            }
            anyhow::Ok(())
        }));
    }
    // CPU over the measured window only.
    let measure_from = start + Duration::from_secs_f64(warmup_s);
    let measure_to = measure_from + Duration::from_secs_f64(measure_s);
    tokio::time::sleep_until(measure_from.into()).await;
    let (g0, r0) = cpu_now()?;
    tokio::time::sleep_until(measure_to.into()).await;
    let (g1, r1) = cpu_now()?;
    let rss = rss_kib(gateway.pid).unwrap_or(0);
    let received_first = |p: &Phase| {
        p.received
            .iter()
            .filter(|r| r.load(Ordering::Relaxed) > 0)
            .count() as u64
    };
    let behind_at_end = (count as u64).saturating_sub(received_first(&phase));
    for w in workers {
        w.await??;
    }
    let published = phase
        .published
        .iter()
        .filter(|p| p.load(Ordering::Relaxed) == 1)
        .count() as u64;
    let drain_until = Instant::now() + DRAIN;
    while Instant::now() < drain_until {
        let missing = phase
            .published
            .iter()
            .zip(&phase.received)
            .filter(|(p, r)| p.load(Ordering::Relaxed) == 1 && r.load(Ordering::Relaxed) == 0)
            .count();
        if missing == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Acks of the last events go out within a tick.
    tokio::time::sleep(ACK_EVERY + Duration::from_millis(300)).await;
    let lost = phase
        .published
        .iter()
        .zip(&phase.received)
        .filter(|(p, r)| p.load(Ordering::Relaxed) == 1 && r.load(Ordering::Relaxed) == 0)
        .count() as u64;
    let duplicated = phase
        .received
        .iter()
        .map(|r| u64::from(r.load(Ordering::Relaxed).saturating_sub(1)))
        .sum();
    let mut lat: Vec<i64> = phase
        .latency
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(k, _)| (*k as usize) >= warm_end)
        .map(|(_, l)| *l)
        .collect();
    lat.sort_unstable();
    let secs = measure_s.max(1e-3);
    Ok(Run {
        rate,
        published,
        publish_failures: failures.load(Ordering::Relaxed),
        p50_us: percentile(&lat, 0.50),
        p90_us: percentile(&lat, 0.90),
        p99_us: percentile(&lat, 0.99),
        max_us: lat.last().copied().unwrap_or(0).max(0) as u64,
        measured: lat.len(),
        lost,
        duplicated,
        publisher_late: late.load(Ordering::Relaxed),
        behind_at_end,
        gateway_cpu: (g1 - g0) / secs * 100.0,
        redis_cpu: (r1 - r0) / secs * 100.0,
        rss_kib: rss,
    })
}

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

// ---------------------------------------------------------------------------------------
// The suite.

/// The gateway under test, with Redis or on its memory store.
fn start_gateway(
    ctx: &Ctx,
    name: &str,
    dir: &std::path::Path,
    redis: Option<&Redis>,
) -> anyhow::Result<(Proxy, SocketAddr)> {
    let internal: SocketAddr = format!("127.0.0.1:{}", crate::procs::free_port()?).parse()?;
    let mut extra = vec![
        "--internal-listen".to_owned(),
        internal.to_string(),
        "--publish-token-file".to_owned(),
        dir.join("publish.token").display().to_string(),
        "--notify-max-streams".to_owned(),
        "20000".to_owned(),
    ];
    if let Some(r) = redis {
        extra.extend(["--redis".to_owned(), r.url()]);
    }
    let launch = Launch {
        nofile: Some(NOFILE),
        ..Launch::default()
    };
    let mut gw = start_portico_with(ctx, name, dir, &extra, &launch)?;
    // Ready to publish: the internal listener answers and the store is up (with Redis, the
    // connection may come up a moment after /readyz).
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = serde_json::to_vec(
        &json!({"app": app_key(0), "topic": "orders", "payload": {"probe": true}, "ttl_s": 1}),
    )?;
    let headers = vec![("Authorization".to_owned(), format!("Bearer {TOKEN}"))];
    loop {
        gw.proc.check_alive()?;
        match crate::procs::http_request(
            internal,
            "POST",
            "/internal/v1/notifications",
            &headers,
            &body,
        ) {
            Ok((200, _)) => break,
            Ok((s, b)) if Instant::now() > deadline => {
                bail!("{name}: publishing answered {s}: {b}")
            }
            Err(e) if Instant::now() > deadline => bail!("{name}: publishing failed: {e}"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    Ok((gw, internal))
}

/// Raises this process's open-file limit (it holds every merchant's connections).
fn raise_nofile() -> anyhow::Result<()> {
    let pid = std::process::id().to_string();
    let out = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={NOFILE}:{NOFILE}")])
        .output()
        .context("prlimit (util-linux)")?;
    if !out.status.success() {
        bail!(
            "prlimit --nofile={NOFILE}: {} (run as root or raise `ulimit -n`)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Pins this process (every thread) to `cpu` with `taskset`; returns the affinity list it
/// had, to restore with [`restore_affinity`]. Processes started afterwards without a CPU of
/// their own (Redis) inherit it.
fn pin_self(cpu: &str) -> anyhow::Result<String> {
    let pid = std::process::id().to_string();
    let out = std::process::Command::new("taskset")
        .args(["-c", "-p", &pid])
        .output()
        .context("taskset (util-linux)")?;
    let was = String::from_utf8_lossy(&out.stdout)
        .rsplit(':')
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    let status = std::process::Command::new("taskset")
        .args(["-a", "-c", "-p", cpu, &pid])
        .stdout(std::process::Stdio::null())
        .status()?;
    if !status.success() || was.is_empty() {
        bail!("taskset -a -c -p {cpu} {pid} failed");
    }
    Ok(was)
}

fn restore_affinity(was: &str) {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("taskset")
        .args(["-a", "-c", "-p", was, &pid])
        .stdout(std::process::Stdio::null())
        .status();
}

/// Idle cost of `n` open streams over `secs`: gateway CPU %, Redis CPU %, Redis commands/s.
async fn idle_cost(gw: &Proc, redis: Option<&Redis>, secs: f64) -> anyhow::Result<(f64, f64, f64)> {
    let (u0, s0) = gw.cpu_times()?;
    let r0 = match redis {
        Some(r) => redis_counters(r.port())?,
        None => (0.0, 0),
    };
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (u1, s1) = gw.cpu_times()?;
    let r1 = match redis {
        Some(r) => redis_counters(r.port())?,
        None => (0.0, 0),
    };
    Ok((
        (u1 + s1 - u0 - s0) / secs * 100.0,
        (r1.0 - r0.0) / secs * 100.0,
        (r1.1 - r0.1) as f64 / secs,
    ))
}

/// RSS once it settled: the smallest of a few samples a second apart (KiB).
async fn settled_rss(pid: u32) -> anyhow::Result<u64> {
    let mut best = u64::MAX;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        best = best.min(rss_kib(pid)?);
    }
    Ok(best)
}

struct IdleRow {
    store: &'static str,
    base_kib: u64,
    /// (streams asked for, streams open, RSS KiB, gateway CPU %, Redis CPU %, Redis
    /// commands/s).
    steps: Vec<(usize, usize, u64, f64, f64, f64)>,
    /// Refusals and drops of the streams, in words.
    troubles: String,
}

/// Memory per idle stream: RSS with 0 streams, then with each of [`IDLE_STEPS`] (a step
/// whose streams do not all open within the wait is measured with those open, and the
/// larger steps skipped).
async fn idle_memory(
    gw: &Proxy,
    redis: Option<&Redis>,
    store: &'static str,
) -> anyhow::Result<IdleRow> {
    let base = settled_rss(gw.proc.pid).await?;
    let mut m = Merchants::new(gw.addr, false);
    let mut steps = Vec::new();
    let mut opened = 0;
    for &n in IDLE_STEPS {
        let all = m.open(opened, n).await;
        opened = n;
        let open = m.shared.open.load(Ordering::Relaxed);
        let rss = settled_rss(gw.proc.pid).await?;
        let (gcpu, rcpu, cmds) = idle_cost(&gw.proc, redis, 5.0).await?;
        eprintln!(
            "  {store}: {open} of {n} idle streams open: RSS {rss} KiB (base {base}), {:.1} KiB/stream; gateway CPU {gcpu:.0}%, Redis CPU {rcpu:.0}%, {cmds:.0} Redis commands/s",
            (rss as f64 - base as f64) / open.max(1) as f64
        );
        steps.push((n, open, rss, gcpu, rcpu, cmds));
        if let Err(e) = all {
            eprintln!("  {store}: {e:#}");
            break;
        }
    }
    let troubles = m.shared.troubles();
    m.close().await;
    Ok(IdleRow {
        store,
        base_kib: base,
        steps,
        troubles,
    })
}

/// What the delivery runs of one gateway measured.
struct Delivery {
    latency: Run,
    steps: Vec<Run>,
    /// Streams open when the latency run started.
    open_at_start: usize,
    acked: u64,
    ack_failures: u64,
    stray: u64,
    reopened: u64,
    troubles: String,
}

/// Latency at [`RATE`] and, with `steps`, the stepped throughput run, over [`MERCHANTS`].
async fn delivery(
    gw: &Proxy,
    internal: SocketAddr,
    redis: Option<&Redis>,
    steps: bool,
) -> anyhow::Result<Delivery> {
    let mut m = Merchants::new(gw.addr, true);
    if let Err(e) = m.open(0, MERCHANTS).await {
        // The merchants keep trying; the run measures what the gateway does meanwhile.
        eprintln!("  {e:#}; publishing anyway");
    }
    let open_at_start = m.shared.open.load(Ordering::Relaxed);
    let port = redis.map(Redis::port);
    let latency = publish_run(
        &m, internal, 1, RATE, WARMUP_S, MEASURE_S, MERCHANTS, &gw.proc, port,
    )
    .await?;
    eprintln!(
        "  {RATE}/s: p50 {} ms, p99 {} ms, max {} ms; {} lost, {} duplicated, {} publish failures; streams: {}",
        ms(latency.p50_us),
        ms(latency.p99_us),
        ms(latency.max_us),
        latency.lost,
        latency.duplicated,
        latency.publish_failures,
        m.shared.troubles()
    );
    let mut runs = Vec::new();
    if steps {
        for (i, &rate) in STEPS.iter().enumerate() {
            let r = publish_run(
                &m,
                internal,
                2 + i as u64,
                rate,
                STEP_WARMUP_S,
                STEP_MEASURE_S,
                MERCHANTS,
                &gw.proc,
                port,
            )
            .await?;
            let keeps = keeps_up(&r);
            eprintln!(
                "  step {rate}/s: p99 {} ms, behind at end {}, lost {}, publish failures {}, publisher late {}, gateway CPU {:.0}%, Redis CPU {:.0}% → {}",
                ms(r.p99_us),
                r.behind_at_end,
                r.lost,
                r.publish_failures,
                r.publisher_late,
                r.gateway_cpu,
                r.redis_cpu,
                if keeps { "keeps up" } else { "lags" }
            );
            runs.push(r);
            if !keeps {
                break;
            }
        }
    }
    let d = Delivery {
        latency,
        steps: runs,
        open_at_start,
        acked: m.shared.acked.load(Ordering::Relaxed),
        ack_failures: m.shared.ack_failures.load(Ordering::Relaxed),
        stray: m.shared.stray.load(Ordering::Relaxed),
        reopened: m.shared.reopened.load(Ordering::Relaxed),
        troubles: m.shared.troubles(),
    };
    m.close().await;
    Ok(d)
}

/// Whether a step kept up: every event delivered, p99 under [`LAG_P99_US`], the publisher
/// on schedule, and at most a second's worth of events outstanding when the last was due.
fn keeps_up(r: &Run) -> bool {
    r.lost == 0
        && r.publish_failures == 0
        && r.p99_us <= LAG_P99_US
        && (r.publisher_late as f64) < r.rate * 0.01
        && (r.behind_at_end as f64) <= r.rate
}

fn latency_row(store: &str, d: &Delivery) -> Vec<String> {
    let r = &d.latency;
    vec![
        store.to_owned(),
        f0(r.rate),
        d.open_at_start.to_string(),
        r.published.to_string(),
        r.publish_failures.to_string(),
        r.measured.to_string(),
        ms(r.p50_us),
        ms(r.p90_us),
        ms(r.p99_us),
        ms(r.max_us),
        r.lost.to_string(),
        r.duplicated.to_string(),
        f0(r.gateway_cpu),
        if r.redis_cpu > 0.0 {
            f0(r.redis_cpu)
        } else {
            "–".into()
        },
        format!("{:.1}", r.rss_kib as f64 / 1024.0),
    ]
}

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== notify: publish → delivered latency, memory per idle stream, events/s");
    let started_load = loadavg();
    raise_nofile()?;
    let dir = ctx.subdir("notify-tree")?;
    write_tree(&dir)?;
    // The harness and Redis on the load CPU, the gateway alone on the proxy CPU.
    let was = match &ctx.load_cpu {
        Some(cpu) => Some(pin_self(cpu)?),
        None => None,
    };
    let r = run_pinned(ctx, &started_load, &dir);
    if let Some(was) = was {
        restore_affinity(&was);
    }
    r
}

fn run_pinned(ctx: &Ctx, started_load: &str, dir: &std::path::Path) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    // 1. With Redis: latency at 1,000/s and the stepped rates, then idle memory on a fresh
    //    node (and a fresh Redis, so the first node's streams weigh nothing).
    let redis = Redis::start();
    let (gw, internal) = start_gateway(ctx, "portico-notify-redis", dir, Some(&redis))?;
    let with_redis = rt.block_on(delivery(&gw, internal, Some(&redis), true))?;
    drop(gw);
    drop(redis);
    let redis = Redis::start();
    let (gw, _) = start_gateway(ctx, "portico-notify-redis-idle", dir, Some(&redis))?;
    let idle_redis = rt.block_on(idle_memory(&gw, Some(&redis), "redis"))?;
    drop(gw);
    drop(redis);

    // 2. The memory store: latency at 1,000/s and idle memory.
    let (gw, internal) = start_gateway(ctx, "portico-notify-memory", dir, None)?;
    let in_memory = rt.block_on(delivery(&gw, internal, None, true))?;
    drop(gw);
    let (gw, _) = start_gateway(ctx, "portico-notify-memory-idle", dir, None)?;
    let idle_mem = rt.block_on(idle_memory(&gw, None, "memory"))?;
    drop(gw);

    let md = report(
        ctx,
        started_load,
        &with_redis,
        &in_memory,
        &idle_redis,
        &idle_mem,
    );
    write_section(&ctx.results, "notify", &md)?;
    eprintln!("{md}");
    let (lr, lm) = (&with_redis.latency, &in_memory.latency);
    if lr.lost > 0 || lm.lost > 0 {
        bail!(
            "events lost at {RATE}/s: {} with Redis, {} with the memory store",
            lr.lost,
            lm.lost
        );
    }
    Ok(())
}

fn report(
    ctx: &Ctx,
    started_load: &str,
    with_redis: &Delivery,
    in_memory: &Delivery,
    idle_redis: &IdleRow,
    idle_mem: &IdleRow,
) -> String {
    let (lat_redis, lat_mem) = (&with_redis.latency, &in_memory.latency);
    let lat_table = table(
        &[
            "store",
            "events/s",
            "streams open at start",
            "published",
            "publish failures",
            "measured",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "lost",
            "duplicated",
            "gateway CPU %",
            "Redis CPU %",
            "gateway RSS MiB",
        ],
        &[
            latency_row("redis", with_redis),
            latency_row("memory", in_memory),
        ],
    );
    let mut idle_rows = Vec::new();
    for row in [idle_redis, idle_mem] {
        for &(n, open, rss, gcpu, rcpu, cmds) in &row.steps {
            let redis = row.store == "redis";
            idle_rows.push(vec![
                row.store.to_owned(),
                n.to_string(),
                open.to_string(),
                format!("{:.1}", row.base_kib as f64 / 1024.0),
                format!("{:.1}", rss as f64 / 1024.0),
                f1((rss as f64 - row.base_kib as f64) / open.max(1) as f64),
                f0(gcpu),
                if redis { f0(rcpu) } else { "–".into() },
                if redis { f0(cmds) } else { "–".into() },
            ]);
        }
    }
    let idle_table = table(
        &[
            "store",
            "idle streams N",
            "open",
            "RSS with 0 MiB",
            "RSS with N MiB",
            "(ΔRSS)/open KiB",
            "gateway CPU % (idle)",
            "Redis CPU % (idle)",
            "Redis commands/s (idle)",
        ],
        &idle_rows,
    );
    let mut step_rows: Vec<Vec<String>> = Vec::new();
    for (store, d) in [("redis", with_redis), ("memory", in_memory)] {
        for r in &d.steps {
            step_rows.push(vec![
                store.to_owned(),
                f0(r.rate),
                r.published.to_string(),
                r.publish_failures.to_string(),
                ms(r.p50_us),
                ms(r.p99_us),
                ms(r.max_us),
                r.behind_at_end.to_string(),
                r.lost.to_string(),
                r.publisher_late.to_string(),
                f0(r.gateway_cpu),
                if store == "redis" {
                    f0(r.redis_cpu)
                } else {
                    "–".into()
                },
                if keeps_up(r) { "yes" } else { "**no**" }.to_owned(),
            ]);
        }
    }
    let step_table = table(
        &[
            "store",
            "offered events/s",
            "published",
            "publish failures",
            "p50 ms",
            "p99 ms",
            "max ms",
            "not yet delivered when the last was due",
            "lost",
            "publishes > 1 s late",
            "gateway CPU %",
            "Redis CPU %",
            "keeps up",
        ],
        &step_rows,
    );
    let top = |steps: &[Run]| {
        let sustained = steps
            .iter()
            .take_while(|r| keeps_up(r))
            .map(|r| r.rate)
            .fold(0.0, f64::max);
        if !steps.is_empty() && steps.iter().all(keeps_up) {
            format!(
                "at least {} events/s (the highest step tried)",
                f0(sustained)
            )
        } else if sustained > 0.0 {
            format!("{} events/s (the next step lagged)", f0(sustained))
        } else {
            format!(
                "none of the steps (the first, {} events/s, already lagged)",
                f0(steps.first().map_or(f64::NAN, |r| r.rate))
            )
        }
    };
    let (top_redis, top_mem) = (top(&with_redis.steps), top(&in_memory.steps));
    let per_stream = |row: &IdleRow| {
        row.steps
            .last()
            .map(|&(_, open, rss, ..)| (rss as f64 - row.base_kib as f64) / open.max(1) as f64)
            .unwrap_or(f64::NAN)
    };
    let at_most = |row: &IdleRow| row.steps.last().map(|s| s.1).unwrap_or(0);
    let first_idle = idle_redis
        .steps
        .first()
        .map(|s| (s.1, s.3, s.5))
        .unwrap_or((0, f64::NAN, f64::NAN));
    let headline = format!(
        "**At {RATE:.0} events/s over {MERCHANTS} connected merchants with Redis: p50 {} ms, p99 {} ms, max {} ms, {} lost, {} duplicated (memory store: p50 {} ms, p99 {} ms, {} lost). Memory per idle stream: {} KiB with Redis ({} streams), {} KiB with the memory store ({} streams); goal ≤ 16 KiB. One node (one worker thread) keeps up with {top_redis} with Redis, {top_mem} with the memory store. {} idle streams alone cost {} % of the gateway's core and {} Redis commands/s (an idle stream, woken by every publish, polls its store once a second and, with Redis, checks once a second that it still holds its app).**",
        ms(lat_redis.p50_us),
        ms(lat_redis.p99_us),
        ms(lat_redis.max_us),
        lat_redis.lost,
        lat_redis.duplicated,
        ms(lat_mem.p50_us),
        ms(lat_mem.p99_us),
        lat_mem.lost,
        f1(per_stream(idle_redis)),
        at_most(idle_redis),
        f1(per_stream(idle_mem)),
        at_most(idle_mem),
        first_idle.0,
        f0(first_idle.1),
        f0(first_idle.2),
    );
    let placement = match (&ctx.proxy_cpu, &ctx.load_cpu) {
        (Some(p), Some(l)) => format!("The gateway pinned to CPU {p}; the harness (merchants and publisher) and Redis pinned together to CPU {l}"),
        _ => "No CPU pinning".to_owned(),
    };
    let nice = if ctx.nice != 0 {
        format!("; the gateway at nice {}", ctx.nice)
    } else {
        String::new()
    };
    let placement = format!("{placement}{nice}");
    format!(
        "### Notifications: publish → delivered, memory per idle stream, events/s\n\n{}\n\n\
One `portico-gateway` (release, `--threads 1`, `--notify-max-streams 20000`, default ack timeout 30 s, heartbeat 15 s; an idle stream is woken by each publish for its app (with Redis through the Pub/Sub channel `portico:notify:wake`) and polls its store once a second) on a tree of {APPS} apps, each granted the topic `orders` in its own document; with `--redis` (a local `redis-server`) and without (the memory store). {placement}. The harness (`portico-bench`, one tokio runtime of 2 workers; its open-file limit raised to {NOFILE} with `prlimit`, the gateway's too) holds **one TCP connection per merchant**: a signed (docs/PROTOCOL.md, \"Signing a request\") `GET /notify/v1/stream` (HTTP/1.1, chunked Server-Sent Events decoded by the harness; a refused or dropped stream is opened again after 0.2 s, doubling up to 2 s, and counted), and each merchant acks what it received once a second with one signed `POST /notify/v1/ack` on a keep-alive connection of its own. The publisher is open loop: event *k* is scheduled at start + *k*/rate and sent on one of {PUBLISH_CONNS} keep-alive connections to the internal listener (`POST /internal/v1/notifications`, bearer token), to app *k* mod {MERCHANTS}; its payload carries *k* and the scheduled time, and **latency = receive time − scheduled publish time** (a late publisher counts against the gateway). Percentiles over the {MEASURE_S:.0} s after a {WARMUP_S:.0} s warm-up; lost = answered 200 by the publish API and not received {} s after the last publish; duplicated = received more than once. CPU from /proc (gateway) and Redis's `INFO` over the measured window.\n\n{headline}\n\n#### Latency at {RATE:.0} events/s over {MERCHANTS} merchants\n\n{lat_table}\nWith Redis: {} ids acked ({} failed ack POSTs), {} streams opened again; streams: {}. Memory store: {} ids acked ({} failed ack POSTs), {} streams opened again; streams: {}. Events of an earlier phase seen late: {}.\n\n#### Memory per idle stream\n\nA fresh gateway (and a fresh Redis); RSS (`VmRSS`, the smallest of five samples a second apart) with no stream open, then with N signed idle streams open (nothing published). The idle CPU and Redis columns are over 5 s with the streams open and nothing published: the price of every stream's once-a-second store poll and, with Redis, its once-a-second hold check. Streams with Redis: {}; with the memory store: {}.\n\n{idle_table}\n#### Events/s one node sustains\n\nThe same {MERCHANTS} merchants; open-loop steps of {STEP_MEASURE_S:.0} s (+{STEP_WARMUP_S:.0} s warm-up), stopping at the first that lags: p99 > 1 s, an event lost or a publish refused, more than 1% of publishes answered over a second late, or more than a second's worth of events not yet delivered when the last one was due.\n\n{step_table}",
        preamble(ctx, started_load, false),
        DRAIN.as_secs(),
        with_redis.acked,
        with_redis.ack_failures,
        with_redis.reopened,
        with_redis.troubles,
        in_memory.acked,
        in_memory.ack_failures,
        in_memory.reopened,
        in_memory.troubles,
        with_redis.stray + in_memory.stray,
        idle_redis.troubles,
        idle_mem.troubles,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunk_across_reads() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
        for split in 0..wire.len() {
            let mut d = Dechunk::default();
            let mut raw = wire[..split].to_vec();
            let mut out = Vec::new();
            d.feed(&mut raw, &mut out).expect("first part");
            raw.extend_from_slice(&wire[split..]);
            d.feed(&mut raw, &mut out).expect("second part");
            assert_eq!(out, b"hello, world", "split at {split}");
            assert!(d.done);
        }
    }

    #[test]
    fn percentiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 51);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
