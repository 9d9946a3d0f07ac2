//! Generic gRPC invocation: an API backed by gRPC is called without compiled stubs.
//!
//! - [`GrpcMethods`] (rebuilt with every snapshot): decodes each FileDescriptorSet named by an
//!   API (`descriptors/<sha256>`) once per sha, reusing the previous snapshot's pools, and
//!   prepares, per API id, the method (its `/package.Service/Method` path, its types) and the
//!   transcoding [`MethodPlan`] of its bindings.
//! - [`GrpcInvoker`] (process-wide, lives across reloads): pooled HTTP/2 channels per
//!   endpoint and the call itself: transcode the HTTP request, call with a deadline, map the
//!   reply to JSON or the gRPC status to the error envelope (docs/PROTOCOL.md, "The error
//!   envelope").
//!
//! # Channels and runtimes
//!
//! A channel is a [`GrpcChannel`] (`grpc_client.rs`: one HTTP/2 connection, `h2` directly)
//! dialled on first use, inside the running runtime, never at start-up. Its connection's
//! task is spawned on the runtime that dialled it, so channels are cached per endpoint
//! *and per runtime kind*: on a multi-threaded (work-stealing) runtime,
//! Pingora's default, one channel per endpoint is shared by all worker threads; on a
//! current-thread runtime (Pingora's no-steal mode, one runtime per thread) each thread has
//! its own channel per endpoint, so no call depends on another thread's runtime being
//! polled and a connection's I/O stays on the thread that uses it. HTTP/2 multiplexes the
//! calls of a channel over one connection; a failed connection is re-dialled on the next
//! call. (Channels are process-wide: docs/ARCHITECTURE.md, "One snapshot".)
//!
//! # Metadata sent to the backend
//!
//! The request's end-to-end headers are passed on as gRPC metadata (as an HTTP filter such
//! as Envoy's JSON transcoder does), so backends see `authorization`, tracing headers and
//! their own headers (the demo backend's `x-demo-*` fault injection works through the
//! gateway), by the rule every backend gets (`forward.rs`): no hop-by-hop headers, no
//! `x-portico-*` from the client (the signature headers never leave the gateway),
//! `x-portico-app` = the app auth verified, `x-portico-request-id` = the request id,
//! `x-forwarded-for` / `x-forwarded-proto` as the gateway decided them; `grpc-metadata-<key>`
//! is sent as `<key>` (grpc-gateway's convention) under the same rule; values that are not
//! printable ASCII are left out, and the client's metadata is bounded to
//! [`forward::METADATA_BUDGET`] (4 KiB, under gRPC servers' common 8 KiB limit).
//! `grpc-timeout` is the call's deadline.
//!
//! The reply's metadata comes back as `grpc-metadata-<key>` response headers (ASCII keys
//! only, reserved ones left out).

use crate::error::{Code, GatewayError};
use crate::invoke::forward::{self, Caller, Target};
use crate::invoke::grpc_client::{self, CallError, ChannelSettings, GrpcChannel};
use crate::invoke::transcode::MethodPlan;
use crate::model::{RouteMatch, Whole};
use bytes::Bytes;
use dashmap::DashMap;
use http::uri::PathAndQuery;
use portico_control::{v1, BackendKind, Snapshot};
use portico_grpc_dynamic::{code_name_and_status, JsonCodecs};
use prost_reflect::{DescriptorPool, MethodDescriptor};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Status;

/// The largest reply accepted from a backend (decoded protobuf bytes), by default.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// One API's gRPC method, resolved from its descriptor set when the snapshot was built.
#[derive(Debug)]
pub struct PreparedMethod {
    pub api_id: String,
    /// `demo.order.v1.OrderService`
    pub service: String,
    /// `GetOrder`
    pub method: String,
    /// The sha256 naming the descriptor set it came from.
    pub descriptor: String,
    /// `/demo.order.v1.OrderService/GetOrder`
    pub path: PathAndQuery,
    pub descriptor_method: MethodDescriptor,
    pub plan: MethodPlan,
}

impl PreparedMethod {
    /// Resolves `service`/`method` in `pool` and plans the transcoding of `api`'s bindings
    /// (its one-pass JSON codecs shared through `codecs`, one per pool).
    pub fn prepare(
        api: &portico_control::Api,
        pool: &DescriptorPool,
        service: &str,
        method: &str,
        descriptor: &str,
        codecs: &mut JsonCodecs,
    ) -> Result<Self, String> {
        let svc = pool
            .get_service_by_name(service)
            .ok_or_else(|| format!("service {service} is not in descriptor {descriptor}"))?;
        let m = svc
            .methods()
            .find(|m| m.name() == method)
            .ok_or_else(|| format!("service {service} has no method {method}"))?;
        if m.is_client_streaming() || m.is_server_streaming() {
            return Err(format!(
                "{service}/{method} is a streaming method; only unary methods can be transcoded"
            ));
        }
        let path = PathAndQuery::try_from(format!("/{service}/{method}"))
            .map_err(|e| format!("bad method path /{service}/{method}: {e}"))?;
        let plan = MethodPlan::for_api_with(&m, api, codecs).map_err(|e| e.message)?;
        Ok(PreparedMethod {
            api_id: api.id.clone(),
            service: service.to_owned(),
            method: method.to_owned(),
            descriptor: descriptor.to_owned(),
            path,
            descriptor_method: m,
            plan,
        })
    }
}

/// The prepared gRPC methods of one snapshot, by API id.
#[derive(Debug, Default)]
pub struct GrpcMethods {
    methods: HashMap<String, Arc<PreparedMethod>>,
    /// Decoded descriptor pools by sha256 (a pool is cheap to clone: it is shared).
    pools: HashMap<String, DescriptorPool>,
    /// APIs whose method could not be prepared, and why.
    problems: Vec<(String, String)>,
}

impl GrpcMethods {
    /// Prepares every gRPC API of `snapshot`. Each descriptor set is decoded once per sha;
    /// a set already decoded by `previous` (the plane's former runtime) is reused as is.
    /// An API that cannot be prepared (unknown descriptor, service or method, a binding's
    /// body naming no field) is left out and listed in [`GrpcMethods::problems`]; its calls
    /// answer 500 `INTERNAL`.
    pub fn build(snapshot: &Snapshot, previous: Option<&GrpcMethods>) -> GrpcMethods {
        let mut out = GrpcMethods::default();
        // JSON codecs by descriptor sha: APIs taking or answering one type share them.
        let mut codecs: HashMap<String, JsonCodecs> = HashMap::new();
        for api in snapshot.apis.values() {
            let BackendKind::Grpc {
                service,
                method,
                descriptor,
            } = &api.backend
            else {
                continue;
            };
            let pool = match out.pool(snapshot, previous, descriptor) {
                Ok(pool) => pool,
                Err(why) => {
                    out.problems.push((api.id.clone(), why));
                    continue;
                }
            };
            let codecs = codecs.entry(descriptor.clone()).or_default();
            match PreparedMethod::prepare(api, &pool, service, method, descriptor, codecs) {
                Ok(m) => {
                    out.methods.insert(api.id.clone(), Arc::new(m));
                }
                Err(why) => out.problems.push((api.id.clone(), why)),
            }
        }
        for (api, why) in &out.problems {
            tracing::warn!(api = %api, "gRPC method not prepared: {why}");
        }
        out
    }

    fn pool(
        &mut self,
        snapshot: &Snapshot,
        previous: Option<&GrpcMethods>,
        sha: &str,
    ) -> Result<DescriptorPool, String> {
        if let Some(pool) = self.pools.get(sha) {
            return Ok(pool.clone());
        }
        let pool = match previous.and_then(|p| p.pools.get(sha)) {
            Some(pool) => pool.clone(),
            None => {
                let bytes = snapshot
                    .descriptors
                    .get(sha)
                    .ok_or_else(|| format!("descriptor {sha} is not in the configuration"))?;
                DescriptorPool::decode(bytes.as_slice())
                    .map_err(|e| format!("descriptor {sha} does not decode: {e}"))?
            }
        };
        self.pools.insert(sha.to_owned(), pool.clone());
        Ok(pool)
    }

    /// The prepared method of API `api_id`.
    pub fn get(&self, api_id: &str) -> Option<Arc<PreparedMethod>> {
        self.methods.get(api_id).cloned()
    }

    /// APIs whose method could not be prepared: (API id, reason).
    pub fn problems(&self) -> &[(String, String)] {
        &self.problems
    }

    /// How many methods are prepared.
    pub fn len(&self) -> usize {
        self.methods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.methods.is_empty()
    }
}

/// A call ready to send: the transcoded request message, encoded, and its metadata (built
/// before the breaker is asked, so a request that does not transcode never counts for or
/// against the backend).
#[derive(Debug, Clone)]
pub struct GrpcRequest {
    /// The message as a gRPC frame (length-prefixed).
    frame: Bytes,
    metadata: http::HeaderMap,
    /// The matched binding (its `response_body` shapes the answer).
    binding: Option<usize>,
}

impl GrpcRequest {
    /// The metadata the backend will receive (besides `grpc-timeout`).
    pub fn metadata(&self) -> &http::HeaderMap {
        &self.metadata
    }
}

/// Settings of the gRPC client.
#[derive(Debug, Clone)]
pub struct GrpcConfig {
    /// The largest reply accepted (decoded message bytes); a larger one is 502.
    pub max_response_bytes: usize,
    /// How long dialling an endpoint may take (the call's own deadline still applies).
    pub connect_timeout: Duration,
    /// HTTP/2 PING interval on busy connections, to notice dead peers; zero (the default):
    /// no pings at all, as gRPC's own clients (grpc-core, grpc-go, grpc-java) default.
    /// grpc-core servers by default allow one ping per 5 minutes at most and none without
    /// data, and answer more with GOAWAY `ENHANCE_YOUR_CALM` ("too_many_pings"), which kills
    /// every call on the connection; a dead peer is noticed by the call's own deadline
    /// instead. Set by `PORTICO_GRPC_KEEPALIVE_MS` at start-up (docs/operations/clusters.md, "gRPC client
    /// settings").
    pub keepalive_interval: Duration,
    /// How long such a PING may go unanswered before the connection is dropped.
    pub keepalive_timeout: Duration,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            connect_timeout: Duration::from_secs(2),
            keepalive_interval: keepalive_from_env(),
            keepalive_timeout: Duration::from_secs(10),
        }
    }
}

/// The environment variable setting the keep-alive PING interval (milliseconds; `0` or unset:
/// none).
pub const KEEPALIVE_ENV: &str = "PORTICO_GRPC_KEEPALIVE_MS";

/// [`GrpcConfig::keepalive_interval`] from [`KEEPALIVE_ENV`] (read once, when the gateway's
/// invoker is made at start-up); a value that is not a number is logged and ignored.
fn keepalive_from_env() -> Duration {
    match std::env::var(KEEPALIVE_ENV) {
        Ok(v) => {
            match v.trim().parse::<u64>() {
                Ok(ms) => Duration::from_millis(ms),
                Err(_) => {
                    tracing::warn!("{KEEPALIVE_ENV}={v:?} is not a number of milliseconds; no keep-alive pings");
                    Duration::ZERO
                }
            }
        }
        Err(_) => Duration::ZERO,
    }
}

/// Channels are cached per endpoint and client settings, and per thread on current-thread
/// runtimes (see the module docs).
type ChannelKey = (String, Option<std::thread::ThreadId>, ChannelSettings);

/// The process-wide gRPC client: pooled channels and the call.
#[derive(Debug, Default)]
pub struct GrpcInvoker {
    config: GrpcConfig,
    channels: DashMap<ChannelKey, Arc<GrpcChannel>>,
}

impl GrpcInvoker {
    pub fn new() -> Self {
        Self::with_config(GrpcConfig::default())
    }

    pub fn with_config(config: GrpcConfig) -> Self {
        GrpcInvoker {
            config,
            channels: DashMap::new(),
        }
    }

    /// The client settings of a cluster: its `grpc` settings, the gateway's defaults
    /// ([`GrpcConfig`]) where it says nothing (docs/operations/clusters.md, "gRPC client settings").
    pub fn settings(&self, cluster: Option<&v1::GrpcClient>) -> ChannelSettings {
        // Read in place, per call: no copy of the cluster's settings.
        let ms = |field: fn(&v1::GrpcClient) -> Option<u64>, default: Duration| {
            cluster
                .and_then(field)
                .map_or(default, Duration::from_millis)
        };
        ChannelSettings {
            connect_timeout: ms(|c| c.connect_timeout_ms, self.config.connect_timeout),
            keepalive_interval: ms(|c| c.keepalive_ms, self.config.keepalive_interval),
            keepalive_timeout: ms(|c| c.keepalive_timeout_ms, self.config.keepalive_timeout),
            compress_min_bytes: cluster
                .and_then(|c| c.compress_min_bytes)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        }
    }

    /// The channel to `addr` (`host:port`) with `settings`, made on first use on the
    /// current runtime. Must be called inside a Tokio runtime.
    pub fn channel(
        &self,
        addr: &str,
        settings: ChannelSettings,
    ) -> Result<Arc<GrpcChannel>, GatewayError> {
        let per_thread = matches!(
            tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread)
        );
        let key = (
            addr.to_owned(),
            per_thread.then(|| std::thread::current().id()),
            settings,
        );
        if let Some(ch) = self.channels.get(&key) {
            return Ok(ch.clone());
        }
        let channel = GrpcChannel::new(addr, settings).map_err(|why| {
            GatewayError::upstream(
                Code::UpstreamError,
                "the backend could not be reached",
                format!("gRPC backend {addr} is not reachable: {why}"),
            )
        })?;
        Ok(self
            .channels
            .entry(key)
            .or_insert_with(|| Arc::new(channel))
            .clone())
    }

    /// Forgets the channels of endpoints not in `live` (call after a reload; a dropped
    /// channel closes its connection once its calls are done).
    pub fn retain_endpoints(&self, live: &std::collections::HashSet<String>) {
        self.channels.retain(|(addr, _, _), _| live.contains(addr));
    }

    /// Prepares the call of `method` for one HTTP request, before any backend is chosen:
    /// transcodes the request (path variables of `route`, `query`, `body`) and builds the
    /// metadata from `headers` for `caller` (see the module docs). `Err`: 400 `BAD_REQUEST`
    /// naming the field of a request that does not transcode.
    pub fn prepare(
        method: &PreparedMethod,
        route: &RouteMatch,
        query: Option<&str>,
        body: &[u8],
        headers: &http::HeaderMap,
        caller: &Caller<'_>,
    ) -> Result<GrpcRequest, GatewayError> {
        let query = if route.router_style { None } else { query };
        let message = method
            .plan
            .request_bytes(route.binding, &route.vars, query, body)?;
        let metadata = forward::backend_headers(headers, caller, Target::Grpc);
        Ok(GrpcRequest {
            frame: grpc_client::frame(&message),
            metadata,
            binding: route.binding,
        })
    }

    /// Calls `method` on the backend at `endpoint_addr` with a prepared `request`, sets the
    /// deadline (`grpc-timeout`, and a local timer as backstop), and answers the reply as
    /// JSON (200) or the mapped error:
    ///
    /// - no reply within `timeout`: 504 `UPSTREAM_TIMEOUT`;
    /// - no connection, a broken one, a reply over the size limit or that does not decode:
    ///   502 `UPSTREAM_ERROR`;
    /// - a non-OK status: its name and message, with the HTTP status of docs/PROTOCOL.md
    ///   ("The error envelope"; [`status_to_error`]).
    ///
    /// Which of these the breaker counts as a backend failure is the error's
    /// [`Code::side`](crate::error::Code::side), decided by the invoke tier. Addresses and
    /// transport errors are in the errors' `detail`, never in their message.
    pub async fn send(
        &self,
        method: &PreparedMethod,
        request: GrpcRequest,
        endpoint_addr: &str,
        settings: ChannelSettings,
        timeout: Duration,
    ) -> Result<Whole, GatewayError> {
        if timeout.is_zero() {
            return Err(timeout_error(endpoint_addr, timeout));
        }
        let channel = self.channel(endpoint_addr, settings)?;
        let GrpcRequest {
            frame,
            metadata,
            binding,
        } = request;
        let started = Instant::now();
        let call = channel.unary(
            &method.path,
            metadata,
            frame,
            timeout,
            self.config.max_response_bytes,
        );
        let reply = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                return Err(self.call_error(e, endpoint_addr, started.elapsed(), timeout))
            }
            Err(_) => return Err(timeout_error(endpoint_addr, timeout)),
        };
        let body = method.plan.response_from_bytes(binding, &reply.message)?;
        let mut answer_headers = Vec::with_capacity(2);
        answer_headers.push(("content-type".to_owned(), "application/json".to_owned()));
        reply_metadata(&reply.headers, &mut answer_headers);
        Ok(Whole {
            status: 200,
            headers: answer_headers,
            body: Bytes::from(body),
        })
    }

    /// [`GrpcInvoker::prepare`] then [`GrpcInvoker::send`], for a caller known only by
    /// `request_id`.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        method: &PreparedMethod,
        route: &RouteMatch,
        query: Option<&str>,
        body: &[u8],
        headers: &http::HeaderMap,
        endpoint_addr: &str,
        timeout: Duration,
        request_id: &str,
    ) -> Result<Whole, GatewayError> {
        let caller = Caller::new(request_id);
        let request = Self::prepare(method, route, query, body, headers, &caller)?;
        self.send(method, request, endpoint_addr, self.settings(None), timeout)
            .await
    }

    /// Maps a failed call: the transport's failures to 502/504 (a call that never reached
    /// the backend says so in its detail, for [`unreachable`]), the backend's own statuses
    /// by [`status_to_error`].
    fn call_error(
        &self,
        error: CallError,
        addr: &str,
        elapsed: Duration,
        timeout: Duration,
    ) -> GatewayError {
        match error {
            CallError::Unreachable(why) => GatewayError::upstream(
                Code::UpstreamError,
                "the backend could not be reached",
                format!("gRPC backend {addr} is not reachable: {why}"),
            ),
            CallError::TooLarge(max) => GatewayError::upstream(
                Code::UpstreamError,
                "the backend's answer is too large",
                format!("gRPC backend {addr} replied more than {max} bytes"),
            ),
            CallError::Transport(_) if elapsed >= timeout => timeout_error(addr, timeout),
            CallError::Transport(why) => GatewayError::upstream(
                Code::UpstreamError,
                "the backend failed to answer",
                format!("gRPC backend {addr} failed: {why}"),
            ),
            CallError::Status(status)
                if elapsed >= timeout
                    && matches!(
                        status.code(),
                        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                    ) =>
            {
                timeout_error(addr, timeout)
            }
            CallError::Status(status) => status_to_error(&status),
        }
    }
}

fn timeout_error(addr: &str, timeout: Duration) -> GatewayError {
    GatewayError::upstream(
        Code::UpstreamTimeout,
        "the backend did not answer in time",
        format!(
            "gRPC backend {addr} did not answer within {} ms",
            timeout.as_millis()
        ),
    )
}

/// A backend's non-OK status as the gateway's error: code = the status name, HTTP status as
/// docs/PROTOCOL.md ("The error envelope") says, message = the status message for the
/// statuses a backend answers deliberately (`NOT_FOUND`, `FAILED_PRECONDITION`, ...). For
/// the ones that mean it failed (`UNAVAILABLE`, `INTERNAL`, `UNKNOWN`,
/// `DEADLINE_EXCEEDED`: [`Side::Upstream`](crate::error::Side::Upstream)), often written by
/// the transport or a proxy in front of the backend, the message is a fixed text and the
/// backend's goes to the detail (docs/SECURITY.md, "No internals in answers").
pub fn status_to_error(status: &Status) -> GatewayError {
    let (name, http_status) = code_name_and_status(status.code());
    let code = Code::Grpc { name, http_status };
    if status.code() == tonic::Code::ResourceExhausted && about_metadata(status.message()) {
        // The transport's refusal of the request's metadata (grpc-core: "received initial
        // metadata size exceeds limit (9021 vs. 8192)" naming keys and sizes): about the
        // gateway's call, not the merchant's business; the text stays in the log.
        return GatewayError {
            detail: Some(format!("gRPC status {name}: {}", status.message())),
            ..GatewayError::new(code, "the request's headers are too large for the backend")
        };
    }
    if code.side() != crate::error::Side::Upstream {
        return GatewayError::new(code, status.message());
    }
    let public = match status.code() {
        tonic::Code::Unavailable => "the backend is unavailable",
        tonic::Code::DeadlineExceeded => "the backend did not answer in time",
        _ => "the backend failed",
    };
    GatewayError::upstream(
        code,
        public,
        format!("gRPC status {name}: {}", status.message()),
    )
}

/// Whether a `RESOURCE_EXHAUSTED` message is a gRPC stack's refusal of the request's
/// metadata (grpc-core, grpc-go, grpc-java, grpc-js word it with "metadata" or "header").
fn about_metadata(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("metadata") || m.contains("header")
}

/// Whether a failed call never reached its backend (the connection could not be made, so
/// nothing was sent and another endpoint may be tried).
pub fn unreachable(e: &GatewayError) -> bool {
    e.code == Code::UpstreamError
        && [
            "tcp connect error",
            "Connection refused",
            "is not reachable",
        ]
        .iter()
        .any(|s| e.detail.as_deref().is_some_and(|d| d.contains(s)))
}

/// Appends the reply's metadata as `grpc-metadata-<key>` headers, except gRPC's own, the
/// transport's and [`forward::BACKEND_IDENTITY`] (the load report stays, for the balancer,
/// which removes it: `invoke::call`).
fn reply_metadata(metadata: &http::HeaderMap, out: &mut Vec<(String, String)>) {
    for (key, value) in metadata {
        let k = key.as_str();
        if k.starts_with("grpc-")
            || k.ends_with("-bin")
            || k == "content-type"
            || k == "date"
            || super::forward::BACKEND_IDENTITY.contains(&k)
        {
            continue;
        }
        if let Ok(v) = value.to_str() {
            out.push((format!("grpc-metadata-{k}"), v.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clusters_grpc_settings_override_the_gateways_defaults() {
        let invoker = GrpcInvoker::new();
        let defaults = invoker.settings(None);
        assert_eq!(defaults.connect_timeout, Duration::from_secs(2));
        assert_eq!(defaults.compress_min_bytes, None);
        let cluster = v1::GrpcClient {
            keepalive_ms: Some(300_000),
            compress_min_bytes: Some(65_536),
            connect_timeout_ms: Some(500),
            ..v1::GrpcClient::default()
        };
        let s = invoker.settings(Some(&cluster));
        assert_eq!(s.keepalive_interval, Duration::from_secs(300));
        assert_eq!(s.keepalive_timeout, defaults.keepalive_timeout);
        assert_eq!(s.connect_timeout, Duration::from_millis(500));
        assert_eq!(s.compress_min_bytes, Some(65_536));
        assert_ne!(s, defaults, "another channel key");
    }

    #[test]
    fn no_keepalive_pings_unless_configured() {
        // gRPC servers' default policy (grpc-core: at most one PING per 5 minutes, none
        // without data) closes a connection pinged more often, with its calls.
        if std::env::var_os(KEEPALIVE_ENV).is_none() {
            assert_eq!(GrpcConfig::default().keepalive_interval, Duration::ZERO);
        }
    }

    #[test]
    fn reply_metadata_keeps_the_backends_identity_to_itself() {
        let mut m = http::HeaderMap::new();
        for (k, v) in [
            ("x-order-shard", "7"),
            ("server", "envoy"),
            ("x-powered-by", "Express"),
            ("via", "1.1 internal-lb"),
            ("grpc-status", "0"),
            ("x-portico-load", "cpu=0.1"),
            ("trace-bin", "AAEC"),
        ] {
            m.insert(k, v.parse().unwrap());
        }
        let mut out = Vec::new();
        reply_metadata(&m, &mut out);
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "grpc-metadata-x-order-shard",
                "grpc-metadata-x-portico-load"
            ],
            "the load report stays for the balancer, which removes it"
        );
    }

    #[test]
    fn a_metadata_refusal_never_shows_the_backends_text() {
        let text = "received initial metadata size exceeds limit (9021 vs. 8192); \
                    x-portico-request-id:36B x-forwarded-for:30B";
        let e = status_to_error(&Status::resource_exhausted(text));
        assert_eq!((e.code.as_str(), e.status()), ("RESOURCE_EXHAUSTED", 429));
        assert!(!e.message.contains("x-portico"), "{}", e.message);
        assert!(e.detail.as_deref().is_some_and(|d| d.contains("9021")));
        // A business RESOURCE_EXHAUSTED (a quota) keeps its own message.
        let e = status_to_error(&Status::resource_exhausted("order quota used up"));
        assert_eq!(e.message, "order quota used up");
    }

    #[test]
    fn statuses_map_as_grpc_gateway_does() {
        use tonic::Code as C;
        let cases = [
            (C::NotFound, "NOT_FOUND", 404),
            (C::InvalidArgument, "INVALID_ARGUMENT", 400),
            (C::Unauthenticated, "UNAUTHENTICATED", 401),
            (C::PermissionDenied, "PERMISSION_DENIED", 403),
            (C::ResourceExhausted, "RESOURCE_EXHAUSTED", 429),
            (C::Unavailable, "UNAVAILABLE", 503),
            (C::DeadlineExceeded, "DEADLINE_EXCEEDED", 504),
            (C::Unimplemented, "UNIMPLEMENTED", 501),
            (C::AlreadyExists, "ALREADY_EXISTS", 409),
            (C::Aborted, "ABORTED", 409),
            (C::Internal, "INTERNAL", 500),
            (C::FailedPrecondition, "FAILED_PRECONDITION", 500),
            (C::DataLoss, "DATA_LOSS", 500),
        ];
        for (code, name, http) in cases {
            let e = status_to_error(&Status::new(code, "why"));
            assert_eq!(e.code.as_str(), name);
            assert_eq!(e.status(), http);
            if e.code.side() == crate::error::Side::Upstream {
                // A failure's text (often a proxy's or the transport's) is for the log.
                assert_ne!(e.message, "why");
                assert_eq!(
                    e.detail.as_deref(),
                    Some(&*format!("gRPC status {name}: why"))
                );
            } else {
                assert_eq!((e.message.as_str(), e.detail.as_deref()), ("why", None));
            }
        }
    }
}
