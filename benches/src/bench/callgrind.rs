//! The stable measure: user-space instructions per request, counted by valgrind's callgrind
//! over an exact number of requests.
//!
//! A process under test is started under `valgrind --tool=callgrind --instr-atstart=no
//! --separate-threads=yes --collect-systime=nsec` (instrumentation off while it boots). For
//! each measured load: `callgrind_control -i on` (once), `portico-load --sync` sends the
//! warm-up requests and stops at its barrier, `callgrind_control -z` zeroes the counters,
//! the load sends exactly N requests on the same keep-alive connections, stops again,
//! `callgrind_control -d` dumps, and the load closes its connections. callgrind_control
//! talks to the process through vgdb, which interrupts it even when it is blocked in
//! `epoll_wait`, so nothing but the N requests (and whatever the process does by itself in
//! the window, e.g. timers) is counted.
//!
//! Each dump has one file per thread. A thread is counted as traffic if its profile holds
//! Pingora's HTTP/1 server code (for a program without symbols, such as Debian's nginx,
//! every thread is). Instructions are user space only (callgrind sees no kernel work); the
//! syscall count per request comes from `--collect-systime`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::procs::{Launch, Proc};
use crate::runner::{app_key, app_secret, APPS};
use crate::Ctx;

/// How the process under test is launched for counting.
pub fn launch(out_dir: &Path) -> Launch {
    Launch {
        wrapper: vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            "--instr-atstart=no".into(),
            "--separate-threads=yes".into(),
            "--collect-systime=nsec".into(),
            "--vgdb=yes".into(),
            "--error-limit=no".into(),
            format!("--callgrind-out-file={}/cg.out", out_dir.display()),
        ],
        nofile: None,
        ready_timeout: Duration::from_secs(300),
    }
}

/// One measured load against a process under callgrind.
#[derive(Debug, Clone)]
pub struct CgLoad {
    pub label: String,
    pub url: String,
    pub method: &'static str,
    pub body: Option<String>,
}

impl CgLoad {
    pub fn get(label: &str, url: String) -> Self {
        CgLoad {
            label: label.to_owned(),
            url,
            method: "GET",
            body: None,
        }
    }

    pub fn post(label: &str, url: String, body: &str) -> Self {
        CgLoad {
            label: label.to_owned(),
            url,
            method: "POST",
            body: Some(body.to_owned()),
        }
    }
}

/// Request counts of a counting run.
#[derive(Debug, Clone, Copy)]
pub struct CgPlan {
    pub warmup: u64,
    pub calls: u64,
    pub connections: usize,
}

/// One thread's counts in a dump.
#[derive(Debug, Clone)]
pub struct ThreadCount {
    pub file: PathBuf,
    pub thread: u32,
    pub traffic: bool,
    pub ir: u64,
    /// Every syscall valgrind saw, `clock_gettime` included.
    pub syscalls: u64,
    /// `clock_gettime` calls: a syscall under valgrind, a vDSO call (no kernel entry)
    /// natively, so they are counted apart (traffic threads only).
    pub clock_reads: u64,
}

/// What one measured load counted.
#[derive(Debug, Clone)]
pub struct CgMeasure {
    pub label: String,
    pub calls: u64,
    /// 2xx answers among the calls.
    pub ok: u64,
    pub non_2xx: String,
    pub threads: Vec<ThreadCount>,
    /// Wall-clock length of the measured window (the process runs 20–100× slower under
    /// callgrind, so its timers fire more often per request than natively).
    pub window_s: f64,
}

impl CgMeasure {
    pub fn traffic_ir(&self) -> u64 {
        self.threads
            .iter()
            .filter(|t| t.traffic)
            .map(|t| t.ir)
            .sum()
    }

    pub fn all_ir(&self) -> u64 {
        self.threads.iter().map(|t| t.ir).sum()
    }

    /// Traffic-thread instructions per request.
    pub fn ir_per_req(&self) -> f64 {
        self.traffic_ir() as f64 / self.calls.max(1) as f64
    }

    /// Every thread's instructions per request.
    pub fn all_ir_per_req(&self) -> f64 {
        self.all_ir() as f64 / self.calls.max(1) as f64
    }

    /// Other threads' instructions per second of the window.
    pub fn background_ir_per_s(&self) -> f64 {
        (self.all_ir() - self.traffic_ir()) as f64 / self.window_s.max(1e-9)
    }

    /// Kernel syscalls per request of the traffic threads (clock reads excluded).
    pub fn syscalls_per_req(&self) -> f64 {
        let s: u64 = self
            .threads
            .iter()
            .filter(|t| t.traffic)
            .map(|t| t.syscalls.saturating_sub(t.clock_reads))
            .sum();
        s as f64 / self.calls.max(1) as f64
    }

    /// `clock_gettime` calls per request of the traffic threads.
    pub fn clock_reads_per_req(&self) -> f64 {
        let s: u64 = self
            .threads
            .iter()
            .filter(|t| t.traffic)
            .map(|t| t.clock_reads)
            .sum();
        s as f64 / self.calls.max(1) as f64
    }

    /// The traffic thread with the most instructions (the one to annotate).
    pub fn main_traffic_file(&self) -> Option<&Path> {
        self.threads
            .iter()
            .filter(|t| t.traffic)
            .max_by_key(|t| t.ir)
            .map(|t| t.file.as_path())
    }
}

/// A function's share of a profile.
#[derive(Debug, Clone)]
pub struct FnCost {
    pub name: String,
    pub ir: u64,
    pub pct: f64,
}

fn callgrind_control(args: &[&str], pid: u32) -> anyhow::Result<()> {
    let out = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()
        .context("running callgrind_control")?;
    if !out.status.success() {
        bail!(
            "callgrind_control {args:?} {pid} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Counts every load in `loads`, in order, against `proc` (already started with
/// [`launch`]`(out_dir)` and ready). Dump k (1-based) holds load k.
pub fn count(
    ctx: &Ctx,
    proc: &mut Proc,
    out_dir: &Path,
    loads: &[CgLoad],
    plan: CgPlan,
) -> anyhow::Result<Vec<CgMeasure>> {
    callgrind_control(&["-i", "on"], proc.pid)?;
    let mut out = Vec::new();
    for (k, load) in loads.iter().enumerate() {
        proc.check_alive()?;
        let bin = ctx.bin("portico-load");
        let mut cmd = crate::procs::command(&bin, ctx.load_cpu.as_deref(), ctx.nice);
        cmd.args(["--url", &load.url, "--method", load.method])
            .args(["--connections", &plan.connections.to_string()])
            .args(["--requests", &plan.calls.to_string()])
            .args(["--warmup-requests", &plan.warmup.to_string()])
            .args(["--sync", "--timeout-ms", "60000", "--label", &load.label]);
        for i in 0..APPS {
            cmd.arg("--app")
                .arg(format!("{}:{}", app_key(i), app_secret(i)));
        }
        if let Some(b) = &load.body {
            cmd.arg("--body").arg(b);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("starting portico-load --sync")?;
        let mut stdin = child.stdin.take().context("load stdin")?;
        let mut lines = BufReader::new(child.stdout.take().context("load stdout")?).lines();
        let mut expect = |what: &str| -> anyhow::Result<()> {
            match lines.next() {
                Some(Ok(l)) if l.trim() == what => Ok(()),
                other => bail!("portico-load --sync: expected {what:?}, got {other:?}"),
            }
        };
        expect("warm")?;
        callgrind_control(&["-z"], proc.pid)?;
        let started = Instant::now();
        writeln!(stdin)?;
        stdin.flush()?;
        expect("done")?;
        let window_s = started.elapsed().as_secs_f64();
        callgrind_control(&["-d"], proc.pid)?;
        writeln!(stdin)?;
        stdin.flush()?;
        let report = lines.next().context("no report")??;
        let status = child.wait()?;
        if !status.success() {
            bail!("portico-load --sync ({}) failed", load.label);
        }
        let v: serde_json::Value = serde_json::from_str(report.trim())
            .with_context(|| format!("parsing portico-load output {report:?}"))?;
        let ok = v["ok"].as_u64().unwrap_or(0);
        let requests = v["requests"].as_u64().unwrap_or(0);
        let non_2xx = v["errors"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, n)| format!("{k}×{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "0".into());
        if requests != plan.calls {
            bail!(
                "{}: {} answers for {} calls ({non_2xx})",
                load.label,
                requests,
                plan.calls
            );
        }
        let mut threads = read_dump(out_dir, k + 1)
            .with_context(|| format!("reading callgrind dump {} of {}", k + 1, load.label))?;
        for t in threads.iter_mut().filter(|t| t.traffic) {
            let p = Profile::read(&t.file)?;
            t.clock_reads = p
                .self_sys
                .iter()
                .filter(|(f, _)| f.starts_with("clock_gettime") || f.starts_with("__clock_gettime"))
                .map(|(_, n)| *n)
                .sum();
        }
        for t in &threads {
            eprintln!(
                "    thread {} ({}): {} instructions, {} syscalls",
                t.thread,
                if t.traffic { "traffic" } else { "other" },
                t.ir,
                t.syscalls
            );
        }
        eprintln!(
            "  {:<28} {:>10.0} instructions/request (traffic threads), {:.1} syscalls/request (clock reads included), {} of {} 2xx, {:.1} s",
            load.label,
            threads.iter().filter(|t| t.traffic).map(|t| t.ir).sum::<u64>() as f64
                / plan.calls as f64,
            threads
                .iter()
                .filter(|t| t.traffic)
                .map(|t| t.syscalls)
                .sum::<u64>() as f64
                / plan.calls as f64,
            ok,
            plan.calls,
            window_s
        );
        out.push(CgMeasure {
            label: load.label.clone(),
            calls: plan.calls,
            ok,
            non_2xx,
            threads,
            window_s,
        });
    }
    Ok(out)
}

/// The per-thread files of dump `part` in `dir` (`cg.out.<part>-<thread>`), waiting a
/// little for them to appear.
fn read_dump(dir: &Path, part: usize) -> anyhow::Result<Vec<ThreadCount>> {
    let prefix = format!("cg.out.{part}-");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .collect();
        files.sort();
        if !files.is_empty() {
            // The dump is written before callgrind_control returns; re-read once on a
            // parse failure (a file still being written).
            let parsed: anyhow::Result<Vec<ThreadCount>> =
                files.iter().map(|f| parse_thread(f)).collect();
            match parsed {
                Ok(mut v) => {
                    if !v.iter().any(|t| t.traffic) {
                        for t in &mut v {
                            t.traffic = true;
                        }
                    }
                    return Ok(v);
                }
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => {}
            }
        } else if Instant::now() > deadline {
            bail!("no {prefix}* files in {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Markers of a thread that serves traffic (Pingora's HTTP/1 server or proxy code).
const TRAFFIC_MARKERS: &[&str] = &[
    "pingora_core::protocols::http::v1::server",
    "pingora_proxy::",
];

fn parse_thread(path: &Path) -> anyhow::Result<ThreadCount> {
    let text = std::fs::read_to_string(path)?;
    let mut events: Vec<&str> = Vec::new();
    // `totals:` (the sum of the cost lines) rather than `summary:`: for `sysCount` the
    // summary of a dump taken after `callgrind_control -z` misses a fifth of the syscalls
    // that the cost lines hold; for `Ir` both agree within a few thousand.
    let mut totals: Option<Vec<u64>> = None;
    let mut summary: Option<Vec<u64>> = None;
    let mut thread = 0;
    let mut traffic = false;
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("events:") {
            events = e.split_whitespace().collect();
        } else if let Some(t) = line.strip_prefix("totals:") {
            totals = Some(
                t.split_whitespace()
                    .map(|v| v.parse().unwrap_or(0))
                    .collect(),
            );
        } else if let Some(t) = line.strip_prefix("summary:") {
            summary = Some(
                t.split_whitespace()
                    .map(|v| v.parse().unwrap_or(0))
                    .collect(),
            );
        } else if let Some(t) = line.strip_prefix("thread:") {
            thread = t.trim().parse().unwrap_or(0);
        } else if !traffic
            && (line.starts_with("fn=") || line.starts_with("cfn="))
            && TRAFFIC_MARKERS.iter().any(|m| line.contains(m))
        {
            traffic = true;
        }
    }
    let totals = totals
        .or(summary)
        .with_context(|| format!("no totals in {}", path.display()))?;
    let at = |name: &str| {
        events
            .iter()
            .position(|e| *e == name)
            .and_then(|i| totals.get(i).copied())
            .unwrap_or(0)
    };
    Ok(ThreadCount {
        file: path.to_path_buf(),
        thread,
        traffic,
        ir: at("Ir"),
        syscalls: at("sysCount"),
        clock_reads: 0,
    })
}

/// Self and inclusive instruction counts per function of one callgrind profile.
///
/// Read from the file directly rather than through `callgrind_annotate`: with
/// instrumentation switched on mid-run, the frames already on the stack were entered
/// unseen and their call records say `calls=0`, which the Perl `callgrind_annotate` of
/// valgrind 3.19 books as the caller's own cost (it shows `clone` with 100% self cost).
/// Inclusive = self + the cost of the calls it made to other functions (a recursive call
/// to itself is not added again; mutual recursion can still count a cost twice).
pub struct Profile {
    pub total: u64,
    pub self_ir: std::collections::HashMap<String, u64>,
    pub incl_ir: std::collections::HashMap<String, u64>,
    /// Syscalls made directly by each function (the libc wrappers: `recv`, `epoll_wait`,
    /// `syscall` for futex, ...), when the profile has the `sysCount` event.
    pub self_sys: std::collections::HashMap<String, u64>,
}

impl Profile {
    pub fn read(path: &Path) -> anyhow::Result<Profile> {
        use std::collections::HashMap;
        let text = std::fs::read_to_string(path)?;
        let mut names: HashMap<String, String> = HashMap::new();
        let mut resolve = |spec: &str| -> String {
            let spec = spec.trim();
            if let Some(rest) = spec.strip_prefix('(') {
                if let Some((id, name)) = rest.split_once(')') {
                    let name = name.trim();
                    if name.is_empty() {
                        return names.get(id).cloned().unwrap_or_else(|| format!("({id})"));
                    }
                    names.insert(id.to_owned(), name.to_owned());
                    return name.to_owned();
                }
            }
            spec.to_owned()
        };
        let mut total = 0;
        let mut self_ir: HashMap<String, u64> = HashMap::new();
        let mut self_sys: HashMap<String, u64> = HashMap::new();
        let mut calls_ir: HashMap<String, u64> = HashMap::new();
        let mut cur = String::new();
        let mut callee = String::new();
        let mut call_line = false;
        for line in text.lines() {
            let first = line.as_bytes().first().copied().unwrap_or(b' ');
            if let Some(f) = line.strip_prefix("fn=") {
                cur = resolve(f);
                call_line = false;
            } else if let Some(f) = line.strip_prefix("cfn=") {
                callee = resolve(f);
            } else if line.starts_with("calls=") {
                call_line = true;
            } else if first.is_ascii_digit() || first == b'+' || first == b'-' || first == b'*' {
                let mut fields = line.split_whitespace().skip(1);
                let mut next =
                    || -> u64 { fields.next().and_then(|v| v.parse().ok()).unwrap_or(0) };
                let ir = next();
                let sys = next();
                if call_line {
                    if callee != cur {
                        *calls_ir.entry(cur.clone()).or_default() += ir;
                    }
                    call_line = false;
                } else {
                    *self_ir.entry(cur.clone()).or_default() += ir;
                    if sys > 0 {
                        *self_sys.entry(cur.clone()).or_default() += sys;
                    }
                }
            } else if let Some(t) = line.strip_prefix("summary:") {
                total = t
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
        }
        let mut incl_ir = self_ir.clone();
        for (f, c) in calls_ir {
            *incl_ir.entry(f).or_default() += c;
        }
        if total == 0 {
            total = self_ir.values().sum();
        }
        Ok(Profile {
            total,
            self_ir,
            incl_ir,
            self_sys,
        })
    }

    /// Self cost per crate (or library), costliest first: (crate, Ir, % of total).
    pub fn by_crate(&self) -> Vec<(String, u64, f64)> {
        let mut m: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for (name, ir) in &self.self_ir {
            *m.entry(crate_of(name)).or_default() += ir;
        }
        let mut v: Vec<(String, u64, f64)> = m
            .into_iter()
            .map(|(c, ir)| {
                let pct = ir as f64 * 100.0 / self.total.max(1) as f64;
                (c, ir, pct)
            })
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The functions that made syscalls, most first: (function, syscalls).
    pub fn syscalls(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> =
            self.self_sys.iter().map(|(k, n)| (k.clone(), *n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The `n` costliest functions, inclusive or self.
    pub fn top(&self, inclusive: bool, n: usize) -> Vec<FnCost> {
        let map = if inclusive {
            &self.incl_ir
        } else {
            &self.self_ir
        };
        let mut v: Vec<FnCost> = map
            .iter()
            .map(|(name, ir)| FnCost {
                name: name.clone(),
                ir: *ir,
                pct: *ir as f64 * 100.0 / self.total.max(1) as f64,
            })
            .collect();
        v.sort_by(|a, b| b.ir.cmp(&a.ir).then_with(|| a.name.cmp(&b.name)));
        v.truncate(n);
        v
    }
}

/// The crate (or C library) a demangled function name belongs to: the first path segment,
/// of the implementing type for `<T as Trait>::f`; `mi_*` is mimalloc, other plain C names
/// are libc (memcpy, malloc, syscall wrappers).
pub fn crate_of(name: &str) -> String {
    let n = name.trim_start_matches('<').trim_start_matches('&');
    let n = n.strip_prefix("mut ").unwrap_or(n);
    let n = n.strip_prefix("dyn ").unwrap_or(n);
    if let Some((first, _)) = n.split_once("::") {
        let c = first.split(['<', ' ', '[', '(']).next().unwrap_or(first);
        if !c.is_empty() {
            return c.to_owned();
        }
    }
    if n.starts_with("mi_") || n.starts_with("_mi_") {
        "mimalloc".into()
    } else if n.starts_with("je_") || n.starts_with("_rjem") {
        "jemalloc".into()
    } else if n.starts_with("ngx_") {
        "nginx".into()
    } else if n.starts_with('0') || n.starts_with("???") {
        "(no symbol)".into()
    } else {
        "libc / C".into()
    }
}

/// A function name short enough for a table (generic arguments and closure paths cut).
pub fn short_name(name: &str, max: usize) -> String {
    let s = name.replace('|', "\\|");
    if s.chars().count() <= max {
        return s;
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_and_inclusive_costs() -> anyhow::Result<()> {
        let dir = tempfile_dir()?;
        let f = dir.join("cg.out.1-01");
        std::fs::write(
            &f,
            "events: Ir sysCount\nsummary: 100 2\nfn=(1) clone\ncfn=(2) main_loop\ncalls=0 3\n100 100 2\nfn=(2)\n5 60 1\ncfn=(3) parse\ncalls=4 7\n+1 40\nfn=(3)\n7 40 1\n",
        )?;
        let p = Profile::read(&f)?;
        assert_eq!(p.total, 100);
        assert_eq!(p.self_ir.get("clone").copied(), None);
        assert_eq!(p.self_ir.get("main_loop").copied(), Some(60));
        assert_eq!(p.incl_ir.get("main_loop").copied(), Some(100));
        assert_eq!(p.incl_ir.get("clone").copied(), Some(100));
        assert_eq!(
            p.syscalls(),
            vec![("main_loop".to_owned(), 1), ("parse".to_owned(), 1)]
        );
        let top = p.top(false, 1);
        assert_eq!(top[0].name, "main_loop");
        assert!((top[0].pct - 60.0).abs() < 1e-9);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn crates() {
        assert_eq!(crate_of("tokio::runtime::task::raw::poll"), "tokio");
        assert_eq!(
            crate_of("<http::header::map::HeaderMap<T> as core::clone::Clone>::clone"),
            "http"
        );
        assert_eq!(crate_of("mi_free"), "mimalloc");
        assert_eq!(crate_of("__memcpy_avx_unaligned_erms"), "libc / C");
    }

    fn tempfile_dir() -> anyhow::Result<PathBuf> {
        let d = std::env::temp_dir().join(format!("portico-cg-test-{}", std::process::id()));
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }
}
