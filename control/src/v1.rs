//! The v1 documents of the configuration tree (docs/operations/config-tree.md, "The configuration tree"),
//! as serde DTOs.
//!
//! These types are the external contract: fields may be added (always optional), never
//! renamed or removed. Unknown fields are ignored so that an older gateway can read a newer
//! document. Validation into the internal [`crate::Snapshot`] lives in `crate::validate`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `apis/<api_id>`: one published (or, under `sandbox/`, draft) API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApiDefinition {
    pub id: String,
    #[serde(default)]
    pub version: u64,
    pub http: HttpRule,
    pub backend: Backend,
    #[serde(default)]
    pub auth: AuthMode,
    #[serde(default)]
    pub policy: Policy,
    /// What merchants read about the API: the developer portal's summary of it (and the
    /// first paragraph of its description). Merchant words: never a gRPC service or method
    /// name, an internal host or a ticket (an import defaults it from the RPC's leading
    /// comment; docs/operations/portal.md, "The merchants' portal").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// For an HTTP-backed API: a JSON Schema (2020-12) of the request body, shown to
    /// merchants by the registry's portal (docs/operations/portal.md, "The merchants' portal"). The
    /// gateway does not enforce it. Only local `$ref`s (`#/$defs/...`); no `$id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_schema: Option<serde_json::Value>,
    /// For an HTTP-backed API: a JSON Schema (2020-12) of the successful answer's body, as
    /// `request_schema`. gRPC-backed APIs take both from their descriptor instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<serde_json::Value>,
    /// Who owns the API: an email address, sent the API's daily and weekly reports
    /// (docs/operations/history-and-reports.md, "Reports"). Gateways ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// The HTTP mapping of an API, shaped like `google.api.HttpRule`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpRule {
    pub method: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_bindings: Vec<HttpBinding>,
}

/// One of `HttpRule.additional_bindings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpBinding {
    pub method: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
}

/// Where an API's calls go: a cluster, a deadline, and either a gRPC method or an HTTP path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Backend {
    pub cluster: String,
    #[serde(default = "default_timeout_ms")]
    #[schemars(range(min = 1, max = crate::validate::MAX_TIMEOUT_MS))]
    pub timeout_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcBackend>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpBackend>,
}

/// Default deadline of a backend call when an API does not set `timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u64 = 3000;

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// A gRPC method called by generic invocation, from the descriptor set `descriptors/<sha256>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GrpcBackend {
    pub service: String,
    pub method: String,
    pub descriptor: String,
}

/// An HTTP backend; `path` optionally rewrites the upstream path (it may use `{var}`s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpBackend {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// How callers of an API authenticate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    #[default]
    Signature,
    None,
}

/// Per-API protection; every part optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Policy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulkhead: Option<BulkheadPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerPolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimitRule>,
    /// Request body limit for this API in bytes (default: the gateway's, 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_body_bytes: Option<u64>,
    // Hot APIs (docs/operations/caching.md, "Caching and hot keys"): all optional.
    /// The response cache of GET (and read-only router-style) answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CachePolicy>,
    /// Hot-key detection, with automatic caching of hot keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_keys: Option<HotKeysPolicy>,
    /// Whether the API only reads: its router-style calls (any method) may be cached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// `policy.cache`: cache 200 answers per key for `ttl_ms` (0: never cache, not even hot keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CachePolicy {
    pub ttl_ms: u64,
    /// Key selectors (`path:<var>`, `query:<name>`, `header:<Name>`, `app`, `ip`); default:
    /// the API alone (one entry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// Most entries kept (default 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::validate::MAX_CACHE_ENTRIES))]
    pub max_entries: Option<u64>,
    /// Largest body cached, in bytes (default 65,536); larger answers are streamed, not cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::validate::MAX_CACHE_BODY_BYTES))]
    pub max_body_bytes: Option<u64>,
    /// Whether one answer serves every app (default false: the verified app is part of every
    /// key of a signed API, so an answer is served only to the app it was made for).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// The query parameters that matter for the answer, by name (default: the whole
    /// canonical query is part of the key; router-style calls: the whole JSON body). Named
    /// parameters are read from the query of a RESTful call and from the top-level fields of
    /// a router-style call's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<Vec<String>>,
}

/// `policy.hot_keys`: a bounded heavy-hitter count per key; hot keys are cached for
/// `auto_cache_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HotKeysPolicy {
    pub key: Vec<String>,
    /// Hot above this many requests per second (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_above: Option<f64>,
    /// Hot above this share (0–1] of `link_bytes_per_s` (default 0.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_share_above: Option<f64>,
    /// The link's bytes per second for the bandwidth rule (default: no bandwidth rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bytes_per_s: Option<u64>,
    /// How long a hot key's answer is cached. Only an API that opts in caches hot keys by
    /// itself: `read_only: true` and this field set (default: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_cache_ms: Option<u64>,
    /// How many keys the detector tracks and reports (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::validate::MAX_HOT_TOP))]
    pub top: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BulkheadPolicy {
    #[schemars(range(min = 1))]
    pub max_concurrent: u32,
    /// Wait at most this long for a slot before answering 503 `BULKHEAD_FULL` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = crate::validate::MAX_TIMEOUT_MS))]
    pub max_wait_ms: Option<u64>,
}

/// Circuit breaker settings (consecutive-failure, slow-call and Sentinel-style error-ratio modes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BreakerPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub consecutive_failures: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::validate::MAX_TIMEOUT_MS))]
    pub slow_call_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub consecutive_slow_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400_000))]
    pub open_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub half_open_probes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1.0), extend("minimum" = 0, "exclusiveMinimum" = true))]
    pub error_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400_000))]
    pub window_ms: Option<u64>,
}

/// One rate limit: `limit` requests `per` second or minute, counted per `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RateLimitRule {
    #[serde(default = "default_rate_key")]
    pub key: RateKey,
    #[schemars(range(min = 1))]
    pub limit: u32,
    pub per: Per,
    /// Extra burst allowance above the steady rate (default: `limit`, i.e. a full period's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub burst: Option<u32>,
    /// Where the limit is counted: `node` (default, per gateway) or `cluster` (shared by the
    /// fleet; docs/operations/cluster.md, "Running a cluster").
    #[serde(default, skip_serializing_if = "Scope::is_node")]
    pub scope: Scope,
}

/// Where a rate limit is counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Each gateway node counts on its own (v1's behaviour).
    #[default]
    Node,
    /// One budget for all gateways: shared counters in Redis (`--redis`), else the limit
    /// split by the number of live gateways in `nodes/`.
    Cluster,
}

impl Scope {
    pub fn is_node(&self) -> bool {
        *self == Scope::Node
    }
}

fn default_rate_key() -> RateKey {
    RateKey::One("api".to_owned())
}

/// `api`, `app`, `ip`, `header:<Name>`, or a list of them for a combined key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RateKey {
    One(String),
    Many(Vec<String>),
}

impl RateKey {
    /// The key parts, in order.
    pub fn parts(&self) -> Vec<&str> {
        match self {
            RateKey::One(k) => vec![k.as_str()],
            RateKey::Many(ks) => ks.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    Second,
    Minute,
}

/// `clusters/<name>`: a set of backend endpoints, and how calls are spread over them
/// (docs/operations/clusters.md, "Clusters: balancing, health, failover, sleep").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Cluster {
    pub protocol: Protocol,
    #[schemars(length(min = 1))]
    pub endpoints: Vec<Endpoint>,
    /// The `Host` an HTTP backend receives (default: the endpoint's address as configured);
    /// a client's own `Host` never reaches a backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// How an endpoint is chosen (default `round_robin`, weighted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balancing: Option<Balancing>,
    /// With `consistent_hash`: what is hashed, `app` | `ip` | `header:<Name>` |
    /// `query:<name>` | `path:<var>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_key: Option<String>,
    /// Session affinity by cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky: Option<Sticky>,
    /// Active probes of every endpoint (both sets) from every gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Passive ejection on failures of real traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier: Option<Outlier>,
    /// A second set of endpoints that serves when the operator or the health of the
    /// primary set says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<Standby>,
    /// The set the operator chose to serve (default `primary`); written by the registry's
    /// failover action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveSet>,
    /// Auto-load: wake the backend on the first request when all endpoints are down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep: Option<Sleep>,
    /// Request-rate rules evaluated by the registry, calling a webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
    /// How the gateway's gRPC client talks to the endpoints of a `grpc` cluster
    /// (keep-alive, compression, dialling); every field has a default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcClient>,
}

/// `clusters/<name>.grpc`: the gateway's gRPC client settings for one cluster
/// (docs/operations/clusters.md, "gRPC client settings"). Absent fields take the defaults there:
/// no keep-alive PINGs, uncompressed requests, 2 s to dial.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcClient {
    /// HTTP/2 PING interval while calls are in flight, ms; `0`: none. Absent: the
    /// gateway's `PORTICO_GRPC_KEEPALIVE_MS` (unset: none). At least 10 000 when set:
    /// grpc-core servers close a connection pinged more often than their policy allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 86_400_000))]
    pub keepalive_ms: Option<u64>,
    /// How long a PING may go unanswered before the connection is dropped, ms (default
    /// 10 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1000, max = 600_000))]
    pub keepalive_timeout_ms: Option<u64>,
    /// Requests whose message has at least this many bytes are sent gzip-compressed
    /// (`grpc-encoding: gzip`); absent: requests are never compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress_min_bytes: Option<u64>,
    /// How long dialling an endpoint may take (TCP and the HTTP/2 preface), ms (default
    /// 2000; the call's own deadline still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 60_000))]
    pub connect_timeout_ms: Option<u64>,
}

impl Cluster {
    /// The balancing mode, defaulted.
    pub fn balancing(&self) -> Balancing {
        self.balancing.unwrap_or_default()
    }

    /// The set the operator chose, defaulted.
    pub fn active(&self) -> ActiveSet {
        self.active.unwrap_or_default()
    }
}

/// A cluster's balancing mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Balancing {
    /// Smooth weighted round-robin.
    #[default]
    RoundRobin,
    /// Power of two choices over the load reported in `X-Portico-Load`.
    LeastLoad,
    /// Power of two choices over the peak EWMA of latency × (in flight + 1).
    PeakEwma,
    /// A hash of `hash_key` picks the endpoint (rendezvous hashing).
    ConsistentHash,
}

impl Balancing {
    /// The name used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Balancing::RoundRobin => "round_robin",
            Balancing::LeastLoad => "least_load",
            Balancing::PeakEwma => "peak_ewma",
            Balancing::ConsistentHash => "consistent_hash",
        }
    }
}

/// Default name of the sticky cookie.
pub const DEFAULT_STICKY_COOKIE: &str = "PORTICO_STICKY";

/// Cookie affinity: `cookie` names the endpoint for `ttl_s` seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sticky {
    #[serde(default = "default_sticky_cookie")]
    pub cookie: String,
    #[serde(default = "default_sticky_ttl_s")]
    #[schemars(range(min = 1, max = 34_560_000))]
    pub ttl_s: u64,
}

fn default_sticky_cookie() -> String {
    DEFAULT_STICKY_COOKIE.to_owned()
}

fn default_sticky_ttl_s() -> u64 {
    3600
}

/// Active health checks: HTTP `GET path` expecting 2xx, or for gRPC clusters
/// `grpc.health.v1.Health/Check` of `service` (default `""`, the whole server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HealthCheck {
    #[serde(default = "default_health_path")]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default = "default_health_interval_ms")]
    pub interval_ms: u64,
    #[serde(default = "default_health_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_two")]
    #[schemars(range(min = 1, max = 100))]
    pub unhealthy_after: u32,
    #[serde(default = "default_two")]
    #[schemars(range(min = 1, max = 100))]
    pub healthy_after: u32,
}

fn default_health_path() -> String {
    "/healthz".to_owned()
}

fn default_health_interval_ms() -> u64 {
    1000
}

fn default_health_timeout_ms() -> u64 {
    500
}

fn default_two() -> u32 {
    2
}

/// Passive ejection: `consecutive_failures` 5xx / connect failures / timeouts eject an
/// endpoint for `eject_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Outlier {
    #[serde(default = "default_outlier_failures")]
    #[schemars(range(min = 1, max = 10_000))]
    pub consecutive_failures: u32,
    #[serde(default = "default_eject_ms")]
    pub eject_ms: u64,
}

fn default_outlier_failures() -> u32 {
    5
}

fn default_eject_ms() -> u64 {
    10_000
}

/// The standby set and when traffic moves to it on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Standby {
    #[schemars(length(min = 1))]
    pub endpoints: Vec<Endpoint>,
    /// Fail over when the healthy fraction of the primary set is below this, in (0, 1].
    #[serde(default = "default_failover_below")]
    #[schemars(range(max = 1.0), extend("minimum" = 0, "exclusiveMinimum" = true))]
    pub failover_below: f64,
    #[serde(default)]
    pub failback: Failback,
}

fn default_failover_below() -> f64 {
    0.5
}

/// After an automatic failover: come back on its own (`auto`) or stay (`manual`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Failback {
    #[default]
    Auto,
    Manual,
}

/// Which endpoint set serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActiveSet {
    #[default]
    Primary,
    Standby,
}

impl ActiveSet {
    /// The name used in documents, `/status` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ActiveSet::Primary => "primary",
            ActiveSet::Standby => "standby",
        }
    }
}

/// Auto-load: a cluster whose endpoints are all down is asleep; the first request POSTs
/// `wake_url` and is held up to `hold_ms`, else 503 `BACKEND_LOADING` with
/// `Retry-After: retry_after_s`. `sleep_url` and `idle_s` are for the registry, which puts
/// an idle cluster to sleep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sleep {
    pub wake_url: String,
    #[serde(default = "default_hold_ms")]
    #[schemars(range(max = 86_400_000))]
    pub hold_ms: u64,
    #[serde(default = "default_retry_after_s")]
    #[schemars(range(min = 1, max = 86_400))]
    pub retry_after_s: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub idle_s: Option<u64>,
}

fn default_hold_ms() -> u64 {
    3000
}

fn default_retry_after_s() -> u64 {
    2
}

/// Autoscale rules, evaluated by the registry on the cluster-wide request rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Autoscale {
    pub webhook: String,
    #[schemars(length(min = 1))]
    pub rules: Vec<AutoscaleRule>,
    #[serde(default = "default_cooldown_s")]
    #[schemars(range(max = 86_400))]
    pub cooldown_s: u64,
}

fn default_cooldown_s() -> u64 {
    60
}

/// One rule: the rate above (or below) a threshold for `for_s` seconds fires `action`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AutoscaleRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps_above: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps_below: Option<f64>,
    #[schemars(range(min = 1, max = 86_400))]
    pub for_s: u64,
    pub action: ScaleAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScaleAction {
    Up,
    Down,
}

impl ScaleAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleAction::Up => "up",
            ScaleAction::Down => "down",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Grpc,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Endpoint {
    pub addr: String,
    #[serde(default = "default_weight")]
    #[schemars(range(min = 1))]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

/// `apps/<app_key>`: a merchant application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct App {
    pub secret: String,
    #[serde(default)]
    pub status: AppStatus,
    #[serde(default)]
    pub apis: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<AppRateLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Notification topics the app subscribes to itself (granted only if the topic's own
    /// `apps` also grants it; docs/operations/notifications.md, "Notifications").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<String>,
    /// Where the gateway POSTs the app's notifications, signed with its secret, when the
    /// merchant does not hold a stream (docs/PROTOCOL.md, "Notifications").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

/// `topics/<name>`: a notification topic backends publish to (docs/operations/notifications.md,
/// "Notifications").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Topic {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The app keys granted the topic, or `["*"]` for every app.
    #[serde(default)]
    pub apps: Vec<String>,
    /// How long an undelivered event is kept, in seconds.
    #[serde(default = "default_retention_s")]
    #[schemars(range(min = 1, max = crate::validate::MAX_RETENTION_S))]
    pub retention_s: u64,
}

/// Default retention of a topic's events: one day.
pub const DEFAULT_RETENTION_S: u64 = 86_400;

fn default_retention_s() -> u64 {
    DEFAULT_RETENTION_S
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AppStatus {
    #[default]
    Active,
    Disabled,
}

/// An app's own limit, counted per app across all its APIs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppRateLimit {
    #[schemars(range(min = 1))]
    pub limit: u32,
    pub per: Per,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub burst: Option<u32>,
    /// `node` (default) or `cluster`, as for [`RateLimitRule::scope`].
    #[serde(default, skip_serializing_if = "Scope::is_node")]
    pub scope: Scope,
}

/// `switches/<api_id>`: a degradation switch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Switch {
    #[serde(default)]
    pub degraded: bool,
    /// Why, for operators (the console, the audit, the access log); never shown to
    /// merchants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What merchants are told by the 503 `API_DEGRADED` of a switch without a fallback
    /// (default [`DEFAULT_DEGRADED_MESSAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// Only on a key-level switch `switches/<api_id>@<label>`: selector → the values it
    /// matches; a request matches when every selector's value is one of its list.
    #[serde(default, rename = "match", skip_serializing_if = "BTreeMap::is_empty")]
    pub matches: BTreeMap<String, Vec<String>>,
}

/// The merchant-facing message of a degraded API whose switch sets none.
pub const DEFAULT_DEGRADED_MESSAGE: &str = "the API is temporarily unavailable";

/// The canned answer of a degraded API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Fallback {
    #[serde(default = "default_fallback_status")]
    #[schemars(range(min = 100, max = 599))]
    pub status: u16,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: serde_json::Value,
}

fn default_fallback_status() -> u16 {
    200
}

/// `ipacl`: CIDR deny and allow lists, and the proxies whose `X-Forwarded-For` is trusted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IpAcl {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
}

/// `alerts/<name>`: an alerting rule, evaluated by the registry over the metrics it aggregates
/// from every gateway (docs/operations/alerts.md, "Alerts"). Gateways validate it and ignore it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AlertRule {
    /// An API id, or `*`: every API, each on its own. Ignored by `node_missing` and
    /// `config_lag_above`, which watch the gateways.
    #[serde(default = "default_alert_api")]
    pub api: String,
    /// One of [`ALERT_CONDITIONS`].
    #[schemars(extend("enum" = ALERT_CONDITIONS))]
    pub condition: String,
    /// The bound the condition compares against, in the condition's unit (milliseconds,
    /// a fraction, requests per second, nodes, seconds). Optional for `breaker_open` and
    /// `node_missing` (default 0: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub threshold: Option<f64>,
    /// Seconds the condition must hold before the alert fires, and be false before it
    /// resolves (default 0: at the next evaluation).
    #[serde(default)]
    #[schemars(range(max = crate::validate::MAX_ALERT_FOR_S))]
    pub for_s: u64,
    /// A free label for the receivers (`page`, `ticket`, `info`, ...; default `warning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,32}$"))]
    pub severity: Option<String>,
    /// Where firing and resolved notifications go (the console always shows them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receivers: Vec<AlertReceiver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

fn default_alert_api() -> String {
    "*".to_owned()
}

/// The conditions an [`AlertRule`] may watch.
pub const ALERT_CONDITIONS: [&str; 7] = [
    "tp99_ms_above",
    "availability_below",
    "qps_above",
    "qps_below",
    "breaker_open",
    "node_missing",
    "config_lag_above",
];

/// One receiver of an alert's notifications: exactly one of `webhook` (an `http(s)://` URL,
/// sent a signed JSON payload) and `email` (an address, sent through the registry's SMTP
/// server).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AlertReceiver {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// The JSON Schemas of the v1 documents and of every type they use, keyed by type name, in
/// the OpenAPI 3.0 dialect (`$ref`s to `#/components/schemas/<name>`, `nullable`): what the
/// registry serves in its OpenAPI document (docs/operations/registry.md, "The admin API's schemas").
/// Generated from these types, so they describe what the gateway's parser accepts; the range
/// checks of `crate::validate` are carried as `minimum`/`maximum`, the reference checks not.
pub fn openapi_schemas() -> serde_json::Map<String, serde_json::Value> {
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    generator.subschema_for::<ApiDefinition>();
    generator.subschema_for::<Cluster>();
    generator.subschema_for::<App>();
    generator.subschema_for::<Topic>();
    generator.subschema_for::<Switch>();
    generator.subschema_for::<IpAcl>();
    generator.subschema_for::<AlertRule>();
    generator.take_definitions(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_follow_the_serde_attributes() {
        let s = openapi_schemas();
        for name in [
            "ApiDefinition",
            "Cluster",
            "App",
            "Topic",
            "Switch",
            "IpAcl",
            "AlertRule",
        ] {
            assert!(s[name].is_object(), "{name}");
        }
        let policy = &s["Policy"]["properties"];
        for field in [
            "bulkhead",
            "breaker",
            "rate_limits",
            "max_body_bytes",
            "cache",
            "hot_keys",
            "read_only",
        ] {
            assert!(policy[field].is_object(), "Policy.{field}");
        }
        // `deny_unknown_fields` where the type has it, and only there (v1 readers ignore
        // unknown fields elsewhere).
        assert_eq!(s["GrpcClient"]["additionalProperties"], false);
        assert!(s["Cluster"].get("additionalProperties").is_none());
        // `rename`, `default`, untagged enums, maps.
        assert!(s["Switch"]["properties"]["match"]["additionalProperties"].is_object());
        assert_eq!(s["RateLimitRule"]["properties"]["key"]["default"], "api");
        assert_eq!(s["RateKey"]["anyOf"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            s["ApiDefinition"]["required"],
            serde_json::json!(["id", "http", "backend"])
        );
        assert_eq!(
            s["Backend"]["properties"]["timeout_ms"]["default"],
            DEFAULT_TIMEOUT_MS
        );
        assert!(s["ApiDefinition"]["properties"]["description"]["nullable"] == true);
    }
}
