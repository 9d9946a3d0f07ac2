//! The transcoding benchmark (benches/RESULTS.md, "Transcoded gRPC vs HTTP passthrough"): through
//! the same Portico, a transcoded gRPC call (JSON → protobuf → gRPC over a pooled HTTP/2 channel →
//! protobuf → JSON) against a plain HTTP proxy call of the same request to a backend that answers
//! the same JSON bytes, for a GET (path variable) and a POST (JSON body).

use crate::report::{f0, f1, ms, pct, ratio, table, write_section};
use crate::runner::{error_summary, interleave, med, paired_ratio, LoadSpec, Measured, Target};
use crate::services::{check_signed, start_backend, start_nginx_fixed, start_portico, Proxy};
use crate::trees;
use crate::{loadavg, preamble, Ctx};
use std::net::SocketAddr;
use std::path::Path;

/// The JSON body both POST variants send.
pub const ORDER_BODY: &str = r#"{"item":"book","qty":2,"shop":{"id":"s1","name":"Shop One"},"total_cents":"1999","tags":["gift","express"],"labels":{"channel":"open-api"},"note":"leave at the door"}"#;

/// What the transcoded GET and POST answer (asked of a Portico with the gRPC APIs only,
/// on the demo backend's gRPC listener at `grpc`), and an HTTP backend (nginx) answering
/// exactly those bytes at `/orders/42` and `/orders`: the passthrough side of a like-for-like
/// pair.
pub fn same_bytes_backend(
    ctx: &Ctx,
    grpc: SocketAddr,
    name: &str,
) -> anyhow::Result<(String, String, Proxy)> {
    let probe_dir = ctx.subdir(&format!("{name}-probe"))?;
    write_grpc_tree(&probe_dir, grpc, None)?;
    let (get_answer, post_answer) = {
        let p = start_portico(ctx, &format!("{name}-probe"), &probe_dir, &[])?;
        (
            check_signed(p.addr, "GET", "/v1/orders/42", b"", "grpc get")?,
            check_signed(
                p.addr,
                "POST",
                "/v1/orders",
                ORDER_BODY.as_bytes(),
                "grpc post",
            )?,
        )
    };
    let fixed = start_nginx_fixed(
        ctx,
        &format!("{name}-fixed-backend"),
        &[("/orders/42", &get_answer), ("/orders", &post_answer)],
    )?;
    Ok((get_answer, post_answer, fixed))
}

/// The gRPC suite's transcoded APIs on `grpc`, and (when `fixed` is given) HTTP APIs with
/// the same paths under `/v1/http/` on the fixed-answer backend.
pub fn write_grpc_tree(
    dir: &Path,
    grpc: SocketAddr,
    fixed: Option<SocketAddr>,
) -> anyhow::Result<()> {
    trees::write_common(dir)?;
    trees::write_cluster(dir, "bench-grpc", "grpc", grpc)?;
    let sha = trees::write_demo_descriptor(dir)?;
    let svc = portico_demo::grpc::ORDER_SERVICE;
    trees::write_grpc_api(
        dir,
        "grpc.order.get",
        "GET",
        "/v1/orders/{order_id}",
        None,
        "bench-grpc",
        svc,
        "GetOrder",
        &sha,
        trees::bench_policy(),
    )?;
    trees::write_grpc_api(
        dir,
        "grpc.order.create",
        "POST",
        "/v1/orders",
        Some("*"),
        "bench-grpc",
        svc,
        "CreateOrder",
        &sha,
        trees::bench_policy(),
    )?;
    if let Some(addr) = fixed {
        trees::write_cluster(dir, "bench-fixed", "http", addr)?;
        trees::write_http_api(
            dir,
            "http.order.get",
            "GET",
            "/v1/http/orders/{order_id}",
            "bench-fixed",
            "/orders/{order_id}",
            1000,
            trees::bench_policy(),
        )?;
        trees::write_http_api(
            dir,
            "http.order.create",
            "POST",
            "/v1/http/orders",
            "bench-fixed",
            "/orders",
            1000,
            trees::bench_policy(),
        )?;
    }
    Ok(())
}

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== grpc: transcoded gRPC vs HTTP passthrough through Portico");
    let started_load = loadavg();
    let backend = start_backend(ctx, "backend", true)?;
    let grpc_addr = backend
        .grpc
        .ok_or_else(|| anyhow::anyhow!("the demo backend did not report grpc="))?;

    // The passthrough side answers the very bytes the transcoded calls answer.
    let (_, _, mut fixed) = same_bytes_backend(ctx, grpc_addr, "grpc")?;
    fixed.proc.name = "backend".into(); // its CPU is the HTTP rows' backend CPU
    let dir = ctx.subdir("grpc-tree")?;
    write_grpc_tree(&dir, grpc_addr, Some(fixed.addr))?;
    let portico = start_portico(ctx, "portico", &dir, &[])?;

    let body = ORDER_BODY.as_bytes();
    let sizes = [
        check_signed(portico.addr, "GET", "/v1/http/orders/42", b"", "http get")?.len(),
        check_signed(portico.addr, "GET", "/v1/orders/42", b"", "grpc get")?.len(),
        check_signed(portico.addr, "POST", "/v1/http/orders", body, "http post")?.len(),
        check_signed(portico.addr, "POST", "/v1/orders", body, "grpc post")?.len(),
    ];

    let url = |p: &str| format!("http://{}{p}", portico.addr);
    let post = |label: &str, p: &str| {
        let mut s = LoadSpec::new(label, url(p), ctx);
        s.method = "POST";
        s.body = Some(ORDER_BODY.to_owned());
        s
    };
    let http_watch = vec![&portico.proc, &fixed.proc];
    let grpc_watch = vec![&portico.proc, &backend.proc];
    let targets = vec![
        Target {
            name: "GET, HTTP backend".into(),
            spec: LoadSpec::new("http-get", url("/v1/http/orders/42"), ctx),
            watch: http_watch.clone(),
        },
        Target {
            name: "GET, gRPC (transcoded)".into(),
            spec: LoadSpec::new("grpc-get", url("/v1/orders/42"), ctx),
            watch: grpc_watch.clone(),
        },
        Target {
            name: "POST, HTTP backend".into(),
            spec: post("http-post", "/v1/http/orders"),
            watch: http_watch.clone(),
        },
        Target {
            name: "POST, gRPC (transcoded)".into(),
            spec: post("grpc-post", "/v1/orders"),
            watch: grpc_watch.clone(),
        },
    ];
    let runs = interleave(ctx, &targets)?;
    let md = render(ctx, &started_load, &targets, &runs, &sizes);
    write_section(&ctx.results, "grpc", &md)?;
    crate::edge::plot(ctx, "grpc", &targets, &runs)?;
    eprintln!("{md}");
    Ok(())
}

fn render(
    ctx: &Ctx,
    started_load: &str,
    targets: &[Target<'_>],
    runs: &[Vec<Measured>],
    sizes: &[usize],
) -> String {
    let ok_rps = |m: &Measured| Some(m.load.ok_rps);
    let gw_cpu = |m: &Measured| m.cpu_us_per_req("portico");
    let be_cpu = |m: &Measured| m.cpu_us_per_req("backend");
    let mut rows = Vec::new();
    for (i, (t, r)) in targets.iter().zip(runs).enumerate() {
        rows.push(vec![
            t.name.clone(),
            sizes.get(i).map(|s| s.to_string()).unwrap_or_default(),
            f0(med(r, ok_rps)),
            ms(med(r, |m| Some(m.load.latency_us.p50 as f64))),
            ms(med(r, |m| Some(m.load.latency_us.p99 as f64))),
            format!(
                "{} ({} + {})",
                f1(med(r, gw_cpu)),
                f1(med(r, |m| m.user_us_per_req("portico"))),
                f1(med(r, |m| m.sys_us_per_req("portico"))),
            ),
            pct(med(r, |m| m.cpu_util("portico"))),
            f1(med(r, be_cpu)),
            error_summary(r),
        ]);
    }
    let main = table(
        &[
            "call through Portico",
            "answer bytes",
            "2xx req/s",
            "p50 ms",
            "p99 ms",
            "Portico CPU µs/req (user + sys)",
            "Portico CPU use",
            "backend CPU µs/req",
            "non-2xx",
        ],
        &rows,
    );
    let pair = |h: usize, g: usize, what: &str| {
        let cpu_h = med(&runs[h], gw_cpu);
        let cpu_g = med(&runs[g], gw_cpu);
        format!(
            "- {what}: gRPC/HTTP throughput {} (paired per-round median {}); Portico CPU per request {} vs {} µs → transcoding costs **{:+.0}%** CPU per call.",
            ratio(med(&runs[g], ok_rps) / med(&runs[h], ok_rps)),
            ratio(paired_ratio(&runs[g], &runs[h], ok_rps)),
            f1(cpu_g),
            f1(cpu_h),
            (cpu_g / cpu_h - 1.0) * 100.0,
        )
    };
    format!(
        "### Transcoded gRPC vs HTTP passthrough\n\n{}\n\nBoth kinds of API run the same edge pipeline and policy (signature, rate limits, bulkhead, breaker) on one Portico (`--threads 1`). The gRPC APIs reach the demo backend's gRPC listener: GET `/v1/orders/42` → `OrderService/GetOrder`, POST `/v1/orders` → `OrderService/CreateOrder`. The HTTP APIs (`/v1/http/orders/42` → `GET /orders/42`, `/v1/http/orders` → `POST /orders`) reach an HTTP backend (nginx `return 200`) that answers **the very bytes the transcoded calls answer** (captured from a Portico first), so each pair is like for like: same request, same JSON answer bytes; \"backend CPU\" is nginx's for the HTTP rows, the demo backend's for the gRPC rows. Both POSTs send the same {}-byte JSON body. Goal: transcoding ≤ 15% over HTTP passthrough.\n\n{}\n{}\n\n{main}\n![throughput](plots/grpc-throughput.svg) ![Portico CPU per request](plots/grpc-cpu.svg)\n",
        preamble(ctx, started_load, true),
        ORDER_BODY.len(),
        pair(0, 1, "GET"),
        pair(2, 3, "POST"),
    )
}
