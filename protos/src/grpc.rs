//! The gRPC demo services (`--grpc ADDR`). Not built yet: this is the placeholder that the
//! gRPC demo services replace. `main` already binds the listener, reports it on the
//! readiness line (`grpc=ADDR`) and runs [`serve_grpc`] beside the HTTP server, so filling
//! in this function (and adding the .proto files) is all that is needed.

use tokio::net::TcpListener;

/// Serves the gRPC demo services on `listener` until the process ends.
///
/// Placeholder: says so on stderr and closes the listener, so a gRPC client gets a refused
/// connection at once rather than a hang.
pub async fn serve_grpc(listener: TcpListener) -> anyhow::Result<()> {
    drop(listener);
    eprintln!("portico-demo-backend: gRPC demo services: not built yet");
    Ok(())
}
