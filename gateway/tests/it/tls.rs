//! TLS for merchant traffic over real processes (docs/operations/gateway.md, "TLS"; docs/SECURITY.md,
//! "TLS"): a gateway started with `--tls-listen`, `--tls-cert` and `--tls-key` on
//! certificates made here by a test CA. HTTP/2 by ALPN and HTTP/1.1 on the same listener, the
//! same pipeline as the plain listener, TLS 1.2 and 1.3 only, modern cipher suites only, the
//! certificate replaced under load without a failed request, broken replacements refused, the
//! request head deadline over TLS, sessions resumed on any gateway sharing the ticket keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedKey as Issued, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---- certificates ----------------------------------------------------------------------------

/// A test CA and the server certificates it issues.
struct Pki {
    ca: Issued,
}

impl Pki {
    fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Portico TLS test CA");
        let cert = params.self_signed(&key).unwrap();
        Pki {
            ca: Issued {
                cert,
                key_pair: key,
            },
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1 with common name `cn`.
    fn leaf(&self, cn: &str) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params
            .signed_by(&key, &self.ca.cert, &self.ca.key_pair)
            .unwrap();
        Issued {
            cert,
            key_pair: key,
        }
    }

    fn ca_pem(&self) -> String {
        self.ca.cert.pem()
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.cert.der().clone()).unwrap();
        roots
    }
}

/// SHA-256 of a certificate's DER as `/status` shows it (`AB:CD:...`).
fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The certificate and key files the gateway serves.
struct CertDir {
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

impl CertDir {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        CertDir {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
            dir,
        }
    }

    /// Replaces both files, each atomically (written aside, then renamed over), key first.
    fn put(&self, cert: &str, key: &str) {
        for (path, text) in [(&self.key, key), (&self.cert, cert)] {
            let tmp = self.dir.path().join(".incoming.pem");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
    }

    /// The server certificate then the CA (a chain file), and its key.
    fn put_leaf(&self, leaf: &Issued, pki: &Pki) {
        self.put(
            &format!("{}{}", leaf.cert.pem(), pki.ca_pem()),
            &leaf.key_pair.serialize_pem(),
        );
    }
}

// ---- the gateway -------------------------------------------------------------------------------

struct Env {
    pki: Pki,
    certs: CertDir,
    first: Issued,
    tls: SocketAddr,
    _tree: ConfigTree,
    _backend: BackendProcess,
    gw: GatewayProcess,
}

fn routes(tree: &ConfigTree, prefix: &str, backend: &BackendProcess) {
    tree.put(
        &format!("{prefix}clusters/demo-http"),
        &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string(), "weight": 1}]}),
    );
    tree.put(
        &format!("{prefix}apis/public.health"),
        &json!({
            "id": "public.health",
            "http": {"method": "GET", "path": "/v1/health"},
            "backend": {"cluster": "demo-http", "http": {"path": "/health"}},
            "auth": "none"
        }),
    );
}

/// A gateway on a tree with `GET /v1/health` (no signature), serving the certificate
/// `CN=first` on a TLS listener, plus `extra` arguments.
fn env(extra: &[&str]) -> Env {
    let backend = BackendProcess::start_http().expect("demo backend");
    let tree = ConfigTree::new();
    routes(&tree, "", &backend);
    let pki = Pki::new();
    let certs = CertDir::new();
    let first = pki.leaf("first");
    certs.put_leaf(&first, &pki);
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = vec![
        "--tls-listen".to_owned(),
        tls.to_string(),
        "--tls-cert".to_owned(),
        certs.cert.display().to_string(),
        "--tls-key".to_owned(),
        certs.key.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = GatewayProcess::start(tree.path(), &args);
    Env {
        pki,
        certs,
        first,
        tls,
        _tree: tree,
        _backend: backend,
        gw,
    }
}

// ---- clients -----------------------------------------------------------------------------------

/// An HTTPS client trusting only the test CA. `http1`: HTTP/1.1 only; otherwise HTTP/2 when
/// the server offers it by ALPN (no prior knowledge).
fn https_client(pki: &Pki, http1: bool) -> reqwest::blocking::Client {
    let mut b = reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca_pem().as_bytes()).unwrap())
        .tls_info(true)
        .no_proxy()
        .timeout(Duration::from_secs(30));
    if http1 {
        b = b.http1_only();
    }
    b.build().unwrap()
}

fn rustls_config(
    pki: &Pki,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // Every connection is a full handshake, so it shows the certificate served now.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `addr`, handshake complete.
fn tls_connect(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut conn =
        rustls::ClientConnection::new(config.clone(), ServerName::IpAddress(addr.ip().into()))
            .map_err(std::io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    Ok(rustls::StreamOwned::new(conn, tcp))
}

fn peer_fingerprint(tls: &Tls) -> String {
    let certs: &[CertificateDer<'_>] = tls.conn.peer_certificates().unwrap();
    fingerprint(certs[0].as_ref())
}

/// Reads one HTTP/1.1 response with a `content-length`: (status, head, body).
fn read_response(s: &mut impl Read) -> std::io::Result<(u16, String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .ok_or_else(|| std::io::Error::other(format!("no content-length in {head:?}")))?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok((status, head, body))
}

const GET_HEALTH: &[u8] = b"GET /v1/health HTTP/1.1\r\nHost: portico\r\n\r\n";

/// One `GET /v1/health` on an open HTTP/1.1 connection; Ok(status).
fn get_health(s: &mut (impl Read + Write)) -> std::io::Result<u16> {
    s.write_all(GET_HEALTH)?;
    s.flush()?;
    Ok(read_response(s)?.0)
}

/// The fingerprint of the certificate a new full handshake gets.
fn served_fingerprint(e: &Env) -> String {
    let config = rustls_config(&e.pki, rustls::ALL_VERSIONS, &[b"http/1.1"]);
    peer_fingerprint(&tls_connect(e.tls, &config).unwrap())
}

fn metric_value(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

// ---- raw ClientHellos --------------------------------------------------------------------------

/// A ClientHello record offering `suites` at `client_version`, with the groups and signature
/// algorithms a modern client sends, and no supported_versions extension (so `client_version`
/// is the highest version offered, as a TLS 1.0/1.1/1.2 client sends it).
fn client_hello(client_version: u16, suites: &[u16]) -> Vec<u8> {
    fn ext(id: u16, data: &[u8]) -> Vec<u8> {
        let mut v = id.to_be_bytes().to_vec();
        v.extend((data.len() as u16).to_be_bytes());
        v.extend(data);
        v
    }
    fn list16(items: &[u16]) -> Vec<u8> {
        let mut v = ((items.len() * 2) as u16).to_be_bytes().to_vec();
        for i in items {
            v.extend(i.to_be_bytes());
        }
        v
    }
    let mut exts = Vec::new();
    exts.extend(ext(0x000a, &list16(&[0x001d, 0x0017]))); // groups: x25519, P-256
    exts.extend(ext(0x000b, &[1, 0])); // ec_point_formats: uncompressed
    exts.extend(ext(0x000d, &list16(&[0x0403, 0x0804, 0x0401]))); // signature algorithms
    exts.extend(ext(0xff01, &[0])); // renegotiation_info (empty)
    let mut body = client_version.to_be_bytes().to_vec();
    body.extend([0x5a; 32]); // random
    body.push(0); // session id
    body.extend(list16(suites));
    body.extend([1, 0]); // compression: null
    body.extend((exts.len() as u16).to_be_bytes());
    body.extend(exts);
    let mut hs = vec![1]; // client_hello
    hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend(body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend((hs.len() as u16).to_be_bytes());
    record.extend(hs);
    record
}

/// What the server answers to a raw ClientHello.
#[derive(Debug, PartialEq, Eq)]
enum HelloAnswer {
    ServerHello,
    /// A fatal alert with this description.
    Alert(u8),
    Other(Vec<u8>),
}

fn send_hello(addr: SocketAddr, hello: &[u8]) -> HelloAnswer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(hello).unwrap();
    let mut header = [0u8; 5];
    if s.read_exact(&mut header).is_err() {
        return HelloAnswer::Other(Vec::new());
    }
    let len = u16::from_be_bytes([header[3], header[4]]) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).unwrap();
    match (header[0], payload.as_slice()) {
        (0x16, [2, ..]) => HelloAnswer::ServerHello,
        (0x15, [2, desc]) => HelloAnswer::Alert(*desc),
        _ => HelloAnswer::Other([header.as_slice(), &payload].concat()),
    }
}

const ALERT_HANDSHAKE_FAILURE: u8 = 40;
const ALERT_PROTOCOL_VERSION: u8 = 70;
const TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: u16 = 0xc02b;
const TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA: u16 = 0xc009;
const TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA: u16 = 0xc013;
const TLS_RSA_WITH_AES_128_CBC_SHA: u16 = 0x002f;
const TLS_RSA_WITH_3DES_EDE_CBC_SHA: u16 = 0x000a;
const TLS_ECDHE_ECDSA_WITH_RC4_128_SHA: u16 = 0xc007;

// ---- tests -------------------------------------------------------------------------------------

#[test]
fn https_serves_h2_by_alpn_and_http1_with_the_pipeline_and_shows_the_certificate() {
    let e = env(&[]);
    let url = format!("https://{}/v1/health", e.tls);

    let h2 = https_client(&e.pki, false).get(&url).send().unwrap();
    assert_eq!(h2.version(), reqwest::Version::HTTP_2);
    assert_eq!(h2.status(), 200);
    let info = h2.extensions().get::<reqwest::tls::TlsInfo>().unwrap();
    assert_eq!(
        fingerprint(info.peer_certificate().unwrap()),
        fingerprint(e.first.cert.der())
    );

    let h1 = https_client(&e.pki, true).get(&url).send().unwrap();
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert_eq!(h1.status(), 200);
    assert!(h1.headers().contains_key("x-portico-request-id"));

    // The same pipeline: an unknown route gets the envelope, on both protocols.
    for http1 in [false, true] {
        let (status, code, body) = code_of(
            https_client(&e.pki, http1)
                .get(format!("https://{}/v1/nowhere", e.tls))
                .send()
                .unwrap(),
        );
        assert_eq!((status, code.as_str()), (404, "API_NOT_FOUND"), "{body}");
        assert!(body["request_id"].as_str().is_some_and(|r| !r.is_empty()));
    }

    // Plain HTTP stays on --listen.
    let plain = client().get(e.gw.url("/v1/health")).send().unwrap();
    assert_eq!(plain.status(), 200);

    // /status: the listener and the certificate in use.
    let status = e.gw.status();
    let tls = &status["tls"];
    assert_eq!(tls["listen"], e.tls.to_string(), "{tls}");
    let cert = &tls["certificate"];
    assert_eq!(cert["subject"], "CN=first", "{tls}");
    assert_eq!(cert["issuer"], "CN=Portico TLS test CA", "{tls}");
    assert_eq!(
        cert["sha256_fingerprint"],
        fingerprint(e.first.cert.der()),
        "{tls}"
    );
    assert_eq!(cert["chain_length"], 2, "{tls}");
    assert!(cert["not_after"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(cert["loaded_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(tls["reloads"], json!({"applied": 0, "refused": 0}), "{tls}");
    assert!(tls["refused"].is_null(), "{tls}");

    // /metrics: the expiry, and the handshakes just made.
    let metrics = e.gw.metrics();
    assert_eq!(
        metric_value(&metrics, "portico_tls_cert_not_after_seconds"),
        cert["not_after_unix"].as_f64(),
        "{metrics}"
    );
    assert_eq!(
        metric_value(&metrics, "portico_tls_cert_reload_failing"),
        Some(0.0)
    );
    let handshakes: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("portico_tls_handshakes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(handshakes >= 4.0, "{metrics}");
}

#[test]
fn tls_1_2_and_1_3_are_served_and_older_versions_and_weak_suites_refused() {
    let e = env(&[]);
    for (versions, expected) in [
        (
            &[&rustls::version::TLS12][..],
            rustls::ProtocolVersion::TLSv1_2,
        ),
        (
            &[&rustls::version::TLS13][..],
            rustls::ProtocolVersion::TLSv1_3,
        ),
    ] {
        let config = rustls_config(&e.pki, versions, &[b"http/1.1"]);
        let mut tls = tls_connect(e.tls, &config).unwrap();
        assert_eq!(tls.conn.protocol_version(), Some(expected));
        assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(get_health(&mut tls).unwrap(), 200);
    }

    // The raw hello is one the server accepts at TLS 1.2 with a modern suite...
    assert_eq!(
        send_hello(
            e.tls,
            &client_hello(0x0303, &[TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256])
        ),
        HelloAnswer::ServerHello
    );
    // ...and refuses with protocol_version at TLS 1.0 and 1.1, whatever the suites.
    for version in [0x0301, 0x0302] {
        let hello = client_hello(
            version,
            &[
                TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
                TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
                TLS_RSA_WITH_AES_128_CBC_SHA,
                TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            ],
        );
        assert_eq!(
            send_hello(e.tls, &hello),
            HelloAnswer::Alert(ALERT_PROTOCOL_VERSION),
            "TLS version {version:#06x}"
        );
    }
    // TLS 1.2 with only CBC, static-RSA, 3DES or RC4 suites: no suite in common.
    let weak = client_hello(
        0x0303,
        &[
            TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
            TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
            TLS_RSA_WITH_AES_128_CBC_SHA,
            TLS_RSA_WITH_3DES_EDE_CBC_SHA,
            TLS_ECDHE_ECDSA_WITH_RC4_128_SHA,
        ],
    );
    assert_eq!(
        send_hello(e.tls, &weak),
        HelloAnswer::Alert(ALERT_HANDSHAKE_FAILURE)
    );
    // The listener still serves after the refusals.
    assert_eq!(served_fingerprint(&e), fingerprint(e.first.cert.der()));
}

/// What the load threads saw.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, what: &str, r: Result<u16, String>) {
        match r {
            Ok(200) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut errors = self.errors.lock().unwrap();
                if errors.len() < 20 {
                    errors.push(format!("{what}: {other:?}"));
                }
            }
        }
    }
}

#[test]
fn a_certificate_replaced_under_load_fails_no_request() {
    let e = env(&[]);
    let second = e.pki.leaf("second");
    let (first_fp, second_fp) = (
        fingerprint(e.first.cert.der()),
        fingerprint(second.cert.der()),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let url = format!("https://{}/v1/health", e.tls);
    let mut threads = Vec::new();

    // Kept-alive connections through reqwest: HTTP/2 and HTTP/1.1.
    for http1 in [false, false, true, true] {
        let (client, url, stop, tally) = (
            https_client(&e.pki, http1),
            url.clone(),
            stop.clone(),
            tally.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let what = if http1 {
                "reqwest http/1.1"
            } else {
                "reqwest h2"
            };
            while !stop.load(Ordering::Relaxed) {
                let r = client.get(&url).send();
                tally.record(
                    what,
                    r.map(|r| r.status().as_u16()).map_err(|e| format!("{e:?}")),
                );
            }
        }));
    }

    // One connection kept open across the swap: it keeps the certificate it started with.
    let kept = {
        let config = rustls_config(&e.pki, rustls::ALL_VERSIONS, &[b"http/1.1"]);
        let mut tls = tls_connect(e.tls, &config).unwrap();
        let (stop, tally) = (stop.clone(), tally.clone());
        std::thread::spawn(move || {
            let fp = peer_fingerprint(&tls);
            let mut served = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tally.record(
                    "kept-alive connection",
                    get_health(&mut tls).map_err(|e| e.to_string()),
                );
                served += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            (fp, served)
        })
    };

    // New connections, each a full handshake: which certificate did each get?
    let mut fresh = Vec::new();
    for _ in 0..2 {
        let config = rustls_config(&e.pki, rustls::ALL_VERSIONS, &[b"http/1.1"]);
        let (addr, stop, tally) = (e.tls, stop.clone(), tally.clone());
        fresh.push(std::thread::spawn(move || {
            let mut seen: Vec<String> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let r = tls_connect(addr, &config).and_then(|mut tls| {
                    let fp = peer_fingerprint(&tls);
                    tls.write_all(
                        b"GET /v1/health HTTP/1.1\r\nHost: portico\r\nConnection: close\r\n\r\n",
                    )?;
                    let status = read_response(&mut tls)?.0;
                    seen.push(fp);
                    Ok(status)
                });
                tally.record("new connection", r.map_err(|e| e.to_string()));
            }
            seen
        }));
    }

    // Load before the swap.
    assert!(wait_until(Duration::from_secs(20), || tally
        .ok
        .load(Ordering::Relaxed)
        >= 200));
    let before_swap = tally.ok.load(Ordering::Relaxed);
    let swapped_at = Instant::now();
    e.certs.put_leaf(&second, &e.pki);
    assert!(
        wait_until(Duration::from_secs(20), || served_fingerprint(&e)
            == second_fp),
        "new handshakes never got the new certificate"
    );
    let applied_after = swapped_at.elapsed();
    // Load after the swap, then stop.
    let at_swap = tally.ok.load(Ordering::Relaxed);
    assert!(wait_until(Duration::from_secs(20), || tally
        .ok
        .load(Ordering::Relaxed)
        >= at_swap + 200));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let (kept_fp, kept_served) = kept.join().unwrap();
    let seen: Vec<Vec<String>> = fresh.into_iter().map(|t| t.join().unwrap()).collect();

    let ok = tally.ok.load(Ordering::Relaxed);
    let failed = tally.failed.load(Ordering::Relaxed);
    eprintln!(
        "certificate swap under load: {ok} requests ok ({before_swap} before the swap), \
         {failed} failed; new certificate served {applied_after:?} after the rename; \
         kept-alive connection served {kept_served} requests"
    );
    assert_eq!(
        failed,
        0,
        "failed requests: {:?}",
        tally.errors.lock().unwrap()
    );
    // The kept connection started on the old certificate and stayed open across the swap.
    assert_eq!(kept_fp, first_fp);
    assert!(kept_served > 10);
    // Each new-connection thread saw the old certificate, then the new one, never back.
    for s in &seen {
        let switch = s.iter().position(|fp| *fp == second_fp);
        let switch = switch.expect("a new connection got the new certificate");
        assert!(switch > 0, "no handshake before the swap");
        assert!(s[..switch].iter().all(|fp| *fp == first_fp));
        assert!(s[switch..].iter().all(|fp| *fp == second_fp));
    }

    let status = e.gw.status();
    let tls = &status["tls"];
    assert_eq!(tls["certificate"]["subject"], "CN=second", "{tls}");
    assert_eq!(tls["certificate"]["sha256_fingerprint"], second_fp, "{tls}");
    assert_eq!(tls["reloads"]["applied"], 1, "{tls}");
    let metrics = e.gw.metrics();
    assert_eq!(
        metric_value(
            &metrics,
            "portico_tls_cert_reloads_total{result=\"applied\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

#[test]
fn a_broken_replacement_is_refused_and_the_certificate_in_use_stays() {
    let e = env(&[]);
    let first_fp = fingerprint(e.first.cert.der());
    let other = e.pki.leaf("other");
    let refused = |n: u64| {
        wait_until(Duration::from_secs(20), || {
            e.gw.status()["tls"]["reloads"]["refused"].as_u64() == Some(n)
        })
    };

    // A certificate with a key that is not its own.
    e.certs
        .put(&other.cert.pem(), &e.first.key_pair.serialize_pem());
    assert!(refused(1), "{}", e.gw.status()["tls"]);
    let status = e.gw.status();
    let reason = status["tls"]["refused"]["reason"].as_str().unwrap();
    assert!(reason.contains("does not match"), "{reason}");
    assert_eq!(status["tls"]["certificate"]["sha256_fingerprint"], first_fp);
    assert_eq!(served_fingerprint(&e), first_fp);
    let metrics = e.gw.metrics();
    assert_eq!(
        metric_value(&metrics, "portico_tls_cert_reload_failing"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric_value(
            &metrics,
            "portico_tls_cert_reloads_total{result=\"refused\"}"
        ),
        Some(1.0),
        "{metrics}"
    );

    // Garbage, and a truncated certificate.
    e.certs.put("not a certificate\n", "not a key\n");
    assert!(refused(2), "{}", e.gw.status()["tls"]);
    let pem = other.cert.pem();
    e.certs
        .put(&pem[..pem.len() / 2], &other.key_pair.serialize_pem());
    assert!(refused(3), "{}", e.gw.status()["tls"]);
    assert_eq!(served_fingerprint(&e), first_fp);
    let https = https_client(&e.pki, false);
    let r = https
        .get(format!("https://{}/v1/health", e.tls))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);

    // A good pair is applied and clears the refusal.
    e.certs.put_leaf(&other, &e.pki);
    let other_fp = fingerprint(other.cert.der());
    assert!(wait_until(Duration::from_secs(20), || served_fingerprint(
        &e
    ) == other_fp));
    let status = e.gw.status();
    assert!(status["tls"]["refused"].is_null(), "{}", status["tls"]);
    assert_eq!(status["tls"]["reloads"]["applied"], 1);
    assert_eq!(
        metric_value(&e.gw.metrics(), "portico_tls_cert_reload_failing"),
        Some(0.0)
    );
}

#[test]
fn the_request_head_deadline_applies_to_http1_over_tls() {
    let e = env(&["--head-timeout-ms", "500"]);
    let config = rustls_config(&e.pki, rustls::ALL_VERSIONS, &[b"http/1.1"]);
    let mut slow = tls_connect(e.tls, &config).unwrap();
    assert_eq!(slow.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    slow.write_all(b"GET /v1/health HTTP/1.1\r\n").unwrap();
    slow.flush().unwrap();
    slow.sock
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();

    // One header byte every 200 ms: without the deadline, 60 s a byte.
    let started = Instant::now();
    let mut received = Vec::new();
    let mut closed = false;
    for _ in 0..30 {
        let mut buf = [0u8; 1024];
        match slow.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => closed = true,
        }
        if closed || slow.write_all(b"a").and_then(|_| slow.flush()).is_err() {
            closed = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    assert!(
        closed,
        "the server kept a trickling head over TLS open for {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    let reply = String::from_utf8_lossy(&received);
    assert!(reply.starts_with("HTTP/1.1 408 "), "{reply}");

    // Other TLS connections are served, and an idle kept-alive one is not cut off.
    let mut idle = tls_connect(e.tls, &config).unwrap();
    assert_eq!(get_health(&mut idle).unwrap(), 200);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(get_health(&mut idle).unwrap(), 200);
}

#[test]
fn the_sandbox_tls_listener_serves_the_sandbox_tree() {
    let backend = BackendProcess::start_http().expect("demo backend");
    let tree = ConfigTree::new();
    // Only the sandbox tree has the route.
    routes(&tree, "sandbox/", &backend);
    let pki = Pki::new();
    let certs = CertDir::new();
    let leaf = pki.leaf("sandbox");
    certs.put_leaf(&leaf, &pki);
    let port = |_| format!("127.0.0.1:{}", free_port());
    let [tls, sandbox, sandbox_tls] = [0, 1, 2].map(port);
    let gw = GatewayProcess::start(
        tree.path(),
        &[
            "--sandbox-listen",
            &sandbox,
            "--tls-listen",
            &tls,
            "--sandbox-tls-listen",
            &sandbox_tls,
            "--tls-cert",
            &certs.cert.display().to_string(),
            "--tls-key",
            &certs.key.display().to_string(),
        ],
    );
    let https = https_client(&pki, false);
    let on = |addr: &str| {
        https
            .get(format!("https://{addr}/v1/health"))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(on(&sandbox_tls), 200);
    assert_eq!(on(&tls), 404);
    assert_eq!(gw.status()["tls"]["sandbox_listen"], sandbox_tls.as_str());
}

#[test]
fn a_bad_certificate_stops_the_start_with_its_reason() {
    let pki = Pki::new();
    let certs = CertDir::new();
    let (a, b) = (pki.leaf("a"), pki.leaf("b"));
    certs.put(&a.cert.pem(), &b.key_pair.serialize_pem());
    let tree = ConfigTree::new();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_portico-gateway"))
            .args(["--config-dir", &tree.path().display().to_string()])
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--internal-listen", "off"])
            .args(args)
            .env("PORTICO_LOG", "warn")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let tls = format!("127.0.0.1:{}", free_port());
    let (cert, key) = (
        certs.cert.display().to_string(),
        certs.key.display().to_string(),
    );
    let err = run(&["--tls-listen", &tls, "--tls-cert", &cert, "--tls-key", &key]);
    assert!(err.contains("does not match"), "{err}");
    // A TLS listener without a certificate is a usage error.
    let err = run(&["--tls-listen", &tls]);
    assert!(err.contains("--tls-cert"), "{err}");
}

// ---- session resumption ------------------------------------------------------------------------

/// A ticket key file in the format of `ops/tls-ticket-keys.sh`.
fn ticket_keys(dir: &std::path::Path, name: &str, keys: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let text: String = keys
        .iter()
        .map(|k| format!("{}\n", format!("{k:02x}").repeat(32)))
        .collect();
    std::fs::write(&path, format!("# test keys\n{text}")).unwrap();
    path
}

/// A second gateway beside `e`'s, on the same tree and certificate: one more node of the fleet.
fn another_gateway(e: &Env, extra: &[&str]) -> (GatewayProcess, SocketAddr) {
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = vec![
        "--tls-listen".to_owned(),
        tls.to_string(),
        "--tls-cert".to_owned(),
        e.certs.cert.display().to_string(),
        "--tls-key".to_owned(),
        e.certs.key.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (GatewayProcess::start(e._tree.path(), &args), tls)
}

/// A client keeping its own TLS sessions (rustls' in-memory store), as a merchant's does.
fn resuming_config(
    pki: &Pki,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// One call on a new connection; whether its handshake was resumed. The call also reads the
/// tickets a TLS 1.3 server sends after the handshake.
fn call_resumed(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> bool {
    let mut tls = tls_connect(addr, config).unwrap();
    let resumed = tls.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    assert_eq!(get_health(&mut tls).unwrap(), 200);
    resumed
}

fn resumptions(metrics: &str, via: &str) -> f64 {
    metric_value(
        metrics,
        &format!("portico_tls_resumptions_total{{via=\"{via}\"}}"),
    )
    .unwrap_or(0.0)
}

/// Returning merchants resume on any gateway of a fleet sharing `--tls-ticket-keys`: after
/// 300 other clients (more than rustls' default 256-entry session cache held), 50 returning
/// clients resume 50 of 50 on the other gateway, with TLS 1.3 and TLS 1.2 tickets; a gateway
/// with other keys makes full handshakes; the previous key of a rotation still opens the
/// tickets it sealed.
#[test]
fn returning_clients_resume_on_any_gateway_sharing_the_ticket_keys() {
    let keys_dir = tempfile::tempdir().unwrap();
    let shared = ticket_keys(keys_dir.path(), "fleet", &[1]);
    let shared_arg = shared.display().to_string();
    let e = env(&["--tls-ticket-keys", &shared_arg]);
    let (b, b_tls) = another_gateway(&e, &["--tls-ticket-keys", &shared_arg]);

    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let returning: Vec<_> = (0..50).map(|_| resuming_config(&e.pki, versions)).collect();
        for c in &returning {
            assert!(!call_resumed(e.tls, c), "a first visit is a full handshake");
        }
        for _ in 0..300 {
            let other = resuming_config(&e.pki, versions);
            call_resumed(e.tls, &other);
        }
        let resumed = returning.iter().filter(|c| call_resumed(b_tls, c)).count();
        assert_eq!(resumed, 50, "{versions:?}: resumed on the other gateway");
    }
    assert!(
        resumptions(&b.metrics(), "ticket") >= 100.0,
        "{}",
        b.metrics()
    );

    // OpenSSL's client, sessions kept in a file: resumed on the other gateway too.
    let sess = keys_dir.path().join("openssl.session");
    let ca = keys_dir.path().join("ca.pem");
    std::fs::write(&ca, e.pki.ca_pem()).unwrap();
    let s_client = |addr: SocketAddr, sess_flag: &str| {
        let mut child = std::process::Command::new("openssl")
            .args(["s_client", "-connect", &addr.to_string(), "-CAfile"])
            .arg(&ca)
            .arg(sess_flag)
            .arg(&sess)
            .args(["-ign_eof", "-alpn", "http/1.1"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("openssl (Debian's openssl package)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"GET /v1/health HTTP/1.1\r\nHost: portico\r\nConnection: close\r\n\r\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let first = s_client(e.tls, "-sess_out");
    assert!(first.contains("New, TLSv1.3"), "{first}");
    let again = s_client(b_tls, "-sess_in");
    assert!(again.contains("Reused, TLSv1.3"), "{again}");
    assert!(again.contains("HTTP/1.1 200"), "{again}");

    // A gateway with other keys cannot open the fleet's tickets: a full handshake, served.
    let foreign = ticket_keys(keys_dir.path(), "foreign", &[9]);
    let (_c, c_tls) = another_gateway(&e, &["--tls-ticket-keys", &foreign.display().to_string()]);
    let client = resuming_config(&e.pki, &[&rustls::version::TLS13]);
    call_resumed(e.tls, &client);
    assert!(!call_resumed(c_tls, &client));

    // Rotation: a fresh key seals, the previous one still opens what it sealed; the key
    // before that is erased, and its tickets make full handshakes.
    let (before, kept_aside) = (
        resuming_config(&e.pki, &[&rustls::version::TLS13]),
        resuming_config(&e.pki, &[&rustls::version::TLS13]),
    );
    call_resumed(e.tls, &before);
    call_resumed(e.tls, &kept_aside);
    let applied = |n: f64| {
        let gateways = [&e.gw, &b];
        wait_until(Duration::from_secs(20), || {
            gateways.iter().all(|g| {
                metric_value(
                    &g.metrics(),
                    "portico_tls_ticket_key_reloads_total{result=\"applied\"}",
                ) == Some(n)
            })
        })
    };
    ticket_keys(keys_dir.path(), "fleet", &[2, 1]);
    assert!(applied(1.0), "the rotated key file was not applied");
    assert!(call_resumed(b_tls, &before), "a ticket of the previous key");
    let after = resuming_config(&e.pki, &[&rustls::version::TLS13]);
    call_resumed(b_tls, &after);
    ticket_keys(keys_dir.path(), "fleet", &[3, 2]);
    assert!(applied(2.0), "the second rotation was not applied");
    assert!(
        !call_resumed(e.tls, &kept_aside),
        "a ticket of an erased key"
    );
    assert!(call_resumed(e.tls, &after), "a ticket of the previous key");
}

/// Without a key file each gateway seals with its own key: a client resumes on the gateway
/// that served it (tickets and, for TLS 1.2 clients without tickets, session IDs), not on
/// another one.
#[test]
fn without_a_key_file_sessions_resume_on_the_same_gateway_only() {
    let e = env(&[]);
    let (_b, b_tls) = another_gateway(&e, &[]);
    let client = resuming_config(&e.pki, &[&rustls::version::TLS13]);
    assert!(!call_resumed(e.tls, &client));
    assert!(call_resumed(e.tls, &client));
    assert!(!call_resumed(b_tls, &client));

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut ids_only = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(e.pki.roots())
        .with_no_client_auth();
    ids_only.alpn_protocols = vec![b"http/1.1".to_vec()];
    ids_only.resumption = rustls::client::Resumption::in_memory_sessions(8)
        .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
    let ids_only = Arc::new(ids_only);
    assert!(!call_resumed(e.tls, &ids_only));
    assert!(call_resumed(e.tls, &ids_only));
    assert!(
        resumptions(&e.gw.metrics(), "session_id") >= 1.0,
        "{}",
        e.gw.metrics()
    );
}
