//! `portico`: the command line for people and scripts. Signs and sends merchant calls, imports
//! and publishes APIs, flips switches, shows the gateways' status and exports the tree.

use base64::Engine as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use portico_control::sign::sign_request;
use portico_registry::client::{ClientError, RegistryClient};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Portico's command line: sign and send merchant calls, import and publish APIs, flip
/// degradation switches, show gateway status, export the configuration tree.
#[derive(Debug, Parser)]
#[command(name = "portico", version, propagate_version = true)]
struct Cli {
    /// The registry's base URL.
    #[arg(
        long,
        global = true,
        env = "PORTICO_REGISTRY",
        default_value = "http://127.0.0.1:9000"
    )]
    registry: String,
    /// The registry's admin token.
    #[arg(
        long,
        global = true,
        env = "PORTICO_ADMIN_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Who is making changes (recorded in the audit log and on switches); default $USER.
    #[arg(long, global = true, env = "PORTICO_OPERATOR")]
    operator: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the four signature headers for a request (DESIGN §3.1).
    Sign(SignArgs),
    /// Send a signed request and print the status and body.
    Call(CallArgs),
    /// Make draft APIs from a backend's interface (.proto files, a descriptor set, or reflection).
    #[command(subcommand)]
    Import(ImportCommand),
    /// Publish sandbox drafts to the live tree (validated; a new version each time).
    Publish(PublishArgs),
    /// Publish an earlier version of an API again.
    Rollback(RollbackArgs),
    /// List the published versions of an API.
    History(HistoryArgs),
    /// Turn an API's degradation switch on or off.
    Switch(SwitchArgs),
    /// Show the live gateway nodes, their applied config version and lag.
    Status,
    /// Write the configuration tree as a directory (usable with `portico-gateway --config-dir`).
    Export(ExportArgs),
    /// Call any registry route: `portico request GET /apps`.
    Request(RequestArgs),
}

#[derive(Debug, Args)]
struct Credentials {
    /// The app key.
    #[arg(long, env = "PORTICO_APP_KEY")]
    key: String,
    /// The app secret.
    #[arg(long, env = "PORTICO_APP_SECRET", hide_env_values = true)]
    secret: String,
}

#[derive(Debug, Args)]
struct BodyArgs {
    /// The request body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Read the request body from a file (`-` for stdin).
    #[arg(long)]
    body_file: Option<PathBuf>,
}

impl BodyArgs {
    fn bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.body, &self.body_file) {
            (Some(b), _) => Ok(b.as_bytes().to_vec()),
            (None, Some(p)) if p.as_os_str() == "-" => {
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
                    .map_err(|e| format!("reading stdin: {e}"))?;
                Ok(buf)
            }
            (None, Some(p)) => {
                std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))
            }
            (None, None) => Ok(Vec::new()),
        }
    }
}

#[derive(Debug, Args)]
struct SignArgs {
    #[command(flatten)]
    credentials: Credentials,
    #[command(flatten)]
    body: BodyArgs,
    /// The timestamp (Unix epoch milliseconds); default now.
    #[arg(long)]
    timestamp: Option<u64>,
    /// The nonce (8-64 of A-Z a-z 0-9 _ -); default random.
    #[arg(long)]
    nonce: Option<String>,
    /// Also print the string-to-sign (on stderr).
    #[arg(long, short)]
    verbose: bool,
    /// HTTP method, e.g. GET.
    method: String,
    /// The URL (`http://host:8080/v1/orders/42?x=1`) or just its path and query.
    url: String,
}

#[derive(Debug, Args)]
struct CallArgs {
    #[command(flatten)]
    credentials: Credentials,
    #[command(flatten)]
    body: BodyArgs,
    /// Extra header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Print the response headers too.
    #[arg(long, short)]
    include: bool,
    /// Exit with status 1 when the response status is 400 or above.
    #[arg(long)]
    fail: bool,
    /// Send without signing (for APIs with `auth: none`).
    #[arg(long)]
    unsigned: bool,
    /// HTTP method, e.g. POST.
    method: String,
    /// The full URL of the gateway route, e.g. http://127.0.0.1:8080/v1/orders/42.
    url: String,
}

#[derive(Debug, Args)]
struct DraftOptions {
    /// The cluster the drafts call.
    #[arg(long)]
    cluster: String,
    /// `signature` (default) or `none`.
    #[arg(long)]
    auth: Option<String>,
    /// Backend deadline of the drafts, in milliseconds.
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Only this service (full name; repeatable).
    #[arg(long = "service")]
    services: Vec<String>,
    /// Name an RPC's API: `pkg.Service/Method=api.id` (repeatable).
    #[arg(long = "id")]
    ids: Vec<String>,
    /// Publish every draft made, right after the import.
    #[arg(long)]
    publish: bool,
}

impl DraftOptions {
    fn json(&self) -> Result<serde_json::Map<String, Value>, String> {
        let mut m = serde_json::Map::new();
        m.insert("cluster".into(), json!(self.cluster));
        if let Some(a) = &self.auth {
            m.insert("auth".into(), json!(a));
        }
        if let Some(t) = self.timeout_ms {
            m.insert("timeout_ms".into(), json!(t));
        }
        if !self.services.is_empty() {
            m.insert("services".into(), json!(self.services));
        }
        let mut ids = BTreeMap::new();
        for pair in &self.ids {
            let (rpc, id) = pair
                .split_once('=')
                .ok_or_else(|| format!("--id {pair:?}: expected pkg.Service/Method=api.id"))?;
            ids.insert(rpc.to_owned(), id.to_owned());
        }
        if !ids.is_empty() {
            m.insert("ids".into(), json!(ids));
        }
        Ok(m)
    }
}

#[derive(Debug, Subcommand)]
enum ImportCommand {
    /// Compile .proto files in the registry (google/api annotations are provided).
    Proto {
        #[command(flatten)]
        options: DraftOptions,
        /// Import paths are the files' paths relative to this folder.
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// The .proto files (every file they import, except google/*, must be given too).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Upload an encoded FileDescriptorSet (e.g. from `protoc --include_imports -o set.pb`).
    DescriptorSet {
        #[command(flatten)]
        options: DraftOptions,
        file: PathBuf,
    },
    /// Load a whole §3.3 directory (a standalone config tree, an export) into the registry's
    /// tree, validated as a whole.
    Tree {
        /// The directory (apis/, clusters/, apps/, switches/, descriptors/, ipacl.json).
        dir: PathBuf,
        /// Into the sandbox tree instead of the live one.
        #[arg(long)]
        sandbox: bool,
    },
    /// Fetch the descriptors of a running gRPC backend by server reflection.
    Reflection {
        #[command(flatten)]
        options: DraftOptions,
        /// The backend's gRPC address, host:port.
        addr: String,
    },
}

#[derive(Debug, Args)]
struct PublishArgs {
    /// Draft API ids to publish.
    #[arg(required_unless_present = "all")]
    ids: Vec<String>,
    /// Publish every draft in the sandbox.
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    /// Publish only over this live version (its ETag), else fail with a conflict.
    #[arg(long)]
    if_match: Option<String>,
    /// A note kept in the audit log.
    #[arg(long)]
    comment: Option<String>,
}

#[derive(Debug, Args)]
struct RollbackArgs {
    /// The API id.
    id: String,
    /// The version to restore.
    #[arg(value_name = "VERSION")]
    to_version: u64,
    /// A note kept in the audit log.
    #[arg(long)]
    comment: Option<String>,
}

#[derive(Debug, Args)]
struct HistoryArgs {
    /// The API id.
    id: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Debug, Args)]
struct SwitchArgs {
    /// The API id.
    api: String,
    /// `on` degrades the API; `off` restores it.
    state: OnOff,
    /// Why (recorded on the switch and in the audit log). Required for `on`.
    #[arg(long)]
    reason: Option<String>,
    /// Answer degraded calls with this status instead of 503 API_DEGRADED.
    #[arg(long)]
    fallback_status: Option<u16>,
    /// The JSON body of the fallback answer.
    #[arg(long)]
    fallback_body: Option<String>,
    /// A header of the fallback answer, `Name: value` (repeatable).
    #[arg(long = "fallback-header")]
    fallback_headers: Vec<String>,
    /// Flip the sandbox switch instead of the live one.
    #[arg(long)]
    sandbox: bool,
}

#[derive(Debug, Args)]
struct ExportArgs {
    /// The directory to write (created if missing).
    dir: PathBuf,
    /// `live` (default) or `sandbox`.
    #[arg(long, default_value = "live")]
    env: String,
    /// Write into a directory that is not empty.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct RequestArgs {
    /// HTTP method.
    method: String,
    /// Path under /api/v1, e.g. /apps or /sandbox/apis/order.get.
    path: String,
    /// JSON body.
    #[arg(long, conflicts_with = "data_file")]
    data: Option<String>,
    /// Read the JSON body from a file.
    #[arg(long)]
    data_file: Option<PathBuf>,
    /// Extra header, `Name: value` (repeatable), e.g. `If-Match: "3"`.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn client(cli: &Cli) -> Result<RegistryClient, String> {
    let operator = cli
        .operator
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.is_empty());
    RegistryClient::new(&cli.registry, cli.token.clone(), operator).map_err(|e| e.to_string())
}

fn err(e: ClientError) -> String {
    e.0
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn parse_method(m: &str) -> Result<Method, String> {
    Method::from_bytes(m.to_ascii_uppercase().as_bytes())
        .map_err(|_| format!("{m:?} is not an HTTP method"))
}

fn parse_header(h: &str) -> Result<(String, String), String> {
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| format!("header {h:?}: expected `Name: value`"))?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

fn random_nonce() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = fastrand::u128(..).to_le_bytes()[..12]
            .try_into()
            .unwrap_or([7; 12]);
    }
    hex::encode(bytes)
}

/// The path and raw query of a URL (or of a bare `/path?query`), as a client will send them.
fn path_and_query(url: &str) -> Result<(String, Option<String>), String> {
    let full = if url.starts_with('/') {
        format!("http://localhost{url}")
    } else {
        url.to_owned()
    };
    let parsed = reqwest::Url::parse(&full).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    Ok((parsed.path().to_owned(), parsed.query().map(str::to_owned)))
}

async fn run(cli: Cli) -> Result<ExitCode, String> {
    match &cli.command {
        Command::Sign(args) => {
            let body = args.body.bytes()?;
            let (path, query) = path_and_query(&args.url)?;
            let nonce = args.nonce.clone().unwrap_or_else(random_nonce);
            if !portico_control::sign::valid_nonce(&nonce) {
                return Err(format!(
                    "--nonce {nonce:?}: must be 8-64 of A-Z a-z 0-9 _ -"
                ));
            }
            let signed = sign_request(
                args.credentials.secret.as_bytes(),
                &args.method.to_ascii_uppercase(),
                &path,
                query.as_deref(),
                &args.credentials.key,
                args.timestamp
                    .unwrap_or_else(portico_control::clock::now_ms),
                &nonce,
                &body,
            );
            if args.verbose {
                eprintln!("string-to-sign:\n{}\n", signed.string_to_sign);
            }
            for (name, value) in signed.pairs() {
                println!("{name}: {value}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Call(args) => call(args).await,
        Command::Import(cmd) => import(&cli, cmd).await,
        Command::Publish(args) => {
            let c = client(&cli)?;
            let ids = if args.all {
                let drafts = c.get("/sandbox/apis").await.map_err(err)?;
                drafts.body["items"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|i| i["id"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            } else {
                args.ids.clone()
            };
            if ids.is_empty() {
                return Err("no drafts to publish".to_owned());
            }
            let mut failed = false;
            for id in ids {
                let mut req = c
                    .request(Method::POST, &format!("/apis/{id}/publish"))
                    .json(&json!({"comment": args.comment}));
                if let Some(v) = &args.if_match {
                    req = req.header("If-Match", format!("\"{}\"", v.trim_matches('"')));
                }
                match c.send(req).await {
                    Ok(a) => println!("published {id} version {}", a.body["version"]),
                    Err(e) => {
                        eprintln!("error: publishing {id}: {e}");
                        failed = true;
                    }
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Rollback(args) => {
            let c = client(&cli)?;
            let a = c
                .post(
                    &format!("/apis/{}/rollback", args.id),
                    &json!({"version": args.to_version, "comment": args.comment}),
                )
                .await
                .map_err(err)?;
            println!(
                "rolled {} back to the content of version {}: now version {}",
                args.id, args.to_version, a.body["version"]
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::History(args) => {
            let c = client(&cli)?;
            let a = c
                .get(&format!("/apis/{}/history", args.id))
                .await
                .map_err(err)?;
            println!("{:<8} {:<26} LIVE", "VERSION", "PUBLISHED");
            for v in a.body["versions"].as_array().into_iter().flatten() {
                println!(
                    "{:<8} {:<26} {}",
                    v["version"],
                    v["published_at"].as_str().unwrap_or(""),
                    if v["live"] == true { "*" } else { "" }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Switch(args) => switch(&cli, args).await,
        Command::Status => status(&cli).await,
        Command::Export(args) => export(&cli, args).await,
        Command::Request(args) => {
            let c = client(&cli)?;
            let mut req = c.request(parse_method(&args.method)?, &args.path);
            let data = match (&args.data, &args.data_file) {
                (Some(d), _) => Some(d.clone()),
                (None, Some(f)) => Some(
                    std::fs::read_to_string(f)
                        .map_err(|e| format!("reading {}: {e}", f.display()))?,
                ),
                _ => None,
            };
            if let Some(d) = data {
                let v: Value =
                    serde_json::from_str(&d).map_err(|e| format!("--data is not JSON: {e}"))?;
                req = req.json(&v);
            }
            for h in &args.headers {
                let (n, v) = parse_header(h)?;
                req = req.header(n, v);
            }
            let a = c.send_raw(req).await.map_err(err)?;
            if !a.status.is_success() {
                return Err(portico_registry::client::describe_error(&a));
            }
            if let Some(etag) = &a.etag {
                eprintln!("ETag: \"{etag}\"");
            }
            if a.body.is_null() {
                std::io::stdout()
                    .write_all(&a.bytes)
                    .map_err(|e| e.to_string())?;
            } else {
                print_json(&a.body);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn call(args: &CallArgs) -> Result<ExitCode, String> {
    let method = parse_method(&args.method)?;
    let body = args.body.bytes()?;
    let url = reqwest::Url::parse(&args.url).map_err(|e| {
        format!(
            "{:?} is not a URL: {e} (give the full gateway URL)",
            args.url
        )
    })?;
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| e.to_string())?;
    let mut req = http.request(method.clone(), url.clone());
    if !args.unsigned {
        let signed = sign_request(
            args.credentials.secret.as_bytes(),
            method.as_str(),
            url.path(),
            url.query(),
            &args.credentials.key,
            portico_control::clock::now_ms(),
            &random_nonce(),
            &body,
        );
        for (name, value) in signed.pairs() {
            req = req.header(name, value);
        }
    }
    if !body.is_empty() {
        let looks_json = body.first().is_some_and(|b| *b == b'{' || *b == b'[');
        if looks_json
            && !args
                .headers
                .iter()
                .any(|h| h.to_ascii_lowercase().starts_with("content-type"))
        {
            req = req.header("Content-Type", "application/json");
        }
        req = req.body(body);
    }
    for h in &args.headers {
        let (n, v) = parse_header(h)?;
        req = req.header(n, v);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    let status = resp.status();
    println!("HTTP {status}");
    if args.include {
        for (name, value) in resp.headers() {
            println!("{name}: {}", value.to_str().unwrap_or("<binary>"));
        }
        println!();
    }
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    let mut out = std::io::stdout();
    out.write_all(&bytes).map_err(|e| e.to_string())?;
    if !bytes.ends_with(b"\n") {
        let _ = out.write_all(b"\n");
    }
    Ok(if args.fail && status.as_u16() >= 400 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn import(cli: &Cli, cmd: &ImportCommand) -> Result<ExitCode, String> {
    let c = client(cli)?;
    if let ImportCommand::Tree { dir, sandbox } = cmd {
        let files = read_tree_files(dir)?;
        if files.is_empty() {
            return Err(format!("{}: no documents found", dir.display()));
        }
        let env = if *sandbox { "sandbox" } else { "live" };
        let a = c
            .post(&format!("/import?env={env}"), &json!({ "files": files }))
            .await
            .map_err(err)?;
        let n = a.body["imported"].as_array().map_or(0, Vec::len);
        println!("imported {n} documents into the {env} tree");
        return Ok(ExitCode::SUCCESS);
    }
    let (answer, options) = match cmd {
        ImportCommand::Proto {
            options,
            root,
            files,
        } => {
            let mut sources = BTreeMap::new();
            for file in files {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| format!("reading {}: {e}", file.display()))?;
                sources.insert(import_path(root, file)?, text);
            }
            let mut body = options.json()?;
            body.insert("files".into(), json!(sources));
            (
                c.post("/protos", &Value::Object(body)).await.map_err(err)?,
                options,
            )
        }
        ImportCommand::DescriptorSet { options, file } => {
            let bytes =
                std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
            let mut body = options.json()?;
            body.insert(
                "descriptor_set".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
            );
            (
                c.post("/descriptors", &Value::Object(body))
                    .await
                    .map_err(err)?,
                options,
            )
        }
        ImportCommand::Reflection { options, addr } => {
            let mut body = options.json()?;
            body.insert("addr".into(), json!(addr));
            (
                c.post("/reflection", &Value::Object(body))
                    .await
                    .map_err(err)?,
                options,
            )
        }
        ImportCommand::Tree { .. } => return Err("unreachable: handled above".into()),
    };
    let b = &answer.body;
    println!(
        "descriptor {} ({} bytes)",
        b["descriptor"].as_str().unwrap_or("?"),
        b["descriptor_bytes"]
    );
    let mut ids = Vec::new();
    for d in b["drafts"].as_array().into_iter().flatten() {
        let id = d["id"].as_str().unwrap_or("?");
        ids.push(id.to_owned());
        println!(
            "  draft {:<28} {:<6} {:<40} {} ({})",
            id,
            d["http"]["method"].as_str().unwrap_or(""),
            d["http"]["path"].as_str().unwrap_or(""),
            d["rpc"].as_str().unwrap_or(""),
            if d["created"] == true {
                "new"
            } else {
                "updated"
            }
        );
    }
    for s in b["skipped"].as_array().into_iter().flatten() {
        println!(
            "  skipped {}: {}",
            s["method"].as_str().unwrap_or(""),
            s["reason"].as_str().unwrap_or("")
        );
    }
    for p in b["problems"].as_array().into_iter().flatten() {
        println!(
            "  problem {}: {}",
            p["path"].as_str().unwrap_or(""),
            p["reason"].as_str().unwrap_or("")
        );
    }
    if !options.publish {
        return Ok(ExitCode::SUCCESS);
    }
    let mut failed = false;
    for id in ids {
        match c.post(&format!("/apis/{id}/publish"), &json!({})).await {
            Ok(a) => println!("published {id} version {}", a.body["version"]),
            Err(e) => {
                eprintln!("error: publishing {id}: {e}");
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The import path of `file` relative to `root` (with `/` separators).
fn import_path(root: &Path, file: &Path) -> Result<String, String> {
    let root_abs =
        std::fs::canonicalize(root).map_err(|e| format!("--root {}: {e}", root.display()))?;
    let file_abs = std::fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let rel = file_abs.strip_prefix(&root_abs).map_err(|_| {
        format!(
            "{} is not under --root {} (import paths are relative to it)",
            file.display(),
            root.display()
        )
    })?;
    Ok(rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/"))
}

async fn switch(cli: &Cli, args: &SwitchArgs) -> Result<ExitCode, String> {
    let c = client(cli)?;
    let degraded = matches!(args.state, OnOff::On);
    if degraded && args.reason.is_none() {
        return Err("--reason is required to turn a switch on".to_owned());
    }
    let mut doc = json!({"degraded": degraded});
    if let Some(r) = &args.reason {
        doc["reason"] = json!(r);
    }
    if args.fallback_status.is_some()
        || args.fallback_body.is_some()
        || !args.fallback_headers.is_empty()
    {
        let body: Value = match &args.fallback_body {
            Some(b) => {
                serde_json::from_str(b).map_err(|e| format!("--fallback-body is not JSON: {e}"))?
            }
            None => Value::Null,
        };
        let mut headers = serde_json::Map::new();
        for h in &args.fallback_headers {
            let (n, v) = parse_header(h)?;
            headers.insert(n, json!(v));
        }
        doc["fallback"] = json!({
            "status": args.fallback_status.unwrap_or(200),
            "headers": headers,
            "body": body,
        });
    }
    let prefix = if args.sandbox { "/sandbox" } else { "" };
    let a = c
        .put(&format!("{prefix}/switches/{}", args.api), &doc)
        .await
        .map_err(err)?;
    println!(
        "switch {} {} (by {} at {})",
        args.api,
        if degraded { "ON: degraded" } else { "OFF" },
        a.body["updated_by"].as_str().unwrap_or("?"),
        a.body["updated_at"].as_str().unwrap_or("?")
    );
    Ok(ExitCode::SUCCESS)
}

async fn status(cli: &Cli) -> Result<ExitCode, String> {
    let c = client(cli)?;
    let health = c
        .send_raw(c.request(Method::GET, "/health"))
        .await
        .map_err(err)?;
    println!(
        "registry {}: {} (ZooKeeper {})",
        c.base(),
        health.body["status"].as_str().unwrap_or("?"),
        health.body["zookeeper"].as_str().unwrap_or("?")
    );
    let a = c.get("/nodes").await.map_err(err)?;
    println!(
        "live tree: generation {} digest {}",
        a.body["generation"],
        a.body["digest"].as_str().unwrap_or("")
    );
    let nodes = a.body["nodes"].as_array().cloned().unwrap_or_default();
    if nodes.is_empty() {
        println!("no gateway nodes registered");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<20} {:<22} {:<22} {:>12} {:<17} {:<8} {:>10} {:>12}",
        "NODE", "ADDR", "ADMIN", "GENERATION", "DIGEST", "IN SYNC", "LAG(ZXID)", "UPDATED"
    );
    let mut behind = false;
    for n in &nodes {
        if n["in_sync"] != true {
            behind = true;
        }
        let updated = n["updated_ms_ago"]
            .as_i64()
            .map(|ms| format!("{:.1}s ago", ms as f64 / 1000.0))
            .unwrap_or_default();
        println!(
            "{:<20} {:<22} {:<22} {:>12} {:<17} {:<8} {:>10} {:>12}",
            n["node_id"].as_str().unwrap_or("?"),
            n["addr"].as_str().unwrap_or(""),
            n["admin_addr"].as_str().unwrap_or(""),
            n["config_version"]["generation"],
            n["config_version"]["digest"].as_str().unwrap_or(""),
            if n["in_sync"] == true { "yes" } else { "NO" },
            n["lag_zxid"],
            updated
        );
    }
    if behind {
        println!("some nodes have not applied the latest configuration");
    }
    Ok(ExitCode::SUCCESS)
}

/// The documents of a §3.3 directory, in the export's shape (file path → content).
fn read_tree_files(dir: &Path) -> Result<BTreeMap<String, Value>, String> {
    let mut files = BTreeMap::new();
    let ipacl = dir.join("ipacl.json");
    if ipacl.is_file() {
        let text =
            std::fs::read_to_string(&ipacl).map_err(|e| format!("{}: {e}", ipacl.display()))?;
        files.insert(
            "ipacl.json".to_owned(),
            json!({"encoding": "utf-8", "content": text}),
        );
    }
    for (kind, ext) in [
        ("apis", "json"),
        ("clusters", "json"),
        ("apps", "json"),
        ("switches", "json"),
        ("descriptors", "pb"),
    ] {
        let folder = dir.join(kind);
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry
                .map_err(|e| format!("{}: {e}", folder.display()))?
                .path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.starts_with('.') || !name.ends_with(&format!(".{ext}")) {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let entry = if ext == "pb" {
                json!({"encoding": "base64", "content": base64::engine::general_purpose::STANDARD.encode(bytes)})
            } else {
                let text = String::from_utf8(bytes)
                    .map_err(|_| format!("{}: not UTF-8", path.display()))?;
                json!({"encoding": "utf-8", "content": text})
            };
            files.insert(format!("{kind}/{name}"), entry);
        }
    }
    Ok(files)
}

async fn export(cli: &Cli, args: &ExportArgs) -> Result<ExitCode, String> {
    let c = client(cli)?;
    if args.dir.exists() {
        let non_empty = std::fs::read_dir(&args.dir)
            .map_err(|e| format!("{}: {e}", args.dir.display()))?
            .next()
            .is_some();
        if non_empty && !args.force {
            return Err(format!(
                "{} is not empty (use --force to write into it)",
                args.dir.display()
            ));
        }
    }
    let a = c
        .get(&format!("/export?env={}", args.env))
        .await
        .map_err(err)?;
    let files = a.body["files"]
        .as_object()
        .ok_or("the registry's export has no files map")?;
    let mut written = 0;
    for (path, entry) in files {
        if path.split('/').any(|s| s == ".." || s.is_empty()) {
            return Err(format!("refusing the export path {path:?}"));
        }
        let content = entry["content"].as_str().unwrap_or("");
        let bytes = match entry["encoding"].as_str() {
            Some("base64") => base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|e| format!("{path}: bad base64: {e}"))?,
            _ => content.as_bytes().to_vec(),
        };
        let target = args.dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&target, bytes).map_err(|e| format!("{}: {e}", target.display()))?;
        written += 1;
    }
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    println!(
        "wrote {written} files of the {} tree (generation {}) to {}",
        a.body["env"].as_str().unwrap_or("live"),
        a.body["generation"],
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn urls_split_as_sent() {
        assert_eq!(
            path_and_query("http://h:8080/v1/orders/42?b=2&a=1").unwrap(),
            ("/v1/orders/42".to_owned(), Some("b=2&a=1".to_owned()))
        );
        assert_eq!(
            path_and_query("/v1/orders").unwrap(),
            ("/v1/orders".to_owned(), None)
        );
    }
}
