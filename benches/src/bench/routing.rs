//! The routing benchmark (benches/RESULTS.md, "Smart routing vs round_robin"): per-core capacity
//! with smart routing on (`least_load` balancing over the load the backends report, active health
//! checks, sticky sessions) against plain `round_robin`, through one Portico to the same two demo
//! backends.
//!
//! - `round_robin`: the v1 cluster (two endpoints, no health checks, no stickiness);
//! - `least_load + health + sticky, new clients`: no cookie on the requests, so every answer
//!   picks by load and sets a fresh `PORTICO_STICKY` cookie (the costlier path);
//! - `... returning clients`: every request carries the cookie a first answer set, so it is
//!   decoded, checked and followed.
//!
//! The backends report a load (`X-Portico-Load`, set through the demo's `/__admin/load`) on
//! every answer; the health checks probe `/healthz` every second. Measured as the cache suite:
//! instructions per request under callgrind, and CPU µs per request in interleaved
//! closed-loop rounds. Goal: capacity with everything on ≥ 0.95× round_robin.

use crate::callgrind::{CgLoad, CgMeasure, CgPlan};
use crate::instructions::count_portico;
use crate::procs::http_request;
use crate::report::{f0, f1, ratio, table, write_section};
use crate::runner::{error_summary, interleave, med, LoadSpec, Measured, Target};
use crate::services::{check_signed_head, start_backend, start_portico};
use crate::trees;
use crate::{loadavg, preamble, Ctx};
use anyhow::Context;
use serde_json::json;

/// The sticky cookie's name.
const COOKIE: &str = "PORTICO_STICKY";

pub fn run(ctx: &Ctx, plan: CgPlan) -> anyhow::Result<()> {
    eprintln!("== routing: least_load + health checks + sticky vs round_robin");
    let started_load = loadavg();
    let a = start_backend(ctx, "backend-a", false)?;
    let b = start_backend(ctx, "backend-b", false)?;
    for (be, load) in [
        (&a, "vm_cpu=0.40,vm_mem=0.50,cpu=0.20,mem=0.30"),
        (&b, "vm_cpu=0.30,vm_mem=0.40,cpu=0.25,mem=0.35"),
    ] {
        let (status, text) = http_request(
            be.http,
            "POST",
            &format!("/__admin/load?value={load}"),
            &[],
            b"",
        )?;
        anyhow::ensure!(
            status == 200,
            "setting the demo backend's load: {status} {text}"
        );
    }
    let dir = ctx.subdir("routing-tree")?;
    trees::write_common(&dir)?;
    let endpoints = json!([{"addr": a.http.to_string(), "weight": 1}, {"addr": b.http.to_string(), "weight": 1}]);
    trees::write_doc(
        &dir,
        "clusters/bench-rr.json",
        &json!({"protocol": "http", "endpoints": endpoints}),
    )?;
    trees::write_doc(
        &dir,
        "clusters/bench-smart.json",
        &json!({
            "protocol": "http",
            "endpoints": endpoints,
            "balancing": "least_load",
            "health_check": {"path": "/healthz", "interval_ms": 1000, "timeout_ms": 500,
                             "unhealthy_after": 2, "healthy_after": 2},
            "sticky": {"cookie": COOKIE, "ttl_s": 3600}
        }),
    )?;
    for (id, prefix, cluster) in [
        ("route.rr", "rr", "bench-rr"),
        ("route.smart", "smart", "bench-smart"),
    ] {
        trees::write_order_get(&dir, id, prefix, cluster, trees::bench_policy())?;
    }
    let rr_path = "/v1/rr/orders/42";
    let smart_path = "/v1/smart/orders/42";

    // The cookie a first answer sets (the same process restarted keeps its key only with
    // PORTICO_STICKY_KEY, so it is read from each process that is measured).
    let cookie_of = |addr| -> anyhow::Result<String> {
        let (head, _) = check_signed_head(addr, "GET", smart_path, b"", "sticky")?;
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| k.trim().eq_ignore_ascii_case("set-cookie"))
            .filter_map(|(_, v)| v.trim().split(';').next())
            .find(|c| c.starts_with(&format!("{COOKIE}=")))
            .map(str::to_owned)
            .context("the sticky cluster's answer set no cookie")
    };
    let labels = [
        "round_robin",
        "least_load + health + sticky, new clients",
        "least_load + health + sticky, returning clients",
    ];

    // Instructions per request (callgrind). The cookie is read through the process under
    // callgrind before the counted loads start.
    eprintln!(" callgrind");
    let counts: Vec<CgMeasure> = count_portico(ctx, &dir, "routing", plan, |addr| {
        let cookie = cookie_of(addr).unwrap_or_default();
        let mut returning = CgLoad::get(labels[2], format!("http://{addr}{smart_path}"));
        returning.extra = vec!["--header".into(), format!("Cookie: {cookie}")];
        vec![
            CgLoad::get(labels[0], format!("http://{addr}{rr_path}")),
            CgLoad::get(labels[1], format!("http://{addr}{smart_path}")),
            returning,
        ]
    })?;

    let portico = start_portico(ctx, "portico", &dir, &[])?;
    let cookie = cookie_of(portico.addr)?;
    let watch = vec![&portico.proc, &a.proc, &b.proc];
    let url = |p: &str| format!("http://{}{p}", portico.addr);
    let mut returning = LoadSpec::new("smart-returning", url(smart_path), ctx);
    returning.headers.push(format!("Cookie: {cookie}"));
    let targets = vec![
        Target {
            name: labels[0].into(),
            spec: LoadSpec::new("rr", url(rr_path), ctx),
            watch: watch.clone(),
        },
        Target {
            name: labels[1].into(),
            spec: LoadSpec::new("smart-new", url(smart_path), ctx),
            watch: watch.clone(),
        },
        Target {
            name: labels[2].into(),
            spec: returning,
            watch: watch.clone(),
        },
    ];
    let runs = interleave(ctx, &targets)?;
    let md = render(ctx, &started_load, plan, &targets, &runs, &counts);
    write_section(&ctx.results, "routing", &md)?;
    eprintln!("{md}");
    Ok(())
}

fn render(
    ctx: &Ctx,
    started_load: &str,
    plan: CgPlan,
    targets: &[Target<'_>],
    runs: &[Vec<Measured>],
    counts: &[CgMeasure],
) -> String {
    let cpu = |i: usize| med(&runs[i], |m| m.cpu_us_per_req("portico"));
    let ir = |i: usize| counts.get(i).map_or(f64::NAN, |m| m.ir_per_req());
    let mut rows = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        rows.push(vec![
            t.name.clone(),
            format!("**{}**", f0(ir(i))),
            f1(cpu(i)),
            format!("**{}**", ratio(cpu(0) / cpu(i))),
            f0(med(&runs[i], |m| Some(m.load.ok_rps))),
            error_summary(&runs[i]),
        ]);
    }
    let headline = format!(
        "**Per-core capacity with least_load + health checks + sticky on, vs round_robin: {} for returning clients (cookie followed), {} for new clients (a cookie set on every answer); goal ≥ 0.95×. Instructions per request {} and {} of round_robin's.**",
        ratio(cpu(0) / cpu(2)),
        ratio(cpu(0) / cpu(1)),
        ratio(ir(2) / ir(0)),
        ratio(ir(1) / ir(0)),
    );
    format!(
        "### Smart routing vs round_robin\n\n{}\n\nOne Portico (`--threads 1`), two demo backends reporting a load (`X-Portico-Load`) on every answer. `round_robin`: the v1 cluster of the two. The other cluster has the same two endpoints with `balancing: least_load`, a health check of `/healthz` every second and `sticky` on; the same API path and edge policy (signature, rate limits, bulkhead, breaker) in front of each. \"Returning clients\" send the cookie the first answer set. Instructions: callgrind, {} warm-up + {} measured requests on {} connections, traffic threads. Capacity: closed loop, interleaved rounds, 1 / (CPU µs of the Portico process per request), as a ratio to round_robin.\n\n{headline}\n\n{}",
        preamble(ctx, started_load, true),
        plan.warmup,
        plan.calls,
        plan.connections,
        table(
            &[
                "cluster",
                "instructions / request",
                "Portico CPU µs / request",
                "capacity vs round_robin",
                "2xx req/s",
                "non-2xx",
            ],
            &rows
        )
    )
}
