//! The console's Notifications page end to end, in a real headless Chromium: a locked
//! ZooKeeper, a gateway in ZooKeeper mode with an internal listener and a publisher token, and
//! the registry binary given the same token and serving a fresh build of `admin-ui/`, all on
//! free 127.0.0.1 ports.
//!
//! Two apps exist: `merchant-e2e`, whose merchant (this test) holds a signed Server-Sent Events
//! stream (docs/PROTOCOL.md, "Notifications"; the opening request signed as its "Signing a request"
//! says), and `merchant-cb`, whose `callback_url` points at a closed port (the gateway tries once:
//! `--notify-callback-attempts 1`). The browser (`admin-ui/e2e/notifications.e2e.mjs`) creates the
//! topic granted to both, sees `merchant-e2e` connected, presses "Send test event" and shows the
//! event id; sends one to `merchant-cb` and sees its dead letter. Afterwards this test checks
//! independently: the event the stream received has the id the page showed, the topic and the
//! payload; the registry's `GET /notifications` agrees; the audit log has the test sends under the
//! operator's name. Screenshots go to `target/console-screenshots/` (or `$PORTICO_SCREENSHOT_DIR`),
//! prefixed `notifications-`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::browser::{build_console, run_script, screenshot_dir};
use crate::common::procs::{admin_call as call, http, spawn_gateway, spawn_registry, RegistryProc};
use crate::common::TOKEN;
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

const NODE_ID: &str = "gw-notify-e2e";
const TOPIC: &str = "console-orders";
const APP: &str = "merchant-e2e";
const SECRET: &str = "merchant-e2e-secret";
const CALLBACK_APP: &str = "merchant-cb";
const PUBLISH_TOKEN: &str = "e2e-publisher-token-0123456789";

/// Opens the signed SSE stream of `APP` on `gateway` and forwards every `notification`
/// event's data; `Err` with the answer when the gateway refuses it.
fn open_stream(gateway: &str) -> Result<mpsc::Receiver<Value>, String> {
    let path = "/notify/v1/stream";
    let nonce = format!("e2e-{:016x}", fastrand::u64(..));
    let signed = portico_control::sign::sign_request(
        SECRET.as_bytes(),
        "GET",
        path,
        None,
        APP,
        portico_control::clock::now_ms(),
        &nonce,
        b"",
    );
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(None::<Duration>)
        .build()
        .unwrap();
    let mut req = client.get(format!("{gateway}{path}"));
    for (k, v) in signed.pairs() {
        req = req.header(k, v);
    }
    let resp = req.send().map_err(|e| e.to_string())?;
    if resp.status() != 200 {
        return Err(format!(
            "{}: {}",
            resp.status(),
            resp.text().unwrap_or_default()
        ));
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut event, mut data) = (String::new(), String::new());
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { return };
            if line.is_empty() {
                if event == "notification"
                    && tx
                        .send(serde_json::from_str(&data).unwrap_or(Value::Null))
                        .is_err()
                {
                    return;
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
    Ok(rx)
}

#[test]
fn console_notifications_page_sends_a_test_event_to_a_connected_app_in_chromium() {
    let work = tempfile::Builder::new()
        .prefix("portico-notify-e2e-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);
    let token_file = work.path().join("publish.token");
    std::fs::write(&token_file, format!("{PUBLISH_TOKEN}\n")).unwrap();

    let zk = ZooKeeper::on_shared_locked();
    let RegistryProc {
        proc: mut registry,
        base,
    } = spawn_registry(&zk, "registry", &logs, |cmd| {
        cmd.env("PORTICO_CONSOLE_DIR", &console_dir)
            .arg("--publish-token-file")
            .arg(&token_file);
    });

    // The apps, as an operator would create them. Nobody listens on the callback's port.
    let closed = free_port();
    for app in [
        json!({"app_key": APP, "secret": SECRET}),
        json!({"app_key": CALLBACK_APP, "callback_url": format!("http://127.0.0.1:{closed}/callback")}),
    ] {
        let (status, reply) = call(&base, reqwest::Method::POST, "/apps", Some(app));
        assert_eq!(status, 201, "{reply:#}");
    }

    let internal = format!("127.0.0.1:{}", free_port());
    let gateway = spawn_gateway(&zk, NODE_ID, &logs, |cmd| {
        cmd.args(["--internal-listen", &internal])
            .arg("--publish-token-file")
            .arg(&token_file)
            .args(["--notify-callback-attempts", "1"])
            .args(["--notify-callback-timeout-ms", "2000"]);
    });
    let mut gw_proc = gateway.proc;
    // The registration carries the internal listener, and the registry reads the node.
    let registered = wait_for(Duration::from_secs(60), || {
        let (_, nodes) = call(&base, reqwest::Method::GET, "/nodes", None);
        nodes["nodes"].as_array().is_some_and(|n| {
            n.iter()
                .any(|n| n["node_id"] == NODE_ID && n["internal_addr"] == internal.as_str())
        })
    });
    gw_proc.assert_alive();
    assert!(
        registered,
        "the gateway never registered its internal listener:\n{}",
        gw_proc.tail()
    );

    // The merchant connects as soon as the gateway has the topic the page creates.
    let status_url = format!("{}/status", gateway.admin);
    let gw_url = gateway.url.clone();
    let merchant = std::thread::spawn(move || -> Result<mpsc::Receiver<Value>, String> {
        let has_topic = wait_for(Duration::from_secs(150), || {
            http()
                .get(&status_url)
                .send()
                .and_then(|r| r.json::<Value>())
                .is_ok_and(|s| {
                    s["notify"]["topics"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t == TOPIC))
                })
        });
        if !has_topic {
            return Err(format!("the gateway never got the topic {TOPIC}"));
        }
        open_stream(&gw_url)
    });

    let id_file = work.path().join("event-id");
    let env = BTreeMap::from([
        ("CONSOLE_URL", base.clone()),
        ("ADMIN_TOKEN", TOKEN.to_owned()),
        ("TOPIC", TOPIC.to_owned()),
        ("APP", APP.to_owned()),
        ("CALLBACK_APP", CALLBACK_APP.to_owned()),
        ("EVENT_ID_FILE", id_file.display().to_string()),
    ]);
    let passed = run_script(
        "notifications.e2e.mjs",
        &chromium,
        &env,
        Duration::from_secs(240),
    );
    registry.assert_alive();
    gw_proc.assert_alive();
    assert!(
        passed,
        "the browser run failed; screenshots in {}\n--- registry log ---\n{}\n--- gateway log ---\n{}",
        screenshot_dir().display(),
        registry.tail(),
        gw_proc.tail()
    );

    // The stream received the event the page sent, with the id the page showed.
    let stream = merchant.join().unwrap().expect("the merchant's stream");
    let shown = std::fs::read_to_string(&id_file).unwrap();
    let event = stream
        .recv_timeout(Duration::from_secs(20))
        .expect("no event on the merchant's stream");
    assert_eq!(event["id"], shown.trim(), "{event:#}");
    assert_eq!(event["topic"], TOPIC, "{event:#}");
    assert_eq!(
        event["payload"],
        json!({"order_id": "E2E-1", "state": "paid"}),
        "{event:#}"
    );

    // The registry's view agrees: one connection, one unacknowledged event, the dead letter.
    let (status, view) = call(&base, reqwest::Method::GET, "/notifications", None);
    assert_eq!(status, 200, "{view:#}");
    assert_eq!(view["store"], "memory", "{view:#}");
    assert_eq!(view["test_send"]["available"], true, "{view:#}");
    let apps = view["apps"].as_array().unwrap();
    let app = apps.iter().find(|a| a["app"] == APP).unwrap();
    assert_eq!(app["connections"], 1, "{view:#}");
    assert_eq!(app["backlog"], 1, "{view:#}");
    assert_eq!(app["nodes"][0]["node_id"], NODE_ID, "{view:#}");
    let dead = view["dead_letters"].as_array().unwrap();
    assert!(
        dead.iter()
            .any(|d| d["app"] == CALLBACK_APP && d["topic"] == TOPIC && d["node_id"] == NODE_ID),
        "{view:#}"
    );

    // A refused test send says why: an app not granted the topic.
    let (status, refused) = call(
        &base,
        reqwest::Method::POST,
        "/notifications/test",
        Some(json!({"app": APP, "topic": "no-such-topic", "payload": {}})),
    );
    assert_eq!(status, 422, "{refused:#}");
    assert_eq!(refused["code"], "TOPIC_NOT_FOUND", "{refused:#}");

    // A registry without the publisher token says why it cannot send, before and when asked.
    let RegistryProc {
        proc: mut tokenless,
        base: tokenless_base,
    } = spawn_registry(&zk, "registry-no-token", &logs, |cmd| {
        cmd.env_remove("PORTICO_PUBLISH_TOKEN");
    });
    let (status, view) = call(
        &tokenless_base,
        reqwest::Method::GET,
        "/notifications",
        None,
    );
    assert_eq!(status, 200, "{view:#}");
    assert_eq!(view["test_send"]["available"], false, "{view:#}");
    assert!(
        view["test_send"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("--publish-token-file")),
        "{view:#}"
    );
    let (status, refused) = call(
        &tokenless_base,
        reqwest::Method::POST,
        "/notifications/test",
        Some(json!({"app": APP, "topic": TOPIC, "payload": {}})),
    );
    assert_eq!(status, 503, "{refused:#}");
    assert_eq!(refused["code"], "PUBLISH_TOKEN_MISSING", "{refused:#}");
    tokenless.assert_alive();

    // The audit log has the console's test sends under the operator's name.
    let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=50", None);
    let sent: Vec<&Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "notification.test")
        .collect();
    assert_eq!(sent.len(), 2, "{audit:#}");
    let ours = sent
        .iter()
        .find(|e| e["detail"]["id"] == shown.trim())
        .unwrap_or_else(|| panic!("no audit entry for event {shown}: {audit:#}"));
    assert_eq!(ours["actor"], "e2e-sre-notify", "{ours:#}");
    assert_eq!(ours["target"], format!("topics/{TOPIC}"), "{ours:#}");
    assert_eq!(ours["detail"]["app"], APP, "{ours:#}");
}
