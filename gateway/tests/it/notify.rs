//! Notifications end to end (docs/PROTOCOL.md, "Notifications"; docs/operations/notifications.md,
//! "Notifications"): real gateways on one configuration directory, real Redis, backends
//! publishing on the internal listener, merchants holding signed SSE streams and acking.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_testkit::Redis;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TOKEN: &str = "publisher-token-0123456789";
const OTHER: &str = "merchant-2";
const OTHER_SECRET: &str = "other-secret-value";

/// Two apps, both granted the topic `orders`.
fn tree() -> ConfigTree {
    let t = ConfigTree::new();
    t.put(
        "apps/merchant-1",
        &json!({"secret": SECRET, "status": "active", "apis": []}),
    );
    t.put(
        &format!("apps/{OTHER}"),
        &json!({"secret": OTHER_SECRET, "status": "active", "apis": [], "topics": ["orders"]}),
    );
    t.put(
        "topics/orders",
        &json!({"owner": "order-team", "apps": ["merchant-1"], "retention_s": 3600}),
    );
    t
}

/// A gateway on `tree` with an internal listener of its own (and Redis when given).
struct Node {
    gw: GatewayProcess,
    internal: SocketAddr,
}

fn node(tree: &ConfigTree, redis: Option<&Redis>, extra: &[&str]) -> Node {
    let internal: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let token_file = tree.path().join("publish.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let mut args: Vec<String> = vec![
        "--config-dir".into(),
        tree.path().display().to_string(),
        "--internal-listen".into(),
        internal.to_string(),
        "--publish-token-file".into(),
        token_file.display().to_string(),
    ];
    if let Some(r) = redis {
        args.extend(["--redis".into(), r.url()]);
        args.extend(["--notify-key-file".into(), notify_key_file(tree)]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let gw = GatewayProcess::start_args(args);
    assert!(wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(internal).is_ok()
    }));
    if redis.is_some() {
        assert!(
            wait_until(Duration::from_secs(10), || gw.status()["redis"]["state"]
                == "ok"),
            "redis never up"
        );
    }
    Node { gw, internal }
}

/// The notification key every gateway on `tree` shares (a 0600 file in the tree's folder).
fn notify_key_file(tree: &ConfigTree) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = tree.path().join("notify.key");
    if !path.exists() {
        std::fs::write(&path, "notify-key-0123456789abcdef0123456789abcdef").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path.display().to_string()
}

/// Publishes `payload` on `topic` (to `app`, or every granted app); the answer's events.
fn publish(n: &Node, app: Option<&str>, topic: &str, payload: Value) -> Vec<Value> {
    publish_to(n.internal, app, topic, payload)
}

fn publish_to(internal: SocketAddr, app: Option<&str>, topic: &str, payload: Value) -> Vec<Value> {
    let mut body = json!({"topic": topic, "payload": payload});
    if let Some(app) = app {
        body["app"] = app.into();
    }
    let r = client()
        .post(format!("http://{internal}/internal/v1/notifications"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    v["events"].as_array().unwrap().clone()
}

/// What a stream delivered.
#[derive(Debug)]
enum Msg {
    Event(Value),
    Close(Value),
}

/// An open SSE stream, read on a thread.
struct Sse {
    rx: mpsc::Receiver<Msg>,
}

/// A client without an overall timeout (streams last).
fn stream_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(None::<Duration>)
        .no_proxy()
        .build()
        .unwrap()
}

fn open_as(gw: &GatewayProcess, key: &str, secret: &str, last: Option<&str>) -> Sse {
    let mut req = signed(
        &stream_client(),
        "GET",
        &gw.url("/notify/v1/stream"),
        key,
        secret,
        None,
    );
    if let Some(id) = last {
        req = req.header("Last-Event-ID", id);
    }
    let resp = req.send().unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text());
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut event = String::new();
        let mut data = String::new();
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { return };
            if line.is_empty() {
                let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                let msg = match event.as_str() {
                    "notification" => Some(Msg::Event(v)),
                    "close" => Some(Msg::Close(v)),
                    _ => None,
                };
                if let Some(m) = msg {
                    if tx.send(m).is_err() {
                        return;
                    }
                }
                event.clear();
                data.clear();
            } else if let Some(e) = line.strip_prefix("event: ") {
                event = e.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ") {
                data.push_str(d);
            }
        }
    });
    Sse { rx }
}

fn open(gw: &GatewayProcess, last: Option<&str>) -> Sse {
    open_as(gw, KEY, SECRET, last)
}

impl Sse {
    /// The next event, within `wait`; panics on a close or silence.
    fn next(&self, wait: Duration) -> Value {
        match self.rx.recv_timeout(wait) {
            Ok(Msg::Event(v)) => v,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// Waits for the gateway's close; its `{reason, message}`.
    fn closed(&self, wait: Duration) -> Value {
        let end = Instant::now() + wait;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Msg::Close(v)) => return v,
                Ok(Msg::Event(_)) => continue,
                Err(e) => panic!("no close: {e:?}"),
            }
        }
    }

    /// Nothing more arrives within `wait`.
    fn quiet(&self, wait: Duration) -> bool {
        self.rx.recv_timeout(wait).is_err()
    }
}

fn ack_as(gw: &GatewayProcess, key: &str, secret: &str, ids: &[String]) -> u64 {
    let body = serde_json::to_vec(&json!({ "ids": ids })).unwrap();
    let r = signed(
        &client(),
        "POST",
        &gw.url("/notify/v1/ack"),
        key,
        secret,
        Some(&body),
    )
    .send()
    .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    v["acked"].as_u64().unwrap()
}

fn ack(gw: &GatewayProcess, ids: &[String]) -> u64 {
    ack_as(gw, KEY, SECRET, ids)
}

fn seq(e: &Value) -> u64 {
    e["payload"]["seq"].as_u64().unwrap()
}

fn id(e: &Value) -> String {
    e["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_thousand_events_arrive_in_order_and_none_twice_after_acks() {
    let redis = Redis::start();
    let t = tree();
    let n = node(&t, Some(&redis), &[]);
    let sse = open(&n.gw, None);
    let publisher = {
        let internal = n.internal;
        std::thread::spawn(move || {
            for i in 0..1000u64 {
                let events = publish_to(internal, Some(KEY), "orders", json!({"seq": i}));
                assert_eq!(events.len(), 1);
            }
        })
    };
    let mut got = Vec::new();
    let mut to_ack = Vec::new();
    while got.len() < 1000 {
        let e = sse.next(Duration::from_secs(30));
        assert_eq!(e["topic"], "orders");
        assert!(e["published_at"].as_str().unwrap().contains('T'));
        to_ack.push(id(&e));
        got.push(seq(&e));
        if to_ack.len() >= 50 {
            assert_eq!(ack(&n.gw, &to_ack), to_ack.len() as u64);
            to_ack.clear();
        }
    }
    publisher.join().unwrap();
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
    ack(&n.gw, &to_ack);
    assert!(
        sse.quiet(Duration::from_secs(2)),
        "nothing more after the acks"
    );
    let m = n.gw.metrics();
    assert!(
        m.contains("portico_notify_events_published_total 1000"),
        "{m}"
    );
    assert!(m.contains("portico_notify_acked_total 1000"), "{m}");
    assert!(m.contains("portico_notify_connections 1"), "{m}");
    let status = n.gw.status();
    assert_eq!(status["notify"]["store"], "redis");
    assert_eq!(status["notify"]["backlog"][KEY], 0);
}

#[test]
fn killing_the_node_holding_the_stream_loses_nothing() {
    let redis = Redis::start();
    let t = tree();
    let a = node(&t, Some(&redis), &[]);
    let b = node(&t, Some(&redis), &[]);
    // Both follow the wake channel: a publish on b wakes the stream on a, which otherwise
    // polls only every second.
    for n in [&a, &b] {
        assert!(wait_until(Duration::from_secs(10), || {
            n.gw.status()["notify"]["wake_subscribed"] == true
        }));
    }
    let sse = open(&a.gw, None);
    for i in 0..100u64 {
        publish(&b, Some(KEY), "orders", json!({"seq": i}));
    }
    let mut seen = Vec::new();
    for _ in 0..60 {
        seen.push(sse.next(Duration::from_secs(20)));
    }
    // Ack the first 40 only; the node dies with 20 delivered and unacked, 40 undelivered.
    let acked: Vec<String> = seen[..40].iter().map(id).collect();
    assert_eq!(ack(&b.gw, &acked), 40);
    let last_acked = acked.last().unwrap().clone();
    drop(a);
    for i in 100..150u64 {
        publish(&b, Some(KEY), "orders", json!({"seq": i}));
    }
    let sse = open(&b.gw, Some(&last_acked));
    let mut after = Vec::new();
    while after.len() < 110 {
        let e = sse.next(Duration::from_secs(20));
        after.push(seq(&e));
        ack(&b.gw, &[id(&e)]);
    }
    assert_eq!(after, (40..150).collect::<Vec<_>>());
    assert!(sse.quiet(Duration::from_secs(1)));
}

#[test]
fn an_offline_merchant_gets_its_backlog_and_unacked_events_come_again() {
    let redis = Redis::start();
    let t = tree();
    let n = node(&t, Some(&redis), &["--notify-ack-timeout-ms", "1500"]);
    // Every granted app: merchant-1 by the topic's list, merchant-2 by its own `topics`.
    for i in 0..5u64 {
        let events = publish(&n, None, "orders", json!({"seq": i}));
        assert_eq!(events.len(), 2, "{events:?}");
    }
    let sse = open(&n.gw, None);
    let first: Vec<Value> = (0..5).map(|_| sse.next(Duration::from_secs(10))).collect();
    let received = Instant::now();
    assert_eq!(
        first.iter().map(seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    ack(&n.gw, &first[1..].iter().map(id).collect::<Vec<_>>());
    // Seq 0 was never acked: it comes again after the ack timeout (1.5 s after it was
    // sent), with the same id.
    let again = sse.next(Duration::from_secs(10));
    assert_eq!(id(&again), id(&first[0]));
    assert!(received.elapsed() >= Duration::from_millis(1000));
    ack(&n.gw, &[id(&again)]);
    assert!(sse.quiet(Duration::from_secs(3)));
    assert!(n
        .gw
        .metrics()
        .contains("portico_notify_redelivered_total 1"));
    // The other app's backlog waited for it.
    let other = open_as(&n.gw, OTHER, OTHER_SECRET, None);
    let got: Vec<u64> = (0..5)
        .map(|_| seq(&other.next(Duration::from_secs(10))))
        .collect();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_revoked_grant_closes_the_stream() {
    let t = tree();
    let n = node(&t, None, &[]);
    assert_eq!(n.gw.status()["notify"]["store"], "memory");
    let sse = open(&n.gw, None);
    publish(&n, Some(KEY), "orders", json!({"seq": 1}));
    sse.next(Duration::from_secs(10));
    let digest = n.gw.digest();
    t.put(
        "topics/orders",
        &json!({"apps": [OTHER], "retention_s": 3600}),
    );
    assert!(n.gw.wait_for_new_config(&digest));
    let applied = Instant::now();
    let close = sse.closed(Duration::from_secs(5));
    assert_eq!(close["reason"], "revoked");
    assert!(
        applied.elapsed() < Duration::from_secs(1),
        "{:?}",
        applied.elapsed()
    );
    // And a new stream is refused.
    let r = signed(
        &client(),
        "GET",
        &n.gw.url("/notify/v1/stream"),
        KEY,
        SECRET,
        None,
    )
    .send()
    .unwrap();
    let (status, code, _) = code_of(r);
    assert_eq!((status, code.as_str()), (403, "APP_FORBIDDEN"));
}

#[test]
fn a_slow_consumer_is_cut_and_another_app_is_not() {
    let redis = Redis::start();
    let t = tree();
    let n = node(
        &t,
        Some(&redis),
        &[
            "--notify-max-backlog",
            "20",
            "--notify-ack-timeout-ms",
            "2000",
        ],
    );
    let slow = open(&n.gw, None);
    let fast = open_as(&n.gw, OTHER, OTHER_SECRET, None);
    for i in 0..50u64 {
        assert_eq!(publish(&n, None, "orders", json!({"seq": i})).len(), 2);
    }
    // At least once: on a loaded machine an ack may come after the ack timeout and the event
    // is sent again; every event arrives, first in publish order.
    let mut fast_seen: Vec<u64> = Vec::new();
    while fast_seen.len() < 50 {
        let e = fast.next(Duration::from_secs(10));
        let s = seq(&e);
        if !fast_seen.contains(&s) {
            fast_seen.push(s);
        }
        ack_as(&n.gw, OTHER, OTHER_SECRET, &[id(&e)]);
    }
    assert_eq!(fast_seen, (0..50).collect::<Vec<_>>());
    // The slow one got its window of 20 and no more, then was cut.
    let mut slow_seen = 0;
    let close = loop {
        match slow.rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            Msg::Event(_) => slow_seen += 1,
            Msg::Close(v) => break v,
        }
    };
    assert_eq!(close["reason"], "slow_consumer", "{close}");
    assert!(slow_seen >= 20, "{slow_seen}");
    assert!(n
        .gw
        .metrics()
        .contains("portico_notify_streams_closed_total{reason=\"slow_consumer\"} 1"));
    assert!(fast.quiet(Duration::from_millis(500)));
}

#[test]
fn unsigned_replayed_and_unauthorized_requests_are_refused() {
    let t = tree();
    let n = node(&t, None, &[]);
    let r = client().get(n.gw.url("/notify/v1/stream")).send().unwrap();
    let (status, code, _) = code_of(r);
    assert_eq!((status, code.as_str()), (401, "SIGNATURE_MISSING"));
    // The same signed opening request twice: the second is a replay.
    let url = n.gw.url("/notify/v1/stream");
    let ts = now_ms();
    let nonce = nonce();
    let first = signed_at(&stream_client(), "GET", &url, KEY, SECRET, None, ts, &nonce)
        .send()
        .unwrap();
    assert_eq!(first.status(), 200);
    let again = signed_at(&client(), "GET", &url, KEY, SECRET, None, ts, &nonce)
        .send()
        .unwrap();
    let (status, code, _) = code_of(again);
    assert_eq!((status, code.as_str()), (401, "NONCE_REPLAYED"));
    drop(first);
    // Publishing: the token, the topic, the grant, the body.
    let post = |token: Option<&str>, body: Value| {
        let mut r = client().post(format!("http://{}/internal/v1/notifications", n.internal));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        code_of(r.json(&body).send().unwrap())
    };
    let ok = json!({"app": KEY, "topic": "orders", "payload": {}});
    assert_eq!(post(None, ok.clone()).1, "UNAUTHORIZED");
    assert_eq!(post(Some("wrong"), ok.clone()).0, 401);
    let (s, c, v) = post(Some(TOKEN), json!({"topic": "nope", "payload": 1}));
    assert_eq!((s, c.as_str()), (404, "TOPIC_NOT_FOUND"), "{v}");
    assert!(v["request_id"].is_string());
    // The digest before the change (read after it, the change may already be applied).
    let digest = n.gw.digest();
    t.put(
        "apps/merchant-3",
        &json!({"secret": "third-secret", "apis": []}),
    );
    assert!(n.gw.wait_for_new_config(&digest));
    let (s, c, _) = post(
        Some(TOKEN),
        json!({"app": "merchant-3", "topic": "orders", "payload": 1}),
    );
    assert_eq!((s, c.as_str()), (403, "APP_FORBIDDEN"));
    let (s, c, _) = post(Some(TOKEN), json!({"topic": "orders"}));
    assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"));
    // The merchant listener does not serve the internal API.
    let r = client()
        .post(n.gw.url("/internal/v1/notifications"))
        .bearer_auth(TOKEN)
        .json(&ok)
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn without_a_token_publishing_is_off() {
    let t = tree();
    let internal: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _gw = GatewayProcess::start(t.path(), &["--internal-listen", &internal.to_string()]);
    assert!(wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(internal).is_ok()
    }));
    let r = client()
        .post(format!("http://{internal}/internal/v1/notifications"))
        .bearer_auth("anything")
        .json(&json!({"topic": "orders", "payload": 1}))
        .send()
        .unwrap();
    let (s, c, v) = code_of(r);
    assert_eq!((s, c.as_str()), (503, "NOTIFY_UNAVAILABLE"));
    assert!(v["message"].as_str().unwrap().contains("token"));
}

/// One callback the receiver saw.
#[derive(Debug, Clone)]
struct Hook {
    at: Instant,
    nonce: String,
    signature_ok: bool,
    body: Value,
}

/// A callback receiver on a free port: answers 500 to the first `fail` POSTs, then 204;
/// verifies each signature with `secret` (the callback scheme: `PORTICO-CALLBACK-v1`, then
/// the request scheme over the path and query it was sent to: docs/PROTOCOL.md, "Callbacks").
fn receiver(secret: &'static str, fail: usize) -> (u16, mpsc::Receiver<Hook>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = 0;
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head, body) = loop {
                let n = conn.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..i]).to_string();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    let mut body = buf[i + 4..].to_vec();
                    while body.len() < len {
                        let n = conn.read(&mut chunk).unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        body.extend_from_slice(&chunk[..n]);
                    }
                    break (head, body);
                }
            };
            if head.is_empty() {
                continue;
            }
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                    })
                    .unwrap_or_default()
            };
            let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
                None => (target.clone(), None),
            };
            let sts = portico_gateway::notify::callback::callback_string_to_sign(
                &path,
                query.as_deref(),
                &header("x-portico-appkey"),
                &header("x-portico-timestamp"),
                &header("x-portico-nonce"),
                &body,
            );
            let signature_ok = portico_control::sign::verify(
                secret.as_bytes(),
                &sts,
                &header("x-portico-signature"),
            );
            seen += 1;
            let status = if seen <= fail {
                "500 Oops"
            } else {
                "204 No Content"
            };
            let _ = conn.write_all(
                format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            );
            let _ = tx.send(Hook {
                at: Instant::now(),
                nonce: header("x-portico-nonce"),
                signature_ok,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            });
        }
    });
    (port, rx)
}

#[test]
fn callbacks_are_signed_retried_with_backoff_and_dead_lettered() {
    let redis = Redis::start();
    let t = tree();
    let (port, hooks) = receiver("callback-secret-1", 2);
    t.put(
        "apps/merchant-cb",
        &json!({"secret": "callback-secret-1", "apis": [], "topics": ["orders"],
                "callback_url": format!("http://127.0.0.1:{port}/hooks/portico?src=gw")}),
    );
    let closed = free_port();
    t.put(
        "apps/merchant-dead",
        &json!({"secret": "callback-secret-2", "apis": [], "topics": ["orders"],
                "callback_url": format!("http://127.0.0.1:{closed}/never")}),
    );
    let n = node(&t, Some(&redis), &["--notify-callback-attempts", "3"]);
    let events = publish(&n, Some("merchant-cb"), "orders", json!({"order": 42}));
    publish(&n, Some("merchant-dead"), "orders", json!({"order": 43}));
    let tries: Vec<Hook> = (0..3)
        .map(|_| hooks.recv_timeout(Duration::from_secs(15)).unwrap())
        .collect();
    assert!(tries.iter().all(|h| h.signature_ok), "{tries:?}");
    assert!(tries.iter().all(|h| h.body["id"] == events[0]["id"]));
    assert_eq!(tries[0].body["payload"]["order"], 42);
    let nonces: std::collections::HashSet<&str> = tries.iter().map(|h| h.nonce.as_str()).collect();
    assert_eq!(nonces.len(), 3, "a fresh nonce on every try");
    let gap1 = tries[1].at - tries[0].at;
    let gap2 = tries[2].at - tries[1].at;
    assert!(gap1 >= Duration::from_millis(900), "{gap1:?}");
    assert!(gap2 >= Duration::from_millis(1900), "{gap2:?}");
    // Delivered (204): acknowledged, nothing more comes.
    assert!(hooks.recv_timeout(Duration::from_secs(2)).is_err());
    assert!(wait_until(Duration::from_secs(10), || {
        let s = n.gw.status();
        s["notify"]["backlog"]["merchant-cb"] == 0
            && s["notify"]["dead_letters"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x["app"] == "merchant-dead"))
    }));
    let s = n.gw.status();
    let dead = &s["notify"]["dead_letters"][0];
    assert_eq!(
        (dead["attempts"].as_u64(), dead["topic"].as_str()),
        (Some(3), Some("orders"))
    );
    assert!(n
        .gw
        .metrics()
        .contains("portico_notify_callback_failures_total 5"));
    // An app receiving callbacks cannot also open a stream.
    let r = signed(
        &client(),
        "GET",
        &n.gw.url("/notify/v1/stream"),
        "merchant-cb",
        "callback-secret-1",
        None,
    )
    .send()
    .unwrap();
    assert_eq!(code_of(r).1, "APP_FORBIDDEN");
}

/// A node started with `--internal-listen off` takes no publishes but still delivers
/// callbacks: when the node that took the publish dies after the first (failed) try, the
/// other one, without an internal listener, takes the app's callback lock and delivers.
#[test]
fn a_node_without_an_internal_listener_delivers_callbacks() {
    let redis = Redis::start();
    let t = tree();
    let (port, hooks) = receiver("callback-secret-1", 1);
    t.put(
        "apps/merchant-cb",
        &json!({"secret": "callback-secret-1", "apis": [], "topics": ["orders"],
                "callback_url": format!("http://127.0.0.1:{port}/hooks")}),
    );
    let key_file = notify_key_file(&t);
    let quiet = GatewayProcess::start(
        t.path(),
        &[
            "--redis",
            &redis.url(),
            "--notify-key-file",
            &key_file,
            "--internal-listen",
            "off",
        ],
    );
    assert!(wait_until(Duration::from_secs(10), || quiet.status()
        ["redis"]["state"]
        == "ok"));
    let publisher = node(&t, Some(&redis), &[]);
    let events = publish(
        &publisher,
        Some("merchant-cb"),
        "orders",
        json!({"order": 7}),
    );
    // The publisher dies at once: it has made at most the first try (answered 500), and the
    // retry comes a second later at the earliest.
    drop(publisher);
    let mut tries = Vec::new();
    while tries.len() < 2 {
        let h = hooks
            .recv_timeout(Duration::from_secs(30))
            .expect("the node without an internal listener never delivered the callback");
        tries.push(h);
    }
    assert!(tries
        .iter()
        .all(|h| h.signature_ok && h.body["id"] == events[0]["id"]));
    assert!(wait_until(Duration::from_secs(10), || {
        quiet.status()["notify"]["backlog"]["merchant-cb"] == 0
    }));
}

#[test]
fn the_cli_publishes_like_a_backend() {
    let t = tree();
    let n = node(&t, None, &[]);
    let sse = open(&n.gw, None);
    let token_file = t.path().join("publish.token");
    let out = std::process::Command::new(sibling_bin("portico"))
        .args(["notify", "--gateway", &format!("http://{}", n.internal)])
        .args([
            "--app",
            KEY,
            "--topic",
            "orders",
            "--payload",
            r#"{"seq": 7}"#,
        ])
        .args(["--id", "order-7-paid", "--publish-token-file"])
        .arg(&token_file)
        .env_remove("PORTICO_PUBLISH_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let e = sse.next(Duration::from_secs(10));
    assert_eq!(printed.trim(), format!("{KEY}\t{}", id(&e)));
    assert_eq!((seq(&e), e["key"].as_str()), (7, Some("order-7-paid")));
    // A bad token: the envelope on stderr, exit 1.
    let out = std::process::Command::new(sibling_bin("portico"))
        .args(["notify", "--gateway", &format!("http://{}", n.internal)])
        .args([
            "--topic",
            "orders",
            "--payload",
            "1",
            "--publish-token",
            "wrong",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNAUTHORIZED"));
}

#[test]
fn the_documented_python_client_receives_and_acks() {
    let t = tree();
    let n = node(&t, None, &[]);
    for i in 0..3u64 {
        publish(&n, Some(KEY), "orders", json!({"seq": i}));
    }
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/notify_client.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(["--gateway", &format!("http://{}", n.gw.listen)])
        .args(["--app", KEY, "--secret", SECRET, "--max-events", "3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let seqs: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| seq(&serde_json::from_str(l).unwrap()))
        .collect();
    assert_eq!(seqs, vec![0, 1, 2]);
    assert!(wait_until(Duration::from_secs(5), || {
        n.gw.status()["notify"]["backlog"][KEY] == 0
    }));
}

#[test]
fn grpc_publish_on_the_internal_listener() {
    use portico_gateway::notify::grpc::{PublishRequest, PublishResponse, PUBLISH_PATH};
    let t = tree();
    let n = node(&t, None, &[]);
    let sse = open(&n.gw, None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let internal = n.internal;
    let call = |token: &str, msg: PublishRequest| {
        rt.block_on(async {
            let channel = tonic::transport::Channel::from_shared(format!("http://{internal}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.unwrap();
            let mut req = tonic::Request::new(msg);
            req.metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
            grpc.unary(
                req,
                http::uri::PathAndQuery::from_static(PUBLISH_PATH),
                tonic_prost::ProstCodec::<PublishRequest, PublishResponse>::default(),
            )
            .await
            .map(tonic::Response::into_inner)
        })
    };
    let msg = PublishRequest {
        app: KEY.into(),
        topic: "orders".into(),
        id: "k-9".into(),
        payload_json: r#"{"seq": 9}"#.into(),
        ttl_s: 0,
    };
    let answer = call(TOKEN, msg.clone()).unwrap();
    assert_eq!(answer.events.len(), 1);
    let e = sse.next(Duration::from_secs(10));
    assert_eq!(
        (answer.events[0].id.as_str(), seq(&e)),
        (id(&e).as_str(), 9)
    );
    assert_eq!(
        call("wrong", msg.clone()).unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    let missing = PublishRequest {
        topic: "nope".into(),
        ..msg.clone()
    };
    assert_eq!(
        call(TOKEN, missing).unwrap_err().code(),
        tonic::Code::NotFound
    );
    let bad = PublishRequest {
        payload_json: "{not json".into(),
        ..msg
    };
    assert_eq!(
        call(TOKEN, bad).unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
}

#[test]
fn an_idle_stream_gets_heartbeats() {
    let t = tree();
    let n = node(&t, None, &["--notify-heartbeat-ms", "300"]);
    let resp = signed(
        &stream_client(),
        "GET",
        &n.gw.url("/notify/v1/stream"),
        KEY,
        SECRET,
        None,
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let started = Instant::now();
    let mut beats = 0;
    while beats < 3 {
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        if line == ": heartbeat" {
            beats += 1;
        }
    }
    assert!(started.elapsed() >= Duration::from_millis(600));
}

// ---------------------------------------------------------------------------------------
// WebSocket (`/notify/v1/ws`)

type WsSocket = tungstenite::WebSocket<std::net::TcpStream>;

/// The signature headers of a `GET /notify/v1/ws` at `ts`/`nonce` (docs/PROTOCOL.md, "Signing a
/// request").
fn ws_signature(key: &str, secret: &str, ts: u64, nonce: &str) -> Vec<(&'static str, String)> {
    use portico_control::sign;
    let ts = ts.to_string();
    let sts = sign::string_to_sign("GET", "/notify/v1/ws", None, key, &ts, nonce, b"");
    vec![
        (sign::HEADER_APP_KEY, key.to_owned()),
        (sign::HEADER_TIMESTAMP, ts),
        (sign::HEADER_NONCE, nonce.to_owned()),
        (sign::HEADER_SIGNATURE, sign::sign(secret.as_bytes(), &sts)),
    ]
}

/// Opens a signed WebSocket as `key` with a real client (tungstenite); reads time out
/// after 100 ms so a test can wait in small steps.
fn ws_open_at(gw: &GatewayProcess, key: &str, secret: &str, ts: u64, nonce: &str) -> WsSocket {
    let mut req = http::Request::builder()
        .uri(format!("ws://{}/notify/v1/ws", gw.listen))
        .header("host", gw.listen.to_string())
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header(
            "sec-websocket-key",
            tungstenite::handshake::client::generate_key(),
        );
    for (k, v) in ws_signature(key, secret, ts, nonce) {
        req = req.header(k, v);
    }
    let tcp = std::net::TcpStream::connect(gw.listen).unwrap();
    let (ws, resp) = tungstenite::client(req.body(()).unwrap(), tcp).unwrap();
    assert_eq!(resp.status(), 101);
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    ws
}

fn ws_open_as(gw: &GatewayProcess, key: &str, secret: &str) -> WsSocket {
    ws_open_at(gw, key, secret, now_ms(), &nonce())
}

/// What the socket delivered next.
#[derive(Debug)]
enum WsMsg {
    Event(Value),
    /// The gateway's `{"type":"close"}` notice.
    Notice(Value),
    /// A close frame: code and reason.
    Closed(u16, String),
}

/// The next event, notice or close within `wait` (pings are answered by the client).
fn ws_recv(ws: &mut WsSocket, wait: Duration) -> Option<WsMsg> {
    use tungstenite::Message;
    let end = Instant::now() + wait;
    while Instant::now() < end {
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                return Some(if v["type"] == "close" {
                    WsMsg::Notice(v)
                } else {
                    WsMsg::Event(v)
                });
            }
            Ok(Message::Close(frame)) => {
                let (code, reason) = frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                return Some(WsMsg::Closed(code, reason));
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("websocket: {e}"),
        }
    }
    None
}

fn ws_next(ws: &mut WsSocket, wait: Duration) -> Value {
    match ws_recv(ws, wait) {
        Some(WsMsg::Event(v)) => v,
        other => panic!("expected an event, got {other:?}"),
    }
}

fn ws_send(ws: &mut WsSocket, msg: Value) {
    ws.send(tungstenite::Message::text(msg.to_string()))
        .unwrap();
}

fn ws_ack(ws: &mut WsSocket, ids: &[String]) {
    ws_send(ws, json!({"type": "ack", "ids": ids}));
}

#[test]
fn ws_a_thousand_events_arrive_in_order_and_none_twice_after_acks() {
    let redis = Redis::start();
    let t = tree();
    let n = node(&t, Some(&redis), &[]);
    let mut ws = ws_open_as(&n.gw, KEY, SECRET);
    let publisher = {
        let internal = n.internal;
        std::thread::spawn(move || {
            for i in 0..1000u64 {
                let events = publish_to(internal, Some(KEY), "orders", json!({"seq": i}));
                assert_eq!(events.len(), 1);
            }
        })
    };
    let mut got = Vec::new();
    let mut to_ack = Vec::new();
    while got.len() < 1000 {
        let e = ws_next(&mut ws, Duration::from_secs(30));
        assert_eq!(e["topic"], "orders");
        assert!(e["published_at"].as_str().unwrap().contains('T'));
        to_ack.push(id(&e));
        got.push(seq(&e));
        if to_ack.len() >= 50 {
            ws_ack(&mut ws, &to_ack);
            to_ack.clear();
        }
    }
    publisher.join().unwrap();
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
    ws_ack(&mut ws, &to_ack);
    assert!(
        ws_recv(&mut ws, Duration::from_secs(2)).is_none(),
        "nothing more after the acks"
    );
    assert!(wait_until(Duration::from_secs(5), || n
        .gw
        .metrics()
        .contains("portico_notify_acked_total 1000")));
    let status = n.gw.status();
    assert_eq!(status["notify"]["backlog"][KEY], 0);
}

#[test]
fn ws_resume_after_reconnecting_to_another_gateway() {
    let redis = Redis::start();
    let t = tree();
    let a = node(&t, Some(&redis), &[]);
    let b = node(&t, Some(&redis), &[]);
    let mut ws = ws_open_as(&a.gw, KEY, SECRET);
    for i in 0..30u64 {
        publish(&b, Some(KEY), "orders", json!({"seq": i}));
    }
    let seen: Vec<Value> = (0..30)
        .map(|_| ws_next(&mut ws, Duration::from_secs(20)))
        .collect();
    // The merchant processed the first 10 and no more; the node dies.
    let last_done = id(&seen[9]);
    drop(ws);
    drop(a);
    for i in 30..40u64 {
        publish(&b, Some(KEY), "orders", json!({"seq": i}));
    }
    let mut ws = ws_open_as(&b.gw, KEY, SECRET);
    ws_send(&mut ws, json!({"type": "resume", "after": last_done}));
    let mut after = Vec::new();
    while after.len() < 30 {
        let e = ws_next(&mut ws, Duration::from_secs(20));
        after.push(seq(&e));
        ws_ack(&mut ws, &[id(&e)]);
    }
    assert_eq!(after, (10..40).collect::<Vec<_>>());
    assert!(ws_recv(&mut ws, Duration::from_secs(1)).is_none());
    // A second resume is refused: it must come first.
    ws_send(&mut ws, json!({"type": "resume"}));
    match ws_recv(&mut ws, Duration::from_secs(5)) {
        Some(WsMsg::Closed(code, _)) => assert_eq!(code, 1008),
        other => panic!("expected a close, got {other:?}"),
    }
}

#[test]
fn ws_an_unacked_event_comes_again() {
    let t = tree();
    let n = node(&t, None, &["--notify-ack-timeout-ms", "1500"]);
    let mut ws = ws_open_as(&n.gw, KEY, SECRET);
    publish(&n, Some(KEY), "orders", json!({"seq": 0}));
    publish(&n, Some(KEY), "orders", json!({"seq": 1}));
    let first = ws_next(&mut ws, Duration::from_secs(10));
    let second = ws_next(&mut ws, Duration::from_secs(10));
    let received = Instant::now();
    assert_eq!((seq(&first), seq(&second)), (0, 1));
    ws_ack(&mut ws, &[id(&second)]);
    let again = ws_next(&mut ws, Duration::from_secs(10));
    assert_eq!(id(&again), id(&first));
    assert!(received.elapsed() >= Duration::from_millis(1000));
    ws_ack(&mut ws, &[id(&again)]);
    assert!(ws_recv(&mut ws, Duration::from_secs(3)).is_none());
    assert!(n
        .gw
        .metrics()
        .contains("portico_notify_redelivered_total 1"));
}

#[test]
fn ws_a_revoked_grant_sends_a_close_frame_within_a_second() {
    let t = tree();
    let n = node(&t, None, &[]);
    let mut ws = ws_open_as(&n.gw, KEY, SECRET);
    publish(&n, Some(KEY), "orders", json!({"seq": 1}));
    ws_next(&mut ws, Duration::from_secs(10));
    let digest = n.gw.digest();
    t.put(
        "topics/orders",
        &json!({"apps": [OTHER], "retention_s": 3600}),
    );
    assert!(n.gw.wait_for_new_config(&digest));
    let applied = Instant::now();
    match ws_recv(&mut ws, Duration::from_secs(5)) {
        Some(WsMsg::Notice(v)) => assert_eq!(v["reason"], "revoked"),
        other => panic!("expected the close notice, got {other:?}"),
    }
    match ws_recv(&mut ws, Duration::from_secs(5)) {
        Some(WsMsg::Closed(code, reason)) => assert_eq!((code, reason.as_str()), (4003, "revoked")),
        other => panic!("expected a close frame, got {other:?}"),
    }
    assert!(
        applied.elapsed() < Duration::from_secs(1),
        "{:?}",
        applied.elapsed()
    );
}

/// Sends `head` (a request head, CRLF-terminated lines) on a new connection; the status and
/// the parsed JSON body of the answer.
fn raw_exchange(gw: &GatewayProcess, head: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(gw.listen).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(head.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tcp.read(&mut chunk).unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((h, body)) = text.split_once("\r\n\r\n") {
            let len = h
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if h.starts_with("HTTP/1.1 101") || body.len() >= len {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn ws_head(gw: &GatewayProcess, signature: &[(&str, String)], extra: &[(&str, &str)]) -> String {
    let mut head = format!("GET /notify/v1/ws HTTP/1.1\r\nHost: {}\r\n", gw.listen);
    for (k, v) in signature {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

const UPGRADE: [(&str, &str); 4] = [
    ("Connection", "Upgrade"),
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
];

#[test]
fn ws_openings_unsigned_replayed_or_malformed_are_refused_before_the_upgrade() {
    let t = tree();
    let n = node(&t, None, &[]);
    // Unsigned: 401 in the envelope, no upgrade.
    let (status, v) = raw_exchange(&n.gw, &ws_head(&n.gw, &[], &UPGRADE));
    assert_eq!(
        (status, v["code"].as_str()),
        (401, Some("SIGNATURE_MISSING"))
    );
    assert!(v["request_id"].is_string());
    // The same signed opening twice: the second is a replay.
    let (ts, once) = (now_ms(), nonce());
    let sig = ws_signature(KEY, SECRET, ts, &once);
    let first = ws_open_at(&n.gw, KEY, SECRET, ts, &once);
    let (status, v) = raw_exchange(&n.gw, &ws_head(&n.gw, &sig, &UPGRADE));
    assert_eq!((status, v["code"].as_str()), (401, Some("NONCE_REPLAYED")));
    drop(first);
    // Signed, but not a proper handshake: 400.
    let fresh = || ws_signature(KEY, SECRET, now_ms(), &nonce());
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![UPGRADE[0], UPGRADE[1], UPGRADE[3]],
        vec![
            UPGRADE[0],
            UPGRADE[1],
            ("Sec-WebSocket-Version", "8"),
            UPGRADE[3],
        ],
        vec![UPGRADE[0], UPGRADE[1], UPGRADE[2]],
        vec![
            UPGRADE[0],
            UPGRADE[1],
            UPGRADE[2],
            ("Sec-WebSocket-Key", "c2hvcnQ="),
        ],
    ];
    for extra in cases {
        let (status, v) = raw_exchange(&n.gw, &ws_head(&n.gw, &fresh(), &extra));
        assert_eq!(
            (status, v["code"].as_str()),
            (400, Some("BAD_REQUEST")),
            "{extra:?}: {v}"
        );
    }
    // A proper one: 101 with the RFC 6455 accept value.
    let (status, _) = raw_exchange(&n.gw, &ws_head(&n.gw, &fresh(), &UPGRADE));
    assert_eq!(status, 101);
}

#[test]
fn ws_protocol_errors_close_with_their_codes_and_pings_are_answered() {
    use portico_gateway::notify::wsframe;
    use std::io::Write;
    let t = tree();
    let n = node(&t, None, &[]);
    let mask = [1, 2, 3, 4];
    // A ping is answered with a pong carrying its payload (tungstenite queues it).
    let mut ws = ws_open_as(&n.gw, KEY, SECRET);
    ws.send(tungstenite::Message::Ping(b"hello".to_vec().into()))
        .unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    let mut ponged = false;
    while Instant::now() < end && !ponged {
        match ws.read() {
            Ok(tungstenite::Message::Pong(p)) => {
                assert_eq!(&p[..], b"hello");
                ponged = true;
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(ponged);
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (wsframe::encode(wsframe::OP_TEXT, b"{}"), 1002),
        (
            wsframe::encode_masked(true, wsframe::OP_BINARY, b"x", mask),
            1003,
        ),
        // Only the head of a 70 KiB frame: its length alone is refused.
        (
            wsframe::encode_masked(true, wsframe::OP_TEXT, &vec![b' '; 70 * 1024], mask)[..14]
                .to_vec(),
            1009,
        ),
        (
            wsframe::encode_masked(true, wsframe::OP_TEXT, b"not json", mask),
            1008,
        ),
    ];
    for (frame, code) in cases {
        let mut ws = ws_open_as(&n.gw, KEY, SECRET);
        ws.get_mut().write_all(&frame).unwrap();
        ws.get_mut().flush().unwrap();
        match ws_recv(&mut ws, Duration::from_secs(5)) {
            Some(WsMsg::Closed(c, _)) => assert_eq!(c, code),
            other => panic!("expected close {code}, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Publish rate and de-duplication

fn publish_body(internal: SocketAddr, body: &Value) -> reqwest::blocking::Response {
    client()
        .post(format!("http://{internal}/internal/v1/notifications"))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .unwrap()
}

#[test]
fn publishing_faster_than_the_app_rate_is_refused_with_429() {
    let t = tree();
    let n = node(
        &t,
        None,
        &["--notify-publish-rate", "1", "--notify-publish-burst", "3"],
    );
    let body = json!({"app": KEY, "topic": "orders", "payload": {}});
    let started = Instant::now();
    let mut accepted = 0u64;
    let refused = loop {
        let r = publish_body(n.internal, &body);
        if r.status() == 429 {
            break r;
        }
        assert_eq!(r.status(), 200);
        accepted += 1;
        assert!(accepted < 50, "never limited");
    };
    // The burst, plus what the rate refilled meanwhile.
    let refilled = started.elapsed().as_secs() + 1;
    assert!(
        (3..=3 + refilled).contains(&accepted),
        "{accepted} in {:?}",
        started.elapsed()
    );
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    let (status, code, v) = code_of(refused);
    assert_eq!((status, code.as_str()), (429, "RATE_LIMITED"), "{v}");
    assert!(v["request_id"].is_string());
    // Per app: another app still publishes.
    let other = publish_body(
        n.internal,
        &json!({"app": OTHER, "topic": "orders", "payload": {}}),
    );
    assert_eq!(other.status(), 200);
    assert!(n.gw.metrics().contains(&format!(
        "portico_notify_publish_limited_total{{app=\"{KEY}\"}} 1"
    )));
}

#[test]
fn the_same_publisher_id_on_two_gateways_is_stored_and_delivered_once() {
    let redis = Redis::start();
    let t = tree();
    let a = node(&t, Some(&redis), &[]);
    let b = node(&t, Some(&redis), &[]);
    let paid = json!({"app": KEY, "topic": "orders", "id": "order-7-paid", "payload": {"seq": 7}});
    let first: Value = publish_body(a.internal, &paid).json().unwrap();
    let again: Value = publish_body(b.internal, &paid).json().unwrap();
    assert_eq!(first["events"][0]["duplicate"], Value::Null, "{first}");
    assert_eq!(again["events"][0]["duplicate"], true, "{again}");
    assert_eq!(again["events"][0]["id"], first["events"][0]["id"]);
    // Another id is another event.
    let shipped =
        json!({"app": KEY, "topic": "orders", "id": "order-7-shipped", "payload": {"seq": 8}});
    let third: Value = publish_body(b.internal, &shipped).json().unwrap();
    assert_ne!(third["events"][0]["id"], first["events"][0]["id"]);
    let sse = open(&a.gw, None);
    let e = sse.next(Duration::from_secs(10));
    assert_eq!(
        (seq(&e), id(&e)),
        (7, first["events"][0]["id"].as_str().unwrap().to_owned())
    );
    assert_eq!(seq(&sse.next(Duration::from_secs(10))), 8);
    assert!(
        sse.quiet(Duration::from_secs(1)),
        "the duplicate is not delivered"
    );
    assert!(b.gw.metrics().contains("portico_notify_duplicates_total 1"));
    // Without Redis, the same within one node.
    let m = node(&t, None, &[]);
    let one: Value = publish_body(m.internal, &paid).json().unwrap();
    let two: Value = publish_body(m.internal, &paid).json().unwrap();
    assert_eq!(two["events"][0]["duplicate"], true);
    assert_eq!(two["events"][0]["id"], one["events"][0]["id"]);
    assert_eq!(m.gw.status()["notify"]["backlog"][KEY], 1);
}

#[test]
fn ws_pings_keep_a_live_client_and_cut_a_silent_one() {
    let t = tree();
    let n = node(&t, None, &["--notify-heartbeat-ms", "200"]);
    // A client that reads answers the pings (tungstenite pongs as it reads): kept.
    let mut live = ws_open_as(&n.gw, KEY, SECRET);
    assert!(ws_recv(&mut live, Duration::from_millis(1500)).is_none());
    drop(live);
    // A client that reads nothing sends no pong: closed as no_pong. Its socket is read raw
    // (a WebSocket library would answer the pings it reads, too late, on a closed socket).
    let silent = ws_open_as(&n.gw, KEY, SECRET);
    let mut tcp = silent.into_inner();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut bytes = Vec::new();
    let _ = std::io::Read::read_to_end(&mut tcp, &mut bytes);
    // Server frames are unmasked: opcode, length (7, 16 or 64 bits), payload.
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 2 <= bytes.len() {
        let op = bytes[at] & 0x0F;
        let (len, head) = match bytes[at + 1] & 0x7F {
            126 => (
                usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]])),
                4,
            ),
            127 => panic!("no frame here is that long"),
            n => (usize::from(n), 2),
        };
        frames.push((op, bytes[at + head..at + head + len].to_vec()));
        at += head + len;
    }
    let pings = frames.iter().filter(|(op, _)| *op == 0x9).count();
    assert!(pings >= 2, "{frames:?}");
    let notice = frames
        .iter()
        .find(|(op, _)| *op == 0x1)
        .expect("a close notice");
    let v: Value = serde_json::from_slice(&notice.1).unwrap();
    assert_eq!(v["reason"], "no_pong");
    let close = frames
        .iter()
        .find(|(op, _)| *op == 0x8)
        .expect("a close frame");
    assert_eq!(u16::from_be_bytes([close.1[0], close.1[1]]), 4008);
}
