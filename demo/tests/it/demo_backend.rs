//! The demo backend as a real process on an ephemeral port: the readiness line, the demo API,
//! fault injection and the request counter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use portico_demo::http::{Echo, StatsView};
use portico_testkit::procs::BackendProcess;
use serde_json::{json, Value};

fn backend() -> BackendProcess {
    BackendProcess::start_bin(
        Path::new(env!("CARGO_BIN_EXE_portico-demo-backend")),
        &["--http", "127.0.0.1:0"],
    )
    .unwrap()
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn stats(c: &reqwest::blocking::Client, b: &BackendProcess) -> StatsView {
    c.get(format!("{}/__stats", b.http_url()))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

#[test]
fn readiness_line_reports_the_real_port() {
    let b = backend();
    assert!(b.http.ip().is_loopback());
    assert_ne!(b.http.port(), 0);
}

#[test]
fn orders_and_health() {
    let b = backend();
    let c = client();
    let r = c.get(format!("{}/orders/42", b.http_url())).send().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-demo-instance"].to_str().unwrap(),
        b.http.to_string()
    );
    let v: Value = r.json().unwrap();
    assert_eq!(
        v,
        json!({"order_id": "42", "item": "book", "qty": 1, "status": "PAID"})
    );

    let r = c
        .post(format!("{}/orders", b.http_url()))
        .body(r#"{"item":"book","qty":2}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    assert_eq!(v["created"], json!({"item": "book", "qty": 2}));
    assert!(v["order_id"].as_str().unwrap().starts_with("ord-"));

    let r = c
        .post(format!("{}/orders", b.http_url()))
        .body("not json")
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);

    let r = c.get(format!("{}/health", b.http_url())).send().unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(format!("{}/nope", b.http_url())).send().unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn echo_describes_the_request() {
    let b = backend();
    let c = client();
    let e: Echo = c
        .put(format!("{}/echo/a/b%20c?x=1&y=%2F", b.http_url()))
        .header("X-Custom", "v1")
        .body("hello")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(e.method, "PUT");
    assert_eq!(e.path, "/echo/a/b%20c");
    assert_eq!(e.query.as_deref(), Some("x=1&y=%2F"));
    assert_eq!(e.headers["x-custom"], "v1");
    assert_eq!(e.body, "hello");
    assert_eq!(e.body_len, 5);
    assert_eq!(e.instance, b.http.to_string());

    let e: Echo = c
        .get(format!("{}/echo", b.http_url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(e.path, "/echo");
    assert_eq!(e.query, None);
    assert_eq!(e.body_len, 0);
}

#[test]
fn fault_injection() {
    let b = backend();
    let c = client();
    let r = c
        .get(format!("{}/orders/1?status=503", b.http_url()))
        .send()
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().unwrap();
    assert_eq!(v["injected_status"], 503);

    let r = c
        .get(format!("{}/echo", b.http_url()))
        .header("X-Demo-Status", "429")
        .send()
        .unwrap();
    assert_eq!(r.status(), 429);

    let t = Instant::now();
    let r = c
        .get(format!("{}/health", b.http_url()))
        .header("X-Demo-Delay-Ms", "200")
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(t.elapsed() >= Duration::from_millis(200));

    // A hanging request never answers; once its client gives up it is no longer in flight.
    let short = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = short
        .get(format!("{}/orders/9", b.http_url()))
        .header("X-Demo-Hang", "1")
        .send()
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    drop(short);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = stats(&c, &b);
        if s.in_flight == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "hanging request still in flight: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stats_count_requests_but_not_themselves() {
    let b = backend();
    let c = client();
    assert_eq!(stats(&c, &b).requests, 0);
    c.get(format!("{}/orders/1", b.http_url())).send().unwrap();
    c.get(format!("{}/orders/1", b.http_url())).send().unwrap();
    c.get(format!("{}/echo/x", b.http_url())).send().unwrap();
    let s = stats(&c, &b);
    assert_eq!(s.requests, 3);
    assert_eq!(s.by_path["/orders/1"], 2);
    assert_eq!(s.by_path["/echo/x"], 1);
    assert_eq!(s.in_flight, 0);

    let before: StatsView = c
        .post(format!("{}/__stats/reset", b.http_url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(before.requests, 3);
    let s = stats(&c, &b);
    assert_eq!(s.requests, 0);
    assert!(s.by_path.is_empty());
}
