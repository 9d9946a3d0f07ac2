//! What the command line says: the commands and their arguments (clap), and reading them
//! (bodies, draft options, methods, headers, the registry to talk to).

use clap::{Args, Parser, Subcommand, ValueEnum};
use portico_registry::client::RegistryClient;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Portico's command line: sign and send merchant calls, import and publish APIs, flip
/// degradation switches, show gateway status, export the configuration tree.
#[derive(Debug, Parser)]
#[command(name = "portico", version, propagate_version = true)]
pub(crate) struct Cli {
    /// The registry's base URL.
    #[arg(
        long,
        global = true,
        env = "PORTICO_REGISTRY",
        default_value = "http://127.0.0.1:9000"
    )]
    pub(crate) registry: String,
    /// The registry's admin token.
    #[arg(
        long,
        global = true,
        env = "PORTICO_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
    /// A file holding the registry's admin token (first line), read when no --token /
    /// PORTICO_ADMIN_TOKEN is given (`.run/env` of ops/up.sh names it).
    #[arg(long, global = true, env = "PORTICO_ADMIN_TOKEN_FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// Who is making changes (recorded in the audit log and on switches); default $USER.
    #[arg(long, global = true, env = "PORTICO_OPERATOR")]
    pub(crate) operator: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the four signature headers for a request (docs/PROTOCOL.md).
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
    /// Move a cluster's traffic to its primary or standby set (docs/operations/clusters.md, "Failover
    /// runbook").
    Failover(FailoverArgs),
    /// Show the live gateway nodes, their applied config version and lag.
    Status,
    /// The daily or weekly report per API (docs/operations/history-and-reports.md, "Reports"), from the registry's
    /// history store.
    Report(ReportArgs),
    /// Write the configuration tree as a directory (usable with `portico-gateway --config-dir`).
    Export(ExportArgs),
    /// Call any registry route: `portico request GET /apps`.
    Request(RequestArgs),
    /// Publish a notification on a gateway's internal listener (docs/operations/notifications.md,
    /// "Notifications"), as a backend would; prints `app<TAB>event id` per app.
    Notify(NotifyArgs),
    /// Talk to ZooKeeper directly (credentials and ACLs, docs/OPERATIONS.md).
    #[command(subcommand)]
    Zk(ZkCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ZkCommand {
    /// Lock a tree down: create the locked root and folders, and set the ACL of every node
    /// (registry cdrwa, gateway r + its nodes/ entry, operator rw on switches/, no world
    /// access). Idempotent. Credentials are read from files (`user:password`, mode 0600),
    /// never given on the command line. Repeat a role's flag to list an old and a new password
    /// while rotating it.
    Lockdown(LockdownArgs),
}

#[derive(Debug, Args)]
pub(crate) struct LockdownArgs {
    /// ZooKeeper connect string (`host:port[,host:port...]`).
    #[arg(long, env = "PORTICO_ZK")]
    pub(crate) zk: String,
    /// Root of the tree.
    #[arg(long, default_value = "/portico")]
    pub(crate) root: String,
    /// The registry's credentials file (`portico-registry:PASSWORD`); lockdown authenticates
    /// with it. Repeat during a rotation.
    #[arg(long, required = true)]
    pub(crate) registry_auth_file: Vec<PathBuf>,
    /// The gateways' credentials file (`portico-gateway:PASSWORD`). Repeat during a rotation.
    #[arg(long, required = true)]
    pub(crate) gateway_auth_file: Vec<PathBuf>,
    /// The operators' credentials file (`portico-operator:PASSWORD`). Repeat during a rotation.
    #[arg(long, required = true)]
    pub(crate) operator_auth_file: Vec<PathBuf>,
    /// Print what would change; change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// The rolling 24 hours (day) or 7 days (week) up to now.
    #[arg(long, value_enum, default_value = "day")]
    pub(crate) period: ReportPeriod,
    /// Only this API.
    #[arg(long)]
    pub(crate) api: Option<String>,
    /// text (a table), json or html (the page owners are mailed).
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: ReportFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ReportPeriod {
    Day,
    Week,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReportFormat {
    Text,
    Json,
    Html,
}

#[derive(Debug, Args)]
pub(crate) struct Credentials {
    /// The app key.
    #[arg(long, env = "PORTICO_APP_KEY")]
    pub(crate) key: String,
    /// The app secret.
    #[arg(long, env = "PORTICO_APP_SECRET", hide_env_values = true)]
    pub(crate) secret: String,
}

#[derive(Debug, Args)]
pub(crate) struct BodyArgs {
    /// The request body.
    #[arg(long, conflicts_with = "body_file")]
    pub(crate) body: Option<String>,
    /// Read the request body from a file (`-` for stdin).
    #[arg(long)]
    pub(crate) body_file: Option<PathBuf>,
}

impl BodyArgs {
    pub(crate) fn bytes(&self) -> Result<Vec<u8>, String> {
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
pub(crate) struct SignArgs {
    #[command(flatten)]
    pub(crate) credentials: Credentials,
    #[command(flatten)]
    pub(crate) body: BodyArgs,
    /// The timestamp (Unix epoch milliseconds); default now.
    #[arg(long)]
    pub(crate) timestamp: Option<u64>,
    /// The nonce (8-64 of A-Z a-z 0-9 _ -); default random.
    #[arg(long)]
    pub(crate) nonce: Option<String>,
    /// Also print the string-to-sign (on stderr).
    #[arg(long, short)]
    pub(crate) verbose: bool,
    /// HTTP method, e.g. GET.
    pub(crate) method: String,
    /// The URL (`http://host:8080/v1/orders/42?x=1`) or just its path and query.
    pub(crate) url: String,
}

#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    pub(crate) credentials: Credentials,
    #[command(flatten)]
    pub(crate) body: BodyArgs,
    /// Extra header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    pub(crate) headers: Vec<String>,
    /// Print the response headers too.
    #[arg(long, short)]
    pub(crate) include: bool,
    /// Exit with status 1 when the response status is 400 or above.
    #[arg(long)]
    pub(crate) fail: bool,
    /// Send without signing (for APIs with `auth: none`).
    #[arg(long)]
    pub(crate) unsigned: bool,
    /// HTTP method, e.g. POST.
    pub(crate) method: String,
    /// The full URL of the gateway route, e.g. http://127.0.0.1:8080/v1/orders/42.
    pub(crate) url: String,
}

#[derive(Debug, Args)]
pub(crate) struct DraftOptions {
    /// The cluster the drafts call.
    #[arg(long)]
    pub(crate) cluster: String,
    /// `signature` (default) or `none`.
    #[arg(long)]
    pub(crate) auth: Option<String>,
    /// Backend deadline of the drafts, in milliseconds.
    #[arg(long)]
    pub(crate) timeout_ms: Option<u64>,
    /// Only this service (full name; repeatable).
    #[arg(long = "service")]
    pub(crate) services: Vec<String>,
    /// Name an RPC's API: `pkg.Service/Method=api.id` (repeatable).
    #[arg(long = "id")]
    pub(crate) ids: Vec<String>,
    /// Publish every draft made, right after the import.
    #[arg(long, conflicts_with = "dry_run")]
    pub(crate) publish: bool,
    /// Preview only: print each draft as new, changed or unchanged and the routes other APIs
    /// own, and write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Replace drafts that exist and would change (without it such an import is refused,
    /// 409 WOULD_OVERWRITE, listing them: preview with --dry-run first).
    #[arg(long)]
    pub(crate) overwrite: bool,
}

impl DraftOptions {
    pub(crate) fn json(&self) -> Result<serde_json::Map<String, Value>, String> {
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
        if self.dry_run {
            m.insert("dry_run".into(), json!(true));
        }
        if self.overwrite {
            m.insert("overwrite".into(), json!(true));
        }
        Ok(m)
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
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
    /// Load a whole tree directory (docs/OPERATIONS.md: a standalone config tree, an export)
    /// into the registry's tree, validated as a whole: descriptors, clusters, the IP ACL,
    /// apps, topics, APIs, switches and alert rules.
    Tree {
        /// The directory: every kind a tree holds (descriptors/*.pb, clusters/, apps/,
        /// topics/, apis/, switches/, alerts/ as *.json, and ipacl.json).
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
pub(crate) struct PublishArgs {
    /// Draft API ids to publish.
    #[arg(required_unless_present = "all")]
    pub(crate) ids: Vec<String>,
    /// Publish every draft in the sandbox.
    #[arg(long, conflicts_with = "ids")]
    pub(crate) all: bool,
    /// Publish only over this live version (its ETag), else fail with a conflict.
    #[arg(long)]
    pub(crate) if_match: Option<String>,
    /// A note kept in the audit log.
    #[arg(long)]
    pub(crate) comment: Option<String>,
    /// Then wait until every live gateway applied the change, at most SECS seconds (10
    /// without a value); exit status 3 naming the gateways that have not (docs/operations/registry.md,
    /// "Waiting for the gateways").
    #[arg(long, value_name = "SECS", num_args = 0..=1, require_equals = true, default_missing_value = "10")]
    pub(crate) wait: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct RollbackArgs {
    /// The API id.
    pub(crate) id: String,
    /// The version to restore.
    #[arg(value_name = "VERSION")]
    pub(crate) to_version: u64,
    /// A note kept in the audit log.
    #[arg(long)]
    pub(crate) comment: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// The API id.
    pub(crate) id: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum OnOff {
    On,
    Off,
}

#[derive(Debug, Args)]
pub(crate) struct NotifyArgs {
    /// The gateway's internal listener.
    #[arg(
        long,
        env = "PORTICO_INTERNAL",
        default_value = "http://127.0.0.1:9181"
    )]
    pub(crate) gateway: String,
    /// The app to notify; without it, every app granted the topic.
    #[arg(long)]
    pub(crate) app: Option<String>,
    /// The topic (`topics/<name>`).
    #[arg(long)]
    pub(crate) topic: String,
    /// The payload, JSON.
    #[arg(long)]
    pub(crate) payload: String,
    /// Your own id of the event (delivered as `key`).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Drop the event if undelivered after this many seconds.
    #[arg(long)]
    pub(crate) ttl_s: Option<u64>,
    /// The publisher token (`Authorization: Bearer`).
    #[arg(long, env = "PORTICO_PUBLISH_TOKEN", hide_env_values = true)]
    pub(crate) publish_token: Option<String>,
    /// A file holding the publisher token (first line), read when no --publish-token /
    /// PORTICO_PUBLISH_TOKEN is given (`.run/env` of ops/up.sh names it).
    #[arg(long, env = "PORTICO_PUBLISH_TOKEN_FILE")]
    pub(crate) publish_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct SwitchArgs {
    /// The API id, or `<api_id>@<label>` for a key-level switch (with `--match`).
    pub(crate) api: String,
    /// `on` degrades the API; `off` restores it.
    pub(crate) state: OnOff,
    /// Why (recorded on the switch and in the audit log; never shown to merchants).
    /// Required for `on`.
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// What merchants read in the 503 API_DEGRADED answer (at most 200 characters;
    /// default "the API is temporarily unavailable").
    #[arg(long)]
    pub(crate) message: Option<String>,
    /// Answer degraded calls with this status instead of 503 API_DEGRADED.
    #[arg(long)]
    pub(crate) fallback_status: Option<u16>,
    /// The JSON body of the fallback answer.
    #[arg(long)]
    pub(crate) fallback_body: Option<String>,
    /// A header of the fallback answer, `Name: value` (repeatable).
    #[arg(long = "fallback-header")]
    pub(crate) fallback_headers: Vec<String>,
    /// Flip the sandbox switch instead of the live one.
    #[arg(long)]
    pub(crate) sandbox: bool,
    /// A key-level switch's match, `<selector>=<value>[,<value>...]` (repeatable; all must
    /// match): `--match path:sku=BK-1`, `--match header:X-Region=north`.
    #[arg(long = "match")]
    pub(crate) matches: Vec<String>,
    /// Then wait until every live gateway applied the change, at most SECS seconds (10
    /// without a value); exit status 3 naming the gateways that have not (docs/operations/registry.md,
    /// "Waiting for the gateways").
    #[arg(long, conflicts_with = "sandbox", value_name = "SECS", num_args = 0..=1, require_equals = true, default_missing_value = "10")]
    pub(crate) wait: Option<u64>,
}

/// A cluster's endpoint set.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum SetName {
    Primary,
    Standby,
}

impl SetName {
    /// The name in documents and requests.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SetName::Primary => "primary",
            SetName::Standby => "standby",
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct FailoverArgs {
    /// The cluster.
    pub(crate) cluster: String,
    /// The set that should serve.
    pub(crate) to: SetName,
    /// Why (required; recorded in the audit log).
    #[arg(long)]
    pub(crate) reason: String,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The directory to write (created if missing).
    pub(crate) dir: PathBuf,
    /// `live` (default) or `sandbox`.
    #[arg(long, default_value = "live")]
    pub(crate) env: String,
    /// Write into a directory that is not empty.
    #[arg(long)]
    pub(crate) force: bool,
    /// Include the apps' secrets (audited); without it each secret is `<redacted>` and the
    /// directory cannot serve signed traffic.
    #[arg(long)]
    pub(crate) include_secrets: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RequestArgs {
    /// HTTP method.
    pub(crate) method: String,
    /// Path under /api/v1, e.g. /apps or /sandbox/apis/order.get.
    pub(crate) path: String,
    /// JSON body.
    #[arg(long, conflicts_with = "data_file")]
    pub(crate) data: Option<String>,
    /// Read the JSON body from a file.
    #[arg(long)]
    pub(crate) data_file: Option<PathBuf>,
    /// Extra header, `Name: value` (repeatable), e.g. `If-Match: "3"`.
    #[arg(long = "header", short = 'H')]
    pub(crate) headers: Vec<String>,
}

impl Cli {
    /// A client of the registry, with the token and the operator (`--operator`, else `$USER`).
    pub(crate) fn client(&self) -> Result<RegistryClient, String> {
        let operator = self
            .operator
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .filter(|s| !s.is_empty());
        // (An empty PORTICO_ADMIN_TOKEN_FILE, as `.run/env` of a standalone run has, is none.)
        let file = self
            .token_file
            .as_ref()
            .filter(|f| !f.as_os_str().is_empty());
        let token = match (&self.token, file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(file)) => Some(first_line(file, "--token-file")?),
            (None, None) => None,
        };
        RegistryClient::new(&self.registry, token, operator).map_err(|e| e.to_string())
    }
}

/// The first line of a token file, trimmed; an error names `flag` and the file.
pub(crate) fn first_line(file: &std::path::Path, flag: &str) -> Result<String, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("{flag} {}: {e}", file.display()))?;
    let line = text.lines().next().unwrap_or_default().trim().to_owned();
    if line.is_empty() {
        return Err(format!("{flag} {}: the file is empty", file.display()));
    }
    Ok(line)
}

/// An HTTP method, any case.
pub(crate) fn parse_method(m: &str) -> Result<Method, String> {
    Method::from_bytes(m.to_ascii_uppercase().as_bytes())
        .map_err(|_| format!("{m:?} is not an HTTP method"))
}

/// A `Name: value` header.
pub(crate) fn parse_header(h: &str) -> Result<(String, String), String> {
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| format!("header {h:?}: expected `Name: value`"))?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}
