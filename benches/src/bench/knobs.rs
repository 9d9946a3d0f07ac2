//! Pingora's own knobs, one at a time, on the bare proxy (benches/RESULTS.md, "Pingora's own cost
//! and its knobs").
//!
//! Every variant is the baseline `bare-pingora-proxy` (its defaults untouched) with one flag
//! or another allocator binary. Each is measured twice: instructions per request under
//! callgrind (the stable figure) and CPU µs per request at saturation from `/proc` (closed
//! loop, interleaved rounds like the edge suite: the noisy one, but it also sees the
//! kernel and the scheduler).

use crate::callgrind::CgPlan;
use crate::instructions::count_bare;
use crate::procs::Launch;
use crate::report::{f0, f1, pct, table, write_section};
use crate::runner::{interleave, med, LoadSpec, Measured, Target};
use crate::services::{start_backend, start_bare_with, Proxy};
use crate::svg::{self, Group};
use crate::{edge, loadavg, preamble, Ctx};

/// One knob setting.
pub struct Knob {
    pub name: &'static str,
    pub what: &'static str,
    pub bin: &'static str,
    pub flags: &'static [&'static str],
}

/// The variants, baseline first.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "baseline",
        what: "Pingora's defaults: work-stealing runtime, 1 thread, pool 128, no peer timeouts, mimalloc",
        bin: "bare-pingora-proxy",
        flags: &[],
    },
    Knob {
        name: "work stealing off",
        what: "`ServerConf::work_stealing = false` (a current-thread runtime per thread)",
        bin: "bare-pingora-proxy",
        flags: &["--work-stealing", "false"],
    },
    Knob {
        name: "2 threads",
        what: "`ServerConf::threads = 2` (work stealing, both on the one proxy CPU)",
        bin: "bare-pingora-proxy",
        flags: &["--threads", "2"],
    },
    Knob {
        name: "2 listener tasks",
        what: "`ServerConf::listener_tasks_per_fd = 2`",
        bin: "bare-pingora-proxy",
        flags: &["--listener-tasks", "2"],
    },
    Knob {
        name: "pool 1024",
        what: "`upstream_keepalive_pool_size = 1024` (Portico's `ConnectorOptions::new(1024)`)",
        bin: "bare-pingora-proxy",
        flags: &["--pool-size", "1024"],
    },
    Knob {
        name: "peer timeouts",
        what: "connect/total/read/write timeouts 1 s + idle 60 s on the peer, as Portico sets them",
        bin: "bare-pingora-proxy",
        flags: &["--peer-timeouts-ms", "1000"],
    },
    Knob {
        name: "peer timeouts, tokio timers",
        what: "the same with `fast_timeout_to_tokio_threshold_seconds = 0` (tokio's timer wheel instead of Pingora's fast timeout)",
        bin: "bare-pingora-proxy",
        flags: &["--peer-timeouts-ms", "1000", "--fast-timeout-threshold-s", "0"],
    },
    Knob {
        name: "L4 read buffer 4 KiB",
        what: "the listener's per-connection read buffer at 4 KiB instead of 64 KiB (`ListenerConfig::l4_buffer`)",
        bin: "bare-pingora-proxy",
        flags: &["--l4-read-buffer", "4096"],
    },
    Knob {
        name: "system allocator",
        what: "glibc malloc instead of mimalloc",
        bin: "bare-pingora-proxy-system",
        flags: &[],
    },
    Knob {
        name: "jemalloc",
        what: "tikv-jemallocator instead of mimalloc",
        bin: "bare-pingora-proxy-jemalloc",
        flags: &[],
    },
];

fn flags(k: &Knob) -> Vec<String> {
    k.flags.iter().map(|s| (*s).to_owned()).collect()
}

/// The knobs whose name contains one of `only` (case-insensitive), the baseline always
/// first; every knob when `only` is empty.
pub fn select(only: &[String]) -> Vec<&'static Knob> {
    KNOBS
        .iter()
        .enumerate()
        .filter(|(i, k)| {
            *i == 0
                || only.is_empty()
                || only
                    .iter()
                    .any(|o| k.name.to_lowercase().contains(&o.to_lowercase()))
        })
        .map(|(_, k)| k)
        .collect()
}

pub fn run(ctx: &Ctx, plan: CgPlan, only: &[String]) -> anyhow::Result<()> {
    eprintln!("== knobs: the bare Pingora proxy, one knob at a time");
    let knobs = select(only);
    let started_load = loadavg();
    let backend = start_backend(ctx, "backend", false)?;

    // 1. Instructions per request, one fresh process per knob.
    let mut counts = Vec::new();
    for (i, k) in knobs.iter().enumerate() {
        eprintln!(" {}: {}", k.name, k.flags.join(" "));
        let m = count_bare(
            ctx,
            &format!("knob-{i}"),
            k.bin,
            &flags(k),
            backend.http,
            plan,
        )?;
        counts.push(m.into_iter().next());
    }

    // 2. CPU per request at saturation, all variants running, interleaved rounds.
    let mut proxies: Vec<Proxy> = Vec::new();
    for (i, k) in knobs.iter().enumerate() {
        proxies.push(start_bare_with(
            ctx,
            &format!("bare-knob-{i}"),
            k.bin,
            backend.http,
            &flags(k),
            &Launch::default(),
        )?);
    }
    let targets: Vec<Target<'_>> = knobs
        .iter()
        .zip(&proxies)
        .map(|(k, p)| Target {
            name: k.name.to_owned(),
            spec: LoadSpec::new(
                k.name,
                format!("http://{}{}", p.addr, edge::PLAIN_PATH),
                ctx,
            ),
            watch: vec![&p.proc, &backend.proc],
        })
        .collect();
    let runs = interleave(ctx, &targets)?;

    let base_ir = counts
        .first()
        .and_then(|c| c.as_ref())
        .map_or(f64::NAN, |m| m.ir_per_req());
    let cpu = |i: usize, r: &[Measured]| med(r, |m| m.cpu_us_per_req(&targets[i].watch[0].name));
    let base_cpu = cpu(0, &runs[0]);
    let mut rows = Vec::new();
    let mut groups = Vec::new();
    for (i, (k, r)) in knobs.iter().zip(&runs).enumerate() {
        let ir = counts[i].as_ref().map_or(f64::NAN, |m| m.ir_per_req());
        let sys = counts[i]
            .as_ref()
            .map_or(f64::NAN, |m| m.syscalls_per_req());
        let clocks = counts[i]
            .as_ref()
            .map_or(f64::NAN, |m| m.clock_reads_per_req());
        let c = cpu(i, r);
        rows.push(vec![
            k.name.to_owned(),
            k.what.to_owned(),
            format!("**{}**", f0(ir)),
            delta(ir, base_ir),
            f1(sys),
            f1(clocks),
            format!(
                "{} ({} + {})",
                f1(c),
                f1(med(r, |m| m.user_us_per_req(&targets[i].watch[0].name))),
                f1(med(r, |m| m.sys_us_per_req(&targets[i].watch[0].name))),
            ),
            delta(c, base_cpu),
            pct(med(r, |m| m.cpu_util(&targets[i].watch[0].name))),
            f0(med(r, |m| Some(m.load.ok_rps))),
        ]);
        groups.push(Group {
            label: k.name.to_owned(),
            values: vec![ir / 1000.0, c],
        });
    }
    let md = format!(
        "### Pingora knobs on the bare proxy\n\n{}\n\nEach row is `bare-pingora-proxy` with one setting changed (flags of benches/src/bare/common.rs, or the same proxy built with another global allocator); the baseline is what every other suite runs. Instructions: callgrind as in the instructions suite ({} warm-up + {} counted requests on {} connections), one fresh process per row. CPU: closed loop at saturation, interleaved rounds, medians.\n\n{}\n![knobs](plots/knobs.svg)\n",
        preamble(ctx, &started_load, true),
        plan.warmup,
        plan.calls,
        plan.connections,
        table(
            &[
                "knob",
                "setting",
                "instructions / request",
                "Δ",
                "syscalls / request",
                "clock reads / request",
                "CPU µs / request (user + sys)",
                "Δ",
                "proxy CPU use",
                "2xx req/s",
            ],
            &rows
        ),
    );
    write_section(&ctx.results, "knobs", &md)?;
    svg::bars(
        &ctx.plots_dir().join("knobs.svg"),
        "Bare Pingora, one knob at a time",
        "thousand instructions per request (callgrind) / CPU µs per request (/proc)",
        &["k instructions / request", "CPU µs / request"],
        &groups,
    )?;
    eprintln!("{md}");
    Ok(())
}

fn delta(v: f64, base: f64) -> String {
    if v.is_finite() && base.is_finite() && base > 0.0 {
        format!("{:+.1}%", (v / base - 1.0) * 100.0)
    } else {
        "–".into()
    }
}
