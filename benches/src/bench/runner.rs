//! Running `portico-load` from the harness: pinned, with the CPU time of the watched
//! processes (proxy, backend) sampled over the measured window.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::procs::Proc;
use crate::Ctx;

/// The apps the load is signed as (their documents are in every Portico tree we write).
/// Several, as merchants would be: Portico's replay cache holds at most 1,000,000 nonces per
/// app per 300 s window and answers 429 beyond (more than ≈3,300 signed calls per second per
/// app, sustained, on one node), which one app alone would reach within a suite.
pub const APPS: usize = 16;

/// The key of bench app `i`.
pub fn app_key(i: usize) -> String {
    format!("bench-app-{i:02}")
}

/// The secret of bench app `i`.
pub fn app_secret(i: usize) -> String {
    format!("bench-secret-{i:02}-0123456789abcdef")
}

/// One load run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub label: String,
    pub url: String,
    pub method: &'static str,
    pub body: Option<String>,
    pub connections: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub rate: Option<f64>,
    pub headers: Vec<String>,
    pub timeout_ms: u64,
    /// With `rate`: open loop (latency from the scheduled send time).
    pub open_loop: bool,
    /// Sign as the first `apps` bench apps (connection i as app i mod apps).
    pub apps: usize,
    /// More `portico-load` arguments.
    pub extra: Vec<String>,
}

impl LoadSpec {
    pub fn new(label: &str, url: String, ctx: &Ctx) -> Self {
        LoadSpec {
            label: label.to_owned(),
            url,
            method: "GET",
            body: None,
            connections: ctx.connections,
            duration_s: ctx.duration_s,
            warmup_s: ctx.warmup_s,
            rate: None,
            headers: Vec::new(),
            timeout_ms: 10_000,
            open_loop: false,
            apps: APPS,
            extra: Vec::new(),
        }
    }
}

/// What `portico-load` reports (the fields the harness uses).
#[derive(Debug, Clone, Deserialize)]
pub struct LoadOut {
    pub requests: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub ok_rps: f64,
    pub rps: f64,
    pub duration_s: f64,
    pub latency_us: Latency,
    pub client_cpu_s: f64,
    #[serde(default)]
    pub late_sends: u64,
    #[serde(default)]
    pub replays: BTreeMap<String, u64>,
    /// `[second, 2xx, 429, other]`
    #[serde(default)]
    pub series: Vec<[u64; 4]>,
    /// `--handshakes`: the handshakes that resumed a session.
    #[serde(default)]
    pub resumed: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Latency {
    pub p50: u64,
    #[serde(default)]
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    #[serde(default)]
    pub max: u64,
    #[serde(default)]
    pub mean: f64,
}

/// A load run and the CPU time each watched process used during its window.
#[derive(Debug, Clone)]
pub struct Measured {
    pub load: LoadOut,
    /// (process name, user CPU seconds, system CPU seconds) in the window
    pub cpu: Vec<(String, f64, f64)>,
}

impl Measured {
    fn times(&self, name: &str) -> Option<(f64, f64)> {
        self.cpu
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, u, s)| (*u, *s))
    }

    fn per_req(&self, secs: f64) -> Option<f64> {
        (self.load.requests > 0).then(|| secs * 1e6 / self.load.requests as f64)
    }

    /// CPU µs (user + system) per completed request of the named process.
    pub fn cpu_us_per_req(&self, name: &str) -> Option<f64> {
        let (u, s) = self.times(name)?;
        self.per_req(u + s)
    }

    /// User CPU µs per completed request of the named process.
    pub fn user_us_per_req(&self, name: &str) -> Option<f64> {
        let (u, _) = self.times(name)?;
        self.per_req(u)
    }

    /// System CPU µs per completed request of the named process.
    pub fn sys_us_per_req(&self, name: &str) -> Option<f64> {
        let (_, s) = self.times(name)?;
        self.per_req(s)
    }

    /// Share of one core the named process used over the window.
    pub fn cpu_util(&self, name: &str) -> Option<f64> {
        let (u, s) = self.times(name)?;
        Some((u + s) / self.load.duration_s.max(1e-9))
    }
}

/// A running `portico-load`.
pub struct LoadRun {
    child: Child,
    label: String,
}

impl LoadRun {
    pub fn start(ctx: &Ctx, spec: &LoadSpec) -> anyhow::Result<Self> {
        let bin = ctx.bin("portico-load");
        let mut cmd = crate::procs::command(&bin, ctx.load_cpu.as_deref(), ctx.nice);
        cmd.arg("--url")
            .arg(&spec.url)
            .arg("--method")
            .arg(spec.method)
            .arg("--connections")
            .arg(spec.connections.to_string())
            .arg("--duration")
            .arg(spec.duration_s.to_string())
            .arg("--warmup")
            .arg(spec.warmup_s.to_string())
            .arg("--timeout-ms")
            .arg(spec.timeout_ms.to_string())
            .arg("--label")
            .arg(&spec.label);
        for i in 0..spec.apps.clamp(1, APPS) {
            cmd.arg("--app")
                .arg(format!("{}:{}", app_key(i), app_secret(i)));
        }
        if let Some(b) = &spec.body {
            cmd.arg("--body").arg(b);
        }
        if let Some(r) = spec.rate {
            cmd.arg("--rate").arg(r.to_string());
            if spec.open_loop {
                cmd.arg("--open-loop");
            }
        }
        cmd.args(&spec.extra);
        for h in &spec.headers {
            cmd.arg("--header").arg(h);
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(LoadRun {
            child,
            label: spec.label.clone(),
        })
    }

    /// Whether the load generator has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn finish(self) -> anyhow::Result<LoadOut> {
        let out = self.child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "portico-load ({}) failed: {}",
                self.label,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim())
            .with_context(|| format!("parsing portico-load output {text:?}"))
    }
}

/// Runs one load and samples the CPU time of `watch` from the end of the warm-up to the end
/// of the run.
pub fn measure(ctx: &Ctx, spec: &LoadSpec, watch: &[&Proc]) -> anyhow::Result<Measured> {
    let run = LoadRun::start(ctx, spec)?;
    // portico-load starts counting `warmup` after its start; its start-up takes a few ms.
    std::thread::sleep(Duration::from_secs_f64(spec.warmup_s) + Duration::from_millis(5));
    let before: Vec<(f64, f64)> = watch
        .iter()
        .map(|p| p.cpu_times())
        .collect::<anyhow::Result<_>>()?;
    let load = run.finish()?;
    let cpu = watch
        .iter()
        .zip(before)
        .map(|(p, (u0, s0))| {
            let (u1, s1) = p.cpu_times()?;
            Ok((p.name.clone(), (u1 - u0).max(0.0), (s1 - s0).max(0.0)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Measured { load, cpu })
}

/// One target of an interleaved comparison: the load to send and the processes to watch
/// (the first one is "the proxy" for the CPU columns).
pub struct Target<'a> {
    pub name: String,
    pub spec: LoadSpec,
    pub watch: Vec<&'a Proc>,
}

/// Runs every target once per round, in order (A B C D, A B C D, ...); returns the runs
/// per target.
pub fn interleave(ctx: &Ctx, targets: &[Target<'_>]) -> anyhow::Result<Vec<Vec<Measured>>> {
    let mut out: Vec<Vec<Measured>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..ctx.rounds {
        for (i, t) in targets.iter().enumerate() {
            let m = measure(ctx, &t.spec, &t.watch)?;
            let cpu = t
                .watch
                .first()
                .and_then(|p| m.cpu_us_per_req(&p.name))
                .map(|v| format!(" {:.1} µs CPU/req ({})", v, t.watch[0].name))
                .unwrap_or_default();
            eprintln!(
                "  round {} {:<22} {:>8.0} ok/s p99 {:>6} µs errors {:?}{}",
                round + 1,
                t.name,
                m.load.ok_rps,
                m.load.latency_us.p99,
                m.load.errors,
                cpu
            );
            out[i].push(m);
        }
    }
    Ok(out)
}

/// The median of `f` over runs.
pub fn med(runs: &[Measured], f: impl Fn(&Measured) -> Option<f64>) -> f64 {
    let v: Vec<f64> = runs.iter().filter_map(f).collect();
    crate::report::median(&v)
}

/// Median over rounds of the per-round ratio a/b of `f`.
pub fn paired_ratio(a: &[Measured], b: &[Measured], f: impl Fn(&Measured) -> Option<f64>) -> f64 {
    let v: Vec<f64> = a
        .iter()
        .zip(b)
        .filter_map(|(x, y)| Some(f(x)? / f(y)?))
        .collect();
    crate::report::median(&v)
}

/// Every non-2xx outcome over runs, as `status×count` text.
pub fn error_summary(runs: &[Measured]) -> String {
    let mut all: BTreeMap<String, u64> = BTreeMap::new();
    for r in runs {
        for (k, v) in &r.load.errors {
            *all.entry(k.clone()).or_default() += v;
        }
    }
    if all.is_empty() {
        "0".into()
    } else {
        all.iter()
            .map(|(k, v)| format!("{k}×{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
