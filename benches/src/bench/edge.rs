//! The edge benchmark (benches/RESULTS.md, "Edge gateway vs nginx vs bare Pingora vs nginx + Lua"):
//! the same backend reached directly, through nginx `proxy_pass` with upstream keepalive, through a
//! bare Pingora proxy, through nginx + Lua doing the signed edge's work (benches/peers/nginx-lua/,
//! checked before it is measured), and through Portico with the full edge pipeline on signed
//! requests.

use crate::lua_peer;
use crate::report::{f0, f1, ms, pct, ratio, table, write_section};
use crate::runner::{error_summary, interleave, med, paired_ratio, LoadSpec, Measured, Target};
use crate::services::{check_signed, start_backend, start_bare, start_nginx, start_portico};
use crate::trees;
use crate::{loadavg, preamble, Ctx};

/// Filler APIs in Portico's route table besides the benchmarked one.
pub const FILLERS: usize = 200;

/// What direct, nginx and bare Pingora are asked.
pub const PLAIN_PATH: &str = "/orders/42";
/// What Portico and the nginx + Lua peer are asked (rewritten to [`PLAIN_PATH`] on the
/// backend).
pub const GATEWAY_PATH: &str = "/v1/bench/orders/42";

/// The targets' places in the comparison (the order of every round).
const DIRECT: usize = 0;
const NGINX: usize = 1;
const BARE: usize = 2;
const LUA: usize = 3;
const PORTICO: usize = 4;

/// The edge suite's tree: the common apps and IP ACL, `fillers` filler APIs and
/// `bench.order.get` (full policy) on the demo backend at `backend`.
pub fn write_tree(
    dir: &std::path::Path,
    backend: std::net::SocketAddr,
    fillers: usize,
) -> anyhow::Result<()> {
    trees::write_common(dir)?;
    trees::write_cluster(dir, "bench-http", "http", backend)?;
    trees::write_fillers(dir, "bench-http", fillers)?;
    trees::write_http_api(
        dir,
        "bench.order.get",
        "GET",
        "/v1/bench/orders/{order_id}",
        "bench-http",
        "/orders/{order_id}",
        1000,
        trees::bench_policy(),
    )
}

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== edge: direct vs nginx vs bare Pingora vs nginx + Lua vs Portico");
    let started_load = loadavg();
    let backend = start_backend(ctx, "backend", false)?;
    let nginx = start_nginx(ctx, backend.http)?;
    let bare = start_bare(ctx, backend.http)?;

    let dir = ctx.subdir("edge-tree")?;
    write_tree(&dir, backend.http, FILLERS)?;
    let portico = start_portico(ctx, "portico", &dir, &[])?;
    // The nginx + Lua peer serves the very tree Portico got, and must pass the check of
    // docs/PROTOCOL.md's vectors and refusals before it is measured.
    let (lua, checked) = lua_peer::start_checked(ctx, &dir, "bench-http")?;
    for l in &checked {
        eprintln!("  peer check ok: {l}");
    }

    let plain = PLAIN_PATH;
    let gw = GATEWAY_PATH;
    check_signed(backend.http, "GET", plain, b"", "direct")?;
    check_signed(nginx.addr, "GET", plain, b"", "nginx")?;
    check_signed(bare.addr, "GET", plain, b"", "bare pingora")?;
    check_signed(lua.addr, "GET", gw, b"", "nginx + lua")?;
    check_signed(portico.addr, "GET", gw, b"", "portico")?;

    let url = |addr: std::net::SocketAddr, p: &str| format!("http://{addr}{p}");
    let targets = vec![
        Target {
            name: "direct backend".into(),
            spec: LoadSpec::new("direct", url(backend.http, plain), ctx),
            watch: vec![&backend.proc],
        },
        Target {
            name: "nginx".into(),
            spec: LoadSpec::new("nginx", url(nginx.addr, plain), ctx),
            watch: vec![&nginx.proc, &backend.proc],
        },
        Target {
            name: "bare Pingora".into(),
            spec: LoadSpec::new("bare-pingora", url(bare.addr, plain), ctx),
            watch: vec![&bare.proc, &backend.proc],
        },
        Target {
            name: "nginx + Lua (signed edge)".into(),
            spec: LoadSpec::new("nginx-lua", url(lua.addr, gw), ctx),
            watch: vec![&lua.proc, &backend.proc],
        },
        Target {
            name: "Portico (full edge)".into(),
            spec: LoadSpec::new("portico", url(portico.addr, gw), ctx),
            watch: vec![&portico.proc, &backend.proc],
        },
    ];
    let runs = interleave(ctx, &targets)?;
    let md = render(ctx, &started_load, &targets, &runs, &checked);
    write_section(&ctx.results, "edge", &md)?;
    plot(ctx, "edge", &targets, &runs)?;
    eprintln!("{md}");
    Ok(())
}

/// `plots/<key>-throughput.svg` (2xx req/s) and `plots/<key>-cpu.svg` (the first watched
/// process's CPU µs per request, user and system) of interleaved runs.
pub fn plot(
    ctx: &Ctx,
    key: &str,
    targets: &[Target<'_>],
    runs: &[Vec<Measured>],
) -> anyhow::Result<()> {
    use crate::svg::{bars, Group};
    let groups: Vec<Group> = targets
        .iter()
        .zip(runs)
        .map(|(t, r)| Group {
            label: t.name.clone(),
            values: vec![med(r, |m| Some(m.load.ok_rps))],
        })
        .collect();
    bars(
        &ctx.plots_dir().join(format!("{key}-throughput.svg")),
        &format!("{key}: throughput (median over rounds)"),
        "2xx requests per second",
        &["2xx req/s"],
        &groups,
    )?;
    let groups: Vec<Group> = targets
        .iter()
        .zip(runs)
        .filter(|(t, _)| t.watch.len() > 1 || key != "edge")
        .map(|(t, r)| {
            let name = &t.watch[0].name;
            Group {
                label: t.name.clone(),
                values: vec![
                    med(r, |m| m.cpu_us_per_req(name)),
                    med(r, |m| m.user_us_per_req(name)),
                    med(r, |m| m.sys_us_per_req(name)),
                ],
            }
        })
        .collect();
    bars(
        &ctx.plots_dir().join(format!("{key}-cpu.svg")),
        &format!("{key}: proxy CPU per request (median over rounds)"),
        "CPU µs per request",
        &["user + system", "user", "system"],
        &groups,
    )
}

fn render(
    ctx: &Ctx,
    started_load: &str,
    targets: &[Target<'_>],
    runs: &[Vec<Measured>],
    checked: &[String],
) -> String {
    let ok_rps = |m: &Measured| Some(m.load.ok_rps);
    let direct = med(&runs[DIRECT], ok_rps);
    let nginx = med(&runs[NGINX], ok_rps);
    let proxy_cpu = |t: &Target<'_>, m: &Measured| {
        if t.watch.len() > 1 {
            m.cpu_us_per_req(&t.watch[0].name)
        } else {
            None
        }
    };
    let proxy_part = |t: &Target<'_>, m: &Measured, user: bool| {
        if t.watch.len() < 2 {
            None
        } else if user {
            m.user_us_per_req(&t.watch[0].name)
        } else {
            m.sys_us_per_req(&t.watch[0].name)
        }
    };
    let pcpu = |i: usize| move |m: &Measured| m.cpu_us_per_req(&targets[i].watch[0].name);
    // Per-core capacity: requests one fully used core would carry at the measured CPU cost.
    let cap = |i: usize| 1e6 / med(&runs[i], pcpu(i));
    let mut rows = Vec::new();
    for (i, (t, r)) in targets.iter().zip(runs).enumerate() {
        let rps = med(r, ok_rps);
        rows.push(vec![
            t.name.clone(),
            f0(rps),
            ratio(rps / direct),
            ratio(rps / nginx),
            if i == DIRECT {
                "–".into()
            } else {
                ratio(cap(i) / cap(LUA))
            },
            ms(med(r, |m| Some(m.load.latency_us.p50 as f64))),
            ms(med(r, |m| Some(m.load.latency_us.p99 as f64))),
            ms(med(r, |m| Some(m.load.latency_us.p999 as f64))),
            format!(
                "{} ({} + {})",
                f1(med(r, |m| proxy_cpu(t, m))),
                f1(med(r, |m| proxy_part(t, m, true))),
                f1(med(r, |m| proxy_part(t, m, false))),
            ),
            pct(med(r, |m| {
                if t.watch.len() > 1 {
                    m.cpu_util(&t.watch[0].name)
                } else {
                    None
                }
            })),
            f1(med(r, |m| m.cpu_us_per_req("backend"))),
            f1(med(r, |m| {
                (m.load.requests > 0).then(|| m.load.client_cpu_s * 1e6 / m.load.requests as f64)
            })),
            error_summary(r),
        ]);
    }
    let main = table(
        &[
            "target",
            "2xx req/s",
            "vs direct",
            "vs nginx",
            "per-core capacity vs nginx + Lua",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "proxy CPU µs/req (user + sys)",
            "proxy CPU use",
            "backend CPU µs/req",
            "client CPU µs/req",
            "non-2xx",
        ],
        &rows,
    );
    let util = |i: usize| med(&runs[i], |m| m.cpu_util(&targets[i].watch[0].name));
    let capped: Vec<String> = (1..targets.len())
        .filter(|i| util(*i) < 0.9)
        .map(|i| format!("{} used only {} of its CPU", targets[i].name, pct(util(i))))
        .collect();
    let capped_note = if capped.is_empty() {
        String::new()
    } else {
        format!(
            " Note: {} (saturated: ≥ 90%); below that a proxy's throughput was capped by CPU 1 (load generator + backend) or by other work on the machine, not by the proxy itself, so throughput ratios involving it are not proxy speed and the capacity ratios are the fairer comparison.",
            capped.join(", ")
        )
    };
    // Per-round capacity ratio a / b: b's CPU per request over a's, in the same round.
    let paired_cap = |a: usize, b: usize| {
        let v: Vec<f64> = runs[a]
            .iter()
            .zip(&runs[b])
            .filter_map(|(x, y)| Some(pcpu(b)(y)? / pcpu(a)(x)?))
            .collect();
        crate::report::median(&v)
    };
    let headline = format!(
        "**Portico / nginx + Lua (the same signed edge): per-core capacity {} (paired per-round median {}; CPU per request {} vs {} µs), throughput {} (paired {}).** Throughput: Portico / nginx {} (paired per-round median {}), Portico / bare Pingora {} (paired {}), bare Pingora / nginx {}. Per-core capacity (1 / CPU per request): Portico / nginx {}, Portico / bare Pingora {}, bare Pingora / nginx {}, nginx + Lua / nginx {}; Portico {} vs nginx {} vs bare Pingora {} vs nginx + Lua {} req/s per core.{capped_note}",
        ratio(cap(PORTICO) / cap(LUA)),
        ratio(paired_cap(PORTICO, LUA)),
        f1(med(&runs[PORTICO], pcpu(PORTICO))),
        f1(med(&runs[LUA], pcpu(LUA))),
        ratio(med(&runs[PORTICO], ok_rps) / med(&runs[LUA], ok_rps)),
        ratio(paired_ratio(&runs[PORTICO], &runs[LUA], ok_rps)),
        ratio(med(&runs[PORTICO], ok_rps) / nginx),
        ratio(paired_ratio(&runs[PORTICO], &runs[NGINX], ok_rps)),
        ratio(med(&runs[PORTICO], ok_rps) / med(&runs[BARE], ok_rps)),
        ratio(paired_ratio(&runs[PORTICO], &runs[BARE], ok_rps)),
        ratio(med(&runs[BARE], ok_rps) / nginx),
        ratio(cap(PORTICO) / cap(NGINX)),
        ratio(cap(PORTICO) / cap(BARE)),
        ratio(cap(BARE) / cap(NGINX)),
        ratio(cap(LUA) / cap(NGINX)),
        f0(cap(PORTICO)),
        f0(cap(NGINX)),
        f0(cap(BARE)),
        f0(cap(LUA)),
    );
    let mut per_round_rows = Vec::new();
    for (t, r) in targets.iter().zip(runs) {
        let mut row = vec![t.name.clone()];
        row.extend(r.iter().map(|m| {
            let cpu = proxy_cpu(t, m)
                .map(|c| format!(" / {c:.1} µs"))
                .unwrap_or_default();
            format!("{}{cpu}", f0(m.load.ok_rps))
        }));
        per_round_rows.push(row);
    }
    // The ratio the headline's paired median is taken over, round by round.
    let mut row = vec!["Portico ÷ nginx + Lua (per-core capacity)".to_owned()];
    row.extend(runs[PORTICO].iter().zip(&runs[LUA]).map(|(p, l)| {
        match (pcpu(PORTICO)(p), pcpu(LUA)(l)) {
            (Some(p), Some(l)) => ratio(l / p),
            _ => "–".into(),
        }
    }));
    per_round_rows.push(row);
    let mut hdr = vec!["target".to_owned()];
    hdr.extend((1..=ctx.rounds).map(|i| format!("round {i} (req/s / proxy CPU µs/req)")));
    let hdr_refs: Vec<&str> = hdr.iter().map(String::as_str).collect();
    format!(
        "### Edge: direct vs nginx vs bare Pingora vs nginx + Lua vs Portico\n\n{}\n\n![throughput](plots/edge-throughput.svg) ![CPU per request](plots/edge-cpu.svg)\n\nRequests: `GET` with the four signature headers of docs/PROTOCOL.md (\"Signing a request\"; fresh nonce and timestamp per request, signed by the load generator for every target). Direct, nginx and bare Pingora get `/orders/42`; Portico gets `/v1/bench/orders/42`, which runs ip_acl (40 deny CIDRs + an allow list) → route ({} APIs) → auth (HMAC, replay cache) → permit → rate_limit (per-app limit + a `[app, ip]` rule and an `api` rule) → degrade → bulkhead → breaker → balance, and rewrites to `/orders/42` on the same backend. nginx + Lua (benches/peers/nginx-lua/: Debian's nginx with libnginx-mod-http-lua, one process, configured from the same tree) gets `/v1/bench/orders/42` too and does per request: the IP deny/allow lists, routing by path prefix over the same APIs, the body read, the four headers, the timestamp window, HMAC-SHA256 over the string-to-sign with the canonical query (LuaJIT FFI to libcrypto, each app's key schedule kept), the nonce in a shared-dict replay cache, the app's status and grant, the same three rate-limit rules counted in a shared dict (fixed windows), then keep-alive `proxy_pass` with the same rewrite; no bulkhead, breaker, degrade, metrics or balancer choice (one endpoint). Before measuring, it passed the check (`./ops/bench.sh peer-check`): {}. Throughput counts 2xx answers only.\n\n{headline}\n\n{main}\nPer round:\n\n{}",
        preamble(ctx, started_load, true),
        FILLERS + 1,
        checked.join("; "),
        table(&hdr_refs, &per_round_rows),
    )
}
