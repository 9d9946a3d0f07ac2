//! Latency at a fixed rate (benches/RESULTS.md, "Latency at a fixed rate"), 50% of saturation, open
//! loop (no coordinated omission), Portico vs bare Pingora.

use crate::report::{f0, ms, pct, ratio, table, write_section};
use crate::runner::{error_summary, interleave, med, LoadSpec, Measured, Target};
use crate::services::{check_signed, start_backend, start_bare, start_portico};
use crate::svg::{self, Group};
use crate::{edge, loadavg, preamble, Ctx};

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== latency: open-loop fixed rate at 50% of saturation");
    let started_load = loadavg();
    let backend = start_backend(ctx, "backend", false)?;
    let bare = start_bare(ctx, backend.http)?;
    let dir = ctx.subdir("latency-tree")?;
    edge::write_tree(&dir, backend.http, edge::FILLERS)?;
    let portico = start_portico(ctx, "portico", &dir, &[])?;
    check_signed(portico.addr, "GET", edge::GATEWAY_PATH, b"", "portico")?;
    let p_url = format!("http://{}{}", portico.addr, edge::GATEWAY_PATH);
    let b_url = format!("http://{}{}", bare.addr, edge::PLAIN_PATH);

    // 1. Saturation: closed loop, interleaved rounds.
    eprintln!(" saturation (closed loop, {} connections)", ctx.connections);
    let sat_targets = vec![
        Target {
            name: "Portico (full edge)".into(),
            spec: LoadSpec::new("portico-sat", p_url.clone(), ctx),
            watch: vec![&portico.proc, &backend.proc],
        },
        Target {
            name: "bare Pingora".into(),
            spec: LoadSpec::new("bare-sat", b_url.clone(), ctx),
            watch: vec![&bare.proc, &backend.proc],
        },
    ];
    let sat = interleave(ctx, &sat_targets)?;
    let ok_rps = |m: &Measured| Some(m.load.ok_rps);
    let sat_p = med(&sat[0], ok_rps);
    let sat_b = med(&sat[1], ok_rps);
    let util_p = med(&sat[0], |m| m.cpu_util("portico"));
    let util_b = med(&sat[1], |m| m.cpu_util("bare-pingora"));
    let rate = (sat_p * 0.5).round();
    let rate_b = (sat_b * 0.5).round();

    // 2. Open loop at those rates.
    eprintln!(" open loop: {rate} req/s (both), {rate_b} req/s (bare Pingora's own 50%)");
    let open = |label: &str, url: &str, r: f64| {
        let mut s = LoadSpec::new(label, url.to_owned(), ctx);
        s.rate = Some(r);
        s.open_loop = true;
        s
    };
    let targets = vec![
        Target {
            name: format!("Portico at {} req/s", f0(rate)),
            spec: open("portico-fixed", &p_url, rate),
            watch: vec![&portico.proc, &backend.proc],
        },
        Target {
            name: format!("bare Pingora at {} req/s", f0(rate)),
            spec: open("bare-fixed", &b_url, rate),
            watch: vec![&bare.proc, &backend.proc],
        },
        Target {
            name: format!("bare Pingora at {} req/s (its own 50%)", f0(rate_b)),
            spec: open("bare-fixed-own", &b_url, rate_b),
            watch: vec![&bare.proc, &backend.proc],
        },
    ];
    let runs = interleave(ctx, &targets)?;
    let q = |r: &[Measured], f: fn(&Measured) -> u64| med(r, |m| Some(f(m) as f64));
    let mut rows = Vec::new();
    let mut groups = Vec::new();
    for (t, r) in targets.iter().zip(&runs) {
        let p50 = q(r, |m| m.load.latency_us.p50);
        let p90 = q(r, |m| m.load.latency_us.p90);
        let p99 = q(r, |m| m.load.latency_us.p99);
        let p999 = q(r, |m| m.load.latency_us.p999);
        rows.push(vec![
            t.name.clone(),
            f0(med(r, ok_rps)),
            ms(p50),
            ms(p90),
            format!("**{}**", ms(p99)),
            ms(p999),
            ms(q(r, |m| m.load.latency_us.max)),
            pct(med(r, |m| m.cpu_util(&t.watch[0].name))),
            f0(med(r, |m| Some(m.load.late_sends as f64))),
            error_summary(r),
            r.iter()
                .map(|m| ms(m.load.latency_us.p99 as f64))
                .collect::<Vec<_>>()
                .join(" / "),
        ]);
        groups.push(Group {
            label: t.name.clone(),
            values: vec![p50 / 1e3, p90 / 1e3, p99 / 1e3, p999 / 1e3],
        });
    }
    let p99 = |i: usize| q(&runs[i], |m| m.load.latency_us.p99);
    let headline = format!(
        "**At {} req/s (50% of Portico's saturation), Portico's p99 is {} ms vs bare Pingora's {} ms at the same rate: {} (goal ≤ 1.2×).**",
        f0(rate),
        ms(p99(0)),
        ms(p99(1)),
        ratio(p99(0) / p99(1)),
    );
    let md = format!(
        "### Latency at a fixed rate (50% of saturation, open loop)\n\n{}\n\n**How saturation was found**: closed loop, {} connections, {} interleaved rounds (the edge suite's method): Portico {} req/s (proxy CPU use {}), bare Pingora {} req/s (CPU use {}; below 90% it was capped by CPU 1, so its \"saturation\" is a lower bound). **Fixed rate**: `portico-load --rate R --open-loop` on {} connections: request k of the schedule is due at k / R; connection c sends requests c, c + {}, c + 2×{}, …; a request due while its connection is still busy goes out as soon as it is free, and **every latency is measured from the request's due time**, so a stall is charged to every request it delayed (no coordinated omission). \"late\" counts requests sent more than 1 ms after their due time (the client or the server could not keep up). Medians over rounds; the last column is each round's p99.\n\n{headline}\n\n{}\n![latency percentiles at a fixed rate](plots/latency.svg)\n",
        preamble(ctx, &started_load, true),
        ctx.connections,
        ctx.rounds,
        f0(sat_p),
        pct(util_p),
        f0(sat_b),
        pct(util_b),
        ctx.connections,
        ctx.connections,
        ctx.connections,
        table(
            &[
                "target and rate",
                "2xx req/s",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "proxy CPU use",
                "late sends",
                "non-2xx",
                "p99 per round ms"
            ],
            &rows
        )
    );
    write_section(&ctx.results, "latency", &md)?;
    svg::bars(
        &ctx.plots_dir().join("latency.svg"),
        "Latency at a fixed rate, open loop (from due time)",
        "ms",
        &["p50", "p90", "p99", "p99.9"],
        &groups,
    )?;
    eprintln!("{md}");
    Ok(())
}
