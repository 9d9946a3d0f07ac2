//! TLS for merchant traffic (docs/operations/gateway.md, "TLS"): the certificate in use, the
//! resolver Pingora's rustls acceptor asks on every handshake, and the watcher that reloads
//! the certificate when its files change, without a restart and without touching open
//! connections.
//!
//! [`CertStore`] holds one checked certificate chain and key behind an `ArcSwap`. Each TLS
//! handshake reads it once ([`CertStore::resolver`]); a reload swaps in a new one, so
//! handshakes in flight and open connections keep the certificate they started with and
//! every later handshake gets the new one. [`CertStore::watch`] re-reads both files every
//! second and hashes their contents; a change is loaded once the contents have stayed the
//! same for one more poll (a file still being written is not read half-way), checked in full
//! (PEM, X.509, a supported key that matches the first certificate, not expired) and only
//! then swapped in. Files that fail a check are refused: logged, counted
//! (`portico_tls_cert_reloads_total{result="refused"}`), shown in `/status`, and the
//! certificate in use stays. The same check at start-up makes a bad file a start-up error.
//!
//! Protocol choices are Pingora's rustls backend's (pingora-core `listeners/tls/rustls`):
//! TLS 1.2 and 1.3 only, with rustls' `ring` cipher suites (AEAD with ECDHE only: AES-GCM and
//! ChaCha20-Poly1305); ALPN offers `h2` then `http/1.1`.

pub mod resumption;

use arc_swap::{ArcSwap, ArcSwapOption};
use async_trait::async_trait;
use pingora_core::listeners::tls::{Acceptor, TlsSettings};
use pingora_core::listeners::TlsAccept;
use pingora_core::protocols::tls::TlsRef;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::any::Any;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the watcher re-reads the certificate and key files.
pub const RELOAD_POLL: Duration = Duration::from_secs(1);

/// Files larger than this are refused (a certificate chain and a key are a few KiB).
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A certificate that expires within this many seconds is logged as a warning when loaded.
const EXPIRY_WARNING_SECS: i64 = 14 * 24 * 3600;

/// Why a certificate and key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("reading the {what} file {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the {what} file {path} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { what: &'static str, path: PathBuf },
    #[error("the {what} file {path} is not valid PEM: {reason}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("the certificate file {0} has no CERTIFICATE section")]
    NoCertificate(PathBuf),
    #[error(
        "the key file {0} has no PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY section \
         (encrypted keys are not supported)"
    )]
    NoKey(PathBuf),
    #[error("the key file {path} has {count} private keys; give exactly one")]
    SeveralKeys { path: PathBuf, count: usize },
    #[error("the first certificate of {path} is not a valid X.509 certificate: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("the private key in {path} cannot be used: {reason}")]
    UnsupportedKey { path: PathBuf, reason: String },
    #[error(
        "the private key in {key} does not match the first certificate of {cert} (the \
         server's own certificate must come first, then its intermediates)"
    )]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("the certificate in {path} expired at {not_after}")]
    Expired { path: PathBuf, not_after: String },
    #[error("setting up TLS: {0}")]
    Setup(String),
}

/// Where the certificate chain and the key are read from.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// PEM: the server's certificate first, then its intermediates (a chain file).
    pub cert: PathBuf,
    /// PEM: one unencrypted private key (PKCS#8, SEC1 or PKCS#1).
    pub key: PathBuf,
}

/// What `/status` shows of a certificate (`tls.certificate`; defined with the rest of
/// `/status` in `portico_control::status`).
pub use portico_control::status::CertInfo;

/// A checked certificate chain and key, as served.
pub struct Loaded {
    pub certified: Arc<CertifiedKey>,
    pub info: CertInfo,
    /// SHA-256 over both files' contents: what the watcher compares.
    contents: [u8; 32],
}

/// The contents of both files, read once, with their digest.
struct FileContents {
    cert: Result<Vec<u8>, CertError>,
    key: Result<Vec<u8>, CertError>,
    digest: [u8; 32],
}

/// A refused version of the files (`/status`'s `tls.refused`).
pub use portico_control::status::TlsRefusal as Refusal;

/// The TLS metrics, registered in the gateway's registry.
struct TlsMetrics {
    not_after: IntGauge,
    loaded_at: IntGauge,
    reloads: IntCounterVec,
    failing: IntGauge,
    handshakes: IntCounterVec,
}

impl TlsMetrics {
    fn new(registry: &Registry) -> prometheus::Result<Self> {
        fn gauge(registry: &Registry, name: &str, help: &str) -> prometheus::Result<IntGauge> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        }
        fn counter(
            registry: &Registry,
            name: &str,
            help: &str,
            label: &str,
        ) -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), &[label])?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        }
        let m = TlsMetrics {
            not_after: gauge(
                registry,
                "portico_tls_cert_not_after_seconds",
                "Expiry of the TLS certificate in use, in Unix seconds",
            )?,
            loaded_at: gauge(
                registry,
                "portico_tls_cert_loaded_timestamp_seconds",
                "When the TLS certificate in use was loaded, in Unix seconds",
            )?,
            reloads: counter(
                registry,
                "portico_tls_cert_reloads_total",
                "Changed TLS certificate files, by result (applied, refused)",
                "result",
            )?,
            failing: gauge(
                registry,
                "portico_tls_cert_reload_failing",
                "1 while the certificate files on disk are refused and an older certificate is served",
            )?,
            handshakes: counter(
                registry,
                "portico_tls_handshakes_total",
                "Completed TLS handshakes on the traffic listeners, by protocol version",
                "version",
            )?,
        };
        // Both outcomes exist from the start, so a rate over them is defined.
        m.reloads.with_label_values(&["applied"]);
        m.reloads.with_label_values(&["refused"]);
        Ok(m)
    }
}

/// The watcher's memory between polls.
#[derive(Default)]
struct WatchState {
    /// Contents seen changed at the previous poll, loaded if still the same at this one.
    pending: Option<[u8; 32]>,
    /// Contents refused: not tried again until they change.
    refused: Option<[u8; 32]>,
}

/// What one poll of the files did.
#[derive(Debug, PartialEq, Eq)]
pub enum PollOutcome {
    /// The files hold the certificate in use (or contents already refused).
    Unchanged,
    /// The files changed since the previous poll: loaded at the next poll if they stay so.
    Settling,
    /// A new certificate is in use.
    Applied,
    /// The files were refused; the certificate in use stays.
    Refused,
}

/// The certificate served on the TLS listeners, and its reload state.
pub struct CertStore {
    files: CertFiles,
    current: ArcSwap<Loaded>,
    /// Set while the files on disk are refused (cleared when a certificate is applied or the
    /// files hold the one in use again).
    refused: ArcSwapOption<Refusal>,
    watch: Mutex<WatchState>,
    metrics: TlsMetrics,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("files", &self.files)
            .field("certificate", &self.current.load().info)
            .finish()
    }
}

impl CertStore {
    /// Start-up: loads and checks the files (an error names the file and the problem) and
    /// registers the TLS metrics in `registry`.
    pub fn open(files: CertFiles, registry: &Registry) -> Result<Arc<CertStore>, CertError> {
        let loaded = load(&files, SystemTime::now())?;
        let metrics = TlsMetrics::new(registry)
            .map_err(|e| CertError::Setup(format!("registering the TLS metrics: {e}")))?;
        let store = CertStore {
            files,
            current: ArcSwap::from_pointee(loaded),
            refused: ArcSwapOption::empty(),
            watch: Mutex::new(WatchState::default()),
            metrics,
        };
        store.publish();
        let info = &store.current.load().info;
        tracing::info!(
            subject = %info.subject,
            not_after = %info.not_after,
            sha256 = %info.sha256_fingerprint,
            cert_file = %store.files.cert.display(),
            "TLS certificate loaded"
        );
        warn_if_expiring(info);
        Ok(Arc::new(store))
    }

    /// The certificate in use.
    pub fn current(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    /// The refusal of the files on disk, while they are refused.
    pub fn refusal(&self) -> Option<Arc<Refusal>> {
        self.refused.load_full()
    }

    /// The handshake-time certificate lookup for Pingora's rustls acceptor.
    pub fn resolver(self: &Arc<Self>) -> Arc<dyn ResolvesServerCert> {
        Arc::new(Resolver(self.clone()))
    }

    /// The TLS settings of one traffic listener: this store's certificate, ALPN `h2` then
    /// `http/1.1`, and the handshake counter. Pingora builds its acceptor from them (TLS 1.2
    /// and 1.3, rustls' default cipher suites).
    pub fn listener_settings(self: &Arc<Self>) -> Result<TlsSettings, CertError> {
        let mut settings = TlsSettings::with_callbacks(Box::new(Handshakes {
            counter: self.metrics.handshakes.clone(),
        }))
        .map_err(|e| CertError::Setup(e.to_string()))?;
        settings.set_cert_resolver(self.resolver());
        settings.enable_h2();
        Ok(settings)
    }

    /// The acceptor of one traffic listener: Pingora's, built from
    /// [`CertStore::listener_settings`], with session resumption added (tickets and a
    /// session-ID cache, see [`resumption`]); everything else of its configuration is kept.
    pub fn acceptor(
        self: &Arc<Self>,
        resumption: &resumption::Resumption,
    ) -> Result<Acceptor, CertError> {
        let mut acceptor = self.listener_settings()?.build();
        let mut config = (**acceptor.acceptor.config()).clone();
        config.ticketer = resumption.ticketer.clone();
        config.session_storage = resumption.sessions.clone();
        acceptor.acceptor = pingora_core::tls::TlsAcceptor::from(Arc::new(config));
        Ok(acceptor)
    }

    /// Re-reads the files every `every`, forever, and applies or refuses what changed (see
    /// the module doc). Run it on the control runtime.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let store = self.clone();
            // File reads block: keep them off the runtime's workers.
            if let Err(e) = tokio::task::spawn_blocking(move || store.poll(SystemTime::now())).await
            {
                tracing::error!(error = %e, "TLS certificate poll failed");
            }
        }
    }

    /// One poll of the files at `now`: what the watcher does every second.
    pub fn poll(&self, now: SystemTime) -> PollOutcome {
        let read = read_files(&self.files);
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        if read.digest == self.current.load().contents {
            watch.pending = None;
            watch.refused = None;
            if self.refused.swap(None).is_some() {
                self.metrics.failing.set(0);
                tracing::info!(
                    cert_file = %self.files.cert.display(),
                    "TLS certificate files hold the certificate in use again"
                );
            }
            return PollOutcome::Unchanged;
        }
        if watch.refused == Some(read.digest) {
            watch.pending = None;
            return PollOutcome::Unchanged;
        }
        if watch.pending != Some(read.digest) {
            watch.pending = Some(read.digest);
            return PollOutcome::Settling;
        }
        watch.pending = None;
        let digest = read.digest;
        match check(&self.files, read, now) {
            Ok(loaded) => {
                let old = self.current.swap(Arc::new(loaded));
                watch.refused = None;
                self.refused.store(None);
                self.publish();
                self.metrics.reloads.with_label_values(&["applied"]).inc();
                let info = &self.current.load().info;
                tracing::info!(
                    subject = %info.subject,
                    not_after = %info.not_after,
                    sha256 = %info.sha256_fingerprint,
                    previous_sha256 = %old.info.sha256_fingerprint,
                    "TLS certificate reloaded; new handshakes use it, open connections keep theirs"
                );
                warn_if_expiring(info);
                PollOutcome::Applied
            }
            Err(e) => {
                watch.refused = Some(digest);
                let reason = e.to_string();
                self.refused.store(Some(Arc::new(Refusal {
                    at_ms: unix_ms(now),
                    reason: reason.clone(),
                })));
                self.metrics.reloads.with_label_values(&["refused"]).inc();
                self.metrics.failing.set(1);
                tracing::error!(
                    reason = %reason,
                    serving_sha256 = %self.current.load().info.sha256_fingerprint,
                    "TLS certificate files refused; the certificate in use stays"
                );
                PollOutcome::Refused
            }
        }
    }

    /// The certificate part of `/status`'s `tls` (the listeners are the caller's to fill in).
    pub fn status(&self) -> portico_control::status::TlsStatus {
        let reloads = |result: &str| self.metrics.reloads.with_label_values(&[result]).get();
        portico_control::status::TlsStatus {
            listen: None,
            sandbox_listen: None,
            cert_file: self.files.cert.display().to_string(),
            key_file: self.files.key.display().to_string(),
            certificate: self.current.load().info.clone(),
            reloads: portico_control::status::TlsReloads {
                applied: reloads("applied"),
                refused: reloads("refused"),
            },
            refused: self.refusal().as_deref().cloned(),
        }
    }

    /// Sets the gauges of the certificate in use.
    fn publish(&self) {
        let info = &self.current.load().info;
        self.metrics.not_after.set(info.not_after_unix);
        self.metrics
            .loaded_at
            .set(i64::try_from(info.loaded_at_ms / 1000).unwrap_or(i64::MAX));
        self.metrics.failing.set(0);
    }
}

/// Gives every handshake the certificate in use.
#[derive(Debug)]
struct Resolver(Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    /// Handshake phase, once per full handshake (not for resumed sessions): the chain and key
    /// to present. Always the certificate in use; never `None` (which would abort the
    /// handshake), whatever the client's SNI.
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current.load().certified.clone())
    }
}

/// Counts completed handshakes by protocol version.
struct Handshakes {
    counter: IntCounterVec,
}

#[async_trait]
impl TlsAccept for Handshakes {
    /// After a successful handshake: counts it; attaches nothing to the connection (`None`).
    async fn handshake_complete_callback(
        &self,
        tls: &TlsRef,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        self.counter
            .with_label_values(&[tls.version().unwrap_or("unknown")])
            .inc();
        None
    }
}

fn warn_if_expiring(info: &CertInfo) {
    let left = info.not_after_unix - unix_secs(SystemTime::now());
    if left < EXPIRY_WARNING_SECS {
        tracing::warn!(
            subject = %info.subject,
            not_after = %info.not_after,
            days_left = left / 86_400,
            "the TLS certificate expires soon; replace its files (they are reloaded without a restart)"
        );
    }
}

/// Reads and checks the files: the start-up load.
pub fn load(files: &CertFiles, now: SystemTime) -> Result<Loaded, CertError> {
    check(files, read_files(files), now)
}

fn read_files(files: &CertFiles) -> FileContents {
    let cert = read_limited("certificate", &files.cert);
    let key = read_limited("key", &files.key);
    let mut h = Sha256::new();
    for part in [&cert, &key] {
        match part {
            Ok(bytes) => {
                h.update(b"ok");
                h.update((bytes.len() as u64).to_be_bytes());
                h.update(bytes);
            }
            Err(e) => {
                h.update(b"error");
                h.update(e.to_string().as_bytes());
            }
        }
    }
    FileContents {
        cert,
        key,
        digest: h.finalize().into(),
    }
}

fn read_limited(what: &'static str, path: &Path) -> Result<Vec<u8>, CertError> {
    use std::io::Read;
    let read_err = |source| CertError::Read {
        what,
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(CertError::TooLarge {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Checks what was read: PEM, the chain, the key and that it matches, the validity.
fn check(files: &CertFiles, read: FileContents, now: SystemTime) -> Result<Loaded, CertError> {
    let cert_pem = read.cert?;
    let key_pem = read.key?;
    let pem_err = |what, path: &Path, e: rustls::pki_types::pem::Error| CertError::Pem {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err("certificate", &files.cert, e))?;
    let Some(leaf) = chain.first() else {
        return Err(CertError::NoCertificate(files.cert.clone()));
    };
    let sections = <(SectionKind, Vec<u8>)>::pem_slice_iter(&key_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err("key", &files.key, e))?;
    let mut keys: Vec<PrivateKeyDer<'static>> = sections
        .into_iter()
        .filter_map(|(kind, der)| match kind {
            SectionKind::PrivateKey => Some(PrivateKeyDer::Pkcs8(der.into())),
            SectionKind::EcPrivateKey => Some(PrivateKeyDer::Sec1(der.into())),
            SectionKind::RsaPrivateKey => Some(PrivateKeyDer::Pkcs1(der.into())),
            _ => None,
        })
        .collect();
    let key = match keys.len() {
        0 => return Err(CertError::NoKey(files.key.clone())),
        1 => keys.remove(0),
        count => {
            return Err(CertError::SeveralKeys {
                path: files.key.clone(),
                count,
            })
        }
    };
    let mut info = describe(leaf, chain.len()).map_err(|reason| CertError::BadCertificate {
        path: files.cert.clone(),
        reason,
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing_key =
        provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| CertError::UnsupportedKey {
                path: files.key.clone(),
                reason: e.to_string(),
            })?;
    let certified = CertifiedKey::new(chain, signing_key);
    // Strict: a key whose public half cannot be compared is refused too.
    if certified.keys_match().is_err() {
        return Err(CertError::KeyMismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
        });
    }
    if info.not_after_unix <= unix_secs(now) {
        return Err(CertError::Expired {
            path: files.cert.clone(),
            not_after: info.not_after,
        });
    }
    info.loaded_at_ms = unix_ms(now);
    info.loaded_at = portico_control::clock::rfc3339_ms(info.loaded_at_ms as i64);
    Ok(Loaded {
        certified: Arc::new(certified),
        info,
        contents: read.digest,
    })
}

/// The `/status` view of a server certificate (`loaded_at` is filled in by the caller).
fn describe(leaf: &CertificateDer<'_>, chain_length: usize) -> Result<CertInfo, String> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| e.to_string())?;
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(n) => dns_names.push(n.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    if let Some(ip) = ip_from_bytes(b) {
                        ip_addresses.push(ip.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    let validity = cert.validity();
    let not_before_unix = validity.not_before.timestamp();
    let not_after_unix = validity.not_after.timestamp();
    Ok(CertInfo {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        dns_names,
        ip_addresses,
        not_before_unix,
        not_after_unix,
        not_before: portico_control::clock::rfc3339_ms(not_before_unix.saturating_mul(1000)),
        not_after: portico_control::clock::rfc3339_ms(not_after_unix.saturating_mul(1000)),
        sha256_fingerprint: fingerprint(leaf.as_ref()),
        chain_length,
        loaded_at_ms: 0,
        loaded_at: String::new(),
    })
}

fn ip_from_bytes(b: &[u8]) -> Option<std::net::IpAddr> {
    match b.len() {
        4 => <[u8; 4]>::try_from(b).ok().map(std::net::IpAddr::from),
        16 => <[u8; 16]>::try_from(b).ok().map(std::net::IpAddr::from),
        _ => None,
    }
}

/// SHA-256 of `der` as upper-case hex pairs joined by colons (OpenSSL's notation).
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn unix_secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn unix_ms(t: SystemTime) -> u64 {
    portico_control::clock::unix_ms(t)
}

/// Whether the TLS listener at `addr` completes a handshake presenting the certificate in use
/// (the readiness probe). The connection is closed cleanly right after, so nothing is logged.
pub async fn probe(addr: SocketAddr, store: &Arc<CertStore>) -> bool {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = match rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ServesOurs {
                store: store.clone(),
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
        Err(e) => {
            tracing::error!(error = %e, "building the TLS probe's client");
            return false;
        }
    };
    let connector = pingora_core::tls::TlsConnector::from(Arc::new(config));
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        let mut tls = connector
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .ok()?;
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut tls).await;
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
        .is_some()
}

/// The probe's verifier: the server must present exactly the certificate in use and prove
/// it holds its key (the handshake signature is verified).
#[derive(Debug)]
struct ServesOurs {
    store: Arc<CertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ServesOurs {
    /// Handshake phase: accepts only the server certificate the store serves.
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ours = self.store.current();
        match ours.certified.cert.first() {
            Some(leaf) if leaf.as_ref() == end_entity.as_ref() => {
                Ok(ServerCertVerified::assertion())
            }
            _ => Err(rustls::Error::General(
                "not the certificate in use".to_owned(),
            )),
        }
    }

    /// Handshake phase (TLS 1.2): the server's signature over the key exchange is valid.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    /// Handshake phase (TLS 1.3): the server's CertificateVerify signature is valid.
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    /// The signature schemes the probe accepts (the provider's).
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedKey as Issued, DnType, IsCa, KeyPair,
    };

    /// A test CA.
    fn ca() -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Portico test CA");
        let cert = params.self_signed(&key).unwrap();
        Issued {
            cert,
            key_pair: key,
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1 issued by `ca`, valid until
    /// `days` from now (negative: expired).
    fn leaf(ca: &Issued, cn: &str, days: i64) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(30);
        params.not_after = now + time::Duration::days(days);
        let cert = params.signed_by(&key, &ca.cert, &ca.key_pair).unwrap();
        Issued {
            cert,
            key_pair: key,
        }
    }

    struct Files {
        dir: tempfile::TempDir,
        files: CertFiles,
    }

    impl Files {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let files = CertFiles {
                cert: dir.path().join("cert.pem"),
                key: dir.path().join("key.pem"),
            };
            Files { dir, files }
        }

        /// Writes both files (each atomically: temp file, then rename).
        fn put(&self, cert: &str, key: &str) {
            for (path, text) in [(&self.files.cert, cert), (&self.files.key, key)] {
                let tmp = self.dir.path().join("tmp~");
                std::fs::write(&tmp, text).unwrap();
                std::fs::rename(&tmp, path).unwrap();
            }
        }

        /// The server certificate then the CA (a chain file), and the key.
        fn put_leaf(&self, leaf: &Issued, ca: &Issued) {
            let chain = format!("{}{}", leaf.cert.pem(), ca.cert.pem());
            self.put(&chain, &leaf.key_pair.serialize_pem());
        }
    }

    fn store(files: &Files) -> (Arc<CertStore>, Registry) {
        let registry = Registry::new();
        (
            CertStore::open(files.files.clone(), &registry).unwrap(),
            registry,
        )
    }

    fn metric(registry: &Registry, name: &str, label: Option<&str>) -> f64 {
        let families = registry.gather();
        let family = families.iter().find(|f| f.name() == name).unwrap();
        let m = family
            .get_metric()
            .iter()
            .find(|m| label.is_none_or(|l| m.get_label().iter().any(|p| p.value() == l)))
            .unwrap();
        if m.get_gauge().is_some() {
            m.get_gauge().value()
        } else {
            m.get_counter().value()
        }
    }

    #[test]
    fn a_chain_and_its_key_load_with_what_status_shows() {
        let ca = ca();
        let leaf = leaf(&ca, "api.test", 90);
        let f = Files::new();
        f.put_leaf(&leaf, &ca);
        let loaded = load(&f.files, SystemTime::now()).unwrap();
        let info = &loaded.info;
        assert_eq!(info.subject, "CN=api.test");
        assert_eq!(info.issuer, "CN=Portico test CA");
        assert_eq!(info.dns_names, ["localhost"]);
        assert_eq!(info.ip_addresses, ["127.0.0.1"]);
        assert_eq!(info.chain_length, 2);
        assert_eq!(info.sha256_fingerprint, fingerprint(leaf.cert.der()));
        assert_eq!(info.sha256_fingerprint.len(), 32 * 3 - 1);
        let expected_expiry = unix_secs(SystemTime::now()) + 90 * 86_400;
        assert!((info.not_after_unix - expected_expiry).abs() < 60);
        assert!(info.not_after.ends_with('Z'), "{}", info.not_after);
        assert!(info.loaded_at_ms > 0);
        assert_eq!(loaded.certified.cert.len(), 2);
        assert_eq!(loaded.certified.cert[0].as_ref(), leaf.cert.der().as_ref());
    }

    #[test]
    fn a_key_file_with_other_sections_loads() {
        let ca = ca();
        let leaf = leaf(&ca, "api.test", 90);
        let f = Files::new();
        // A key file that also holds the certificate and EC parameters (as `openssl ecparam
        // -genkey` writes them): only the one private key counts.
        let key = format!(
            "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n{}{}",
            leaf.key_pair.serialize_pem(),
            leaf.cert.pem()
        );
        f.put(&leaf.cert.pem(), &key);
        load(&f.files, SystemTime::now()).unwrap();
    }

    fn refused(cert: &str, key: &str) -> String {
        let f = Files::new();
        f.put(cert, key);
        match load(&f.files, SystemTime::now()) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let ca = ca();
        let a = leaf(&ca, "a", 90);
        let b = leaf(&ca, "b", 90);
        let (a_cert, a_key) = (a.cert.pem(), a.key_pair.serialize_pem());
        let b_key = b.key_pair.serialize_pem();

        let e = refused(&a_cert, &b_key);
        assert!(e.contains("does not match"), "{e}");
        // The CA first: the key matches no first certificate.
        let e = refused(&format!("{}{}", ca.cert.pem(), a_cert), &a_key);
        assert!(e.contains("does not match"), "{e}");
        let e = refused("garbage\n", &a_key);
        assert!(e.contains("no CERTIFICATE"), "{e}");
        // Half a file, as seen while it is being written.
        let e = refused(&a_cert[..a_cert.len() / 2], &a_key);
        assert!(e.contains("not valid PEM"), "{e}");
        let e = refused(&a_cert, &a_key[..a_key.len() / 2]);
        assert!(e.contains("not valid PEM"), "{e}");
        let e = refused(&a_cert, "");
        assert!(e.contains("no PRIVATE KEY"), "{e}");
        let e = refused(&a_cert, &format!("{a_key}{b_key}"));
        assert!(e.contains("2 private keys"), "{e}");
        let encrypted =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let e = refused(&a_cert, encrypted);
        assert!(e.contains("encrypted keys are not supported"), "{e}");
        let junk_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = refused(junk_cert, &a_key);
        assert!(e.contains("not a valid X.509"), "{e}");
        let junk_key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let e = refused(&a_cert, junk_key);
        assert!(e.contains("cannot be used"), "{e}");

        let expired = leaf(&ca, "old", -1);
        let e = refused(&expired.cert.pem(), &expired.key_pair.serialize_pem());
        assert!(e.contains("expired at"), "{e}");

        let f = Files::new();
        let e = load(&f.files, SystemTime::now()).err().unwrap().to_string();
        assert!(e.contains("reading the certificate file"), "{e}");
    }

    #[test]
    fn a_change_is_applied_once_it_has_settled() {
        let ca = ca();
        let a = leaf(&ca, "a", 90);
        let b = leaf(&ca, "b", 90);
        let f = Files::new();
        f.put_leaf(&a, &ca);
        let (store, registry) = store(&f);
        let resolver = Resolver(store.clone());
        let served = |r: &Resolver| fingerprint(r.0.current.load().certified.cert[0].as_ref());
        let now = SystemTime::now();
        assert_eq!(store.poll(now), PollOutcome::Unchanged);

        f.put_leaf(&b, &ca);
        assert_eq!(store.poll(now), PollOutcome::Settling);
        assert_eq!(served(&resolver), fingerprint(a.cert.der()));
        assert_eq!(store.poll(now), PollOutcome::Applied);
        assert_eq!(served(&resolver), fingerprint(b.cert.der()));
        assert_eq!(store.poll(now), PollOutcome::Unchanged);
        assert_eq!(
            metric(&registry, "portico_tls_cert_reloads_total", Some("applied")),
            1.0
        );
        assert_eq!(
            metric(&registry, "portico_tls_cert_not_after_seconds", None) as i64,
            store.current().info.not_after_unix
        );

        // A file that changes between two polls waits for the next one.
        f.put_leaf(&a, &ca);
        assert_eq!(store.poll(now), PollOutcome::Settling);
        f.put("partial", "");
        assert_eq!(store.poll(now), PollOutcome::Settling);
        f.put_leaf(&a, &ca);
        assert_eq!(store.poll(now), PollOutcome::Settling);
        assert_eq!(store.poll(now), PollOutcome::Applied);
        assert_eq!(served(&resolver), fingerprint(a.cert.der()));
    }

    #[test]
    fn refused_files_keep_the_certificate_in_use_until_they_change() {
        let ca = ca();
        let a = leaf(&ca, "a", 90);
        let b = leaf(&ca, "b", 90);
        let f = Files::new();
        f.put_leaf(&a, &ca);
        let (store, registry) = store(&f);
        let now = SystemTime::now();

        // b's certificate with a's key.
        f.put(&b.cert.pem(), &a.key_pair.serialize_pem());
        assert_eq!(store.poll(now), PollOutcome::Settling);
        assert_eq!(store.poll(now), PollOutcome::Refused);
        assert_eq!(store.current().info.subject, "CN=a");
        let refusal = store.refusal().unwrap();
        assert!(
            refusal.reason.contains("does not match"),
            "{}",
            refusal.reason
        );
        assert_eq!(store.status().refused.as_ref(), Some(&*refusal));
        assert_eq!(store.status().reloads.refused, 1);
        assert_eq!(
            metric(&registry, "portico_tls_cert_reload_failing", None),
            1.0
        );
        // Not tried again while the files stay the same.
        assert_eq!(store.poll(now), PollOutcome::Unchanged);
        assert_eq!(store.poll(now), PollOutcome::Unchanged);
        assert_eq!(store.status().reloads.refused, 1);

        // Put back: the files hold the certificate in use again.
        f.put_leaf(&a, &ca);
        assert_eq!(store.poll(now), PollOutcome::Unchanged);
        assert!(store.refusal().is_none());
        assert_eq!(
            metric(&registry, "portico_tls_cert_reload_failing", None),
            0.0
        );

        // Garbage, then a good pair: the good one is applied and the refusal cleared.
        f.put("garbage", "garbage");
        store.poll(now);
        assert_eq!(store.poll(now), PollOutcome::Refused);
        f.put_leaf(&b, &ca);
        store.poll(now);
        assert_eq!(store.poll(now), PollOutcome::Applied);
        assert!(store.refusal().is_none());
        assert_eq!(store.current().info.subject, "CN=b");
        assert_eq!(store.status().reloads.applied, 1);
        assert_eq!(store.status().reloads.refused, 2);
    }

    #[test]
    fn the_listener_offers_h2_then_http1_with_tls12_and_13_only() {
        let ca = ca();
        let a = leaf(&ca, "a", 90);
        let f = Files::new();
        f.put_leaf(&a, &ca);
        let (store, _registry) = store(&f);
        let acceptor = store.listener_settings().unwrap().build();
        let config = acceptor.acceptor.config();
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        // Every suite is an AEAD one (TLS 1.3, or TLS 1.2 with ECDHE and GCM/ChaCha20).
        for suite in &config.crypto_provider().cipher_suites {
            let name = format!("{:?}", suite.suite());
            assert!(
                name.starts_with("TLS13_")
                    || (name.starts_with("TLS_ECDHE_")
                        && (name.contains("_GCM_") || name.contains("CHACHA20_POLY1305"))),
                "{name}"
            );
        }
    }
}
