//! Auto-load (docs/operations/clusters.md, "Clusters: balancing, health, failover, sleep"): a
//! cluster with `sleep` whose endpoints are all down is asleep. The first request POSTs
//! `wake_url` (once per cluster per gateway while a wake-up is in progress, whatever the
//! number of concurrent requests), the prober then probes every 100 ms, and requests are
//! held up to `hold_ms` for an endpoint to come up; past that they answer 503
//! `BACKEND_LOADING` with `Retry-After: retry_after_s`.
//!
//! The wake call is plain HTTP/1.1 (`http://` URLs; an `https://` wake URL is logged and
//! not called), with an empty body, bounded by 2 s, through the egress policy
//! (`portico_control::egress`: a wake URL on a denied address is refused, logged and counted
//! in `portico_egress_refused_total`); a redirect is an answer like any non-2xx, never followed.

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
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !authority.ends_with(']') => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("{url}: bad port {p:?}"))?,
        ),
        _ => (authority, 80),
    };
    let call = async {
        // The URL is the config author's: through the egress policy, connecting only to the
        // addresses it checked (docs/operations/egress.md, "Egress policy").
        let mut s = portico_control::egress::global()
            .connect(host, port, WAKE_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod egress_tests {
    use super::post;

    #[tokio::test]
    async fn a_wake_url_on_a_metadata_address_is_refused_before_any_connection() {
        let before = portico_control::egress::refused_total();
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]:8080/wake",
            "http://[::ffff:169.254.169.254]/",
            "http://100.100.100.200/",
            "http://metadata.google.internal/",
        ] {
            let err = post(url).await.unwrap_err();
            assert!(err.contains("egress policy"), "{url}: {err}");
        }
        assert!(portico_control::egress::refused_total() >= before + 5);
        // A local address is called as before (nothing listens on port 9: refused to connect).
        let err = post("http://127.0.0.1:9/wake").await.unwrap_err();
        assert!(!err.contains("egress policy"), "{err}");
    }
}
