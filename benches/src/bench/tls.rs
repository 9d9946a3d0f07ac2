//! The TLS suite (benches/RESULTS.md, "TLS and HTTP/2"): Portico's TLS listener against
//! nginx (`ssl_certificate`) and the nginx + Lua peer over TLS, all serving one P-256
//! certificate the suite generates, TLS 1.3 only, the proxy pinned to one CPU:
//!
//! - full handshakes per core (`portico-load --handshakes`: a new connection per unit, no
//!   resumption, no request) and resumed handshakes per core (`--tls-resume`: each client
//!   resumes with the TLS 1.3 tickets it was given), CPU of the target process per completed
//!   handshake;
//! - requests per core on kept-alive TLS connections: HTTP/1.1 (`portico-load` over TLS,
//!   signed: Portico's full edge and the nginx + Lua peer; nginx a plain `proxy_pass`) and
//!   HTTP/2 (`h2load`, several streams per connection, unsigned: Portico on an `auth: none`
//!   API, nginx a plain `proxy_pass`);
//! - fleet resumption: clients take a session on gateway A, many others handshake on A, the
//!   first ones come back on gateway B: how many resume, for two Portico gateways with and
//!   without a shared `--tls-ticket-keys` file and two nginx with and without a shared
//!   `ssl_session_ticket_key`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use crate::procs::{free_port, Proc};
use crate::report::{f0, f1, ms, pct, ratio, table, write_section};
use crate::runner::{error_summary, measure, med, Latency, LoadOut, LoadSpec, Measured};
use crate::services::{run_nginx, start_backend, start_portico, Proxy};
use crate::{edge, lua_peer, tls_client, trees};
use crate::{loadavg, preamble, Ctx};

/// The name in the certificate (a DNS SAN) that every client verifies and sends as SNI.
pub const SERVER_NAME: &str = "portico-bench.test";
/// The `auth: none` API HTTP/2 asks Portico (h2load cannot sign each request).
const OPEN_PATH: &str = "/v1/open/orders/42";
/// Returning clients of the fleet check.
pub const FLEET_CLIENTS: usize = 50;
/// Concurrent connections of the fleet check's other clients.
const FLEET_CONCURRENCY: usize = 32;
/// HTTP/2 streams in flight per `h2load` connection.
const H2_STREAMS: usize = 10;
/// One handshake's timeout in the fleet check and the readiness probe.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files of the one certificate every target serves.
struct CertFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// A certificate authority and one P-256 server certificate for [`SERVER_NAME`] and
/// 127.0.0.1 signed by it (ECDSA P-256 SHA-256), PEM, in `dir`.
fn write_cert(dir: &Path) -> anyhow::Result<CertFiles> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let alg = &rcgen::PKCS_ECDSA_P256_SHA256;
    let ca_key = KeyPair::generate_for(alg)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Portico bench CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate_for(alg)?;
    let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned()])?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
    params
        .distinguished_name
        .push(DnType::CommonName, SERVER_NAME);
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    let files = CertFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&files.ca, ca.pem())?;
    std::fs::write(&files.cert, cert.pem())?;
    std::fs::write(&files.key, key.serialize_pem())?;
    Ok(files)
}

/// `n` bytes from the kernel's CSPRNG.
fn random_bytes(n: usize) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut out)?;
    Ok(out)
}

/// A Portico ticket key file (`--tls-ticket-keys`): one fresh key, 64 hex digits.
fn write_portico_ticket_keys(path: &Path) -> anyhow::Result<()> {
    let hex: String = random_bytes(32)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(path, format!("{hex}\n"))?;
    Ok(())
}

/// An nginx `ssl_session_ticket_key` file: 80 random bytes (AES-256 tickets).
fn write_nginx_ticket_key(path: &Path) -> anyhow::Result<()> {
    std::fs::write(path, random_bytes(80)?)?;
    Ok(())
}

/// The directives that give an nginx `server` block its TLS listener: the suite's
/// certificate, TLS 1.3 only, session tickets on and a shared session cache (resumption
/// enabled as on Portico), and a shared ticket key when given.
fn nginx_tls_directives(port: u16, cert: &CertFiles, ticket_key: Option<&Path>) -> String {
    let key_line = ticket_key
        .map(|k| format!("\n        ssl_session_ticket_key {};", k.display()))
        .unwrap_or_default();
    format!(
        r#"listen 127.0.0.1:{port} ssl http2 backlog=4096;
        ssl_certificate {};
        ssl_certificate_key {};
        ssl_protocols TLSv1.3;
        ssl_session_tickets on;
        ssl_session_cache shared:SSL:10m;{key_line}"#,
        cert.cert.display(),
        cert.key.display(),
    )
}

/// A target serving TLS: the process and its TLS address.
struct TlsProxy {
    proxy: Proxy,
    tls: SocketAddr,
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// nginx with a TLS listener: `proxy_pass` to `upstream` (keep-alive upstream, as in the
/// edge suite) or, without one, `/health` only (the fleet check).
fn start_nginx_tls(
    ctx: &Ctx,
    name: &str,
    upstream: Option<SocketAddr>,
    cert: &CertFiles,
    ticket_key: Option<&Path>,
) -> anyhow::Result<TlsProxy> {
    let tls_port = free_port()?;
    let tls = nginx_tls_directives(tls_port, cert, ticket_key);
    let (upstream_block, proxy) = match upstream {
        Some(u) => (
            format!(
                r#"upstream backend {{
        server {u};
        keepalive 64;
        keepalive_requests 1000000;
    }}"#
            ),
            r#"
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }"#,
        ),
        None => (String::new(), ""),
    };
    let locations = format!(
        "{tls}\n        location = /health {{\n            return 200 'ok';\n        }}{proxy}"
    );
    let proxy = run_nginx(
        ctx,
        name,
        &upstream_block,
        &locations,
        &crate::procs::Launch::default(),
        "/health",
    )?;
    let mut p = TlsProxy {
        proxy,
        tls: loopback(tls_port),
    };
    p.proxy.proc.name = name.to_owned();
    Ok(p)
}

/// Portico on the tree `tree` with its TLS listener (`--tls-listen`, the suite's
/// certificate), sealing tickets with `ticket_keys` when given (else its own key).
fn start_portico_tls(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    name: &str,
    tree: &Path,
    cert: &CertFiles,
    ticket_keys: Option<&Path>,
) -> anyhow::Result<TlsProxy> {
    let tls = loopback(free_port()?);
    let mut extra = vec![
        "--tls-listen".to_owned(),
        tls.to_string(),
        "--tls-cert".to_owned(),
        cert.cert.display().to_string(),
        "--tls-key".to_owned(),
        cert.key.display().to_string(),
    ];
    if let Some(k) = ticket_keys {
        extra.extend(["--tls-ticket-keys".to_owned(), k.display().to_string()]);
    }
    let mut proxy = start_portico(ctx, name, tree, &extra)?;
    wait_tls(rt, &mut proxy.proc, tls, &cert.ca)?;
    Ok(TlsProxy { proxy, tls })
}

/// Waits until a TLS handshake with `addr` completes (the gateway binds its TLS listener
/// with the plain one, a moment after it reports ready).
fn wait_tls(
    rt: &tokio::runtime::Runtime,
    proc: &mut Proc,
    addr: SocketAddr,
    ca: &Path,
) -> anyhow::Result<()> {
    let ca = tls_client::read_ca(ca)?;
    let config = tls_client::config(&ca, false, &[b"http/1.1"])?;
    let name = tls_client::server_name(SERVER_NAME)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        proc.check_alive()?;
        let r = rt.block_on(tls_client::handshake_once(
            &config,
            &name,
            addr,
            HANDSHAKE_TIMEOUT,
        ));
        match r {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                bail!("{}: no TLS handshake on {addr}: {e:#}", proc.name)
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// What a client offering `h2` and `http/1.1` negotiates with `addr`: version, cipher
/// suite, key exchange group, ALPN.
fn negotiated(rt: &tokio::runtime::Runtime, addr: SocketAddr, ca: &Path) -> anyhow::Result<String> {
    let ca = tls_client::read_ca(ca)?;
    let config = tls_client::config(&ca, false, &[b"h2", b"http/1.1"])?;
    let name = tls_client::server_name(SERVER_NAME)?;
    rt.block_on(async {
        let s = tls_client::connect(&config, &name, addr).await?;
        let c = s.get_ref().1;
        let alpn = c
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_else(|| "none".into());
        if alpn != "h2" {
            bail!("{addr} did not negotiate h2 (ALPN {alpn})");
        }
        Ok(format!(
            "{:?}, {:?}, {}, ALPN {alpn}",
            c.protocol_version()
                .map(|v| format!("{v:?}"))
                .unwrap_or_default(),
            c.negotiated_cipher_suite()
                .map(|s| format!("{:?}", s.suite()))
                .unwrap_or_default(),
            c.negotiated_key_exchange_group()
                .map(|g| format!("{:?}", g.name()))
                .unwrap_or_default(),
        )
        .replace('"', ""))
    })
}

// ---- h2load ---------------------------------------------------------------------------------

/// What one `h2load` run reported (the parts the suite uses).
#[derive(Debug, Clone, PartialEq)]
pub struct H2Out {
    /// The measured window, in seconds: `done` over the reported rate, which h2load takes
    /// over the main duration (its "finished in" counts the warm-up too).
    pub duration_s: f64,
    pub done: u64,
    pub errored: u64,
    pub timeout: u64,
    /// Answers by status class: 2xx, 3xx, 4xx, 5xx.
    pub classes: [u64; 4],
    /// Mean time per request ("time for request", mean), in µs.
    pub mean_us: Option<f64>,
}

/// An h2load duration (`123us`, `4.56ms`, `1.02s`, `2m`) in µs.
fn h2_duration_us(text: &str) -> Option<f64> {
    let t = text.trim().trim_end_matches(',');
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

/// The count before `label` in a line like `requests: 10 total, 10 started, 9 done`.
fn count_before(line: &str, label: &str) -> Option<u64> {
    let words: Vec<&str> = line
        .split([',', ':'])
        .flat_map(str::split_whitespace)
        .collect();
    words
        .windows(2)
        .find(|w| w[1] == label)
        .and_then(|w| w[0].parse().ok())
}

/// Parses `h2load`'s summary (nghttp2 1.4x–1.6x).
pub fn parse_h2load(text: &str) -> anyhow::Result<H2Out> {
    let line = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with(prefix))
            .with_context(|| format!("no `{prefix}` line in h2load's output:\n{text}"))
    };
    let finished = line("finished in")?;
    let mut parts = finished
        .strip_prefix("finished in")
        .unwrap_or_default()
        .split(',');
    let elapsed_s = parts
        .next()
        .and_then(h2_duration_us)
        .with_context(|| format!("duration in {finished:?}"))?
        / 1e6;
    let rate = parts
        .next()
        .and_then(|r| r.trim().strip_suffix("req/s"))
        .and_then(|r| r.trim().parse::<f64>().ok())
        .with_context(|| format!("req/s in {finished:?}"))?;
    let requests = line("requests:")?;
    let req = |label: &str| {
        count_before(requests, label).with_context(|| format!("`{label}` in {requests:?}"))
    };
    let done = req("done")?;
    let duration_s = if rate > 0.0 && done > 0 {
        done as f64 / rate
    } else {
        elapsed_s
    };
    let codes = line("status codes:")?;
    let class =
        |label: &str| count_before(codes, label).with_context(|| format!("`{label}` in {codes:?}"));
    let mean_us = text
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("time for request:"))
        .and_then(|r| r.split_whitespace().nth(2))
        .and_then(h2_duration_us);
    Ok(H2Out {
        duration_s,
        done,
        errored: req("errored")?,
        timeout: req("timeout")?,
        classes: [class("2xx")?, class("3xx")?, class("4xx")?, class("5xx")?],
        mean_us,
    })
}

impl H2Out {
    /// The run as the harness's load report (h2load gives no percentiles: they are 0, and
    /// the mean time per request is kept).
    fn into_load(self) -> LoadOut {
        let mut errors = BTreeMap::new();
        for (label, n) in [
            ("3xx", self.classes[1]),
            ("4xx", self.classes[2]),
            ("5xx", self.classes[3]),
            ("transport", self.errored),
            ("timeout", self.timeout),
        ] {
            if n > 0 {
                errors.insert(label.to_owned(), n);
            }
        }
        let window = self.duration_s.max(1e-9);
        LoadOut {
            requests: self.done,
            ok: self.classes[0],
            errors,
            ok_rps: self.classes[0] as f64 / window,
            rps: self.done as f64 / window,
            duration_s: self.duration_s,
            latency_us: Latency {
                p50: 0,
                p90: 0,
                p99: 0,
                p999: 0,
                max: 0,
                mean: self.mean_us.unwrap_or(f64::NAN),
            },
            client_cpu_s: f64::NAN,
            late_sends: 0,
            replays: BTreeMap::new(),
            series: Vec::new(),
            resumed: 0,
        }
    }
}

/// `h2load -c N -m H2_STREAMS -t 1 [--warm-up-time W] -D D URL` on the load CPU; with
/// `requests`, `-n requests` instead of the timed run (the set-up check).
fn h2load_command(ctx: &Ctx, url: &str, requests: Option<u64>) -> std::process::Command {
    let mut cmd = crate::procs::command(Path::new("h2load"), ctx.load_cpu.as_deref(), ctx.nice);
    cmd.arg("-c")
        .arg(ctx.connections.to_string())
        .arg("-m")
        .arg(H2_STREAMS.to_string())
        .arg("-t")
        .arg("1");
    match requests {
        Some(n) => {
            cmd.arg("-n").arg(n.to_string());
        }
        None => {
            let warm_ms = (ctx.warmup_s * 1000.0).round() as u64;
            if warm_ms > 0 {
                cmd.arg(format!("--warm-up-time={warm_ms}ms"));
            }
            cmd.arg("-D")
                .arg(format!("{}ms", (ctx.duration_s * 1000.0).round() as u64));
        }
    }
    cmd.arg(url).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn run_h2load(cmd: &mut std::process::Command) -> anyhow::Result<H2Out> {
    let out = cmd
        .output()
        .context("starting h2load (apt-get install nghttp2-client)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "h2load failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_h2load(&text)
}

/// One timed h2load run, with the CPU time of `watch` sampled over its measured window.
fn measure_h2(ctx: &Ctx, url: &str, watch: &[&Proc]) -> anyhow::Result<Measured> {
    let mut cmd = h2load_command(ctx, url, None);
    let child = std::thread::spawn(move || run_h2load(&mut cmd));
    // h2load connects, then warms up, then measures: sample from the end of the warm-up.
    std::thread::sleep(Duration::from_secs_f64(ctx.warmup_s) + Duration::from_millis(20));
    let before: Vec<(f64, f64)> = watch
        .iter()
        .map(|p| p.cpu_times())
        .collect::<anyhow::Result<_>>()?;
    let h2 = child
        .join()
        .map_err(|_| anyhow::anyhow!("the h2load thread panicked"))??;
    let cpu = watch
        .iter()
        .zip(before)
        .map(|(p, (u0, s0))| {
            let (u1, s1) = p.cpu_times()?;
            Ok((p.name.clone(), (u1 - u0).max(0.0), (s1 - s0).max(0.0)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Measured {
        load: h2.into_load(),
        cpu,
    })
}

// ---- the measured comparison ----------------------------------------------------------------

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Full,
    Resumed,
    H1,
    H2,
}

impl Item {
    fn title(self) -> &'static str {
        match self {
            Item::Full => "full handshakes",
            Item::Resumed => "resumed handshakes",
            Item::H1 => "HTTP/1.1 requests (keep-alive TLS)",
            Item::H2 => "HTTP/2 requests (TLS, h2load)",
        }
    }
}

/// Which process a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Nginx,
    Lua,
    Portico,
}

enum Work {
    Load(LoadSpec),
    H2(String),
}

struct Row<'a> {
    item: Item,
    who: Who,
    name: String,
    work: Work,
    /// The proxy first (its CPU is the figure), then the backend when requests reach it.
    watch: Vec<&'a Proc>,
}

fn run_row(ctx: &Ctx, row: &Row<'_>) -> anyhow::Result<Measured> {
    match &row.work {
        Work::Load(spec) => measure(ctx, spec, &row.watch),
        Work::H2(url) => measure_h2(ctx, url, &row.watch),
    }
}

/// A short run of every row before measuring: it must complete work and answer 2xx only.
fn check_rows(ctx: &Ctx, rows: &[Row<'_>]) -> anyhow::Result<()> {
    for row in rows {
        let m = match &row.work {
            Work::Load(spec) => {
                let mut s = spec.clone();
                s.duration_s = 0.3;
                s.warmup_s = 0.0;
                s.connections = s.connections.min(2);
                measure(ctx, &s, &row.watch)?
            }
            Work::H2(url) => Measured {
                load: run_h2load(&mut h2load_command(ctx, url, Some(200)))?.into_load(),
                cpu: Vec::new(),
            },
        };
        if m.load.ok == 0 || !m.load.errors.is_empty() {
            bail!(
                "set-up check of {} ({}): {} ok, errors {:?}",
                row.name,
                row.item.title(),
                m.load.ok,
                m.load.errors
            );
        }
        if row.item == Item::Resumed && m.load.resumed == 0 {
            bail!("set-up check of {}: no handshake resumed", row.name);
        }
    }
    Ok(())
}

/// Every row once per round, in order; the runs per row.
fn interleave_rows(ctx: &Ctx, rows: &[Row<'_>]) -> anyhow::Result<Vec<Vec<Measured>>> {
    let mut out: Vec<Vec<Measured>> = rows.iter().map(|_| Vec::new()).collect();
    for round in 0..ctx.rounds {
        for (i, row) in rows.iter().enumerate() {
            let m = run_row(ctx, row)?;
            eprintln!(
                "  round {} {:<20} {:<34} {:>8.0}/s {:>7} µs CPU each, resumed {}, errors {:?}",
                round + 1,
                row.name,
                row.item.title(),
                m.load.ok_rps,
                f1(cpu_each(row, &m).unwrap_or(f64::NAN)),
                m.load.resumed,
                m.load.errors
            );
            out[i].push(m);
        }
    }
    Ok(out)
}

/// The proxy's CPU µs per completed unit (handshake or request) of a run.
fn cpu_each(row: &Row<'_>, m: &Measured) -> Option<f64> {
    m.cpu_us_per_req(&row.watch[0].name)
}

/// Median over rounds of `row`'s per-core capacity over `base`'s, round by round (`base`'s
/// CPU per unit over `row`'s).
fn paired_per_core(
    rows: &[Row<'_>],
    runs: &[Vec<Measured>],
    row: usize,
    base: Option<usize>,
) -> f64 {
    let Some(base) = base else {
        return f64::NAN;
    };
    let v: Vec<f64> = runs[row]
        .iter()
        .zip(&runs[base])
        .filter_map(|(a, b)| Some(cpu_each(&rows[base], b)? / cpu_each(&rows[row], a)?))
        .collect();
    crate::report::median(&v)
}

fn find(rows: &[Row<'_>], item: Item, who: Who) -> Option<usize> {
    rows.iter().position(|r| r.item == item && r.who == who)
}

pub fn run(ctx: &Ctx, others: usize) -> anyhow::Result<()> {
    eprintln!(
        "== tls: Portico's TLS listener vs nginx vs nginx + Lua, TLS 1.3, one P-256 certificate"
    );
    let started_load = loadavg();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let certs_dir = ctx.subdir("tls-cert")?;
    let cert = write_cert(&certs_dir)?;

    let backend = start_backend(ctx, "backend", false)?;
    // The edge suite's tree for both signed edges; Portico's copy adds the `auth: none` API
    // HTTP/2 asks (the nginx + Lua peer serves signed APIs only and refuses others).
    let dir = ctx.subdir("tls-tree")?;
    edge::write_tree(&dir, backend.http, edge::FILLERS)?;
    let portico_dir = ctx.subdir("tls-tree-portico")?;
    edge::write_tree(&portico_dir, backend.http, edge::FILLERS)?;
    trees::write_doc(
        &portico_dir,
        "apis/bench.order.open.json",
        &json!({
            "id": "bench.order.open",
            "version": 1,
            "http": { "method": "GET", "path": "/v1/open/orders/{order_id}" },
            "backend": { "cluster": "bench-http", "timeout_ms": 1000, "http": { "path": "/orders/{order_id}" } },
            "auth": "none",
            // The signed API's bulkhead and breaker (the default bulkhead, 256 calls in
            // flight, is below h2load's connections × streams); no rate limits (no app).
            "policy": {
                "bulkhead": trees::bench_policy()["bulkhead"],
                "breaker": trees::bench_policy()["breaker"]
            }
        }),
    )?;

    let nginx = start_nginx_tls(ctx, "nginx", Some(backend.http), &cert, None)?;
    let portico = start_portico_tls(ctx, &rt, "portico", &portico_dir, &cert, None)?;
    let lua_tls_port = free_port()?;
    let (lua, checked) = lua_peer::start_checked_with(
        ctx,
        &dir,
        "bench-http",
        &nginx_tls_directives(lua_tls_port, &cert, None),
    )?;
    let lua_tls = loopback(lua_tls_port);
    for l in &checked {
        eprintln!("  peer check ok: {l}");
    }
    wait_tls_nginx(&rt, &lua, lua_tls, &cert.ca)?;
    let negotiated_portico = negotiated(&rt, portico.tls, &cert.ca)?;
    let negotiated_nginx = negotiated(&rt, nginx.tls, &cert.ca)?;
    eprintln!("  Portico: {negotiated_portico}; nginx: {negotiated_nginx}");

    let tls_args = |extra: &[&str]| {
        let mut v = vec![
            "--tls-ca".to_owned(),
            cert.ca.display().to_string(),
            "--tls-name".to_owned(),
            SERVER_NAME.to_owned(),
        ];
        v.extend(extra.iter().map(|s| (*s).to_owned()));
        v
    };
    let spec = |label: &str, addr: SocketAddr, path: &str, extra: &[&str]| {
        let mut s = LoadSpec::new(label, format!("https://{addr}{path}"), ctx);
        s.extra = tls_args(extra);
        s
    };
    let hs = |label: &str, addr: SocketAddr, resume: bool| {
        let mut extra = vec!["--handshakes"];
        if resume {
            extra.push("--tls-resume");
        }
        spec(label, addr, "/", &extra)
    };
    let np = &nginx.proxy.proc;
    let pp = &portico.proxy.proc;
    let bp = &backend.proc;
    let rows = vec![
        Row {
            item: Item::Full,
            who: Who::Nginx,
            name: "nginx".into(),
            work: Work::Load(hs("nginx-full", nginx.tls, false)),
            watch: vec![np],
        },
        Row {
            item: Item::Full,
            who: Who::Portico,
            name: "Portico".into(),
            work: Work::Load(hs("portico-full", portico.tls, false)),
            watch: vec![pp],
        },
        Row {
            item: Item::Resumed,
            who: Who::Nginx,
            name: "nginx".into(),
            work: Work::Load(hs("nginx-resumed", nginx.tls, true)),
            watch: vec![np],
        },
        Row {
            item: Item::Resumed,
            who: Who::Portico,
            name: "Portico".into(),
            work: Work::Load(hs("portico-resumed", portico.tls, true)),
            watch: vec![pp],
        },
        Row {
            item: Item::H1,
            who: Who::Nginx,
            name: "nginx (plain proxy)".into(),
            work: Work::Load(spec("nginx-h1", nginx.tls, edge::PLAIN_PATH, &[])),
            watch: vec![np, bp],
        },
        Row {
            item: Item::H1,
            who: Who::Lua,
            name: "nginx + Lua (signed edge)".into(),
            work: Work::Load(spec("nginx-lua-h1", lua_tls, edge::GATEWAY_PATH, &[])),
            watch: vec![&lua.proc, bp],
        },
        Row {
            item: Item::H1,
            who: Who::Portico,
            name: "Portico (signed edge)".into(),
            work: Work::Load(spec("portico-h1", portico.tls, edge::GATEWAY_PATH, &[])),
            watch: vec![pp, bp],
        },
        Row {
            item: Item::H2,
            who: Who::Nginx,
            name: "nginx (plain proxy)".into(),
            work: Work::H2(format!("https://{}{}", nginx.tls, edge::PLAIN_PATH)),
            watch: vec![np, bp],
        },
        Row {
            item: Item::H2,
            who: Who::Portico,
            name: "Portico (auth: none)".into(),
            work: Work::H2(format!("https://{}{OPEN_PATH}", portico.tls)),
            watch: vec![pp, bp],
        },
    ];
    check_rows(ctx, &rows)?;
    let runs = interleave_rows(ctx, &rows)?;

    let fleet = fleet(ctx, &rt, &portico_dir, &cert, others)?;
    let notes = Notes {
        started_load: &started_load,
        checked: &checked,
        negotiated_portico: &negotiated_portico,
        negotiated_nginx: &negotiated_nginx,
        others,
    };
    let md = render(ctx, &rows, &runs, &fleet, &notes);
    write_section(&ctx.results, "tls", &md)?;
    plot(ctx, &rows, &runs)?;
    eprintln!("{md}");
    Ok(())
}

/// Waits for the TLS listener of an nginx (already answering on its plain port).
fn wait_tls_nginx(
    rt: &tokio::runtime::Runtime,
    proxy: &Proxy,
    addr: SocketAddr,
    ca: &Path,
) -> anyhow::Result<()> {
    let ca = tls_client::read_ca(ca)?;
    let config = tls_client::config(&ca, false, &[b"http/1.1"])?;
    let name = tls_client::server_name(SERVER_NAME)?;
    rt.block_on(tls_client::handshake_once(
        &config,
        &name,
        addr,
        HANDSHAKE_TIMEOUT,
    ))
    .with_context(|| format!("{}: no TLS handshake on {addr}", proxy.proc.name))?;
    Ok(())
}

// ---- fleet resumption -----------------------------------------------------------------------

/// One pair's outcome.
struct FleetOut {
    name: String,
    /// Returning clients whose first handshake on A completed.
    took: usize,
    /// Other clients' handshakes on A that completed, of `others`.
    others_ok: usize,
    /// Returning clients whose handshake on B completed, and how many of them resumed.
    returned: usize,
    resumed: usize,
}

/// [`FLEET_CLIENTS`] clients handshake on `a` (keeping the tickets), `others` other
/// clients (no resumption, [`FLEET_CONCURRENCY`] at a time) handshake on `a`, then the
/// first clients handshake on `b` offering their tickets.
async fn fleet_pair(
    name: &str,
    a: SocketAddr,
    b: SocketAddr,
    ca: &rustls::pki_types::CertificateDer<'static>,
    others: usize,
) -> anyhow::Result<FleetOut> {
    let server = tls_client::server_name(SERVER_NAME)?;
    let clients = (0..FLEET_CLIENTS)
        .map(|_| tls_client::config(ca, true, &[b"http/1.1"]))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut took = 0;
    for c in &clients {
        if tls_client::handshake_once(c, &server, a, HANDSHAKE_TIMEOUT)
            .await
            .is_ok()
        {
            took += 1;
        }
    }
    let shared = tls_client::config(ca, false, &[b"http/1.1"])?;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..FLEET_CONCURRENCY {
        let n = others / FLEET_CONCURRENCY + usize::from(w < others % FLEET_CONCURRENCY);
        let (shared, server) = (shared.clone(), server.clone());
        tasks.spawn(async move {
            let mut ok = 0usize;
            for _ in 0..n {
                if tls_client::handshake_once(&shared, &server, a, HANDSHAKE_TIMEOUT)
                    .await
                    .is_ok()
                {
                    ok += 1;
                }
            }
            ok
        });
    }
    let mut others_ok = 0;
    while let Some(r) = tasks.join_next().await {
        others_ok += r.context("a fleet client task panicked")?;
    }
    let (mut returned, mut resumed) = (0, 0);
    for c in &clients {
        if let Ok(r) = tls_client::handshake_once(c, &server, b, HANDSHAKE_TIMEOUT).await {
            returned += 1;
            resumed += usize::from(r);
        }
    }
    Ok(FleetOut {
        name: name.to_owned(),
        took,
        others_ok,
        returned,
        resumed,
    })
}

fn fleet(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    tree: &Path,
    cert: &CertFiles,
    others: usize,
) -> anyhow::Result<Vec<FleetOut>> {
    eprintln!("  fleet resumption: {FLEET_CLIENTS} clients on A, {others} others on A, the {FLEET_CLIENTS} back on B");
    let ca = tls_client::read_ca(&cert.ca)?;
    let keys_dir = ctx.subdir("tls-fleet-keys")?;
    let portico_keys = keys_dir.join("portico-ticket-keys");
    write_portico_ticket_keys(&portico_keys)?;
    let nginx_key = keys_dir.join("nginx-ticket.key");
    write_nginx_ticket_key(&nginx_key)?;
    let mut out = Vec::new();
    let mut pair = |name: &str, a: &TlsProxy, b: &TlsProxy| -> anyhow::Result<()> {
        let r = rt.block_on(fleet_pair(name, a.tls, b.tls, &ca, others))?;
        eprintln!(
            "  {name}: {} took a session, {} of {others} others, {} of {} resumed on B",
            r.took, r.others_ok, r.resumed, r.returned
        );
        out.push(r);
        Ok(())
    };
    {
        let a = start_portico_tls(ctx, rt, "fleet-portico-a", tree, cert, Some(&portico_keys))?;
        let b = start_portico_tls(ctx, rt, "fleet-portico-b", tree, cert, Some(&portico_keys))?;
        pair("Portico ×2, one shared --tls-ticket-keys file", &a, &b)?;
    }
    {
        let a = start_portico_tls(ctx, rt, "fleet-portico-a", tree, cert, None)?;
        let b = start_portico_tls(ctx, rt, "fleet-portico-b", tree, cert, None)?;
        pair("Portico ×2, each its own ticket key (no file)", &a, &b)?;
    }
    {
        let a = start_nginx_tls(ctx, "fleet-nginx-a", None, cert, Some(&nginx_key))?;
        let b = start_nginx_tls(ctx, "fleet-nginx-b", None, cert, Some(&nginx_key))?;
        pair("nginx ×2, one shared ssl_session_ticket_key file", &a, &b)?;
    }
    {
        let a = start_nginx_tls(ctx, "fleet-nginx-a", None, cert, None)?;
        let b = start_nginx_tls(ctx, "fleet-nginx-b", None, cert, None)?;
        pair("nginx ×2, each its own ticket key", &a, &b)?;
    }
    Ok(out)
}

// ---- the report -----------------------------------------------------------------------------

struct Notes<'a> {
    started_load: &'a str,
    checked: &'a [String],
    negotiated_portico: &'a str,
    negotiated_nginx: &'a str,
    others: usize,
}

fn render(
    ctx: &Ctx,
    rows: &[Row<'_>],
    runs: &[Vec<Measured>],
    fleet: &[FleetOut],
    notes: &Notes<'_>,
) -> String {
    let each = |i: usize| med(&runs[i], |m| cpu_each(&rows[i], m));
    let part = |i: usize, user: bool| {
        let name = &rows[i].watch[0].name;
        med(&runs[i], |m| {
            if user {
                m.user_us_per_req(name)
            } else {
                m.sys_us_per_req(name)
            }
        })
    };
    let mut table_rows = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let r = &runs[i];
        let nginx = find(rows, row.item, Who::Nginx).filter(|n| *n != i);
        let lua = find(rows, row.item, Who::Lua).filter(|n| *n != i);
        let latency = match &row.work {
            Work::Load(_) => format!(
                "{} / {}",
                ms(med(r, |m| Some(m.load.latency_us.p50 as f64))),
                ms(med(r, |m| Some(m.load.latency_us.p99 as f64)))
            ),
            Work::H2(_) => format!("mean {}", ms(med(r, |m| Some(m.load.latency_us.mean)))),
        };
        let resumed = match row.item {
            Item::Full | Item::Resumed => pct(med(r, |m| {
                (m.load.ok > 0).then(|| m.load.resumed as f64 / m.load.ok as f64)
            })),
            Item::H1 | Item::H2 => "–".into(),
        };
        table_rows.push(vec![
            row.item.title().to_owned(),
            row.name.clone(),
            f0(med(r, |m| Some(m.load.ok_rps))),
            format!(
                "{} ({} + {})",
                f1(each(i)),
                f1(part(i, true)),
                f1(part(i, false))
            ),
            f0(1e6 / each(i)),
            ratio(paired_per_core(rows, runs, i, nginx)),
            ratio(paired_per_core(rows, runs, i, lua)),
            pct(med(r, |m| m.cpu_util(&row.watch[0].name))),
            resumed,
            latency,
            error_summary(r),
        ]);
    }
    let main = table(
        &[
            "measure",
            "target",
            "per second",
            "proxy CPU µs each (user + sys)",
            "per core (1 / CPU each)",
            "per core ÷ nginx (paired)",
            "per core ÷ nginx + Lua (paired)",
            "proxy CPU use",
            "resumed",
            "p50 / p99 ms",
            "non-2xx / failed",
        ],
        &table_rows,
    );
    let vs = |item: Item, base: Who| {
        find(rows, item, Who::Portico)
            .map(|p| paired_per_core(rows, runs, p, find(rows, item, base)))
            .unwrap_or(f64::NAN)
    };
    let cpu = |item: Item, who: Who| find(rows, item, who).map(each).unwrap_or(f64::NAN);
    let headline = format!(
        "**Portico ÷ nginx per core (paired per-round medians): full handshakes {} ({} vs {} µs CPU per handshake), resumed handshakes {} ({} vs {} µs), HTTP/1.1 requests over TLS {} (Portico's signed edge vs nginx's plain proxy; {} vs {} µs), HTTP/2 requests {} (Portico's `auth: none` API vs nginx's plain proxy; {} vs {} µs). Portico ÷ nginx + Lua per core, the same signed edge over TLS (HTTP/1.1): {} ({} vs {} µs per request).**",
        ratio(vs(Item::Full, Who::Nginx)),
        f1(cpu(Item::Full, Who::Portico)),
        f1(cpu(Item::Full, Who::Nginx)),
        ratio(vs(Item::Resumed, Who::Nginx)),
        f1(cpu(Item::Resumed, Who::Portico)),
        f1(cpu(Item::Resumed, Who::Nginx)),
        ratio(vs(Item::H1, Who::Nginx)),
        f1(cpu(Item::H1, Who::Portico)),
        f1(cpu(Item::H1, Who::Nginx)),
        ratio(vs(Item::H2, Who::Nginx)),
        f1(cpu(Item::H2, Who::Portico)),
        f1(cpu(Item::H2, Who::Nginx)),
        ratio(vs(Item::H1, Who::Lua)),
        f1(cpu(Item::H1, Who::Portico)),
        f1(cpu(Item::H1, Who::Lua)),
    );
    let fleet_rows: Vec<Vec<String>> = fleet
        .iter()
        .map(|f| {
            vec![
                f.name.clone(),
                format!("{} of {FLEET_CLIENTS}", f.took),
                format!("{} of {}", f.others_ok, notes.others),
                format!("{} of {}", f.resumed, f.returned),
            ]
        })
        .collect();
    let fleet_table = table(
        &[
            "pair (A, B)",
            "clients that took a session on A",
            "other clients' handshakes on A",
            "returning clients resumed on B",
        ],
        &fleet_rows,
    );
    let mut per_round = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let mut r = vec![format!("{}: {}", row.item.title(), row.name)];
        r.extend(runs[i].iter().map(|m| {
            format!(
                "{} / {} µs",
                f0(m.load.ok_rps),
                f1(cpu_each(row, m).unwrap_or(f64::NAN))
            )
        }));
        per_round.push(r);
    }
    let mut hdr = vec!["row".to_owned()];
    hdr.extend((1..=ctx.rounds).map(|i| format!("round {i} (per s / proxy CPU µs each)")));
    let hdr_refs: Vec<&str> = hdr.iter().map(String::as_str).collect();
    format!(
        "### TLS and HTTP/2: Portico's TLS listener vs nginx vs nginx + Lua\n\n{}\n\n![CPU per handshake and per request over TLS](plots/tls-cpu.svg)\n\nEvery target serves the same certificate, generated by the suite: ECDSA P-256 (SHA-256) for `{SERVER_NAME}`, signed by a generated authority the clients trust and verify against; TLS 1.3 only on every side (nginx `ssl_protocols TLSv1.3`). A client offering `h2` and `http/1.1` negotiated with Portico: {}; with nginx: {}. Resumption is on for both: Portico as it ships (TLS 1.3 tickets sealed with its own per-process key, no `--tls-ticket-keys` here; the session-ID cache), nginx with `ssl_session_tickets on; ssl_session_cache shared:SSL:10m;`. Handshakes: `portico-load --handshakes` (rustls client, ring): a new TCP connection per handshake, no request, `close_notify`, then reading until the server closes (the server sends its tickets); full: client resumption disabled; resumed: every client connection keeps the tickets it is given and offers one on its next handshake (its first handshake, in the warm-up, is full). CPU per handshake is the target process's user + system time over completed handshakes. HTTP/1.1: `portico-load` over TLS keep-alive connections ({} connections), every request signed (docs/PROTOCOL.md, \"Signing a request\"): Portico runs its full edge on `/v1/bench/orders/42` (the edge suite's tree and policy), nginx + Lua (benches/peers/nginx-lua/, the same tree; passed the peer check on its plain listener: {}) the same signed edge, nginx a plain keep-alive `proxy_pass` of `/orders/42` (it carries the headers along). HTTP/2: `h2load -c {} -m {H2_STREAMS} -t 1` (nghttp2-client), unsigned (h2load cannot sign each request): Portico on an `auth: none` API (`{OPEN_PATH}` → the same backend, the signed API's bulkhead and breaker, no rate limit; only Portico's copy of the tree has it), nginx a plain `proxy_pass`; nginx + Lua is not in the HTTP/2 row (its edge refuses unsigned calls). The p50 / p99 column is the handshake's or the request's latency (h2load: its mean time per request).\n\n{headline}\n\n{main}\n**Fleet resumption.** {FLEET_CLIENTS} clients take a session on gateway A; then {} other clients (no resumption, {FLEET_CONCURRENCY} at a time) handshake on A; then the {FLEET_CLIENTS} come back on gateway B offering their tickets. Two Portico gateways given the same `--tls-ticket-keys` file (one key, as `ops/tls-ticket-keys.sh new` writes) and two without one; two nginx given the same 80-byte `ssl_session_ticket_key` file and two with their own (random) keys:\n\n{fleet_table}\nPer round:\n\n{}",
        preamble(ctx, notes.started_load, true),
        notes.negotiated_portico,
        notes.negotiated_nginx,
        ctx.connections,
        notes.checked.join("; "),
        ctx.connections,
        notes.others,
        table(&hdr_refs, &per_round),
    )
}

/// `plots/tls-cpu.svg`: the proxy's CPU µs per handshake or request (user + system, user,
/// system), median over rounds.
fn plot(ctx: &Ctx, rows: &[Row<'_>], runs: &[Vec<Measured>]) -> anyhow::Result<()> {
    use crate::svg::{bars, Group};
    let groups: Vec<Group> = rows
        .iter()
        .zip(runs)
        .map(|(row, r)| {
            let name = &row.watch[0].name;
            Group {
                label: format!("{}: {}", row.item.title(), row.name),
                values: vec![
                    med(r, |m| m.cpu_us_per_req(name)),
                    med(r, |m| m.user_us_per_req(name)),
                    med(r, |m| m.sys_us_per_req(name)),
                ],
            }
        })
        .collect();
    bars(
        &ctx.plots_dir().join("tls-cpu.svg"),
        "tls: proxy CPU per handshake / request (median over rounds)",
        "CPU µs per handshake or request",
        &["user + system", "user", "system"],
        &groups,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "starting benchmark...
progress: 10% of clients started

finished in 6.00s, 20514.17 req/s, 3.58MB/s
requests: 123085 total, 123405 started, 123085 done, 123080 succeeded, 5 failed, 2 errored, 1 timeout
status codes: 123080 2xx, 0 3xx, 3 4xx, 0 5xx
traffic: 21.48MB (22522341) total, 2.35MB (2462600) headers (space savings 89.23%), 15.26MB (16000050) data
                     min         max         mean         sd        +/- sd
time for request:      512us     48.29ms     15.55ms      3.01ms    71.46%
time for connect:     1.23ms      2.01ms      1.51ms       210us    65.62%
time to 1st byte:     3.01ms      5.12ms      4.02ms       611us    62.50%
req/s           :     600.12      700.45      641.07       25.30    68.75%
";

    #[test]
    fn h2load_summary_is_parsed() {
        let out = parse_h2load(SAMPLE).unwrap();
        assert_eq!(out.done, 123_085);
        assert_eq!(out.errored, 2);
        assert_eq!(out.timeout, 1);
        assert_eq!(out.classes, [123_080, 0, 3, 0]);
        // 123,085 done at 20,514.17 req/s: the 6 s main duration.
        assert!((out.duration_s - 6.0).abs() < 1e-4, "{}", out.duration_s);
        assert!((out.mean_us.unwrap() - 15_550.0).abs() < 1e-6);
        let load = out.into_load();
        assert_eq!(load.ok, 123_080);
        assert!(
            (load.ok_rps - 123_080.0 / 6.0).abs() < 0.01,
            "{}",
            load.ok_rps
        );
        assert_eq!(load.errors.get("4xx"), Some(&3));
        assert_eq!(load.errors.get("transport"), Some(&2));
        assert_eq!(load.errors.get("timeout"), Some(&1));
        assert!(!load.errors.contains_key("3xx"));
    }

    #[test]
    fn the_window_excludes_h2loads_warm_up() {
        // `--warm-up-time=500ms -D 1000ms`: "finished in" counts both, req/s the main part.
        let text = "finished in 1.54s, 627.00 req/s, 73.34KB/s\nrequests: 627 total, 627 started, 627 done, 627 succeeded, 0 failed, 0 errored, 0 timeout\nstatus codes: 627 2xx, 0 3xx, 0 4xx, 0 5xx\n";
        let out = parse_h2load(text).unwrap();
        assert!((out.duration_s - 1.0).abs() < 1e-9, "{}", out.duration_s);
        assert!((out.into_load().ok_rps - 627.0).abs() < 1e-6);
    }

    #[test]
    fn h2load_durations_in_every_unit() {
        assert_eq!(h2_duration_us("512us"), Some(512.0));
        assert_eq!(h2_duration_us("48.29ms"), Some(48_290.0));
        assert_eq!(h2_duration_us("6.00s,"), Some(6_000_000.0));
        assert_eq!(h2_duration_us("2m"), Some(120_000_000.0));
        assert_eq!(h2_duration_us("12"), None);
        assert_eq!(h2_duration_us("fast"), None);
    }

    #[test]
    fn a_short_run_in_milliseconds_and_a_failed_run_are_read() {
        let text = "finished in 250.50ms, 0.00 req/s, 0B/s\nrequests: 10 total, 10 started, 0 done, 0 succeeded, 10 failed, 10 errored, 0 timeout\nstatus codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx\n";
        let out = parse_h2load(text).unwrap();
        assert!((out.duration_s - 0.2505).abs() < 1e-9);
        assert_eq!(out.done, 0);
        assert_eq!(out.errored, 10);
        assert_eq!(out.mean_us, None);
    }

    #[test]
    fn output_without_a_summary_is_an_error() {
        let e =
            parse_h2load("starting benchmark...\nNo protocol negotiated. Aborted.\n").unwrap_err();
        assert!(e.to_string().contains("finished in"), "{e}");
        let missing_codes = "finished in 1.00s, 1.00 req/s, 1B/s\nrequests: 1 total, 1 started, 1 done, 1 succeeded, 0 failed, 0 errored, 0 timeout\n";
        assert!(parse_h2load(missing_codes).is_err());
    }

    #[test]
    fn nginx_tls_directives_enable_tickets_and_the_shared_key() {
        let cert = CertFiles {
            ca: "/c/ca.pem".into(),
            cert: "/c/cert.pem".into(),
            key: "/c/key.pem".into(),
        };
        let own = nginx_tls_directives(8443, &cert, None);
        assert!(own.starts_with("listen 127.0.0.1:8443 ssl http2"));
        assert!(own.contains("ssl_protocols TLSv1.3;"));
        assert!(own.contains("ssl_session_tickets on;"));
        assert!(own.contains("ssl_session_cache shared:SSL:10m;"));
        assert!(!own.contains("ssl_session_ticket_key"));
        let shared = nginx_tls_directives(8443, &cert, Some(Path::new("/k/ticket.key")));
        assert!(shared.contains("ssl_session_ticket_key /k/ticket.key;"));
    }

    #[test]
    fn the_generated_certificate_is_p256_for_the_bench_name() {
        let dir = std::env::temp_dir().join(format!("tls-cert-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = write_cert(&dir).unwrap();
        let key = std::fs::read_to_string(&files.key).unwrap();
        let parsed = rcgen::KeyPair::from_pem(&key).unwrap();
        assert!(parsed.is_compatible(&rcgen::PKCS_ECDSA_P256_SHA256));
        let ca = tls_client::read_ca(&files.ca).unwrap();
        let cert = tls_client::read_ca(&files.cert).unwrap();
        assert_ne!(ca, cert);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
