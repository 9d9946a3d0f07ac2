//! The request head deadline over real processes: a gateway started with
//! `--head-timeout-ms 500` closes a connection that trickles its head, keeps serving other
//! connections, and leaves idle keepalive connections to the keepalive rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const HEAD_TIMEOUT_MS: &str = "500";

struct Env {
    _tree: ConfigTree,
    _backend: BackendProcess,
    gw: GatewayProcess,
}

fn env() -> Env {
    let backend = BackendProcess::start_http().expect("demo backend");
    let tree = ConfigTree::new();
    tree.put(
        "clusters/demo-http",
        &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string(), "weight": 1}]}),
    );
    tree.put(
        "apis/public.health",
        &json!({
            "id": "public.health",
            "http": {"method": "GET", "path": "/v1/health"},
            "backend": {"cluster": "demo-http", "http": {"path": "/health"}},
            "auth": "none"
        }),
    );
    tree.put(
        "apis/public.echo",
        &json!({
            "id": "public.echo",
            "http": {"method": "POST", "path": "/v1/echo", "body": "*"},
            "backend": {"cluster": "demo-http", "http": {"path": "/echo"}},
            "auth": "none"
        }),
    );
    let gw = GatewayProcess::start(tree.path(), &["--head-timeout-ms", HEAD_TIMEOUT_MS]);
    Env {
        _tree: tree,
        _backend: backend,
        gw,
    }
}

fn connect(e: &Env) -> TcpStream {
    let s = TcpStream::connect(e.gw.listen).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    s
}

/// Reads one response with a `content-length` from a keepalive connection: (status, head).
fn read_response(s: &mut TcpStream) -> (u16, String) {
    let (status, head, _) = read_response_body(s);
    (status, head)
}

/// Reads one response with a `content-length`: (status, head, body).
fn read_response_body(s: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).expect("read the response head");
        assert!(n > 0, "connection closed before a response");
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("content-length");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("read the body");
    (status, head, body)
}

const GET_HEALTH: &[u8] = b"GET /v1/health HTTP/1.1\r\nHost: portico\r\n\r\n";

#[test]
fn a_trickled_head_is_cut_off_and_other_connections_are_served() {
    let e = env();
    let mut slow = connect(&e);
    slow.write_all(b"GET /v1/health HTTP/1.1\r\n").unwrap();
    slow.set_nonblocking(true).unwrap();

    // One header byte every 200 ms; without the deadline this would go on for 60 s a byte.
    let started = Instant::now();
    let mut received = Vec::new();
    let mut closed = false;
    let header = b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for &b in header.iter().cycle().take(30) {
        std::thread::sleep(Duration::from_millis(200));
        let mut buf = [0u8; 1024];
        loop {
            match slow.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                // A reset: the server closed with our bytes unread.
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed || slow.write_all(&[b]).is_err() {
            closed = true;
            break;
        }
    }
    assert!(
        closed,
        "the server kept a trickling head open for {:?}",
        started.elapsed()
    );
    let reply = String::from_utf8_lossy(&received);
    assert!(
        received.is_empty() || reply.starts_with("HTTP/1.1 408 "),
        "{reply}"
    );

    // Another connection is served normally, while a second slow one is being cut off.
    let mut slow2 = connect(&e);
    slow2.write_all(b"GET /v1/health HTTP/1.1\r\nHo").unwrap();
    let mut fast = connect(&e);
    fast.write_all(GET_HEALTH).unwrap();
    let (status, head) = read_response(&mut fast);
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("x-portico-request-id"));
    // The slow one gets its 408 and the close.
    let mut rest = Vec::new();
    slow2.read_to_end(&mut rest).expect("closed by the server");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.starts_with("HTTP/1.1 408 "), "{rest}");
}

#[test]
fn an_idle_keepalive_connection_is_not_cut_by_the_head_deadline() {
    let e = env();
    let mut s = connect(&e);
    s.write_all(GET_HEALTH).unwrap();
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 200, "{head}");

    // Idle for four head deadlines between two requests: the keepalive rules govern that.
    std::thread::sleep(Duration::from_millis(2000));
    s.write_all(GET_HEALTH).unwrap();
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 200, "{head}");

    // A head split over reads but within the deadline is fine, on a reused connection too.
    let (a, b) = GET_HEALTH.split_at(20);
    s.write_all(a).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    s.write_all(b).unwrap();
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 200, "{head}");

    // And on that reused connection, a trickled head is cut off too.
    s.write_all(b"GET /v1/health HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(200));
        if s.write_all(b"x").is_err() {
            closed = true;
            break;
        }
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => {
                let reply = String::from_utf8_lossy(&buf[..n]);
                assert!(reply.starts_with("HTTP/1.1 408 "), "{reply}");
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(_) => closed = true,
        }
        s.set_nonblocking(false).unwrap();
        if closed {
            break;
        }
    }
    assert!(
        closed,
        "a trickled head on a reused connection was not cut off"
    );
}

#[test]
fn a_post_body_is_not_timed_as_part_of_the_head() {
    let e = env();
    let mut s = connect(&e);
    // The head in one write, the body slower than the head deadline: only the head is timed.
    s.write_all(b"POST /v1/echo HTTP/1.1\r\nHost: portico\r\nContent-Length: 11\r\n\r\n{\"a\":")
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    s.write_all(b"\"bcd\"}").unwrap();
    let (status, head, body) = read_response_body(&mut s);
    assert_eq!(status, 200, "{head}");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("echo json");
    assert_eq!(v["body"], r#"{"a":"bcd"}"#, "{v}");
    // Still a keepalive connection.
    s.write_all(GET_HEALTH).unwrap();
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 200, "{head}");
}
