//! The v1 documents of the configuration tree (docs/OPERATIONS.md, "The configuration tree"),
//! as serde DTOs.
//!
//! These types are the external contract: fields may be added (always optional), never
//! renamed or removed. Unknown fields are ignored so that an older gateway can read a newer
//! document. Validation into the internal [`crate::Snapshot`] lives in `crate::validate`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `apis/<api_id>`: one published (or, under `sandbox/`, draft) API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Who owns the API: an email address, sent the API's daily and weekly reports
    /// (docs/OPERATIONS.md, "Reports"). Gateways ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// The HTTP mapping of an API, shaped like `google.api.HttpRule`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpBinding {
    pub method: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
}

/// Where an API's calls go: a cluster, a deadline, and either a gRPC method or an HTTP path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Backend {
    pub cluster: String,
    #[serde(default = "default_timeout_ms")]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrpcBackend {
    pub service: String,
    pub method: String,
    pub descriptor: String,
}

/// An HTTP backend; `path` optionally rewrites the upstream path (it may use `{var}`s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpBackend {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// How callers of an API authenticate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    #[default]
    Signature,
    None,
}

/// Per-API protection; every part optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulkhead: Option<BulkheadPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerPolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimitRule>,
    /// Request body limit for this API in bytes (default: the gateway's, 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkheadPolicy {
    pub max_concurrent: u32,
    /// Wait at most this long for a slot before answering 503 `BULKHEAD_FULL` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<u64>,
}

/// Circuit breaker settings (consecutive-failure, slow-call and Sentinel-style error-ratio modes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BreakerPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_call_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_slow_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_open_probes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
}

/// One rate limit: `limit` requests `per` second or minute, counted per `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateLimitRule {
    #[serde(default = "default_rate_key")]
    pub key: RateKey,
    pub limit: u32,
    pub per: Per,
    /// Extra burst allowance above the steady rate (default: `limit`, i.e. a full period's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

fn default_rate_key() -> RateKey {
    RateKey::One("api".to_owned())
}

/// `api`, `app`, `ip`, `header:<Name>`, or a list of them for a combined key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    Second,
    Minute,
}

/// `clusters/<name>`: a set of backend endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    pub protocol: Protocol,
    pub endpoints: Vec<Endpoint>,
    /// `round_robin` (weighted, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balancing: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Grpc,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub addr: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

/// `apps/<app_key>`: a merchant application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppStatus {
    #[default]
    Active,
    Disabled,
}

/// An app's own limit, counted per app across all its APIs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppRateLimit {
    pub limit: u32,
    pub per: Per,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// `switches/<api_id>`: a degradation switch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Switch {
    #[serde(default)]
    pub degraded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
}

/// The canned answer of a degraded API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fallback {
    #[serde(default = "default_fallback_status")]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpAcl {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
}

/// `alerts/<name>`: an alerting rule, evaluated by the registry over the metrics it aggregates
/// from every gateway (docs/OPERATIONS.md, "Alerts"). Gateways validate it and ignore it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertRule {
    /// An API id, or `*`: every API, each on its own. Ignored by `node_missing` and
    /// `config_lag_above`, which watch the gateways.
    #[serde(default = "default_alert_api")]
    pub api: String,
    /// One of [`ALERT_CONDITIONS`].
    pub condition: String,
    /// The bound the condition compares against, in the condition's unit (milliseconds,
    /// a fraction, requests per second, nodes, seconds). Optional for `breaker_open` and
    /// `node_missing` (default 0: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// Seconds the condition must hold before the alert fires, and be false before it
    /// resolves (default 0: at the next evaluation).
    #[serde(default)]
    pub for_s: u64,
    /// A free label for the receivers (`page`, `ticket`, `info`, ...; default `warning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertReceiver {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}
