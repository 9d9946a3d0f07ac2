//! Callbacks (docs/PROTOCOL.md, "Callbacks"): for an app with a `callback_url`, the gateway POSTs
//! each event, in order, signed with the app's secret by the request scheme (docs/PROTOCOL.md,
//! "Signing a request") behind a first line `PORTICO-CALLBACK-v1` ([`callback_string_to_sign`]: a
//! callback is never a valid request, nor a request a valid callback; a fresh timestamp and nonce
//! on every try, the path and query of the URL), and acknowledges it on a 2xx answer. A failed try
//! is retried after 1 s, 2 s, 4 s, … (capped at `callback_max_backoff`); after `callback_attempts`
//! tries the event becomes a dead letter (kept, bounded, on `/status`) and the next one is sent.
//!
//! One node delivers an app's callbacks: with Redis, the node holding the lock
//! `portico:notify:{app}:callback` (renewed while it works, expiring after
//! [`LOCK_TTL_MS`] when the node dies); without Redis, each node its own queue.

use super::hub::{self, Notifier};
use super::store::Event;
use portico_control::sign;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a node's claim on an app's callbacks lasts without renewal.
pub const LOCK_TTL_MS: u64 = 10_000;
/// How often the supervisor looks for apps with a callback URL.
const SUPERVISE_EVERY: Duration = Duration::from_secs(1);

/// A callback that never succeeded (kept for `/status`'s `notify.dead_letters`; defined with
/// the rest of `/status` in `portico_control::status`).
pub use portico_control::status::DeadLetter;

fn lock_key(app: &str) -> String {
    format!("portico:notify:{{{app}}}:callback")
}

/// Starts the supervisor on the current runtime: it runs one worker per app with a
/// `callback_url` this node may deliver for.
pub fn start(n: Arc<Notifier>, client: reqwest::Client) {
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let node = fastrand::u64(1..).to_string();
    tokio::spawn(async move {
        loop {
            let snap = n.snapshot();
            for (app, doc) in &snap.apps {
                let Some(url) = doc.callback_url.clone() else {
                    continue;
                };
                if hub::granted_topics(&snap, app).is_empty() {
                    continue;
                }
                if hub::lock(&running).contains(app) {
                    continue;
                }
                if !claim(&n, app, &node).await {
                    continue;
                }
                hub::lock(&running).insert(app.clone());
                let (n2, running2, app2, node2, client2) = (
                    Arc::clone(&n),
                    Arc::clone(&running),
                    app.clone(),
                    node.clone(),
                    client.clone(),
                );
                tokio::spawn(async move {
                    tracing::info!(app = %app2, url = %url, "notify: delivering callbacks");
                    worker(&n2, &client2, &app2, &node2).await;
                    hub::lock(&running2).remove(&app2);
                });
            }
            tokio::time::sleep(SUPERVISE_EVERY).await;
        }
    });
}

/// Takes (or renews) this node's claim on `app`'s callbacks; without Redis always true.
async fn claim(n: &Notifier, app: &str, node: &str) -> bool {
    if !n.fleet.has_redis() {
        return true;
    }
    let Some(mut c) = n.fleet.redis_conn() else {
        return false;
    };
    // Renew if ours, else take it if free.
    let script = redis::Script::new(
        r"local v = redis.call('GET', KEYS[1])
          if v == ARGV[1] or not v then
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
          return 0",
    );
    let mut inv = script.key(lock_key(app));
    inv.arg(node).arg(LOCK_TTL_MS);
    matches!(inv.invoke_async::<i64>(&mut c).await, Ok(1))
}

/// The app's callback URL and secret in force, if it still has one and may receive.
fn target(n: &Notifier, app: &str) -> Option<(String, String)> {
    let snap = n.snapshot();
    let doc = snap.apps.get(app)?;
    if doc.status != portico_control::v1::AppStatus::Active
        || hub::granted_topics(&snap, app).is_empty()
    {
        return None;
    }
    Some((doc.callback_url.clone()?, doc.secret.clone()))
}

async fn worker(n: &Notifier, client: &reqwest::Client, app: &str, node: &str) {
    let mut queue: std::collections::VecDeque<Event> = match n.store.resume(app, None).await {
        Ok(pending) => pending.into(),
        Err(e) => {
            tracing::warn!(app, error = %e, "notify: callbacks could not resume");
            return;
        }
    };
    let waker = n.waker(app);
    loop {
        if target(n, app).is_none() || !claim(n, app, node).await {
            return;
        }
        let woken = waker.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if queue.is_empty() {
            // Never reclaimed by the ack timeout: this worker sends each event until it is
            // acknowledged or dead.
            match n.store.poll(app, u64::MAX / 4, 50).await {
                Ok(b) => queue.extend(b.fresh),
                Err(e) => {
                    tracing::warn!(app, error = %e, "notify: polling for callbacks failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            }
        }
        let Some(event) = queue.pop_front() else {
            let _ =
                tokio::time::timeout(n.config.poll.max(Duration::from_millis(200)), woken).await;
            continue;
        };
        deliver(n, client, app, node, &event).await;
    }
}

/// Sends one event until it succeeds or is dead; acknowledges it either way.
async fn deliver(n: &Notifier, client: &reqwest::Client, app: &str, node: &str, e: &Event) {
    let now = portico_control::clock::now_ms();
    if e.expires_at_ms > 0 && e.expires_at_ms <= now {
        let _ = n.store.ack(app, &[e.id]).await;
        return;
    }
    let body = super::sse::event_json(e);
    let mut backoff = Duration::from_secs(1);
    let mut attempts = 0;
    let last_error = loop {
        let Some((url, secret)) = target(n, app) else {
            return;
        };
        attempts += 1;
        let error = match post(
            client,
            &url,
            app,
            &secret,
            e,
            &body,
            n.config.callback_timeout,
        )
        .await
        {
            Ok(()) => {
                let _ = n.store.ack(app, &[e.id]).await;
                n.metrics.delivered.inc();
                n.metrics.acked.inc();
                return;
            }
            Err(error) => error,
        };
        n.metrics.callback_failures.inc();
        tracing::info!(app, id = %e.id, attempts, error = %error, "notify: callback failed");
        if attempts >= n.config.callback_attempts {
            break error;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(n.config.callback_max_backoff);
        if !claim(n, app, node).await {
            return;
        }
    };
    tracing::warn!(app, id = %e.id, attempts, "notify: callback dead-lettered");
    n.dead_letter(DeadLetter {
        app: app.to_owned(),
        id: e.id.to_string(),
        topic: e.topic.clone(),
        attempts,
        last_error,
        at_ms: portico_control::clock::now_ms(),
    });
    let _ = n.store.ack(app, &[e.id]).await;
}

/// The first line of a callback's string-to-sign (docs/PROTOCOL.md, "Callbacks"): the rest is the
/// string-to-sign of the POST (docs/PROTOCOL.md, "Signing a request"). A request's string-to-sign
/// starts with its method, upper-cased, which can never be this line (it has a lower-case `v`), so
/// a callback's signature never verifies as a request's, nor the other way round.
pub const CALLBACK_SIGNING_DOMAIN: &str = "PORTICO-CALLBACK-v1";

/// The string-to-sign of a callback POST to `path`?`raw_query`.
pub fn callback_string_to_sign(
    path: &str,
    raw_query: Option<&str>,
    app: &str,
    timestamp: &str,
    nonce: &str,
    body: &[u8],
) -> String {
    let request = sign::string_to_sign("POST", path, raw_query, app, timestamp, nonce, body);
    format!("{CALLBACK_SIGNING_DOMAIN}\n{request}")
}

/// The four headers of a callback POST, signed with the app's secret over
/// [`callback_string_to_sign`].
pub fn sign_callback(
    secret: &[u8],
    path: &str,
    raw_query: Option<&str>,
    app: &str,
    timestamp_ms: u64,
    nonce: &str,
    body: &[u8],
) -> sign::SignedHeaders {
    let timestamp = timestamp_ms.to_string();
    let sts = callback_string_to_sign(path, raw_query, app, &timestamp, nonce, body);
    sign::SignedHeaders {
        app_key: app.to_owned(),
        timestamp,
        nonce: nonce.to_owned(),
        signature: sign::sign(secret, &sts),
        string_to_sign: sts,
    }
}

/// Where a callback goes, through the egress policy (docs/operations/egress.md, "Egress policy"):
/// the URL's host is resolved and every address checked (a refusal is logged, counted in
/// `portico_egress_refused_total`, and the try's error). An `http://` URL naming a host is
/// sent to the checked address itself (with the `Host` it names), so a name that resolves
/// elsewhere the second time (DNS rebinding) gets nowhere; an `https://` one is verified
/// against the host's certificate, which a metadata service cannot present. The client
/// never follows redirects.
async fn egress_target(parsed: reqwest::Url) -> Result<(reqwest::Url, Option<String>), String> {
    let host = parsed.host_str().ok_or("callback_url: no host")?.to_owned();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let addrs = portico_control::egress::global()
        .resolve(&host, port)
        .await
        .map_err(|err| {
            if err.by_policy() {
                tracing::warn!(callback_url = %parsed, error = %err, "egress: callback refused");
            }
            format!("callback_url: {err}")
        })?;
    // The URL parser writes address literals in their canonical form.
    let is_name = !host.starts_with('[') && host.parse::<std::net::IpAddr>().is_err();
    match addrs.first() {
        Some(addr) if is_name && parsed.scheme() == "http" => {
            let host_header = match parsed.port() {
                Some(p) => format!("{host}:{p}"),
                None => host.clone(),
            };
            let mut pinned = parsed;
            pinned
                .set_ip_host(addr.ip())
                .map_err(|()| "callback_url: cannot address the checked host".to_owned())?;
            Ok((pinned, Some(host_header)))
        }
        _ => Ok((parsed, None)),
    }
}

/// One signed POST; `Err` with why unless the answer is 2xx.
async fn post(
    client: &reqwest::Client,
    url: &str,
    app: &str,
    secret: &str,
    e: &Event,
    body: &str,
    timeout: Duration,
) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("callback_url: {err}"))?;
    let nonce = format!("cb{:030x}", fastrand::u128(..) >> 8);
    let signed = sign_callback(
        secret.as_bytes(),
        parsed.path(),
        parsed.query(),
        app,
        portico_control::clock::now_ms(),
        &nonce,
        body.as_bytes(),
    );
    let (target, host_header) = egress_target(parsed).await?;
    let mut request = client
        .post(target)
        .timeout(timeout)
        .header("content-type", "application/json");
    if let Some(host) = host_header {
        request = request.header(reqwest::header::HOST, host);
    }
    for (name, value) in signed.pairs() {
        request = request.header(name, value);
    }
    let answer = request
        .header("x-portico-event-id", e.id.to_string())
        .body(body.to_owned())
        .send()
        .await
        .map_err(|err| format!("no answer: {err}"))?;
    let status = answer.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", status.as_u16()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod signing_tests {
    use super::*;

    const SECRET: &[u8] = b"s3cr3t-value";

    /// docs/PROTOCOL.md, "Callbacks": the worked example.
    #[test]
    fn the_documented_callback_vector() {
        let body = br#"{"id":"1796000000000-0","topic":"orders","published_at":"2026-11-30T00:53:20Z","payload":{"order_id":"1001","state":"paid"}}"#;
        let signed = sign_callback(
            SECRET,
            "/hooks/portico",
            Some("shop=7"),
            "merchant-1",
            1_796_000_000_000,
            "cb0123456789abcdef",
            body,
        );
        assert!(signed.string_to_sign.starts_with("PORTICO-CALLBACK-v1\nPOST\n/hooks/portico\nshop=7\nmerchant-1\n1796000000000\ncb0123456789abcdef\n"));
        assert_eq!(signed.string_to_sign.lines().count(), 8);
        assert_eq!(
            signed.signature,
            "cff5413a59f1ff12680e8afab43fce035f3a11a53afdf3a75415389897772714"
        );
    }

    /// A captured callback presented as a request to the gateway (same method, path, query,
    /// app, timestamp, nonce, body: a request's verification) is refused, and a request's
    /// signature is no callback's.
    #[test]
    fn a_callback_signature_is_never_a_request_signature() {
        let body = br#"{"id":"1-0","topic":"orders","payload":{}}"#;
        let cb = sign_callback(
            SECRET,
            "/router",
            Some("method=refund"),
            "merchant-1",
            1_796_000_000_000,
            "cbnonce0001",
            body,
        );
        let as_request = sign::string_to_sign(
            "POST",
            "/router",
            Some("method=refund"),
            "merchant-1",
            &cb.timestamp,
            &cb.nonce,
            body,
        );
        assert!(!sign::verify(SECRET, &as_request, &cb.signature));
        let req = sign::sign_request(
            SECRET,
            "POST",
            "/router",
            Some("method=refund"),
            "merchant-1",
            1_796_000_000_000,
            "cbnonce0001",
            body,
        );
        assert!(!sign::verify(SECRET, &cb.string_to_sign, &req.signature));
        assert_ne!(req.signature, cb.signature);
        // Whatever the method, a request's first line is upper-cased: never the domain line.
        let forged =
            sign::string_to_sign("portico-callback-v1", "/", None, "a", "1", "nonce0001", b"");
        assert!(!forged.starts_with(CALLBACK_SIGNING_DOMAIN));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod egress_tests {
    use super::egress_target;

    #[tokio::test]
    async fn callbacks_go_to_checked_addresses_only() {
        let refused = egress_target("http://169.254.169.254/cb".parse().unwrap())
            .await
            .unwrap_err();
        assert!(refused.contains("egress policy"), "{refused}");
        let refused = egress_target("https://[fd00:ec2::254]/cb".parse().unwrap())
            .await
            .unwrap_err();
        assert!(refused.contains("egress policy"), "{refused}");
        // A name is resolved, checked, and the call pinned to the checked address.
        let (url, host) = egress_target("http://localhost:9/cb?x=1".parse().unwrap())
            .await
            .unwrap();
        assert_eq!(host.as_deref(), Some("localhost:9"));
        assert!(
            matches!(url.host_str(), Some("127.0.0.1" | "[::1]")),
            "{url}"
        );
        assert_eq!((url.path(), url.query()), ("/cb", Some("x=1")));
        // An address literal is called as it is.
        let (url, host) = egress_target("http://127.0.0.1:9/cb".parse().unwrap())
            .await
            .unwrap();
        assert_eq!((url.as_str(), host), ("http://127.0.0.1:9/cb", None));
    }
}
