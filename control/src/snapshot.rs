//! The validated, immutable configuration a gateway serves from. Built by
//! [`crate::validate::build_snapshot`]; never mutated after it is built.

use crate::selector::Selector;
use crate::template::PathTemplate;
use crate::v1;
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which configuration a snapshot is.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct ConfigVersion {
    /// Grows with every change the source reports (see [`crate::Tree::generation`]).
    pub generation: u64,
    /// First 16 hex digits of the SHA-256 over the accepted documents (path, bytes): equal
    /// digests mean equal configuration, whichever node or source built them.
    pub digest: String,
}

/// A document that was refused, and why. Its last good version (if any) is still served.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rejection {
    /// The tree path, e.g. `apis/order.get`.
    pub path: String,
    /// What is wrong, naming the field, e.g. `backend.timeout_ms: must be between 1 and 600000`.
    pub reason: String,
    /// Whether an older good version of the document is being served in its place.
    pub kept_previous: bool,
    /// Whether the check itself failed (a panic caught while validating: a bug to report),
    /// rather than the document. Set only by the validator, never from a reason's text,
    /// which may quote the document.
    #[serde(skip)]
    pub internal: bool,
}

/// One HTTP binding of an API: the main rule or one of its `additional_bindings`.
#[derive(Debug, Clone)]
pub struct Binding {
    /// Upper-case HTTP method (`GET`, `POST`, ...; `*` for a custom rule matching any).
    pub method: String,
    pub template: PathTemplate,
    /// `None`: no body; `Some("*")`: the whole message; `Some(field)`: that field.
    pub body: Option<String>,
    pub response_body: Option<String>,
}

/// What kind of backend an API calls.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendKind {
    Http {
        /// Upstream path rewrite (may use `{var}`s of the matched binding).
        path: Option<String>,
    },
    Grpc {
        service: String,
        method: String,
        /// The SHA-256 (hex) naming `descriptors/<sha256>`.
        descriptor: String,
    },
}

/// A validated API.
#[derive(Debug, Clone)]
pub struct Api {
    pub id: String,
    pub version: u64,
    /// The main binding first, then `additional_bindings` in order.
    pub bindings: Vec<Binding>,
    pub backend: BackendKind,
    pub cluster: String,
    pub timeout_ms: u64,
    pub auth: v1::AuthMode,
    pub policy: v1::Policy,
    /// The document as published, for `/status` and the registry.
    pub definition: v1::ApiDefinition,
}

/// The parsed IP ACL.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IpAclRules {
    pub deny: Vec<IpNet>,
    pub allow: Vec<IpNet>,
    pub trusted_proxies: Vec<IpNet>,
}

/// One immutable, validated configuration.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub version: ConfigVersion,
    pub apis: BTreeMap<String, Arc<Api>>,
    pub clusters: BTreeMap<String, Arc<v1::Cluster>>,
    pub apps: BTreeMap<String, Arc<v1::App>>,
    pub switches: BTreeMap<String, Arc<v1::Switch>>,
    pub ipacl: Arc<IpAclRules>,
    /// Notification topics (`topics/<name>`).
    pub topics: BTreeMap<String, Arc<v1::Topic>>,
    /// Descriptor sha256 → the FileDescriptorSet bytes (already checked to decode).
    pub descriptors: BTreeMap<String, Arc<Vec<u8>>>,
    /// Every accepted document (path → bytes), including last-good versions kept in place of
    /// rejected ones: exactly what the disk snapshot writes.
    pub accepted: BTreeMap<String, Arc<Vec<u8>>>,
    /// Documents refused in this build.
    pub rejected: Vec<Rejection>,
    // Hot APIs (docs/operations/caching.md, "Caching and hot keys", "Key-level switches").
    /// API id → its key-level switches (`switches/<api_id>@<label>`), by label; also listed
    /// in `switches` under their full name.
    pub key_switches: BTreeMap<String, Vec<Arc<KeySwitch>>>,
    /// API id → its parsed cache and hot-key policy, for APIs that have either.
    pub hot: BTreeMap<String, Arc<HotPolicy>>,
}

impl Snapshot {
    /// Whether `app_key` (whose document is `app`) is granted `topic`: the topic's `apps`
    /// lists it or `"*"` (docs/operations/notifications.md, "Notifications").
    pub fn topic_granted(&self, app_key: &str, topic: &str) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|t| t.apps.iter().any(|a| a == "*" || a == app_key))
    }

    /// The topics `app_key` is granted, by name.
    pub fn granted_topics(&self, app_key: &str) -> Vec<String> {
        self.topics
            .keys()
            .filter(|t| self.topic_granted(app_key, t))
            .cloned()
            .collect()
    }
}

/// A validated key-level switch `switches/<api_id>@<label>`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySwitch {
    pub api_id: String,
    pub label: String,
    /// Each selector with the values it matches; all must match.
    pub matches: Vec<(Selector, Vec<String>)>,
    pub switch: Arc<v1::Switch>,
}

/// An API's parsed `policy.cache`, `policy.hot_keys` and `policy.read_only`.
#[derive(Debug, Clone, PartialEq)]
pub struct HotPolicy {
    pub cache: Option<CacheSpec>,
    pub hot_keys: Option<HotKeysSpec>,
    pub read_only: bool,
}

/// `policy.cache`, with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheSpec {
    pub ttl_ms: u64,
    /// Empty: one entry for the whole API.
    pub key: Vec<Selector>,
    pub max_entries: usize,
    pub max_body_bytes: usize,
    /// One answer for every app (`policy.cache.shared`).
    pub shared: bool,
    /// The query parameters (router style: body fields) in the key; `None`: all of them.
    pub query: Option<Vec<String>>,
}

/// `policy.hot_keys`, with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct HotKeysSpec {
    pub key: Vec<Selector>,
    pub rate_above: f64,
    pub bandwidth_share_above: f64,
    /// `None`: no bandwidth rule.
    pub link_bytes_per_s: Option<u64>,
    /// How long a hot key's answer is cached; 0 (the default) unless the API opts in with
    /// `read_only: true` and an explicit `auto_cache_ms`.
    pub auto_cache_ms: u64,
    pub top: usize,
}
