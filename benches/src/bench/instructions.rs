//! The stable measure (benches/RESULTS.md, "Instructions per request"). Instructions per request
//! under callgrind (see `callgrind.rs`) for the edge targets (Portico's full signed edge on the
//! edge suite's tree, the bare Pingora proxy, nginx), each counted in fresh processes `--cg-reps`
//! times to show the spread, with the top functions of Portico and bare Pingora; and a transcoded
//! gRPC call against an HTTP passthrough call that answers the very same JSON bytes.

use std::net::SocketAddr;
use std::path::Path;

use crate::callgrind::{self, CgLoad, CgMeasure, CgPlan, FnCost, Profile};
use crate::report::{f0, f1, ratio, table, write_section};
use crate::services::{
    check_signed, start_backend, start_bare_with, start_nginx_with, start_portico,
    start_portico_with,
};
use crate::svg::{self, Group};
use crate::{edge, grpc};
use crate::{loadavg, Ctx};

/// Functions listed per profile in RESULTS.md.
const TOP: usize = 15;

/// A profile's top functions (inclusive, self) and self cost per crate.
type Tops<'a> = (
    &'a str,
    Vec<FnCost>,
    Vec<FnCost>,
    Vec<(String, u64, f64)>,
    Vec<(String, u64)>,
);

/// One counted target of the edge comparison.
struct Counted {
    name: &'static str,
    reps: Vec<CgMeasure>,
}

impl Counted {
    fn median_ir(&self) -> f64 {
        crate::report::median(
            &self
                .reps
                .iter()
                .map(CgMeasure::ir_per_req)
                .collect::<Vec<_>>(),
        )
    }
    /// (max − min) / min over the repetitions.
    fn spread(&self) -> f64 {
        let v: Vec<f64> = self.reps.iter().map(CgMeasure::ir_per_req).collect();
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        (max - min) / min
    }
}

pub fn run(ctx: &Ctx, plan: CgPlan, reps: usize) -> anyhow::Result<()> {
    eprintln!(
        "== instructions: callgrind, {} warm-up + {} counted requests on {} connections, {reps} repetitions",
        plan.warmup, plan.calls, plan.connections
    );
    let started_load = loadavg();
    let backend = start_backend(ctx, "backend", false)?;
    let dir = ctx.subdir("instr-edge-tree")?;
    edge::write_tree(&dir, backend.http, edge::FILLERS)?;

    let mut portico = Counted {
        name: "Portico (full edge)",
        reps: vec![],
    };
    let mut bare = Counted {
        name: "bare Pingora",
        reps: vec![],
    };
    let mut nginx = Counted {
        name: "nginx",
        reps: vec![],
    };
    let mut profiles: Vec<(&str, std::path::PathBuf)> = Vec::new();
    for rep in 1..=reps {
        eprintln!(" repetition {rep}");
        let m = count_portico(ctx, &dir, &format!("portico-{rep}"), plan, |addr| {
            vec![CgLoad::get(
                "Portico (full edge)",
                format!("http://{addr}{}", edge::GATEWAY_PATH),
            )]
        })?;
        portico.reps.extend(m);
        let m = count_bare(
            ctx,
            &format!("bare-{rep}"),
            "bare-pingora-proxy",
            &[],
            backend.http,
            plan,
        )?;
        bare.reps.extend(m);
        nginx
            .reps
            .extend(count_nginx(ctx, rep, backend.http, plan)?);
    }
    for (name, c) in [("portico", &portico), ("bare", &bare)] {
        if let Some(f) = c.reps.first().and_then(|m| m.main_traffic_file()) {
            let keep = ctx.plots_dir().join(format!("callgrind-{name}.out"));
            // The profile itself is left next to the plots for callgrind_annotate /
            // kcachegrind (git-ignored, see benches/plots/.gitignore).
            let _ = std::fs::copy(f, &keep);
            profiles.push((c.name, f.to_path_buf()));
        }
    }
    let mut tops = Vec::new();
    for (name, f) in &profiles {
        let p = Profile::read(f)?;
        tops.push((
            *name,
            p.top(true, TOP),
            p.top(false, TOP),
            p.by_crate(),
            p.syscalls(),
        ));
    }

    // gRPC vs HTTP, same answer bytes.
    let pair = count_grpc_pair(ctx, plan)?;

    let md = render(
        ctx,
        &started_load,
        plan,
        reps,
        &[&portico, &bare, &nginx],
        &tops,
        &pair,
    );
    write_section(&ctx.results, "instructions", &md)?;
    let groups: Vec<Group> = [&portico, &bare, &nginx]
        .iter()
        .map(|c| Group {
            label: c.name.to_owned(),
            values: c.reps.iter().map(CgMeasure::ir_per_req).collect(),
        })
        .chain(pair.measures.iter().map(|m| Group {
            label: m.label.clone(),
            values: vec![m.ir_per_req()],
        }))
        .collect();
    let series: Vec<String> = (1..=reps).map(|r| format!("repetition {r}")).collect();
    let series_refs: Vec<&str> = series.iter().map(String::as_str).collect();
    svg::bars(
        &ctx.plots_dir().join("instructions.svg"),
        "User-space instructions per request (callgrind, traffic threads)",
        "instructions per request",
        &series_refs,
        &groups,
    )?;
    eprintln!("{md}");
    Ok(())
}

/// Counts `loads(addr)` against a Portico on `tree` started under callgrind.
pub fn count_portico(
    ctx: &Ctx,
    tree: &Path,
    name: &str,
    plan: CgPlan,
    loads: impl Fn(SocketAddr) -> Vec<CgLoad>,
) -> anyhow::Result<Vec<CgMeasure>> {
    let out = ctx.subdir(&format!("cg-{name}"))?;
    let mut p = start_portico_with(ctx, "portico", tree, &[], &callgrind::launch(&out))?;
    let loads = loads(p.addr);
    callgrind::count(ctx, &mut p.proc, &out, &loads, plan)
}

/// Counts one GET of [`edge::PLAIN_PATH`] through a bare Pingora binary with `knobs`.
pub fn count_bare(
    ctx: &Ctx,
    name: &str,
    bin: &str,
    knobs: &[String],
    upstream: SocketAddr,
    plan: CgPlan,
) -> anyhow::Result<Vec<CgMeasure>> {
    let out = ctx.subdir(&format!("cg-{name}"))?;
    let mut p = start_bare_with(
        ctx,
        "bare-pingora",
        bin,
        upstream,
        knobs,
        &callgrind::launch(&out),
    )?;
    let loads = vec![CgLoad::get(
        "bare Pingora",
        format!("http://{}{}", p.addr, edge::PLAIN_PATH),
    )];
    callgrind::count(ctx, &mut p.proc, &out, &loads, plan)
}

fn count_nginx(
    ctx: &Ctx,
    rep: usize,
    upstream: SocketAddr,
    plan: CgPlan,
) -> anyhow::Result<Vec<CgMeasure>> {
    let out = ctx.subdir(&format!("cg-nginx-{rep}"))?;
    let mut p = start_nginx_with(
        ctx,
        &format!("nginx-cg-{rep}"),
        upstream,
        &callgrind::launch(&out),
    )?;
    let loads = vec![CgLoad::get(
        "nginx",
        format!("http://{}{}", p.addr, edge::PLAIN_PATH),
    )];
    callgrind::count(ctx, &mut p.proc, &out, &loads, plan)
}

/// The gRPC vs HTTP pair: answers and counts.
struct Pair {
    /// (GET answer, POST answer) of the transcoded calls, byte for byte what the HTTP
    /// backend answers too.
    get_bytes: usize,
    post_bytes: usize,
    http_sizes: (usize, usize),
    measures: Vec<CgMeasure>,
}

fn count_grpc_pair(ctx: &Ctx, plan: CgPlan) -> anyhow::Result<Pair> {
    eprintln!(" gRPC transcoded vs HTTP passthrough, same answer bytes");
    let backend = start_backend(ctx, "grpc-backend", true)?;
    let grpc_addr = backend
        .grpc
        .ok_or_else(|| anyhow::anyhow!("the demo backend did not report grpc="))?;
    let body = grpc::ORDER_BODY;

    // 1-2. What the transcoded calls answer, and an HTTP backend answering those bytes.
    let (get_answer, post_answer, fixed) = grpc::same_bytes_backend(ctx, grpc_addr, "instr-grpc")?;
    // 3. One Portico with both kinds of API, counted under callgrind.
    let dir = ctx.subdir("instr-grpc-tree")?;
    grpc::write_grpc_tree(&dir, grpc_addr, Some(fixed.addr))?;
    let http_sizes = {
        let p = start_portico(ctx, "portico-check", &dir, &[])?;
        (
            check_signed(p.addr, "GET", "/v1/http/orders/42", b"", "http get")?.len(),
            check_signed(
                p.addr,
                "POST",
                "/v1/http/orders",
                body.as_bytes(),
                "http post",
            )?
            .len(),
        )
    };
    let measures = count_portico(ctx, &dir, "portico-grpc", plan, |addr| {
        let u = |p: &str| format!("http://{addr}{p}");
        vec![
            CgLoad::get("GET, HTTP passthrough", u("/v1/http/orders/42")),
            CgLoad::get("GET, gRPC transcoded", u("/v1/orders/42")),
            CgLoad::post("POST, HTTP passthrough", u("/v1/http/orders"), body),
            CgLoad::post("POST, gRPC transcoded", u("/v1/orders"), body),
        ]
    })?;
    Ok(Pair {
        get_bytes: get_answer.len(),
        post_bytes: post_answer.len(),
        http_sizes,
        measures,
    })
}

fn pct_delta(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:+.1}%", (a / b - 1.0) * 100.0)
    } else {
        "–".into()
    }
}

fn top_table(costs: &[FnCost]) -> String {
    let rows: Vec<Vec<String>> = costs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            vec![
                (i + 1).to_string(),
                format!("{:.2}%", c.pct),
                format!("`{}`", callgrind::short_name(&c.name, 110)),
            ]
        })
        .collect();
    table(&["#", "share", "function"], &rows)
}

fn render(
    ctx: &Ctx,
    started_load: &str,
    plan: CgPlan,
    reps: usize,
    counted: &[&Counted],
    tops: &[Tops<'_>],
    pair: &Pair,
) -> String {
    let mut rows = Vec::new();
    for c in counted {
        let mut row = vec![c.name.to_owned()];
        row.push(format!("**{}**", f0(c.median_ir())));
        row.push(
            c.reps
                .iter()
                .map(|m| f0(m.ir_per_req()))
                .collect::<Vec<_>>()
                .join(" / "),
        );
        row.push(format!("{:.2}%", c.spread() * 100.0));
        row.push(f0(crate::report::median(
            &c.reps
                .iter()
                .map(CgMeasure::all_ir_per_req)
                .collect::<Vec<_>>(),
        )));
        row.push(f1(crate::report::median(
            &c.reps
                .iter()
                .map(CgMeasure::syscalls_per_req)
                .collect::<Vec<_>>(),
        )));
        row.push(f1(crate::report::median(
            &c.reps
                .iter()
                .map(CgMeasure::clock_reads_per_req)
                .collect::<Vec<_>>(),
        )));
        row.push(f0(crate::report::median(
            &c.reps
                .iter()
                .map(CgMeasure::background_ir_per_s)
                .collect::<Vec<_>>(),
        )));
        row.push(
            c.reps
                .iter()
                .map(|m| format!("{}/{} (non-2xx: {})", m.ok, m.calls, m.non_2xx))
                .collect::<Vec<_>>()
                .join(", "),
        );
        rows.push(row);
    }
    let main = table(
        &[
            "target",
            "instructions / request (median)",
            "per repetition",
            "spread",
            "all threads / request",
            "syscalls / request",
            "clock reads / request",
            "other threads: instructions / s",
            "2xx",
        ],
        &rows,
    );
    let (p, b, n) = (
        counted[0].median_ir(),
        counted[1].median_ir(),
        counted[2].median_ir(),
    );
    let headline = format!(
        "**Instructions per request: Portico {} vs bare Pingora {} vs nginx {}: Portico / bare Pingora {}, Portico / nginx {}, bare Pingora / nginx {}. Portico adds {} instructions per request to bare Pingora.**",
        f0(p),
        f0(b),
        f0(n),
        ratio(p / b),
        ratio(p / n),
        ratio(b / n),
        f0(p - b),
    );
    let mut tops_md = String::new();
    for (name, incl, selfc, crates, sys) in tops {
        let calls = counted[0].reps[0].calls.max(1) as f64;
        let sys_rows: Vec<Vec<String>> = sys
            .iter()
            .take(8)
            .map(|(f, n)| {
                vec![
                    format!("`{}`", callgrind::short_name(f, 60)),
                    format!("{:.2}", *n as f64 / calls),
                ]
            })
            .collect();
        let crate_rows: Vec<Vec<String>> = crates
            .iter()
            .take(12)
            .map(|(c, ir, pct)| {
                vec![
                    format!("`{c}`"),
                    format!("{pct:.1}%"),
                    f0(*ir as f64 / counted[0].reps[0].calls.max(1) as f64),
                ]
            })
            .collect();
        tops_md.push_str(&format!(
            "#### {name}: self cost by crate\n\n{}\n#### {name}: syscalls per request by libc wrapper (traffic thread)\n\n{}\n#### {name}: top {TOP} functions by inclusive cost (with callees)\n\n{}\n#### {name}: top {TOP} functions by self cost\n\n{}\n",
            table(&["crate", "share", "instructions / request"], &crate_rows),
            table(&["function", "syscalls / request"], &sys_rows),
            top_table(incl),
            top_table(selfc)
        ));
    }
    let mut prow = Vec::new();
    for m in &pair.measures {
        let bytes = if m.label.starts_with("GET") {
            pair.get_bytes
        } else {
            pair.post_bytes
        };
        prow.push(vec![
            m.label.clone(),
            bytes.to_string(),
            format!("**{}**", f0(m.ir_per_req())),
            f0(m.all_ir_per_req()),
            f1(m.syscalls_per_req()),
            f1(m.clock_reads_per_req()),
            format!("{}/{} (non-2xx: {})", m.ok, m.calls, m.non_2xx),
        ]);
    }
    let ir = |i: usize| pair.measures.get(i).map_or(f64::NAN, CgMeasure::ir_per_req);
    let all = |i: usize| {
        pair.measures
            .get(i)
            .map_or(f64::NAN, CgMeasure::all_ir_per_req)
    };
    let pair_md = format!(
        "**Transcoding costs {} instructions per call for GET and {} for POST (traffic threads; all threads: {} and {}); goal ≤ +15%.**\n\n{}",
        pct_delta(ir(1), ir(0)),
        pct_delta(ir(3), ir(2)),
        pct_delta(all(1), all(0)),
        pct_delta(all(3), all(2)),
        table(
            &[
                "call through Portico",
                "answer bytes",
                "instructions / request",
                "all threads / request",
                "syscalls / request",
                "clock reads / request",
                "2xx"
            ],
            &prow
        )
    );
    format!(
        "### Instructions per request (callgrind)\n\n_Generated by `ops/bench.sh instructions` ({}). Load average {started_load} at the start, {} at the end; instruction counts do not depend on it. {}._\n\nEach target runs under `valgrind --tool=callgrind` (instrumentation switched on after start-up); `portico-load --sync` sends {} signed warm-up requests on {} keep-alive connections, callgrind's counters are zeroed, exactly {} requests are sent on the same connections, and the counters are dumped before the connections close. Fresh processes for each of the {reps} repetitions. \"instructions / request\" counts the threads that serve traffic (Pingora's worker thread; nginx's only process); \"all threads\" adds Portico's control runtime (configuration polling every 250 ms, housekeeping every 5 s), whose work depends on wall-clock time, not on requests (shown per second of the window). User space only: callgrind does not see the kernel; syscalls are counted (\"syscalls\" excludes `clock_gettime`, which valgrind turns into a syscall but which is a vDSO call natively; those are \"clock reads\"). Same tree, request and backend as the edge suite.\n\n{headline}\n\n{main}\n{tops_md}\n#### Transcoded gRPC vs HTTP passthrough, same answer bytes\n\nOne Portico under callgrind with four APIs sharing one policy: `GET /v1/orders/42` → `OrderService/GetOrder` and `POST /v1/orders` → `OrderService/CreateOrder` (the demo backend's gRPC listener), and `GET /v1/http/orders/42`, `POST /v1/http/orders` proxied to an HTTP backend (nginx `return 200`) that answers **the very bytes the transcoded call answers** (captured from the gateway first: {} and {} bytes; the HTTP calls answered {} and {} bytes). Both POSTs send the same {}-byte JSON body. {} warm-up + {} counted requests each, one after the other in the same process.\n\n{pair_md}\n![instructions per request](plots/instructions.svg)\n",
        crate::now_rfc3339(),
        loadavg(),
        ctx.placement(),
        plan.warmup,
        plan.connections,
        plan.calls,
        pair.get_bytes,
        pair.post_bytes,
        pair.http_sizes.0,
        pair.http_sizes.1,
        grpc::ORDER_BODY.len(),
        plan.warmup,
        plan.calls,
    )
}
