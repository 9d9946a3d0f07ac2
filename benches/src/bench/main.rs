//! `portico-bench`: the load harness behind `ops/bench.sh`.
//!
//! Starts the processes under test on free 127.0.0.1 ports (the demo backend, nginx, the
//! bare Pingora proxy, Portico), pins them (proxies on one CPU, the load generator and the
//! backend on the other, when the machine has two or more), runs `portico-load` against
//! each target in interleaved rounds (A B C D, A B C D, ...), samples every process's CPU
//! time from `/proc/<pid>/stat`, and writes medians and ratios into benches/RESULTS.md.
//!
//! ```text
//! portico-bench edge|grpc|isolation|switch|instructions|knobs|apis|idle|latency|replay|cache|routing|fleet|notify|tls|peer-check|all
//!     [--rounds 5] [--duration 6] [--connections 32] [--nice -10] ...
//! ```

mod cache;
mod callgrind;
mod edge;
mod fleet;
mod grpc;
mod instructions;
mod isolation;
mod knobs;
mod latency;
mod lua_peer;
mod notify;
mod procs;
mod replay;
mod report;
mod routing;
mod runner;
mod scale;
mod services;
mod svg;
mod switch;
mod tls;
#[path = "../tls_client.rs"]
mod tls_client;
mod trees;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(about = "Portico's benchmark harness (see benches/RESULTS.md)")]
struct Cli {
    #[command(subcommand)]
    suite: Suite,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
enum Suite {
    /// Direct backend vs nginx vs bare Pingora vs Portico (full edge pipeline).
    Edge,
    /// A transcoded gRPC call vs an HTTP proxy call of the same payload.
    Grpc,
    /// API B's throughput and p99 while API A's backend hangs.
    Isolation,
    /// Switch push latency to two gateways through ZooKeeper, publish → live.
    Switch,
    /// Instructions per request under callgrind (Portico, bare Pingora, nginx;
    /// gRPC transcoded vs HTTP with the same answer bytes), top functions.
    Instructions,
    /// Pingora's knobs on the bare proxy, one at a time (instructions and CPU).
    Knobs,
    /// 10,000 APIs vs 10 APIs (capacity, instructions, RSS).
    Apis,
    /// Memory per idle keep-alive connection (Portico, bare Pingora, nginx).
    Idle,
    /// Open-loop latency at 50% of saturation, Portico vs bare Pingora.
    Latency,
    /// One app's sustained signed rate against the replay cache (minutes).
    Replay,
    /// A cache HIT, a MISS and the hot-key detector vs a proxied call
    /// (instructions and CPU per request).
    Cache,
    /// `least_load` + health checks + sticky vs `round_robin` (capacity, instructions).
    Routing,
    /// A cluster-scope rate limit with Redis vs a local one (cost at 1k and 10k
    /// req/s), and its accuracy under uneven load over three gateways.
    Fleet,
    /// Notifications: publish → delivered latency at 1,000 events/s over 1,000
    /// merchants' signed streams, memory per idle stream, events/s one node sustains.
    Notify,
    /// TLS 1.3 and HTTP/2: full and resumed handshakes per core, requests per core on
    /// kept-alive TLS (HTTP/1.1 signed, HTTP/2 with h2load), Portico vs nginx vs nginx + Lua;
    /// fleet resumption across two gateways.
    Tls,
    /// The nginx + Lua peer of the edge suite alone: it accepts both signature vectors of
    /// docs/PROTOCOL.md and refuses a bad signature, a replay, a stale timestamp, an unknown
    /// app (the check the edge suite also runs before measuring).
    PeerCheck,
    /// Every suite in turn (the replay soak included).
    All,
}

#[derive(Args, Debug, Clone)]
struct Common {
    /// Interleaved rounds per target.
    #[arg(long, global = true, default_value_t = 5)]
    rounds: usize,
    /// Measured seconds per run (at most 30).
    #[arg(long, global = true, default_value_t = 6.0)]
    duration: f64,
    /// Warm-up seconds before each measured run.
    #[arg(long, global = true, default_value_t = 1.0)]
    warmup: f64,
    /// Keep-alive connections of the load generator.
    #[arg(long, global = true, default_value_t = 32)]
    connections: usize,
    /// The results file to update.
    #[arg(long, global = true, default_value = "benches/RESULTS.md")]
    results: PathBuf,
    /// Where the release binaries are (default: next to this executable).
    #[arg(long, global = true)]
    bin_dir: Option<PathBuf>,
    /// Do not pin processes to CPUs.
    #[arg(long, global = true)]
    no_pin: bool,
    /// Niceness of every process under test and of the load generator (e.g. -10 to stand
    /// out against other work on a shared machine; needs root). 0: unchanged.
    #[arg(long, global = true, default_value_t = 0, allow_hyphen_values = true)]
    nice: i32,
    /// Keep the temporary directory (configs, logs) after the run.
    #[arg(long, global = true)]
    keep_tmp: bool,
    /// Counted requests per target under callgrind.
    #[arg(long, global = true, default_value_t = 4000)]
    calls: u64,
    /// Warm-up requests before counting under callgrind.
    #[arg(long, global = true, default_value_t = 1000)]
    cg_warmup: u64,
    /// Keep-alive connections of the counted load.
    #[arg(long, global = true, default_value_t = 8)]
    cg_connections: usize,
    /// Fresh-process repetitions of each edge target under callgrind.
    #[arg(long, global = true, default_value_t = 2)]
    cg_reps: usize,
    /// Idle keep-alive connections per target (idle suite).
    #[arg(long, global = true, default_value_t = 10_000)]
    idle_connections: u64,
    /// Length of the one-app soak in seconds (replay suite; at most 900).
    #[arg(long, global = true, default_value_t = 600.0)]
    soak_secs: f64,
    /// Knobs suite: only the knobs whose name contains one of these (repeatable; the
    /// baseline always runs).
    #[arg(long = "knob", global = true)]
    knobs: Vec<String>,
    /// Signed requests per second of the one app (replay suite).
    #[arg(long, global = true, default_value_t = 10_000.0)]
    soak_rate: f64,
    /// Other clients that handshake on gateway A between the returning clients' two visits
    /// (tls suite, fleet resumption).
    #[arg(long, global = true, default_value_t = 10_000)]
    tls_others: usize,
}

/// What every suite needs.
pub struct Ctx {
    pub bin_dir: PathBuf,
    pub nginx: PathBuf,
    pub tmp: PathBuf,
    pub load_cpu: Option<String>,
    pub proxy_cpu: Option<String>,
    pub backend_cpu: Option<String>,
    pub backend_threads: usize,
    pub proxy_threads: usize,
    pub nice: i32,
    pub connections: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub rounds: usize,
    pub results: PathBuf,
}

impl Ctx {
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// The pinning, in words, for the method notes.
    pub fn placement(&self) -> String {
        let nice = if self.nice != 0 {
            format!(
                "; every process under test and the load generator at nice {}",
                self.nice
            )
        } else {
            String::new()
        };
        let where_ = match (&self.proxy_cpu, &self.load_cpu, &self.backend_cpu) {
            (Some(p), Some(l), Some(b)) => format!(
                "proxy under test pinned to CPU {p}; load generator on CPU {l}; demo backend on CPU {b} ({} tokio worker)",
                self.backend_threads
            ),
            _ => format!(
                "no CPU pinning; demo backend with {} tokio worker(s)",
                self.backend_threads
            ),
        };
        format!("{where_}{nice}")
    }

    /// Where the suites write their SVG plots: `plots/` next to the results file.
    pub fn plots_dir(&self) -> PathBuf {
        self.results
            .parent()
            .map(|p| p.join("plots"))
            .unwrap_or_else(|| PathBuf::from("plots"))
    }

    /// A fresh sub-directory of the temporary directory.
    pub fn subdir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let d = self.tmp.join(name);
        if d.exists() {
            std::fs::remove_dir_all(&d)?;
        }
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }
}

fn cpu_count() -> usize {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0)
        .max(1)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn nginx_version(nginx: &Path) -> String {
    std::process::Command::new(nginx)
        .arg("-v")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .unwrap_or_default()
}

/// Now, as RFC 3339 text.
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The header of every generated section: when, where, how (`load`: with the load
/// parameters).
pub fn preamble(ctx: &Ctx, started_load: &str, load: bool) -> String {
    let date = now_rfc3339();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let how = if load {
        format!(
            " {}. {} rounds × {} s measured (+{} s warm-up) per target, {} connections; figures are medians over the rounds.",
            ctx.placement(),
            ctx.rounds,
            ctx.duration_s,
            ctx.warmup_s,
            ctx.connections,
        )
    } else {
        String::new()
    };
    format!(
        "_Generated by `ops/bench.sh` ({date}). Machine: {} CPUs ({}), Linux {}; load average {started_load} at the start, {} at the end (other builds share this machine).{how}_",
        cpu_count(),
        cpu_model(),
        kernel.trim(),
        loadavg(),
    )
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let c = cli.common;
    if !(c.duration > 0.0 && c.duration <= 30.0) {
        anyhow::bail!("--duration must be in (0, 30]");
    }
    if !(c.soak_secs > 0.0 && c.soak_secs <= 900.0) {
        anyhow::bail!("--soak-secs must be in (0, 900]");
    }
    let cg_plan = callgrind::CgPlan {
        warmup: c.cg_warmup,
        calls: c.calls.max(1),
        connections: c.cg_connections.max(1),
    };
    let bin_dir = match c.bin_dir {
        Some(d) => d,
        None => std::env::current_exe()?
            .parent()
            .context("exe dir")?
            .to_path_buf(),
    };
    let nginx = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("nginx not found (apt-get install nginx-light)")?;
    let tmp = std::env::temp_dir().join(format!("portico-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let pin = !c.no_pin && cpu_count() >= 2;
    let ctx = Ctx {
        bin_dir,
        nginx: nginx.clone(),
        tmp: tmp.clone(),
        load_cpu: pin.then(|| "1".to_owned()),
        proxy_cpu: pin.then(|| "0".to_owned()),
        backend_cpu: pin.then(|| "1".to_owned()),
        backend_threads: 1,
        proxy_threads: 1,
        nice: c.nice,
        connections: c.connections,
        duration_s: c.duration,
        warmup_s: c.warmup,
        rounds: c.rounds.max(1),
        results: c.results,
    };
    eprintln!(
        "portico-bench: {} ; {}",
        nginx_version(&nginx),
        ctx.placement()
    );
    eprintln!("portico-bench: logs and configs in {}", tmp.display());
    let suites: Vec<Suite> = match cli.suite {
        Suite::All => vec![
            Suite::Edge,
            Suite::Grpc,
            Suite::Isolation,
            Suite::Switch,
            Suite::Instructions,
            Suite::Knobs,
            Suite::Apis,
            Suite::Idle,
            Suite::Latency,
            Suite::Replay,
            Suite::Cache,
            Suite::Routing,
            Suite::Fleet,
            Suite::Notify,
            Suite::Tls,
        ],
        s => vec![s],
    };
    let mut failed = Vec::new();
    for s in suites {
        let r = match s {
            Suite::Edge => edge::run(&ctx),
            Suite::Grpc => grpc::run(&ctx),
            Suite::Isolation => isolation::run(&ctx),
            Suite::Switch => switch::run(&ctx),
            Suite::Instructions => instructions::run(&ctx, cg_plan, c.cg_reps.max(1)),
            Suite::Knobs => knobs::run(&ctx, cg_plan, &c.knobs),
            Suite::Apis => scale::run_apis(&ctx, cg_plan),
            Suite::Idle => scale::run_idle(&ctx, c.idle_connections.max(1)),
            Suite::Latency => latency::run(&ctx),
            Suite::Replay => replay::run(&ctx, c.soak_secs, c.soak_rate),
            Suite::Cache => cache::run(&ctx, cg_plan),
            Suite::Routing => routing::run(&ctx, cg_plan),
            Suite::Fleet => fleet::run(&ctx),
            Suite::Notify => notify::run(&ctx),
            Suite::Tls => tls::run(&ctx, c.tls_others),
            Suite::PeerCheck => lua_peer::run_check(&ctx),
            Suite::All => Ok(()),
        };
        if let Err(e) = r {
            eprintln!("portico-bench: suite {s:?} failed: {e:#}");
            failed.push(format!("{s:?}"));
        }
    }
    if !c.keep_tmp && failed.is_empty() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "failed suites: {} (logs in {})",
            failed.join(", "),
            tmp.display()
        );
    }
    Ok(())
}
