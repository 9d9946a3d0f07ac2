//! The cache benchmark (benches/RESULTS.md, "Cache HIT / MISS and the hot-key detector"): what a
//! cache HIT, a cache MISS and the hot-key detector cost, against the same call proxied with no
//! cache or hot-key policy. Eight APIs on one Portico reach the same backend path (`/orders/42`,
//! the same answer bytes) with the same edge policy:
//!
//! - `plain`: no cache, no hot keys (a proxied call);
//! - `hit`: `cache` keyed by the path variable: every measured request is a HIT;
//! - `miss`: `cache` keyed by a header that differs on every request (`portico-load
//!   --unique-header`): every request is a MISS that calls the backend and stores the answer
//!   (the cache full after 10,000, so each store also replaces an entry);
//! - `hot`: `hot_keys` only (never hot, caching off): the detector's count per request, one
//!   key, the answer streamed like a proxied one and its bytes counted on the way; `hot-new`:
//!   the same with a new key on every request (the detector's worst case: every request
//!   replaces the smallest counter of its shard);
//! - `plainh`: `plain` with the MISS and `hot-new` loads' varying header, their baseline (so
//!   parsing and forwarding one more header is not counted as the cache's cost);
//! - `bypass` and `bypassh`: `"cache": {"ttl_ms": 0}` alone, without and with the varying
//!   header: never cached, no detector, but answers marked `X-Portico-Cache: BYPASS` like the
//!   `hot` ones, so `hot` − `bypass` is the detector alone and `bypass` − `plain` the header.
//!
//! Measured both ways: instructions per request under callgrind (stable) and CPU µs per
//! request in interleaved closed-loop rounds. Goals: a HIT ≤ 0.6× a proxied call's CPU; the
//! detector ≤ 0.3 µs per request.

use crate::callgrind::{CgLoad, CgMeasure, CgPlan};
use crate::instructions::count_portico;
use crate::report::{f0, f1, ratio, table, write_section};
use crate::runner::{error_summary, interleave, med, LoadSpec, Measured, Target};
use crate::services::{check_signed, start_backend, start_portico};
use crate::trees;
use crate::{loadavg, preamble, Ctx};
use serde_json::{json, Value};

/// The header that differs on every request of the MISS and `hot-new` loads.
const UNIQUE: &str = "X-Bench-Key";

/// (label, API id, path prefix, policy additions, header varies per request).
fn variants() -> Vec<(&'static str, &'static str, &'static str, Value, bool)> {
    vec![
        (
            "proxied, no cache",
            "cache.plain",
            "plain",
            json!({}),
            false,
        ),
        (
            "cache HIT",
            "cache.hit",
            "hit",
            json!({"cache": {"ttl_ms": 3_600_000, "key": ["path:order_id"]}}),
            false,
        ),
        (
            "cache MISS (new key every request)",
            "cache.miss",
            "miss",
            json!({"cache": {"ttl_ms": 3_600_000, "key": [format!("header:{UNIQUE}")]}}),
            true,
        ),
        (
            "hot-key detector, one key",
            "cache.hot",
            "hot",
            json!({"cache": {"ttl_ms": 0}, "hot_keys": {"key": ["path:order_id"], "rate_above": 1e12}}),
            false,
        ),
        (
            "hot-key detector, new key every request",
            "cache.hotnew",
            "hotnew",
            json!({"cache": {"ttl_ms": 0}, "hot_keys": {"key": [format!("header:{UNIQUE}")], "rate_above": 1e12}}),
            true,
        ),
        (
            "proxied, no cache, with the varying header",
            "cache.plainh",
            "plainh",
            json!({}),
            true,
        ),
        (
            "cache off (`ttl_ms: 0`), no detector: BYPASS header only",
            "cache.bypass",
            "bypass",
            json!({"cache": {"ttl_ms": 0}}),
            false,
        ),
        (
            "cache off, no detector, with the varying header",
            "cache.bypassh",
            "bypassh",
            json!({"cache": {"ttl_ms": 0}}),
            true,
        ),
    ]
}

/// Indexes into [`variants`].
const PLAIN: usize = 0;
const HIT: usize = 1;
const MISS: usize = 2;
const HOT: usize = 3;
const HOT_NEW: usize = 4;
const PLAIN_H: usize = 5;
const BYPASS: usize = 6;
const BYPASS_H: usize = 7;

pub fn run(ctx: &Ctx, plan: CgPlan) -> anyhow::Result<()> {
    eprintln!("== cache: a HIT, a MISS and the hot-key detector vs a proxied call");
    let started_load = loadavg();
    let backend = start_backend(ctx, "backend", false)?;
    let dir = ctx.subdir("cache-tree")?;
    trees::write_common(&dir)?;
    trees::write_cluster(&dir, "bench-http", "http", backend.http)?;
    let variants = variants();
    for (_, id, prefix, extra, _) in &variants {
        let mut policy = trees::bench_policy();
        if let (Some(p), Some(e)) = (policy.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        trees::write_order_get(&dir, id, prefix, "bench-http", policy)?;
    }
    let path = |prefix: &str| format!("/v1/{prefix}/orders/42");
    let unique = vec!["--unique-header".to_owned(), UNIQUE.to_owned()];

    // Instructions per request (callgrind): one process, the loads in turn.
    eprintln!(" callgrind");
    let counts: Vec<CgMeasure> = count_portico(ctx, &dir, "cache", plan, |addr| {
        variants
            .iter()
            .map(|(label, _, prefix, _, varies)| {
                let mut l = CgLoad::get(label, format!("http://{addr}{}", path(prefix)));
                if *varies {
                    l.extra = unique.clone();
                }
                l
            })
            .collect()
    })?;

    // CPU per request: interleaved closed-loop rounds on one Portico.
    let portico = start_portico(ctx, "portico", &dir, &[])?;
    let mut sizes = Vec::new();
    for (label, _, prefix, _, _) in &variants {
        sizes.push(check_signed(portico.addr, "GET", &path(prefix), b"", label)?.len());
    }
    let watch = vec![&portico.proc, &backend.proc];
    let targets: Vec<Target<'_>> = variants
        .iter()
        .map(|(label, _, prefix, _, varies)| {
            let mut spec = LoadSpec::new(
                prefix,
                format!("http://{}{}", portico.addr, path(prefix)),
                ctx,
            );
            if *varies {
                spec.extra = unique.clone();
            }
            Target {
                name: (*label).to_owned(),
                spec,
                watch: watch.clone(),
            }
        })
        .collect();
    let runs = interleave(ctx, &targets)?;
    let md = render(ctx, &started_load, plan, &targets, &runs, &counts, &sizes);
    write_section(&ctx.results, "cache", &md)?;
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
    sizes: &[usize],
) -> String {
    let cpu = |i: usize| med(&runs[i], |m| m.cpu_us_per_req("portico"));
    let be = |i: usize| med(&runs[i], |m| m.cpu_us_per_req("backend"));
    let ir = |i: usize| counts.get(i).map_or(f64::NAN, |m| m.ir_per_req());
    // µs per instruction of the proxied call natively: converts an instruction difference
    // into CPU time without the noise of subtracting two CPU figures.
    let us_per_ir = cpu(PLAIN) / ir(PLAIN);
    let mut rows = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        rows.push(vec![
            t.name.clone(),
            sizes.get(i).map(|s| s.to_string()).unwrap_or_default(),
            format!("**{}**", f0(ir(i))),
            ratio(ir(i) / ir(PLAIN)),
            f1(cpu(i)),
            ratio(cpu(i) / cpu(PLAIN)),
            f0(med(&runs[i], |m| Some(m.load.ok_rps))),
            f1(be(i)),
            error_summary(&runs[i]),
        ]);
    }
    // The loads that send the varying header are compared with the proxied call that sends
    // it too: the header's own parsing and forwarding is not the cache's cost. The detector
    // alone is measured against the API that marks its answers BYPASS without one.
    let us = |i: usize, base: usize| (ir(i) - ir(base)) * us_per_ir;
    let headline = format!(
        "**A HIT costs {} of a proxied call's instructions ({} of its CPU µs; goal ≤ 0.6×); a MISS {} ({}) of the same call sending the same varying header. The hot-key detector alone (against the same API marking its answers BYPASS without one) adds {:.0} instructions ≈ {:.2} µs per request with one key, {:.0} ≈ {:.2} µs with a new key every request (goal ≤ 0.3 µs); with the `X-Portico-Cache: BYPASS` header every API with a cache or hot-key policy carries, {:.0} ≈ {:.2} µs and {:.0} ≈ {:.2} µs over a plain proxied call.**",
        ratio(ir(HIT) / ir(PLAIN)),
        ratio(cpu(HIT) / cpu(PLAIN)),
        ratio(ir(MISS) / ir(PLAIN_H)),
        ratio(cpu(MISS) / cpu(PLAIN_H)),
        ir(HOT) - ir(BYPASS),
        us(HOT, BYPASS),
        ir(HOT_NEW) - ir(BYPASS_H),
        us(HOT_NEW, BYPASS_H),
        ir(HOT) - ir(PLAIN),
        us(HOT, PLAIN),
        ir(HOT_NEW) - ir(PLAIN_H),
        us(HOT_NEW, PLAIN_H),
    );
    format!(
        "### Cache HIT / MISS and the hot-key detector\n\n{}\n\nEight APIs on one Portico (`--threads 1`) reach the same demo backend path `/orders/42` with the same edge policy (signature, rate limits, bulkhead, breaker); they differ only in `cache` / `hot_keys` (see benches/src/bench/cache.rs). The MISS and \"new key\" loads send a header (`{UNIQUE}`) that differs on every request and is the key; the rows \"with the varying header\" send it too, their baselines. The two \"cache off\" APIs have `\"cache\": {{\"ttl_ms\": 0}}` and no detector: their answers carry `X-Portico-Cache: BYPASS` like the detector's, so the detector's rows minus these are the detector alone. Instructions: callgrind, {} warm-up + {} measured requests on {} connections, traffic threads. CPU: closed loop, interleaved rounds, µs of the Portico process per request. The detector's cost in µs is its instruction difference × the proxied call's µs per instruction.\n\n{headline}\n\n{}",
        preamble(ctx, started_load, true),
        plan.warmup,
        plan.calls,
        plan.connections,
        table(
            &[
                "call",
                "answer bytes",
                "instructions / request",
                "vs proxied",
                "Portico CPU µs / request",
                "vs proxied",
                "2xx req/s",
                "backend CPU µs / request",
                "non-2xx",
            ],
            &rows
        )
    )
}
