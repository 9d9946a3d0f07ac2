//! The HTTP demo API (JSON), with fault injection and a request counter.
//!
//! | route | answer |
//! |---|---|
//! | `GET /orders/{id}` | `{"order_id": id, "item": "book", "qty": 1, "status": "PAID"}` |
//! | `POST /orders` | `{"created": <the JSON body>, "order_id": "ord-000001"}`; 400 if the body is not JSON |
//! | any method on `/echo` and `/echo/**` | the request as seen here, see [`Echo`] (with `Server: portico-demo` and `X-Powered-By: axum`, as many backends tell) |
//! | `GET /bytes/{n}` | `n` bytes of `x` (`application/octet-stream`, at most [`MAX_BYTES_ANSWER`]): a large answer for slow-reader tests |
//! | any method on `/health` | `{"status": "ok"}` |
//! | `GET /healthz` | `{"status": "ok"}` (the health check path; not counted) |
//! | `/__admin*` | the backend's switches: load report, faults, sleep (see [`crate::control`]) |
//! | `GET /__stats` | `{"requests": N, "in_flight": N, "by_path": {"/orders/42": 1}}` |
//! | `POST /__stats/reset` | zeroes the counters, answers the stats before the reset |
//! | anything else | 404 `{"error": "NOT_FOUND", "path": ...}` |
//!
//! Fault injection works on every route but `/__stats*`, from a query parameter or a header
//! (the header wins when both are given; a value that does not parse is ignored):
//!
//! - `delay_ms=N` / `X-Demo-Delay-Ms: N`: sleep N ms before answering;
//! - `status=S` / `X-Demo-Status: S` (200–599): answer S with
//!   `{"injected_status": S, "method": ..., "path": ...}` instead of the route's answer
//!   (after the delay, if any);
//! - `hang=1` / `X-Demo-Hang: 1`: never answer, until the client goes away;
//! - `cache_control=V` / `X-Demo-Cache-Control: V`: add `Cache-Control: V` to the answer
//!   (for the gateway's response cache tests);
//! - `vary=V` / `X-Demo-Vary: V`: add `Vary: V` to the answer (likewise).
//!
//! Every request but `/__stats*` is counted when it arrives (before any fault), so a test can
//! tell whether the gateway touched the backend; `in_flight` counts requests being answered
//! (a hanging one stays in flight until its client closes). Every answer carries
//! `X-Demo-Instance: <bound address>` so a test can tell which endpoint served it.
//! Nothing is logged per request unless `verbose` is set.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::control::Control;

/// The largest request body the demo backend reads (well above the gateway's 1 MiB default).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The response header naming the instance (its bound address) that answered.
pub const INSTANCE_HEADER: &str = "x-demo-instance";

/// Options of the HTTP demo server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Log one line per request to stderr.
    pub verbose: bool,
    /// The switches shared with the gRPC server (load, faults, sleep).
    pub control: Arc<Control>,
}

/// Request counters, shared by every connection.
#[derive(Debug, Default)]
pub struct Stats {
    requests: AtomicU64,
    in_flight: AtomicI64,
    by_path: Mutex<HashMap<String, u64>>,
}

/// The JSON answer of `GET /__stats`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct StatsView {
    pub requests: u64,
    pub in_flight: i64,
    pub by_path: BTreeMap<String, u64>,
}

impl Stats {
    fn record(&self, path: &str) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut by_path = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        match by_path.get_mut(path) {
            Some(n) => *n += 1,
            None => {
                by_path.insert(path.to_owned(), 1);
            }
        }
    }

    /// The counters as they are now.
    pub fn view(&self) -> StatsView {
        let by_path = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        StatsView {
            requests: self.requests.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            by_path: by_path.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        }
    }

    /// Zeroes the request counters (not `in_flight`, which tracks live requests) and
    /// returns what they were.
    pub fn reset(&self) -> StatsView {
        let mut by_path = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        StatsView {
            requests: self.requests.swap(0, Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            by_path: by_path.drain().collect(),
        }
    }
}

/// Decrements `in_flight` when a request's future ends, answered or dropped.
struct InFlight<'a>(&'a AtomicI64);

impl<'a> InFlight<'a> {
    fn enter(counter: &'a AtomicI64) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        InFlight(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

struct AppState {
    stats: Arc<Stats>,
    control: Arc<Control>,
    instance: HeaderValue,
    instance_str: String,
    next_order: AtomicU64,
    verbose: bool,
}

type Shared = Arc<AppState>;

/// Builds the demo API for an instance bound at `instance`, counting into `stats`.
pub fn router(instance: SocketAddr, stats: Arc<Stats>, options: &Options) -> Router {
    let instance_str = instance.to_string();
    let state: Shared = Arc::new(AppState {
        stats,
        control: options.control.clone(),
        instance: HeaderValue::from_str(&instance_str)
            .unwrap_or_else(|_| HeaderValue::from_static("unknown")),
        instance_str,
        next_order: AtomicU64::new(1),
        verbose: options.verbose,
    });
    Router::new()
        .route("/orders/{id}", get(get_order))
        .route("/orders", post(create_order))
        .route("/echo", any(echo))
        .route("/echo/", any(echo))
        .route("/echo/{*rest}", any(echo))
        .route("/bytes/{n}", get(bytes))
        .route("/health", any(health))
        .route("/healthz", get(health))
        .route("/__admin", get(admin_get))
        .route("/__admin/load", post(admin_load))
        .route("/__admin/faults", post(admin_faults))
        .route("/__admin/sleep", post(admin_sleep))
        .route("/__admin/wake", post(admin_wake))
        .route("/__stats", get(stats_get))
        .route("/__stats/reset", post(stats_reset))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), faults))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serves the demo API on `listener` until the process ends (or the future is dropped).
pub async fn serve(
    listener: TcpListener,
    stats: Arc<Stats>,
    options: Options,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let app = router(addr, stats, &options);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// A demo HTTP server running on the caller's tokio runtime.
pub struct Spawned {
    /// The bound address (the real port when asked for port 0).
    pub addr: SocketAddr,
    /// Its counters, readable without an HTTP call.
    pub stats: Arc<Stats>,
    /// The server task; abort it (or drop the runtime) to stop the server.
    pub task: JoinHandle<anyhow::Result<()>>,
}

/// Binds `addr` (e.g. `127.0.0.1:0`) and serves the demo API on the current tokio runtime.
pub async fn spawn(addr: SocketAddr, options: Options) -> anyhow::Result<Spawned> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let stats = Arc::new(Stats::default());
    let task = tokio::spawn(serve(listener, stats.clone(), options));
    Ok(Spawned { addr, stats, task })
}

/// The faults a request asks for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Faults {
    delay_ms: Option<u64>,
    status: Option<StatusCode>,
    hang: bool,
    cache_control: Option<String>,
    vary: Option<String>,
}

impl Faults {
    fn from_parts(query: Option<&str>, headers: &HeaderMap) -> Self {
        let mut f = Faults::default();
        for part in query.unwrap_or("").split('&') {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            match name {
                "delay_ms" => f.delay_ms = value.parse().ok().or(f.delay_ms),
                "status" => f.status = parse_status(value).or(f.status),
                "hang" => f.hang = f.hang || is_true(value),
                "cache_control" => f.cache_control = Some(value.replace("%20", " ")),
                "vary" => f.vary = Some(value.replace("%20", " ")),
                _ => {}
            }
        }
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(ms) = header("x-demo-delay-ms").and_then(|v| v.trim().parse().ok()) {
            f.delay_ms = Some(ms);
        }
        if let Some(s) = header("x-demo-status").and_then(|v| parse_status(v.trim())) {
            f.status = Some(s);
        }
        if let Some(v) = header("x-demo-hang") {
            f.hang = f.hang || is_true(v.trim());
        }
        if let Some(v) = header("x-demo-cache-control") {
            f.cache_control = Some(v.trim().to_owned());
        }
        if let Some(v) = header("x-demo-vary") {
            f.vary = Some(v.trim().to_owned());
        }
        f
    }
}

fn parse_status(v: &str) -> Option<StatusCode> {
    let n: u16 = v.parse().ok()?;
    if (200..=599).contains(&n) {
        StatusCode::from_u16(n).ok()
    } else {
        None
    }
}

fn is_true(v: &str) -> bool {
    matches!(v, "1" | "true" | "yes")
}

fn is_stats_path(path: &str) -> bool {
    path == "/__stats" || path.starts_with("/__stats/") || path.starts_with("/__admin")
}

async fn faults(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if is_stats_path(path) {
        return next.run(req).await;
    }
    if st.control.asleep() {
        let mut resp = (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "ASLEEP"})),
        )
            .into_response();
        resp.headers_mut()
            .insert(INSTANCE_HEADER, st.instance.clone());
        return resp;
    }
    let counted = path != "/healthz";
    if counted {
        st.stats.record(path);
    }
    let _in_flight = counted.then(|| InFlight::enter(&st.stats.in_flight));
    if st.verbose {
        eprintln!("{} {}", req.method(), req.uri());
    }
    let mut f = Faults::from_parts(req.uri().query(), req.headers());
    let (delay, status) = st.control.faults();
    f.delay_ms = f.delay_ms.or(delay);
    f.status = f
        .status
        .or(status.and_then(|s| parse_status(&s.to_string())));
    if f.hang {
        // Never answer; hyper drops this future when the client closes the connection.
        std::future::pending::<()>().await;
    }
    if let Some(ms) = f.delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut resp = match f.status {
        Some(status) => injected(status, req.method(), req.uri()),
        None => next.run(req).await,
    };
    resp.headers_mut()
        .insert(INSTANCE_HEADER, st.instance.clone());
    if let Some(v) = f.cache_control.and_then(|v| HeaderValue::from_str(&v).ok()) {
        resp.headers_mut()
            .insert(axum::http::header::CACHE_CONTROL, v);
    }
    if let Some(v) = f.vary.and_then(|v| HeaderValue::from_str(&v).ok()) {
        resp.headers_mut().insert(axum::http::header::VARY, v);
    }
    if let Some(load) = st
        .control
        .load()
        .and_then(|l| HeaderValue::from_str(&l).ok())
    {
        resp.headers_mut().insert(LOAD_HEADER, load);
    }
    resp
}

/// The header a backend reports its load in (docs/PROTOCOL.md).
pub const LOAD_HEADER: &str = "x-portico-load";

fn query_map(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

async fn admin_get(State(st): State<Shared>) -> Json<Value> {
    Json(st.control.view())
}

async fn admin_load(State(st): State<Shared>, uri: Uri) -> Json<Value> {
    // The value holds '=' and ',': everything after "value=".
    let v = uri
        .query()
        .and_then(|q| q.strip_prefix("value="))
        .unwrap_or("");
    st.control.set_load(v);
    Json(st.control.view())
}

async fn admin_faults(State(st): State<Shared>, uri: Uri) -> Json<Value> {
    let q = query_map(&uri);
    let delay = q.get("delay_ms").and_then(|v| v.parse().ok());
    let status = q.get("status").and_then(|v| v.parse().ok());
    st.control.set_faults(delay, status);
    Json(st.control.view())
}

async fn admin_sleep(State(st): State<Shared>) -> Json<Value> {
    st.control.set_asleep(true);
    Json(st.control.view())
}

async fn admin_wake(State(st): State<Shared>, uri: Uri) -> Response {
    let after = query_map(&uri)
        .get("after_ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    st.control.wake_after(Duration::from_millis(after));
    (StatusCode::ACCEPTED, Json(st.control.view())).into_response()
}

fn injected(status: StatusCode, method: &Method, uri: &Uri) -> Response {
    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return status.into_response();
    }
    let body = json!({
        "injected_status": status.as_u16(),
        "method": method.as_str(),
        "path": uri.path(),
    });
    (status, Json(body)).into_response()
}

/// The largest answer of `GET /bytes/{n}`.
pub const MAX_BYTES_ANSWER: usize = 256 * 1024 * 1024;

async fn bytes(Path(n): Path<String>) -> Response {
    match n.parse::<usize>() {
        Ok(n) if n <= MAX_BYTES_ANSWER => (
            [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
            vec![b'x'; n],
        )
            .into_response(),
        _ => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "BAD_SIZE", "max": MAX_BYTES_ANSWER})),
        )
            .into_response(),
    }
}

async fn get_order(Path(id): Path<String>) -> Json<Value> {
    Json(json!({"order_id": id, "item": "book", "qty": 1, "status": "PAID"}))
}

async fn create_order(State(st): State<Shared>, body: Bytes) -> Response {
    match serde_json::from_slice::<Value>(&body) {
        Ok(created) => {
            let n = st.next_order.fetch_add(1, Ordering::Relaxed);
            let order_id = format!("ord-{n:06}");
            Json(json!({"created": created, "order_id": order_id})).into_response()
        }
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "BAD_JSON", "message": e.to_string()})),
        )
            .into_response(),
    }
}

/// The JSON answer of `/echo` and `/echo/**`: the request exactly as it reached the backend.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Echo {
    pub method: String,
    /// The path as on the request line (still percent-encoded).
    pub path: String,
    /// The raw query, without `?`; `null` when the request line had none.
    pub query: Option<String>,
    /// Header name (lower case) → value; repeated headers joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// Every header line in order, as `[name, value]`.
    pub header_list: Vec<(String, String)>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
    pub body_len: usize,
    /// The client's address (the gateway, when proxied).
    pub peer: String,
    /// The address of the instance that answered.
    pub instance: String,
}

async fn echo(
    State(st): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    let mut list = Vec::with_capacity(headers.len());
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        map.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert_with(|| value.clone());
        list.push((name.as_str().to_owned(), value));
    }
    let answer = Json(Echo {
        method: method.as_str().to_owned(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: map,
        header_list: list,
        body: String::from_utf8_lossy(&body).into_owned(),
        body_len: body.len(),
        peer: peer.to_string(),
        instance: st.instance_str.clone(),
    });
    // What many backends tell about themselves, for tests that a gateway keeps it back.
    (
        [
            (axum::http::header::SERVER, "portico-demo"),
            (axum::http::HeaderName::from_static("x-powered-by"), "axum"),
        ],
        answer,
    )
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn stats_get(State(st): State<Shared>) -> Json<StatsView> {
    Json(st.stats.view())
}

async fn stats_reset(State(st): State<Shared>) -> Json<StatsView> {
    Json(st.stats.reset())
}

async fn not_found(uri: Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": "NOT_FOUND", "path": uri.path()})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_from_query_and_headers() {
        let h = HeaderMap::new();
        let f = Faults::from_parts(Some("a=1&delay_ms=25&status=503"), &h);
        assert_eq!(f.delay_ms, Some(25));
        assert_eq!(f.status, Some(StatusCode::SERVICE_UNAVAILABLE));
        assert!(!f.hang);

        let mut h = HeaderMap::new();
        h.insert("x-demo-status", HeaderValue::from_static("429"));
        h.insert("x-demo-hang", HeaderValue::from_static("1"));
        let f = Faults::from_parts(Some("status=500"), &h);
        assert_eq!(f.status, Some(StatusCode::TOO_MANY_REQUESTS));
        assert!(f.hang);
    }

    #[test]
    fn unparseable_faults_are_ignored() {
        let f = Faults::from_parts(
            Some("status=PAID&delay_ms=soon&status=99"),
            &HeaderMap::new(),
        );
        assert_eq!(f, Faults::default());
    }

    #[test]
    fn stats_count_and_reset() {
        let s = Stats::default();
        s.record("/a");
        s.record("/a");
        s.record("/b");
        let v = s.view();
        assert_eq!(v.requests, 3);
        assert_eq!(v.by_path.get("/a"), Some(&2));
        let before = s.reset();
        assert_eq!(before.requests, 3);
        assert_eq!(s.view().requests, 0);
        assert!(s.view().by_path.is_empty());
    }
}
