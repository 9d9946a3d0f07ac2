//! `portico-gateway`: the data plane. See `--help` and docs/OPERATIONS.md.

use anyhow::{bail, Context};
use clap::Parser;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use portico_control::zk::{NodeInfo, ZkSource};
use portico_control::{ConfigSource, DirSource};
use portico_gateway::admin::{self, AdminState};
use portico_gateway::invoke::Clients;
use portico_gateway::listener;
use portico_gateway::observe::access_log::{AccessLog, LogTarget};
use portico_gateway::observe::metrics::Metrics;
use portico_gateway::proxy::Gateway;
use portico_gateway::reload;
use portico_gateway::runtime::{system_clock, Plane, PlaneKind, Shared};
use std::path::PathBuf;
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
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PORTICO_LOG")
                .unwrap_or_else(|_| "info,pingora=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    let node_id = args.node_id.clone().unwrap_or_else(default_node_id);
    let metrics = Metrics::new().context("registering metrics")?;
    let access_log = AccessLog::start(args.access_log.clone(), metrics.access_log_dropped.clone())
        .context("opening the access log")?;
    let shared = Arc::new(Shared {
        metrics,
        access_log,
        clients: Clients::default(),
        clock: system_clock(),
        node_id: node_id.clone(),
        default_max_body: args.max_body_bytes,
    });
    let live = Arc::new(Plane::new(PlaneKind::Live, shared.clone()));
    let sandbox = args
        .sandbox_listen
        .as_ref()
        .map(|_| Arc::new(Plane::new(PlaneKind::Sandbox, shared.clone())));

    // The control side (reload loops, admin listener, housekeeping) runs on its own runtime,
    // so it never competes with traffic and traffic never waits on it.
    let control_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("portico-control")
        .enable_all()
        .build()
        .context("starting the control runtime")?;

    let mut sources: Vec<(Arc<Plane>, Arc<dyn ConfigSource>)> = Vec::new();
    let mut on_applied: Option<reload::OnApplied> = None;
    let mut live_source: Option<Arc<dyn ConfigSource>> = None;
    if let Some(dir) = &args.config_dir {
        boot_from_dir(&live, dir, "dir")?;
        sources.push((live.clone(), Arc::new(DirSource::new(dir.clone()))));
        if let Some(sb) = &sandbox {
            let sdir = dir.join("sandbox");
            if sdir.is_dir() {
                boot_from_dir(sb, &sdir, "dir")?;
            }
            sources.push((sb.clone(), Arc::new(DirSource::new(sdir))));
        }
    } else if let Some(hosts) = &args.zk {
        // Boot from the last-known-good snapshot first, so the gateway serves even when
        // ZooKeeper is unreachable; ZooKeeper's tree replaces it as soon as it arrives.
        if let Some(dir) = &args.snapshot_dir {
            match portico_control::store::read_snapshot(dir) {
                Ok((tree, version)) if !tree.docs.is_empty() => {
                    if reload::apply_tree(&live, &tree).is_some() {
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
        let session = Duration::from_millis(args.zk_session_timeout_ms);
        let zk = Arc::new(ZkSource::new(hosts, &args.zk_root).with_session_timeout(session));
        let mut info = NodeInfo::new(&node_id, &args.listen, &args.admin_listen);
        info.sandbox_addr = args.sandbox_listen.clone();
        zk.register_node(info);
        let reg = zk.clone();
        on_applied = Some(Arc::new(move |snap: &portico_control::Snapshot| {
            reg.set_applied(&snap.version)
        }));
        live_source = Some(zk.clone());
        sources.push((live.clone(), zk));
        if let Some(sb) = &sandbox {
            let root = format!("{}/sandbox", args.zk_root.trim_end_matches('/'));
            sources.push((
                sb.clone(),
                Arc::new(ZkSource::new(hosts, &root).with_session_timeout(session)),
            ));
        }
    } else {
        bail!("give --config-dir DIR (standalone) or --zk HOSTS");
    }

    // Readiness also waits for the traffic listener, which Pingora binds after this point.
    let listening = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let flag = listening.clone();
        let probe = probe_addr(&args.listen);
        control_rt.spawn(async move {
            while let Some(addr) = probe {
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            flag.store(true, std::sync::atomic::Ordering::Release);
        });
    }
    let admin_state = AdminState {
        live: live.clone(),
        sandbox: sandbox.clone(),
        started_at_ms: portico_control::clock::now_ms(),
        listen: args.listen.clone(),
        source: live_source,
        listening: listening.clone(),
    };
    let source_for_gauge = admin_state.source.clone();
    let admin_listener = control_rt
        .block_on(tokio::net::TcpListener::bind(&args.admin_listen))
        .with_context(|| format!("binding the admin listener {}", args.admin_listen))?;
    let snapshot_dir = args.snapshot_dir.clone();
    let planes: Vec<Arc<Plane>> = std::iter::once(live.clone())
        .chain(sandbox.clone())
        .collect();
    control_rt.spawn(async move {
        if let Err(e) = axum::serve(admin_listener, admin::router(admin_state)).await {
            tracing::error!(error = %e, "admin listener failed");
        }
    });
    for (plane, source) in sources {
        let dir = if plane.kind == PlaneKind::Live {
            snapshot_dir.clone()
        } else {
            None
        };
        let hook = if plane.kind == PlaneKind::Live {
            on_applied.clone()
        } else {
            None
        };
        control_rt.spawn(reload::run(plane, source, dir, hook));
    }
    control_rt.spawn(async move {
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
            // Drop gRPC channels to endpoints no plane uses any more.
            if let Some(p) = planes.first() {
                p.shared.clients.grpc.retain_endpoints(&endpoints);
            }
            let connected = source_for_gauge
                .as_ref()
                .is_none_or(|src| src.status().connected);
            if let Some(p) = planes.first() {
                p.shared.metrics.source_connected.set(i64::from(connected));
            }
        }
    });

    // Traffic: Pingora.
    let conf = ServerConf {
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let head_deadline = Duration::from_millis(args.head_timeout_ms);
    let mut svc = listener::service(
        &server.configuration,
        Gateway { plane: live },
        "portico-live",
        head_deadline,
    );
    svc.add_tcp(&args.listen);
    server.add_service(svc);
    if let (Some(addr), Some(sb)) = (&args.sandbox_listen, sandbox) {
        let mut svc = listener::service(
            &server.configuration,
            Gateway { plane: sb },
            "portico-sandbox",
            head_deadline,
        );
        svc.add_tcp(addr);
        server.add_service(svc);
    }
    tracing::info!(node_id = %node_id, listen = %args.listen, admin = %args.admin_listen, sandbox = ?args.sandbox_listen, "portico-gateway starting");
    // Keep the control runtime alive for the life of the process.
    let _control = control_rt;
    server.run_forever()
}

/// Reads `dir` once and applies it, so the gateway is ready before it accepts traffic.
fn boot_from_dir(plane: &Plane, dir: &std::path::Path, what: &str) -> anyhow::Result<()> {
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
