//! Generic invocation against a gRPC stack Portico did not write: a Python grpcio (gRPC
//! C-core) server (`grpcio_server.py` beside this file) on a free loopback port, behind a
//! real gateway process, called over HTTP/1.1 as a merchant would. What broke against
//! backend teams' servers (issue 29) and must not again: long calls killed by the gateway's
//! PINGs, gzip replies, `max_concurrent_streams`, NaN/±Infinity in wrappers, large request
//! headers as metadata.
//!
//! The interpreter is `PORTICO_GRPCIO_PYTHON` (ops/test.sh exports it after installing the
//! pinned grpcio and protobuf into .run/venv), else `.run/venv/bin/python`; a test without
//! it fails saying how to install it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use sha2::Digest;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.run/venv/bin/python");
    let py = std::env::var_os("PORTICO_GRPCIO_PYTHON")
        .map(PathBuf::from)
        .unwrap_or(venv);
    let ok = Command::new(&py)
        .args(["-c", "import grpc, google.protobuf"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import grpc and google.protobuf: run ./ops/test.sh, or \
         `bash -c '. ops/lib.sh && ensure_grpcio'` and set PORTICO_GRPCIO_PYTHON to the \
         python it prints",
        py.display()
    );
    py
}

/// The grpcio server; stopped when dropped (its stdin closes, and it is killed).
struct Grpcio {
    child: Child,
    addr: String,
    descriptor: Vec<u8>,
}

impl Grpcio {
    fn start(flags: &[&str]) -> Grpcio {
        let py = python();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("interop.pb");
        let port = free_port();
        let mut child = Command::new(py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpcio_server.py"))
            .args(["--port", &port.to_string(), "--descriptor-out"])
            .arg(&out)
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn grpcio_server.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "grpcio_server.py did not start");
        Grpcio {
            child,
            addr: format!("127.0.0.1:{port}"),
            descriptor: std::fs::read(&out).unwrap(),
        }
    }
}

impl Drop for Grpcio {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway process on its own tree, with extra environment (killed when dropped).
struct Gateway {
    child: Child,
    listen: SocketAddr,
    _tree: ConfigTree,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    /// The gateway in front of `server`: API `interop.call` (`POST /v1/interop`, body `*`,
    /// `auth: none`) with `timeout_ms`.
    fn start(server: &Grpcio, timeout_ms: u64, env: &[(&str, &str)]) -> Gateway {
        let t = ConfigTree::new();
        let sha = hex::encode(sha2::Sha256::digest(&server.descriptor));
        std::fs::create_dir_all(t.path().join("descriptors")).unwrap();
        std::fs::write(
            t.path().join(format!("descriptors/{sha}.pb")),
            &server.descriptor,
        )
        .unwrap();
        t.put(
            "clusters/grpcio",
            &json!({"protocol": "grpc", "endpoints": [{"addr": server.addr}]}),
        );
        t.put("apis/interop.call", &json!({
            "id": "interop.call",
            "http": {"method": "POST", "path": "/v1/interop", "body": "*"},
            "backend": {"cluster": "grpcio", "timeout_ms": timeout_ms,
                        "grpc": {"service": "interop.v1.Interop", "method": "Call", "descriptor": sha}},
            "auth": "none",
            "policy": {"bulkhead": {"max_concurrent": 100}}
        }));
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_portico-gateway"));
        cmd.arg("--config-dir")
            .arg(t.path())
            .args(["--listen", &listen.to_string()])
            .args(["--admin-listen", &admin.to_string()])
            .args(["--internal-listen", "off", "--threads", "2"])
            .env("PORTICO_LOG", "warn,portico_gateway::invoke=info")
            .env_remove("PORTICO_GRPC_KEEPALIVE_MS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let gw = Gateway {
            child: cmd.spawn().expect("spawn portico-gateway"),
            listen,
            _tree: t,
        };
        let http = client();
        assert!(
            wait_until(Duration::from_secs(30), || http
                .get(format!("http://{admin}/readyz"))
                .send()
                .is_ok_and(|r| r.status() == 200)),
            "gateway never became ready"
        );
        assert!(wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(listen).is_ok()
        }));
        gw
    }

    fn call(&self, http: &reqwest::blocking::Client, body: Value) -> (u16, Value) {
        let resp = http
            .post(format!("http://{}/v1/interop", self.listen))
            .json(&body)
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
    }
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(25))
        .build()
        .unwrap()
}

#[test]
fn gzip_replies_from_grpcio_answer_200() {
    let server = Grpcio::start(&["--gzip"]);
    let gw = Gateway::start(&server, 5000, &[]);
    let http = http();
    // Compressible replies (grpc-core sends one uncompressed when gzip makes it no smaller),
    // up to 3 MiB.
    for (i, pad) in [1000usize, 100_000, 3 << 20].into_iter().enumerate() {
        let (status, v) = gw.call(&http, json!({"name": format!("gz{i}"), "pad": pad}));
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            v["greeting"],
            format!("hello gz{i}{}", ".".repeat(pad)),
            "pad {pad}"
        );
    }
    let (status, v) = gw.call(&http, json!({"name": "n", "mode": "nonfinite", "pad": 500}));
    assert_eq!((status, &v["wDouble"]), (200, &json!("NaN")), "{v}");
    // Over the 4 MiB reply limit once decompressed (a few KiB on the wire): refused, and the
    // gateway still answers the next call.
    let (status, v) = gw.call(&http, json!({"name": "bomb", "pad": 64 << 20}));
    assert_eq!((status, &v["code"]), (502, &json!("UPSTREAM_ERROR")), "{v}");
    let (status, _) = gw.call(&http, json!({"name": "after", "pad": 1000}));
    assert_eq!(status, 200);
}

#[test]
fn non_finite_numbers_in_wrappers_and_fields_are_proto3_json_strings() {
    let server = Grpcio::start(&[]);
    let gw = Gateway::start(&server, 5000, &[]);
    let http = http();
    let (status, v) = gw.call(&http, json!({"name": "n", "mode": "nonfinite"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["wDouble"], &v["wFloat"], &v["d"], &v["f"]),
        (
            &json!("NaN"),
            &json!("Infinity"),
            &json!("-Infinity"),
            &json!("NaN")
        ),
        "{v}"
    );
    let (status, v) = gw.call(&http, json!({"name": "n", "mode": "nonfinite2"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["wDouble"], &v["wFloat"], &v["d"], &v["f"]),
        (
            &json!("-Infinity"),
            &json!("NaN"),
            &json!("NaN"),
            &json!("Infinity")
        ),
        "{v}"
    );
}

#[test]
fn twenty_concurrent_calls_to_a_server_allowing_two_streams_all_answer() {
    let server = Grpcio::start(&["--max-streams", "2"]);
    let gw = Gateway::start(&server, 15000, &[]);
    let http = http();
    // Twice: on a fresh connection (the calls go out before the server's SETTINGS arrive),
    // then on the established one.
    for round in ["fresh", "established"] {
        let started = Instant::now();
        let statuses: Vec<(u16, Value)> = std::thread::scope(|s| {
            let calls: Vec<_> = (0..20)
                .map(|i| {
                    let (gw, http) = (&gw, &http);
                    s.spawn(move || {
                        gw.call(http, json!({"name": format!("c{i}"), "delay_ms": 100}))
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        let ok = statuses.iter().filter(|(s, _)| *s == 200).count();
        eprintln!(
            "{round} connection: {ok}/20 answered 200 in {} ms",
            started.elapsed().as_millis()
        );
        assert_eq!(ok, 20, "{round}: {statuses:?}");
        for (i, (_, v)) in statuses.iter().enumerate() {
            assert_eq!(v["greeting"], format!("hello c{i}"));
        }
    }
}

#[test]
fn twelve_kib_of_request_headers_reach_grpcio() {
    let server = Grpcio::start(&[]);
    let gw = Gateway::start(&server, 5000, &[]);
    let http = http();
    let filler = "v".repeat(1000);
    let mut request = http
        .post(format!("http://{}/v1/interop", gw.listen))
        .header("authorization", "Bearer token-1")
        .header(
            "x-city",
            reqwest::header::HeaderValue::from_bytes("Zürich".as_bytes()).unwrap(),
        )
        .json(&json!({"name": "big"}));
    for i in 0..12 {
        request = request.header(format!("x-custom-{i}"), &filler);
    }
    // Random over runs before: grpcio's limit is counted per call, with HPACK's overhead.
    for _ in 0..5 {
        let resp = request.try_clone().unwrap().send().unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().unwrap();
        assert_eq!(status, 200, "{v}");
        let keys: Vec<&str> = v["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let custom = keys.iter().filter(|k| k.starts_with("x-custom-")).count();
        let size = v["metadataBytes"].as_i64().unwrap();
        eprintln!("grpcio received {size} bytes of metadata, {custom} of 12 x-custom-* headers");
        assert!(size < 8192, "{size}");
        assert!(custom >= 1, "{keys:?}");
        for key in ["authorization", "x-portico-request-id", "x-forwarded-for"] {
            assert!(keys.contains(&key), "{key}: {keys:?}");
        }
        assert!(!keys.contains(&"x-city"), "a non-ASCII value: {keys:?}");
    }
}

#[test]
fn a_long_call_to_a_server_with_a_strict_ping_policy_is_not_killed() {
    let server = Grpcio::start(&["--strict-pings"]);
    // The gateway as shipped: no keep-alive PINGs.
    let gw = Gateway::start(&server, 20000, &[]);
    let http = http();
    let started = Instant::now();
    let (status, v) = gw.call(&http, json!({"name": "long", "delay_ms": 4000}));
    let took = started.elapsed();
    eprintln!("a 4 s call: {status} after {} ms", took.as_millis());
    assert_eq!((status, &v["greeting"]), (200, &json!("hello long")), "{v}");
    drop(gw);
    // The same server kills a call when pinged (what a 30 s interval did at ~2 min against
    // grpcio's default policy), so the test above is not vacuous.
    let pinging = Gateway::start(&server, 20000, &[("PORTICO_GRPC_KEEPALIVE_MS", "200")]);
    let started = Instant::now();
    let (status, v) = pinging.call(&http, json!({"name": "long", "delay_ms": 4000}));
    eprintln!(
        "with PINGs every 200 ms: {status} after {} ms ({v})",
        started.elapsed().as_millis()
    );
    assert_ne!(status, 200, "{v}");
}
