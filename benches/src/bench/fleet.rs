//! The fleet benchmark (benches/RESULTS.md, "Cluster-scope rate limits: cost and accuracy"): what a
//! cluster-scope rate limit costs per request with Redis, against the same limit kept locally, at
//! 1,000 and 10,000 req/s; and how accurate it is when the load is spread unevenly over three
//! gateways.
//!
//! Cost: one Portico with `--redis`, two APIs on the same backend path, each with a generous
//! limit (never refusing): `scope: local` (the default) and `scope: cluster`. Open-loop load
//! at a fixed rate; Portico's CPU µs per request from /proc, Redis's CPU and commands per
//! request from its `INFO` (used_cpu_user + used_cpu_sys, total_commands_processed).
//!
//! Accuracy: three Porticos on the same Redis and tree, an app limit of 300/s with
//! `scope: cluster`, offered 600, 250 and 50 req/s (3× the limit in total, unevenly); the
//! admitted total over the window against 300/s.

use crate::report::{f0, f1, median, table, write_section};
use crate::runner::{measure, LoadRun, LoadSpec};
use crate::services::{check_signed, start_backend, start_portico};
use crate::trees;
use crate::{loadavg, preamble, Ctx};
use anyhow::Context;
use portico_testkit::Redis;
use serde_json::json;
use std::process::Command;

/// The offered rates of the cost runs.
const RATES: &[f64] = &[1_000.0, 10_000.0];
/// The cluster-wide limit of the accuracy run, and the rate offered to each gateway.
const LIMIT: u32 = 300;
const UNEVEN: &[f64] = &[600.0, 250.0, 50.0];

/// Redis's own CPU seconds (user + system) and commands processed so far.
pub(crate) fn redis_counters(port: u16) -> anyhow::Result<(f64, u64)> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "INFO", "all"])
        .output()
        .context("running redis-cli (Debian package redis-tools)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let cpu = field("used_cpu_user")
        .and_then(|v| v.parse::<f64>().ok())
        .zip(field("used_cpu_sys").and_then(|v| v.parse::<f64>().ok()))
        .map(|(u, s)| u + s)
        .context("redis INFO has no used_cpu_user/used_cpu_sys")?;
    let commands = field("total_commands_processed")
        .and_then(|v| v.parse().ok())
        .context("redis INFO has no total_commands_processed")?;
    Ok((cpu, commands))
}

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== fleet: cluster-scope rate limits with Redis: cost and accuracy");
    let started_load = loadavg();
    let redis = Redis::start();
    let backend = start_backend(ctx, "backend", false)?;
    let dir = ctx.subdir("fleet-tree")?;
    trees::write_common(&dir)?;
    trees::write_cluster(&dir, "bench-http", "http", backend.http)?;
    let generous = trees::GENEROUS_PER_SECOND;
    for (id, prefix, limit) in [
        (
            "limit.local",
            "local",
            json!({"key": "api", "limit": generous, "per": "second"}),
        ),
        (
            "limit.cluster",
            "cluster",
            json!({"key": "api", "limit": generous, "per": "second", "scope": "cluster"}),
        ),
        (
            "limit.tight",
            "tight",
            json!({"key": "api", "limit": LIMIT, "per": "second", "scope": "cluster"}),
        ),
    ] {
        trees::write_order_get(
            &dir,
            id,
            prefix,
            "bench-http",
            json!({"rate_limits": [limit]}),
        )?;
    }
    let redis_arg = vec!["--redis".to_owned(), redis.url()];

    // 1. Cost at fixed rates.
    let portico = start_portico(ctx, "portico", &dir, &redis_arg)?;
    for p in ["local", "cluster"] {
        check_signed(portico.addr, "GET", &format!("/v1/{p}/orders/42"), b"", p)?;
    }
    let mut rows = Vec::new();
    let mut cost = Vec::new();
    for &rate in RATES {
        for scope in ["local", "cluster"] {
            let mut spec = LoadSpec::new(
                &format!("{scope}-{rate}"),
                format!("http://{}/v1/{scope}/orders/42", portico.addr),
                ctx,
            );
            spec.rate = Some(rate);
            spec.open_loop = true;
            let mut cpu = Vec::new();
            let mut redis_cpu = Vec::new();
            let mut cmds = Vec::new();
            let mut p99 = Vec::new();
            let mut ok = Vec::new();
            for _ in 0..ctx.rounds {
                let (c0, n0) = redis_counters(redis.port())?;
                let m = measure(ctx, &spec, &[&portico.proc])?;
                let (c1, n1) = redis_counters(redis.port())?;
                // The Redis counters cover warm-up too: divide by every request sent then.
                let sent = m.load.requests as f64 * (1.0 + spec.warmup_s / spec.duration_s);
                cpu.push(m.cpu_us_per_req("portico").unwrap_or(f64::NAN));
                redis_cpu.push((c1 - c0) * 1e6 / sent);
                cmds.push((n1 - n0) as f64 / sent);
                p99.push(m.load.latency_us.p99 as f64 / 1000.0);
                ok.push(m.load.ok_rps);
            }
            let (cpu, rcpu, cmds, p99, ok) = (
                median(&cpu),
                median(&redis_cpu),
                median(&cmds),
                median(&p99),
                median(&ok),
            );
            eprintln!("  {scope} at {rate}/s: {cpu:.1} µs Portico, {rcpu:.2} µs Redis, {cmds:.3} commands/request");
            cost.push((rate, scope, cpu, rcpu, cmds));
            rows.push(vec![
                f0(rate),
                scope.to_owned(),
                f0(ok),
                f1(cpu),
                format!("{rcpu:.2}"),
                format!("{:.2}", cpu + rcpu),
                format!("{cmds:.3}"),
                format!("{p99:.2}"),
            ]);
        }
    }
    drop(portico);

    // 2. Accuracy under uneven load: three gateways, one Redis.
    let gws = (0..UNEVEN.len())
        .map(|i| start_portico(ctx, &format!("portico-{i}"), &dir, &redis_arg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Spend any burst first, then measure.
    let mut runs = Vec::new();
    for (gw, &rate) in gws.iter().zip(UNEVEN) {
        let mut spec = LoadSpec::new(
            &format!("uneven-{rate}"),
            format!("http://{}/v1/tight/orders/42", gw.addr),
            ctx,
        );
        spec.rate = Some(rate);
        spec.open_loop = true;
        spec.warmup_s = spec.warmup_s.max(3.0);
        spec.duration_s = spec.duration_s.max(10.0);
        runs.push(LoadRun::start(ctx, &spec)?);
    }
    let outs = runs
        .into_iter()
        .map(LoadRun::finish)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let admitted: f64 = outs.iter().map(|o| o.ok_rps).sum();
    let per_node: Vec<String> = outs
        .iter()
        .zip(UNEVEN)
        .map(|(o, r)| format!("{r:.0} offered → {:.1} admitted", o.ok_rps))
        .collect();
    let error = (admitted / LIMIT as f64 - 1.0) * 100.0;

    let at = |rate: f64, scope: &str| {
        cost.iter()
            .find(|c| c.0 == rate && c.1 == scope)
            .map(|c| (c.2, c.3, c.4))
            .unwrap_or((f64::NAN, f64::NAN, f64::NAN))
    };
    // Both rows pay the cluster-wide nonce record (one SET NX per signed call); the
    // difference is what the cluster-scope limit adds.
    let delta = |rate: f64| {
        let (l, lr, ln) = at(rate, "local");
        let (c, r, n) = at(rate, "cluster");
        format!(
            "at {rate:.0} req/s a cluster-scope limit adds **{:+.1} µs** of Portico CPU, {:+.2} µs of Redis CPU and {:+.3} Redis commands per request (the nonce record's one command per signed call is in both)",
            c - l,
            r - lr,
            n - ln
        )
    };
    let headline = format!(
        "**{}; {}. Accuracy under uneven load (600 / 250 / 50 req/s on three gateways, limit {LIMIT}/s cluster-wide): {admitted:.1} admitted/s, {error:+.1}% (goal ±5%).**",
        delta(RATES[0]),
        delta(RATES[1]),
    );
    let md = format!(
        "### Cluster-scope rate limits: cost and accuracy\n\n{}\n\nCost: one Portico (`--threads 1`) with `--redis` (a local `redis-server`), two APIs on the same backend path with a limit that never refuses, `scope: local` vs `scope: cluster`, open-loop load at a fixed rate; medians of {} runs. Redis CPU and commands from its `INFO`, per request sent (warm-up included). Accuracy: three Porticos on one Redis, offered {} req/s for {:.0} s after a warm-up that spends the burst.\n\n{headline}\n\n{}\n\nPer gateway: {}.\n",
        preamble(ctx, &started_load, true),
        ctx.rounds,
        UNEVEN.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(" / "),
        ctx.duration_s.max(10.0),
        table(
            &[
                "offered req/s",
                "limit scope",
                "2xx req/s",
                "Portico CPU µs / request",
                "Redis CPU µs / request",
                "together µs",
                "Redis commands / request",
                "p99 ms",
            ],
            &rows
        ),
        per_node.join("; "),
    );
    write_section(&ctx.results, "fleet", &md)?;
    eprintln!("{md}");
    Ok(())
}
