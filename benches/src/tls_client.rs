//! The TLS client of the benchmarks (`portico-load --url https://...` and the TLS suite's
//! fleet resumption check): TLS 1.3 only, rustls on ring, trusting the one certificate
//! authority the suite generated, with or without session resumption.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Sessions one client keeps (TLS 1.3 tickets are single-use; servers send two per
/// handshake).
const SESSIONS_KEPT: usize = 8;

/// The certificate authority in the PEM file `path` (its first certificate).
pub fn read_ca(path: &Path) -> anyhow::Result<CertificateDer<'static>> {
    CertificateDer::from_pem_file(path)
        .with_context(|| format!("reading a PEM certificate from {}", path.display()))
}

/// `name` as the server name to verify (and send as SNI when it is a DNS name).
pub fn server_name(name: &str) -> anyhow::Result<ServerName<'static>> {
    ServerName::try_from(name.to_owned()).with_context(|| format!("TLS server name {name:?}"))
}

/// A TLS 1.3 client trusting `ca`, offering `alpn`. With `resume`, the client keeps the
/// sessions (tickets) servers give it and offers them on its next handshakes; every call
/// gets its own session store, so one config is one returning client.
pub fn config(
    ca: &CertificateDer<'static>,
    resume: bool,
    alpn: &[&[u8]],
) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).context("the bench CA")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with ring")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.resumption = if resume {
        Resumption::in_memory_sessions(SESSIONS_KEPT)
    } else {
        Resumption::disabled()
    };
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(c))
}

/// A TCP connection to `addr` (no Nagle) and a completed TLS handshake on it.
pub async fn connect(
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
    addr: SocketAddr,
) -> anyhow::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    Ok(TlsConnector::from(config.clone())
        .connect(name.clone(), tcp)
        .await?)
}

/// One handshake-only connection: the full (or resumed) TLS handshake, then `close_notify`
/// and reading until the server closes, so the server completes its side and the client
/// receives the session tickets the server sends after the handshake (stored when `config`
/// resumes). No HTTP request is sent. Returns whether the handshake resumed a session.
pub async fn handshake_once(
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
    addr: SocketAddr,
    timeout: Duration,
) -> anyhow::Result<bool> {
    tokio::time::timeout(timeout, async {
        let mut s = connect(config, name, addr).await?;
        let resumed = s.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
        s.shutdown().await?;
        let mut buf = [0u8; 2048];
        // The server's tickets, then its close_notify or FIN; a reset after our close is
        // the end too.
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
        Ok(resumed)
    })
    .await
    .context("TLS handshake timed out")?
}
