//! Generic invocation against gRPC stacks Portico did not write (issue 29), each on a free
//! loopback port behind a real gateway process, called over HTTP/1.1 as a merchant would:
//!
//! - Python grpcio (gRPC C-core), `grpcio_server.py` beside this file;
//! - Node @grpc/grpc-js (pure JavaScript on Node's http2), `grpcjs_server.js` beside it.
//!
//! Both publish one interop.v1.Interop/Call service: grpcio_server.py defines it and writes
//! its FileDescriptorSet, which the grpc-js server loads (@grpc/proto-loader) and the gateway
//! gets as the API's descriptor. Every scenario runs against both (`mod <scenario> { grpcio,
//! grpcjs }`); where grpc-js cannot do what the scenario needs, the test says so and checks
//! what grpc-js does instead. What broke against backend teams' servers and must not again:
//! long calls killed by the gateway's PINGs, gzip replies, `max_concurrent_streams`,
//! NaN/±Infinity in wrappers, large request headers as metadata; and what a backend's life
//! does to calls in flight: `max_connection_age` rotation, a graceful stop, a restart under
//! load, an idle connection, a 3-minute call.
//!
//! The slow lane (`#[ignore = "slow lane: ./ops/test.sh --slow"]`: minutes of waiting each)
//! runs with `cargo test -p portico-gateway --test grpc_interop -- --ignored
//! --test-threads 8`; ./ops/test.sh runs it in the background beside the main tests when
//! gateway/src/invoke changed since it last passed (ops/slow-lane.stamp), and always with
//! `--slow` (docs/OPERATIONS.md, "Test lanes").
//!
//! grpcio's interpreter is `PORTICO_GRPCIO_PYTHON` (ops/test.sh exports it after installing the
//! pinned grpcio and protobuf into .run/venv), else `.run/venv/bin/python`; grpc-js is
//! `PORTICO_GRPCJS_DIR/node_modules` (ops/test.sh: `npm ci` of gateway/tests/grpcjs), else
//! gateway/tests/grpcjs/node_modules, run by `node`. A test without them fails saying how to
//! install them. The grpc-js tests need the Python side too (it writes the descriptor).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use sha2::Digest;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::*;

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

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

/// The directory whose node_modules has the pinned @grpc/grpc-js and @grpc/proto-loader.
fn grpcjs_dir() -> PathBuf {
    let dir = std::env::var_os("PORTICO_GRPCJS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tests_dir().join("grpcjs"));
    let modules = ["@grpc/grpc-js", "@grpc/proto-loader"].iter().all(|m| {
        dir.join("node_modules")
            .join(m)
            .join("package.json")
            .is_file()
    });
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        modules && node,
        "no node, or no @grpc/grpc-js and @grpc/proto-loader in {}/node_modules: run \
         ./ops/test.sh, or `bash -c '. ops/lib.sh && ensure_grpcjs'` (npm ci of \
         gateway/tests/grpcjs) and set PORTICO_GRPCJS_DIR to the directory it prints",
        dir.display()
    );
    dir
}

/// The service's FileDescriptorSet, as grpcio_server.py defines it (`--descriptor-only`).
fn descriptor() -> &'static [u8] {
    static SET: OnceLock<Vec<u8>> = OnceLock::new();
    SET.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("interop.pb");
        let status = Command::new(python())
            .arg(tests_dir().join("grpcio_server.py"))
            .args(["--descriptor-only", "--descriptor-out"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "grpcio_server.py --descriptor-only");
        std::fs::read(&out).unwrap()
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stack {
    /// Python grpcio 1.85 (gRPC C-core).
    Grpcio,
    /// Node @grpc/grpc-js 1.14.
    GrpcJs,
}

/// A gRPC server of one stack on a fixed free port; stopped when dropped (its stdin closes,
/// and it is killed). It can be killed and started again on the same port.
struct Server {
    stack: Stack,
    flags: Vec<String>,
    port: u16,
    addr: String,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Server {
    fn start(stack: Stack, flags: &[&str]) -> Server {
        let port = free_port();
        let mut server = Server {
            stack,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            port,
            addr: format!("127.0.0.1:{port}"),
            child: None,
            dir: tempfile::tempdir().unwrap(),
        };
        server.spawn();
        server
    }

    /// Starts the process (again) on the server's port; returns once it prints "ready".
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "already running");
        let pb = self.dir.path().join("interop.pb");
        let mut cmd = match self.stack {
            Stack::Grpcio => {
                let mut cmd = Command::new(python());
                cmd.arg(tests_dir().join("grpcio_server.py"))
                    .arg("--descriptor-out")
                    .arg(&pb);
                cmd
            }
            Stack::GrpcJs => {
                let dir = grpcjs_dir();
                std::fs::write(&pb, descriptor()).unwrap();
                let mut cmd = Command::new("node");
                cmd.arg(tests_dir().join("grpcjs_server.js"))
                    .arg("--descriptor")
                    .arg(&pb)
                    .env("PORTICO_GRPCJS_DIR", dir);
                cmd
            }
        };
        let mut child = cmd
            .args(["--port", &self.port.to_string()])
            .args(&self.flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn the {:?} server: {e}", self.stack));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "the {:?} server did not start",
            self.stack
        );
        if self.stack == Stack::Grpcio {
            assert_eq!(
                std::fs::read(&pb).unwrap(),
                descriptor(),
                "grpcio publishes the set grpc-js loads"
            );
        }
        self.child = Some(child);
    }

    /// SIGKILL, as a crash or `kill -9` would: no GOAWAY, connections reset.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A graceful stop (grpcio `server.stop(grace)`, grpc-js `tryShutdown` then
    /// `forceShutdown` after `grace_ms`): GOAWAY, the listener closed, calls in flight finish.
    fn stop_gracefully(&mut self, grace_ms: u64) {
        let stdin = self.child.as_mut().unwrap().stdin.as_mut().unwrap();
        writeln!(stdin, "graceful {grace_ms}").unwrap();
        stdin.flush().unwrap();
    }

    /// Whether the process exited within `limit`.
    fn exited_within(&mut self, limit: Duration) -> bool {
        let child = self.child.as_mut().unwrap();
        wait_until(limit, || child.try_wait().unwrap().is_some())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            drop(child.stdin.take());
        }
        self.kill();
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
    fn start(server: &Server, timeout_ms: u64, env: &[(&str, &str)]) -> Gateway {
        Gateway::start_cluster(&[server], timeout_ms, env)
    }

    /// The same, on a cluster of `servers` (round-robin, the default).
    fn start_cluster(servers: &[&Server], timeout_ms: u64, env: &[(&str, &str)]) -> Gateway {
        let t = ConfigTree::new();
        let sha = hex::encode(sha2::Sha256::digest(descriptor()));
        std::fs::create_dir_all(t.path().join("descriptors")).unwrap();
        std::fs::write(t.path().join(format!("descriptors/{sha}.pb")), descriptor()).unwrap();
        let endpoints: Vec<Value> = servers.iter().map(|s| json!({"addr": s.addr})).collect();
        t.put(
            "clusters/interop",
            &json!({"protocol": "grpc", "endpoints": endpoints}),
        );
        t.put("apis/interop.call", &json!({
            "id": "interop.call",
            "http": {"method": "POST", "path": "/v1/interop", "body": "*"},
            "backend": {"cluster": "interop", "timeout_ms": timeout_ms,
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
        self.try_call(http, body).unwrap()
    }

    /// A call whose transport failure (no answer from the gateway) is an `Err`, not a panic.
    fn try_call(
        &self,
        http: &reqwest::blocking::Client,
        body: Value,
    ) -> Result<(u16, Value), String> {
        let resp = http
            .post(format!("http://{}/v1/interop", self.listen))
            .json(&body)
            .send()
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        Ok((status, resp.json().unwrap_or(Value::Null)))
    }
}

fn http() -> reqwest::blocking::Client {
    http_timeout(Duration::from_secs(25))
}

fn http_timeout(timeout: Duration) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .unwrap()
}

/// An answer for a summary: `200`, `503 CIRCUIT_OPEN: <message>`, `transport: <error>`.
fn outcome(r: &Result<(u16, Value), String>) -> String {
    match r {
        Ok((200, _)) => "200".into(),
        Ok((status, v)) => format!(
            "{status} {}: {}",
            v["code"].as_str().unwrap_or("?"),
            v["message"].as_str().unwrap_or("?")
        ),
        Err(e) => format!("transport: {e}"),
    }
}

/// A scenario run against each stack: `mod $name { fn grpcio(); fn grpcjs(); }`, with the
/// attributes given (`#[ignore = ...]` for the slow lane).
macro_rules! each_stack {
    ($(#[$attr:meta])* fn $name:ident($stack:ident: Stack) $body:block) => {
        mod $name {
            use super::*;

            fn scenario($stack: Stack) $body

            #[test]
            $(#[$attr])*
            fn grpcio() {
                scenario(Stack::Grpcio)
            }

            #[test]
            $(#[$attr])*
            fn grpcjs() {
                scenario(Stack::GrpcJs)
            }
        }
    };
}

// --- main lane ------------------------------------------------------------------------------

each_stack! {
    /// Compressible replies up to 3 MiB answer 200, and a reply of 100 MiB (a compression bomb
    /// of about 100 KiB on the wire from grpcio) is refused without the gateway holding it.
    ///
    /// grpcio with `compression=Gzip` compresses every reply whether or not the client asked
    /// (grpc-core sends one uncompressed when gzip would not make it smaller: pad makes it
    /// compressible). The grpc-js server never compresses a reply, whatever its options
    /// (`grpc.default_compression_algorithm` is for its client side): against it the same
    /// calls check plain replies up to 3 MiB, and the 100 MiB reply crosses the wire as is,
    /// which the gateway must stop reading at its 4 MiB limit.
    fn gzip_replies_up_to_3_mib_and_a_100_mib_bomb_refused(stack: Stack) {
        let server = Server::start(stack, &["--gzip"]);
        let gw = Gateway::start(&server, 20000, &[]);
        let http = http();
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
        // Over the 4 MiB reply limit once decompressed: refused, and the gateway still
        // answers the next call.
        let started = Instant::now();
        let (status, v) = gw.call(&http, json!({"name": "bomb", "pad": 100 << 20}));
        eprintln!(
            "{stack:?}: a 100 MiB reply answered {status} in {} ms",
            started.elapsed().as_millis()
        );
        assert_eq!((status, &v["code"]), (502, &json!("UPSTREAM_ERROR")), "{v}");
        let (status, _) = gw.call(&http, json!({"name": "after", "pad": 1000}));
        assert_eq!(status, 200);
    }
}

each_stack! {
    fn non_finite_numbers_in_wrappers_and_fields_are_proto3_json_strings(stack: Stack) {
        let server = Server::start(stack, &[]);
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
}

each_stack! {
    /// grpcio: `grpc.max_concurrent_streams`; grpc-js: the same option, passed to Node's
    /// http2 as `settings.maxConcurrentStreams` (nghttp2 refuses the extra streams with
    /// REFUSED_STREAM, as grpc-core does).
    fn twenty_concurrent_calls_on_two_streams_all_answer(stack: Stack) {
        let server = Server::start(stack, &["--max-streams", "2"]);
        let gw = Gateway::start(&server, 15000, &[]);
        let http = http();
        // Twice: on a fresh connection (the calls go out before the server's SETTINGS
        // arrive), then on the established one.
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
                "{stack:?}, {round} connection: {ok}/20 answered 200 in {} ms",
                started.elapsed().as_millis()
            );
            assert_eq!(ok, 20, "{round}: {statuses:?}");
            for (i, (_, v)) in statuses.iter().enumerate() {
                assert_eq!(v["greeting"], format!("hello c{i}"));
            }
        }
    }
}

each_stack! {
    /// 12 KiB of request headers: the gateway forwards a bounded part as metadata. grpcio
    /// refuses more than 8 KiB (`grpc.max_metadata_size`, counted per call with 32 bytes per
    /// entry); grpc-js would take up to Node's `maxHeaderListSize` (64 KiB) but drops, with a
    /// log line, any entry whose value is not ASCII, so against it the `x-city` check below
    /// would pass even if the gateway sent one: the grpcio run is the one that proves it.
    fn twelve_kib_of_request_headers_arrive_bounded(stack: Stack) {
        let server = Server::start(stack, &[]);
        let gw = Gateway::start(&server, 5000, &[]);
        let http = http();
        let filler = "v".repeat(1000);
        let city = reqwest::header::HeaderValue::from_bytes("Zürich".as_bytes()).unwrap();
        // `grpc-metadata-<key>` is metadata `<key>` by grpc-gateway's convention, whatever
        // else the gateway forwards (docs/PROTOCOL.md, "What backends receive").
        let mut request = http
            .post(format!("http://{}/v1/interop", gw.listen))
            .header("authorization", "Bearer token-1")
            .header("x-city", city.clone())
            .header("grpc-metadata-x-city", city)
            .json(&json!({"name": "big"}));
        for i in 0..12 {
            request = request.header(format!("grpc-metadata-x-custom-{i}"), &filler);
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
            eprintln!(
                "{stack:?} received {size} bytes of metadata, {custom} of 12 x-custom-* entries"
            );
            assert!(size < 8192, "{size}");
            assert!(custom >= 1, "{keys:?}");
            for key in ["authorization", "x-portico-request-id", "x-forwarded-for"] {
                assert!(keys.contains(&key), "{key}: {keys:?}");
            }
            assert!(!keys.contains(&"x-city"), "a non-ASCII value: {keys:?}");
        }
    }
}

each_stack! {
    /// A 4 s call through the gateway as shipped (no keep-alive PINGs) answers 200.
    ///
    /// grpcio runs with a PING policy stricter than grpc-core's default (one PING without
    /// data and the connection is closed with GOAWAY `too_many_pings`), and the same server
    /// kills the call when the gateway pings every 200 ms, so the first check is not vacuous.
    /// The grpc-js server has no PING policy at all (`grpc.http2.min_ping_interval_without_data_ms`,
    /// `grpc.http2.max_ping_strikes`, `grpc.keepalive_permit_without_calls` exist only on its
    /// client side): it answers every PING, so against it the pinging gateway's call must
    /// answer 200 as well.
    fn a_long_call_under_a_strict_ping_policy_is_not_killed(stack: Stack) {
        let flags: &[&str] = match stack {
            Stack::Grpcio => &["--strict-pings"],
            Stack::GrpcJs => &[],
        };
        let server = Server::start(stack, flags);
        let gw = Gateway::start(&server, 20000, &[]);
        let http = http();
        let started = Instant::now();
        let (status, v) = gw.call(&http, json!({"name": "long", "delay_ms": 4000}));
        eprintln!(
            "{stack:?}: a 4 s call: {status} after {} ms",
            started.elapsed().as_millis()
        );
        assert_eq!((status, &v["greeting"]), (200, &json!("hello long")), "{v}");
        drop(gw);
        let pinging = Gateway::start(&server, 20000, &[("PORTICO_GRPC_KEEPALIVE_MS", "200")]);
        let started = Instant::now();
        let (status, v) = pinging.call(&http, json!({"name": "long", "delay_ms": 4000}));
        eprintln!(
            "{stack:?}: with PINGs every 200 ms: {status} after {} ms ({v})",
            started.elapsed().as_millis()
        );
        match stack {
            Stack::Grpcio => assert_ne!(status, 200, "{v}"),
            Stack::GrpcJs => assert_eq!(status, 200, "{v}"),
        }
    }
}

each_stack! {
    /// `grpc.max_connection_age_ms` 500 (both stacks: GOAWAY after 450..550 ms, then up to
    /// 5 s of grace): 200 calls from 4 clients over about 3 s cross several rotations of
    /// each of the gateway's connections, and none fails. The peer each call came from
    /// (the gateway's side of the connection) shows the rotations.
    fn max_connection_age_rotation_loses_no_call(stack: Stack) {
        let server = Server::start(stack, &["--max-age-ms", "500"]);
        let gw = Gateway::start(&server, 5000, &[]);
        let http = http();
        let started = Instant::now();
        let results: Vec<Result<(u16, Value), String>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|w| {
                    let (gw, http) = (&gw, &http);
                    s.spawn(move || {
                        (0..50)
                            .map(|i| {
                                gw.try_call(
                                    http,
                                    json!({"name": format!("w{w}c{i}"), "delay_ms": 50}),
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        let took = started.elapsed();
        let failed: Vec<String> = results
            .iter()
            .filter(|r| !matches!(r, Ok((200, _))))
            .map(outcome)
            .collect();
        let peers: BTreeSet<&str> = results
            .iter()
            .filter_map(|r| r.as_ref().ok()?.1["peer"].as_str())
            .collect();
        eprintln!(
            "{stack:?}: {} calls in {} ms over {} connections, {} failed {failed:?}",
            results.len(),
            took.as_millis(),
            peers.len(),
            failed.len()
        );
        assert!(failed.is_empty(), "{failed:?}");
        // A connection lives at most ~0.55 s: 2.5 s or more of calls (50 × 50 ms each, in turn)
        // need 5 at the very least; 4 leaves room.
        assert!(peers.len() >= 4, "too few rotations to mean anything: {peers:?}");
    }
}

each_stack! {
    /// A backend's rolling restart: of two endpoints, one stops gracefully (grpcio
    /// `server.stop(10)`; grpc-js `tryShutdown`, `forceShutdown` after 10 s) while calls
    /// are in flight on it and 4 clients keep calling. The calls in flight finish (200);
    /// a call meeting the GOAWAY'd connection, including one that reached the server as it
    /// began shutting down (grpcio cancels those: once `500 CANCELLED`), is tried again on
    /// the other endpoint or a new connection; none fails.
    fn a_graceful_stop_during_calls_fails_none(stack: Stack) {
        let mut stopping = Server::start(stack, &[]);
        let other = Server::start(stack, &[]);
        let gw = Gateway::start_cluster(&[&stopping, &other], 15000, &[]);
        let http = http();
        for i in 0..10 {
            let (status, v) = gw.call(&http, json!({"name": format!("warm{i}")}));
            assert_eq!(status, 200, "{v}");
        }
        let (long, load) = std::thread::scope(|s| {
            // Round-robin: two of these four land on the endpoint that stops.
            let long: Vec<_> = (0..4)
                .map(|i| {
                    let (gw, http) = (&gw, &http);
                    s.spawn(move || {
                        gw.try_call(http, json!({"name": format!("long{i}"), "delay_ms": 2000}))
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(500));
            stopping.stop_gracefully(10_000);
            let until = Instant::now() + Duration::from_secs(3);
            let load: Vec<_> = (0..4)
                .map(|w| {
                    let (gw, http) = (&gw, &http);
                    s.spawn(move || {
                        let mut out = Vec::new();
                        while Instant::now() < until {
                            out.push(gw.try_call(
                                http,
                                json!({"name": format!("w{w}"), "delay_ms": 20}),
                            ));
                        }
                        out
                    })
                })
                .collect();
            let long: Vec<_> = long.into_iter().map(|c| c.join().unwrap()).collect();
            let load: Vec<_> = load.into_iter().flat_map(|c| c.join().unwrap()).collect();
            (long, load)
        });
        let long: Vec<String> = long.iter().map(outcome).collect();
        let mut tally: BTreeMap<String, usize> = BTreeMap::new();
        for r in &load {
            *tally.entry(outcome(r)).or_default() += 1;
        }
        eprintln!("{stack:?}: calls in flight at the stop: {long:?}; calls during it: {tally:?}");
        assert!(long.iter().all(|o| o == "200"), "{long:?}");
        assert_eq!(tally.keys().collect::<Vec<_>>(), ["200"], "{tally:?}");
        assert!(load.len() >= 40, "too few calls: {tally:?}");
        // Not vacuous: the server did stop (its calls done, well before the 10 s grace).
        assert!(stopping.exited_within(Duration::from_secs(5)), "it never stopped");
    }
}

// --- slow lane ------------------------------------------------------------------------------

each_stack! {
    /// A backend killed (SIGKILL) under ~20 calls/s and started again on the same port 1 s
    /// later. The goal (issue 29): only the calls in flight at the kill, and those made while
    /// nothing listened, fail; nothing before, and NOTHING once the server answers again.
    /// Every API has a default circuit breaker (5 failures, 5 s open): if it is still open
    /// after the restart, the calls after it answer `503 CIRCUIT_OPEN` and this fails.
    #[ignore = "slow lane: ./ops/test.sh --slow"]
    fn a_restart_under_load_fails_nothing_once_the_server_answers(stack: Stack) {
        let mut server = Server::start(stack, &[]);
        let gw = Gateway::start(&server, 5000, &[]);
        let http = http();
        let (status, v) = gw.call(&http, json!({"name": "warm"}));
        assert_eq!(status, 200, "{v}");
        let t0 = Instant::now();
        let at = |d: Duration| t0 + d;
        let ms = |i: Instant| i.duration_since(t0).as_millis();
        // (sent, answered, outcome) per call; the kill and the server's "ready" again.
        type Call = (Instant, Instant, Result<(u16, Value), String>);
        let (calls, killed, ready): (Vec<Call>, Instant, Instant) = std::thread::scope(|s| {
            let chaos = s.spawn(|| {
                std::thread::sleep(at(Duration::from_secs(4)).saturating_duration_since(Instant::now()));
                let killed = Instant::now();
                server.kill();
                std::thread::sleep(Duration::from_secs(1));
                server.spawn();
                (killed, Instant::now())
            });
            // 20 calls/s for 10 s, each taking 100 ms at the server (about 2 in flight).
            let calls: Vec<_> = (0..200u32)
                .map(|i| {
                    std::thread::sleep(
                        at(Duration::from_millis(50 * u64::from(i)))
                            .saturating_duration_since(Instant::now()),
                    );
                    let (gw, http) = (&gw, &http);
                    s.spawn(move || {
                        let sent = Instant::now();
                        let r = gw.try_call(http, json!({"name": format!("r{i}"), "delay_ms": 100}));
                        (sent, Instant::now(), r)
                    })
                })
                .collect();
            let (killed, ready) = chaos.join().unwrap();
            (calls.into_iter().map(|c| c.join().unwrap()).collect(), killed, ready)
        });
        let failed = |c: &Call| !matches!(c.2, Ok((200, _)));
        let in_flight: Vec<&Call> = calls.iter().filter(|c| c.0 < killed && c.1 > killed).collect();
        let before: Vec<&Call> = calls.iter().filter(|c| c.1 <= killed).collect();
        let down: Vec<&Call> = calls.iter().filter(|c| c.0 >= killed && c.0 < ready).collect();
        let after: Vec<&Call> = calls.iter().filter(|c| c.0 >= ready).collect();
        let tally = |class: &[&Call]| {
            let mut t: BTreeMap<String, usize> = BTreeMap::new();
            for c in class {
                *t.entry(outcome(&c.2)).or_default() += 1;
            }
            t
        };
        let why: BTreeMap<String, usize> = tally(&after)
            .into_iter()
            .filter(|(o, _)| o != "200")
            .collect();
        let first_ok_after = after.iter().find(|c| !failed(c)).map(|c| ms(c.0));
        eprintln!(
            "{stack:?}: killed at {} ms, answering again at {} ms (first 200 after it sent at \
             {first_ok_after:?} ms); {} calls: before the kill {:?}, in flight at the kill \
             {:?}, while down {:?}, after {:?}",
            ms(killed),
            ms(ready),
            calls.len(),
            tally(&before),
            tally(&in_flight),
            tally(&down),
            tally(&after),
        );
        // The restart takes 1 to 2 s (the interpreter's start, on a loaded machine): at least
        // 3 s of load remain after it.
        assert!(after.len() >= 60, "the load did not go on after the restart: {}", after.len());
        assert_eq!(before.iter().filter(|c| failed(c)).count(), 0, "calls before the kill failed");
        assert!(
            why.is_empty(),
            "calls failed after the server answered again: {why:?}"
        );
    }
}

each_stack! {
    /// A connection idle for 6 minutes (past grpc-core's and grpc-js's idle and keep-alive
    /// defaults that a team might meet, and any NAT-like middlebox timer of a few minutes),
    /// then a call: 200, on the same connection or a new one.
    #[ignore = "slow lane: ./ops/test.sh --slow"]
    fn idle_six_minutes_then_a_call_answers(stack: Stack) {
        let server = Server::start(stack, &[]);
        let gw = Gateway::start(&server, 5000, &[]);
        let http = http();
        let (status, before) = gw.call(&http, json!({"name": "before"}));
        assert_eq!(status, 200, "{before}");
        std::thread::sleep(Duration::from_secs(360));
        let started = Instant::now();
        let (status, after) = gw.call(&http, json!({"name": "after"}));
        eprintln!(
            "{stack:?}: after 6 minutes idle: {status} in {} ms (connection {} then {})",
            started.elapsed().as_millis(),
            before["peer"],
            after["peer"]
        );
        assert_eq!((status, &after["greeting"]), (200, &json!("hello after")), "{after}");
    }
}

each_stack! {
    /// A 3-minute call (API `timeout_ms` 200000) to a server with its default PING policy
    /// (grpc-core: none without data more often than every 5 minutes, 2 strikes; grpc-js:
    /// none) answers 200: a 30 s keep-alive killed such calls at about 2 minutes.
    #[ignore = "slow lane: ./ops/test.sh --slow"]
    fn a_three_minute_call_answers(stack: Stack) {
        let server = Server::start(stack, &[]);
        let gw = Gateway::start(&server, 200_000, &[]);
        let http = http_timeout(Duration::from_secs(230));
        let started = Instant::now();
        let (status, v) = gw.call(&http, json!({"name": "3min", "delay_ms": 180_000}));
        let took = started.elapsed();
        eprintln!("{stack:?}: a 3-minute call: {status} after {} ms", took.as_millis());
        assert_eq!((status, &v["greeting"]), (200, &json!("hello 3min")), "{v}");
        assert!(took >= Duration::from_secs(180), "{took:?}");
    }
}
