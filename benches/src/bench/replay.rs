//! One app's sustained signed rate against the replay cache (benches/RESULTS.md, "One app's
//! sustained signed rate").
//!
//! ONE app signs every request (fresh nonce each), open loop at `--soak-rate` (10,000/s by
//! default) for `--soak-secs`; every 1,000th request re-sends the previous signature (a
//! replay that must be refused). Reports the per-second 2xx / 429 counts, the answers to
//! the replays, and the gateway's RSS over time.

use std::time::{Duration, Instant};

use crate::procs::rss_kib;
use crate::report::{f0, table, write_section};
use crate::runner::{LoadRun, LoadSpec};
use crate::services::{check_signed, start_backend, start_portico};
use crate::svg::{self, Line};
use crate::{edge, loadavg, preamble, Ctx};

/// Every K-th request of a connection is a replay.
const REPLAY_EVERY: u64 = 1000;

pub fn run(ctx: &Ctx, secs: f64, rate: f64) -> anyhow::Result<()> {
    eprintln!("== replay: one app at {rate} signed req/s for {secs} s");
    let started_load = loadavg();
    let backend = start_backend(ctx, "backend", false)?;
    let dir = ctx.subdir("replay-tree")?;
    edge::write_tree(&dir, backend.http, edge::FILLERS)?;
    let portico = start_portico(ctx, "portico", &dir, &[])?;
    check_signed(portico.addr, "GET", edge::GATEWAY_PATH, b"", "portico")?;
    let rss_start = rss_kib(portico.proc.pid)?;

    let mut spec = LoadSpec::new(
        "one-app",
        format!("http://{}{}", portico.addr, edge::GATEWAY_PATH),
        ctx,
    );
    spec.duration_s = secs;
    spec.warmup_s = 0.0;
    spec.rate = Some(rate);
    spec.open_loop = true;
    spec.apps = 1;
    spec.connections = 64;
    spec.extra = vec![
        "--series".into(),
        "--replay-every".into(),
        REPLAY_EVERY.to_string(),
    ];
    let t0 = Instant::now();
    let mut run = LoadRun::start(ctx, &spec)?;
    let mut rss: Vec<(f64, f64)> = vec![(0.0, rss_start as f64 / 1024.0)];
    let deadline = t0 + Duration::from_secs_f64(secs + 60.0);
    while !run.exited() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(5));
        if let Ok(r) = rss_kib(portico.proc.pid) {
            rss.push((t0.elapsed().as_secs_f64(), r as f64 / 1024.0));
        }
    }
    let out = run.finish()?;
    let rss_end = rss_kib(portico.proc.pid).unwrap_or(0);
    let rss_max = rss.iter().map(|r| r.1).fold(0.0, f64::max);
    let s429: u64 = out.series.iter().map(|s| s[2]).sum();
    let first_429 = out.series.iter().find(|s| s[2] > 0).map(|s| s[0]);
    let last_all_ok = out
        .series
        .iter()
        .take_while(|s| s[2] == 0)
        .map(|s| s[1])
        .sum::<u64>();
    let replays: u64 = out.replays.values().sum();
    let replays_refused: u64 = out
        .replays
        .iter()
        .filter(|(k, _)| !k.starts_with('2'))
        .map(|(_, v)| *v)
        .sum();
    let replay_text = if out.replays.is_empty() {
        "none".to_owned()
    } else {
        out.replays
            .iter()
            .map(|(k, v)| format!("{k}×{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let verdict = match first_429 {
        Some(t) => {
            format!("refused with 429 from second {t} on, after {last_all_ok} accepted calls")
        }
        None => "no 429 at all".to_owned(),
    };
    let headline = format!(
        "**One app at {} signed req/s for {} s: {verdict}; {} of {} calls answered 429 ({:.1}%). Replays: {replays_refused} of {replays} refused ({replay_text}). Gateway RSS {:.1} MiB at the start, {:.1} MiB at most, {:.1} MiB at the end (goal: no refusal, replays refused, cache ≤ 100 MB).**",
        f0(rate),
        f0(secs),
        s429,
        out.requests,
        s429 as f64 * 100.0 / out.requests.max(1) as f64,
        rss_start as f64 / 1024.0,
        rss_max,
        rss_end as f64 / 1024.0,
    );
    // Every 10th second in the table.
    let rows: Vec<Vec<String>> = out
        .series
        .iter()
        .filter(|s| s[0] % 10 == 0 || Some(s[0]) == first_429)
        .map(|s| {
            let r = rss
                .iter()
                .min_by(|a, b| {
                    (a.0 - s[0] as f64)
                        .abs()
                        .total_cmp(&(b.0 - s[0] as f64).abs())
                })
                .map(|r| format!("{:.1}", r.1))
                .unwrap_or_default();
            vec![
                s[0].to_string(),
                s[1].to_string(),
                s[2].to_string(),
                s[3].to_string(),
                r,
            ]
        })
        .collect();
    let md = format!(
        "### One app's sustained signed rate (replay cache)\n\n{}\n\nOne Portico (`--threads 1`, the edge suite's tree and API); `portico-load --rate {} --open-loop` on 64 connections, **every request signed by the same app** (`{}`) with a fresh nonce, for {} s; every {REPLAY_EVERY}th request of a connection re-sends the previous request's exact signature (same nonce and timestamp), a replay that must be refused (401 `NONCE_REPLAYED`); replays are counted apart. RSS sampled every 5 s. Total: {} calls, {} 2xx, late sends {}, errors {:?}.\n\n{headline}\n\n{}\n![one app's signed calls per second](plots/replay.svg) ![gateway RSS during the soak](plots/replay-rss.svg)\n",
        preamble(ctx, &started_load, false),
        f0(rate),
        crate::runner::app_key(0),
        f0(secs),
        out.requests,
        out.ok,
        out.late_sends,
        out.errors,
        table(
            &["second", "2xx", "429", "other", "gateway RSS MiB (nearest sample)"],
            &rows
        ),
    );
    write_section(&ctx.results, "replay", &md)?;
    svg::lines(
        &ctx.plots_dir().join("replay.svg"),
        "One app, fixed rate: answers per second",
        "seconds",
        "answers per second",
        &[
            Line {
                label: "2xx".into(),
                points: out
                    .series
                    .iter()
                    .map(|s| (s[0] as f64, s[1] as f64))
                    .collect(),
            },
            Line {
                label: "429".into(),
                points: out
                    .series
                    .iter()
                    .map(|s| (s[0] as f64, s[2] as f64))
                    .collect(),
            },
        ],
    )?;
    svg::lines(
        &ctx.plots_dir().join("replay-rss.svg"),
        "Gateway RSS during the one-app soak",
        "seconds",
        "MiB",
        &[Line {
            label: "RSS".into(),
            points: rss,
        }],
    )?;
    eprintln!("{md}");
    Ok(())
}
