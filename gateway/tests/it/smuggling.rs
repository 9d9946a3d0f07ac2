//! Request smuggling and protocol abuse (docs/SECURITY.md, "Request framing"), over raw TCP against
//! the real `portico-gateway` process.
//!
//! Every HTTP-backed API here points at a [`Recorder`]: a backend written in this file that
//! reads raw bytes per connection, parses HTTP/1.1 framing strictly (CRLF only, no obs-fold,
//! exactly one `Content-Length` of digits, no `Transfer-Encoding` at all since the gateway
//! re-frames every body with `Content-Length`, see `invoke/http.rs`), records each request
//! it saw as (head, body), and answers a fixed small response. Anything it cannot parse
//! strictly is recorded as a violation and fails the case.
//!
//! The invariant checked for every case of the corpus: the request is either
//! - refused with `400` (or the status named in the case) and the connection then closed,
//!   with nothing reaching the backend, or
//! - forwarded as exactly the well-framed request(s) listed in the case, and nothing else.
//!
//! A request hidden in another's body never reaches the backend as a request; pipelined
//! requests are answered in order, or the first answered and the connection closed.
//!
//! Each case says, in its `note`, what Pingora 0.9 does with it and what Portico adds
//! (`gateway/src/edge/framing.rs`); docs/SECURITY.md ("Request framing") lists the refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_control::sign;
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// The recording backend
// ---------------------------------------------------------------------------------------

/// One request as the backend received it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Recorded {
    seen: Vec<Seen>,
    violations: Vec<String>,
}

/// A strict HTTP/1.1 backend on 127.0.0.1:0 that records what it receives.
struct Recorder {
    addr: SocketAddr,
    state: Arc<Mutex<Recorded>>,
}

const BACKEND_REPLY: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";

/// How long the backend waits for the rest of a request it has started to receive.
const BACKEND_PATIENCE: Duration = Duration::from_secs(10);

impl Recorder {
    fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the recorder");
        let addr = listener.local_addr().expect("recorder address");
        let state = Arc::new(Mutex::new(Recorded::default()));
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || serve(conn, &st));
            }
        });
        Recorder { addr, state }
    }

    /// What was received since the last call: (requests, violations).
    fn take(&self) -> (Vec<Seen>, Vec<String>) {
        let mut st = self.state.lock().unwrap();
        (
            std::mem::take(&mut st.seen),
            std::mem::take(&mut st.violations),
        )
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads more bytes into `buf`: Ok(0) at the end of the stream.
fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 8192];
    let n = s.read(&mut chunk)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// One upstream connection: strict request after request, until the gateway closes it.
fn serve(mut s: TcpStream, state: &Mutex<Recorded>) {
    let violation = |msg: String| state.lock().unwrap().violations.push(msg);
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 64 * 1024 {
                violation(format!(
                    "no CRLFCRLF in 64 KiB: {:?}",
                    String::from_utf8_lossy(&buf[..200])
                ));
                return;
            }
            // Idle between requests (a pooled connection): wait as long as the gateway likes.
            let patience = (!buf.is_empty()).then_some(BACKEND_PATIENCE);
            let _ = s.set_read_timeout(patience);
            match read_more(&mut s, &mut buf) {
                Ok(0) | Err(_) if buf.is_empty() => return,
                Ok(0) | Err(_) => {
                    violation(format!(
                        "incomplete request head: {:?}",
                        String::from_utf8_lossy(&buf)
                    ));
                    return;
                }
                Ok(_) => {}
            }
        };
        let (method, target, headers, body_len) = match parse_head(&buf[..head_end]) {
            Ok(parsed) => parsed,
            Err(e) => {
                violation(format!(
                    "{e}: {:?}",
                    String::from_utf8_lossy(&buf[..head_end])
                ));
                return;
            }
        };
        let _ = s.set_read_timeout(Some(BACKEND_PATIENCE));
        while buf.len() < head_end + body_len {
            match read_more(&mut s, &mut buf) {
                Ok(n) if n > 0 => {}
                _ => {
                    violation(format!(
                        "body shorter than its Content-Length {body_len}: {:?}",
                        String::from_utf8_lossy(&buf)
                    ));
                    return;
                }
            }
        }
        let body = buf[head_end..head_end + body_len].to_vec();
        buf.drain(..head_end + body_len);
        state.lock().unwrap().seen.push(Seen {
            method,
            target,
            headers,
            body,
        });
        if s.write_all(BACKEND_REPLY).is_err() {
            return;
        }
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

type Head = (String, String, Vec<(String, String)>, usize);

/// RFC 9112 request head, strictly: CRLF line ends only, `token SP origin-form SP
/// HTTP/1.1`, `token ":" OWS value OWS` fields without obs-fold or control bytes, exactly
/// one Host, at most one Content-Length of 1*DIGIT, no Transfer-Encoding.
fn parse_head(head: &[u8]) -> Result<Head, String> {
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' && (i == 0 || head[i - 1] != b'\r') {
            return Err(format!("bare LF at {i}"));
        }
        if b == b'\r' && head.get(i + 1) != Some(&b'\n') {
            return Err(format!("bare CR at {i}"));
        }
    }
    let text = &head[..head.len() - 4];
    let mut lines = text
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let line = lines.next().ok_or("empty head")?;
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let [method, target, version] = parts[..] else {
        return Err("request line is not three parts".into());
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err("method is not a token".into());
    }
    if !target.starts_with(b"/") || !target.iter().all(|&b| (0x21..=0x7e).contains(&b)) {
        return Err("target is not a visible-ASCII origin-form".into());
    }
    if version != b"HTTP/1.1" {
        return Err("version is not HTTP/1.1".into());
    }
    let mut headers = Vec::new();
    for line in lines {
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err("obs-fold".into());
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or("field without colon")?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err("field name is not a token".into());
        }
        let value = value.trim_ascii();
        if value.iter().any(|&b| b != b'\t' && (b < 0x20 || b == 0x7f)) {
            return Err("control byte in a field value".into());
        }
        headers.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    let named = |n: &str| {
        headers
            .iter()
            .filter(|(h, _)| h.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    if named("host").len() != 1 {
        return Err("not exactly one Host".into());
    }
    if !named("transfer-encoding").is_empty() {
        return Err("Transfer-Encoding reached the backend (the gateway re-frames bodies)".into());
    }
    let body_len = match named("content-length")[..] {
        [] => 0,
        [v] if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse().map_err(|_| "Content-Length out of range")?
        }
        _ => return Err("Content-Length is not exactly one 1*DIGIT".into()),
    };
    Ok((
        String::from_utf8_lossy(method).into_owned(),
        String::from_utf8_lossy(target).into_owned(),
        headers,
        body_len,
    ))
}

/// The recorder is the judge of "well-framed": it must record what a strict server accepts
/// and flag what the gateway must never send.
#[test]
fn the_recorder_is_strict() {
    let ok: &[u8] = b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(parse_head(ok).map(|h| h.3), Ok(5));
    let bad: &[&[u8]] = &[
        b"POST /echo HTTP/1.1\nHost: a\r\n\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nX-A: b\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"POST http://a/echo HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST /e\x00cho HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST /echo HTTP/1.0\r\nHost: a\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost : a\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
    ];
    for head in bad {
        assert!(
            parse_head(head).is_err(),
            "accepted {:?}",
            String::from_utf8_lossy(head)
        );
    }
    // Over a socket: a request it cannot parse strictly is a violation, not a record.
    let rec = Recorder::start();
    let mut s = TcpStream::connect(rec.addr).unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "answered a malformed request");
    let (seen, violations) = rec.take();
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(violations.len(), 1, "{violations:?}");
    // And a well-framed one is recorded and answered.
    let mut s = TcpStream::connect(rec.addr).unwrap();
    s.write_all(&[ok, b"hello"].concat()).unwrap();
    let mut reply = [0u8; BACKEND_REPLY.len()];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..], BACKEND_REPLY);
    let (seen, violations) = rec.take();
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!((seen.len(), seen[0].body.as_slice()), (1, &b"hello"[..]));
}

// ---------------------------------------------------------------------------------------
// The gateway and a raw client
// ---------------------------------------------------------------------------------------

/// Fields drop in order: the gateway goes before its configuration tree.
struct Env {
    gw: GatewayProcess,
    rec: Recorder,
    _tree: ConfigTree,
}

/// Body limit of `/v1/echo` (so 413 cases stay small).
const ECHO_LIMIT: usize = 1024;

fn env() -> Env {
    let rec = Recorder::start();
    let t = ConfigTree::new();
    t.put(
        "clusters/rec",
        &json!({"protocol": "http", "endpoints": [{"addr": rec.addr.to_string(), "weight": 1}]}),
    );
    t.put(
        "apps/merchant-1",
        &json!({"secret": SECRET, "status": "active", "apis": ["*"]}),
    );
    let api = |id: &str, method: &str, path: &str, to: &str, auth: &str| {
        let mut v = json!({
            "id": id,
            "http": {"method": method, "path": path},
            "backend": {"cluster": "rec", "timeout_ms": 5000, "http": {"path": to}},
            "auth": auth,
            "policy": {"max_body_bytes": ECHO_LIMIT}
        });
        if method == "POST" {
            v["http"]["body"] = json!("*");
        }
        t.put(&format!("apis/{id}"), &v);
    };
    api("echo", "POST", "/v1/echo", "/echo", "none");
    api("health", "GET", "/v1/health", "/health", "none");
    api("smuggled", "GET", "/v1/smuggled", "/smuggled", "none");
    api("any", "GET", "/v1/any/{rest=**}", "/any/{rest}", "none");
    api("signed", "POST", "/v1/signed", "/signed", "signature");
    // No rewrite: the path is forwarded as the gateway parsed it.
    t.put(
        "apis/raw",
        &json!({
            "id": "raw",
            "http": {"method": "GET", "path": "/v1/raw/{rest=**}"},
            "backend": {"cluster": "rec", "timeout_ms": 5000, "http": {}},
            "auth": "none"
        }),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    Env { gw, rec, _tree: t }
}

/// A response as read off the wire.
#[derive(Debug)]
struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The envelope `code`, if the body is Portico's envelope.
    fn code(&self) -> Option<String> {
        let v: Value = serde_json::from_slice(&self.body).ok()?;
        v["code"].as_str().map(str::to_owned)
    }
}

/// How a connection ended after the responses a case expects.
#[derive(Debug, PartialEq)]
enum End {
    /// The server closed it (FIN or reset) with nothing more sent.
    Closed,
    /// More bytes arrived: a response nobody asked for.
    Extra(String),
    /// Still open after the patience.
    Open,
}

const CLIENT_PATIENCE: Duration = Duration::from_secs(10);

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(gw: &GatewayProcess) -> Conn {
        let s = TcpStream::connect(gw.listen).expect("connect to the gateway");
        s.set_nodelay(true).expect("nodelay");
        s.set_read_timeout(Some(CLIENT_PATIENCE))
            .expect("read timeout");
        Conn { s, buf: Vec::new() }
    }

    /// Writes `bytes` in one write. A refused request may be closed on before all of it is
    /// taken: write errors are left for the reads to show.
    fn send(&mut self, bytes: &[u8]) {
        let _ = self.s.write_all(bytes);
    }

    fn half_close(&self) {
        let _ = self.s.shutdown(Shutdown::Write);
    }

    /// Fills the buffer until `pred` holds; false at the end of the stream (or a reset).
    fn fill_until(&mut self, pred: impl Fn(&[u8]) -> bool) -> bool {
        while !pred(&self.buf) {
            match read_more(&mut self.s, &mut self.buf) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!(
                        "no response within {CLIENT_PATIENCE:?}; have {:?}",
                        String::from_utf8_lossy(&self.buf)
                    )
                }
                Err(_) => return false,
            }
        }
        true
    }

    /// The next response (a `1xx` included), or `None` if the connection ended first.
    fn response(&mut self) -> Option<Response> {
        if !self.fill_until(|b| find(b, b"\r\n\r\n").is_some()) {
            assert!(
                self.buf.is_empty(),
                "connection ended inside a response: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            return None;
        }
        let end = find(&self.buf, b"\r\n\r\n").expect("head end") + 4;
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end);
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a status line: {head:?}"));
        let mut r = Response {
            status,
            head,
            body: Vec::new(),
        };
        if status < 200 {
            return Some(r);
        }
        if r.header("transfer-encoding").is_some() {
            r.body = self.read_chunked();
        } else {
            let len: usize = r
                .header("content-length")
                .map(|v| v.parse().expect("content-length"))
                .unwrap_or(0);
            assert!(
                self.fill_until(|b| b.len() >= len),
                "connection ended inside a body"
            );
            r.body = self.buf.drain(..len).collect();
        }
        Some(r)
    }

    /// The next final (non-1xx) response.
    fn final_response(&mut self) -> Option<Response> {
        loop {
            let r = self.response()?;
            if r.status >= 200 {
                return Some(r);
            }
        }
    }

    fn read_chunked(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            assert!(self.fill_until(|b| find(b, b"\r\n").is_some()));
            let line_end = find(&self.buf, b"\r\n").expect("chunk line");
            let size = usize::from_str_radix(
                std::str::from_utf8(&self.buf[..line_end]).expect("chunk size"),
                16,
            )
            .expect("chunk size");
            self.buf.drain(..line_end + 2);
            assert!(self.fill_until(|b| b.len() >= size + 2));
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
            if size == 0 {
                return body;
            }
        }
    }

    /// Waits for the server to close the connection; anything read before that is `Extra`.
    fn end(&mut self) -> End {
        loop {
            match read_more(&mut self.s, &mut self.buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return End::Open
                }
                Err(_) => break,
            }
        }
        if self.buf.is_empty() {
            End::Closed
        } else {
            End::Extra(String::from_utf8_lossy(&self.buf).into_owned())
        }
    }
}

// ---------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------

/// What a case must come to.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Pingora's own `400` (no envelope: it happens before Portico sees a request), then the
    /// connection is closed.
    PingoraRefuses,
    /// Pingora's own answer with this status (no envelope), then the connection is closed.
    PingoraAnswers(u16),
    /// Portico's `400 BAD_REQUEST` envelope, then the connection is closed.
    PorticoRefuses,
    /// Portico's envelope with this status and code, then the connection is closed.
    RefusedWith(u16, &'static str),
    /// Refused by Pingora with a `400`, or the connection reset before it could be read
    /// (the request is bigger than what Pingora reads before refusing it).
    PingoraRefusesOrResets,
    /// Portico's envelope with this status and code for a well-framed request it will not
    /// forward; the connection may stay open (nothing more is answered on it).
    Denied(u16, &'static str),
    /// Forwarded as exactly these (backend path, body) requests, each answered `200`.
    Forwards(&'static [(&'static str, &'static [u8])]),
}

struct Case {
    name: &'static str,
    wire: Vec<u8>,
    /// Half-close the connection after sending (the client has nothing more to say).
    half_close: bool,
    outcome: Outcome,
    /// What Pingora does with it, and what Portico adds.
    note: &'static str,
}

fn case(name: &'static str, wire: &[u8], outcome: Outcome, note: &'static str) -> Case {
    Case {
        name,
        wire: wire.to_vec(),
        half_close: false,
        outcome,
        note,
    }
}

impl Case {
    /// The client half-closes after sending: it has nothing more to say.
    fn half_closed(mut self) -> Case {
        self.half_close = true;
        self
    }
}

use Outcome::*;

const HELLO: &[(&str, &[u8])] = &[("/echo", b"hello")];
const HEALTH: &[(&str, &[u8])] = &[("/health", b"")];

/// Runs the cases one after another on one gateway, checking the invariant for each.
fn run(e: &Env, cases: &[Case]) {
    let mut failures = Vec::new();
    for c in cases {
        // A read that times out panics inside the case: report it as this case's failure.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case(e, c)))
            .unwrap_or_else(|panic| {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("panicked");
                Err(msg.to_owned())
            });
        if let Err(msg) = result {
            failures.push(format!("{}: {msg}\n    ({})", c.name, c.note));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn run_case(e: &Env, c: &Case) -> Result<(), String> {
    let _ = e.rec.take();
    let mut conn = Conn::open(&e.gw);
    conn.send(&c.wire);
    if c.half_close {
        conn.half_close();
    }
    let expected: &[(&str, &[u8])] = match c.outcome {
        Forwards(reqs) => {
            for _ in reqs {
                let r = conn
                    .final_response()
                    .ok_or("connection closed before the response")?;
                if r.status != 200 || r.body != b"{\"ok\":true}" {
                    return Err(format!(
                        "expected the backend's 200, got {}: {}{}",
                        r.status,
                        r.head,
                        String::from_utf8_lossy(&r.body)
                    ));
                }
            }
            // Nothing more may be answered: the client is done.
            conn.half_close();
            match conn.end() {
                End::Closed => {}
                other => return Err(format!("after the responses: {other:?}")),
            }
            reqs
        }
        PingoraRefusesOrResets => {
            if let Some(r) = conn.final_response() {
                // 431: Portico's own head limit (gateway/src/listener/head_stream.rs, MAX_HEAD_BYTES).
                if r.status != 400 && r.status != 431 {
                    return Err(format!("expected 400 or 431, got {}", r.head));
                }
            }
            match conn.end() {
                End::Closed => {}
                other => return Err(format!("after the refusal: {other:?}")),
            }
            &[]
        }
        PingoraRefuses | PingoraAnswers(_) | PorticoRefuses | RefusedWith(..) | Denied(..) => {
            let r = conn
                .final_response()
                .ok_or("connection closed without a response")?;
            let (status, code) = match c.outcome {
                RefusedWith(s, code) | Denied(s, code) => (s, Some(code)),
                PorticoRefuses => (400, Some("BAD_REQUEST")),
                PingoraAnswers(s) => (s, None),
                _ => (400, None),
            };
            let detail = format!("{}{}", r.head, String::from_utf8_lossy(&r.body));
            if r.status != status {
                return Err(format!("expected {status}, got {detail}"));
            }
            match code {
                // Portico's rescue point: the envelope and the request id.
                Some(code) => {
                    if r.code().as_deref() != Some(code)
                        || r.header("x-portico-request-id").is_none()
                    {
                        return Err(format!("expected Portico's {code} envelope, got {detail}"));
                    }
                }
                // Pingora's own refusal: an empty 400 (documents who refused it).
                None => {
                    if r.header("x-portico-request-id").is_some() {
                        return Err(format!("expected Pingora's bare {status}, got {detail}"));
                    }
                }
            }
            if matches!(c.outcome, Denied(..)) {
                conn.half_close();
            }
            match conn.end() {
                End::Closed => {}
                other => return Err(format!("after the refusal: {other:?}")),
            }
            &[]
        }
    };
    // The connection has ended, so everything the gateway forwarded for it has been answered
    // by the backend (and recorded before it answered).
    let (seen, violations) = e.rec.take();
    if !violations.is_empty() {
        return Err(format!(
            "the backend saw malformed requests: {violations:?}"
        ));
    }
    let got: Vec<(&str, &[u8])> = seen
        .iter()
        .map(|s| (s.target.as_str(), s.body.as_slice()))
        .collect();
    if got != expected {
        return Err(format!(
            "the backend saw {:?}, expected {:?}",
            show(&got),
            show(expected)
        ));
    }
    for s in &seen {
        if s.target == "/signed" && !signature_holds(s) {
            return Err(format!(
                "forwarded without the gateway's verification (X-Portico-App), or with the signature headers: {:?}",
                String::from_utf8_lossy(&s.body)
            ));
        }
        // Hop-by-hop fields, and the trailer field some cases send.
        for hop in [
            "expect",
            "upgrade",
            "connection",
            "te",
            "trailer",
            "x-trailer",
        ] {
            if let Some(v) = s.header(hop) {
                return Err(format!(
                    "{hop}: {v} reached the backend ({} {})",
                    s.method, s.target
                ));
            }
        }
    }
    Ok(())
}

fn show(reqs: &[(&str, &[u8])]) -> Vec<(String, String)> {
    reqs.iter()
        .map(|(p, b)| (p.to_string(), String::from_utf8_lossy(b).into_owned()))
        .collect()
}

/// `POST /v1/echo` with these header lines (each ending in CRLF) and this body.
fn post(headers: &str, body: &[u8]) -> Vec<u8> {
    [
        b"POST /v1/echo HTTP/1.1\r\nHost: portico\r\n".as_slice(),
        headers.as_bytes(),
        b"\r\n",
        body,
    ]
    .concat()
}

/// `wire` with the first `from` replaced by `to`.
fn swap(wire: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
    String::from_utf8(wire)
        .expect("utf-8 wire")
        .replacen(from, to, 1)
        .into_bytes()
}

/// A whole request, as some cases hide it in a body.
const SMUGGLED: &str = "GET /v1/smuggled HTTP/1.1\r\nHost: portico\r\n\r\n";
const SMUGGLED_AS_ECHO_BODY: &[(&str, &[u8])] = &[("/echo", SMUGGLED.as_bytes())];
const SMUGGLED_AS_SIGNED_BODY: &[(&str, &[u8])] = &[("/signed", SMUGGLED.as_bytes())];

#[test]
fn content_length_and_transfer_encoding() {
    let e = env();
    let chunked_hello = b"5\r\nhello\r\n0\r\n\r\n";
    let te = |value: &str| post(&format!("Transfer-Encoding: {value}\r\n"), chunked_hello);
    let cl = |value: &str| post(&format!("Content-Length: {value}\r\n"), b"hello");
    let cases = vec![
        case("baseline: Content-Length", &cl("5"), Forwards(HELLO), "both agree"),
        case(
            "baseline: chunked",
            &te("chunked"),
            Forwards(HELLO),
            "Pingora decodes; Portico forwards with Content-Length",
        ),
        // CL.TE and TE.CL: RFC 9112 §6.3 lets TE win, and says the message "ought to be
        // handled as an error". Pingora lets TE win, drops the Content-Length and turns
        // keepalive off; Portico refuses (framing.rs), so no body interpretation is chosen.
        case(
            "CL.TE",
            &post(
                "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n",
                b"0\r\n\r\nG",
            ),
            PorticoRefuses,
            "Pingora: TE wins, CL removed, keepalive off. Portico: refused",
        ),
        case(
            "TE.CL",
            &post(
                "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                b"8\r\nSMUGGLED\r\n0\r\n\r\n",
            ),
            PorticoRefuses,
            "Pingora: TE wins, CL removed, keepalive off. Portico: refused",
        ),
        case(
            "CL.TE with a request after the chunked end",
            &post(
                &format!(
                    "Content-Length: {}\r\nTransfer-Encoding: chunked\r\n",
                    5 + SMUGGLED.len()
                ),
                format!("0\r\n\r\n{SMUGGLED}").as_bytes(),
            ),
            PorticoRefuses,
            "a front end honouring CL would see one request, a TE one two. Portico: refused",
        ),
        case(
            "TE.CL with a request inside the chunk",
            &post(
                "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
                format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len()).as_bytes(),
            ),
            PorticoRefuses,
            "a CL reader would parse the chunk as a request. Portico: refused",
        ),
        case(
            "CL.TE, lower-case and tab",
            &post(
                "content-length: 5\r\ntransfer-encoding:\tchunked\r\n",
                b"0\r\n\r\n",
            ),
            PorticoRefuses,
            "names are case-insensitive, OWS may be a tab. Portico: refused",
        ),
        case(
            "duplicate Content-Length, equal",
            &post("Content-Length: 5\r\nContent-Length: 5\r\n", b"hello"),
            Forwards(HELLO),
            "RFC 9110 §8.6 allows collapsing equal values; Pingora does; forwarded once",
        ),
        case(
            "Content-Length list, equal",
            &cl("5, 5"),
            Forwards(HELLO),
            "Pingora collapses `5, 5` to 5 (as hyper does)",
        ),
        case(
            "duplicate Content-Length, different",
            &post("Content-Length: 5\r\nContent-Length: 6\r\n", b"hello!"),
            PingoraRefuses,
            "Pingora refuses conflicting values (RFC 9110 §8.6)",
        ),
        case(
            "Content-Length list, different",
            &cl("5, 6"),
            PingoraRefuses,
            "Pingora refuses conflicting values",
        ),
        case("Content-Length +5", &cl("+5"), PingoraRefuses, "Pingora: digits only"),
        case("Content-Length -5", &cl("-5"), PingoraRefuses, "Pingora: digits only"),
        case("Content-Length 0x5", &cl("0x5"), PingoraRefuses, "Pingora: digits only"),
        case("Content-Length 5.0", &cl("5.0"), PingoraRefuses, "Pingora: digits only"),
        case("Content-Length 1 0", &cl("1 0"), PingoraRefuses, "Pingora: digits only"),
        case("Content-Length empty", &cl(""), PingoraRefuses, "Pingora: 1*DIGIT"),
        case(
            "Content-Length overflow",
            &cl("99999999999999999999999"),
            PingoraRefuses,
            "Pingora: checked arithmetic",
        ),
        case(
            "Content-Length with a vertical tab",
            &cl("\x0b5"),
            PingoraRefuses,
            "httparse: VT is not allowed in a field value",
        ),
        case(
            "Content-Length 0005",
            &cl("0005"),
            Forwards(HELLO),
            "1*DIGIT allows leading zeros; Pingora reads 5; forwarded as Content-Length: 5",
        ),
        case(
            "Content-Length with OWS",
            &cl("  5\t "),
            Forwards(HELLO),
            "OWS around a field value is syntax (httparse strips it)",
        ),
        case(
            "Transfer-Encoding: chunked, identity",
            &te("chunked, identity"),
            PingoraRefuses,
            "Pingora: chunked must be the final coding (RFC 9112 §6.3)",
        ),
        case(
            "Transfer-Encoding: identity, chunked",
            &te("identity, chunked"),
            PorticoRefuses,
            "Pingora accepts any list ending in chunked. Portico: only `chunked` alone",
        ),
        case(
            "Transfer-Encoding: gzip, chunked",
            &te("gzip, chunked"),
            PorticoRefuses,
            "Pingora would undo only the chunking, so the backend would get gzip bytes \
             unlabelled. Portico: refused",
        ),
        case(
            "Transfer-Encoding: chunked, chunked",
            &te("chunked, chunked"),
            PorticoRefuses,
            "chunked twice is invalid (RFC 9112 §7); Pingora decodes once. Portico: refused",
        ),
        case(
            "Transfer-Encoding in two lines, chunked first",
            &post(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
                chunked_hello,
            ),
            PingoraRefuses,
            "Pingora reads the last line: identity, not chunked",
        ),
        case(
            "Transfer-Encoding in two lines, chunked last",
            &post(
                "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
                chunked_hello,
            ),
            PorticoRefuses,
            "Pingora reads the last line: chunked. Portico: one Transfer-Encoding line only",
        ),
        case(
            "Transfer-Encoding in two lines, chunked twice",
            &post(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                chunked_hello,
            ),
            PorticoRefuses,
            "Pingora decodes once. Portico: refused",
        ),
        case(
            "Transfer-Encoding : chunked (space before the colon)",
            &swap(te("chunked"), "Transfer-Encoding:", "Transfer-Encoding :"),
            PingoraRefuses,
            "httparse refuses whitespace between a field name and the colon (RFC 9112 §5.1)",
        ),
        case(
            "Transfer-Encoding:<tab>chunked",
            &post("Transfer-Encoding:\tchunked\r\n", chunked_hello),
            Forwards(HELLO),
            "a tab is OWS: a plain chunked body",
        ),
        case(
            "Transfer-Encoding: xchunked",
            &te("xchunked"),
            PingoraRefuses,
            "Pingora: the final coding is not chunked",
        ),
        case(
            "Transfer-Encoding: chunked<space>",
            &te("chunked "),
            Forwards(HELLO),
            "trailing OWS is stripped",
        ),
        case(
            "Transfer-Encoding: ChUnKeD",
            &te("ChUnKeD"),
            Forwards(HELLO),
            "coding names are case-insensitive (RFC 9112 §7)",
        ),
        case(
            "Transfer-Encoding with a vertical tab",
            &te("\x0bchunked"),
            PingoraRefuses,
            "httparse: VT is not allowed in a field value",
        ),
        case(
            "Transfer-Encoding continued by obs-fold",
            &post("Transfer-Encoding:\r\n chunked\r\n", chunked_hello),
            PingoraRefuses,
            "httparse refuses obs-fold in requests (RFC 9112 §5.2)",
        ),
        case(
            "Transfer_Encoding (underscore) with Content-Length",
            &post(
                "Transfer_Encoding: chunked\r\nContent-Length: 5\r\n",
                b"hello",
            ),
            Forwards(HELLO),
            "just an unknown field: framed by Content-Length",
        ),
        case(
            "HTTP/1.0 with Transfer-Encoding",
            &swap(te("chunked"), "HTTP/1.1", "HTTP/1.0"),
            PingoraRefuses,
            "Pingora: faulty framing for HTTP/1.0 (RFC 9112 §6.1)",
        ),
        case(
            "HTTP/1.0 with Content-Length",
            &swap(cl("5"), "HTTP/1.1", "HTTP/1.0"),
            Forwards(HELLO),
            "forwarded as HTTP/1.1 with Content-Length",
        ),
        case(
            "GET with a chunked body",
            b"GET /v1/health HTTP/1.1\r\nHost: portico\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            Forwards(HEALTH),
            "an empty chunked body: a plain GET",
        ),
        case(
            "a request inside a Content-Length body",
            &post(
                &format!("Content-Length: {}\r\n", SMUGGLED.len()),
                SMUGGLED.as_bytes(),
            ),
            Forwards(SMUGGLED_AS_ECHO_BODY),
            "only a body: the backend gets it as the body of one request",
        ),
        case(
            "a request inside a chunked body",
            &post(
                "Transfer-Encoding: chunked\r\n",
                format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len()).as_bytes(),
            ),
            Forwards(SMUGGLED_AS_ECHO_BODY),
            "only a body: the backend gets it as the body of one request",
        ),
        case(
            "Content-Length over the API's limit",
            &cl(&(ECHO_LIMIT + 1).to_string()),
            RefusedWith(413, "BODY_TOO_LARGE"),
            "Portico refuses on the header, before reading, and closes",
        ),
    ];
    run(&e, &cases);
}

#[test]
fn chunked_bodies() {
    let e = env();
    let chunked = |body: &[u8]| post("Transfer-Encoding: chunked\r\n", body);
    let mut big = format!("{:x}\r\n", 2 * ECHO_LIMIT).into_bytes();
    big.extend(std::iter::repeat_n(b'a', 2 * ECHO_LIMIT));
    big.extend(b"\r\n0\r\n\r\n");
    let cases = vec![
        case(
            "chunk size overflowing u64",
            &chunked(b"ffffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
            PorticoRefuses,
            "httparse refuses more than 16 hex digits; Portico answers the body read error \
             with 400 and closes",
        ),
        case(
            "chunk size u64::MAX",
            &chunked(b"ffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
            PorticoRefuses,
            "Pingora refuses a size whose end overflows (checked arithmetic)",
        ),
        case(
            "negative chunk size",
            &chunked(b"-5\r\nhello\r\n0\r\n\r\n"),
            PorticoRefuses,
            "httparse: hex digits only",
        ),
        case(
            "garbage chunk size",
            &chunked(b"zz\r\nhello\r\n0\r\n\r\n"),
            PorticoRefuses,
            "httparse: hex digits only",
        ),
        case(
            "0x-prefixed chunk size",
            &chunked(b"0x5\r\nhello\r\n0\r\n\r\n"),
            PorticoRefuses,
            "httparse: hex digits only",
        ),
        case(
            "chunk size line ended by a bare LF",
            &chunked(b"5\nhello\r\n0\r\n\r\n"),
            PorticoRefuses,
            "httparse: CRLF after the size",
        ),
        case(
            "chunk data longer than its size",
            &chunked(b"3\r\nhello\r\n0\r\n\r\n"),
            PorticoRefuses,
            "Pingora checks the CRLF after each chunk's data",
        ),
        case(
            "chunk data without its CRLF",
            &chunked(b"5\r\nhello0\r\n\r\n"),
            PorticoRefuses,
            "Pingora checks the CRLF after each chunk's data",
        ),
        case(
            "chunked body without the final CRLF",
            &chunked(b"5\r\nhello\r\n0\r\n"),
            PorticoRefuses,
            "the client half-closes: Pingora reports the early end, Portico answers 400",
        )
        .half_closed(),
        case(
            "chunked body without the last chunk",
            &chunked(b"5\r\nhello\r\n"),
            PorticoRefuses,
            "the client half-closes: Pingora reports the early end, Portico answers 400",
        )
        .half_closed(),
        case(
            "chunk extensions",
            &chunked(b"5;name=value;flag\r\nhello\r\n0;last=\"yes\"\r\n\r\n"),
            Forwards(HELLO),
            "extensions are ignored (RFC 9112 §7.1.1); the backend sees none",
        ),
        case(
            "chunk extension containing a bare LF",
            &chunked(b"5;a\nb\r\nhello\r\n0\r\n\r\n"),
            Forwards(HELLO),
            "httparse skips any byte but CR inside an extension (a leniency only Pingora or \
             httparse can remove, see docs/SECURITY.md); still one request, re-framed",
        ),
        case(
            "empty chunk-size line",
            &chunked(b"\r\n\r\n"),
            Forwards(&[("/echo", b"")]),
            "httparse reads a size line with no digits as 0 (a leniency); one empty body",
        ),
        case(
            "whitespace after the chunk size",
            &chunked(b"5 \r\nhello\r\n0\r\n\r\n"),
            Forwards(HELLO),
            "httparse allows it (RFC 9112 only allows BWS before `;`); one request",
        ),
        case(
            "chunk sizes with leading zeros and upper case",
            &chunked(b"0005\r\nhello\r\n00A\r\n0123456789\r\n000\r\n\r\n"),
            Forwards(&[("/echo", b"hello0123456789")]),
            "1*HEXDIG: valid",
        ),
        case(
            "trailers",
            &chunked(b"5\r\nhello\r\n0\r\nX-Trailer: t\r\nContent-Length: 99\r\n\r\n"),
            Forwards(HELLO),
            "Pingora reads and drops trailers; they never reach the backend",
        ),
        case(
            "chunked body over the API's limit",
            &chunked(&big),
            RefusedWith(413, "BODY_TOO_LARGE"),
            "Portico counts decoded bytes while reading, refuses and closes",
        ),
    ];
    run(&e, &cases);
}

#[test]
fn request_heads() {
    let e = env();
    let get = |extra: &str| -> Vec<u8> {
        format!("GET /v1/health HTTP/1.1\r\nHost: portico\r\n{extra}\r\n").into_bytes()
    };
    let many = |n: usize| -> String { (0..n).map(|i| format!("X-H{i}: v\r\n")).collect() };
    let cases = vec![
        case("baseline: GET", &get(""), Forwards(HEALTH), "plain"),
        case(
            "bare LF line endings",
            b"GET /v1/health HTTP/1.1\nHost: portico\n\n",
            PorticoRefuses,
            "httparse accepts bare LF (RFC 9112 §2.2 MAY); a front end that does not would \
             frame it differently. Portico: refused",
        ),
        case(
            "one header ended by a bare LF",
            b"GET /v1/health HTTP/1.1\r\nHost: portico\nX-A: b\r\n\r\n",
            PorticoRefuses,
            "httparse accepts it. Portico: refused",
        ),
        case(
            "Transfer-Encoding behind a bare LF",
            &post(
                "X-A: a\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                b"hello",
            ),
            PorticoRefuses,
            "a CRLF-only front end sees one odd field and Content-Length; httparse sees TE. \
             Portico: refused",
        ),
        case(
            "bare CR",
            b"GET /v1/health HTTP/1.1\rHost: portico\r\n\r\n",
            PingoraRefuses,
            "httparse: CR must be followed by LF",
        ),
        case(
            "leading empty line",
            &[b"\r\n".as_slice(), &get("")].concat(),
            Forwards(HEALTH),
            "RFC 9112 §2.2: a server SHOULD ignore one empty line before the request line",
        ),
        case(
            "obs-fold with a space",
            &get("X-A: a\r\n b\r\n"),
            PingoraRefuses,
            "httparse refuses obs-fold in requests (RFC 9112 §5.2)",
        ),
        case(
            "obs-fold with a tab",
            &get("X-A: a\r\n\tb\r\n"),
            PingoraRefuses,
            "httparse refuses obs-fold in requests",
        ),
        case(
            "space before a colon",
            &get("X-A : b\r\n"),
            PingoraRefuses,
            "httparse (RFC 9112 §5.1)",
        ),
        case(
            "field without a colon",
            &get("X-A b\r\n"),
            PingoraRefuses,
            "httparse",
        ),
        case(
            "NUL in a field value",
            &get("X-A: a\0b\r\n"),
            PingoraRefuses,
            "httparse: no control bytes in values",
        ),
        case(
            "non-ASCII in a field value",
            &get("X-Name: caf\u{e9}\r\n"),
            Forwards(HEALTH),
            "obs-text is allowed in values (RFC 9110 §5.5); forwarded as sent",
        ),
        case(
            "request line with an extra word",
            b"GET /v1/health HTTP/1.1 extra\r\nHost: portico\r\n\r\n",
            PingoraRefuses,
            "httparse: the version must end the line",
        ),
        case(
            "HTTP/2.0 on the request line",
            b"GET /v1/health HTTP/2.0\r\nHost: portico\r\n\r\n",
            PingoraRefuses,
            "httparse: only HTTP/1.0 and HTTP/1.1",
        ),
        case(
            "HTTP/1.2 on the request line",
            b"GET /v1/health HTTP/1.2\r\nHost: portico\r\n\r\n",
            PingoraRefuses,
            "httparse: only HTTP/1.0 and HTTP/1.1",
        ),
        case(
            "HTTP/0.9 request line",
            b"GET /v1/health\r\n\r\n",
            PingoraRefuses,
            "no version",
        ),
        case(
            "lower-case version",
            b"GET /v1/health http/1.1\r\nHost: portico\r\n\r\n",
            PingoraRefuses,
            "the version is case-sensitive",
        ),
        case(
            "NUL in the path",
            b"GET /v1/any/a\0b HTTP/1.1\r\nHost: portico\r\n\r\n",
            Forwards(&[("/any/a%00b", b"")]),
            "httparse refuses it; Pingora percent-encodes controls and spaces in the target and \
             parses again; routed on the encoded path",
        ),
        case(
            "non-ASCII in the path",
            b"GET /v1/any/caf\xc3\xa9 HTTP/1.1\r\nHost: portico\r\n\r\n",
            PorticoRefuses,
            "httparse accepts UTF-8 above 0x7E and Pingora keeps it. Portico: refused \
             (RFC 9112 §3: not a valid request line)",
        ),
        case(
            "space in the path",
            b"GET /v1/any/a b HTTP/1.1\r\nHost: portico\r\n\r\n",
            Forwards(&[("/any/a%20b", b"")]),
            "httparse refuses it; Pingora percent-encodes controls and spaces in the target and \
             parses again; routed on the encoded path",
        ),
        case(
            "NUL in the path of a route without a rewrite",
            b"GET /v1/raw/a\0b HTTP/1.1\r\nHost: portico\r\n\r\n",
            Forwards(&[("/v1/raw/a%00b", b"")]),
            "httparse refuses it; Pingora percent-encodes controls and spaces in the target and \
             parses again; routed on the encoded path",
        ),
        case(
            "non-ASCII in the path of a route without a rewrite",
            b"GET /v1/raw/caf\xc3\xa9 HTTP/1.1\r\nHost: portico\r\n\r\n",
            PorticoRefuses,
            "without Portico's check the raw bytes reached the backend's request line. \
             Portico: refused",
        ),
        case(
            "invalid UTF-8 in the path",
            b"GET /v1/raw/a\xffb HTTP/1.1\r\nHost: portico\r\n\r\n",
            PingoraRefuses,
            "httparse requires a UTF-8 target",
        ),
        case(
            "a fragment in the target",
            b"GET /v1/raw/a#frag HTTP/1.1\r\nHost: portico\r\n\r\n",
            Forwards(&[("/v1/raw/a", b"")]),
            "Pingora drops a fragment from the target (RFC 9112 §3.2 has none)",
        ),
        case(
            "absolute-form naming another host",
            b"GET http://evil.example/v1/health HTTP/1.1\r\nHost: portico\r\n\r\n",
            PingoraRefuses,
            "Pingora: Host differs from the request-target authority",
        ),
        case(
            "absolute-form naming the Host",
            b"GET http://portico/v1/health HTTP/1.1\r\nHost: portico\r\n\r\n",
            Forwards(HEALTH),
            "routed on the path; the backend gets origin-form",
        ),
        case(
            "absolute-form without Host",
            b"GET http://evil.example/v1/health HTTP/1.1\r\n\r\n",
            PorticoRefuses,
            "Pingora accepts it. Portico: an HTTP/1.1 request needs a Host (RFC 9112 §3.2)",
        ),
        case(
            "HTTP/1.1 without Host",
            b"GET /v1/health HTTP/1.1\r\n\r\n",
            PorticoRefuses,
            "Pingora accepts it. Portico: refused (RFC 9112 §3.2: MUST respond 400)",
        ),
        case(
            "HTTP/1.0 without Host",
            b"GET /v1/health HTTP/1.0\r\n\r\n",
            Forwards(HEALTH),
            "Host is optional before HTTP/1.1",
        ),
        case(
            "two Host fields",
            &get("Host: other\r\n"),
            PingoraRefuses,
            "Pingora: multiple Host fields",
        ),
        case(
            "userinfo in Host",
            b"GET /v1/health HTTP/1.1\r\nHost: user@portico\r\n\r\n",
            PingoraRefuses,
            "Pingora: userinfo in Host",
        ),
        case(
            "150 header fields",
            &get(&many(150)),
            PorticoRefuses,
            "Pingora takes up to 256. Portico: more than 100 refused, connection closed",
        ),
        case(
            "300 header fields",
            &get(&many(300)),
            PingoraRefuses,
            "httparse: more than Pingora's 256",
        ),
        case(
            "40 KiB of header fields",
            &get(&format!("X-Big: {}\r\n", "a".repeat(40 * 1024))),
            PorticoRefuses,
            "Pingora reads heads up to 1 MiB. Portico: over 32 KiB refused, connection closed",
        ),
        case(
            "a 2 MiB head",
            &get(&format!("X-Big: {}\r\n", "a".repeat(2 * 1024 * 1024))),
            PingoraRefusesOrResets,
            "Pingora stops reading past 1 MiB and answers 400; Portico already past 64 KiB, \
             with 431; the unread rest may turn the close into a reset",
        ),
        case(
            "Upgrade: websocket on an HTTP API",
            &get("Connection: Upgrade\r\nUpgrade: websocket\r\n"),
            Forwards(HEALTH),
            "Portico answers every request itself: Upgrade and Connection are not forwarded, \
             no tunnel is opened",
        ),
        case(
            "CONNECT",
            b"CONNECT portico:443 HTTP/1.1\r\nHost: portico:443\r\n\r\n",
            PingoraAnswers(405),
            "Pingora refuses CONNECT (its framing differs) with 405 and closes",
        ),
    ];
    run(&e, &cases);
}

/// Whether the signature headers the backend received cover the body it received (as the
/// client signed `POST /v1/signed`).
fn signature_holds(s: &Seen) -> bool {
    // The backend never sees the signature headers (docs/PROTOCOL.md, "What backends
    // receive"): what it sees of the verification is `X-Portico-App`, set only after the
    // gateway verified the signature over the body it forwards. That this body is the one
    // the case signed is checked against the case's expected bodies.
    let signature_left_out = [
        sign::HEADER_APP_KEY,
        sign::HEADER_TIMESTAMP,
        sign::HEADER_NONCE,
        sign::HEADER_SIGNATURE,
    ]
    .iter()
    .all(|h| s.header(h).is_none());
    signature_left_out && s.header("x-portico-app") == Some(KEY)
}

/// The signature headers of `POST /v1/signed` over `body`, with a fresh nonce.
fn signed_headers(body: &[u8]) -> String {
    let ts = now_ms().to_string();
    let nonce = nonce();
    let sts = sign::string_to_sign("POST", "/v1/signed", None, KEY, &ts, &nonce, body);
    let sig = sign::sign(SECRET.as_bytes(), &sts);
    format!(
        "{}: {KEY}\r\n{}: {ts}\r\n{}: {nonce}\r\n{}: {sig}\r\n",
        sign::HEADER_APP_KEY,
        sign::HEADER_TIMESTAMP,
        sign::HEADER_NONCE,
        sign::HEADER_SIGNATURE
    )
}

/// `POST /v1/signed` signed over `signed_body`, with these framing headers and this wire body.
fn signed_post(signed_body: &[u8], framing: &str, wire_body: &[u8]) -> Vec<u8> {
    [
        b"POST /v1/signed HTTP/1.1\r\nHost: portico\r\n".as_slice(),
        signed_headers(signed_body).as_bytes(),
        framing.as_bytes(),
        b"\r\n",
        wire_body,
    ]
    .concat()
}

/// The signature covers the body: whatever framing a client sends, the body the gateway
/// verified is the body the backend gets (checked on every forwarded request by
/// `signature_holds`), or the request is refused.
#[test]
fn signed_api() {
    let e = env();
    const SIGNED_HELLO: &[(&str, &[u8])] = &[("/signed", b"hello")];
    let chunked_hello: &[u8] = b"5\r\nhello\r\n0\r\n\r\n";
    let cl_te_wire: &[u8] = b"0\r\n\r\nhello";
    let te_cl = "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n";
    let cl_te = "Content-Length: 10\r\nTransfer-Encoding: chunked\r\n";
    let cases = vec![
        case(
            "baseline: Content-Length",
            &signed_post(b"hello", "Content-Length: 5\r\n", b"hello"),
            Forwards(SIGNED_HELLO),
            "verified and forwarded",
        ),
        case(
            "baseline: chunked",
            &signed_post(b"hello", "Transfer-Encoding: chunked\r\n", chunked_hello),
            Forwards(SIGNED_HELLO),
            "the signature covers the decoded body, which is what is forwarded",
        ),
        case(
            "chunked, signed over the chunked wire bytes",
            &signed_post(
                chunked_hello,
                "Transfer-Encoding: chunked\r\n",
                chunked_hello,
            ),
            Denied(401, "SIGNATURE_INVALID"),
            "the gateway verifies the decoded body, never the wire bytes",
        ),
        case(
            "CL.TE signed over the TE reading",
            &signed_post(b"", cl_te, cl_te_wire),
            PorticoRefuses,
            "Pingora would verify the empty chunked body. Portico: refused before auth",
        ),
        case(
            "CL.TE signed over the CL reading",
            &signed_post(cl_te_wire, cl_te, cl_te_wire),
            PorticoRefuses,
            "Portico: refused before auth",
        ),
        case(
            "TE.CL signed over the CL reading",
            &signed_post(&chunked_hello[..5], te_cl, chunked_hello),
            PorticoRefuses,
            "Portico: refused before auth",
        ),
        case(
            "duplicate Content-Length signed over the shorter body",
            &signed_post(
                b"hello",
                "Content-Length: 5\r\nContent-Length: 11\r\n",
                b"hello world",
            ),
            PingoraRefuses,
            "Pingora refuses conflicting values",
        ),
        case(
            "identity, chunked signed over the decoded body",
            &signed_post(
                b"hello",
                "Transfer-Encoding: identity, chunked\r\n",
                chunked_hello,
            ),
            PorticoRefuses,
            "Portico: only `chunked` alone",
        ),
        case(
            "Transfer-Encoding in two lines",
            &signed_post(
                b"hello",
                "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
                chunked_hello,
            ),
            PorticoRefuses,
            "Portico: one Transfer-Encoding line only",
        ),
        case(
            "trailers and extensions on a signed chunked body",
            &signed_post(
                b"hello",
                "Transfer-Encoding: chunked\r\n",
                b"5;x=y\r\nhello\r\n0\r\nX-Portico-Signature: 00\r\n\r\n",
            ),
            Forwards(SIGNED_HELLO),
            "trailers are dropped, never merged into the signed headers",
        ),
        case(
            "a request inside a signed body",
            &signed_post(
                SMUGGLED.as_bytes(),
                &format!("Content-Length: {}\r\n", SMUGGLED.len()),
                SMUGGLED.as_bytes(),
            ),
            Forwards(SMUGGLED_AS_SIGNED_BODY),
            "only a body",
        ),
        case(
            "a signed head with bare LF line endings",
            &String::from_utf8(signed_post(b"hello", "Content-Length: 5\r\n", b"hello"))
                .unwrap()
                .replace("\r\n", "\n")
                .into_bytes(),
            PorticoRefuses,
            "Portico: refused before auth",
        ),
    ];
    run(&e, &cases);
}

/// Requests pipelined in one write: answered in order, or the first answered and the
/// connection closed; the backend gets exactly the answered ones.
///
/// Pingora 0.9 has pipelining off by default (Portico leaves it off): bytes read past the
/// end of a request mean the connection is not reused, so the first request is answered and
/// the connection closed; the client retries the rest (RFC 9112 §9.3.2 lets a server close).
#[test]
fn pipelined_requests() {
    let e = env();
    let get = |path: &str, id: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: portico\r\nX-Portico-Request-Id: {id}\r\n\r\n")
    };
    let post = |id: &str, framing: &str, body: &str| {
        format!(
            "POST /v1/echo HTTP/1.1\r\nHost: portico\r\nX-Portico-Request-Id: {id}\r\n\
             {framing}\r\n{body}"
        )
    };
    // (name, what is written, the requests in it: (request id, backend path)).
    type Pipelined = (&'static str, String, Vec<(&'static str, &'static str)>);
    let cases: Vec<Pipelined> = vec![
        (
            "two GETs in one write",
            get("/v1/health", "p1") + &get("/v1/smuggled", "p2"),
            vec![("p1", "/health"), ("p2", "/smuggled")],
        ),
        (
            "three requests in one write",
            get("/v1/health", "p1")
                + &post("p2", "Content-Length: 5\r\n", "hello")
                + &get("/v1/smuggled", "p3"),
            vec![("p1", "/health"), ("p2", "/echo"), ("p3", "/smuggled")],
        ),
        (
            "a chunked POST then a GET",
            post(
                "p1",
                "Transfer-Encoding: chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ) + &get("/v1/smuggled", "p2"),
            vec![("p1", "/echo"), ("p2", "/smuggled")],
        ),
        (
            "a Content-Length POST followed at once by a GET",
            post("p1", "Content-Length: 5\r\n", "hello") + &get("/v1/smuggled", "p2"),
            vec![("p1", "/echo"), ("p2", "/smuggled")],
        ),
    ];
    let mut failures = Vec::new();
    for (name, wire, sent) in &cases {
        let _ = e.rec.take();
        let mut conn = Conn::open(&e.gw);
        conn.send(wire.as_bytes());
        let mut answered = Vec::new();
        while answered.len() < sent.len() {
            let Some(r) = conn.final_response() else {
                break;
            };
            assert_eq!(r.status, 200, "{name}: {}", r.head);
            answered.push(r.header("x-portico-request-id").unwrap_or("").to_owned());
        }
        if answered.len() == sent.len() {
            conn.half_close();
        }
        let end = conn.end();
        let (seen, violations) = e.rec.take();
        let forwarded: Vec<(String, String)> = seen
            .iter()
            .map(|s| {
                let id = s.header("x-portico-request-id").unwrap_or("").to_owned();
                (id, s.target.clone())
            })
            .collect();
        let want: Vec<(String, String)> = sent[..answered.len()]
            .iter()
            .map(|(id, path)| (id.to_string(), path.to_string()))
            .collect();
        let ids: Vec<String> = want.iter().map(|(id, _)| id.clone()).collect();
        if answered.is_empty()
            || answered != ids
            || forwarded != want
            || end != End::Closed
            || !violations.is_empty()
        {
            failures.push(format!(
                "{name}: answered {answered:?}, backend saw {forwarded:?}, then {end:?}, \
                 violations {violations:?}"
            ));
        }
        eprintln!("{name}: {} of {} answered", answered.len(), sent.len());
    }
    // Sequential requests on one connection are all served (keepalive is not lost).
    let mut conn = Conn::open(&e.gw);
    for id in ["s1", "s2", "s3"] {
        conn.send(get("/v1/health", id).as_bytes());
        let r = conn
            .final_response()
            .expect("a response on a kept-alive connection");
        assert_eq!(r.header("x-portico-request-id"), Some(id), "{}", r.head);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `Expect: 100-continue` (RFC 9110 §10.1.1): a `100 Continue` before the body is read, or a
/// final answer without reading the body, after which the connection is closed so the body
/// cannot be read as a request.
#[test]
fn expect_continue() {
    let e = env();
    let head = |path: &str, len: usize, extra: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: portico\r\nContent-Length: {len}\r\n\
             Expect: 100-continue\r\n{extra}\r\n"
        )
    };

    // Routable: 100, then the body, then the backend's answer.
    let _ = e.rec.take();
    let mut conn = Conn::open(&e.gw);
    conn.send(head("/v1/echo", 5, "").as_bytes());
    let r = conn.response().expect("a response");
    assert_eq!(r.status, 100, "{}", r.head);
    conn.send(b"hello");
    let r = conn.final_response().expect("the final response");
    assert_eq!(r.status, 200, "{}", r.head);
    let (seen, violations) = e.rec.take();
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, b"hello");
    assert!(seen[0].header("expect").is_none(), "{:?}", seen[0]);
    // And the connection is still good for another request.
    conn.send(head("/v1/echo", 5, "").as_bytes());
    assert_eq!(conn.response().expect("100").status, 100);
    conn.send(b"hello");
    assert_eq!(conn.final_response().expect("200").status, 200);
    let _ = e.rec.take();

    // Body sent at once without waiting: still one request.
    let mut conn = Conn::open(&e.gw);
    conn.send(&[head("/v1/echo", 5, "").as_bytes(), b"hello"].concat());
    let r = conn.final_response().expect("the final response");
    assert_eq!(r.status, 200, "{}", r.head);
    conn.half_close();
    assert_eq!(conn.end(), End::Closed);
    let (seen, _) = e.rec.take();
    assert_eq!(seen.len(), 1);

    // Refused on the head: the final answer comes first, no 100; the body that follows (a
    // request) is never read as one.
    for (path, len, status, code) in [
        ("/v1/nope", SMUGGLED.len(), 404, "API_NOT_FOUND"),
        ("/v1/echo", ECHO_LIMIT + 1, 413, "BODY_TOO_LARGE"),
    ] {
        let mut conn = Conn::open(&e.gw);
        conn.send(head(path, len, "").as_bytes());
        let r = conn.response().expect("a response");
        assert_eq!(r.status, status, "{}", r.head);
        assert_eq!(r.code().as_deref(), Some(code));
        conn.send(SMUGGLED.as_bytes());
        assert_eq!(conn.end(), End::Closed, "{path}");
        let (seen, _) = e.rec.take();
        assert!(seen.is_empty(), "{seen:?}");
    }

    // A refusal after the 100 (the signature is checked once the body is in) still gets the
    // envelope.
    let mut conn = Conn::open(&e.gw);
    let bad = signed_headers(b"something else");
    conn.send(head("/v1/signed", 5, &bad).as_bytes());
    assert_eq!(conn.response().expect("100").status, 100);
    conn.send(b"hello");
    let r = conn.final_response().expect("the final response");
    assert_eq!(r.status, 401, "{}", r.head);
    assert_eq!(r.code().as_deref(), Some("SIGNATURE_INVALID"));
    assert!(r.header("x-portico-request-id").is_some());
    let (seen, _) = e.rec.take();
    assert!(seen.is_empty(), "{seen:?}");

    // HTTP/1.0 has no 100 (RFC 9110 §10.1.1): the body is simply read.
    let mut conn = Conn::open(&e.gw);
    conn.send(
        &[
            head("/v1/echo", 5, "")
                .replacen("HTTP/1.1", "HTTP/1.0", 1)
                .as_bytes(),
            b"hello",
        ]
        .concat(),
    );
    let r = conn.response().expect("a response");
    assert_eq!(r.status, 200, "{}", r.head);
}
