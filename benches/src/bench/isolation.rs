//! The isolation experiment (benches/RESULTS.md, "Isolation"): API B's throughput and p99 on one
//! Portico while API A, on its own backend, is loaded concurrently — healthy, then hanging far
//! beyond its timeout (`X-Demo-Hang: 1`).

use std::collections::BTreeMap;

use serde_json::json;

use crate::report::{f0, ms, pct, ratio, table, write_section};
use crate::runner::{measure, LoadOut, LoadRun, LoadSpec, Measured};
use crate::services::{check_signed, start_backend, start_portico};
use crate::trees;
use crate::{loadavg, preamble, Ctx};

/// A's timeout: the hang is "far beyond" it.
const A_TIMEOUT_MS: u64 = 200;
/// A's bulkhead: as many as A's connections, so a healthy A never fills it.
const A_MAX_CONCURRENT: u32 = 64;
/// A's load: this many connections at this total rate, in every condition that has it.
const A_CONNECTIONS: usize = 64;
const A_RATE: f64 = 1000.0;
/// B's paced rate in the second half of the experiment (well under Portico's capacity on
/// one thread, so latency, not throughput, shows any interference).
const B_PACED_RATE: f64 = 8000.0;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Alone,
    AHealthy,
    AHanging,
}

impl Cond {
    fn name(self) -> &'static str {
        match self {
            Cond::Alone => "B alone",
            Cond::AHealthy => "B + A loaded, healthy",
            Cond::AHanging => "B + A loaded, A's backend hanging",
        }
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== isolation: API B while API A's backend hangs");
    let started_load = loadavg();
    let backend_b = start_backend(ctx, "backend", false)?;
    let backend_a = start_backend(ctx, "backend-a", false)?;

    let dir = ctx.subdir("isolation-tree")?;
    trees::write_common(&dir)?;
    trees::write_cluster(&dir, "iso-a", "http", backend_a.http)?;
    trees::write_cluster(&dir, "iso-b", "http", backend_b.http)?;
    let a_policy = json!({
        "bulkhead": { "max_concurrent": A_MAX_CONCURRENT },
        "breaker": { "consecutive_failures": 5, "open_ms": 1000 },
        "rate_limits": [{ "key": ["app", "ip"], "limit": trees::GENEROUS_PER_SECOND, "per": "second" }]
    });
    trees::write_http_api(
        &dir,
        "iso.a",
        "GET",
        "/v1/iso/a/{order_id}",
        "iso-a",
        "/orders/{order_id}",
        A_TIMEOUT_MS,
        a_policy,
    )?;
    trees::write_http_api(
        &dir,
        "iso.b",
        "GET",
        "/v1/iso/b/{order_id}",
        "iso-b",
        "/orders/{order_id}",
        1000,
        trees::bench_policy(),
    )?;
    let portico = start_portico(ctx, "portico", &dir, &[])?;
    check_signed(portico.addr, "GET", "/v1/iso/a/1", b"", "iso.a")?;
    check_signed(portico.addr, "GET", "/v1/iso/b/1", b"", "iso.b")?;

    let b_spec = |paced: bool| {
        let mut s = LoadSpec::new("iso-b", format!("http://{}/v1/iso/b/42", portico.addr), ctx);
        if paced {
            s.rate = Some(B_PACED_RATE);
        }
        s
    };
    let a_spec = |hang: bool| {
        let mut s = LoadSpec::new("iso-a", format!("http://{}/v1/iso/a/7", portico.addr), ctx);
        s.connections = A_CONNECTIONS;
        s.rate = Some(A_RATE);
        s.warmup_s = 0.5;
        s.duration_s = (ctx.warmup_s + ctx.duration_s).min(30.0);
        s.timeout_ms = 5_000;
        if hang {
            s.headers.push("X-Demo-Hang: 1".into());
        }
        s
    };
    // Closed-loop B (throughput) first, then B paced at B_PACED_RATE (latency).
    let conds: Vec<(Cond, bool)> = [false, true]
        .into_iter()
        .flat_map(|paced| {
            [Cond::Alone, Cond::AHealthy, Cond::AHanging]
                .into_iter()
                .map(move |c| (c, paced))
        })
        .collect();
    let mut b_runs: Vec<Vec<Measured>> = conds.iter().map(|_| Vec::new()).collect();
    let mut a_runs: Vec<Vec<LoadOut>> = conds.iter().map(|_| Vec::new()).collect();
    for round in 0..ctx.rounds {
        for (i, (c, paced)) in conds.iter().enumerate() {
            let a = match c {
                Cond::Alone => None,
                Cond::AHealthy => Some(LoadRun::start(ctx, &a_spec(false))?),
                Cond::AHanging => Some(LoadRun::start(ctx, &a_spec(true))?),
            };
            if a.is_some() {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            let m = measure(ctx, &b_spec(*paced), &[&portico.proc, &backend_b.proc])?;
            let a_out = a.map(LoadRun::finish).transpose()?;
            eprintln!(
                "  round {} {:<36} {} B {:>7.0} ok/s p99 {:>6} µs{}",
                round + 1,
                c.name(),
                if *paced { "paced " } else { "closed" },
                m.load.ok_rps,
                m.load.latency_us.p99,
                a_out
                    .as_ref()
                    .map(|a| format!(
                        " | A {:.0} req/s p99 {} µs {:?}",
                        a.rps, a.latency_us.p99, a.errors
                    ))
                    .unwrap_or_default()
            );
            b_runs[i].push(m);
            if let Some(a) = a_out {
                a_runs[i].push(a);
            }
        }
    }
    let md = render(ctx, &started_load, &conds, &b_runs, &a_runs);
    write_section(&ctx.results, "isolation", &md)?;
    eprintln!("{md}");
    Ok(())
}

fn render(
    ctx: &Ctx,
    started_load: &str,
    conds: &[(Cond, bool)],
    b_runs: &[Vec<Measured>],
    a_runs: &[Vec<LoadOut>],
) -> String {
    let b_rps = |r: &[Measured]| crate::runner::med(r, |m| Some(m.load.ok_rps));
    let mut rows = Vec::new();
    for (i, (c, paced)) in conds.iter().enumerate() {
        let alone = b_rps(&b_runs[if *paced { 3 } else { 0 }]);
        let r = &b_runs[i];
        let a = &a_runs[i];
        let a_med =
            |f: fn(&LoadOut) -> f64| crate::report::median(&a.iter().map(f).collect::<Vec<_>>());
        let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
        for o in a {
            *statuses.entry("2xx".into()).or_default() += o.ok;
            for (k, v) in &o.errors {
                *statuses.entry(k.clone()).or_default() += v;
            }
        }
        let a_total: u64 = statuses.values().sum();
        rows.push(vec![
            if *paced {
                format!("B paced at {B_PACED_RATE:.0}/s")
            } else {
                "B closed loop".to_owned()
            },
            c.name().to_owned(),
            f0(b_rps(r)),
            ratio(b_rps(r) / alone),
            ms(crate::runner::med(r, |m| {
                Some(m.load.latency_us.p50 as f64)
            })),
            ms(crate::runner::med(r, |m| {
                Some(m.load.latency_us.p99 as f64)
            })),
            crate::runner::error_summary(r),
            pct(crate::runner::med(r, |m| m.cpu_util("portico"))),
            if a.is_empty() {
                "–".into()
            } else {
                f0(a_med(|o| o.rps))
            },
            if a.is_empty() {
                "–".into()
            } else {
                ms(a_med(|o| o.latency_us.p99 as f64))
            },
            if a.is_empty() {
                "–".into()
            } else {
                statuses
                    .iter()
                    .map(|(k, v)| format!("{k}: {}", pct(*v as f64 / a_total.max(1) as f64)))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ]);
    }
    let p99 = |i: usize| crate::runner::med(&b_runs[i], |m| Some(m.load.latency_us.p99 as f64));
    format!(
        "### Isolation: API B while API A's backend hangs\n\n{}\n\nOne Portico (`--threads 1`). API A (`iso.a`) has its own demo backend, `timeout_ms` {A_TIMEOUT_MS}, bulkhead {A_MAX_CONCURRENT}, breaker (5 consecutive failures, open 1 s); its load is {A_CONNECTIONS} connections paced to {A_RATE:.0} req/s in total, with `X-Demo-Hang: 1` in the hanging condition (the backend never answers). API B (`iso.b`) is measured twice: closed loop ({} connections, as fast as Portico answers: throughput) and paced at {B_PACED_RATE:.0} req/s (latency). Goal: B loses ≤ 5% throughput while A hangs.\n\n**Closed loop: B's throughput while A hangs is {} of B alone and {} of B beside a healthy A; B's p99 {} ms (alone {} ms, healthy A {} ms). Paced: B's p99 {} ms while A hangs (alone {} ms, healthy A {} ms).**\n\n{}",
        preamble(ctx, started_load, true),
        ctx.connections,
        ratio(b_rps(&b_runs[2]) / b_rps(&b_runs[0])),
        ratio(b_rps(&b_runs[2]) / b_rps(&b_runs[1])),
        ms(p99(2)),
        ms(p99(0)),
        ms(p99(1)),
        ms(p99(5)),
        ms(p99(3)),
        ms(p99(4)),
        table(
            &[
                "B load",
                "condition",
                "B 2xx req/s",
                "vs B alone",
                "B p50 ms",
                "B p99 ms",
                "B non-2xx",
                "Portico CPU use",
                "A req/s",
                "A p99 ms",
                "A answers",
            ],
            &rows,
        ),
    )
}
