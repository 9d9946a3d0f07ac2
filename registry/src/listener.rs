//! The registry's listener: how connections are accepted and how long they may be held
//! (docs/operations/registry.md, "The registry's listener"; docs/SECURITY.md, "The registry and the
//! internet").
//!
//! The console, the admin API and the merchants' portal share one listener, so one host must
//! not be able to hold what the others need:
//!
//! - **Header-read timeout** ([`Limits::header_read_timeout`], default 10 s): a request head
//!   not complete within it closes the connection (hyper's own timeout, which is silently
//!   inactive without a timer: one is set here). An HTTP/1.1 connection waiting for its next
//!   request is under the same deadline (hyper starts it when the connection goes idle), and a
//!   connection that has not started a request within it (an HTTP/2 preface sent a byte at a
//!   time, say) is closed too.
//! - **Idle timeout** ([`Limits::idle_timeout`], default 60 s): a connection of any protocol
//!   (HTTP/2 too) with no request in progress for that long is shut down gracefully.
//! - **Connection caps**: at most [`Limits::max_connections`] open connections (default 1024)
//!   (`--max-connections`) and [`Limits::max_connections_per_ip`] per client address
//!   (`--max-connections-per-address`, default 256; IPv4-mapped IPv6
//!   counts as its IPv4 address). A connection over a cap is closed at once, before anything
//!   is read from it, and counted ([`refused_total`]).
//!
//! Every request carries `axum::extract::ConnectInfo<SocketAddr>` (the TCP peer).

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long connections may be held, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head must be complete within this (and the first request must start
    /// within it).
    pub header_read_timeout: Duration,
    /// A connection with no request in progress for this long is shut down.
    pub idle_timeout: Duration,
    /// Open connections at most (0: no cap).
    pub max_connections: usize,
    /// Open connections per client address at most (0: no cap).
    pub max_connections_per_ip: usize,
}

/// Defaults of [`Limits`] (and of the registry's flags).
pub const DEFAULT_HEADER_READ_TIMEOUT_S: u64 = 10;
/// See [`DEFAULT_HEADER_READ_TIMEOUT_S`].
pub const DEFAULT_IDLE_TIMEOUT_S: u64 = 60;
/// See [`DEFAULT_HEADER_READ_TIMEOUT_S`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// See [`DEFAULT_HEADER_READ_TIMEOUT_S`].
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 256;

/// After a graceful shutdown starts, how long a connection may take to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(DEFAULT_HEADER_READ_TIMEOUT_S),
            idle_timeout: Duration::from_secs(DEFAULT_IDLE_TIMEOUT_S),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
        }
    }
}

static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Connections closed at accept because a cap was reached, since start.
pub fn refused_total() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// The open connections: in all and per client address.
#[derive(Default)]
struct Conns {
    total: AtomicUsize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; dropping it gives its place back.
struct Admitted {
    conns: Arc<Conns>,
    ip: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.conns.total.fetch_sub(1, Ordering::Relaxed);
        let mut map = self.conns.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// The address a client is counted under.
fn client_ip(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

impl Conns {
    /// Admits a connection from `peer` unless a cap is reached.
    fn admit(self: &Arc<Self>, peer: SocketAddr, limits: &Limits) -> Option<Admitted> {
        let ip = client_ip(peer);
        let mut map = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        let total = self.total.load(Ordering::Relaxed);
        if limits.max_connections > 0 && total >= limits.max_connections {
            return None;
        }
        let n = map.entry(ip).or_insert(0);
        if limits.max_connections_per_ip > 0 && *n >= limits.max_connections_per_ip {
            if *n == 0 {
                map.remove(&ip);
            }
            return None;
        }
        *n += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        Some(Admitted {
            conns: self.clone(),
            ip,
        })
    }
}

/// Requests in progress on one connection, and when the last one ended.
struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `started` when the last request ended; `u64::MAX`: none started yet.
    last_end_ms: AtomicU64,
}

struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let ms = self.0.started.elapsed().as_millis() as u64;
        self.0.last_end_ms.store(ms, Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Activity {
    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        // Marks that a request has started.
        let _ = self.last_end_ms.compare_exchange(
            u64::MAX,
            self.started.elapsed().as_millis() as u64,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Busy(self.clone())
    }

    /// How long until the connection must go, and whether it must go now.
    fn due(&self, limits: &Limits) -> (Duration, bool) {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return (limits.idle_timeout, false);
        }
        let last = self.last_end_ms.load(Ordering::Relaxed);
        let (from, limit) = if last == u64::MAX {
            (Duration::ZERO, limits.header_read_timeout)
        } else {
            (Duration::from_millis(last), limits.idle_timeout)
        };
        let deadline = from + limit;
        let now = self.started.elapsed();
        if now >= deadline {
            (Duration::ZERO, true)
        } else {
            (deadline - now, false)
        }
    }
}

/// Serves `app` on `listener` with `limits` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
) -> std::io::Result<()> {
    let conns = Arc::new(Conns::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Per-connection errors (reset before accept) and running out of descriptors:
                // wait a little rather than spin.
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Some(admitted) = conns.admit(peer, &limits) else {
            let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(%peer, refused_total = n, max = limits.max_connections, max_per_ip = limits.max_connections_per_ip, "connection cap reached: connection closed");
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(stream, peer, app.clone(), limits, admitted));
    }
}

/// One connection: hyper with its header-read timeout, and a watchdog closing it when idle.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    admitted: Admitted,
) {
    let activity = Arc::new(Activity {
        started: Instant::now(),
        in_flight: AtomicUsize::new(0),
        last_end_ms: AtomicU64::new(u64::MAX),
    });
    let tower = TowerToHyperService::new(app);
    let act = activity.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let busy = act.begin();
        let call = hyper::service::Service::call(&tower, req);
        async move {
            let answer = call.await;
            drop(busy);
            answer
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut closing: Option<tokio::time::Instant> = None;
    loop {
        let (wait, now) = activity.due(&limits);
        if now && closing.is_none() {
            conn.as_mut().graceful_shutdown();
            closing = Some(tokio::time::Instant::now() + SHUTDOWN_GRACE);
            continue;
        }
        let grace = closing.unwrap_or_else(|| tokio::time::Instant::now() + wait);
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
                break;
            }
            _ = tokio::time::sleep(wait), if closing.is_none() => {}
            _ = tokio::time::sleep_until(grace), if closing.is_some() => break,
        }
    }
    drop(admitted);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_per_address_and_in_all() {
        let limits = Limits {
            max_connections: 3,
            max_connections_per_ip: 2,
            ..Limits::default()
        };
        let conns = Arc::new(Conns::default());
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let a_mapped: SocketAddr = "[::ffff:127.0.0.1]:1001".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:1000".parse().unwrap();
        let first = conns.admit(a, &limits).unwrap();
        let _second = conns.admit(a_mapped, &limits).unwrap();
        assert!(conns.admit(a, &limits).is_none(), "per address");
        let _third = conns.admit(b, &limits).unwrap();
        assert!(conns.admit(b, &limits).is_none(), "in all");
        drop(first);
        assert!(conns.admit(b, &limits).is_some());
        assert!(conns.per_ip.lock().unwrap().len() <= 2);
    }
}
