//! A gateway's admin `GET /status`: the one definition of the document, written by the gateway
//! (`gateway/src/admin.rs` fills a [`GatewayStatus`]) and read through the same types by the
//! registry (`registry/src/gateway_status.rs` and the views built on it) and the `portico`
//! CLI. Its JSON Schema, generated from these types by [`json_schema`], is checked in at
//! `docs/schemas/gateway-status.schema.json` (docs/operations/gateway.md, "Admin endpoints").
//!
//! **Writing.** The gateway serves the document as [`serde_json::Value`] text: object keys in
//! sorted order at every level, as `/status` always had them. Optional values the gateway
//! knows to be absent are written as `null` where the field is listed without "absent when"
//! below, and left out where it is.
//!
//! **Reading** (a rolling upgrade has registries and gateways of different versions):
//!
//! - unknown fields are ignored everywhere (no type here denies them), so a newer gateway's
//!   additions never fail an older reader;
//! - the fields `/status` had from its first version (the node's identity, and per plane
//!   `ready`, `config_source`, `config_version`, `applied_at_ms`, `config_age_ms`, `apis_loaded`,
//!   `apis`, `apps_loaded`, `switches_degraded`, `rejected_documents` with `path`, `reason`,
//!   `kept_previous`, and `invoke`) are required: a document without them is not a gateway's
//!   `/status`;
//! - every part added since (`config_loop`, `hot_keys`, `clusters`, `rejected_documents[].kept`,
//!   `cluster_members`, `redis`, `notify`, `tls`, `zookeeper`) is read leniently: missing,
//!   `null`, or of a shape this reader does not know (a newer gateway changed it), it takes its
//!   default (`None`, empty, 0) and the rest of the document is still read. Within such a part
//!   every field defaults when missing too. Enumerations (`breaker`, `active`, `reason`,
//!   `state`, `store`, ...) are strings, so a value added later is read as it is;
//! - a reader that passes a part on (the registry's views) serializes the typed part back:
//!   fields this reader does not know are not passed on.

use crate::snapshot::ConfigVersion;
use crate::zk::ZkStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// Where the JSON Schema of [`GatewayStatus`] is checked in, relative to the workspace root.
pub const SCHEMA_PATH: &str = "docs/schemas/gateway-status.schema.json";

/// A gateway's `GET /status` (admin listener): the node, the live plane's state (flattened
/// into the top level), the sandbox plane's, and the process-wide parts (configuration source,
/// TLS, fleet, notifications). Defined once, in Rust, by `portico_control::status` (whose
/// documentation says what readers tolerate: unknown fields are ignored; the parts added
/// after the first version read as their default when missing or unreadable).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GatewayStatus {
    /// This node's id (`--node-id`).
    pub node_id: String,
    /// The merchant traffic listener (`--listen`).
    pub listen: String,
    /// When the process started, Unix milliseconds.
    pub started_at_ms: u64,
    /// The gateway's version (its crate version).
    pub version: String,
    /// The live plane.
    #[serde(flatten)]
    pub live: PlaneStatus,
    /// The sandbox plane, the same fields as the live one; absent when the gateway runs no
    /// sandbox listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<PlaneStatus>,
    /// The ZooKeeper session (ZooKeeper mode); absent in standalone mode.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub zookeeper: Option<ZkStatus>,
    /// The TLS listeners and the certificate in use; absent without TLS.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub tls: Option<TlsStatus>,
    /// Gateways registered in `nodes/` (this one included; 1 without ZooKeeper). 0 when an
    /// older gateway does not report it.
    #[serde(default, deserialize_with = "lenient")]
    pub cluster_members: u32,
    /// The fleet's Redis; absent without `--redis`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub redis: Option<RedisStatus>,
    /// Notifications (docs/operations/notifications.md, "Notifications"); every gateway of this version
    /// writes it, `None` when an older gateway does not.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub notify: Option<NotifyStatus>,
}

/// What one plane (live or sandbox) serves: its configuration, what it refused, its reload
/// loop, and per API and cluster what invoking them looks like now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlaneStatus {
    /// A configuration is loaded (`/readyz` also waits for the listeners).
    pub ready: bool,
    /// The configuration source: `dir:<path>`, `zk:<hosts><root>`, `snapshot:<path>`, ...
    pub config_source: String,
    /// The configuration served.
    pub config_version: ConfigVersion,
    /// When it was applied, Unix milliseconds (0 before the first).
    pub applied_at_ms: u64,
    /// Milliseconds since then (0 before the first).
    pub config_age_ms: u64,
    /// How many APIs are served.
    pub apis_loaded: u64,
    /// The APIs served, by id, sorted.
    pub apis: Vec<String>,
    /// How many apps are loaded.
    pub apps_loaded: u64,
    /// The switches that degrade their API (or key) now.
    pub switches_degraded: Vec<String>,
    /// The documents the plane refuses (docs/operations/registry.md, "What the gateways serve").
    pub rejected_documents: Vec<RejectedDocument>,
    /// The reload loop's health.
    #[serde(default, deserialize_with = "lenient")]
    pub config_loop: ConfigLoopStatus,
    /// Per API id: its breaker and bulkhead.
    pub invoke: BTreeMap<String, InvokeStatus>,
    /// Per API with a `policy.hot_keys`: its hot keys now (docs/operations/caching.md, "Caching and hot
    /// keys").
    #[serde(default, deserialize_with = "lenient")]
    pub hot_keys: BTreeMap<String, Vec<HotKeyStatus>>,
    /// Per cluster: the set serving, why, and its endpoints (docs/operations/clusters.md, "Clusters:
    /// balancing, health, failover, sleep"). Every gateway of this version writes it (`{}`
    /// without clusters); `None` when an older gateway does not.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub clusters: Option<BTreeMap<String, ClusterStatus>>,
}

/// A document the plane refuses: it is not served as the tree holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RejectedDocument {
    /// The tree path relative to the plane's tree (`switches/x`, `apis/order.get`; `*` when a
    /// whole tree failed to build and the previous configuration is kept).
    pub path: String,
    /// Why, naming the field.
    pub reason: String,
    /// Whether the last version accepted is still served in its place.
    pub kept_previous: bool,
    /// When it is: what that version is; `null` otherwise (and from gateways older than this
    /// field).
    #[serde(default, deserialize_with = "lenient")]
    pub kept: Option<KeptDocument>,
}

/// The version of a refused document a gateway still serves: the fields of that version that
/// tell which it is and what it does (each only when the document has it, with its type in
/// the document kind that defines it), and the digest of its bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct KeptDocument {
    /// Who wrote it (switches, and documents the registry stamps).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub updated_by: Option<String>,
    /// When it was written (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub updated_at: Option<String>,
    /// An API's `version`.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub version: Option<u64>,
    /// A switch's `degraded`.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub degraded: Option<bool>,
    /// A cluster's `active` set.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub active: Option<String>,
    /// SHA-256 of the kept version's bytes, hex.
    pub digest: String,
}

/// A plane's reload loop (the task that applies configuration changes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ConfigLoopStatus {
    /// Whether it runs.
    pub running: bool,
    /// How many times it was restarted after a panic.
    pub restarts: u64,
    /// The last restart, `null` before one.
    #[serde(deserialize_with = "lenient")]
    pub last_restart: Option<LastRestart>,
}

/// A restart of the reload loop.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct LastRestart {
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// Why (the panic's message).
    pub reason: String,
}

/// One API's isolation state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct InvokeStatus {
    /// The circuit breaker: `closed`, `open` or `half_open`.
    pub breaker: String,
    /// Calls in flight.
    pub in_flight: u64,
    /// The bulkhead's size.
    pub max_concurrent: u64,
}

/// One hot key of an API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct HotKeyStatus {
    /// The key: the policy's selector values joined by `|`.
    pub key: String,
    /// Requests per second (one decimal).
    pub rate: f64,
    /// Response bytes per second (whole).
    pub bytes_per_s: f64,
    /// When the key became hot, Unix milliseconds.
    pub since_ms: u64,
    /// The key-level switch `match` selecting exactly this key, `null` when no switch can
    /// (docs/operations/caching.md, "Caching and hot keys").
    #[serde(rename = "match", deserialize_with = "lenient")]
    pub switch_match: Option<BTreeMap<String, Vec<String>>>,
}

/// One cluster as a plane serves it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ClusterStatus {
    /// The set serving: `primary` or `standby`.
    pub active: String,
    /// Why: `manual` (the document's `active`) or `auto` (automatic failover).
    pub reason: String,
    /// The balancing: `round_robin`, `least_load`, `consistent_hash`, ...
    pub balancing: String,
    /// Whether endpoints are probed (`health_check`).
    pub health_check: bool,
    /// The primary set's endpoints.
    pub primary: Vec<EndpointStatus>,
    /// The standby set's endpoints, `null` without a standby set.
    #[serde(deserialize_with = "lenient")]
    pub standby: Option<Vec<EndpointStatus>>,
}

/// One endpoint of a cluster: its health and load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct EndpointStatus {
    /// `host:port`.
    pub addr: String,
    /// Whether it takes calls now (resolved, probed healthy, not ejected).
    pub healthy: bool,
    /// What the last probes say (true without probes).
    pub probe_healthy: bool,
    /// Ejected after consecutive failures until then, Unix milliseconds; `null` when not.
    #[serde(deserialize_with = "lenient")]
    pub ejected_until: Option<u64>,
    /// The load it last reported (`X-Portico-Load`), `null` when it never did.
    #[serde(deserialize_with = "lenient")]
    pub load: Option<f64>,
    /// How old that report is, milliseconds.
    #[serde(deserialize_with = "lenient")]
    pub load_age_ms: Option<u64>,
    /// The peak-EWMA latency cost, microseconds (whole).
    pub latency_ewma_us: f64,
}

/// The TLS listeners and the certificate they present.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TlsStatus {
    /// `--tls-listen`, `null` without it.
    pub listen: Option<String>,
    /// `--sandbox-tls-listen`, `null` without it.
    pub sandbox_listen: Option<String>,
    /// `--tls-cert`.
    pub cert_file: String,
    /// `--tls-key`.
    pub key_file: String,
    /// The certificate in use.
    pub certificate: CertInfo,
    /// Changes of the files applied and refused since the start.
    pub reloads: TlsReloads,
    /// While the files on disk are refused: when and why (the certificate in use stays);
    /// `null` otherwise.
    #[serde(deserialize_with = "lenient")]
    pub refused: Option<TlsRefusal>,
}

/// A server certificate, as `/status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CertInfo {
    /// The server certificate's subject, e.g. `CN=api.example.com`.
    pub subject: String,
    pub issuer: String,
    /// DNS names and IP addresses of the subject alternative name extension.
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<String>,
    /// Validity, in Unix seconds and as RFC 3339.
    pub not_before_unix: i64,
    pub not_after_unix: i64,
    pub not_before: String,
    pub not_after: String,
    /// SHA-256 of the server certificate's DER, as `openssl x509 -fingerprint -sha256` prints it.
    pub sha256_fingerprint: String,
    /// Certificates in the chain file (the server's and its intermediates).
    pub chain_length: usize,
    /// When this certificate was loaded (Unix milliseconds, RFC 3339).
    pub loaded_at_ms: u64,
    pub loaded_at: String,
}

/// Reloads of the certificate files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TlsReloads {
    pub applied: u64,
    pub refused: u64,
}

/// A refused version of the certificate files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TlsRefusal {
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// Why.
    pub reason: String,
}

/// The fleet's Redis (docs/operations/cluster.md, "Running a cluster").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RedisStatus {
    /// The URL, without its password.
    pub url: String,
    /// `ok` or `down`.
    pub state: String,
    /// Since when, RFC 3339 (`null` if it cannot be formatted).
    pub since: Option<String>,
    /// Since when, Unix milliseconds.
    pub since_unix_ms: u64,
    /// The last error, `null` before one.
    pub last_error: Option<String>,
}

/// Notifications on this node (docs/operations/notifications.md, "Notifications").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct NotifyStatus {
    /// The store: `redis` or `memory`.
    pub store: String,
    /// The apps holding a stream on this node, and since when.
    pub streams: Vec<NotifyStream>,
    /// Per app granted a topic: notifications not acknowledged.
    pub backlog: BTreeMap<String, u64>,
    /// The topics.
    pub topics: Vec<String>,
    /// Milliseconds a delivered notification may stay unacknowledged.
    pub ack_timeout_ms: u64,
    /// Notifications one stream may have delivered and unacknowledged.
    pub max_backlog: u64,
    /// The apps with a `callback_url`.
    pub callbacks: Vec<String>,
    /// The latest dead letters (at most 100), newest first.
    pub dead_letters: Vec<DeadLetter>,
    /// Dead letters kept on this node.
    pub dead_letters_total: u64,
    /// With Redis: whether this node follows the wake-up channel; absent without.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub wake_subscribed: Option<bool>,
    /// With Redis: where the key of the entries' MACs comes from, `file` (`--notify-key-file`)
    /// or `ephemeral` (this process's own); absent without.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub notify_key: Option<String>,
    /// Without Redis: notifications kept per app on this node; absent with Redis.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub memory_max_events: Option<u64>,
    /// Without Redis: notifications dropped beyond that; absent with Redis.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub memory_dropped: Option<u64>,
}

/// An app's notification stream held on this node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct NotifyStream {
    pub app: String,
    /// When it was opened, Unix milliseconds.
    pub since_ms: u64,
}

/// A callback that never succeeded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct DeadLetter {
    pub app: String,
    /// The event's id.
    pub id: String,
    pub topic: String,
    /// The POSTs tried.
    pub attempts: u32,
    /// Why the last one failed.
    pub last_error: String,
    /// When it became a dead letter, Unix milliseconds.
    pub at_ms: u64,
}

impl GatewayStatus {
    /// Reads a `/status` body; the error names the field that does not read.
    pub fn from_slice(bytes: &[u8]) -> Result<GatewayStatus, String> {
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let named = |path: String, e: &dyn std::fmt::Display| match path.as_str() {
            "." => e.to_string(),
            _ => format!("{path}: {e}"),
        };
        serde_path_to_error::deserialize::<_, GatewayStatus>(&value).map_err(|e| {
            // The live plane's fields are flattened into the top level, where the path of
            // what does not read is lost: read the plane alone to name it.
            match serde_path_to_error::deserialize::<_, PlaneStatus>(&value) {
                Err(p) if e.path().to_string() == "." => named(p.path().to_string(), p.inner()),
                _ => named(e.path().to_string(), e.inner()),
            }
        })
    }

    /// The plane serving `sandbox` (false: the live plane), if the gateway runs it.
    pub fn plane(&self, sandbox: bool) -> Option<&PlaneStatus> {
        if sandbox {
            self.sandbox.as_ref()
        } else {
            Some(&self.live)
        }
    }

    /// The document as served: a [`serde_json::Value`], whose objects keep their keys sorted.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// An optional part read leniently: its default when it is `null` or does not read as `T` (a
/// newer or older gateway's shape), rather than failing the whole document.
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(T::deserialize(v).unwrap_or_default())
}

/// The JSON Schema (draft 2020-12) of [`GatewayStatus`] as the gateway writes it: a field is
/// `required` when the gateway always writes it (see the [module documentation](self) for what
/// readers tolerate). Checked in at [`SCHEMA_PATH`].
pub fn json_schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let schema = generator.into_root_schema_for::<GatewayStatus>();
    serde_json::to_value(&schema).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A gateway of this version with every optional part: a sandbox plane, TLS, memory
    /// notifications with a dead letter, a hot key, clusters with and without a standby set,
    /// refused documents with and without a kept version (as served by `ops/examples/standalone`
    /// plus a hot API, trimmed).
    fn full() -> Value {
        let plane = |source: &str, rejected: Value| {
            json!({
                "apis": ["hot.get", "order.get"],
                "apis_loaded": 2,
                "applied_at_ms": 1796204310864u64,
                "apps_loaded": 3,
                "clusters": {
                    "demo-http": {"active": "primary", "balancing": "round_robin",
                        "health_check": false, "reason": "manual", "standby": null,
                        "primary": [{"addr": "127.0.0.1:27081", "ejected_until": null,
                            "healthy": true, "latency_ewma_us": 0.0, "load": null,
                            "load_age_ms": null, "probe_healthy": true}]},
                    "hot-http": {"active": "standby", "balancing": "least_load",
                        "health_check": true, "reason": "auto",
                        "primary": [{"addr": "127.0.0.1:27081", "ejected_until": 1796204319999u64,
                            "healthy": false, "latency_ewma_us": 5042.0, "load": 0.26,
                            "load_age_ms": 3023, "probe_healthy": true}],
                        "standby": [{"addr": "127.0.0.1:27083", "ejected_until": null,
                            "healthy": true, "latency_ewma_us": 0.0, "load": null,
                            "load_age_ms": null, "probe_healthy": true}]}
                },
                "config_age_ms": 2992,
                "config_loop": {"last_restart": {"at_ms": 42, "reason": "it panicked: x"},
                    "restarts": 1, "running": true},
                "config_source": source,
                "config_version": {"digest": "5e6ef1bb637747b9", "generation": 1796204310841u64},
                "hot_keys": {"hot.get": [{"bytes_per_s": 2724.0, "key": "BK-1",
                    "match": {"path:sku": ["BK-1"]}, "rate": 5.1, "since_ms": 1796204310743u64},
                    {"bytes_per_s": 10.0, "key": "3f2a", "match": null, "rate": 300.5,
                    "since_ms": 1796204310744u64}]},
                "invoke": {
                    "hot.get": {"breaker": "half_open", "in_flight": 2, "max_concurrent": 7},
                    "order.get": {"breaker": "closed", "in_flight": 0, "max_concurrent": 64}
                },
                "ready": true,
                "rejected_documents": rejected,
                "switches_degraded": ["promo.list"]
            })
        };
        let mut doc = plane(
            "dir:/tmp/st/run/cfg",
            json!([
                {"kept": {"degraded": true, "digest": "a043af4bc41734f9e555983361a758497fc69c024c1a622b33f707b07ea33ee4",
                    "updated_at": "2026-11-30T00:00:00Z", "updated_by": "sre-demo"},
                 "kept_previous": true, "path": "switches/promo.list",
                 "reason": "degraded: invalid type: string \"yes\", expected a boolean at line 1 column 18"},
                {"kept": {"active": "standby", "digest": "00", "version": 3},
                 "kept_previous": true, "path": "clusters/c", "reason": "r"},
                {"kept": null, "kept_previous": false, "path": "apis/bad.one",
                 "reason": "http: missing field `method` at line 1 column 25"}
            ]),
        );
        let extra = json!({
            "node_id": "st-a",
            "listen": "127.0.0.1:27080",
            "started_at_ms": 1796204310200u64,
            "version": "0.1.0",
            "cluster_members": 1,
            "sandbox": plane("dir:/tmp/st/run/cfg/sandbox", json!([{"kept": null,
                "kept_previous": false, "path": "apis/bad.two", "reason": "invalid document"}])),
            "tls": {
                "cert_file": "/tmp/st/run/cert.pem",
                "certificate": {"chain_length": 1, "dns_names": ["localhost"],
                    "ip_addresses": ["127.0.0.1"], "issuer": "CN=localhost",
                    "loaded_at": "2026-12-02T09:38:30.228Z", "loaded_at_ms": 1796204310228u64,
                    "not_after": "2027-01-01T09:38:30.000Z", "not_after_unix": 1798796310,
                    "not_before": "2026-12-02T09:38:30.000Z", "not_before_unix": 1796204310,
                    "sha256_fingerprint": "F4:ED:20", "subject": "CN=localhost"},
                "key_file": "/tmp/st/run/key.pem",
                "listen": "127.0.0.1:27443",
                "refused": {"at_ms": 1796204311000u64, "reason": "no private key"},
                "reloads": {"applied": 0, "refused": 1},
                "sandbox_listen": null
            },
            "notify": {
                "ack_timeout_ms": 30000,
                "backlog": {"merchant-1": 0},
                "callbacks": ["merchant-1"],
                "dead_letters": [{"app": "merchant-1", "at_ms": 1796204310841u64, "attempts": 1,
                    "id": "1796204310839-0", "last_error": "no answer", "topic": "orders"}],
                "dead_letters_total": 1,
                "max_backlog": 1000,
                "memory_dropped": 0,
                "memory_max_events": 10000,
                "store": "memory",
                "streams": [{"app": "merchant-2", "since_ms": 1796204310900u64}],
                "topics": ["orders"]
            }
        });
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        doc
    }

    /// ZooKeeper mode with Redis (the parts a standalone gateway leaves out).
    fn zk_redis() -> Value {
        let mut doc = full();
        let obj = doc.as_object_mut().unwrap();
        for k in ["sandbox", "tls"] {
            obj.remove(k);
        }
        obj.insert(
            "zookeeper".into(),
            json!({"generation": 4, "last_tree_unix_ms": 1796204331344u64,
                "session_id": "0x1000202afc50000", "sessions": 1, "since_unix_ms": 1796204331299u64,
                "state": "connected", "trees_sent": 3}),
        );
        obj.insert(
            "redis".into(),
            json!({"last_error": null, "since": "2026-12-02T09:38:51.183Z",
                "since_unix_ms": 1796204331183u64, "state": "ok", "url": "redis://127.0.0.1:27379"}),
        );
        obj.insert(
            "notify".into(),
            json!({"ack_timeout_ms": 30000, "backlog": {}, "callbacks": [], "dead_letters": [],
                "dead_letters_total": 0, "max_backlog": 1000, "notify_key": "file",
                "store": "redis", "streams": [], "topics": [], "wake_subscribed": true}),
        );
        doc
    }

    /// Read, written again: the same JSON, key for key (and the same text, keys sorted).
    fn round_trip(doc: &Value) -> GatewayStatus {
        let text = serde_json::to_vec(doc).unwrap();
        let status = GatewayStatus::from_slice(&text).unwrap();
        assert_eq!(&status.to_value(), doc);
        assert_eq!(serde_json::to_vec(&status.to_value()).unwrap(), text);
        status
    }

    #[test]
    fn a_full_status_reads_and_writes_back_the_same() {
        let s = round_trip(&full());
        assert_eq!(s.node_id, "st-a");
        assert_eq!(s.live.config_version.generation, 1796204310841);
        let kept = s.live.rejected_documents[0].kept.as_ref().unwrap();
        assert_eq!(
            (kept.degraded, kept.updated_by.as_deref()),
            (Some(true), Some("sre-demo"))
        );
        assert_eq!(s.live.rejected_documents[2].kept, None);
        let hot = &s.live.hot_keys["hot.get"];
        assert_eq!(hot[0].switch_match.as_ref().unwrap()["path:sku"], ["BK-1"]);
        assert_eq!(hot[1].switch_match, None);
        let clusters = s.live.clusters.as_ref().unwrap();
        assert_eq!(clusters["hot-http"].standby.as_ref().unwrap().len(), 1);
        assert_eq!(clusters["demo-http"].standby, None);
        let sandbox = s.plane(true).unwrap();
        assert_eq!(sandbox.rejected_documents[0].path, "apis/bad.two");
        let tls = s.tls.as_ref().unwrap();
        assert_eq!(
            (tls.sandbox_listen.as_deref(), tls.reloads.refused),
            (None, 1)
        );
        let notify = s.notify.as_ref().unwrap();
        assert_eq!(
            (notify.memory_max_events, notify.wake_subscribed),
            (Some(10000), None)
        );
        assert_eq!(notify.dead_letters[0].attempts, 1);

        let s = round_trip(&zk_redis());
        assert!(s.sandbox.is_none() && s.tls.is_none());
        assert_eq!(s.redis.as_ref().unwrap().state, "ok");
        assert_eq!(s.zookeeper.as_ref().unwrap().sessions, 1);
        assert_eq!(s.notify.unwrap().notify_key.as_deref(), Some("file"));
    }

    #[test]
    fn an_older_gateway_without_the_later_parts_reads_with_defaults() {
        // The fields of /status's first version only.
        let old = json!({
            "node_id": "gw-old", "listen": "0.0.0.0:8080", "started_at_ms": 1, "version": "0.0.9",
            "ready": true, "config_source": "zk:zk:2181/portico",
            "config_version": {"generation": 7, "digest": "abcd"},
            "applied_at_ms": 5, "config_age_ms": 6, "apis_loaded": 1, "apis": ["a"],
            "apps_loaded": 0, "switches_degraded": [],
            "rejected_documents": [{"path": "switches/x", "reason": "r", "kept_previous": true}],
            "invoke": {"a": {"breaker": "closed", "in_flight": 0, "max_concurrent": 256}},
            "sandbox": {"ready": false, "config_source": "zk:zk:2181/portico/sandbox",
                "config_version": {"generation": 0, "digest": ""}, "applied_at_ms": 0,
                "config_age_ms": 0, "apis_loaded": 0, "apis": [], "apps_loaded": 0,
                "switches_degraded": [], "rejected_documents": [], "invoke": {}}
        });
        let s = GatewayStatus::from_slice(&serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(s.live.rejected_documents[0].kept, None);
        assert!(s.live.rejected_documents[0].kept_previous);
        assert_eq!(s.live.clusters, None, "an older gateway: clusters unknown");
        assert!(s.live.hot_keys.is_empty());
        assert_eq!(s.live.config_loop, ConfigLoopStatus::default());
        assert_eq!(
            (s.notify, s.tls, s.redis, s.zookeeper, s.cluster_members),
            (None, None, None, None, 0)
        );
        assert!(s.sandbox.unwrap().clusters.is_none());

        // A part missing a field of its own reads with that field's default.
        let mut doc = full();
        doc["notify"].as_object_mut().unwrap().remove("callbacks");
        doc["clusters"]["demo-http"]
            .as_object_mut()
            .unwrap()
            .remove("balancing");
        let s = GatewayStatus::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
        assert!(s.notify.unwrap().callbacks.is_empty());
        assert_eq!(s.live.clusters.unwrap()["demo-http"].balancing, "");
    }

    #[test]
    fn unknown_fields_are_ignored_and_an_unreadable_later_part_is_left_out() {
        let mut doc = zk_redis();
        doc["from_a_newer_gateway"] = json!({"x": 1});
        doc["invoke"]["hot.get"]["queue"] = json!(3);
        doc["zookeeper"]["state"] = json!("read_only"); // not a state this reader knows
        doc["notify"]["streams"] = json!("not a list");
        doc["clusters"]["demo-http"]["standby"] = json!(7);
        doc["rejected_documents"][0]["kept"]["version"] = json!("v2");
        let s = GatewayStatus::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
        assert_eq!(s.zookeeper, None);
        assert_eq!(s.notify, None);
        assert_eq!(s.redis.unwrap().state, "ok", "the other parts are read");
        assert_eq!(s.live.invoke["hot.get"].max_concurrent, 7);
        let clusters = s.live.clusters.unwrap();
        assert_eq!(clusters["demo-http"].standby, None);
        assert_eq!(clusters["demo-http"].primary.len(), 1);
        let kept = s.live.rejected_documents[0].kept.clone().unwrap();
        assert_eq!((kept.version, kept.degraded), (None, Some(true)));
    }

    #[test]
    fn a_document_without_the_core_fields_names_what_is_missing() {
        let mut doc = full();
        doc.as_object_mut().unwrap().remove("node_id");
        let e = GatewayStatus::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap_err();
        assert!(e.contains("node_id"), "{e}");
        let mut doc = full();
        doc["rejected_documents"][1]["kept_previous"] = json!("yes");
        let e = GatewayStatus::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap_err();
        assert!(e.contains("rejected_documents[1].kept_previous"), "{e}");
        let e = GatewayStatus::from_slice(b"<html>").unwrap_err();
        assert!(!e.is_empty());
    }

    #[test]
    fn the_schema_requires_what_the_gateway_always_writes() {
        let schema = json_schema();
        let defs = &schema["$defs"];
        let required = |v: &Value| -> Vec<String> {
            v["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        };
        let top = required(&schema);
        for f in [
            "node_id",
            "ready",
            "rejected_documents",
            "config_loop",
            "cluster_members",
        ] {
            assert!(top.contains(&f.to_owned()), "{f} in {top:?}");
        }
        for f in ["sandbox", "tls", "zookeeper", "redis", "notify", "clusters"] {
            assert!(!top.contains(&f.to_owned()), "{f} in {top:?}");
        }
        assert!(required(&defs["RejectedDocument"]).contains(&"kept".to_owned()));
        assert_eq!(required(&defs["KeptDocument"]), ["digest"]);
        assert!(schema["properties"]["sandbox"].is_object());
        assert!(defs["HotKeyStatus"]["properties"]["match"].is_object());
    }

    /// `docs/schemas/gateway-status.schema.json` is the schema these types generate.
    /// `PORTICO_WRITE_SCHEMA=1 cargo test -p portico-control --lib status` rewrites it.
    #[test]
    fn the_checked_in_schema_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(SCHEMA_PATH);
        let generated = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
        if std::env::var_os("PORTICO_WRITE_SCHEMA").is_some_and(|v| v == "1") {
            std::fs::write(&path, &generated).unwrap();
            return;
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "{SCHEMA_PATH} is not the schema of portico_control::status::GatewayStatus; \
             regenerate it with `PORTICO_WRITE_SCHEMA=1 cargo test -p portico-control --lib \
             status` and commit it (with docs/operations/gateway.md, \"Admin endpoints\", if the fields \
             changed)"
        );
    }
}
