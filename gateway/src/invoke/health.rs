//! Endpoint health: what the gateway knows of one endpoint (active probe verdict, passive
//! ejection, reported load, latency EWMA, calls in flight), all in atomics so the request
//! path reads it without a lock; and the active prober, one task per cluster with a
//! `health_check` (docs/operations/clusters.md, "Clusters: balancing, health, failover, sleep").
//!
//! Probes: HTTP clusters `GET <path>` expecting a 2xx status (one short connection per
//! probe, `Connection: close`); gRPC clusters `grpc.health.v1.Health/Check` of the
//! configured service expecting `SERVING`, on the invoke tier's own HTTP/2 client
//! ([`GrpcChannel`], one kept connection per endpoint: the probe speaks to a backend exactly
//! as a call does). An endpoint counts as healthy until its first
//! failed probe; it is out after `unhealthy_after` consecutive failed probes and back after
//! `healthy_after` consecutive good ones. Probes go through the egress policy
//! (`portico_control::egress`): an endpoint on a refused address is never probed, so never
//! healthy (logged once per prober, counted in `portico_egress_refused_total`); a redirect
//! is not a 2xx, never followed.

use super::grpc_client::{frame, ChannelSettings, GrpcChannel};
use http::uri::PathAndQuery;
use http::HeaderMap;
use portico_control::v1;
use prost::Message;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// The response header (HTTP) and metadata key (gRPC) a backend reports its load in; it is
/// removed before the answer reaches the merchant.
pub const LOAD_HEADER: &str = "x-portico-load";
/// The same, as the gRPC reply's metadata appears among the answer's headers.
pub const LOAD_METADATA_OUT: &str = "grpc-metadata-x-portico-load";

/// How long a load report counts in full before it decays toward the latency score.
pub const LOAD_FRESH_MS: u64 = 2_000;
/// The decay time constant of an old load report, and of the latency EWMA.
pub const DECAY_MS: f64 = 2_000.0;
/// How often a cluster that is being woken is probed (docs/OPERATIONS.md).
pub const WAKING_PROBE_MS: u64 = 100;

/// Stores an `f64` in an `AtomicU64`.
fn f64_load(a: &AtomicU64) -> f64 {
    f64::from_bits(a.load(Ordering::Relaxed))
}

fn f64_store(a: &AtomicU64, v: f64) {
    a.store(v.to_bits(), Ordering::Relaxed);
}

/// What the gateway knows of one endpoint. Carried across reloads while the cluster's
/// endpoints are unchanged (`invoke/state.rs`).
#[derive(Debug)]
pub struct EndpointState {
    /// The address as configured.
    pub addr: String,
    /// The address resolved at reload; `None` when it does not resolve.
    pub sock: Option<SocketAddr>,
    pub weight: u32,
    /// The active probes' verdict (true until the first failed probes say otherwise).
    probe_healthy: AtomicBool,
    ok_streak: AtomicU32,
    fail_streak: AtomicU32,
    /// Consecutive failures of real traffic (passive outlier detection).
    failures: AtomicU32,
    /// Ejected until this Unix ms (0: not ejected).
    ejected_until_ms: AtomicU64,
    /// The last reported load score (0..1) and when (Unix ms, 0: never).
    load: AtomicU64,
    load_at_ms: AtomicU64,
    /// Peak EWMA of the latency, in µs (0: no call yet), and when it was last updated.
    ewma_us: AtomicU64,
    ewma_at_ms: AtomicU64,
    in_flight: AtomicU32,
    /// Counters for `/metrics`.
    pub ejections: AtomicU64,
    pub probes_ok: AtomicU64,
    pub probes_failed: AtomicU64,
}

impl EndpointState {
    pub fn new(ep: &v1::Endpoint, sock: Option<SocketAddr>) -> EndpointState {
        EndpointState {
            addr: ep.addr.clone(),
            sock,
            weight: ep.weight,
            probe_healthy: AtomicBool::new(true),
            ok_streak: AtomicU32::new(0),
            fail_streak: AtomicU32::new(0),
            failures: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            load: AtomicU64::new(0),
            load_at_ms: AtomicU64::new(0),
            ewma_us: AtomicU64::new(0),
            ewma_at_ms: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            ejections: AtomicU64::new(0),
            probes_ok: AtomicU64::new(0),
            probes_failed: AtomicU64::new(0),
        }
    }

    /// An identity for "already tried" lists (the state's address in memory).
    pub fn id(&self) -> usize {
        self as *const EndpointState as usize
    }

    /// Whether the probes say the endpoint is up.
    pub fn probe_healthy(&self) -> bool {
        self.probe_healthy.load(Ordering::Relaxed)
    }

    /// Until when (Unix ms) the endpoint is ejected; `None` when it is not.
    pub fn ejected_until(&self, now_ms: u64) -> Option<u64> {
        let until = self.ejected_until_ms.load(Ordering::Relaxed);
        (until > now_ms).then_some(until)
    }

    /// Whether calls may be sent here: probes healthy, not ejected, and resolved.
    pub fn available(&self, now_ms: u64) -> bool {
        self.sock.is_some() && self.probe_healthy() && self.ejected_until(now_ms).is_none()
    }

    /// One probe's result; `Some(new verdict)` when it changed.
    pub fn record_probe(&self, ok: bool, hc: &v1::HealthCheck) -> Option<bool> {
        if ok {
            self.probes_ok.fetch_add(1, Ordering::Relaxed);
            self.fail_streak.store(0, Ordering::Relaxed);
            let streak = self.ok_streak.fetch_add(1, Ordering::Relaxed) + 1;
            if !self.probe_healthy() && streak >= hc.healthy_after {
                self.probe_healthy.store(true, Ordering::Relaxed);
                // A fresh start: the passive detector forgets what it held against it.
                self.failures.store(0, Ordering::Relaxed);
                self.ejected_until_ms.store(0, Ordering::Relaxed);
                return Some(true);
            }
        } else {
            self.probes_failed.fetch_add(1, Ordering::Relaxed);
            self.ok_streak.store(0, Ordering::Relaxed);
            let streak = self.fail_streak.fetch_add(1, Ordering::Relaxed) + 1;
            if self.probe_healthy() && streak >= hc.unhealthy_after {
                self.probe_healthy.store(false, Ordering::Relaxed);
                return Some(false);
            }
        }
        None
    }

    /// A call of real traffic succeeded (any answer but a 5xx).
    pub fn record_success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A call of real traffic failed (5xx, connect failure, timeout). Returns whether the
    /// endpoint reached `outlier.consecutive_failures` (the caller decides on ejection).
    pub fn record_failure(&self, outlier: Option<&v1::Outlier>) -> bool {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        outlier.is_some_and(|o| n >= o.consecutive_failures)
    }

    /// Ejects the endpoint until `until_ms`.
    pub fn eject(&self, until_ms: u64) {
        self.failures.store(0, Ordering::Relaxed);
        self.ejected_until_ms.store(until_ms, Ordering::Relaxed);
        self.ejections.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a load report (`X-Portico-Load`) at `now_ms`.
    pub fn record_load(&self, score: f64, now_ms: u64) {
        f64_store(&self.load, score);
        self.load_at_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The last load report and its age, if any.
    pub fn load_report(&self, now_ms: u64) -> Option<(f64, u64)> {
        let at = self.load_at_ms.load(Ordering::Relaxed);
        (at != 0).then(|| (f64_load(&self.load), now_ms.saturating_sub(at)))
    }

    /// Folds one call's latency into the peak EWMA: a slower call raises it at once, faster
    /// ones pull it down with time constant [`DECAY_MS`].
    pub fn record_latency(&self, latency: Duration, now_ms: u64) {
        let sample = latency.as_secs_f64() * 1e6;
        let last = self.ewma_at_ms.swap(now_ms, Ordering::Relaxed);
        let old = f64_load(&self.ewma_us);
        let next = if old == 0.0 || sample > old {
            sample
        } else {
            let w = (-(now_ms.saturating_sub(last) as f64) / DECAY_MS).exp();
            old * w + sample * (1.0 - w)
        };
        f64_store(&self.ewma_us, next.max(1.0));
    }

    /// The peak-EWMA cost: latency EWMA (µs) × (calls in flight + 1). An endpoint without a
    /// call yet costs 0, so it is tried.
    pub fn latency_cost(&self) -> f64 {
        let ewma = f64_load(&self.ewma_us);
        ewma * f64::from(self.in_flight.load(Ordering::Relaxed) + 1)
    }

    /// Marks a call in flight until the guard drops.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }
}

/// A call in flight on an endpoint (for peak EWMA).
#[derive(Debug)]
pub struct InFlight(Arc<EndpointState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Parses `X-Portico-Load: vm_cpu=0.40,vm_mem=0.50,cpu=0.20,mem=0.30` into the score
/// `0.3 × mean(vm_cpu, vm_mem) + 0.7 × mean(cpu, mem)` (docs/PROTOCOL.md). A missing part
/// of a pair is replaced by the other; a report without any instance or vm part, or with a
/// value outside 0..1, is ignored.
pub fn parse_load(v: &str) -> Option<f64> {
    let (mut vm_cpu, mut vm_mem, mut cpu, mut mem) = (None, None, None, None);
    for part in v.split(',') {
        let (k, val) = part.split_once('=')?;
        let x: f64 = val.trim().parse().ok()?;
        if !(0.0..=1.0).contains(&x) {
            return None;
        }
        match k.trim() {
            "vm_cpu" => vm_cpu = Some(x),
            "vm_mem" => vm_mem = Some(x),
            "cpu" => cpu = Some(x),
            "mem" => mem = Some(x),
            _ => {}
        }
    }
    let mean = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some((a + b) / 2.0),
        (Some(x), None) | (None, Some(x)) => Some(x),
        (None, None) => None,
    };
    match (mean(vm_cpu, vm_mem), mean(cpu, mem)) {
        (Some(vm), Some(inst)) => Some(0.3 * vm + 0.7 * inst),
        (Some(x), None) | (None, Some(x)) => Some(x),
        (None, None) => None,
    }
}

/// The active prober of one cluster: a task probing every endpoint of both sets each
/// interval. Dropping it stops the task (the runtime that owned it was replaced by one with
/// a different health check or endpoint list).
#[derive(Debug)]
pub struct Prober {
    task: JoinHandle<()>,
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Prober {
    /// Starts probing `endpoints` on the probers' own runtime (one thread, shared by every
    /// cluster: snapshots are also built outside any runtime at start-up); `None` if that
    /// runtime cannot be made. `waking` makes it probe every [`WAKING_PROBE_MS`] while set.
    pub fn start(
        cluster: &str,
        protocol: v1::Protocol,
        hc: &v1::HealthCheck,
        endpoints: Vec<Arc<EndpointState>>,
        waking: Arc<AtomicBool>,
    ) -> Option<Prober> {
        let handle = probe_runtime()?;
        let cluster = cluster.to_owned();
        let hc = hc.clone();
        let task = handle.spawn(async move {
            // Probes go where the config author said: through the egress policy. An endpoint
            // on a refused address is never probed (so never healthy), said once per prober.
            let refused: Vec<bool> = endpoints
                .iter()
                .map(|ep| {
                    let Some(sock) = ep.sock else { return false };
                    match portico_control::egress::global().check_ip(&ep.addr, sock.ip()) {
                        Ok(()) => false,
                        Err(e) => {
                            portico_control::egress::record_refusal();
                            tracing::warn!(cluster = %cluster, endpoint = %ep.addr, error = %e, "egress: health check refused");
                            true
                        }
                    }
                })
                .collect();
            // gRPC probes connect to the checked address, not to the name again.
            let channels: Vec<Option<GrpcChannel>> = endpoints
                .iter()
                .map(|ep| match protocol {
                    v1::Protocol::Grpc => match ep.sock {
                        Some(sock) => grpc_channel(&sock.to_string(), &hc),
                        None => grpc_channel(&ep.addr, &hc),
                    },
                    v1::Protocol::Http => None,
                })
                .collect();
            let mut last = tokio::time::Instant::now() - Duration::from_millis(hc.interval_ms);
            loop {
                let round = endpoints.iter().zip(&channels).zip(&refused).map(|((ep, ch), refused)| {
                    let hc = &hc;
                    let cluster = &cluster;
                    async move {
                        let ok = match (ep.sock, ch) {
                            _ if *refused => false,
                            (Some(_), Some(ch)) => probe_grpc(ch, hc).await,
                            (Some(sock), None) => probe_http(sock, &ep.addr, hc).await,
                            (None, _) => false,
                        };
                        if let Some(up) = ep.record_probe(ok, hc) {
                            tracing::info!(cluster = %cluster, endpoint = %ep.addr, healthy = up, "endpoint health changed");
                        }
                    }
                });
                futures::future::join_all(round).await;
                last += Duration::from_millis(hc.interval_ms);
                let next = if waking.load(Ordering::Relaxed) {
                    tokio::time::Instant::now() + Duration::from_millis(WAKING_PROBE_MS)
                } else {
                    last.max(tokio::time::Instant::now())
                };
                // Sleep in short steps so that a wake-up is probed promptly.
                loop {
                    let now = tokio::time::Instant::now();
                    if now >= next {
                        break;
                    }
                    let step = (next - now).min(Duration::from_millis(WAKING_PROBE_MS));
                    tokio::time::sleep(step).await;
                    if waking.load(Ordering::Relaxed) {
                        break;
                    }
                }
                last = tokio::time::Instant::now();
            }
        });
        Some(Prober { task })
    }
}

/// The runtime the probers run on, made on first use.
fn probe_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("portico-probe")
            .enable_all()
            .build()
            .map_err(|e| tracing::error!(error = %e, "cannot start the health probers' runtime"))
            .ok()
    })
    .as_ref()
}

/// One HTTP probe: `GET path` on a new connection, healthy on a 2xx status line within
/// `timeout_ms`.
async fn probe_http(sock: SocketAddr, host: &str, hc: &v1::HealthCheck) -> bool {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(sock).await.ok()?;
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: portico-health\r\nConnection: close\r\n\r\n",
            hc.path
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = [0u8; 16];
        let mut got = 0;
        while got < 12 {
            let n = s.read(&mut buf[got..]).await.ok()?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let line = std::str::from_utf8(&buf[..got]).ok()?;
        let status = line.strip_prefix("HTTP/1.")?.get(2..5)?;
        Some(status.starts_with('2'))
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(hc.timeout_ms), probe).await,
        Ok(Some(true))
    )
}

/// The probe's channel to one endpoint: dialled within the probe timeout, no keep-alive
/// pings (a probe every `interval_ms` keeps it busy enough), nothing compressed.
fn grpc_channel(addr: &str, hc: &v1::HealthCheck) -> Option<GrpcChannel> {
    let settings = ChannelSettings {
        connect_timeout: Duration::from_millis(hc.timeout_ms),
        keepalive_interval: Duration::ZERO,
        keepalive_timeout: Duration::from_millis(hc.timeout_ms),
        compress_min_bytes: None,
    };
    GrpcChannel::new(addr, settings)
        .map_err(|e| tracing::warn!(endpoint = %addr, error = %e, "gRPC health check: bad address"))
        .ok()
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`: its `ServingStatus status = 1` (an enum is an
/// int32 on the wire).
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

/// `HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: i32 = 1;
/// The largest health reply read (one enum field; anything bigger is not a health reply).
const MAX_HEALTH_REPLY: usize = 4096;

/// One gRPC probe: `grpc.health.v1.Health/Check` of `hc.service`, healthy on `SERVING`
/// within `timeout_ms`.
async fn probe_grpc(channel: &GrpcChannel, hc: &v1::HealthCheck) -> bool {
    let timeout = Duration::from_millis(hc.timeout_ms);
    let request = HealthCheckRequest {
        service: hc.service.clone().unwrap_or_default(),
    };
    let path = PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let call = channel.unary(
        &path,
        HeaderMap::new(),
        frame(&request.encode_to_vec()),
        timeout,
        MAX_HEALTH_REPLY,
    );
    // Any failure is unhealthy: no connection, a non-OK status (e.g. `UNIMPLEMENTED` from a
    // backend without the health service), a broken or oversized reply, or no answer in time.
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(reply)) => serving(&reply.message),
        Ok(Err(_)) | Err(_) => false,
    }
}

/// Whether a `HealthCheckResponse` says `SERVING` (a reply that does not decode does not).
fn serving(message: &[u8]) -> bool {
    HealthCheckResponse::decode(message).is_ok_and(|r| r.status == SERVING)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hc() -> v1::HealthCheck {
        serde_json::from_value(serde_json::json!({"unhealthy_after": 2, "healthy_after": 3}))
            .unwrap()
    }

    #[test]
    fn load_scores_as_the_paas_router() {
        let s = parse_load("vm_cpu=0.40,vm_mem=0.50,cpu=0.20,mem=0.30").unwrap();
        assert!((s - (0.3 * 0.45 + 0.7 * 0.25)).abs() < 1e-9);
        assert_eq!(parse_load("cpu=0.5"), Some(0.5));
        assert_eq!(parse_load("cpu=1.5"), None);
        assert_eq!(parse_load("junk"), None);
        assert_eq!(parse_load("other=0.1"), None);
    }

    #[test]
    fn probes_need_streaks_both_ways() {
        let ep = EndpointState::new(
            &v1::Endpoint {
                addr: "127.0.0.1:1".into(),
                weight: 1,
            },
            "127.0.0.1:1".parse().ok(),
        );
        let hc = hc();
        assert!(ep.available(0));
        assert_eq!(ep.record_probe(false, &hc), None);
        assert_eq!(ep.record_probe(false, &hc), Some(false));
        assert!(!ep.available(0));
        assert_eq!(ep.record_probe(true, &hc), None);
        assert_eq!(ep.record_probe(true, &hc), None);
        assert_eq!(ep.record_probe(true, &hc), Some(true));
        assert!(ep.available(0));
    }

    #[test]
    fn peak_ewma_rises_at_once_and_decays() {
        let ep = EndpointState::new(
            &v1::Endpoint {
                addr: "a:1".into(),
                weight: 1,
            },
            None,
        );
        ep.record_latency(Duration::from_millis(10), 1000);
        assert!((ep.latency_cost() - 10_000.0).abs() < 1.0);
        ep.record_latency(Duration::from_millis(100), 1001);
        assert!((ep.latency_cost() - 100_000.0).abs() < 1.0);
        ep.record_latency(Duration::from_millis(10), 11_001);
        assert!(ep.latency_cost() < 11_000.0);
    }

    #[test]
    fn health_messages_encode_and_decode() {
        assert!(serving(&[0x08, 0x01]));
        assert!(!serving(&[0x08, 0x02]), "NOT_SERVING");
        assert!(!serving(&[]), "UNKNOWN (absent)");
        // Unknown fields are skipped, as protobuf readers do.
        assert!(serving(&[0x12, 0x01, 0x00, 0x08, 0x01]));
        assert!(!serving(&[0x08]), "a cut varint does not decode");
        assert_eq!(
            HealthCheckRequest {
                service: "orders".into()
            }
            .encode_to_vec(),
            b"\x0a\x06orders"
        );
    }
}
