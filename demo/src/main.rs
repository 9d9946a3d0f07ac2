//! `portico-demo-backend --http ADDR [--grpc ADDR] [--verbose]`: Portico's demo backend.
//!
//! Binds every listener first, then prints one readiness line on stdout and serves:
//!
//! ```text
//! portico-demo-backend http=127.0.0.1:41234 grpc=127.0.0.1:41235
//! ```
//!
//! Port 0 picks a free port; the line reports the real one. See `portico_demo::http` for the
//! HTTP demo API and its fault injection, `portico_demo::grpc` for the gRPC demo services.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use portico_demo::{control, grpc, http, READY_PREFIX};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

#[derive(Debug, Parser)]
#[command(
    name = "portico-demo-backend",
    about = "Portico's demo backend (HTTP + gRPC, with fault injection)"
)]
struct Args {
    /// Address of the HTTP demo API (e.g. 127.0.0.1:18081; port 0 = any free port).
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Address of the gRPC demo services (e.g. 127.0.0.1:50051; port 0 = any free port).
    #[arg(long)]
    grpc: Option<SocketAddr>,
    /// Log one line per request to stderr (off by default: this is also the benchmark backend).
    #[arg(long)]
    verbose: bool,
    /// Report this load on every answer (`X-Portico-Load` / `x-portico-load` metadata), e.g.
    /// `vm_cpu=0.4,vm_mem=0.5,cpu=0.2,mem=0.3`; changeable with `POST /__admin/load`.
    #[arg(long, default_value = "")]
    load: String,
    /// Start asleep (503 / UNAVAILABLE until `POST /__admin/wake`).
    #[arg(long)]
    asleep: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.http.is_none() && args.grpc.is_none() {
        anyhow::bail!("give --http ADDR and/or --grpc ADDR");
    }

    let http_listener = match args.http {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --http {addr}"))?,
        ),
        None => None,
    };
    let grpc_listener = match args.grpc {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --grpc {addr}"))?,
        ),
        None => None,
    };

    let mut line = String::from(READY_PREFIX);
    if let Some(l) = &http_listener {
        line.push_str(&format!(" http={}", l.local_addr()?));
    }
    if let Some(l) = &grpc_listener {
        line.push_str(&format!(" grpc={}", l.local_addr()?));
    }

    let control = control::Control::new(&args.load, args.asleep);
    let mut tasks = JoinSet::new();
    if let Some(l) = http_listener {
        let options = http::Options {
            verbose: args.verbose,
            control: control.clone(),
        };
        tasks.spawn(http::serve(l, Arc::new(http::Stats::default()), options));
    }
    if let Some(l) = grpc_listener {
        let stats = Arc::new(grpc::GrpcStats::default());
        tasks.spawn(grpc::serve_grpc_controlled(l, stats, control));
    }

    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }

    // Runs until every server has ended; the first error ends the process.
    while let Some(done) = tasks.join_next().await {
        done.context("server task panicked")??;
    }
    Ok(())
}
