//! The nginx + Lua peer (benches/peers/nginx-lua/): nginx with `libnginx-mod-http-lua` doing
//! per request the work of Portico's signed edge, the way an nginx + Lua gateway would.
//!
//! - [`lua_config`] turns a Portico configuration tree (the directory the harness gives
//!   Portico: `apps/`, `apis/`, `clusters/`, `ipacl.json`) into the peer's Lua table, so both
//!   targets serve the very same apps, secrets, grants, APIs, rate limits and IP lists;
//! - [`start_nginx_lua`] writes the nginx configuration from the template and the Lua
//!   modules (built into this binary) and starts one nginx process, like the `proxy_pass`
//!   peer;
//! - [`verify`] is the honesty check run before every measurement and by
//!   `portico-bench peer-check`: the two signature vectors of docs/PROTOCOL.md ("Worked
//!   example 1" and "2") are accepted, and a bad signature, a replay, a stale timestamp, an
//!   unknown app, a disabled app and an API the app is not granted are refused.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::procs::{free_port, http_exchange, wait_http, Launch, Spawn};
use crate::services::Proxy;
use crate::Ctx;

const TEMPLATE: &str = include_str!("../../peers/nginx-lua/nginx.conf.template");
const LUA_MODULES: [(&str, &str); 2] = [
    (
        "portico_peer.lua",
        include_str!("../../peers/nginx-lua/lua/portico_peer.lua"),
    ),
    (
        "portico_peer_crypto.lua",
        include_str!("../../peers/nginx-lua/lua/portico_peer_crypto.lua"),
    ),
];

/// Where Debian's `libnginx-mod-http-lua` (and the NDK it needs) put their modules.
const MODULES_DIR: &str = "/usr/lib/nginx/modules";

/// The replay window of docs/PROTOCOL.md ("Signing a request"), in milliseconds.
const WINDOW_MS: u64 = 300_000;

/// The replay cache's size: ≈ 4 M nonces (≈ 128 bytes each), far above what an edge run
/// records in 300 s at this machine's rates; when full it refuses, never forgets early.
const NONCES_SIZE: &str = "512m";

/// How the peer is configured beyond the tree.
#[derive(Debug, Clone, Copy)]
pub struct PeerOpts {
    /// Check the timestamp window (the benchmark); `false` only for the check-only instance
    /// that replays the documented vectors, whose timestamp is fixed in the past.
    pub window: bool,
}

/// Whether the nginx Lua module is installed (`./ops/bench.sh` installs it).
pub fn available() -> bool {
    Path::new(MODULES_DIR)
        .join("ngx_http_lua_module.so")
        .is_file()
        && Path::new(MODULES_DIR).join("ndk_http_module.so").is_file()
}

/// The soname of libcrypto the peer's FFI loads (the one nginx itself links).
pub fn libcrypto_soname() -> String {
    let listed = std::process::Command::new("/sbin/ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("libcrypto.so."))
        .collect();
    names.sort_unstable();
    if names.contains(&"libcrypto.so.3") {
        return "libcrypto.so.3".into();
    }
    names
        .last()
        .map(|s| (*s).to_owned())
        .unwrap_or_else(|| "libcrypto.so.3".into())
}

// ---- configuration: the Portico tree as a Lua table --------------------------------------

/// A Lua string literal of `s` (any bytes).
fn lua_str(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for &b in s {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03}");
            }
        }
    }
    out.push('"');
    out
}

fn read_docs(dir: &Path) -> anyhow::Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for p in entries {
        if p.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let stem = p
            .file_stem()
            .and_then(|s| s.to_str())
            .context("file name")?
            .to_owned();
        let doc: Value = serde_json::from_slice(&std::fs::read(&p)?)
            .with_context(|| format!("parsing {}", p.display()))?;
        out.push((stem, doc));
    }
    Ok(out)
}

/// `per` of a rate limit, in seconds.
fn per_seconds(v: &Value) -> anyhow::Result<u64> {
    match v.as_str() {
        Some("second") => Ok(1),
        Some("minute") => Ok(60),
        other => bail!("unsupported rate-limit period {other:?}"),
    }
}

/// A rate-limit rule as a Lua table: `{key = {...}, limit = N, per = S}`.
fn lua_rule(rule: &Value, default_key: &str) -> anyhow::Result<String> {
    let parts: Vec<String> = match rule.get("key") {
        None => vec![default_key.to_owned()],
        Some(Value::String(k)) => vec![k.clone()],
        Some(Value::Array(ks)) => ks
            .iter()
            .map(|k| k.as_str().map(str::to_owned).context("rate-limit key part"))
            .collect::<anyhow::Result<_>>()?,
        Some(other) => bail!("unsupported rate-limit key {other}"),
    };
    if rule.get("scope").and_then(Value::as_str) == Some("cluster") {
        bail!("cluster-scope rate limits are not in the peer");
    }
    let mut keys = Vec::new();
    for p in &parts {
        let lua_key = match p.as_str() {
            "app" | "ip" | "api" => p.clone(),
            h if h.starts_with("header:") => h["header:".len()..].to_ascii_lowercase(),
            other => bail!("unsupported rate-limit key part {other:?}"),
        };
        keys.push(lua_str(lua_key.as_bytes()));
    }
    let limit = rule
        .get("limit")
        .and_then(Value::as_u64)
        .context("rate-limit limit")?;
    let per = per_seconds(rule.get("per").unwrap_or(&Value::Null))?;
    Ok(format!(
        "{{key = {{{}}}, limit = {limit}, per = {per}}}",
        keys.join(", ")
    ))
}

/// A CIDR as an inclusive range of 128-bit numbers (IPv4 as itself, IPv6 as itself) and
/// its family.
fn cidr(text: &str) -> anyhow::Result<(bool, u128, u128)> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u32>().context("prefix length")?)),
        None => (text, None),
    };
    let ip: IpAddr = addr
        .parse()
        .with_context(|| format!("address in {text:?}"))?;
    let (v4, bits, value) = match ip {
        IpAddr::V4(a) => (true, 32u32, u128::from(u32::from(a))),
        IpAddr::V6(a) => (false, 128u32, u128::from(a)),
    };
    let len = len.unwrap_or(bits);
    if len > bits {
        bail!("prefix length of {text:?}");
    }
    let host_bits = bits - len;
    let host_mask: u128 = if host_bits == 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    Ok((v4, value & !host_mask, (value & !host_mask) | host_mask))
}

/// Sorted, merged ranges of `list` (IPv6 rules' IPv4-mapped part also counted as IPv4, as
/// Portico's `ip_acl` does): (v4 ranges, v6 ranges).
type Ranges = (Vec<(u128, u128)>, Vec<(u128, u128)>);

fn ranges(list: &[Value]) -> anyhow::Result<Ranges> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    const MAPPED_LO: u128 = 0xffff_0000_0000;
    const MAPPED_HI: u128 = 0xffff_ffff_ffff;
    for item in list {
        let (is_v4, lo, hi) = cidr(item.as_str().context("an IP list entry")?)?;
        if is_v4 {
            v4.push((lo, hi));
        } else {
            v6.push((lo, hi));
            let (a, b) = (lo.max(MAPPED_LO), hi.min(MAPPED_HI));
            if a <= b {
                v4.push((a & 0xffff_ffff, b & 0xffff_ffff));
            }
        }
    }
    Ok((merge(v4), merge(v6)))
}

fn merge(mut v: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    v.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::new();
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn lua_v4(r: &[(u128, u128)]) -> String {
    let items: Vec<String> = r.iter().map(|(a, b)| format!("{{{a}, {b}}}")).collect();
    format!("{{{}}}", items.join(", "))
}

fn lua_v6(r: &[(u128, u128)]) -> String {
    let items: Vec<String> = r
        .iter()
        .map(|(a, b)| {
            format!(
                "{{{}, {}}}",
                lua_str(&a.to_be_bytes()),
                lua_str(&b.to_be_bytes())
            )
        })
        .collect();
    format!("{{{}}}", items.join(", "))
}

/// The nginx `upstream` name of cluster `name`.
fn upstream_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("portico_cluster_{clean}")
}

/// The peer's configuration from the Portico tree `tree`: (the Lua module
/// `portico_peer_config.lua`, the nginx `upstream` blocks).
pub fn lua_config(
    tree: &Path,
    opts: PeerOpts,
    libcrypto: &str,
) -> anyhow::Result<(String, String)> {
    let mut lua = String::from(
        "-- Generated by portico-bench (benches/src/bench/lua_peer.rs) from a Portico configuration tree.\nreturn {\n",
    );
    let _ = writeln!(lua, "  libcrypto = {},", lua_str(libcrypto.as_bytes()));
    if opts.window {
        let _ = writeln!(lua, "  window_ms = {WINDOW_MS},");
    } else {
        lua.push_str(
            "  window_ms = false, -- check-only: the documented vectors' fixed timestamp\n",
        );
    }

    let acl: Value = match std::fs::read(tree.join("ipacl.json")) {
        Ok(b) => serde_json::from_slice(&b).context("parsing ipacl.json")?,
        Err(_) => Value::Null,
    };
    let list = |k: &str| {
        acl.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    if !list("trusted_proxies").is_empty() {
        bail!("ipacl.trusted_proxies is not in the peer");
    }
    let (deny4, deny6) = ranges(&list("deny"))?;
    let (allow4, allow6) = ranges(&list("allow"))?;
    let _ = writeln!(lua, "  deny4 = {},", lua_v4(&deny4));
    let _ = writeln!(lua, "  deny6 = {},", lua_v6(&deny6));
    let _ = writeln!(lua, "  allow4 = {},", lua_v4(&allow4));
    let _ = writeln!(lua, "  allow6 = {},", lua_v6(&allow6));

    lua.push_str("  apps = {\n");
    for (key, app) in read_docs(&tree.join("apps"))? {
        let secret = app
            .get("secret")
            .and_then(Value::as_str)
            .with_context(|| format!("apps/{key}: secret"))?;
        let status = app
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("active");
        let apis: Vec<String> = app
            .get("apis")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|s| lua_str(s.as_bytes()))
                    .collect()
            })
            .unwrap_or_default();
        let limits: Vec<String> = app
            .get("rate_limits")
            .and_then(Value::as_array)
            .map(|rs| rs.iter().map(|r| lua_rule(r, "app")).collect())
            .transpose()?
            .unwrap_or_default();
        let _ = writeln!(
            lua,
            "    [{}] = {{secret = {}, status = {}, apis = {{{}}}, limits = {{{}}}}},",
            lua_str(key.as_bytes()),
            lua_str(secret.as_bytes()),
            lua_str(status.as_bytes()),
            apis.join(", "),
            limits.join(", ")
        );
    }
    lua.push_str("  },\n  routes = {\n");
    for (stem, api) in read_docs(&tree.join("apis"))? {
        let id = api.get("id").and_then(Value::as_str).unwrap_or(&stem);
        let http = api
            .get("http")
            .with_context(|| format!("apis/{stem}: http"))?;
        let method = http.get("method").and_then(Value::as_str).unwrap_or("*");
        let path = http
            .get("path")
            .and_then(Value::as_str)
            .with_context(|| format!("apis/{stem}: http.path"))?;
        let backend = api
            .get("backend")
            .with_context(|| format!("apis/{stem}: backend"))?;
        if backend.get("grpc").is_some() {
            bail!("apis/{stem}: gRPC-backed APIs are not in the peer");
        }
        if api.get("auth").and_then(Value::as_str) != Some("signature") {
            bail!("apis/{stem}: only signed APIs are in the peer");
        }
        let cluster = backend
            .get("cluster")
            .and_then(Value::as_str)
            .with_context(|| format!("apis/{stem}: backend.cluster"))?;
        let rewrite = backend
            .get("http")
            .and_then(|h| h.get("path"))
            .and_then(Value::as_str)
            .map(|p| lua_str(p.as_bytes()))
            .unwrap_or_else(|| "nil".into());
        let limits: Vec<String> = api
            .get("policy")
            .and_then(|p| p.get("rate_limits"))
            .and_then(Value::as_array)
            .map(|rs| rs.iter().map(|r| lua_rule(r, "api")).collect())
            .transpose()?
            .unwrap_or_default();
        let _ = writeln!(
            lua,
            "    {{id = {}, method = {}, path = {}, upstream = {}, rewrite = {rewrite}, limits = {{{}}}}},",
            lua_str(id.as_bytes()),
            lua_str(method.to_ascii_uppercase().as_bytes()),
            lua_str(path.as_bytes()),
            lua_str(upstream_name(cluster).as_bytes()),
            limits.join(", ")
        );
    }
    lua.push_str("  },\n}\n");

    let mut upstreams = String::new();
    for (name, cluster) in read_docs(&tree.join("clusters"))? {
        if cluster.get("protocol").and_then(Value::as_str) != Some("http") {
            continue;
        }
        let _ = writeln!(upstreams, "    upstream {} {{", upstream_name(&name));
        for ep in cluster
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let addr = ep
                .get("addr")
                .and_then(Value::as_str)
                .with_context(|| format!("clusters/{name}: endpoint addr"))?;
            let weight = ep.get("weight").and_then(Value::as_u64).unwrap_or(1).max(1);
            let _ = writeln!(upstreams, "        server {addr} weight={weight};");
        }
        upstreams.push_str("        keepalive 64;\n        keepalive_requests 1000000;\n    }\n");
    }
    Ok((lua, upstreams))
}

// ---- the process ----------------------------------------------------------------------------

/// nginx + Lua (one process, `master_process off`, pinned like the other proxies) serving
/// the Portico tree `tree`; its files in `<tmp>/<name>`.
pub fn start_nginx_lua(
    ctx: &Ctx,
    name: &str,
    tree: &Path,
    opts: PeerOpts,
) -> anyhow::Result<Proxy> {
    start_nginx_lua_with(ctx, name, tree, opts, "")
}

/// [`start_nginx_lua`] with `server_extra` (more directives of its `server` block: the TLS
/// suite's `listen ... ssl` and certificate) after its plain listener.
pub fn start_nginx_lua_with(
    ctx: &Ctx,
    name: &str,
    tree: &Path,
    opts: PeerOpts,
    server_extra: &str,
) -> anyhow::Result<Proxy> {
    if !available() {
        bail!(
            "the nginx Lua module is not installed ({MODULES_DIR}/ngx_http_lua_module.so): apt-get install libnginx-mod-http-lua (./ops/bench.sh does)"
        );
    }
    let dir = ctx.tmp.join(name);
    std::fs::create_dir_all(&dir)?;
    let (lua, upstreams) = lua_config(tree, opts, &libcrypto_soname())?;
    std::fs::write(dir.join("portico_peer_config.lua"), lua)?;
    for (file, text) in LUA_MODULES {
        std::fs::write(dir.join(file), text)?;
    }
    let port = free_port()?;
    let conf = TEMPLATE
        .replace("{{MODULES}}", MODULES_DIR)
        .replace("{{DIR}}", &dir.display().to_string())
        .replace("{{NONCES_SIZE}}", NONCES_SIZE)
        .replace("{{UPSTREAMS}}", &upstreams)
        .replace("{{PORT}}", &port.to_string())
        .replace("{{SERVER_EXTRA}}", server_extra);
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let nginx = ctx.nginx.clone();
    let launch = Launch::default();
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
        launch: &launch,
    }
    .start()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    wait_http(&mut proc, addr, "/health", 200, launch.ready_timeout).with_context(|| {
        format!(
            "{name}: error.log: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        )
    })?;
    Ok(Proxy { proc, addr })
}

// ---- the check ------------------------------------------------------------------------------

/// The app of docs/PROTOCOL.md's worked examples.
pub const VECTOR_APP: &str = "merchant-1";
pub const VECTOR_SECRET: &str = "s3cr3t-value";
pub const VECTOR_TIMESTAMP: u64 = 1_796_000_000_000;

/// One documented vector: (method, request target, body, nonce, signature).
pub const VECTORS: [(&str, &str, &str, &str, &str); 2] = [
    (
        "GET",
        "/v1/orders/42?b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93",
        "",
        "n0nce-0001",
        "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73",
    ),
    (
        "POST",
        "/v1/orders",
        r#"{"item":"book","qty":2}"#,
        "n0nce-0002",
        "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107",
    ),
];

/// Adds the vectors' app and APIs (`GET /v1/orders/{order_id}` → `/orders/{order_id}`, `POST
/// /v1/orders` → `/orders`, on `cluster`) to the tree `root`, for the check-only instance.
pub fn write_vector_docs(root: &Path, cluster: &str) -> anyhow::Result<()> {
    use serde_json::json;
    crate::trees::write_doc(
        root,
        &format!("apps/{VECTOR_APP}.json"),
        &json!({
            "secret": VECTOR_SECRET,
            "status": "active",
            "apis": ["order.get", "order.create"],
            "rate_limits": [{ "limit": 1000, "per": "second" }]
        }),
    )?;
    crate::trees::write_http_api(
        root,
        "order.get",
        "GET",
        "/v1/orders/{order_id}",
        cluster,
        "/orders/{order_id}",
        1000,
        json!({}),
    )?;
    crate::trees::write_http_api(
        root,
        "order.create",
        "POST",
        "/v1/orders",
        cluster,
        "/orders",
        1000,
        json!({}),
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Signature headers for `(method, target, body)` signed by `key`/`secret`, at `ts_ms`.
fn signed(
    key: &str,
    secret: &str,
    method: &str,
    target: &str,
    body: &[u8],
    ts_ms: u64,
    nonce: &str,
) -> Vec<(String, String)> {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    portico_control::sign::sign_request(
        secret.as_bytes(),
        method,
        path,
        query,
        key,
        ts_ms,
        nonce,
        body,
    )
    .pairs()
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

/// Sends one request and fails unless it answers `want` with the envelope code `code`
/// (`None`: any 2xx); returns a line saying what was checked.
#[allow(clippy::too_many_arguments)]
fn expect(
    addr: SocketAddr,
    what: &str,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
    want: u16,
    code: Option<&str>,
) -> anyhow::Result<String> {
    let (status, _, text) = http_exchange(addr, method, target, headers, body)?;
    let ok = match code {
        None => (200..300).contains(&status),
        Some(c) => status == want && text.contains(&format!("\"code\":\"{c}\"")),
    };
    if !ok {
        bail!(
            "peer check failed: {what}: {method} {target} answered {status} {}, expected {want} {}",
            text.trim(),
            code.unwrap_or("(2xx)")
        );
    }
    Ok(format!(
        "{what}: {status}{}",
        code.map(|c| format!(" {c}")).unwrap_or_default()
    ))
}

/// The honesty check (see the module documentation). `bench` is the instance that is
/// measured (the edge tree, window on); `vectors` is the check-only instance (the same tree
/// plus the vectors' app and APIs, window off). Returns what was verified, one line each.
pub fn verify(bench: SocketAddr, vectors: SocketAddr) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let nonce = |tag: &str| format!("{tag}{:016x}", fastrand::u64(..));
    let (k0, s0) = (crate::runner::app_key(0), crate::runner::app_secret(0));
    let get = crate::edge::GATEWAY_PATH;

    // The documented vectors, on the check-only instance: the headers carry exactly the
    // documented timestamp, nonce and signature, so the peer's string-to-sign (canonical
    // query, body digest) and HMAC must equal docs/PROTOCOL.md's to be let through.
    for (i, (method, target, body, nonce_v, sig)) in VECTORS.iter().enumerate() {
        let headers = vec![
            ("X-Portico-AppKey".to_owned(), VECTOR_APP.to_owned()),
            (
                "X-Portico-Timestamp".to_owned(),
                VECTOR_TIMESTAMP.to_string(),
            ),
            ("X-Portico-Nonce".to_owned(), (*nonce_v).to_owned()),
            ("X-Portico-Signature".to_owned(), (*sig).to_owned()),
        ];
        // Our own signer agrees with the document, so the vector is what we think it is.
        let ours = signed(
            VECTOR_APP,
            VECTOR_SECRET,
            method,
            target,
            body.as_bytes(),
            VECTOR_TIMESTAMP,
            nonce_v,
        );
        if ours[3].1 != *sig {
            bail!(
                "peer check: worked example {} does not match portico_control::sign",
                i + 1
            );
        }
        done.push(expect(
            vectors,
            &format!("worked example {} accepted (window off)", i + 1),
            method,
            target,
            &headers,
            body.as_bytes(),
            200,
            None,
        )?);
        let mut bad = headers.clone();
        bad[3].1 = format!("{}0", &sig[..63]);
        done.push(expect(
            vectors,
            &format!(
                "worked example {} with its last hex digit changed refused",
                i + 1
            ),
            method,
            target,
            &bad,
            body.as_bytes(),
            401,
            Some("SIGNATURE_INVALID"),
        )?);
    }

    // The measured instance, fresh timestamps.
    let n = nonce("chk");
    let ok = signed(&k0, &s0, "GET", get, b"", now_ms(), &n);
    done.push(expect(
        bench,
        "fresh signed call accepted",
        "GET",
        get,
        &ok,
        b"",
        200,
        None,
    )?);
    done.push(expect(
        bench,
        "the same call again (replay) refused",
        "GET",
        get,
        &ok,
        b"",
        401,
        Some("NONCE_REPLAYED"),
    )?);
    let mut bad = signed(&k0, &s0, "GET", get, b"", now_ms(), &nonce("bad"));
    let last = bad[3].1.pop().unwrap_or('0');
    bad[3].1.push(if last == '0' { '1' } else { '0' });
    done.push(expect(
        bench,
        "bad signature refused",
        "GET",
        get,
        &bad,
        b"",
        401,
        Some("SIGNATURE_INVALID"),
    )?);
    let wrong_key = signed(
        &k0,
        "not-the-secret",
        "GET",
        get,
        b"",
        now_ms(),
        &nonce("wk"),
    );
    done.push(expect(
        bench,
        "signed with another secret refused",
        "GET",
        get,
        &wrong_key,
        b"",
        401,
        Some("SIGNATURE_INVALID"),
    )?);
    let stale_ts = now_ms() - WINDOW_MS - 5_000;
    let stale = signed(&k0, &s0, "GET", get, b"", stale_ts, &nonce("old"));
    done.push(expect(
        bench,
        "stale timestamp (305 s old) refused",
        "GET",
        get,
        &stale,
        b"",
        401,
        Some("SIGNATURE_EXPIRED"),
    )?);
    let future = signed(
        &k0,
        &s0,
        "GET",
        get,
        b"",
        now_ms() + WINDOW_MS + 5_000,
        &nonce("new"),
    );
    done.push(expect(
        bench,
        "timestamp 305 s ahead refused",
        "GET",
        get,
        &future,
        b"",
        401,
        Some("SIGNATURE_EXPIRED"),
    )?);
    let unknown = signed("no-such-app", &s0, "GET", get, b"", now_ms(), &nonce("unk"));
    done.push(expect(
        bench,
        "unknown app refused",
        "GET",
        get,
        &unknown,
        b"",
        401,
        Some("SIGNATURE_INVALID"),
    )?);
    let missing: Vec<(String, String)> = ok[..3].to_vec();
    done.push(expect(
        bench,
        "no signature header refused",
        "GET",
        get,
        &missing,
        b"",
        401,
        Some("SIGNATURE_MISSING"),
    )?);
    // merchant-003 is disabled in the common tree (trees::write_common).
    let disabled = signed(
        "merchant-003",
        "secret-of-merchant-003",
        "GET",
        get,
        b"",
        now_ms(),
        &nonce("dis"),
    );
    done.push(expect(
        bench,
        "disabled app refused",
        "GET",
        get,
        &disabled,
        b"",
        403,
        Some("APP_DISABLED"),
    )?);
    // merchant-001 is granted bench.order.get and filler.1.get, not filler.0.get.
    let filler0 = "/v1/svc0/items/7";
    let forbidden = signed(
        "merchant-001",
        "secret-of-merchant-001",
        "GET",
        filler0,
        b"",
        now_ms(),
        &nonce("fbd"),
    );
    done.push(expect(
        bench,
        "API not granted to the app refused",
        "GET",
        filler0,
        &forbidden,
        b"",
        403,
        Some("APP_FORBIDDEN"),
    )?);
    Ok(done)
}

/// Starts the measured and the check-only instances on the edge tree `tree` (the same one
/// Portico gets) and runs [`verify`]. Returns the measured instance (still running).
pub fn start_checked(
    ctx: &Ctx,
    tree: &Path,
    cluster: &str,
) -> anyhow::Result<(Proxy, Vec<String>)> {
    start_checked_with(ctx, tree, cluster, "")
}

/// [`start_checked`] with `server_extra` in the measured instance's `server` block (see
/// [`start_nginx_lua_with`]); the check runs on its plain listener.
pub fn start_checked_with(
    ctx: &Ctx,
    tree: &Path,
    cluster: &str,
    server_extra: &str,
) -> anyhow::Result<(Proxy, Vec<String>)> {
    let peer = start_nginx_lua_with(
        ctx,
        "nginx-lua",
        tree,
        PeerOpts { window: true },
        server_extra,
    )?;
    let check_tree = ctx.subdir("nginx-lua-check-tree")?;
    copy_tree(tree, &check_tree)?;
    write_vector_docs(&check_tree, cluster)?;
    let check = start_nginx_lua(
        ctx,
        "nginx-lua-check",
        &check_tree,
        PeerOpts { window: false },
    )?;
    let lines = verify(peer.addr, check.addr)?;
    drop(check);
    Ok((peer, lines))
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// `portico-bench peer-check`: the demo backend, the edge suite's tree, both peer
/// instances, the check.
pub fn run_check(ctx: &Ctx) -> anyhow::Result<()> {
    eprintln!("== peer-check: the nginx + Lua peer against docs/PROTOCOL.md");
    let backend = crate::services::start_backend(ctx, "backend", false)?;
    let dir = ctx.subdir("edge-tree")?;
    crate::edge::write_tree(&dir, backend.http, crate::edge::FILLERS)?;
    let (_peer, lines) = start_checked(ctx, &dir, "bench-http")?;
    for l in &lines {
        eprintln!("  ok  {l}");
    }
    eprintln!("peer-check: {} checks passed", lines.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_and_ranges() {
        assert_eq!(
            cidr("10.0.0.0/8").unwrap(),
            (true, 0x0a00_0000, 0x0aff_ffff)
        );
        assert_eq!(cidr("127.0.0.1").unwrap(), (true, 0x7f00_0001, 0x7f00_0001));
        let (v4, v6) = ranges(&[
            Value::from("10.0.0.0/9"),
            Value::from("10.128.0.0/9"),
            Value::from("::ffff:192.168.0.0/112"),
            Value::from("2001:db8::/48"),
        ])
        .unwrap();
        assert_eq!(
            v4,
            vec![(0x0a00_0000, 0x0aff_ffff), (0xc0a8_0000, 0xc0a8_ffff)]
        );
        assert_eq!(v6.len(), 2);
        assert_eq!(lua_str(b"a\"\\\n\xff"), r#""a\"\\\010\255""#);
    }

    /// The vectors the check replays are docs/PROTOCOL.md's (and our signer's).
    #[test]
    fn vectors_are_the_documented_ones() {
        let doc = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/PROTOCOL.md"),
        )
        .unwrap();
        assert!(doc.contains(&format!(
            "App key `{VECTOR_APP}`, secret `{VECTOR_SECRET}`, timestamp `{VECTOR_TIMESTAMP}`"
        )));
        for (method, target, body, nonce, sig) in VECTORS {
            assert!(doc.contains(&format!("{method} {target}")), "{target}");
            assert!(doc.contains(&format!("`{nonce}`")), "{nonce}");
            assert!(doc.contains(sig), "{sig}");
            if !body.is_empty() {
                assert!(doc.contains(body), "{body}");
            }
            let ours = signed(
                VECTOR_APP,
                VECTOR_SECRET,
                method,
                target,
                body.as_bytes(),
                VECTOR_TIMESTAMP,
                nonce,
            );
            assert_eq!(ours[3].1, sig);
        }
    }

    /// The peer on the edge tree, in front of a fixed-answer nginx, passes the check (needs
    /// Debian's nginx and libnginx-mod-http-lua; skipped, saying so, when they are missing).
    #[test]
    fn peer_passes_the_check() {
        let Some(nginx) = ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
        else {
            eprintln!("skipped: nginx is not installed");
            return;
        };
        if !available() {
            eprintln!("skipped: libnginx-mod-http-lua is not installed (./ops/bench.sh peer-check installs it)");
            return;
        }
        let guard = TempDir::new();
        let tmp = guard.0.clone();
        let ctx = Ctx {
            bin_dir: tmp.clone(),
            nginx,
            tmp: tmp.clone(),
            load_cpu: None,
            proxy_cpu: None,
            backend_cpu: None,
            backend_threads: 1,
            proxy_threads: 1,
            nice: 0,
            connections: 1,
            duration_s: 1.0,
            warmup_s: 0.0,
            rounds: 1,
            results: tmp.join("RESULTS.md"),
        };
        let backend = crate::services::start_nginx_fixed(
            &ctx,
            "backend",
            &[
                ("/orders/42", r#"{"order_id":"42"}"#),
                ("/orders", r#"{"order_id":"1"}"#),
            ],
        )
        .unwrap();
        let dir = ctx.subdir("edge-tree").unwrap();
        crate::edge::write_tree(&dir, backend.addr, 20).unwrap();
        let (_peer, lines) = start_checked(&ctx, &dir, "bench-http").unwrap();
        for want in [
            "worked example 1 accepted",
            "worked example 2 accepted",
            "bad signature refused: 401 SIGNATURE_INVALID",
            "(replay) refused: 401 NONCE_REPLAYED",
            "stale timestamp (305 s old) refused: 401 SIGNATURE_EXPIRED",
            "unknown app refused: 401 SIGNATURE_INVALID",
        ] {
            assert!(lines.iter().any(|l| l.contains(want)), "{want}: {lines:?}");
        }
    }

    /// A temporary directory removed when dropped (also when the test fails).
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let d = std::env::temp_dir().join(format!(
                "portico-bench-peer-test-{}-{:x}",
                std::process::id(),
                fastrand::u64(..)
            ));
            std::fs::create_dir_all(&d).unwrap();
            TempDir(d)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
