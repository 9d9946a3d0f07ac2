//! `portico-gateway`: the data plane. See `--help` and docs/OPERATIONS.md.

use anyhow::{bail, Context};
use clap::Parser;
use pingora_core::listeners::ListenerConfig;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use portico_control::zk::{NodeInfo, ZkSource};
use portico_control::{ConfigSource, DirSource};
use portico_gateway::admin::{self, AdminState};
use portico_gateway::fleet::Fleet;
use portico_gateway::invoke::Clients;
use portico_gateway::listener;
use portico_gateway::notify;
use portico_gateway::observe::access_log::{AccessLog, LogTarget};
use portico_gateway::observe::metrics::Metrics;
use portico_gateway::proxy::Gateway;
use portico_gateway::reload;
use portico_gateway::runtime::{system_clock, Plane, PlaneKind, Shared};
use portico_gateway::tls::resumption::{Resumption, ResumptionSettings};
use portico_gateway::tls::{self, CertFiles, CertStore};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Portico's gateway: signed open APIs over HTTP/JSON, proxied to HTTP backends or
/// transcoded to gRPC, configured from ZooKeeper or a directory.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// ZooKeeper hosts (`127.0.0.1:2181,...`): the live configuration source.
    #[arg(long, conflicts_with = "config_dir")]
    zk: Option<String>,
    /// Root of Portico's tree in ZooKeeper.
    #[arg(long, default_value = "/portico")]
    zk_root: String,
    /// File holding the ZooKeeper `digest` credentials `portico-gateway:PASSWORD` (mode 0600;
    /// else the PORTICO_ZK_AUTH environment variable). Credentials are never given on the
    /// command line itself (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs").
    #[arg(long, requires = "zk")]
    zk_auth_file: Option<PathBuf>,
    /// ZooKeeper session timeout asked for, in milliseconds.
    #[arg(long, default_value_t = 6000)]
    zk_session_timeout_ms: u64,
    /// Last-known-good snapshot directory (written on every applied config; booted from
    /// when ZooKeeper is unreachable at start).
    #[arg(long)]
    snapshot_dir: Option<PathBuf>,
    /// Standalone mode: serve the configuration tree in this directory (reloaded on change).
    #[arg(long, required_unless_present = "zk")]
    config_dir: Option<PathBuf>,
    /// Merchant traffic listener.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Sandbox listener, serving the `sandbox/` tree (drafts and sandbox apps).
    #[arg(long)]
    sandbox_listen: Option<String>,
    /// Admin listener: /metrics, /healthz, /readyz, /status.
    #[arg(long, default_value = "127.0.0.1:9180")]
    admin_listen: String,
    /// This node's id (default: hostname-pid).
    #[arg(long)]
    node_id: Option<String>,
    /// Worker threads for traffic (default: the number of CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// Access log: `-` for stdout, `off`, or a file path.
    #[arg(long, default_value = "-")]
    access_log: LogTarget,
    /// Default request body limit in bytes (an API's policy.max_body_bytes overrides it).
    #[arg(long, default_value_t = 1024 * 1024)]
    max_body_bytes: u64,
    /// Total time to read an HTTP/1 request head, from its first byte, in milliseconds
    /// (slowloris); 0 turns it off. Idle time between keepalive requests is not counted.
    #[arg(long, default_value_t = listener::DEFAULT_HEAD_DEADLINE.as_millis() as u64)]
    head_timeout_ms: u64,
    /// Memory bound of the replay cache per app, in MiB: signed calls are refused with 429
    /// once an app's nonces of the last 300 s fill it (64 MiB hold ≈ 11,000 calls a second).
    #[arg(long, default_value_t = 64)]
    replay_cache_mib: usize,
    /// TLS listener for merchant traffic: HTTP/2 (by ALPN) and HTTP/1.1 over TLS 1.2 or 1.3,
    /// the same pipeline as --listen. Needs --tls-cert and --tls-key.
    #[arg(long, requires = "tls_cert")]
    tls_listen: Option<String>,
    /// TLS listener for the sandbox plane (same certificate). Needs --sandbox-listen.
    #[arg(long, requires_all = ["tls_cert", "sandbox_listen"])]
    sandbox_tls_listen: Option<String>,
    /// TLS certificate chain, PEM: the server's certificate first, then its intermediates.
    /// Reloaded without a restart when the file changes.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key, PEM (PKCS#8, SEC1 or PKCS#1, unencrypted). Reloaded with the
    /// certificate.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Session ticket keys shared by the fleet: one key per line (64 hex digits), the first
    /// seals new tickets, every one opens them; re-read when the file changes. Every gateway
    /// given the same file resumes the others' sessions. Without it each process seals with
    /// its own random key, so a merchant resumes only on the gateway that served it
    /// (docs/operations/gateway.md, "TLS"). Rotate with `ops/tls-ticket-keys.sh rotate FILE`.
    #[arg(long, requires = "tls_cert")]
    tls_ticket_keys: Option<PathBuf>,
    /// Entries of the TLS session-ID cache, for TLS 1.2 clients that do not take tickets
    /// (per process; about 200 bytes each).
    #[arg(long, default_value_t = 20_000)]
    tls_session_cache: usize,
    /// The longest one write of an answer to a merchant may take, in milliseconds (a header,
    /// or a piece of a streamed body); a client that does not read is cut off. 0: unbounded.
    #[arg(long, default_value_t = portico_gateway::proxy::DEFAULT_WRITE_TIMEOUT.as_millis() as u64)]
    write_timeout_ms: u64,
    /// Open connections each traffic listener accepts (the plain, TLS, sandbox and sandbox
    /// TLS listeners count apart); beyond, a new connection is answered 503
    /// `CONNECTION_LIMIT` (HTTP/1) or closed (HTTP/2).
    #[arg(long, default_value_t = listener::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Open connections one client address may hold on a plane's traffic listeners (plain
    /// and TLS together); beyond, refused as at --max-connections. Addresses in
    /// `ipacl.trusted_proxies` are not capped. 0: no cap.
    #[arg(long, default_value_t = listener::DEFAULT_MAX_PER_ADDRESS)]
    max_connections_per_address: usize,
    /// A TLS handshake must be done within this of the connection's accept, in
    /// milliseconds; the connection counts against the caps meanwhile.
    #[arg(long, default_value_t = listener::DEFAULT_TLS_HANDSHAKE.as_millis() as u64)]
    tls_handshake_timeout_ms: u64,
    /// An HTTP/2 connection with no request in flight for this long gets a GOAWAY and is
    /// closed, in milliseconds (like HTTP/1 keep-alive); 0: never.
    #[arg(long, default_value_t = listener::h2::DEFAULT_IDLE.as_millis() as u64)]
    h2_idle_timeout_ms: u64,
    /// Streams one HTTP/2 connection may have open at once, and requests in flight: a
    /// stream the client resets keeps its place until its request has stopped.
    #[arg(long, default_value_t = listener::h2::DEFAULT_MAX_STREAMS)]
    h2_max_streams: u32,
    /// RST_STREAM frames a client may send over one HTTP/2 connection's life; past it, the
    /// connection gets GOAWAY(ENHANCE_YOUR_CALM) and is closed. 0: no limit.
    #[arg(long, default_value_t = listener::h2::DEFAULT_RESET_BUDGET)]
    h2_reset_budget: u64,
    /// Bytes of the read buffer each accepted connection holds for its whole life, idle or
    /// not (Pingora's L4 buffer, 64 KiB by default there); 0: unbuffered reads. Request heads
    /// and bodies are read into the HTTP session's own buffers, so a small one costs no
    /// extra reads (benches/RESULTS.md, "Memory per idle keep-alive connection").
    #[arg(long, default_value_t = listener::DEFAULT_READ_BUFFER_BYTES)]
    read_buffer_bytes: usize,
    /// Redis for the fleet (`redis://host:port[/db]`, or `rediss://` for TLS): shared
    /// counters of cluster-scope rate limits, the cluster-wide nonce record and the
    /// notification streams (docs/operations/cluster.md, "Running a cluster"). Without it,
    /// cluster-scope limits are split by the gateways in ZooKeeper's `nodes/`. Put no
    /// password in it: see --redis-password-file.
    #[arg(long, env = "PORTICO_REDIS")]
    redis: Option<String>,
    /// The Redis ACL user to authenticate as (default: Redis's `default` user when a
    /// password is given).
    #[arg(long, env = "PORTICO_REDIS_USER")]
    redis_user: Option<String>,
    /// File holding the Redis password (one line, mode 0600); else the PORTICO_REDIS_PASSWORD
    /// environment variable. The password is never given on the command line itself
    /// (docs/operations/cluster.md, "Redis credentials and TLS").
    #[arg(long, env = "PORTICO_REDIS_PASSWORD_FILE")]
    redis_password_file: Option<PathBuf>,
    /// CA certificates (PEM) a `rediss://` server is verified against (default: the
    /// system's roots).
    #[arg(long, env = "PORTICO_REDIS_CA_FILE")]
    redis_ca_file: Option<PathBuf>,
    /// File holding the notification key (at least 32 characters, mode 0600; the same on
    /// every gateway of a cluster): each notification stored in Redis carries an
    /// HMAC-SHA256 made with it, and an entry without a valid one is dropped, never
    /// delivered (docs/SECURITY.md, "A hostile Redis"). Without it a gateway with --redis
    /// makes a key of its own at start, which no other gateway (nor its own next run) knows.
    #[arg(long, env = "PORTICO_NOTIFY_KEY_FILE")]
    notify_key_file: Option<PathBuf>,
    /// Zero-downtime restart: take the listening sockets over from the gateway running with
    /// the same --upgrade-sock (Pingora's graceful upgrade), which is then sent SIGQUIT and
    /// drains (docs/operations/upgrades.md, "Restarts and upgrades"; ./ops/restart-gateway.sh).
    #[arg(long)]
    upgrade: bool,
    /// The Unix socket the listening sockets are handed over on during an upgrade (default:
    /// one per --listen address, under /tmp).
    #[arg(long)]
    upgrade_sock: Option<PathBuf>,
    /// On SIGTERM (stop) or SIGQUIT (upgrade), how long requests in flight may take to finish
    /// once the gateway stops accepting connections, in seconds; the process exits after it.
    #[arg(long, default_value_t = 5)]
    drain_seconds: u64,
    /// Internal listener for backends: `POST /internal/v1/notifications` (docs/operations/notifications.md,
    /// "Notifications"); `off` disables it. Never expose it to merchants.
    #[arg(long, default_value = "127.0.0.1:9181")]
    internal_listen: String,
    /// File holding the publisher token backends send as `Authorization: Bearer <token>`
    /// (else the PORTICO_PUBLISH_TOKEN environment variable). Without one, publishing answers
    /// 503.
    #[arg(long)]
    publish_token_file: Option<PathBuf>,
    /// Notifications delivered and not acknowledged within this are sent again, in ms.
    #[arg(long, default_value_t = 30_000)]
    notify_ack_timeout_ms: u64,
    /// A notification stream sends a heartbeat (an SSE comment, a WebSocket ping) after this
    /// much silence, in ms.
    #[arg(long, default_value_t = 15_000)]
    notify_heartbeat_ms: u64,
    /// A stream with more notifications delivered and unacknowledged than this is closed as
    /// a slow consumer.
    #[arg(long, default_value_t = 1000)]
    notify_max_backlog: u64,
    /// Notification streams this node holds at most; beyond, 503 `CONNECTION_LIMIT`.
    #[arg(long, default_value_t = 10_000)]
    notify_max_streams: u64,
    /// Without Redis: notifications kept per app in memory at most (the oldest dropped).
    #[arg(long, default_value_t = 10_000)]
    notify_memory_events: usize,
    /// One notification callback POST may take this long, in ms.
    #[arg(long, default_value_t = 5000)]
    notify_callback_timeout_ms: u64,
    /// Tries of one callback (1 s, 2 s, 4 s, … apart) before it becomes a dead letter.
    #[arg(long, default_value_t = 10)]
    notify_callback_attempts: u32,
    /// The longest wait between two tries of a callback, in ms.
    #[arg(long, default_value_t = 60_000)]
    notify_callback_max_backoff_ms: u64,
    /// Notification publishes accepted per app per second on this node (each app of a
    /// publish to every granted app counts one); beyond, 429 `RATE_LIMITED`. 0: no limit.
    #[arg(long, default_value_t = 1000)]
    notify_publish_rate: u32,
    /// Publishes per app accepted at once above the rate (at least the rate).
    #[arg(long, default_value_t = 2000)]
    notify_publish_burst: u32,
    /// CA certificates (PEM) that callback URLs over HTTPS are verified against.
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    notify_callback_ca_file: PathBuf,
    /// CIDRs that `wake_url`s, health checks and callbacks may not reach, besides the defaults
    /// (link-local, the metadata addresses); comma-separated (docs/operations/egress.md, "Egress
    /// policy").
    #[arg(long, env = "PORTICO_EGRESS_DENY", default_value = "")]
    egress_deny: String,
    /// CIDRs those calls may reach even inside a denied range (the most specific rule decides).
    #[arg(long, env = "PORTICO_EGRESS_ALLOW", default_value = "")]
    egress_allow: String,
}

/// The egress policy of outbound calls made for config authors (`wake_url`, health checks,
/// callbacks): the defaults plus `--egress-deny` / `--egress-allow`.
fn egress_policy(args: &Args) -> anyhow::Result<()> {
    use portico_control::egress;
    let deny =
        egress::parse_nets(&args.egress_deny).map_err(|e| anyhow::anyhow!("--egress-deny: {e}"))?;
    let allow = egress::parse_nets(&args.egress_allow)
        .map_err(|e| anyhow::anyhow!("--egress-allow: {e}"))?;
    let policy = egress::Policy::new(&deny, &allow);
    let (deny, allow) = policy.operator_rules();
    tracing::info!(?deny, ?allow, defaults = ?egress::DEFAULT_DENY, "egress policy");
    egress::set_global(policy);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging();
    egress_policy(&args)?;
    let node_id = args.node_id.clone().unwrap_or_else(default_node_id);
    let shared = shared_services(&args, &node_id)?;
    let tls = tls_store(&args, &shared)?;
    let resumption = tls
        .as_ref()
        .map(|_| tls_resumption(&args, &shared))
        .transpose()?;
    let live = Arc::new(Plane::new(PlaneKind::Live, shared.clone()));
    let sandbox = args
        .sandbox_listen
        .as_ref()
        .map(|_| Arc::new(Plane::new(PlaneKind::Sandbox, shared.clone())));
    if let Some(sandbox) = &sandbox {
        // A sandbox app signing with its live secret is refused (docs/PROTOCOL.md, "The
        // sandbox"): the sandbox plane reads the live one's apps.
        let _ = sandbox.live.set(Arc::downgrade(&live));
    }

    // The control side (reload loops, admin listener, housekeeping) runs on its own runtime,
    // so it never competes with traffic and traffic never waits on it.
    let control_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("portico-control")
        .enable_all()
        .build()
        .context("starting the control runtime")?;
    let sources = if let Some(dir) = &args.config_dir {
        dir_sources(dir, &live, sandbox.as_ref())?
    } else if let Some(hosts) = &args.zk {
        zk_sources(&args, hosts, &node_id, &live, sandbox.as_ref())?
    } else {
        bail!("give --config-dir DIR (standalone) or --zk HOSTS");
    };
    let planes: Vec<Arc<Plane>> = std::iter::once(live.clone())
        .chain(sandbox.clone())
        .collect();
    let live_source = sources.live_source.clone();
    if let Some(store) = &tls {
        control_rt.spawn(store.clone().watch(tls::RELOAD_POLL));
    }
    if let Some(keys) = resumption.as_ref().and_then(|r| r.key_file.clone()) {
        control_rt.spawn(keys.watch(tls::RELOAD_POLL));
    }
    start_admin(
        &control_rt,
        &args,
        &live,
        sandbox.as_ref(),
        live_source,
        tls.as_ref(),
    )?;
    shared
        .fleet
        .start(control_rt.handle(), sources.members.clone());
    start_internal(&control_rt, &args, &shared)?;
    spawn_reload_loops(&control_rt, &sources, args.snapshot_dir.as_ref());
    control_rt.spawn(housekeeping(planes, sources.live_source));
    tracing::info!(node_id = %node_id, listen = %args.listen, admin = %args.admin_listen, sandbox = ?args.sandbox_listen, tls = ?args.tls_listen, sandbox_tls = ?args.sandbox_tls_listen, "portico-gateway starting");
    // Keep the control runtime alive for the life of the process.
    let _control = control_rt;
    serve_traffic(&args, live, sandbox, tls.zip(resumption))
}

/// The gateway's own log, on stderr (`PORTICO_LOG`, docs/OPERATIONS.md).
fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PORTICO_LOG")
                .unwrap_or_else(|_| "info,pingora=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Redis as the flags say: the URL, the ACL user, the password from its file or
/// `PORTICO_REDIS_PASSWORD` (never from the command line), the CA file for `rediss://`.
fn redis_settings(args: &Args) -> anyhow::Result<Option<portico_gateway::fleet::RedisSettings>> {
    let Some(url) = args.redis.as_deref().filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    let password = match &args.redis_password_file {
        Some(path) => Some(
            portico_gateway::fleet::read_private_file(path)
                .map_err(|e| anyhow::anyhow!("--redis-password-file: {e}"))?,
        ),
        None => std::env::var("PORTICO_REDIS_PASSWORD")
            .ok()
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty()),
    };
    if url.contains('@') && password.is_none() {
        tracing::warn!("--redis: a password in the URL is visible in the process list; use --redis-password-file or PORTICO_REDIS_PASSWORD");
    }
    let ca_pem = match &args.redis_ca_file {
        Some(path) => Some(
            std::fs::read(path).with_context(|| format!("--redis-ca-file {}", path.display()))?,
        ),
        None => None,
    };
    Ok(Some(portico_gateway::fleet::RedisSettings {
        url: url.to_owned(),
        user: args.redis_user.clone().filter(|u| !u.is_empty()),
        password,
        ca_pem,
    }))
}

/// The process-wide services: metrics, the access log, the backend clients, the clock.
fn shared_services(args: &Args, node_id: &str) -> anyhow::Result<Arc<Shared>> {
    let metrics = Metrics::new().context("registering metrics")?;
    let access_log = AccessLog::start(args.access_log.clone(), metrics.access_log_dropped.clone())
        .context("opening the access log")?;
    let redis = redis_settings(args)?;
    let shown = redis.as_ref().map(|r| format!("{r:?}")).unwrap_or_default();
    let fleet = Arc::new(Fleet::with_redis(redis).with_context(|| format!("--redis: {shown}"))?);
    fleet
        .metrics
        .register(&metrics.registry)
        .context("registering fleet metrics")?;
    let notify_config = notify::Config {
        ack_timeout: Duration::from_millis(args.notify_ack_timeout_ms.max(1)),
        heartbeat: Duration::from_millis(args.notify_heartbeat_ms.max(100)),
        max_backlog: args.notify_max_backlog.max(1),
        max_streams: args.notify_max_streams,
        memory_events: args.notify_memory_events.max(1),
        callback_timeout: Duration::from_millis(args.notify_callback_timeout_ms.max(1)),
        callback_attempts: args.notify_callback_attempts.max(1),
        callback_max_backoff: Duration::from_millis(args.notify_callback_max_backoff_ms.max(1000)),
        publish_rate: args.notify_publish_rate,
        publish_burst: args.notify_publish_burst,
        mac_key: args
            .notify_key_file
            .as_deref()
            .map(notify::store::MacKey::from_file)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--notify-key-file: {e}"))?,
        ..notify::Config::default()
    };
    let notify = Arc::new(notify::Notifier::new(notify_config, fleet.clone()));
    notify
        .metrics
        .register(&metrics.registry)
        .context("registering notification metrics")?;
    Ok(Arc::new(Shared {
        metrics,
        access_log,
        clients: Clients::default(),
        clock: system_clock(),
        node_id: node_id.to_owned(),
        default_max_body: args.max_body_bytes,
        replay_bytes_per_app: args.replay_cache_mib.saturating_mul(1 << 20),
        // Without Redis nothing remembers the nonces a previous process accepted: calls
        // signed before this one started are refused (docs/SECURITY.md, "Replays").
        started_ms: portico_control::clock::now_ms(),
        write_timeout: Duration::from_millis(args.write_timeout_ms),
        fleet,
        notify,
    }))
}

/// The TLS listeners' certificate, when one is configured: loaded and checked now, so a bad
/// file stops the start with its reason (docs/operations/gateway.md, "TLS").
fn tls_store(args: &Args, shared: &Shared) -> anyhow::Result<Option<Arc<CertStore>>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    if args.tls_listen.is_none() && args.sandbox_tls_listen.is_none() {
        bail!("--tls-cert and --tls-key are given but no TLS listener: add --tls-listen ADDR");
    }
    let files = CertFiles {
        cert: cert.clone(),
        key: key.clone(),
    };
    let store =
        CertStore::open(files, &shared.metrics.registry).context("loading the TLS certificate")?;
    Ok(Some(store))
}

/// How returning merchants resume their TLS sessions: the fleet's ticket keys when given
/// (a bad file stops the start with its reason), and the session-ID cache.
fn tls_resumption(args: &Args, shared: &Shared) -> anyhow::Result<Arc<Resumption>> {
    let settings = ResumptionSettings {
        ticket_keys: args.tls_ticket_keys.clone(),
        session_cache: args.tls_session_cache,
    };
    let resumption = Resumption::open(&settings, &shared.metrics.registry)
        .map_err(anyhow::Error::msg)
        .context("setting up TLS session resumption")?;
    Ok(Arc::new(resumption))
}

/// Where each plane's configuration comes from.
struct Sources {
    /// The source of each plane's reload loop.
    loops: Vec<(Arc<Plane>, Arc<dyn ConfigSource>)>,
    /// Run after each snapshot the live plane applies (the node registration).
    on_applied: Option<reload::OnApplied>,
    /// The live plane's source, when it has a connection to report (ZooKeeper).
    live_source: Option<Arc<dyn ConfigSource>>,
    /// The gateways registered in ZooKeeper's `nodes/` (ZooKeeper mode).
    members: Option<tokio::sync::watch::Receiver<Option<usize>>>,
}

/// Standalone mode: the directory (and its `sandbox/`), read once now so the gateway is
/// ready before it accepts traffic, then watched.
fn dir_sources(
    dir: &Path,
    live: &Arc<Plane>,
    sandbox: Option<&Arc<Plane>>,
) -> anyhow::Result<Sources> {
    boot_from_dir(live, dir, "dir")?;
    let mut loops: Vec<(Arc<Plane>, Arc<dyn ConfigSource>)> =
        vec![(live.clone(), Arc::new(DirSource::new(dir.to_path_buf())))];
    if let Some(sb) = sandbox {
        let sdir = dir.join("sandbox");
        if sdir.is_dir() {
            boot_from_dir(sb, &sdir, "dir")?;
        }
        loops.push((sb.clone(), Arc::new(DirSource::new(sdir))));
    }
    Ok(Sources {
        loops,
        on_applied: None,
        live_source: None,
        members: None,
    })
}

/// ZooKeeper mode: boot from the last-known-good disk snapshot (so the gateway serves even
/// when ZooKeeper is unreachable), register this node, and watch the live and sandbox trees.
fn zk_sources(
    args: &Args,
    hosts: &str,
    node_id: &str,
    live: &Arc<Plane>,
    sandbox: Option<&Arc<Plane>>,
) -> anyhow::Result<Sources> {
    let auth = portico_control::zk::ZkAuth::from_file_or_env(args.zk_auth_file.as_deref())
        .map_err(|e| anyhow::anyhow!("ZooKeeper credentials: {e}"))?;
    match &auth {
        Some(a) => tracing::info!(user = %a.user(), "zookeeper: authenticating with digest credentials"),
        None => tracing::warn!("zookeeper: no credentials (--zk-auth-file, PORTICO_ZK_AUTH): only an open tree can be read"),
    }
    if let Some(dir) = &args.snapshot_dir {
        boot_from_snapshot(live, dir);
    }
    let session = Duration::from_millis(args.zk_session_timeout_ms);
    let zk = Arc::new(
        ZkSource::new(hosts, &args.zk_root)
            .with_session_timeout(session)
            .with_auth(auth.clone()),
    );
    let mut info = NodeInfo::new(node_id, &args.listen, &args.admin_listen);
    info.sandbox_addr = args.sandbox_listen.clone();
    info.internal_addr =
        (args.internal_listen.trim() != "off").then(|| args.internal_listen.clone());
    zk.register_node(info);
    let reg = zk.clone();
    let on_applied: reload::OnApplied =
        Arc::new(move |snap: &portico_control::Snapshot| reg.set_applied(&snap.version));
    let mut loops: Vec<(Arc<Plane>, Arc<dyn ConfigSource>)> = vec![(live.clone(), zk.clone())];
    if let Some(sb) = sandbox {
        let root = format!("{}/sandbox", args.zk_root.trim_end_matches('/'));
        let source = ZkSource::new(hosts, &root)
            .with_session_timeout(session)
            .with_auth(auth);
        loops.push((sb.clone(), Arc::new(source)));
    }
    let members = Some(zk.watch_members());
    Ok(Sources {
        loops,
        on_applied: Some(on_applied),
        live_source: Some(zk),
        members,
    })
}

/// Applies the last-known-good tree in `dir`, if there is one; ZooKeeper's tree replaces it
/// as soon as it arrives.
fn boot_from_snapshot(live: &Plane, dir: &Path) {
    match portico_control::store::read_snapshot(dir) {
        Ok((tree, version)) if !tree.docs.is_empty() => {
            if reload::apply_tree(live, &tree).is_some() {
                live.source
                    .store(Arc::new(format!("snapshot:{}", dir.display())));
                tracing::info!(dir = %dir.display(), ?version, "booted from the disk snapshot");
            }
        }
        Ok(_) => tracing::info!(dir = %dir.display(), "no disk snapshot yet"),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "disk snapshot unreadable")
        }
    }
}

/// Binds the admin listener and serves it on the control runtime. `/readyz` also waits for
/// the traffic listeners (live, sandbox, TLS), which Pingora binds (or receives, with
/// `--upgrade`) after this point: a probe task watches for them.
fn start_admin(
    control_rt: &tokio::runtime::Runtime,
    args: &Args,
    live: &Arc<Plane>,
    sandbox: Option<&Arc<Plane>>,
    live_source: Option<Arc<dyn ConfigSource>>,
    tls: Option<&Arc<CertStore>>,
) -> anyhow::Result<()> {
    let listening = Arc::new(AtomicBool::new(false));
    let tls_probes = tls
        .map(|store| {
            [&args.tls_listen, &args.sandbox_tls_listen]
                .into_iter()
                .filter_map(|addr| probe_addr(addr.as_deref()?))
                .map(|addr| (addr, store.clone()))
                .collect()
        })
        .unwrap_or_default();
    let listeners = [
        Some(&args.listen),
        args.sandbox_listen.as_ref(),
        args.tls_listen.as_ref(),
        args.sandbox_tls_listen.as_ref(),
    ]
    .into_iter()
    .flatten()
    .filter_map(|a| a.parse().ok())
    .collect();
    control_rt.spawn(probe_listener(listeners, tls_probes, listening.clone()));
    let state = AdminState {
        live: live.clone(),
        sandbox: sandbox.cloned(),
        started_at_ms: portico_control::clock::now_ms(),
        listen: args.listen.clone(),
        source: live_source,
        listening,
        tls: tls.map(|store| admin::TlsStatus {
            listen: args.tls_listen.clone(),
            sandbox_listen: args.sandbox_tls_listen.clone(),
            certs: store.clone(),
        }),
    };
    let listener = control_rt
        .block_on(bind_admin(&args.admin_listen, args.upgrade))
        .with_context(|| format!("binding the admin listener {}", args.admin_listen))?;
    control_rt.spawn(async move {
        if let Err(e) = axum::serve(listener, admin::router(state)).await {
            tracing::error!(error = %e, "admin listener failed");
        }
    });
    Ok(())
}

/// Sets `listening` once this process holds every traffic listener's socket (bound, or
/// handed over by the gateway it replaces: a test connection could reach that one instead)
/// and each TLS listener completes a handshake with the certificate in use.
async fn probe_listener(
    listeners: Vec<std::net::SocketAddr>,
    tls: Vec<(std::net::SocketAddr, Arc<CertStore>)>,
    listening: Arc<AtomicBool>,
) {
    while !listeners.iter().all(|a| listener::holds_listener(*a)) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (addr, store) in tls {
        while !tls::probe(addr, &store).await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    listening.store(true, Ordering::Release);
}

/// One supervised reload loop per plane; the live plane's also writes the disk snapshot and
/// runs the `on_applied` hook.
fn spawn_reload_loops(
    control_rt: &tokio::runtime::Runtime,
    sources: &Sources,
    snapshot_dir: Option<&PathBuf>,
) {
    for (plane, source) in &sources.loops {
        let live = plane.kind == PlaneKind::Live;
        let dir = snapshot_dir.filter(|_| live).cloned();
        let hook = sources.on_applied.clone().filter(|_| live);
        control_rt.spawn(reload::run(plane.clone(), source.clone(), dir, hook));
    }
}

/// Every 5 s: the planes' housekeeping, gRPC channels to endpoints no plane uses any more
/// dropped, and the source connection gauge.
async fn housekeeping(planes: Vec<Arc<Plane>>, live_source: Option<Arc<dyn ConfigSource>>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        let mut endpoints = std::collections::HashSet::new();
        for p in &planes {
            p.housekeeping();
            for cluster in p.current.load().snapshot.clusters.values() {
                endpoints.extend(cluster.endpoints.iter().map(|e| e.addr.clone()));
            }
        }
        let connected = live_source
            .as_ref()
            .is_none_or(|src| src.status().connected);
        if let Some(p) = planes.first() {
            p.shared.clients.grpc.retain_endpoints(&endpoints);
            p.shared.metrics.source_connected.set(i64::from(connected));
        }
    }
}

/// Traffic: Pingora's server with the live listener (and the sandbox one), until the process
/// is stopped.
fn serve_traffic(
    args: &Args,
    live: Arc<Plane>,
    sandbox: Option<Arc<Plane>>,
    tls: Option<(Arc<CertStore>, Arc<Resumption>)>,
) -> anyhow::Result<()> {
    // Stop and upgrade (docs/operations/upgrades.md, "Restarts and upgrades"): on SIGTERM, or on
    // SIGQUIT once the sockets are handed over, Pingora stops accepting, lets requests in
    // flight run for the grace period (--drain-seconds), then ends the runtimes (1 s).
    let conf = ServerConf {
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        grace_period_seconds: Some(args.drain_seconds),
        graceful_shutdown_timeout_seconds: Some(1),
        upgrade_sock: upgrade_sock(args).display().to_string(),
        ..ServerConf::default()
    };
    let opt = pingora_core::server::configuration::Opt {
        upgrade: args.upgrade,
        ..Default::default()
    };
    if args.upgrade {
        tracing::info!(sock = %conf.upgrade_sock, "upgrade: waiting for the running gateway's listening sockets (send it SIGQUIT)");
    }
    let mut server = Server::new_with_opt_and_conf(Some(opt), conf);
    server.bootstrap();
    let settings = connection_settings(args);
    let planes = std::iter::once((live, &args.listen, &args.tls_listen, "portico-live")).chain(
        sandbox
            .zip(args.sandbox_listen.as_ref())
            .map(|(sb, addr)| (sb, addr, &args.sandbox_tls_listen, "portico-sandbox")),
    );
    for (plane, addr, tls_addr, name) in planes {
        let gateway = Gateway { plane };
        // The TLS endpoint is one more listener of the same service: same pipeline, same
        // connection handling (docs/operations/gateway.md, "TLS"). It listens as plain TCP: the
        // service handshakes each connection itself, counted and within its deadline.
        let endpoint = match (tls_addr, &tls) {
            (Some(tls_addr), Some((store, resumption))) => Some(listener::TlsEndpoint {
                addr: tls_addr
                    .parse()
                    .with_context(|| format!("TLS listener address {tls_addr}"))?,
                acceptor: Arc::new(store.acceptor(resumption)?),
            }),
            _ => None,
        };
        let mut svc = listener::service(&server.configuration, gateway, name, &settings, endpoint);
        let buffers = listener::buffers(args.read_buffer_bytes);
        svc.add_listener(ListenerConfig::tcp(addr.as_str()).l4_buffer(buffers));
        if let Some(tls_addr) = tls_addr.as_ref().filter(|_| tls.is_some()) {
            svc.add_listener(ListenerConfig::tcp(tls_addr.as_str()).l4_buffer(buffers));
        }
        server.add_service(svc);
    }
    server.run_forever()
}

/// The traffic listeners' connection limits and deadlines, from the flags.
fn connection_settings(args: &Args) -> listener::ConnectionSettings {
    listener::ConnectionSettings {
        head_deadline: Duration::from_millis(args.head_timeout_ms),
        max_connections: args.max_connections,
        max_per_address: args.max_connections_per_address,
        tls_handshake: Duration::from_millis(args.tls_handshake_timeout_ms.max(1)),
        h2: listener::H2Limits {
            idle: Duration::from_millis(args.h2_idle_timeout_ms),
            max_streams: args.h2_max_streams.max(1),
            reset_budget: args.h2_reset_budget,
            handshake: Duration::from_millis(args.tls_handshake_timeout_ms.max(1)),
        },
        drain: Duration::from_secs(args.drain_seconds),
    }
}

/// Reads `dir` once and applies it, so the gateway is ready before it accepts traffic.
fn boot_from_dir(plane: &Plane, dir: &Path, what: &str) -> anyhow::Result<()> {
    let tree = portico_control::source::dir::read_tree(dir)
        .with_context(|| format!("reading {}", dir.display()))?;
    if reload::apply_tree(plane, &tree).is_some() {
        plane
            .source
            .store(Arc::new(format!("{what}:{}", dir.display())));
    }
    Ok(())
}

/// Where to connect to check the traffic listener (an unspecified address → loopback).
fn probe_addr(listen: &str) -> Option<std::net::SocketAddr> {
    let mut addr: std::net::SocketAddr = listen.parse().ok()?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Some(addr)
}

/// The upgrade socket: `--upgrade-sock`, else one per traffic listener address.
fn upgrade_sock(args: &Args) -> PathBuf {
    args.upgrade_sock.clone().unwrap_or_else(|| {
        let name: String = args
            .listen
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        PathBuf::from(format!("/tmp/portico-gateway-upgrade-{name}.sock"))
    })
}

/// The notification tasks every node runs (the cross-node wake-ups, callback delivery) and the
/// internal listener for backends (`--internal-listen`, `off`: none), where notifications are
/// published (docs/operations/notifications.md, "Notifications").
fn start_internal(
    control_rt: &tokio::runtime::Runtime,
    args: &Args,
    shared: &Arc<Shared>,
) -> anyhow::Result<()> {
    // Streams on this node are woken by publishes on any node (with Redis).
    control_rt.spawn(shared.notify.clone().follow_wakes());
    // Callbacks are delivered whether or not this node takes publishes: with Redis any node
    // may hold an app's callback lock.
    let client = callback_client(&args.notify_callback_ca_file)?;
    let notifier = shared.notify.clone();
    control_rt.spawn(async move { notify::callback::start(notifier, client) });
    if args.internal_listen.trim() == "off" {
        tracing::info!("internal listener off: notifications cannot be published on this node");
        return Ok(());
    }
    let token = notify::internal::read_token(args.publish_token_file.as_deref())?;
    if token.is_none() {
        tracing::warn!("no publisher token (--publish-token-file, PORTICO_PUBLISH_TOKEN): publishing notifications answers 503");
    }
    let state = notify::internal::InternalState {
        notifier: shared.notify.clone(),
        token: token.map(Arc::new),
    };
    let listener = control_rt
        .block_on(bind_admin(&args.internal_listen, args.upgrade))
        .with_context(|| format!("binding the internal listener {}", args.internal_listen))?;
    tracing::info!(internal = %args.internal_listen, store = shared.notify.store.kind(), "notifications: internal listener up");
    control_rt.spawn(notify::internal::serve(
        listener,
        notify::internal::router(state),
    ));
    Ok(())
}

/// The HTTP client of notification callbacks: HTTPS verified against the CA bundle (when the
/// file exists; else HTTPS callbacks fail and say so in the dead letters).
fn callback_client(ca_file: &Path) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none());
    match std::fs::read(ca_file) {
        Ok(pem) => {
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--notify-callback-ca-file {}", ca_file.display()))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        Err(e) => {
            tracing::warn!(file = %ca_file.display(), error = %e, "notify: no CA bundle; HTTPS callbacks will fail")
        }
    }
    builder.build().context("building the callback client")
}

/// The admin or internal listener. It is bound with SO_REUSEPORT so that a gateway started with
/// `--upgrade` can bind it while the one it replaces still serves it (both answer until the old one
/// exits). Any other start first makes sure no process listens there: with SO_REUSEPORT alone a
/// second gateway on the same address would share it silently, and publishes and admin calls would
/// reach either at random (docs/operations/upgrades.md, "Restarts and upgrades").
async fn bind_admin(addr: &str, upgrading: bool) -> std::io::Result<tokio::net::TcpListener> {
    let addr: std::net::SocketAddr = tokio::net::lookup_host(addr)
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let socket = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        Ok::<_, std::io::Error>(socket)
    };
    if !upgrading {
        // Without SO_REUSEPORT, binding fails while anyone listens on the address (and only
        // then: SO_REUSEADDR lets it past connections in TIME_WAIT).
        let probe = socket()?;
        if let Err(e) = probe.bind(addr) {
            return Err(if e.kind() == std::io::ErrorKind::AddrInUse {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "{addr} is in use by another process (another gateway?); only a \
                         gateway started with --upgrade may share it with the one it replaces"
                    ),
                )
            } else {
                e
            });
        }
        drop(probe);
    }
    let socket = socket()?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn default_node_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "gateway".to_owned()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}
