//! Auto-load (docs/OPERATIONS.md, "Clusters: balancing, health, failover, sleep"): a
//! cluster with `sleep` whose endpoints are all down is asleep. The first request POSTs
//! `wake_url` (once per cluster per gateway while a wake-up is in progress, whatever the
//! number of concurrent requests), the prober then probes every 100 ms, and requests are
//! held up to `hold_ms` for an endpoint to come up; past that they answer 503
//! `BACKEND_LOADING` with `Retry-After: retry_after_s`.
//!
//! The wake call is plain HTTP/1.1 (`http://` URLs; an `https://` wake URL is logged and
//! not called), with an empty body, bounded by 2 s.

use crate::error::{Code, GatewayError};
use crate::invoke::routing::Routing;
use portico_control::v1;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How often a held request looks for an endpoint that came up.
const HOLD_POLL: Duration = Duration::from_millis(25);
/// The bound of the wake call.
const WAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// When `routing`'s cluster is asleep: wakes it (deduplicated) and holds until an endpoint
/// is available. `Ok` when the cluster is awake (or has no `sleep`); `Err` 503
/// `BACKEND_LOADING` when it did not come up within `hold_ms`.
pub async fn wake_and_hold(routing: &Arc<Routing>) -> Result<(), GatewayError> {
    let Some(sleep) = &routing.cluster.sleep else {
        return Ok(());
    };
    let now = portico_control::clock::now_ms();
    if !routing.all_down(now) {
        return Ok(());
    }
    let until = routing.wake_until_ms.load(Ordering::Relaxed);
    if now >= until
        && routing
            .wake_until_ms
            .compare_exchange(
                until,
                now + sleep.hold_ms.max(1000),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    {
        routing.waking.store(true, Ordering::Relaxed);
        tracing::warn!(cluster = %routing.name, "cluster asleep: calling its wake_url");
        let url = sleep.wake_url.clone();
        let name = routing.name.clone();
        tokio::spawn(async move {
            if let Err(e) = post(&url).await {
                tracing::warn!(cluster = %name, error = %e, "wake_url call failed");
            }
        });
    }
    let started = Instant::now();
    let hold = Duration::from_millis(sleep.hold_ms);
    loop {
        if !routing.all_down(portico_control::clock::now_ms()) {
            routing.waking.store(false, Ordering::Relaxed);
            return Ok(());
        }
        if started.elapsed() >= hold {
            // The wake-up window is over: the prober goes back to its interval.
            if portico_control::clock::now_ms() >= routing.wake_until_ms.load(Ordering::Relaxed) {
                routing.waking.store(false, Ordering::Relaxed);
            }
            return Err(loading(&routing.name, sleep));
        }
        tokio::time::sleep(HOLD_POLL.min(hold.saturating_sub(started.elapsed()))).await;
    }
}

fn loading(cluster: &str, sleep: &v1::Sleep) -> GatewayError {
    GatewayError::upstream(
        Code::BackendLoading,
        "the backend is starting, retry later",
        format!(
            "cluster {cluster} is asleep and did not wake within {} ms",
            sleep.hold_ms
        ),
    )
    .with_retry_after(sleep.retry_after_s)
}

/// `POST url` with an empty body over plain HTTP/1.1; `Ok` on any 2xx.
async fn post(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// wake URLs are called"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host_port = if authority.contains(':') && !authority.ends_with(']') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let call = async {
        let mut s = tokio::net::TcpStream::connect(&host_port)
            .await
            .map_err(|e| format!("connect {host_port}: {e}"))?;
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: portico-wake\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 16];
        let mut got = 0;
        while got < 12 {
            let n = s.read(&mut buf[got..]).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let line = String::from_utf8_lossy(&buf[..got]).into_owned();
        match line.get(9..10) {
            Some("2") => Ok(()),
            _ => Err(format!("answered {line:?}")),
        }
    };
    tokio::time::timeout(WAKE_TIMEOUT, call)
        .await
        .map_err(|_| "timed out".to_owned())?
}
