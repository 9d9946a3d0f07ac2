//! The bare Pingora proxy shared by the `bare-pingora-proxy*` binaries (one per global
//! allocator; the allocator is the only difference between them).
//!
//! With no knob flags it is the benchmark baseline: `ProxyHttp` with only `upstream_peer`,
//! Pingora's defaults everywhere, `--threads` workers. The knob flags exist for the knob
//! suite (`portico-bench knobs`), which measures one Pingora setting at a time; the other
//! suites never pass them.

use async_trait::async_trait;
use clap::Parser;
use pingora_core::apps::HttpServerOptions;
use pingora_core::listeners::{
    L4BufferSettings, ListenerConfig, DEFAULT_L4_READ_BUFFER_SIZE, DEFAULT_L4_WRITE_BUFFER_SIZE,
};
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_proxy::{ProxyHttp, Session};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "A bare Pingora proxy: the benchmark baseline")]
pub struct Args {
    #[arg(long)]
    listen: String,
    #[arg(long)]
    upstream: SocketAddr,
    /// `ServerConf::threads`: worker threads of the proxy service.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Knob: `ServerConf::work_stealing` (Pingora's default: true, a multi-thread tokio
    /// runtime; false: one current-thread runtime per thread).
    #[arg(long)]
    work_stealing: Option<bool>,
    /// Knob: `ServerConf::listener_tasks_per_fd` (default 1).
    #[arg(long)]
    listener_tasks: Option<usize>,
    /// Knob: `ServerConf::upstream_keepalive_pool_size` (default 128).
    #[arg(long)]
    pool_size: Option<usize>,
    /// Knob: `ServerConf::fast_timeout_to_tokio_threshold_seconds` (0: always tokio timers).
    #[arg(long)]
    fast_timeout_threshold_s: Option<u64>,
    /// Knob: set the upstream peer's connect, total connect, read and write timeouts and
    /// its idle timeout (60 s) to this many ms, as Portico does for every API.
    #[arg(long)]
    peer_timeouts_ms: Option<u64>,
    /// Knob: the upstream peer's `tcp_recv_buf` (SO_RCVBUF) in bytes.
    #[arg(long)]
    peer_recv_buf: Option<usize>,
    /// Knob: `HttpServerOptions::keepalive_request_limit` (default: none).
    #[arg(long)]
    keepalive_request_limit: Option<u32>,
    /// Knob: the listener's L4 read buffer per downstream connection, in bytes
    /// (`ListenerConfig::l4_buffer`; Pingora's default `DEFAULT_L4_READ_BUFFER_SIZE`, 64 KiB).
    #[arg(long)]
    l4_read_buffer: Option<usize>,
    /// Knob: the listener's L4 write buffer per downstream connection, in bytes (default
    /// `DEFAULT_L4_WRITE_BUFFER_SIZE`, 1460).
    #[arg(long)]
    l4_write_buffer: Option<usize>,
}

struct Bare {
    upstream: SocketAddr,
    timeouts: Option<Duration>,
    recv_buf: Option<usize>,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn upstream_peer(
        &self,
        _s: &mut Session,
        _c: &mut (),
    ) -> pingora_core::Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.upstream, false, String::new());
        if let Some(t) = self.timeouts {
            peer.options.connection_timeout = Some(t);
            peer.options.total_connection_timeout = Some(t);
            peer.options.read_timeout = Some(t);
            peer.options.write_timeout = Some(t);
            peer.options.idle_timeout = Some(Duration::from_secs(60));
        }
        if let Some(b) = self.recv_buf {
            peer.options.tcp_recv_buf = Some(b);
        }
        Ok(Box::new(peer))
    }
}

/// Parses the command line and runs the proxy until killed.
pub fn main() {
    let args = Args::parse();
    let mut conf = ServerConf {
        threads: args.threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    if let Some(v) = args.work_stealing {
        conf.work_stealing = v;
    }
    if let Some(v) = args.listener_tasks {
        conf.listener_tasks_per_fd = v;
    }
    if let Some(v) = args.pool_size {
        conf.upstream_keepalive_pool_size = v;
    }
    if let Some(v) = args.fast_timeout_threshold_s {
        conf.fast_timeout_to_tokio_threshold_seconds = Some(v);
    }
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut svc = pingora_proxy::http_proxy_service(
        &server.configuration,
        Bare {
            upstream: args.upstream,
            timeouts: args.peer_timeouts_ms.map(Duration::from_millis),
            recv_buf: args.peer_recv_buf,
        },
    );
    if let Some(limit) = args.keepalive_request_limit {
        let mut opts = HttpServerOptions::default();
        opts.keepalive_request_limit = Some(limit);
        if let Some(proxy) = svc.app_logic_mut() {
            proxy.server_options = Some(opts);
        }
    }
    if args.l4_read_buffer.is_some() || args.l4_write_buffer.is_some() {
        let buffers = L4BufferSettings::new(
            args.l4_read_buffer.unwrap_or(DEFAULT_L4_READ_BUFFER_SIZE),
            args.l4_write_buffer.unwrap_or(DEFAULT_L4_WRITE_BUFFER_SIZE),
        );
        svc.add_listener(ListenerConfig::tcp(&args.listen).l4_buffer(buffers));
    } else {
        svc.add_tcp(&args.listen);
    }
    server.add_service(svc);
    server.run_forever()
}
