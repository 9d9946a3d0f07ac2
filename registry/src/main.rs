//! `portico-registry`: the admin REST API over ZooKeeper.

use clap::Parser;
use portico_registry::Config;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    let token = token(&args)?;
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
    portico_registry::server::serve(listener, portico_registry::AppState::new(&config)).await?;
    Ok(())
}
