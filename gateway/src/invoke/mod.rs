//! The invoke tier: it owns a call end to end, in [`call`]:
//! `prepare → bulkhead → breaker → balance → http proxy | grpc generic call`.
//!
//! The request is prepared in full first (HTTP: method, path and headers; gRPC: the
//! transcoded message and its metadata): a request that cannot be sent (a path variable
//! that does not fit the rewrite, a router-style call of an API whose path needs variables,
//! a body that does not transcode, an unprepared gRPC method) is refused before it takes a
//! bulkhead slot or a breaker ticket, so it counts neither for nor against the backend.
//!
//! Every call then holds a bulkhead permit and a breaker ticket for its whole duration
//! (for HTTP, until the answer is relayed to the merchant: each write to the merchant is
//! bounded by the listener's write timeout, so a client that does not read frees the slot),
//! and has a deadline (the API's `timeout_ms`). The breaker outcome is decided here, in one
//! place ([`settle`]): an HTTP answer with a 5xx status, or an error whose
//! [`Code::side`](crate::error::Code::side) is [`Side::Upstream`] (a timeout, a connection
//! failure, no usable endpoint, gRPC `UNAVAILABLE`/`INTERNAL`/`UNKNOWN`/`DEADLINE_EXCEEDED`),
//! is a failure; any other outcome is a success with the call's latency.
//!
//! The per-API state ([`ApiRuntime`]: bulkhead, breaker, balancer, resolved endpoints) is
//! built per snapshot in [`state`]; the runtime holds it. What a backend is told about the
//! caller is [`forward`]'s one rule.

pub mod balance;
pub mod breaker;
pub mod bulkhead;
pub mod forward;
pub mod grpc;
pub mod grpc_client;
pub mod health;
pub mod http;
pub mod routing;
pub mod sleep;
pub mod state;
pub mod sticky;
pub mod transcode;

pub use forward::Caller;
pub use state::{ApiRuntime, ClusterRuntime, InvokeState};

use self::http::{Attempt, HttpInvoker, HttpRequest};
use crate::error::{Code, GatewayError, Side};
use crate::model::{Response, RouteMatch};
use breaker::CallTicket;
use bytes::Bytes;
use grpc::{GrpcInvoker, GrpcMethods, GrpcRequest, PreparedMethod};
use pingora_core::protocols::http::client::HttpSession;
use pingora_proxy::Session;
use portico_control::template::Rewrite;
use portico_control::BackendKind;
use routing::{Hints, Pick, Routing};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The process-wide backend clients, shared by every plane and kept for the life of the
/// process: Pingora's HTTP connection pool and the gRPC channels.
#[derive(Default)]
pub struct Clients {
    pub http: HttpInvoker,
    pub grpc: GrpcInvoker,
}

/// One call, as the pipeline hands it over after the edge.
#[derive(Debug)]
pub struct Call<'a> {
    /// What `route` found: the API, its binding and the path variables.
    pub route: &'a RouteMatch,
    /// The whole request body, already read and verified.
    pub body: Bytes,
    /// What the edge decided about the caller: request id, app, client address and proxies.
    pub caller: Caller<'a>,
    /// What the edge's `cache` stage asks of the answer (hot APIs).
    pub cache: CacheHint,
}

/// What the edge's `cache` stage asks of an HTTP answer (docs/ARCHITECTURE.md, "The
/// response cache"); the default asks nothing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    /// Read a 200 answer of at most this many bytes whole (see
    /// [`HttpInvoker::collectable`]) and return it as [`Response::Whole`].
    pub collect: Option<usize>,
    /// Mark an answer streamed as it comes `X-Portico-Cache: BYPASS`.
    pub mark_bypass: bool,
}

/// Which endpoint a call reached and how long the backend took, for the access log and the
/// upstream latency metric. Filled in as far as the call got, also when it failed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Upstream {
    pub addr: Option<SocketAddr>,
    pub latency: Option<Duration>,
    /// Body bytes of the backend's answer streamed to the merchant (HTTP, not read whole),
    /// also when the stream broke half-way; counted for the hot-key detector's bandwidth
    /// rule (docs/ARCHITECTURE.md, "The response cache").
    pub body_bytes: u64,
}

/// A request ready to send to its backend.
enum Prepared {
    /// Boxed: the request head is large, and the gRPC variant small.
    Http(Box<HttpRequest>),
    Grpc(Arc<PreparedMethod>, GrpcRequest),
}

/// Calls the backend of `call.route`'s API: prepares the request, takes a bulkhead slot,
/// asks the breaker, picks an endpoint and proxies (HTTP, streamed to `session`:
/// [`Response::Streamed`]) or calls (gRPC: [`Response::Whole`]). `Err` is any refusal or
/// failure on the way (400 for a request that cannot be sent, 503 `BULKHEAD_FULL`,
/// `CIRCUIT_OPEN`, `NO_HEALTHY_UPSTREAM`, 502, 504, a gRPC status, ...).
pub async fn call(
    clients: &Clients,
    state: &InvokeState,
    session: &mut Session,
    call: Call<'_>,
    upstream: &mut Upstream,
) -> Result<Response, GatewayError> {
    let api = &call.route.api;
    let target = state
        .apis
        .get(&api.id)
        .ok_or_else(|| no_endpoint(&api.cluster, "has no endpoints"))?;
    let prepared = prepare(&state.grpc, session, &call, target.rewrite.as_deref())?;
    sleep::wake_and_hold(&target.routing).await?;
    let _permit = target.bulkhead.acquire().await?;
    let timeout = Duration::from_millis(api.timeout_ms);
    let cluster = &target.routing.cluster;
    let headers = &session.req_header().headers;
    let sticky = cluster
        .sticky
        .as_ref()
        .and_then(|s| sticky::from_request(headers, &s.cookie))
        .map(str::to_owned);
    let key = cluster
        .hash_key
        .as_deref()
        .and_then(|k| hash_key(k, session, &call));
    let admitted = Admitted {
        target,
        ticket: target.breaker.try_acquire_with_timeout(timeout)?,
        deadline: Instant::now() + timeout,
        hints: Hints {
            key,
            sticky: sticky.as_deref(),
        },
    };
    match prepared {
        Prepared::Http(request) => {
            let rid = call.caller.request_id;
            let hint = call.cache;
            call_http(
                &clients.http,
                session,
                *request,
                rid,
                hint,
                admitted,
                upstream,
            )
            .await
        }
        Prepared::Grpc(method, request) => {
            call_grpc(&clients.grpc, &method, request, admitted, upstream).await
        }
    }
}

/// Builds the backend request of `call` (see the module docs); `Err` when it cannot be sent.
fn prepare(
    methods: &GrpcMethods,
    session: &Session,
    call: &Call<'_>,
    parsed_rewrite: Option<&Rewrite>,
) -> Result<Prepared, GatewayError> {
    let req = session.req_header();
    let api = &call.route.api;
    match &api.backend {
        BackendKind::Http { path } => {
            let rewrite = path.as_deref();
            let body = call.body.clone();
            let request =
                self::http::prepare(req, call.route, rewrite, parsed_rewrite, body, &call.caller)?;
            Ok(Prepared::Http(Box::new(request)))
        }
        BackendKind::Grpc { .. } => {
            let method = methods.get(&api.id).ok_or_else(|| {
                GatewayError::internal(format!("API {} has no prepared gRPC method", api.id))
            })?;
            let query = req.uri.query();
            let request = GrpcInvoker::prepare(
                &method,
                call.route,
                query,
                &call.body,
                &req.headers,
                &call.caller,
            )?;
            Ok(Prepared::Grpc(method, request))
        }
    }
}

/// A call the bulkhead and the breaker let through: the API's state, the breaker ticket to
/// settle, the call's deadline and what the balancer may use of the request.
struct Admitted<'a> {
    target: &'a ApiRuntime,
    ticket: CallTicket,
    deadline: Instant,
    hints: Hints<'a>,
}

/// The hash of the request's `hash_key` (`app`, `ip`, `header:<Name>`, `query:<name>`,
/// `path:<var>`); `None` when the request has no such value.
fn hash_key(key: &str, session: &Session, call: &Call<'_>) -> Option<u64> {
    let req = session.req_header();
    let value: std::borrow::Cow<'_, str> = match key.split_once(':') {
        None if key == "app" => call.caller.app_key?.into(),
        None if key == "ip" => call.caller.client_ip?.to_string().into(),
        Some(("header", name)) => req.headers.get(name)?.to_str().ok()?.into(),
        Some(("query", name)) => req
            .uri
            .query()?
            .split('&')
            .find_map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k == name).then_some(v)
            })?
            .into(),
        Some(("path", var)) => call
            .route
            .vars
            .iter()
            .find(|(k, _)| k == var)
            .map(|(_, v)| v.as_str())?
            .into(),
        _ => return None,
    };
    Some(routing::hash64(value.as_bytes()))
}

/// Records what a call taught about its endpoint: latency, the load it reported, success or
/// failure (for outlier ejection). `failed`: a 5xx answer, a connect failure or a timeout.
fn observe(routing: &Routing, pick: &Pick, latency: Duration, load: Option<f64>, failed: bool) {
    let now = portico_control::clock::now_ms();
    if !latency.is_zero() {
        pick.endpoint.record_latency(latency, now);
    }
    if let Some(load) = load {
        pick.endpoint.record_load(load, now);
    }
    if failed {
        routing.failed(pick);
    } else {
        pick.endpoint.record_success();
    }
}

/// The `Set-Cookie` for a sticky cluster when the request's cookie does not already name
/// the endpoint picked.
fn sticky_cookie(routing: &Routing, pick: &Pick, sent: Option<&str>) -> Option<String> {
    let s = routing.cluster.sticky.as_ref()?;
    let token = routing.tokens[pick.set as usize].get(pick.index)?;
    (sent != Some(token.as_str())).then(|| sticky::set_cookie(&s.cookie, token, s.ttl_s))
}

/// The most endpoints one call tries when connections fail (nothing sent).
const MAX_CONNECT_TRIES: usize = 3;

/// How a backend call ended, as the breaker counts it.
enum Outcome<'e> {
    /// The backend answered with this HTTP status after `latency`.
    Answered { status: u16, latency: Duration },
    /// The call failed with `error` after `latency`.
    Failed {
        error: &'e GatewayError,
        latency: Duration,
    },
}

/// Records a call's outcome on its breaker ticket: a 5xx answer or an [`Side::Upstream`]
/// error is a failure, anything else a success after its latency.
fn settle(ticket: CallTicket, outcome: Outcome<'_>) {
    match outcome {
        Outcome::Answered { status, .. } if status >= 500 => ticket.failure(),
        Outcome::Failed { error, .. } if connection_refused(error) => ticket.not_reached(),
        Outcome::Failed { error, .. } if error.code.side() == Side::Upstream => ticket.failure(),
        Outcome::Answered { latency, .. } | Outcome::Failed { latency, .. } => {
            ticket.success(latency)
        }
    }
}

/// Whether a call failed because every endpoint tried refused the connection (nothing
/// listens there: `ECONNREFUSED`, whose text both clients' details carry): nothing reached
/// the backend and failing cost no time, so the breaker does not count it
/// ([`CallTicket::not_reached`]). A connect *timeout* is a 504 and does count.
fn connection_refused(error: &GatewayError) -> bool {
    error.code == Code::UpstreamError
        && error
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("Connection refused"))
}

/// 503 `NO_HEALTHY_UPSTREAM` for `cluster` (the cluster is named in the detail only).
fn no_endpoint(cluster: &str, why: &str) -> GatewayError {
    GatewayError::upstream(
        Code::NoHealthyUpstream,
        "no backend endpoint is available",
        format!("cluster {cluster} {why}"),
    )
}

/// The HTTP backend: the prepared request written in one go, the response streamed back.
async fn call_http(
    http: &HttpInvoker,
    session: &mut Session,
    request: HttpRequest,
    request_id: &str,
    hint: CacheHint,
    admitted: Admitted<'_>,
    upstream: &mut Upstream,
) -> Result<Response, GatewayError> {
    let Admitted {
        target,
        ticket,
        deadline,
        hints,
    } = admitted;
    let (answer, latency, pick) =
        match first_answer(http, target, request, deadline, hints, upstream).await {
            Ok(answered) => answered,
            Err(error) => {
                let latency = Duration::ZERO;
                settle(
                    ticket,
                    Outcome::Failed {
                        error: &error,
                        latency,
                    },
                );
                return Err(error);
            }
        };
    upstream.latency = Some(latency);
    let head = answer.response_header();
    let status = head.map_or(502, |h| h.status.as_u16());
    let load = head
        .and_then(|h| h.headers.get(health::LOAD_HEADER))
        .and_then(|v| v.to_str().ok())
        .and_then(health::parse_load);
    observe(&target.routing, &pick, latency, load, status >= 500);
    settle(ticket, Outcome::Answered { status, latency });
    let cookie = sticky_cookie(&target.routing, &pick, hints.sticky);
    let addr = pick.endpoint.sock.unwrap_or(([0, 0, 0, 0], 0).into());
    if let Some(max) = hint.collect {
        if HttpInvoker::collectable(&answer, max) {
            let whole = http.read_whole(answer, addr, deadline, max).await?;
            return Ok(Response::Whole(whole));
        }
    }
    let added = self::http::Added {
        replace: hint.mark_bypass.then_some((
            crate::model::CACHE_HEADER_NAME,
            ::http::HeaderValue::from_static("BYPASS"),
        )),
        set_cookie: cookie.as_deref(),
    };
    let status = http
        .relay(
            session,
            answer,
            addr,
            request_id,
            deadline,
            added,
            &mut upstream.body_bytes,
        )
        .await?;
    Ok(Response::Streamed(status))
}

/// Balance for an HTTP call: picks an available endpoint and sends the request; when the
/// connection cannot be made (nothing was sent) tries another one at once, whatever the
/// method, up to [`MAX_CONNECT_TRIES`]. Returns the answered upstream session, the time to
/// its response header and the endpoint; `upstream.addr` is the last endpoint tried.
async fn first_answer(
    http: &HttpInvoker,
    target: &ApiRuntime,
    request: HttpRequest,
    deadline: Instant,
    hints: Hints<'_>,
    upstream: &mut Upstream,
) -> Result<(Box<HttpSession>, Duration, Pick), GatewayError> {
    let mut tried = [0usize; MAX_CONNECT_TRIES];
    let mut request = Some(request);
    let mut last_err = None;
    for n in 0..MAX_CONNECT_TRIES {
        let Some(pick) = target.routing.pick(hints, &tried[..n]) else {
            break;
        };
        tried[n] = pick.endpoint.id();
        let Some(addr) = pick.endpoint.sock else {
            continue;
        };
        let Some(sending) = request.take() else {
            break;
        };
        upstream.addr = Some(addr);
        let _in_flight = pick.endpoint.enter();
        // `Host` is the gateway's decision (docs/PROTOCOL.md, "What backends receive").
        let host = target
            .routing
            .cluster
            .host
            .as_deref()
            .unwrap_or(&pick.endpoint.addr);
        match http.attempt(addr, host, sending, deadline).await {
            Attempt::Answered(answer, latency) => return Ok((answer, latency, pick)),
            Attempt::ConnectFailed(e, unsent) => {
                observe(&target.routing, &pick, Duration::ZERO, None, true);
                last_err = Some(e);
                request = Some(unsent);
            }
            Attempt::Failed(e) => {
                observe(&target.routing, &pick, Duration::ZERO, None, true);
                return Err(e);
            }
        }
    }
    Err(last_err.unwrap_or_else(|| no_endpoint(&target.api.cluster, "has no healthy endpoint")))
}

/// The gRPC backend: one unary call of the prepared request, the reply as JSON. A call
/// that could not reach its endpoint (nothing was sent) is tried once more on another.
async fn call_grpc(
    grpc: &GrpcInvoker,
    method: &PreparedMethod,
    request: GrpcRequest,
    admitted: Admitted<'_>,
    upstream: &mut Upstream,
) -> Result<Response, GatewayError> {
    let Admitted {
        target,
        ticket,
        deadline,
        hints,
    } = admitted;
    let routing = &target.routing;
    let settings = grpc.settings(routing.cluster.grpc.as_ref());
    let mut tried = [0usize; 2];
    let mut request = Some(request);
    let mut last = None;
    for n in 0..tried.len() {
        let Some(pick) = routing.pick(hints, &tried[..n]) else {
            break;
        };
        tried[n] = pick.endpoint.id();
        let Some(req) = request.take() else { break };
        // Kept for a retry on another endpoint when this one cannot be reached; only a
        // first try with another endpoint to go to pays for the copy.
        let spare = (n + 1 < tried.len() && routing.endpoint_count() > 1).then(|| req.clone());
        let started = Instant::now();
        let timeout = deadline.saturating_duration_since(started);
        let result = {
            let _in_flight = pick.endpoint.enter();
            grpc.send(method, req, &pick.endpoint.addr, settings, timeout)
                .await
        };
        let latency = started.elapsed();
        upstream.addr = pick.endpoint.sock;
        upstream.latency = Some(latency);
        let unreachable = matches!(&result, Err(e) if grpc::unreachable(e));
        let (load, failed) = match &result {
            Ok(whole) => (
                whole
                    .headers
                    .iter()
                    .find(|(k, _)| k == health::LOAD_METADATA_OUT)
                    .and_then(|(_, v)| health::parse_load(v)),
                whole.status >= 500,
            ),
            Err(e) => (None, e.code.side() == Side::Upstream),
        };
        observe(routing, &pick, latency, load, failed);
        if unreachable && Instant::now() < deadline && spare.is_some() {
            request = spare;
            last = Some((result, pick));
            continue;
        }
        last = Some((result, pick));
        break;
    }
    let (mut result, pick) = match last {
        Some(l) => l,
        None => {
            let error = no_endpoint(&target.api.cluster, "has no healthy endpoint");
            settle(
                ticket,
                Outcome::Failed {
                    error: &error,
                    latency: Duration::ZERO,
                },
            );
            return Err(error);
        }
    };
    let latency = upstream.latency.unwrap_or_default();
    let outcome = match &result {
        Ok(whole) => Outcome::Answered {
            status: whole.status,
            latency,
        },
        Err(error) => Outcome::Failed { error, latency },
    };
    settle(ticket, outcome);
    if let Ok(whole) = &mut result {
        whole
            .headers
            .retain(|(k, _)| k != health::LOAD_METADATA_OUT);
        if let Some(c) = sticky_cookie(routing, &pick, hints.sticky) {
            whole.headers.push(("set-cookie".to_owned(), c));
        }
    }
    result.map(Response::Whole)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::{Plane, Runtime};
    use crate::testing::{closed_addr, cluster_doc, http_api_doc, plane, session, tree, Backend};
    use portico_control::build_snapshot;
    use serde_json::{json, Value};
    use std::sync::Arc;

    /// A plane serving API `a` (policy `policy`) on a cluster of `endpoints`.
    fn serving(endpoints: &[String], policy: Value) -> (Plane, Arc<Runtime>) {
        let plane = plane();
        let docs = [
            ("apis/a", http_api_doc("a", "c", None, policy)),
            ("clusters/c", cluster_doc(endpoints)),
        ];
        plane.apply(Arc::new(build_snapshot(&tree(&docs), None)));
        let rt = plane.current.load_full();
        (plane, rt)
    }

    /// One `GET /v1/a` through [`call`].
    async fn get(plane: &Plane, rt: &Runtime) -> (Result<Response, GatewayError>, Upstream) {
        let (mut session, _client) = session(b"GET /v1/a HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let route = rt.edge.route.route("GET", "/v1/a", None).unwrap();
        let request = Call {
            route: &route,
            body: Bytes::new(),
            caller: Caller::new("rid-1"),
            cache: CacheHint::default(),
        };
        let mut upstream = Upstream::default();
        let clients = &plane.shared.clients;
        let result = call(clients, &rt.invoke, &mut session, request, &mut upstream).await;
        (result, upstream)
    }

    fn code(result: &Result<Response, GatewayError>) -> &'static str {
        match result {
            Ok(_) => "OK",
            Err(e) => e.code.as_str(),
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_retried_on_another_endpoint() {
        let backend = Backend::start(200, "ok").await;
        // Equal weights: the first pick is the first endpoint, the closed one.
        let (plane, rt) = serving(&[closed_addr(), backend.addr.to_string()], json!({}));
        let (result, upstream) = get(&plane, &rt).await;
        assert_eq!(result.unwrap(), Response::Streamed(200));
        assert_eq!(upstream.addr, Some(backend.addr));
        assert_eq!(backend.heads().len(), 1);
        assert_eq!(rt.invoke.apis["a"].breaker.state().as_str(), "closed");
    }

    #[tokio::test]
    async fn backend_5xx_answers_are_breaker_failures() {
        let backend = Backend::start(503, "busy").await;
        let policy = json!({"breaker": {"consecutive_failures": 2, "open_ms": 60000}});
        let (plane, rt) = serving(&[backend.addr.to_string()], policy);
        for _ in 0..2 {
            let (result, _) = get(&plane, &rt).await;
            // The backend's own 503 is streamed to the merchant as it is.
            assert_eq!(result.unwrap(), Response::Streamed(503));
        }
        let (result, upstream) = get(&plane, &rt).await;
        assert_eq!(code(&result), "CIRCUIT_OPEN");
        assert_eq!(upstream, Upstream::default());
        assert_eq!(
            backend.heads().len(),
            2,
            "an open breaker does not call the backend"
        );
    }

    #[tokio::test]
    async fn refused_connections_do_not_move_the_breaker_and_4xx_are_successes() {
        let policy = json!({"breaker": {"consecutive_failures": 2, "open_ms": 60000}});
        let (plane, rt) = serving(&[closed_addr()], policy.clone());
        // Nothing listens: every call fails at once, and the breaker stays closed, so the
        // first call after the backend is back is served (docs/operations/clusters.md, "gRPC client
        // settings": the breaker after a restart).
        for _ in 0..5 {
            let (result, _) = get(&plane, &rt).await;
            assert_eq!(code(&result), "UPSTREAM_ERROR");
            assert!(connection_refused(result.as_ref().unwrap_err()));
        }
        assert_eq!(rt.invoke.apis["a"].breaker.state().as_str(), "closed");

        let backend = Backend::start(404, "no such order").await;
        let (plane, rt) = serving(&[backend.addr.to_string()], policy);
        for _ in 0..3 {
            // A 4xx is the backend's answer, not its failure.
            assert_eq!(get(&plane, &rt).await.0.unwrap(), Response::Streamed(404));
        }
        assert_eq!(rt.invoke.apis["a"].breaker.state().as_str(), "closed");
    }

    #[tokio::test]
    async fn a_full_bulkhead_refuses_before_the_backend() {
        let backend = Backend::start(200, "ok").await;
        let (plane, rt) = serving(
            &[backend.addr.to_string()],
            json!({"bulkhead": {"max_concurrent": 1}}),
        );
        let held = rt.invoke.apis["a"].bulkhead.try_acquire().unwrap();
        assert_eq!(code(&get(&plane, &rt).await.0), "BULKHEAD_FULL");
        assert!(backend.heads().is_empty());
        drop(held);
        assert_eq!(get(&plane, &rt).await.0.unwrap(), Response::Streamed(200));
    }

    #[tokio::test]
    async fn an_api_without_invoke_state_has_no_healthy_upstream() {
        // Validation keeps an API from naming a missing cluster; the invoke tier still
        // answers rather than assume it.
        let (plane, rt) = serving(&[closed_addr()], json!({}));
        let empty = InvokeState::default();
        let (mut session, _client) = session(b"GET /v1/a HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let route = rt.edge.route.route("GET", "/v1/a", None).unwrap();
        let request = Call {
            route: &route,
            body: Bytes::new(),
            caller: Caller::new("rid-1"),
            cache: CacheHint::default(),
        };
        let mut upstream = Upstream::default();
        let clients = &plane.shared.clients;
        let result = call(clients, &empty, &mut session, request, &mut upstream).await;
        assert_eq!(code(&result), "NO_HEALTHY_UPSTREAM");
        assert_eq!(upstream, Upstream::default());
    }
}
