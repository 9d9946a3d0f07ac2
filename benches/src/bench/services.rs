//! The processes under test: the demo backend, nginx, the bare Pingora proxy and Portico.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::procs::{free_port, wait_http, wait_line, wait_tcp, Launch, Proc, Spawn};
use crate::Ctx;

/// A running demo backend.
pub struct Backend {
    pub proc: Proc,
    pub http: SocketAddr,
    pub grpc: Option<SocketAddr>,
}

/// A running proxy (or gateway) and where it listens.
pub struct Proxy {
    pub proc: Proc,
    pub addr: SocketAddr,
}

fn parse_ready(line: &str) -> Option<portico_testkit::procs::Ready> {
    portico_testkit::procs::parse_ready_line(line)
}

/// `portico-demo-backend --http 127.0.0.1:0 [--grpc 127.0.0.1:0]`, pinned to the backend CPU,
/// with `ctx.backend_threads` tokio workers.
pub fn start_backend(ctx: &Ctx, name: &str, grpc: bool) -> anyhow::Result<Backend> {
    let mut args = vec!["--http".to_owned(), "127.0.0.1:0".to_owned()];
    if grpc {
        args.push("--grpc".to_owned());
        args.push("127.0.0.1:0".to_owned());
    }
    let bin = ctx.bin("portico-demo-backend");
    let (proc, stdout) = Spawn {
        name,
        program: &bin,
        args,
        env: vec![("TOKIO_WORKER_THREADS", ctx.backend_threads.to_string())],
        cpu: ctx.backend_cpu.as_deref(),
        nice: ctx.nice,
        log_dir: &ctx.tmp,
        pipe_stdout: true,
        launch: &Launch::default(),
    }
    .start()?;
    let stdout = stdout.context("backend stdout")?;
    let ready = wait_line(stdout, Duration::from_secs(30), parse_ready)
        .with_context(|| format!("{name}: {}", proc.stderr_tail()))?;
    Ok(Backend {
        proc,
        http: ready.http.context("backend did not report http=")?,
        grpc: ready.grpc,
    })
}

/// nginx (Debian nginx-light), one process (`master_process off`), `proxy_pass` to an
/// upstream block with `keepalive 64`, HTTP/1.1 upstream, access log off.
pub fn start_nginx(ctx: &Ctx, upstream: SocketAddr) -> anyhow::Result<Proxy> {
    start_nginx_with(ctx, "nginx", upstream, &Launch::default())
}

/// [`start_nginx`] named `name` (its files in `<tmp>/<name>`), launched as `launch` says.
pub fn start_nginx_with(
    ctx: &Ctx,
    name: &str,
    upstream: SocketAddr,
    launch: &Launch,
) -> anyhow::Result<Proxy> {
    let location = r#"location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }"#;
    let upstream_block = format!(
        r#"upstream backend {{
        server {upstream};
        keepalive 64;
        keepalive_requests 1000000;
    }}"#
    );
    run_nginx(ctx, name, &upstream_block, location, launch, "/health")
}

/// nginx as a fixed-answer HTTP backend: `answers` maps an exact path to the JSON bytes it
/// answers (`return 200`, any method; a request body is read and dropped).
pub fn start_nginx_fixed(ctx: &Ctx, name: &str, answers: &[(&str, &str)]) -> anyhow::Result<Proxy> {
    let mut locations = String::new();
    for (path, body) in answers {
        let escaped = body.replace('\\', "\\\\").replace('\'', "\\'");
        locations.push_str(&format!(
            "location = {path} {{\n            default_type application/json;\n            return 200 '{escaped}';\n        }}\n        "
        ));
    }
    locations.push_str("location = /health {\n            return 200 'ok';\n        }");
    let launch = Launch::default();
    let mut proxy = run_nginx(ctx, name, "", &locations, &launch, "/health")?;
    proxy.proc.name = name.to_owned();
    Ok(proxy)
}

/// One nginx process named `name` (its files in `<tmp>/<name>`): `upstream_block` in
/// `http`, `locations` (and any other server directives: the TLS suite's `listen ... ssl`)
/// in the one `server` listening on a free port, ready once `GET ready_path` on that port
/// answers 200.
pub fn run_nginx(
    ctx: &Ctx,
    name: &str,
    upstream_block: &str,
    locations: &str,
    launch: &Launch,
    ready_path: &str,
) -> anyhow::Result<Proxy> {
    let dir = ctx.tmp.join(name);
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let d = dir.display();
    let rlimit = launch
        .nofile
        .map(|n| format!("worker_rlimit_nofile {n};\n"))
        .unwrap_or_default();
    let connections = launch.nofile.unwrap_or(4096);
    let conf = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
{rlimit}pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections {connections};
}}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    {upstream_block}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        {locations}
    }}
}}
"#
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let nginx = ctx.nginx.clone();
    let (mut proc, _) = Spawn {
        name,
        program: &nginx,
        args: vec![
            "-p".into(),
            dir.display().to_string(),
            "-e".into(),
            dir.join("error.log").display().to_string(),
            "-c".into(),
            conf_path.display().to_string(),
        ],
        env: vec![],
        cpu: ctx.proxy_cpu.as_deref(),
        nice: ctx.nice,
        log_dir: &ctx.tmp,
        pipe_stdout: false,
        launch,
    }
    .start()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    wait_http(&mut proc, addr, ready_path, 200, launch.ready_timeout)?;
    Ok(Proxy { proc, addr })
}

/// `bare-pingora-proxy --threads 1` in front of `upstream`.
pub fn start_bare(ctx: &Ctx, upstream: SocketAddr) -> anyhow::Result<Proxy> {
    start_bare_with(
        ctx,
        "bare-pingora",
        "bare-pingora-proxy",
        upstream,
        &[],
        &Launch::default(),
    )
}

/// A bare Pingora proxy binary `bin` (`bare-pingora-proxy[-system|-jemalloc]`) with the
/// knob flags `knobs`, named `name`, launched as `launch` says. `--threads` comes from the
/// context unless `knobs` sets it.
pub fn start_bare_with(
    ctx: &Ctx,
    name: &str,
    bin: &str,
    upstream: SocketAddr,
    knobs: &[String],
    launch: &Launch,
) -> anyhow::Result<Proxy> {
    let port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let bin = ctx.bin(bin);
    let mut args = vec![
        "--listen".into(),
        addr.to_string(),
        "--upstream".into(),
        upstream.to_string(),
    ];
    if !knobs.iter().any(|k| k == "--threads") {
        args.extend(["--threads".into(), ctx.proxy_threads.to_string()]);
    }
    args.extend_from_slice(knobs);
    let (mut proc, _) = Spawn {
        name,
        program: &bin,
        args,
        env: vec![],
        cpu: ctx.proxy_cpu.as_deref(),
        nice: ctx.nice,
        log_dir: &ctx.tmp,
        pipe_stdout: false,
        launch,
    }
    .start()?;
    wait_http(&mut proc, addr, "/health", 200, launch.ready_timeout)?;
    Ok(Proxy { proc, addr })
}

/// `portico-gateway --config-dir DIR --threads 1 --access-log off` (plus `extra` arguments),
/// ready once `/readyz` answers 200.
pub fn start_portico(
    ctx: &Ctx,
    name: &str,
    config_dir: &Path,
    extra: &[String],
) -> anyhow::Result<Proxy> {
    start_portico_with(ctx, name, config_dir, extra, &Launch::default())
}

/// [`start_portico`] launched as `launch` says.
pub fn start_portico_with(
    ctx: &Ctx,
    name: &str,
    config_dir: &Path,
    extra: &[String],
    launch: &Launch,
) -> anyhow::Result<Proxy> {
    let mut args = vec!["--config-dir".to_owned(), config_dir.display().to_string()];
    args.extend_from_slice(extra);
    start_gateway_with(ctx, name, &args, ctx.proxy_cpu.as_deref(), launch)
}

/// `portico-gateway <source_and_extra> --listen .. --admin-listen .. --threads 1
/// --access-log off --node-id NAME`, pinned to `cpu` if given, ready once `/readyz` answers
/// 200.
pub fn start_gateway(
    ctx: &Ctx,
    name: &str,
    source_and_extra: &[String],
    cpu: Option<&str>,
) -> anyhow::Result<Proxy> {
    start_gateway_with(ctx, name, source_and_extra, cpu, &Launch::default())
}

fn start_gateway_with(
    ctx: &Ctx,
    name: &str,
    source_and_extra: &[String],
    cpu: Option<&str>,
    launch: &Launch,
) -> anyhow::Result<Proxy> {
    let port = free_port()?;
    let admin_port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse()?;
    let mut args = source_and_extra.to_vec();
    args.extend([
        "--listen".into(),
        addr.to_string(),
        "--admin-listen".into(),
        admin.to_string(),
        "--threads".into(),
        ctx.proxy_threads.to_string(),
        "--access-log".into(),
        "off".into(),
        "--node-id".into(),
        name.to_owned(),
    ]);
    // The internal listener's default is a fixed port (127.0.0.1:9181): off unless asked.
    if !args.iter().any(|a| a == "--internal-listen") {
        args.extend(["--internal-listen".into(), "off".into()]);
    }
    let bin = ctx.bin("portico-gateway");
    let (mut proc, _) = Spawn {
        name,
        program: &bin,
        args,
        env: vec![("RUST_LOG", "warn".to_owned())],
        cpu,
        nice: ctx.nice,
        log_dir: &ctx.tmp,
        pipe_stdout: false,
        launch,
    }
    .start()?;
    wait_http(&mut proc, admin, "/readyz", 200, launch.ready_timeout)?;
    // /readyz can answer a fraction of a millisecond before the traffic listener is bound.
    wait_tcp(&mut proc, addr, launch.ready_timeout)?;
    Ok(Proxy { proc, addr })
}

/// Sends one signed request and fails unless it answers 2xx (the set-up check before load).
pub fn check_signed(
    addr: SocketAddr,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    what: &str,
) -> anyhow::Result<String> {
    check_signed_head(addr, method, path_and_query, body, what).map(|(_, body)| body)
}

/// As [`check_signed`], with the response head too: (head, body).
pub fn check_signed_head(
    addr: SocketAddr,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    what: &str,
) -> anyhow::Result<(String, String)> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let nonce = format!("check{:016x}", fastrand::u64(..));
    let signed = portico_control::sign::sign_request(
        crate::runner::app_secret(0).as_bytes(),
        method,
        path,
        query,
        &crate::runner::app_key(0),
        now_ms,
        &nonce,
        body,
    );
    let headers: Vec<(String, String)> = signed
        .pairs()
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let (status, head, text) =
        crate::procs::http_exchange(addr, method, path_and_query, &headers, body)?;
    if !(200..300).contains(&status) {
        anyhow::bail!("{what}: {method} {path_and_query} answered {status}: {text}");
    }
    Ok((head, text))
}
