//! `portico-registry`: the admin REST API over ZooKeeper.

use clap::Parser;
use portico_registry::Config;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Portico's registry: the admin REST API (`/api/v1`, OpenAPI at `/api/v1/openapi.json`) over
/// the ZooKeeper configuration tree.
#[derive(Debug, Parser)]
#[command(name = "portico-registry", version)]
struct Args {
    /// ZooKeeper connect string (`host:port[,host:port...]`).
    #[arg(long, env = "PORTICO_ZK")]
    zk: String,
    /// Root of the configuration tree in ZooKeeper.
    #[arg(long, default_value = "/portico")]
    zk_root: String,
    /// File holding the ZooKeeper `digest` credentials `portico-registry:PASSWORD` (mode 0600;
    /// else PORTICO_ZK_AUTH). Never given on the command line itself.
    #[arg(long)]
    zk_auth_file: Option<PathBuf>,
    /// Address of the admin API.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// File holding the admin bearer token (else PORTICO_ADMIN_TOKEN).
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// Serve without authentication (local experiments only).
    #[arg(long)]
    insecure_no_auth: bool,
    /// The built console served at `/` (default: `admin-ui/dist` of the checkout).
    #[arg(long, env = "PORTICO_CONSOLE_DIR")]
    console_dir: Option<PathBuf>,
    /// The live gateway's public base URL shown to merchants by the developer portal
    /// (`/portal/`), e.g. `https://api.example.com` (default: each live node's listener).
    #[arg(long, env = "PORTICO_PORTAL_GATEWAY_URL")]
    portal_gateway_url: Option<String>,
    /// The sandbox listener's public base URL shown by the portal, e.g.
    /// `https://sandbox.api.example.com` (default: each live node's sandbox listener).
    #[arg(long, env = "PORTICO_PORTAL_SANDBOX_URL")]
    portal_sandbox_url: Option<String>,
    /// Where this registry keeps what it observed of the gateways (the history store, the
    /// reports), unless --history-db / --reports-dir say otherwise. No default: without it
    /// (or --history-db) the registry keeps no history store, so it records no history,
    /// evaluates no alerts and sends no reports — two registries never share a store by
    /// accident (docs/operations/history-and-reports.md, "The history store").
    #[arg(long, env = "PORTICO_REGISTRY_DATA")]
    data_dir: Option<PathBuf>,
    /// The history store (SQLite; default DATA_DIR/history.sqlite): per-API per-minute
    /// rollups and alert events (docs/operations/history-and-reports.md, "The history store"); without
    /// --data-dir, its directory is the data directory.
    #[arg(long)]
    history_db: Option<PathBuf>,
    /// Days of history kept.
    #[arg(long, default_value_t = portico_registry::history::store::DEFAULT_RETENTION_DAYS,
        value_parser = clap::value_parser!(u32).range(1..=3650))]
    history_days: u32,
    /// The history store's bound, in MiB: above it the oldest minutes are dropped.
    #[arg(long, default_value_t = portico_registry::history::store::DEFAULT_MAX_MB,
        value_parser = clap::value_parser!(u64).range(8..=1_048_576))]
    history_max_mb: u64,
    /// File holding the secret signing alert webhooks (X-Portico-Signature, HMAC-SHA256 of the
    /// body; else PORTICO_WEBHOOK_SECRET). Without one, webhooks go unsigned.
    #[arg(long)]
    webhook_secret_file: Option<PathBuf>,
    /// SMTP relay for reports and email receivers: smtp://host[:port] (plain SMTP).
    #[arg(long)]
    smtp: Option<String>,
    /// The From address of mails.
    #[arg(long, default_value = "Portico <portico@localhost>")]
    smtp_from: String,
    /// Where the daily and weekly reports are written (default DATA_DIR/reports).
    #[arg(long)]
    reports_dir: Option<PathBuf>,
    /// The hour (UTC) the daily report is sent (the weekly one on Mondays).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u8).range(0..=23))]
    report_hour: u8,
    /// File holding the gateways' publisher token (its first line; else
    /// PORTICO_PUBLISH_TOKEN): the console's "send test event" publishes with it through a
    /// gateway's internal listener. Without one, test sends answer 503.
    #[arg(long)]
    publish_token_file: Option<PathBuf>,
    /// The console's address as people reach it, for links in notifications.
    #[arg(long)]
    public_url: Option<String>,
    /// Seconds a request head may take to arrive in full (and a connection may wait for its
    /// first request) before the connection is closed (docs/operations/registry.md, "The registry's
    /// listener").
    #[arg(long, default_value_t = portico_registry::listener::DEFAULT_HEADER_READ_TIMEOUT_S,
        value_parser = clap::value_parser!(u64).range(1..=10))]
    header_read_timeout_s: u64,
    /// Seconds a connection may stay open with no request in progress.
    #[arg(long, default_value_t = portico_registry::listener::DEFAULT_IDLE_TIMEOUT_S,
        value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout_s: u64,
    /// Open connections at most (0: no cap); above it new connections are closed at once.
    #[arg(long, default_value_t = portico_registry::listener::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Open connections per client address at most (0: no cap; raise it, or use 0, when a
    /// reverse proxy connects for everyone).
    #[arg(long, default_value_t = portico_registry::listener::DEFAULT_MAX_CONNECTIONS_PER_IP)]
    max_connections_per_address: usize,
    /// Portal try-it calls per client address and minute (0: none); more answer 429.
    #[arg(long, default_value_t = portico_registry::portal::forward::DEFAULT_TRY_PER_MINUTE)]
    portal_try_per_minute: u32,
    /// CIDRs outbound calls made for config authors (webhooks, reflection import) may not
    /// reach, besides the defaults (link-local, metadata addresses); comma-separated
    /// (docs/operations/egress.md, "Egress policy").
    #[arg(long, env = "PORTICO_EGRESS_DENY", default_value = "")]
    egress_deny: String,
    /// CIDRs those calls may reach even inside a denied range (the most specific rule decides).
    #[arg(long, env = "PORTICO_EGRESS_ALLOW", default_value = "")]
    egress_allow: String,
    /// How often, in ms, the gateways' metrics are scraped and alert and autoscale rules
    /// evaluated; their windows are the same number of intervals (10 s at the default 2000).
    /// For tests: production keeps the default (docs/operations/registry.md, "portico-registry").
    #[arg(long, env = "PORTICO_EVALUATION_INTERVAL_MS", default_value_t = 2000,
        value_parser = clap::value_parser!(u64).range(100..=2000))]
    evaluation_interval_ms: u64,
}

/// The webhook secret: `--webhook-secret-file`, else `PORTICO_WEBHOOK_SECRET`, else none.
fn webhook_secret(args: &Args) -> anyhow::Result<Option<Vec<u8>>> {
    let text = match &args.webhook_secret_file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read --webhook-secret-file {}: {e}", path.display())
        })?,
        None => std::env::var("PORTICO_WEBHOOK_SECRET").unwrap_or_default(),
    };
    let secret = text.trim();
    if secret.is_empty() {
        if args.webhook_secret_file.is_some() {
            anyhow::bail!("--webhook-secret-file is empty");
        }
        return Ok(None);
    }
    Ok(Some(secret.as_bytes().to_vec()))
}

/// The data directory and the history store's file: `--data-dir` (its `history.sqlite` unless
/// `--history-db`), else `--history-db` in its directory; `None` without either (no default:
/// registries sharing a working directory must not share a store).
fn data_paths(data_dir: Option<&Path>, history_db: Option<&Path>) -> Option<(PathBuf, PathBuf)> {
    match (data_dir, history_db) {
        (Some(dir), db) => Some((
            dir.to_path_buf(),
            db.map_or_else(|| dir.join("history.sqlite"), Path::to_path_buf),
        )),
        (None, Some(db)) => Some((
            db.parent().map(Path::to_path_buf).unwrap_or_default(),
            db.to_path_buf(),
        )),
        (None, None) => None,
    }
}

/// Opens the history store and starts what observes the gateways: the recorder, the alert
/// evaluation and the report scheduler (docs/operations/alerts.md, "Alerts", "Reports").
fn start_observing(
    args: &Args,
    state: &portico_registry::state::Shared,
    addr: SocketAddr,
) -> anyhow::Result<()> {
    use portico_registry::{alerts, health, history, reports};
    let Some((data_dir, db)) = data_paths(args.data_dir.as_deref(), args.history_db.as_deref())
    else {
        tracing::warn!(
            "no --data-dir (or PORTICO_REGISTRY_DATA): this registry keeps no history store, \
             so it records no history, evaluates no alerts and sends no reports"
        );
        return Ok(());
    };
    let limits = history::Limits {
        retention_days: args.history_days,
        max_bytes: args.history_max_mb * 1024 * 1024,
    };
    let store = std::sync::Arc::new(
        history::HistoryStore::open(&db, limits).map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    tracing::info!(path = %db.display(), days = limits.retention_days, max_mb = args.history_max_mb, "history store");
    let _ = state.history.set(store.clone());
    let mailer = match &args.smtp {
        Some(url) => {
            Some(alerts::mail::Mailer::new(url, &args.smtp_from).map_err(|e| anyhow::anyhow!(e))?)
        }
        None => None,
    };
    let secret = webhook_secret(args)?;
    if secret.is_none() {
        tracing::warn!(
            "alert webhooks go unsigned: set --webhook-secret-file or PORTICO_WEBHOOK_SECRET"
        );
    }
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "registry".to_owned());
    health::recorder::start(state, store.clone());
    alerts::start(
        state,
        store.clone(),
        alerts::Settings {
            secret,
            mailer: mailer.clone(),
            registry_id: format!("{host}:{} {addr}", std::process::id()),
            public_url: args.public_url.clone(),
        },
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let delivery = reports::deliver::Delivery {
        history: store,
        dir: args
            .reports_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("reports")),
        mailer,
    };
    reports::deliver::configure(delivery.clone());
    reports::deliver::start(state, delivery, args.report_hour);
    Ok(())
}

fn token(args: &Args) -> anyhow::Result<Option<String>> {
    if let Some(path) = &args.admin_token_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read --admin-token-file {}: {e}", path.display())
        })?;
        let token = text.trim().to_owned();
        if token.is_empty() {
            anyhow::bail!("--admin-token-file {} is empty", path.display());
        }
        return Ok(Some(token));
    }
    if let Ok(token) = std::env::var("PORTICO_ADMIN_TOKEN") {
        let token = token.trim().to_owned();
        if !token.is_empty() {
            return Ok(Some(token));
        }
    }
    if args.insecure_no_auth {
        return Ok(None);
    }
    anyhow::bail!(
        "no admin token: give --admin-token-file FILE or set PORTICO_ADMIN_TOKEN \
         (or --insecure-no-auth for local experiments)"
    )
}

/// The publisher token: the first line (trimmed) of `--publish-token-file`, else
/// `PORTICO_PUBLISH_TOKEN`; an empty token counts as none, except in a file given explicitly.
fn publish_token(args: &Args) -> anyhow::Result<Option<String>> {
    let raw = match &args.publish_token_file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read --publish-token-file {}: {e}", path.display())
        })?,
        None => std::env::var("PORTICO_PUBLISH_TOKEN").unwrap_or_default(),
    };
    let token = raw.lines().next().unwrap_or_default().trim().to_owned();
    if token.is_empty() {
        if let Some(path) = &args.publish_token_file {
            anyhow::bail!("--publish-token-file {} is empty", path.display());
        }
        return Ok(None);
    }
    Ok(Some(token))
}

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let cadence = portico_registry::cadence::set_interval(std::time::Duration::from_millis(
        args.evaluation_interval_ms,
    ));
    if cadence != portico_registry::cadence::DEFAULT {
        tracing::warn!(interval = ?cadence, "--evaluation-interval-ms: scraping and evaluating off the production cadence (tests only)");
    }
    let token = token(&args)?;
    let publish_token = publish_token(&args)?;
    if token.is_none() {
        tracing::warn!("--insecure-no-auth: the admin API accepts every request");
    }
    if let Some(dir) = &args.console_dir {
        portico_registry::console::set_dir(dir.clone());
    }
    match portico_registry::console::dir() {
        Some(dir) => tracing::info!(dir = %dir.display(), "console served at /"),
        None => tracing::warn!("console not built: run ./ops/up.sh (or admin-ui/build.sh)"),
    }
    let public_url = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<String>> {
        v.as_deref()
            .map(portico_registry::portal::catalog::check_public_url)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
    };
    let urls = portico_registry::portal::catalog::PublicUrls {
        gateway: public_url("portal-gateway-url", &args.portal_gateway_url)?,
        sandbox: public_url("portal-sandbox-url", &args.portal_sandbox_url)?,
    };
    portico_registry::portal::catalog::require_public_urls(&urls, args.listen)
        .map_err(|e| anyhow::anyhow!(e))?;
    portico_registry::portal::catalog::set_public_urls(urls);
    portico_registry::portal::forward::set_try_per_minute(args.portal_try_per_minute);
    let egress = portico_control::egress::Policy::new(
        &portico_control::egress::parse_nets(&args.egress_deny)
            .map_err(|e| anyhow::anyhow!("--egress-deny: {e}"))?,
        &portico_control::egress::parse_nets(&args.egress_allow)
            .map_err(|e| anyhow::anyhow!("--egress-allow: {e}"))?,
    );
    let (deny, allow) = egress.operator_rules();
    tracing::info!(?deny, ?allow, defaults = ?portico_control::egress::DEFAULT_DENY, "egress policy");
    portico_control::egress::set_global(egress);
    let zk_auth = portico_control::zk::ZkAuth::from_file_or_env(args.zk_auth_file.as_deref())
        .map_err(|e| anyhow::anyhow!("ZooKeeper credentials: {e}"))?;
    match &zk_auth {
        Some(auth) => tracing::info!(user = %auth.user(), "ZooKeeper: authenticating with digest credentials"),
        None => tracing::warn!("ZooKeeper: no credentials (--zk-auth-file, PORTICO_ZK_AUTH): only an open tree can be used"),
    }
    let config = Config {
        zk_hosts: args.zk.clone(),
        zk_root: args.zk_root.clone(),
        token,
        zk_auth,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, zk = %args.zk, root = %args.zk_root, "portico-registry listening");
    println!("portico-registry listening on http://{addr}");
    let state = portico_registry::AppState::new(&config);
    match publish_token {
        Some(t) => {
            let _ = state.publish_token.set(t);
        }
        None => tracing::warn!(
            "no publisher token (--publish-token-file, PORTICO_PUBLISH_TOKEN): the console \
             cannot send test notifications"
        ),
    }
    start_observing(&args, &state, addr)?;
    // Changes outside the registry go to the audit log (docs/operations/registry.md, "Changes outside
    // the registry").
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "registry".to_owned());
    portico_registry::tree_watch::start(&state, &format!("{host}:{} {addr}", std::process::id()));
    let limits = portico_registry::server::Limits {
        header_read_timeout: std::time::Duration::from_secs(args.header_read_timeout_s),
        idle_timeout: std::time::Duration::from_secs(args.idle_timeout_s),
        max_connections: args.max_connections,
        max_connections_per_ip: args.max_connections_per_address,
    };
    tracing::info!(?limits, "listener limits");
    portico_registry::server::serve_with(listener, state, limits).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_store_needs_an_explicit_place() {
        assert_eq!(data_paths(None, None), None);
        let dir = Path::new("/var/lib/portico");
        assert_eq!(
            data_paths(Some(dir), None),
            Some((dir.to_path_buf(), dir.join("history.sqlite")))
        );
        let db = Path::new("/srv/h/history.db");
        assert_eq!(
            data_paths(Some(dir), Some(db)),
            Some((dir.to_path_buf(), db.to_path_buf()))
        );
        assert_eq!(
            data_paths(None, Some(db)),
            Some((PathBuf::from("/srv/h"), db.to_path_buf()))
        );
    }
}
