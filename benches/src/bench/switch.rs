//! The switch benchmark (benches/RESULTS.md, "Switch push latency and publish → live"): how fast a
//! change written to ZooKeeper is enforced by two gateway nodes.
//!
//! - Switch push latency: flip `switches/<api>` (degraded on/off) with a ZooKeeper client;
//!   one poller per gateway sends requests back to back and notes when the answer first
//!   reflects the new state (503 `API_DEGRADED` / 200). Latency = that moment − the moment
//!   just before the write was sent (so the write's round trip is included).
//! - Publish → live: create `apis/<new id>` and time until each gateway answers 200 on its
//!   path instead of 404.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::json;
use zookeeper_client as zk;

use crate::procs::{free_port, http_request, wait_http, Proc, Spawn};
use crate::report::{table, write_section};
use crate::services::{start_backend, start_gateway, Proxy};
use crate::trees;
use crate::{loadavg, preamble, Ctx};

const ROOT: &str = "/portico";
const FLIPS: usize = 40;
/// Filler APIs in the tree besides the switched one.
const FILLERS: usize = 50;
const PUBLISHES: usize = 12;
const REGISTRY_FLIPS: usize = 20;
const REGISTRY_PUBLISHES: usize = 8;
const REGISTRY_TOKEN: &str = "portico-bench-admin-token";
const SWITCHED_API: &str = "bench.switched";
const SWITCHED_PATH: &str = "/v1/bench/switched";
/// Pause between two polls of one gateway (the measurement's resolution is this plus one
/// request, ≈1.3 ms; polling flat out would compete with the gateways for CPU).
const POLL_GAP: Duration = Duration::from_millis(1);

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== switch: ZooKeeper write → enforced on two gateways");
    let started_load = loadavg();
    let help = std::process::Command::new(ctx.bin("portico-gateway"))
        .arg("--help")
        .output()
        .context("portico-gateway --help")?;
    if !String::from_utf8_lossy(&help.stdout).contains("--zk") {
        bail!("portico-gateway has no --zk mode");
    }
    let zk_server = portico_testkit::ZooKeeper::try_start().map_err(|e| anyhow!(e))?;
    let hosts = zk_server.connect_string();
    let backend = start_backend(ctx, "backend", false)?;

    let dir = ctx.subdir("switch-tree")?;
    trees::write_common(&dir)?;
    trees::write_cluster(&dir, "bench-http", "http", backend.http)?;
    trees::write_fillers(&dir, "bench-http", FILLERS)?;
    trees::write_doc(
        &dir,
        &format!("apis/{SWITCHED_API}.json"),
        &json!({
            "id": SWITCHED_API,
            "version": 1,
            "http": { "method": "GET", "path": SWITCHED_PATH },
            "backend": { "cluster": "bench-http", "timeout_ms": 1000, "http": { "path": "/health" } },
            "auth": "none"
        }),
    )?;
    trees::write_doc(
        &dir,
        &format!("switches/{SWITCHED_API}.json"),
        &switch_doc(false, 0),
    )?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = rt.block_on(
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&hosts),
    )?;
    rt.block_on(async {
        upload_tree(&client, ROOT, &dir).await?;
        // The registry validates drafts against the sandbox tree: give it the same documents.
        upload_tree(&client, &format!("{ROOT}/sandbox"), &dir).await?;
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.mkdir(&format!("{ROOT}/nodes"), &opts).await?;
        anyhow::Ok(())
    })?;

    let mut gws = Vec::new();
    for i in 1..=2 {
        let snap = ctx.subdir(&format!("snapshot-gw-{i}"))?;
        gws.push(start_gateway(
            ctx,
            &format!("gw-{i}"),
            &[
                "--zk".into(),
                hosts.clone(),
                "--zk-root".into(),
                ROOT.into(),
                "--snapshot-dir".into(),
                snap.display().to_string(),
            ],
            None,
        )?);
    }
    for g in &gws {
        wait_status(g.addr, SWITCHED_PATH, 200, Duration::from_secs(15))
            .with_context(|| format!("{} never served {SWITCHED_PATH}", g.proc.name))?;
    }

    // Switch flips.
    let switch_path = format!("{ROOT}/switches/{SWITCHED_API}");
    let mut flip_node: Vec<Vec<f64>> = vec![Vec::new(); gws.len()];
    let mut flip_both = Vec::new();
    let mut write_rtt = Vec::new();
    let mut flip_after_ack = Vec::new();
    let mut missed = 0usize;
    for i in 0..FLIPS {
        let degraded = i % 2 == 0;
        let want = if degraded { 503 } else { 200 };
        let data = serde_json::to_vec(&switch_doc(degraded, i + 1))?;
        let (t0, rtt, seen) = timed_change(&gws, SWITCHED_PATH, want, || {
            rt.block_on(client.set_data(&switch_path, &data, None))
                .map(|_| ())
                .map_err(|e| anyhow!("ZooKeeper setData: {e}"))
        })?;
        write_rtt.push(rtt);
        if let Some(both) = record(&mut flip_node, &mut flip_both, &mut missed, t0, &seen) {
            flip_after_ack.push((both - rtt).max(0.0));
        }
        std::thread::sleep(Duration::from_millis(50 + fastrand::u64(0..50)));
    }

    // Publish → live (a new API document created in ZooKeeper).
    let mut pub_node: Vec<Vec<f64>> = vec![Vec::new(); gws.len()];
    let mut pub_both = Vec::new();
    let run_tag = fastrand::u32(..);
    for j in 0..PUBLISHES {
        let id = format!("bench.pub.{run_tag:x}.{j}");
        let path = format!("/v1/bench/pub{run_tag:x}/{j}");
        let doc = json!({
            "id": id,
            "version": 1,
            "http": { "method": "GET", "path": path },
            "backend": { "cluster": "bench-http", "timeout_ms": 1000, "http": { "path": "/health" } },
            "auth": "none"
        });
        let data = serde_json::to_vec(&doc)?;
        let node = format!("{ROOT}/apis/{id}");
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let (t0, _rtt, seen) = timed_change(&gws, &path, 200, || {
            rt.block_on(client.create(&node, &data, &opts))
                .map(|_| ())
                .map_err(|e| anyhow!("ZooKeeper create: {e}"))
        })?;
        record(&mut pub_node, &mut pub_both, &mut missed, t0, &seen);
        std::thread::sleep(Duration::from_millis(50));
    }
    // The same two measurements through the registry's admin API, when it is built.
    let mut reg_flip_both = Vec::new();
    let mut reg_pub_both = Vec::new();
    let mut reg_note = String::from("not measured: no portico-registry binary");
    if ctx.bin("portico-registry").is_file() {
        let (_registry, reg) = start_registry(ctx, &hosts)?;
        let token = vec![(
            "Authorization".to_owned(),
            format!("Bearer {REGISTRY_TOKEN}"),
        )];
        let mut scratch: Vec<Vec<f64>> = vec![Vec::new(); gws.len()];
        for i in 0..REGISTRY_FLIPS {
            let degraded = i % 2 == 0;
            let want = if degraded { 503 } else { 200 };
            let body = serde_json::to_vec(&json!({
                "degraded": degraded,
                "reason": format!("portico-bench registry flip {}", i + 1)
            }))?;
            let (t0, _, seen) = timed_change(&gws, SWITCHED_PATH, want, || {
                registry_call(
                    reg,
                    "PUT",
                    &format!("/api/v1/switches/{SWITCHED_API}"),
                    &token,
                    &body,
                )
            })?;
            record(&mut scratch, &mut reg_flip_both, &mut missed, t0, &seen);
            std::thread::sleep(Duration::from_millis(50 + fastrand::u64(0..50)));
        }
        for j in 0..REGISTRY_PUBLISHES {
            let id = format!("bench.regpub.{run_tag:x}.{j}");
            let path = format!("/v1/bench/regpub{run_tag:x}/{j}");
            let doc = serde_json::to_vec(&json!({
                "id": id,
                "version": 1,
                "http": { "method": "GET", "path": path },
                "backend": { "cluster": "bench-http", "timeout_ms": 1000, "http": { "path": "/health" } },
                "auth": "none"
            }))?;
            registry_call(
                reg,
                "PUT",
                &format!("/api/v1/sandbox/apis/{id}"),
                &token,
                &doc,
            )?;
            let (t0, _, seen) = timed_change(&gws, &path, 200, || {
                registry_call(
                    reg,
                    "POST",
                    &format!("/api/v1/apis/{id}/publish"),
                    &token,
                    b"",
                )
            })?;
            record(&mut scratch, &mut reg_pub_both, &mut missed, t0, &seen);
            std::thread::sleep(Duration::from_millis(50));
        }
        reg_note = format!(
            "{REGISTRY_FLIPS} switch flips by `PUT /api/v1/switches/{SWITCHED_API}` and {REGISTRY_PUBLISHES} publishes (draft `PUT /api/v1/sandbox/apis/<id>` first, untimed; then `POST /api/v1/apis/<id>/publish`, timed from just before the call) through one `portico-registry`"
        );
    }
    for g in &mut gws {
        g.proc.check_alive()?;
    }

    let row = |what: String, v: &[f64]| {
        vec![
            what,
            v.len().to_string(),
            format!("{:.2}", pctl(v, 0.50)),
            format!("{:.2}", pctl(v, 0.99)),
            format!("{:.2}", v.iter().copied().fold(f64::NAN, f64::max)),
        ]
    };
    let mut rows = Vec::new();
    for (g, v) in gws.iter().zip(&flip_node) {
        rows.push(row(format!("switch flip → enforced on {}", g.proc.name), v));
    }
    rows.push(row(
        "switch flip → enforced on both nodes".into(),
        &flip_both,
    ));
    rows.push(row("(ZooKeeper setData round trip)".into(), &write_rtt));
    rows.push(row(
        "(both nodes, minus that flip's write round trip)".into(),
        &flip_after_ack,
    ));
    for (g, v) in gws.iter().zip(&pub_node) {
        rows.push(row(
            format!("publish (create apis/<id>) → live on {}", g.proc.name),
            v,
        ));
    }
    rows.push(row("publish → live on both nodes".into(), &pub_both));
    if !reg_flip_both.is_empty() {
        rows.push(row(
            "registry `PUT switches/<id>` → enforced on both nodes".into(),
            &reg_flip_both,
        ));
        rows.push(row(
            "registry `POST apis/<id>/publish` → live on both nodes".into(),
            &reg_pub_both,
        ));
    }
    let md = format!(
        "### Switch push latency and publish → live\n\n{}\n\nA real ZooKeeper (Debian package, standalone, data dir on local disk, on 127.0.0.1) and two `portico-gateway --zk` nodes (`--threads 1` each, not pinned) watching the same root, which holds {} APIs. Each of {FLIPS} flips writes `switches/{SWITCHED_API}` (degraded on, then off, ...) with the harness's own ZooKeeper client; one poller thread per gateway sends a request every ≈1.3 ms (1 ms pause + one request on a new connection) and notes the first answer in the new state. Latency = first answer in the new state − the instant before the write was sent (the write's own round trip, shown separately, is included). Publish → live: {PUBLISHES} new `apis/<id>` documents created the same way; live = the first 200 instead of 404. Through the registry: {reg_note}. Percentiles are nearest-rank: with fewer than 100 samples, p99 is the maximum. Goals: switch p99 ≤ 50 ms, publish → live ≤ 1 s. Changes not seen within 5 s: {missed}.\n\n{}",
        preamble(ctx, &started_load, false),
        FILLERS + 1,
        table(&["measurement", "samples", "p50 ms", "p99 ms", "max ms"], &rows),
    );
    write_section(&ctx.results, "switch", &md)?;
    eprintln!("{md}");
    drop(client);
    Ok(())
}

fn switch_doc(degraded: bool, n: usize) -> serde_json::Value {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    json!({
        "degraded": degraded,
        "reason": format!("portico-bench flip {n}"),
        "updated_by": "portico-bench",
        "updated_at": now
    })
}

/// Starts one poller per gateway (each polling `path` until it answers `want`), makes the
/// change, and returns the instant just before the change, the change's round trip in ms,
/// and when each gateway first answered `want` (None: not within 5 s).
fn timed_change(
    gws: &[Proxy],
    path: &str,
    want: u16,
    change: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<(Instant, f64, Vec<Option<Instant>>)> {
    let barrier = Arc::new(Barrier::new(gws.len() + 1));
    let mut pollers = Vec::new();
    for g in gws {
        let addr = g.addr;
        let path = path.to_owned();
        let barrier = barrier.clone();
        pollers.push(std::thread::spawn(move || {
            barrier.wait();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok((s, _)) = http_request(addr, "GET", &path, &[], b"") {
                    if s == want {
                        return Some(Instant::now());
                    }
                }
                std::thread::sleep(POLL_GAP);
            }
            None
        }));
    }
    barrier.wait();
    // Let the pollers get going on the old state first.
    std::thread::sleep(Duration::from_millis(3));
    let t0 = Instant::now();
    change()?;
    let rtt = t0.elapsed().as_secs_f64() * 1e3;
    let seen = pollers
        .into_iter()
        .map(|p| p.join().map_err(|_| anyhow!("poller panicked")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((t0, rtt, seen))
}

/// Adds each node's latency to `per_node` and the slower one to `both` (returned too).
fn record(
    per_node: &mut [Vec<f64>],
    both: &mut Vec<f64>,
    missed: &mut usize,
    t0: Instant,
    seen: &[Option<Instant>],
) -> Option<f64> {
    let mut worst: Option<f64> = Some(0.0);
    for (i, s) in seen.iter().enumerate() {
        match s {
            Some(at) => {
                let ms = at.saturating_duration_since(t0).as_secs_f64() * 1e3;
                per_node[i].push(ms);
                worst = worst.map(|w| w.max(ms));
            }
            None => {
                *missed += 1;
                worst = None;
            }
        }
    }
    if let Some(w) = worst {
        both.push(w);
    }
    worst
}

/// Nearest-rank percentile.
fn pctl(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

fn wait_status(addr: SocketAddr, path: &str, want: u16, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match http_request(addr, "GET", path, &[], b"") {
            Ok((s, _)) if s == want => return Ok(()),
            Ok((s, b)) => last = format!("{s} {}", &b[..b.len().min(200)]),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("no {want} from http://{addr}{path} within {timeout:?} (last: {last})")
}

/// `portico-registry --zk HOSTS --zk-root ROOT --listen 127.0.0.1:PORT` with a bearer token,
/// ready once `/api/v1/health` answers 200.
fn start_registry(ctx: &Ctx, hosts: &str) -> anyhow::Result<(Proc, SocketAddr)> {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let bin = ctx.bin("portico-registry");
    let (mut proc, _) = Spawn {
        name: "registry",
        program: &bin,
        args: vec![
            "--zk".into(),
            hosts.to_owned(),
            "--zk-root".into(),
            ROOT.into(),
            "--listen".into(),
            addr.to_string(),
        ],
        env: vec![
            ("PORTICO_ADMIN_TOKEN", REGISTRY_TOKEN.to_owned()),
            ("RUST_LOG", "warn".to_owned()),
        ],
        cpu: None,
        nice: ctx.nice,
        log_dir: &ctx.tmp,
        pipe_stdout: false,
        launch: &crate::procs::Launch::default(),
    }
    .start()?;
    wait_http(
        &mut proc,
        addr,
        "/api/v1/health",
        200,
        Duration::from_secs(30),
    )?;
    Ok((proc, addr))
}

/// One admin API call; fails unless it answers 2xx.
fn registry_call(
    reg: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> anyhow::Result<()> {
    let (status, text) = http_request(reg, method, path, headers, body)?;
    if !(200..300).contains(&status) {
        bail!("registry {method} {path}: {status} {text}");
    }
    Ok(())
}

/// Creates the directory tree `dir` (docs/operations/config-tree.md, "The configuration tree") under `root`
/// in ZooKeeper.
async fn upload_tree(client: &zk::Client, root: &str, dir: &Path) -> anyhow::Result<()> {
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for sub in [
        "apis",
        "clusters",
        "apps",
        "switches",
        "descriptors",
        "nodes",
    ] {
        client.mkdir(&format!("{root}/{sub}"), &opts).await?;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p
                .strip_prefix(dir)?
                .to_str()
                .ok_or_else(|| anyhow!("non-UTF-8 path"))?;
            let node = rel
                .strip_suffix(".json")
                .or_else(|| rel.strip_suffix(".pb"))
                .unwrap_or(rel);
            let path = format!("{root}/{node}");
            if let Some((parent, _)) = path.rsplit_once('/') {
                client.mkdir(parent, &opts).await?;
            }
            let data = std::fs::read(&p)?;
            match client.create(&path, &data, &opts).await {
                Ok(_) => {}
                Err(zk::Error::NodeExists) => {
                    client.set_data(&path, &data, None).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
