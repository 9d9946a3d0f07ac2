//! Notifications against a hostile or careless Redis, and the transports' own abuse
//! (docs/SECURITY.md, "A hostile Redis", "Notifications"): a real `redis-server` with a
//! password, real gateways, entries forged with `XADD` straight into a victim's stream, a
//! callback receiver, a raw WebSocket ping flood.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_testkit::Redis;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TOKEN: &str = "publisher-token-0123456789";
const PASSWORD: &str = "redis-pass-0123456789abcdef";
const WS_APP: &str = "merchant-ws";
const WS_SECRET: &str = "ws-secret-value";
const CB_APP: &str = "merchant-cb";
const CB_SECRET: &str = "callback-secret-1";

fn private_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// merchant-1 (SSE), merchant-ws (WebSocket) and, with a receiver port, merchant-cb
/// (callbacks), all granted `orders`.
fn tree(callback_port: Option<u16>) -> ConfigTree {
    let t = ConfigTree::new();
    t.put(
        "apps/merchant-1",
        &json!({"secret": SECRET, "status": "active", "apis": []}),
    );
    t.put(
        &format!("apps/{WS_APP}"),
        &json!({"secret": WS_SECRET, "status": "active", "apis": []}),
    );
    let mut apps = vec![KEY, WS_APP];
    if let Some(port) = callback_port {
        t.put(
            &format!("apps/{CB_APP}"),
            &json!({"secret": CB_SECRET, "status": "active", "apis": [],
                    "callback_url": format!("http://127.0.0.1:{port}/notify/v1/ack")}),
        );
        apps.push(CB_APP);
    }
    t.put(
        "topics/orders",
        &json!({"owner": "order-team", "apps": apps, "retention_s": 3600}),
    );
    t
}

struct Node {
    gw: GatewayProcess,
    internal: SocketAddr,
}

/// A gateway on `tree` with Redis (the password from a 0600 file) and the notification key.
fn node(tree: &ConfigTree, redis: &Redis) -> Node {
    let internal: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let token_file = private_file(tree.path(), "publish.token", TOKEN);
    let key_file = private_file(
        tree.path(),
        "notify.key",
        "notify-key-0123456789abcdef0123456789abcdef",
    );
    let args: Vec<String> = vec![
        "--config-dir".into(),
        tree.path().display().to_string(),
        "--internal-listen".into(),
        internal.to_string(),
        "--publish-token-file".into(),
        token_file,
        "--redis".into(),
        redis.url(),
        "--redis-password-file".into(),
        redis.password_file().display().to_string(),
        "--notify-key-file".into(),
        key_file,
    ];
    let gw = GatewayProcess::start_args(args);
    assert!(
        wait_until(Duration::from_secs(10), || gw.status()["redis"]["state"]
            == "ok"),
        "redis never up: {}",
        gw.status()["redis"]
    );
    Node { gw, internal }
}

fn publish(n: &Node, app: &str, payload: Value) -> String {
    let r = client()
        .post(format!("http://{}/internal/v1/notifications", n.internal))
        .bearer_auth(TOKEN)
        .json(&json!({"app": app, "topic": "orders", "payload": payload}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    v["events"][0]["id"].as_str().unwrap().to_owned()
}

fn forged_total(gw: &GatewayProcess) -> u64 {
    gw.metrics()
        .lines()
        .find_map(|l| l.strip_prefix("portico_notify_forged_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// An SSE stream's events (`data:` of `event: notification`), read on a thread.
fn sse(gw: &GatewayProcess) -> mpsc::Receiver<Value> {
    let client = reqwest::blocking::Client::builder()
        .timeout(None::<Duration>)
        .no_proxy()
        .build()
        .unwrap();
    let resp = signed(
        &client,
        "GET",
        &gw.url("/notify/v1/stream"),
        KEY,
        SECRET,
        None,
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 200);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut event = String::new();
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { return };
            if let Some(e) = line.strip_prefix("event: ") {
                event = e.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ") {
                if event == "notification" && tx.send(serde_json::from_str(d).unwrap()).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// A raw signed WebSocket to `/notify/v1/ws` (after the 101), as a plain TCP stream.
fn ws_raw(gw: &GatewayProcess, key: &str, secret: &str) -> std::net::TcpStream {
    use portico_control::sign;
    let ts = now_ms().to_string();
    let nonce = nonce();
    let sts = sign::string_to_sign("GET", "/notify/v1/ws", None, key, &ts, &nonce, b"");
    let head = format!(
        "GET /notify/v1/ws HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         {}: {key}\r\n{}: {ts}\r\n{}: {nonce}\r\n{}: {}\r\n\r\n",
        gw.listen,
        sign::HEADER_APP_KEY,
        sign::HEADER_TIMESTAMP,
        sign::HEADER_NONCE,
        sign::HEADER_SIGNATURE,
        sign::sign(secret.as_bytes(), &sts)
    );
    let mut tcp = std::net::TcpStream::connect(gw.listen).unwrap();
    tcp.write_all(head.as_bytes()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The 101's head, byte by byte (frames may follow it at once).
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(tcp.read(&mut b).unwrap(), 1, "closed before the 101");
        got.push(b[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    tcp
}

/// Server frames (unmasked) in `bytes`: opcode and payload.
fn frames(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 2 <= bytes.len() {
        let op = bytes[at] & 0x0F;
        let (len, head) = match bytes[at + 1] & 0x7F {
            126 if at + 4 <= bytes.len() => (
                usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]])),
                4,
            ),
            126 | 127 => break,
            n => (usize::from(n), 2),
        };
        if at + head + len > bytes.len() {
            break;
        }
        out.push((op, bytes[at + head..at + head + len].to_vec()));
        at += head + len;
    }
    out
}

/// Reads `tcp` until `done` holds for the frames read, or `wait` passes.
fn read_frames(
    tcp: &mut std::net::TcpStream,
    wait: Duration,
    done: impl Fn(&[(u8, Vec<u8>)]) -> bool,
) -> Vec<(u8, Vec<u8>)> {
    tcp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let end = Instant::now() + wait;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while Instant::now() < end {
        match tcp.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
        if done(&frames(&bytes)) {
            break;
        }
    }
    frames(&bytes)
}

fn texts(frames: &[(u8, Vec<u8>)]) -> Vec<Value> {
    frames
        .iter()
        .filter(|(op, _)| *op == 0x1)
        .map(|(_, p)| serde_json::from_slice(p).unwrap())
        .collect()
}

/// One callback the receiver took: its request target, headers and body.
#[derive(Debug, Clone)]
struct Hook {
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Hook {
    fn header(&self, name: &str) -> String {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// A callback receiver on a free port answering 204 to everything.
fn receiver() -> (u16, mpsc::Receiver<Hook>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let hook = loop {
                let n = conn.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..i]).to_string();
                let mut lines = head.lines();
                let target = lines
                    .next()
                    .and_then(|l| l.split(' ').nth(1))
                    .unwrap_or_default()
                    .to_owned();
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        Some((k.trim().to_owned(), v.trim().to_owned()))
                    })
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = buf[i + 4..].to_vec();
                while body.len() < len {
                    let n = conn.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
                break Some(Hook {
                    target,
                    headers,
                    body,
                });
            };
            let _ = conn.write_all(
                b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
            if let Some(h) = hook {
                let _ = tx.send(h);
            }
        }
    });
    (port, rx)
}

fn stream(app: &str) -> String {
    format!("portico:notify:{{{app}}}")
}

/// The fields of the stream entry `id` of `app` (XRANGE), as `[field, value, ...]`.
fn entry_fields(redis: &Redis, app: &str, id: &str) -> Vec<String> {
    let reply = redis
        .command_args(&["XRANGE", &stream(app), id, id])
        .unwrap();
    // RESP: *1 *2 $id *2n ($len value)...: every bulk string after the id.
    let mut lines = reply.split("\r\n");
    let mut out = Vec::new();
    while let Some(l) = lines.next() {
        if l.starts_with('$') {
            out.push(lines.next().unwrap().to_owned());
        }
    }
    assert_eq!(out.first().map(String::as_str), Some(id), "{reply}");
    out.remove(0);
    out
}

fn xadd(redis: &Redis, app: &str, id: &str, fields: &[String]) {
    let key = stream(app);
    let mut args: Vec<&str> = vec!["XADD", &key, id];
    args.extend(fields.iter().map(String::as_str));
    let r = redis.command_args(&args).unwrap();
    assert!(r.starts_with('$'), "XADD: {r}");
}

/// A forged entry: what a hostile Redis (or anyone with its password) writes.
fn forged(mac: Option<&str>) -> Vec<String> {
    let now = now_ms().to_string();
    let mut f: Vec<String> = [
        "t",
        "orders",
        "p",
        r#"{"state":"refunded","refund_to":"IBAN-X"}"#,
        "at",
        &now,
        "x",
        "0",
        "r",
        "99999999999999",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(m) = mac {
        f.extend(["m".to_owned(), m.to_owned()]);
    }
    f
}

#[test]
fn redis_with_a_password_refuses_a_gateway_without_it_and_serves_one_with_it() {
    let redis = Redis::start_with_password(PASSWORD);
    // The server wants the password (the test helper authenticates itself).
    assert!(redis
        .command_as(None, "PING\r\n")
        .unwrap()
        .starts_with("-NOAUTH"));
    let t = tree(None);
    // Without the password: the gateway runs (Redis is optional) but says why Redis is down.
    let without = GatewayProcess::start(t.path(), &["--redis", &redis.url()]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            without.status()["redis"]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("NOAUTH") || e.contains("uthentication"))
        }),
        "{}",
        without.status()["redis"]
    );
    assert_eq!(without.status()["redis"]["state"], "down");
    assert!(without.metrics().contains("portico_redis_up 0"));
    // A wrong password: the same.
    let wrong = private_file(t.path(), "wrong.pw", "not-the-password");
    let bad = GatewayProcess::start(
        t.path(),
        &["--redis", &redis.url(), "--redis-password-file", &wrong],
    );
    assert!(wait_until(Duration::from_secs(10), || {
        bad.status()["redis"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("WRONGPASS") || e.contains("uthentication"))
    }));
    // A password file others may read is refused at start, clearly.
    let loose = t.path().join("loose.pw");
    std::fs::write(&loose, PASSWORD).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portico-gateway"))
        .args(["--config-dir", &t.path().display().to_string()])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--internal-listen", "off", "--redis", &redis.url()])
        .arg("--redis-password-file")
        .arg(&loose)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("readable by others"), "{stderr}");
    // With the password: Redis is up, and notifications flow through it.
    assert_eq!(without.status()["notify"]["notify_key"], "ephemeral");
    let n = node(&t, &redis);
    assert_eq!(n.gw.status()["notify"]["notify_key"], "file");
    let events = sse(&n.gw);
    let id = publish(&n, KEY, json!({"order": 1}));
    let e = events.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(e["id"], id.as_str());
    assert_eq!(e["payload"]["order"], 1);
    assert!(redis
        .command_args(&["XLEN", &stream(KEY)])
        .unwrap()
        .starts_with(":1"));
}

#[test]
fn forged_and_replayed_stream_entries_are_never_delivered_nor_signed() {
    let redis = Redis::start_with_password(PASSWORD);
    let (port, hooks) = receiver();
    let t = tree(Some(port));
    let n = node(&t, &redis);

    // SSE: a genuine event, delivered and acknowledged.
    let events = sse(&n.gw);
    let genuine = publish(&n, KEY, json!({"order": 1, "state": "paid"}));
    let first = events.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(first["id"], genuine.as_str());
    let acked = signed(
        &client(),
        "POST",
        &n.gw.url("/notify/v1/ack"),
        KEY,
        SECRET,
        Some(json!({"ids": [genuine]}).to_string().as_bytes()),
    )
    .send()
    .unwrap();
    assert_eq!(acked.status(), 200);
    let valid_fields = entry_fields(&redis, KEY, &genuine);
    assert!(valid_fields.iter().any(|f| f == "m"), "{valid_fields:?}");

    // Forged straight into the victim's stream: no MAC, a wrong MAC, the genuine entry's
    // MAC on a new id (a replay), and another app's genuine entry moved into this stream.
    xadd(&redis, KEY, "*", &forged(None));
    xadd(&redis, KEY, "*", &forged(Some(&"0".repeat(64))));
    xadd(&redis, KEY, "*", &valid_fields);
    let other = publish(&n, WS_APP, json!({"order": 9}));
    let moved = entry_fields(&redis, WS_APP, &other);
    xadd(&redis, KEY, "*", &moved);
    // Each is read, refused and counted (streams poll at least once a second).
    assert!(
        wait_until(Duration::from_secs(5), || forged_total(&n.gw) >= 4),
        "forged: {}",
        forged_total(&n.gw)
    );
    // A replay under the genuine id itself: the stream deleted and written again.
    assert!(redis
        .command_args(&["DEL", &stream(KEY)])
        .unwrap()
        .starts_with(":1"));
    xadd(&redis, KEY, &genuine, &valid_fields);
    // A genuine event after them all is the next thing the merchant sees.
    let next = publish(&n, KEY, json!({"order": 2, "state": "shipped"}));
    let got = events.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got["id"], next.as_str(), "got {got}");
    assert_eq!(got["payload"]["order"], 2);
    assert!(
        events.recv_timeout(Duration::from_secs(2)).is_err(),
        "nothing forged follows"
    );
    assert!(
        wait_until(Duration::from_secs(5), || forged_total(&n.gw) >= 5),
        "forged: {}",
        forged_total(&n.gw)
    );

    // WebSocket: a forged entry, then a genuine one; only the genuine one arrives.
    let mut ws = ws_raw(&n.gw, WS_APP, WS_SECRET);
    // The earlier genuine event of merchant-ws arrives first.
    let before = forged_total(&n.gw);
    xadd(&redis, WS_APP, "*", &forged(None));
    let ws_next = publish(&n, WS_APP, json!({"order": 10}));
    let got = read_frames(&mut ws, Duration::from_secs(10), |f| {
        texts(f).iter().any(|v| v["id"] == ws_next.as_str())
    });
    let ids: Vec<Value> = texts(&got).iter().map(|v| v["id"].clone()).collect();
    assert_eq!(ids, vec![json!(other), json!(ws_next)], "{got:?}");
    assert!(texts(&got)
        .iter()
        .all(|v| !v.to_string().contains("IBAN-X")));
    assert!(wait_until(Duration::from_secs(5), || forged_total(&n.gw) > before));

    // Callbacks: a forged entry in the callback app's stream is never POSTed (signed with
    // the app's secret); the genuine event after it is.
    let before = forged_total(&n.gw);
    xadd(&redis, CB_APP, "*", &forged(None));
    xadd(&redis, CB_APP, "*", &forged(Some(&"ab".repeat(32))));
    let cb_id = publish(&n, CB_APP, json!({"order": 20}));
    let hook = hooks.recv_timeout(Duration::from_secs(15)).unwrap();
    let body: Value = serde_json::from_slice(&hook.body).unwrap();
    assert_eq!(body["id"], cb_id.as_str(), "{body}");
    assert!(hooks.recv_timeout(Duration::from_secs(2)).is_err());
    assert!(wait_until(Duration::from_secs(5), || forged_total(&n.gw) >= before + 2));

    // The callback is signed in its own domain: presented to the gateway as a request
    // (its callback_url is the gateway's own ack path), it is refused.
    let (path, query) = match hook.target.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (hook.target.clone(), None),
    };
    let sts = portico_gateway::notify::callback::callback_string_to_sign(
        &path,
        query.as_deref(),
        &hook.header("x-portico-appkey"),
        &hook.header("x-portico-timestamp"),
        &hook.header("x-portico-nonce"),
        &hook.body,
    );
    assert!(portico_control::sign::verify(
        CB_SECRET.as_bytes(),
        &sts,
        &hook.header("x-portico-signature")
    ));
    let mut replay = client().post(n.gw.url(&hook.target));
    for name in [
        "x-portico-appkey",
        "x-portico-timestamp",
        "x-portico-nonce",
        "x-portico-signature",
        "content-type",
    ] {
        replay = replay.header(name, hook.header(name));
    }
    let r = replay.body(hook.body.clone()).send().unwrap();
    let (status, code, _) = code_of(r);
    assert_eq!(status, 401, "{code}");
}

#[test]
fn a_websocket_ping_flood_gets_few_pongs_and_a_1008() {
    use portico_gateway::notify::wsframe;
    let redis = Redis::start_with_password(PASSWORD);
    let t = tree(None);
    let n = node(&t, &redis);
    // Pings at once, well within the burst: answered with one pong, for the latest.
    let mut ws = ws_raw(&n.gw, WS_APP, WS_SECRET);
    let mut burst = Vec::new();
    for i in 0..20u8 {
        burst.extend(wsframe::encode_masked(
            true,
            wsframe::OP_PING,
            &[i],
            [1, 2, 3, 4],
        ));
    }
    ws.write_all(&burst).unwrap();
    let got = read_frames(&mut ws, Duration::from_millis(1500), |_| false);
    let pongs: Vec<&Vec<u8>> = got
        .iter()
        .filter(|(op, _)| *op == 0xA)
        .map(|(_, p)| p)
        .collect();
    assert!(!pongs.is_empty() && pongs.len() <= 2, "{got:?}");
    assert_eq!(pongs.last().unwrap().as_slice(), &[19]);
    drop(ws);
    // A flood: up to 10,000 pings, 100 per write, as fast as they can be written, reading
    // what comes back in between. A pong or two, then 1008.
    let mut ws = ws_raw(&n.gw, WS_APP, WS_SECRET);
    let ping = wsframe::encode_masked(true, wsframe::OP_PING, b"flood", [9, 9, 9, 9]);
    let hundred: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 100)
        .collect();
    let started = Instant::now();
    let mut bytes = Vec::new();
    let mut sent = 0;
    ws.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let closed = |b: &[u8]| frames(b).iter().any(|(op, _)| *op == 0x8);
    while sent < 10_000 && !closed(&bytes) {
        if ws.write_all(&hundred).is_err() {
            break;
        }
        sent += 100;
        let mut chunk = [0u8; 16 * 1024];
        while let Ok(n) = ws.read(&mut chunk) {
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&chunk[..n]);
        }
    }
    let mut got = frames(&bytes);
    if !closed(&bytes) {
        got.extend(read_frames(&mut ws, Duration::from_secs(10), |f| {
            f.iter().any(|(op, _)| *op == 0x8)
        }));
    }
    let took = started.elapsed();
    let pongs = got.iter().filter(|(op, _)| *op == 0xA).count();
    let close = got
        .iter()
        .find(|(op, _)| *op == 0x8)
        .expect("a close frame");
    assert_eq!(u16::from_be_bytes([close.1[0], close.1[1]]), 1008);
    assert!(pongs <= 2, "{pongs} pongs");
    assert!(sent <= 1000, "{sent} pings sent before the close");
    eprintln!("ping flood: {sent} pings written, {pongs} pongs, closed 1008 after {took:?}");
}

#[test]
fn rediss_with_a_private_ca_and_the_password_from_the_environment_carries_notifications() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Portico Redis test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "redis.test");
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
    private_file(dir.path(), "key.pem", &key.serialize_pem());
    let redis = Redis::start_tls(dir.path(), PASSWORD);
    let port = redis.port();
    // The gateway: rediss://, the test CA, the password from PORTICO_REDIS_PASSWORD.
    let t = tree(None);
    let token = private_file(t.path(), "publish.token", TOKEN);
    let key_file = private_file(
        t.path(),
        "notify.key",
        "notify-key-0123456789abcdef0123456789abcdef",
    );
    let internal = free_port();
    let logs = tempfile::tempdir().unwrap();
    let gw = portico_testkit::procs::start_gateway("gateway", logs.path(), |cmd| {
        cmd.args(["--config-dir", &t.path().display().to_string()])
            .args(["--internal-listen", &format!("127.0.0.1:{internal}")])
            .args([
                "--publish-token-file",
                &token,
                "--notify-key-file",
                &key_file,
            ])
            .args(["--redis", &redis.url()])
            .arg("--redis-ca-file")
            .arg(&ca_file)
            .args(["--threads", "2"])
            .env("PORTICO_REDIS_PASSWORD", PASSWORD)
            .env("PORTICO_LOG", "warn,portico_gateway=info");
    });
    let admin = gw.admin.clone();
    let status = || -> Value {
        client()
            .get(format!("{admin}/status"))
            .send()
            .ok()
            .and_then(|r| r.json().ok())
            .unwrap_or(Value::Null)
    };
    let up = wait_until(Duration::from_secs(20), || {
        status()["redis"]["state"] == "ok"
    });
    let seen = status();
    let published = client()
        .post(format!(
            "http://127.0.0.1:{internal}/internal/v1/notifications"
        ))
        .bearer_auth(TOKEN)
        .json(&json!({"app": KEY, "topic": "orders", "payload": {"over": "tls"}}))
        .send()
        .map(|r| r.status().as_u16());
    // The event is in Redis: the backlog /status reads from it (XINFO, over TLS) counts it.
    let stored = wait_until(Duration::from_secs(10), || {
        status()["notify"]["backlog"][KEY] == 1
    });
    drop(gw);
    // Without the test CA the server's certificate is not trusted: Redis stays down.
    let untrusted = GatewayProcess::start(
        t.path(),
        &["--redis", &format!("rediss://127.0.0.1:{port}")],
    );
    let refused = wait_until(Duration::from_secs(10), || {
        untrusted.status()["redis"]["last_error"].is_string()
    });
    let untrusted_status = untrusted.status()["redis"].clone();
    drop(untrusted);
    assert!(refused, "{untrusted_status}");
    assert_eq!(untrusted_status["state"], "down");
    let error = untrusted_status["last_error"]
        .as_str()
        .unwrap()
        .to_lowercase();
    assert!(
        error.contains("certificate") || error.contains("issuer"),
        "{error}"
    );
    assert!(up, "redis over TLS never up: {}", seen["redis"]);
    assert_eq!(seen["redis"]["url"], format!("rediss://127.0.0.1:{port}"));
    assert_eq!(published.unwrap(), 200);
    assert!(stored, "{seen}");
}
