//! The baseline for Portico's benchmarks: a bare Pingora HTTP proxy with no stages, one
//! upstream, upstream keepalive, and the same allocator and thread settings as the gateway.
//!
//! `bare-pingora-proxy --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT [--threads N]`

use async_trait::async_trait;
use clap::Parser;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_proxy::{ProxyHttp, Session};
use std::net::SocketAddr;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(about = "A bare Pingora proxy: the benchmark baseline")]
struct Args {
    #[arg(long)]
    listen: String,
    #[arg(long)]
    upstream: SocketAddr,
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

struct Bare {
    upstream: SocketAddr,
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
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    let args = Args::parse();
    let conf = ServerConf {
        threads: args.threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut svc = pingora_proxy::http_proxy_service(
        &server.configuration,
        Bare {
            upstream: args.upstream,
        },
    );
    svc.add_tcp(&args.listen);
    server.add_service(svc);
    server.run_forever()
}
