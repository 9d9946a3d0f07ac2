//! Generic invocation against gRPC stacks Portico did not write (docs/operations/clusters.md, "gRPC client
//! settings"), each on a free loopback port behind a real gateway process, called over HTTP/1.1 as
//! a merchant would:
//!
//! - Python grpcio (gRPC C-core), gateway/tests/grpcio_server.py;
//! - Node @grpc/grpc-js (pure JavaScript on Node's http2), gateway/tests/grpcjs_server.js;
//! - grpc-java 1.41 on Netty (a JVM, Debian's packages), gateway/tests/grpcjava/InteropServer.java.
//!
//! All three publish one interop.v1.Interop service (Call, and Echo of a message with every
//! field kind): grpcio_server.py defines it and writes its FileDescriptorSet, which the
//! grpc-js server (@grpc/proto-loader) and the grpc-java server (protobuf-java's descriptor
//! API, DynamicMessage) load and the gateway gets as the APIs' descriptor. Every scenario
//! runs against each (`mod <scenario> { grpcio, grpcjs, grpcjava }`); where a stack cannot do
//! what the scenario needs, or behaves otherwise, the test says so and checks what that stack
//! does instead. What broke against backend teams' servers and must not again: long calls
//! killed by the gateway's PINGs, gzip replies, `max_concurrent_streams`, NaN/±Infinity in
//! wrappers, large request headers as metadata; what a backend's life does to calls in
//! flight: `max_connection_age` rotation, a graceful stop, a restart under load, an idle
//! connection, a 3-minute call; and every field kind through each server's own protobuf
//! runtime, held to protobuf's reference JSON mapping (`every_field_kind_...`).
//!
//! The slow lane (`#[ignore = "slow lane: ./ops/test.sh --slow"]`: minutes of waiting each)
//! runs with `cargo test -p portico-gateway --test it -- grpc_interop:: --ignored
//! --test-threads 8`; ./ops/test.sh runs it in the background beside the main tests when
//! gateway/src/invoke changed since it last passed (ops/slow-lane.stamp), and always with
//! `--slow` (docs/operations/ops-scripts.md, "Test lanes").
//!
//! grpcio's interpreter is `PORTICO_GRPCIO_PYTHON` (ops/test.sh exports it after installing the
//! pinned grpcio and protobuf into .run/venv), else `.run/venv/bin/python`; grpc-js is
//! `PORTICO_GRPCJS_DIR/node_modules` (ops/test.sh: `npm ci` of gateway/tests/grpcjs), else
//! gateway/tests/grpcjs/node_modules, run by `node`; grpc-java is the launcher
//! `PORTICO_GRPCJAVA_RUN` (ops/test.sh: ops/lib.sh `ensure_grpcjava`, which runs
//! gateway/tests/grpcjava/build.sh), else `.run/grpcjava/run`. A test without them fails
//! saying how to install them. Every test needs the Python side (it writes the descriptor
//! and computes the JSON references). A JVM takes about 0.6 s to be ready: the main lane
//! starts 9 of them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use serde_json::{json, Value};
use sha2::Digest;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// gateway/tests, where the interop servers live (the test modules are in its `it/`).
fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn python() -> PathBuf {
    portico_testkit::grpcio_python(&["grpc", "google.protobuf"])
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

/// The grpc-java server's launcher, `$RUN/grpcjava/run` as gateway/tests/grpcjava/build.sh
/// writes it (Debian's OpenJDK, grpc-java 1.41, protobuf-java and Netty).
fn grpcjava_run() -> PathBuf {
    let run = std::env::var_os("PORTICO_GRPCJAVA_RUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.run/grpcjava/run"));
    let classes = run.parent().map(|d| d.join("classes/InteropServer.class"));
    assert!(
        run.is_file() && classes.is_some_and(|c| c.is_file()),
        "no grpc-java interop server at {}: run ./ops/test.sh, or \
         `bash -c '. ops/lib.sh && ensure_grpcjava'` (gateway/tests/grpcjava/build.sh: \
         Debian's default-jdk-headless and libgrpc-java, as root) and set \
         PORTICO_GRPCJAVA_RUN to the launcher it prints",
        run.display()
    );
    run
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
    /// grpc-java 1.41 on Netty (Debian's packages), a JVM.
    GrpcJava,
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
            Stack::GrpcJava => {
                std::fs::write(&pb, descriptor()).unwrap();
                let mut cmd = Command::new(grpcjava_run());
                cmd.arg("--descriptor").arg(&pb);
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

/// A gateway process on its own tree, with extra environment, started by the shared test
/// kit (killed when dropped, its log kept in `_logs`).
struct Gateway {
    _proc: portico_testkit::procs::GatewayProc,
    listen: SocketAddr,
    _tree: ConfigTree,
    _logs: tempfile::TempDir,
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
        t.put("apis/interop.echo", &json!({
            "id": "interop.echo",
            "http": {"method": "POST", "path": "/v1/echo", "body": "*"},
            "backend": {"cluster": "interop", "timeout_ms": timeout_ms,
                        "grpc": {"service": "interop.v1.Interop", "method": "Echo", "descriptor": sha}},
            "auth": "none"
        }));
        let logs = tempfile::tempdir().unwrap();
        let proc = portico_testkit::procs::start_gateway("gateway", logs.path(), |cmd| {
            cmd.arg("--config-dir")
                .arg(t.path())
                .args(["--threads", "2"])
                .env("PORTICO_LOG", "warn,portico_gateway::invoke=info")
                .env_remove("PORTICO_GRPC_KEEPALIVE_MS");
            for (k, v) in env {
                cmd.env(k, v);
            }
        });
        let addr = |url: &str| -> SocketAddr { url.trim_start_matches("http://").parse().unwrap() };
        let (listen, admin) = (addr(&proc.url), addr(&proc.admin));
        let gw = Gateway {
            _proc: proc,
            listen,
            _tree: t,
            _logs: logs,
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

    /// `POST /v1/echo` (API `interop.echo`, Echo(Everything)) with `body` as it is.
    fn echo(&self, http: &reqwest::blocking::Client, body: &str) -> (u16, Value) {
        let resp = http
            .post(format!("http://{}/v1/echo", self.listen))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
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

/// A scenario run against each stack: `mod $name { fn grpcio(); fn grpcjs(); fn grpcjava(); }`,
/// with the
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

            #[test]
            $(#[$attr])*
            fn grpcjava() {
                scenario(Stack::GrpcJava)
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
    /// which the gateway must stop reading at its 4 MiB limit. grpc-java with gzip set on
    /// the call compresses only for a client listing gzip in `grpc-accept-encoding`, which
    /// the gateway does: its replies are gzip, as grpcio's (its launcher's 512 MiB heap is for
    /// the 100 MiB reply: the string and its encoding, 200 MB, do not fit in 256).
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
    /// grpc-java's limit is 8 KiB too (`maxInboundMetadataSize`); its handler sees
    /// `content-type`, `grpc-accept-encoding` and `grpc-timeout` as metadata as well, so it
    /// counts about 170 bytes more than the others.
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
    /// answer 200 as well. grpc-java's default policy is already strict (`--strict-pings`
    /// sets it again: `permitKeepAliveTime` 5 min, none without calls), but its strike limit
    /// is fixed at 2 (`KeepAliveEnforcer.MAX_PING_STRIKES`): it closes the connection with
    /// GOAWAY `too_many_pings` at the third unwelcome PING, which 200 ms PINGs reach in 0.6 s.
    fn a_long_call_under_a_strict_ping_policy_is_not_killed(stack: Stack) {
        let flags: &[&str] = match stack {
            Stack::Grpcio | Stack::GrpcJava => &["--strict-pings"],
            Stack::GrpcJs => &[],
        };
        let server = Server::start(stack, flags);
        // The two gateways call at the same time, each on its own connection to the server
        // (its PING policy is per connection): one wait of 4 s, not two.
        let gw = Gateway::start(&server, 20000, &[]);
        let pinging = Gateway::start(&server, 20000, &[("PORTICO_GRPC_KEEPALIVE_MS", "200")]);
        let http = http();
        let timed = |gw: &Gateway| {
            let started = Instant::now();
            let (status, v) = gw.call(&http, json!({"name": "long", "delay_ms": 4000}));
            (status, v, started.elapsed().as_millis())
        };
        let ((status, v, ms), (pinged, pv, pms)) = std::thread::scope(|s| {
            let quiet = s.spawn(|| timed(&gw));
            let loud = s.spawn(|| timed(&pinging));
            (quiet.join().unwrap(), loud.join().unwrap())
        });
        eprintln!("{stack:?}: a 4 s call: {status} after {ms} ms");
        assert_eq!((status, &v["greeting"]), (200, &json!("hello long")), "{v}");
        let (status, v) = (pinged, pv);
        eprintln!("{stack:?}: with PINGs every 200 ms: {status} after {pms} ms ({v})");
        match stack {
            Stack::Grpcio | Stack::GrpcJava => assert_ne!(status, 200, "{v}"),
            Stack::GrpcJs => assert_eq!(status, 200, "{v}"),
        }
    }
}

each_stack! {
    /// `grpc.max_connection_age_ms` 500 (grpcio, grpc-js: GOAWAY after 450..550 ms, then up
    /// to 5 s of grace): 200 calls from 4 clients over about 3 s cross several rotations of
    /// each of the gateway's connections, and none fails. The peer each call came from
    /// (the gateway's side of the connection) shows the rotations. grpc-java raises a
    /// `maxConnectionAge` below 1 s to 1 s (`NettyServerBuilder`: 900..1100 ms with its
    /// jitter), so against it the age is 1000 ms and each client makes 100 calls (5 s or
    /// more): as many rotations per connection as the others get.
    ///
    /// grpc-java on Debian's Netty 4.1.48 loses a few calls in some rotations, and this
    /// checks that it is only that: its graceful GOAWAY is two (last stream 2^31-1 and a
    /// PING, then the real last stream once the PING is acknowledged); a stream the gateway
    /// opened just before the first GOAWAY arrived can reach the wire after the PING ACK
    /// (h2 writes a pending PONG before queued stream frames), above the second GOAWAY's
    /// last stream. Netty refuses its HEADERS ("Cannot create stream 83 greater than
    /// Last-Stream-ID 81 from GOAWAY"), then takes its DATA frame for a connection error
    /// ("Stream 83 does not exist", `verifyStreamMayHaveExisted`; line/armeria#3208) and
    /// closes the connection, failing the calls it had accepted and not yet answered (RFC 9113
    /// §6.8 lets a GOAWAY's sender discard such frames, not fail the connection). The
    /// gateway cannot send those calls again (they may have been processed): `502
    /// UPSTREAM_ERROR: the backend failed to answer`, at most the 4 in flight per rotation
    /// hit (2 or 3 of 400 in half the runs measured).
    fn max_connection_age_rotation_loses_no_call(stack: Stack) {
        let (age, per_worker) = match stack {
            Stack::Grpcio | Stack::GrpcJs => ("500", 50),
            Stack::GrpcJava => ("1000", 100),
        };
        let server = Server::start(stack, &["--max-age-ms", age]);
        let gw = Gateway::start(&server, 5000, &[]);
        let http = http();
        let started = Instant::now();
        let results: Vec<Result<(u16, Value), String>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|w| {
                    let (gw, http) = (&gw, &http);
                    s.spawn(move || {
                        (0..per_worker)
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
        match stack {
            Stack::Grpcio | Stack::GrpcJs => assert!(failed.is_empty(), "{failed:?}"),
            Stack::GrpcJava => assert!(
                failed.len() <= 12
                    && failed
                        .iter()
                        .all(|f| f == "502 UPSTREAM_ERROR: the backend failed to answer"),
                "more than Netty's refused-stream connection error explains: {failed:?}"
            ),
        }
        // A connection lives at most ~0.55 s (grpc-java: ~1.1 s): 2.5 s (5 s) or more of calls
        // (50 × 50 ms each, in turn; grpc-java 100 × 50 ms) need 5 at the very least; 4
        // leaves room.
        assert!(peers.len() >= 4, "too few rotations to mean anything: {peers:?}");
    }
}

each_stack! {
    /// A backend's rolling restart: of two endpoints, one stops gracefully (grpcio
    /// `server.stop(10)`; grpc-js `tryShutdown`, `forceShutdown` after 10 s; grpc-java
    /// `Server.shutdown`, `shutdownNow` after 10 s) while calls
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

// --- field fidelity -------------------------------------------------------------------------

/// `type.googleapis.com/` and a type name, for the documents' `Any`s.
macro_rules! any_of {
    ($t:literal) => {
        concat!("\"@type\": \"type.googleapis.com/", $t, "\"")
    };
}

/// The JSON documents sent to Echo(Everything), one line each (name, body): every field kind
/// of `interop.v1.Everything` (grpcio_server.py), edge values first.
fn documents() -> Vec<(&'static str, String)> {
    let docs: Vec<(&str, String)> = vec![
        ("scalars", r#"{"fDouble": 1.5, "fFloat": 0.1, "fInt32": -7, "fInt64": "-70000000000", "fUint32": 7, "fUint64": "70000000000", "fSint32": -8, "fSint64": "-80000000000", "fFixed32": 9, "fFixed64": "90000000000", "fSfixed32": -10, "fSfixed64": "-100000000000", "fBool": true, "fString": "s", "fBytes": "AAEC/f7/", "fEnum": "GREEN", "fNested": {"a": 1, "b": "b", "child": {"a": 2, "colours": ["RED", "BLUE"]}}}"#.into()),
        ("extremes", r#"{"fInt32": -2147483648, "fInt64": "-9223372036854775808", "fUint32": 4294967295, "fUint64": "18446744073709551615", "fSint32": 2147483647, "fSint64": "-9223372036854775808", "fFixed32": 4294967295, "fFixed64": "18446744073709551615", "fSfixed32": -2147483648, "fSfixed64": "9223372036854775807", "fDouble": 1.7976931348623157e308, "fFloat": 3.4028234663852886e38, "rDouble": [5e-324, -2.2250738585072014e-308], "rFloat": [1.4e-45, -1.17549435e-38, -3.4028234663852886e38], "rInt64": ["9223372036854775807", "-1"], "rUint64": ["18446744073709551615", "0"], "rSint64": ["-9223372036854775808", "9223372036854775807"], "rFixed64": ["18446744073709551615"], "rSfixed64": ["-9223372036854775808"], "rInt32": [2147483647, -2147483648, 0], "rUint32": [4294967295], "rSint32": [-2147483648], "rFixed32": [0, 4294967295], "rSfixed32": [-2147483648, 2147483647]}"#.into()),
        ("non-finite", r#"{"fDouble": "NaN", "fFloat": "-Infinity", "rDouble": ["NaN", "Infinity", "-Infinity", 2.5], "rFloat": ["Infinity", "NaN"], "uDouble": ["-Infinity", "NaN"], "wDouble": "Infinity", "wFloat": "NaN", "oDouble": "-Infinity", "mUint32Double": {"1": "NaN", "2": "-Infinity"}, "mSint32Float": {"-1": "Infinity"}}"#.into()),
        ("negative zero", r#"{"oDouble": -0.0, "rDouble": [-0.0, 0.0], "uDouble": [-0.0], "rFloat": [-0.0], "mUint32Double": {"0": -0.0}, "st": {"z": -0.0}, "fDouble": -0.0, "fFloat": -0.0, "wDouble": -0.0}"#.into()),
        ("unicode", r#"{"fString": "Zürich 東京 🦀 \u0000 \"q\" \\ \u2028 \ud83d\ude00", "rString": ["", "é", "\udbff\udfff"], "mStringInt32": {"ключ": 1, "": 0, "🦀": -1}, "oString": "ß", "wString": "東", "st": {"ünï": "cödé"}, "mask": "fString,fNested.b"}"#.into()),
        ("bytes", r#"{"fBytes": "/+/+AA==", "rBytes": ["", "/w==", "AAAA"], "wBytes": "AA==", "mFixed32Bytes": {"4294967295": "AQ==", "0": ""}}"#.into()),
        ("repeated, packed and not", r#"{"rDouble": [1.5, -2.25], "rFloat": [0.5, 16777216.0], "rInt32": [1, -1], "rInt64": ["1", "-1"], "rUint32": [1, 2], "rUint64": ["3"], "rSint32": [-3, 3], "rSint64": ["-4", "4"], "rFixed32": [5], "rFixed64": ["6"], "rSfixed32": [-7], "rSfixed64": ["-8"], "rBool": [true, false, true], "rString": ["a", "b"], "rBytes": ["AQ=="], "rEnum": ["RED", "BLUE", "COLOUR_UNSPECIFIED"], "rNested": [{"a": 1}, {}, {"b": "x", "child": {}}], "uInt32": [0, 1, -1], "uDouble": [0.0, 1e300], "uSint64": ["-1", "0"], "uEnum": ["GREEN", "COLOUR_UNSPECIFIED"]}"#.into()),
        ("maps", r#"{"mStringInt32": {"a": 1, "b": 0}, "mInt32String": {"-2147483648": "min", "0": ""}, "mInt64Nested": {"-9223372036854775808": {"a": 1}, "9223372036854775807": {}}, "mUint32Double": {"4294967295": 2.5}, "mUint64Sint64": {"18446744073709551615": "-9223372036854775808"}, "mSint32Float": {"-2147483648": 0.25}, "mSint64Colour": {"-1": "BLUE", "1": "RED", "0": "COLOUR_UNSPECIFIED"}, "mFixed32Bytes": {"1": "AQI="}, "mFixed64Bool": {"18446744073709551615": false, "1": true}, "mSfixed32Uint64": {"-1": "18446744073709551615"}, "mSfixed64String": {"-9223372036854775808": "x"}, "mBoolString": {"true": "t", "false": "f"}, "mStringValue": {"n": null, "l": [1, "a"], "s": {"x": true}, "d": 2.5}, "mStringAny": {"d": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1s"}, "n": {"@type": "type.googleapis.com/interop.v1.Nested", "a": 5}}}"#.into()),
        ("empty containers and messages", r#"{"rInt32": [], "rNested": [{}], "mStringInt32": {}, "mInt64Nested": {"0": {}}, "fNested": {}, "st": {}, "lv": [], "empty": {}, "mask": "", "rVal": [], "rAny": [], "mStringValue": {"e": {}, "l": []}}"#.into()),
        ("oneof: a string, empty", r#"{"cString": ""}"#.into()),
        ("oneof: an int64", r#"{"cInt64": "-9223372036854775808"}"#.into()),
        ("oneof: a message", r#"{"cNested": {"a": 1, "child": {"b": "deep", "colours": ["GREEN", "BLUE"]}}}"#.into()),
        ("oneof: an enum, zero", r#"{"cColour": "COLOUR_UNSPECIFIED"}"#.into()),
        ("proto3 optional, zero values", r#"{"oInt32": 0, "oDouble": 0.0, "oString": ""}"#.into()),
        ("wrappers", r#"{"wDouble": 0.0, "wFloat": 0.0, "wInt64": "-9223372036854775808", "wUint64": "18446744073709551615", "wInt32": 0, "wUint32": 4294967295, "wBool": false, "wString": "", "wBytes": "", "rWInt64": ["1", "0", "-1"]}"#.into()),
        ("timestamps and durations", r#"{"ts": "0001-01-01T00:00:00Z", "rTs": ["9999-12-31T23:59:59.999999999Z", "1970-01-01T00:00:00Z", "2024-02-29T12:00:00.5+05:30", "1969-12-31T23:59:59.000001Z"], "dur": "-315576000000.999999999s", "rAny": [{"@type": "type.googleapis.com/google.protobuf.Duration", "value": "315576000000.999999999s"}, {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "-0.000000001s"}, {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "0s"}]}"#.into()),
        ("field mask", r#"{"mask": "fInt32,fNested.child.colours,mStringInt32"}"#.into()),
        ("struct, value, list value", r#"{"st": {"num": 1.5, "int": 3, "big": 1e300, "str": "s", "t": true, "f": false, "nul": null, "list": [1, "two", null, [], {}], "obj": {"nested": {"deep": [true]}}}, "val": {"k": [1, 2]}, "lv": [1, "a", null, true, {"x": 1}, []], "rVal": [null, 0, "", false, [], {}]}"#.into()),
        ("a value that is null", r#"{"val": null}"#.into()),
        ("any", concat!(r#"{"any": {"#, any_of!("interop.v1.Nested"), r#", "a": 7, "child": {"b": "x"}}, "rAny": [{"#, any_of!("google.protobuf.Timestamp"), r#", "value": "2020-01-01T00:00:00.123Z"}, {"#, any_of!("google.protobuf.FieldMask"), r#", "value": "a.bC,d"}, {"#, any_of!("google.protobuf.Struct"), r#", "value": {"k": [1, null]}}, {"#, any_of!("google.protobuf.Value"), r#", "value": "v"}, {"#, any_of!("google.protobuf.ListValue"), r#", "value": [1, {}]}, {"#, any_of!("google.protobuf.Empty"), r#"}, {"#, any_of!("google.protobuf.Int64Value"), r#", "value": "-5"}, {"#, any_of!("google.protobuf.FloatValue"), r#", "value": "NaN"}, {"#, any_of!("google.protobuf.Any"), r#", "value": {"#, any_of!("google.protobuf.BoolValue"), r#", "value": true}}, {"#, any_of!("interop.v1.Everything"), r#", "fInt64": "1", "mStringInt32": {"a": 1}, "any": {"#, any_of!("interop.v1.Nested"), r#", "b": "in"}}]}"#).into()),
        ("numbers in their other forms", r#"{"fInt32": 1.0, "fInt64": 9007199254740993, "fUint64": 18446744073709551615, "fSint32": "-5", "fFixed32": "1e2", "fSfixed64": -9223372036854775808, "fDouble": "1.5", "fFloat": "-2.5e-3", "fEnum": 2, "rUint32": ["7", 8.0], "wInt64": 5, "wUint32": "6", "mInt32String": {"7": "seven"}}"#.into()),
        ("field names as in the .proto", r#"{"f_int32": 3, "r_string": ["x"], "m_string_int32": {"k": 1}, "w_bool": true, "c_nested": {"a": 1}, "o_string": "o", "f_nested": {"colours": ["RED"]}}"#.into()),
        // Refused by json_format and the gateway alike (400): a string with a lone surrogate,
        // a float above float32's range.
        ("refused: a lone surrogate", r#"{"fString": "\ud800"}"#.into()),
        ("refused: a float out of range", r#"{"fFloat": 3.4028236e38}"#.into()),
        ("unknown enum numbers", r#"{"fEnum": 7, "rEnum": [1, 99, -5], "uEnum": [100], "mSint64Colour": {"5": 42}, "fNested": {"colours": [77, 2]}}"#.into()),
    ];
    for (name, doc) in &docs {
        assert!(!doc.contains('\n'), "{name}: one line");
        // serde_json takes no lone surrogate: that one is for the servers' side only.
        if !name.starts_with("refused: a lone") {
            serde_json::from_str::<Value>(doc).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    docs
}

/// json_format's answer for each of [`documents`], from one Python process
/// (`grpcio_server.py --json-reference`): `MessageToJson(Parse(document))` with the
/// gateway's options, or why Python refuses the document.
fn references() -> &'static [Result<Value, String>] {
    static REFS: OnceLock<Vec<Result<Value, String>>> = OnceLock::new();
    REFS.get_or_init(|| {
        let mut child = Command::new(python())
            .arg(tests_dir().join("grpcio_server.py"))
            .arg("--json-reference")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut input = String::new();
        for (_, doc) in documents() {
            input.push_str(&doc);
            input.push('\n');
        }
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "grpcio_server.py --json-reference");
        let refs: Vec<Result<Value, String>> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let r: Value = serde_json::from_str(line).unwrap();
                match r["ok"].as_bool() {
                    Some(true) => Ok(serde_json::from_str(r["json"].as_str().unwrap()).unwrap()),
                    _ => Err(r["error"].as_str().unwrap_or("?").to_owned()),
                }
            })
            .collect();
        assert_eq!(refs.len(), documents().len(), "one reference per document");
        refs
    })
}

/// Whether two JSON numbers are the same value: a `float` field's (`float`) as float32
/// (Python writes a float32's shortest text, 1.4e-45, as serde_json may write 1e-45), the
/// others as doubles, a zero's sign included (json_conformance.rs's rule).
fn same_number(want: &serde_json::Number, got: &serde_json::Number, float: bool) -> bool {
    if let (Some(x), Some(y)) = (want.as_i64(), got.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (want.as_u64(), got.as_u64()) {
        return x == y;
    }
    let (Some(x), Some(y)) = (want.as_f64(), got.as_f64()) else {
        return false;
    };
    if float {
        return (x as f32).to_bits() == (y as f32).to_bits();
    }
    x.to_bits() == y.to_bits() || (x == y && x != 0.0)
}

/// Every place where the gateway's JSON `got` differs from the reference `want`, one line
/// each: `<path>: reference <want>, gateway <got>`. `float`: whether the values are a
/// `float` field's (a field named *Float*, a map of floats, a FloatValue in an Any).
fn differences(want: &Value, got: &Value, path: &str, float: bool, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(x), Value::Object(y)) => {
            let float_any = x
                .get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("FloatValue"));
            for (k, v) in x {
                let at = format!("{path}.{k}");
                let float = float || k.contains("Float") || (k == "value" && float_any);
                match y.get(k) {
                    Some(w) => differences(v, w, &at, float, out),
                    None => out.push(format!("{at}: reference {v}, gateway missing")),
                }
            }
            for (k, w) in y {
                if !x.contains_key(k) {
                    out.push(format!("{path}.{k}: reference missing, gateway {w}"));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                differences(v, w, &format!("{path}[{i}]"), float, out);
            }
        }
        (Value::Number(x), Value::Number(y)) if same_number(x, y, float) => {}
        _ if want == got && !want.is_number() => {}
        _ => out.push(format!("{path}: reference {want}, gateway {got}")),
    }
}

/// A difference from the reference that is not a fault to fix here: (the stacks it is seen
/// with, why, whether a difference line is this one).
type Known = (&'static [Stack], &'static str, fn(&str) -> bool);

const ALL: &[Stack] = &[Stack::Grpcio, Stack::GrpcJs, Stack::GrpcJava];

/// The differences that stay, each with why (the module docs of
/// grpc-dynamic/tests/json_conformance.rs list the gateway's own).
const KNOWN: &[Known] = &[(
    ALL,
    "the gateway's: -0.0 in a field without presence (or a wrapper's value) is not sent \
     (prost-reflect's encoder compares it equal to the default 0.0; json_format compares \
     bits), so every stack echoes nothing, or the wrapper's 0 (grpc-dynamic \
     json_conformance.rs KNOWN_DIFFERENCES)",
    |d| {
        d.ends_with("reference -0.0, gateway missing")
            || (d.contains("wDouble: ")
                && (d.ends_with("reference -0.0, gateway 0.0")
                    || d.ends_with("reference -0.0, gateway 0")))
    },
)];

each_stack! {
    /// Field fidelity through each server's own protobuf runtime: Echo
    /// answers an `Everything` (every scalar kind, repeated packed and not, maps with 12
    /// key kinds, a oneof, proto3 `optional`, nested messages, an enum, every well-known
    /// type, Any of a well-known type and of a message of the set) as the server's runtime
    /// parsed it and serialized it again (grpcio: upb, the class made from the descriptor at
    /// run time; grpc-js: @grpc/proto-loader's protobufjs decode, toObject with the server's
    /// options, fromObject, encode; grpc-java: DynamicMessage). For each document of
    /// [`documents`], the gateway's JSON answer (JSON → protobuf by the gateway → the server
    /// → JSON by the gateway) must equal json_format's `MessageToJson(Parse(document))`,
    /// numbers by value; where Python refuses a document, the gateway answers 400. Every
    /// difference left is in [`KNOWN`], with why, for the stacks it is seen with.
    fn every_field_kind_survives_the_servers_runtime(stack: Stack) {
        let refs = references();
        let server = Server::start(stack, &[]);
        let gw = Gateway::start(&server, 5000, &[]);
        let http = http();
        let mut unexplained = Vec::new();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let mut refused = Vec::new();
        for ((name, doc), want) in documents().into_iter().zip(refs) {
            let (status, got) = gw.echo(&http, &doc);
            let mut diffs = Vec::new();
            match want {
                Ok(want) if status == 200 => differences(want, &got, "", false, &mut diffs),
                Ok(_) => diffs.push(format!("answered {status} {got}")),
                Err(why) if status == 400 => {
                    eprintln!("{stack:?} {name}: refused as Python does ({why}): {got}");
                    refused.push(name);
                }
                Err(why) => diffs.push(format!("Python refuses ({why}), the gateway answered {status} {got}")),
            }
            for d in diffs {
                match KNOWN.iter().find(|(stacks, _, is)| stacks.contains(&stack) && is(&d)) {
                    Some((_, why, _)) => *seen.entry(why).or_default() += 1,
                    None => unexplained.push(format!("{name}: {d}")),
                }
            }
        }
        eprintln!(
            "{stack:?}: {} documents echoed; known differences seen: {seen:?}",
            refs.len()
        );
        assert!(unexplained.is_empty(), "{stack:?}:\n{}", unexplained.join("\n"));
        // Only the document meant to be refused is: the others were all compared.
        assert_eq!(
            refused,
            ["refused: a lone surrogate", "refused: a float out of range"]
        );
    }
}

// --- slow lane ------------------------------------------------------------------------------

each_stack! {
    /// A backend killed (SIGKILL) under ~20 calls/s and started again on the same port 1 s later.
    /// The goal (docs/operations/clusters.md, "gRPC client settings", the breaker after a restart): only the
    /// calls in flight at the kill, and those made while nothing listened, fail; nothing before,
    /// and NOTHING once the server answers again. Every API has a default circuit breaker (5
    /// failures, 5 s open): if it is still open after the restart, the calls after it answer `503
    /// CIRCUIT_OPEN` and this fails.
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
        // The restart takes 1 to 2 s (the interpreter's or the JVM's start, on a loaded
        // machine): at least 3 s of load remain after it.
        assert!(after.len() >= 60, "the load did not go on after the restart: {}", after.len());
        assert_eq!(before.iter().filter(|c| failed(c)).count(), 0, "calls before the kill failed");
        assert!(
            why.is_empty(),
            "calls failed after the server answered again: {why:?}"
        );
    }
}

each_stack! {
    /// A connection idle for 6 minutes (past grpc-core's, grpc-js's and grpc-java's idle and keep-alive
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
    /// none; grpc-java: none more often than every 5 minutes, 2 strikes) answers 200: a 30 s
    /// keep-alive killed such calls at about 2 minutes.
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
