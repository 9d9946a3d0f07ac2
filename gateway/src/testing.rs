//! Test support for the gateway's unit tests: hand-built snapshot pieces (an API, an app, a
//! cluster), a routed context and a request for the stages; a plane over a configuration
//! tree, a Pingora session over an in-memory connection and a loopback HTTP backend for the
//! runtime, the pipeline, the invoke tier and the rescue point.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::edge::{EdgeCtx, EdgeRequest};
use crate::invoke::breaker::ManualClock;
use crate::invoke::Clients;
use crate::model::RouteMatch;
use crate::observe::access_log::{AccessLog, LogTarget};
use crate::observe::metrics::Metrics;
use crate::runtime::{Plane, PlaneKind, Shared};
use pingora_proxy::Session;
use portico_control::template::PathTemplate;
use portico_control::{v1, Api, BackendKind, Binding, Tree};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// The clock of the signing examples of docs/PROTOCOL.md.
pub const NOW_MS: u64 = 1_796_000_000_000;

/// An API with no bindings (stages after `route` never look at them).
pub fn api(id: &str, auth: v1::AuthMode, rate_limits: Vec<v1::RateLimitRule>) -> Arc<Api> {
    let policy = v1::Policy {
        rate_limits,
        ..v1::Policy::default()
    };
    Arc::new(api_with(
        id,
        &[],
        BackendKind::Http { path: None },
        policy,
        auth,
    ))
}

/// An API bound to `bindings` (method, path template), calling `backend` on cluster `c`.
pub fn api_with(
    id: &str,
    bindings: &[(&str, &str)],
    backend: BackendKind,
    policy: v1::Policy,
    auth: v1::AuthMode,
) -> Api {
    let bindings: Vec<Binding> = bindings
        .iter()
        .map(|(method, path)| Binding {
            method: (*method).to_owned(),
            template: PathTemplate::parse(path).unwrap(),
            body: None,
            response_body: None,
        })
        .collect();
    let (method, path) = bindings
        .first()
        .map(|b| (b.method.clone(), b.template.raw.clone()))
        .unwrap_or_else(|| ("GET".to_owned(), format!("/{id}")));
    let definition = v1::ApiDefinition {
        id: id.to_owned(),
        version: 1,
        http: v1::HttpRule {
            method,
            path,
            body: None,
            response_body: None,
            additional_bindings: Vec::new(),
        },
        backend: v1::Backend {
            cluster: "c".to_owned(),
            timeout_ms: 1000,
            grpc: None,
            http: Some(v1::HttpBackend::default()),
        },
        auth,
        policy: policy.clone(),
        description: None,
        request_schema: None,
        response_schema: None,
        owner: None,
    };
    Api {
        id: id.to_owned(),
        version: 1,
        bindings,
        backend,
        cluster: "c".to_owned(),
        timeout_ms: 1000,
        auth,
        policy,
        definition,
    }
}

/// An app document.
pub fn app(
    secret: &str,
    status: v1::AppStatus,
    apis: &[&str],
    rate_limits: Vec<v1::AppRateLimit>,
) -> Arc<v1::App> {
    Arc::new(v1::App {
        secret: secret.to_owned(),
        status,
        apis: apis.iter().map(|s| (*s).to_owned()).collect(),
        rate_limits,
        name: None,
        topics: Vec::new(),
        callback_url: None,
    })
}

/// A cluster document over `endpoints` (address, weight).
pub fn cluster(endpoints: &[(&str, u32)]) -> Arc<v1::Cluster> {
    Arc::new(v1::Cluster {
        protocol: v1::Protocol::Http,
        endpoints: endpoints
            .iter()
            .map(|(addr, weight)| v1::Endpoint {
                addr: (*addr).to_owned(),
                weight: *weight,
            })
            .collect(),
        host: None,
        balancing: None,
        hash_key: None,
        sticky: None,
        health_check: None,
        outlier: None,
        standby: None,
        active: None,
        sleep: None,
        autoscale: None,
        grpc: None,
    })
}

/// A context as `route` leaves it for `api`.
pub fn routed(api: &Arc<Api>) -> EdgeCtx {
    EdgeCtx {
        route: Some(RouteMatch {
            api: Arc::clone(api),
            binding: Some(0),
            vars: Vec::new(),
            router_style: false,
        }),
        ..EdgeCtx::default()
    }
}

/// A bodiless GET of `path` from `peer` at [`NOW_MS`].
pub fn get<'a>(
    path: &'a str,
    headers: &'a http::HeaderMap,
    peer: Option<IpAddr>,
) -> EdgeRequest<'a> {
    EdgeRequest {
        method: "GET",
        path,
        query: None,
        headers,
        peer,
        body: b"",
        now_ms: NOW_MS,
    }
}

/// Process-wide services for tests: fresh metrics, no access log, a manual breaker clock.
pub fn shared() -> Arc<Shared> {
    let metrics = Metrics::new().unwrap();
    let access_log = AccessLog::start(LogTarget::Off, metrics.access_log_dropped.clone()).unwrap();
    Arc::new(Shared {
        metrics,
        access_log,
        clients: Clients::default(),
        clock: Arc::new(ManualClock::new(0)),
        node_id: "test-node".to_owned(),
        default_max_body: 1024,
        replay_bytes_per_app: crate::edge::replay::ReplayCache::DEFAULT_BYTES_PER_APP,
        started_ms: 0,
        write_timeout: std::time::Duration::from_secs(5),
        fleet: Arc::new(crate::fleet::Fleet::default()),
        notify: Arc::new(crate::notify::Notifier::new(
            crate::notify::Config::default(),
            Arc::new(crate::fleet::Fleet::default()),
        )),
    })
}

/// A live plane on fresh [`shared`] services, serving nothing yet.
pub fn plane() -> Plane {
    Plane::new(PlaneKind::Live, shared())
}

/// A configuration tree of JSON documents (`apis/a`, `clusters/c`, ...).
pub fn tree(docs: &[(&str, Value)]) -> Tree {
    let mut tree = Tree::default();
    for (path, doc) in docs {
        assert!(
            tree.insert(path, serde_json::to_vec(doc).unwrap()),
            "{path}"
        );
    }
    tree
}

/// An `apis/<id>` document: `GET /v1/<id>` (and `/v1/<id>/{rest=**}`), an HTTP backend on
/// `cluster` with `rewrite` as its path, no signature, and `policy`.
pub fn http_api_doc(id: &str, cluster: &str, rewrite: Option<&str>, policy: Value) -> Value {
    let mut http = serde_json::json!({});
    if let Some(path) = rewrite {
        http["path"] = Value::from(path);
    }
    serde_json::json!({
        "id": id,
        "version": 1,
        "http": {
            "method": "GET",
            "path": format!("/v1/{id}"),
            "additional_bindings": [{"method": "POST", "path": format!("/v1/{id}/{{rest=**}}")}],
        },
        "backend": {"cluster": cluster, "timeout_ms": 2000, "http": http},
        "auth": "none",
        "policy": policy,
    })
}

/// A `clusters/<name>` document over `addrs`, each of weight 1.
pub fn cluster_doc(addrs: &[String]) -> Value {
    let endpoints: Vec<Value> = addrs
        .iter()
        .map(|a| serde_json::json!({"addr": a, "weight": 1}))
        .collect();
    serde_json::json!({"protocol": "http", "endpoints": endpoints})
}

/// A Pingora session that has read the request head `raw` from an in-memory connection, and
/// the client's end of that connection (its body, if any, follows in `raw`).
pub async fn session(raw: &[u8]) -> (Session, DuplexStream) {
    let (server, mut client) = tokio::io::duplex(256 * 1024);
    client.write_all(raw).await.unwrap();
    let mut session = Session::new_h1(Box::new(server));
    assert!(session.read_request().await.unwrap(), "no request head");
    (session, client)
}

/// Everything the server wrote to `client` once `session` is dropped (the connection closed).
pub async fn written(session: Session, mut client: DuplexStream) -> String {
    drop(session);
    let mut out = Vec::new();
    client.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// A loopback HTTP/1.1 backend: answers every request with `status` and `body` and closes
/// the connection, recording each request head it read.
pub struct Backend {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    /// Binds an ephemeral loopback port and serves on it.
    pub async fn start(status: u16, body: &'static str) -> Backend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let head = read_head(&mut conn).await;
                    log.lock().unwrap().push(head);
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Backend { addr, seen, task }
    }

    /// The request heads seen so far.
    pub fn heads(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads a request: its head, then as many body bytes as its `content-length` says. Returns
/// the head followed by the body.
async fn read_head(conn: &mut tokio::net::TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let length = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = conn.read_exact(&mut body).await;
    text + &String::from_utf8_lossy(&body)
}

/// A loopback address nothing listens on (connections to it are refused).
pub fn closed_addr() -> String {
    format!("127.0.0.1:{}", portico_testkit::free_port())
}
