//! Validation of a raw [`Tree`] into one immutable [`Snapshot`].
//!
//! Every document is parsed and checked on its own; errors name the field
//! (`backend.timeout_ms: must be between 1 and 600000`). A refused document never affects
//! the others: its last good version (from `previous`) is served in its place when that
//! version is still consistent with the new tree (its cluster still exists, ...), otherwise
//! the document is simply absent.
//!
//! Documents are checked in dependency order: descriptors, clusters, the IP ACL, apps,
//! switches, then APIs (which need their cluster and descriptor). Alert rules stand alone
//! (an `api` that names no API is allowed: deleting an API never makes a rule invalid). Two APIs binding the same
//! method to the same path shape: the one later by id is refused, naming the other.

use crate::fieldpath::{self, Syntax};
use crate::selector::{split_switch_name, Selector};
use crate::snapshot::{
    Api, BackendKind, Binding, CacheSpec, ConfigVersion, HotKeysSpec, HotPolicy, IpAclRules,
    KeySwitch, Rejection, Snapshot,
};
use crate::template::{is_field_path, PathTemplate, Rewrite, Segment};
use crate::tree::{DocKind, Tree, MAX_DOCUMENT_BYTES};
use crate::v1;
use ipnet::IpNet;
use prost_reflect::DescriptorPool;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// The largest backend deadline, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// The HTTP methods an API may bind.
pub const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
/// The shortest app secret.
pub const MIN_SECRET_CHARS: usize = 8;
/// The most `http.additional_bindings` an API may have.
pub const MAX_ADDITIONAL_BINDINGS: usize = 64;

/// The start of a [`Rejection::reason`] for a document whose check panicked: a bug in the
/// gateway, not in the document, but the document is rejected alone all the same.
pub const INTERNAL_ERROR_REASON: &str = "internal error while validating this document";

/// Builds a snapshot from `tree`, keeping `previous`'s good documents in place of bad ones.
///
/// Never panics and never gives up on the tree: each document's check runs on its own under
/// `catch_unwind`, so even a bug in a parser rejects only the document that hit it (with a
/// reason starting with [`INTERNAL_ERROR_REASON`]); documents larger than
/// [`MAX_DOCUMENT_BYTES`] and entries the source could not read ([`Tree::unreadable`]) are
/// rejected without being parsed.
pub fn build_snapshot(tree: &Tree, previous: Option<&Snapshot>) -> Snapshot {
    let mut b = Builder {
        snap: Snapshot::default(),
        previous,
        pools: HashMap::new(),
        routes: HashMap::new(),
    };
    let by_kind = b.group(tree);
    let docs = |k: DocKind| by_kind.get(&k).cloned().unwrap_or_default();

    for (path, name, bytes) in docs(DocKind::Descriptor) {
        if let Some((pool, kept)) = b.consider(path, bytes, |_, raw| check_descriptor(name, raw)) {
            b.pools.insert(name.to_owned(), pool);
            b.snap.descriptors.insert(name.to_owned(), kept);
        }
    }
    for (path, name, bytes) in docs(DocKind::Cluster) {
        if let Some((c, _)) = b.consider(path, bytes, |_, raw| check_cluster(name, raw)) {
            b.snap.clusters.insert(name.to_owned(), Arc::new(c));
        }
    }
    for (path, _, bytes) in docs(DocKind::IpAcl) {
        if let Some((acl, _)) = b.consider(path, bytes, |_, raw| check_ipacl(raw)) {
            b.snap.ipacl = Arc::new(acl);
        }
    }
    for (path, name, bytes) in docs(DocKind::App) {
        if let Some((app, _)) = b.consider(path, bytes, |_, raw| check_app(name, raw)) {
            b.snap.apps.insert(name.to_owned(), Arc::new(app));
        }
    }
    for (path, name, bytes) in docs(DocKind::Topic) {
        if let Some((topic, _)) = b.consider(path, bytes, |_, raw| check_topic(name, raw)) {
            b.snap.topics.insert(name.to_owned(), Arc::new(topic));
        }
    }
    for (path, name, bytes) in docs(DocKind::Switch) {
        if let Some(((sw, key), _)) = b.consider(path, bytes, |_, raw| check_switch(name, raw)) {
            let sw = Arc::new(sw);
            if let Some((api_id, label, matches)) = key {
                let key_switch = KeySwitch {
                    api_id: api_id.clone(),
                    label,
                    matches,
                    switch: sw.clone(),
                };
                let list = b.snap.key_switches.entry(api_id).or_default();
                list.push(Arc::new(key_switch));
            }
            b.snap.switches.insert(name.to_owned(), sw);
        }
    }
    for (path, name, bytes) in docs(DocKind::Alert) {
        // Gateways ignore alert rules; checking them keeps the tree (and the disk snapshot)
        // valid as a whole, and the registry refuses a bad rule the way it refuses the rest.
        let _ = b.consider(path, bytes, |_, raw| check_alert(name, raw));
    }
    for (path, name, bytes) in docs(DocKind::Api) {
        if let Some((api, _)) = b.consider(path, bytes, |b, raw| b.check_api(name, raw)) {
            for binding in &api.bindings {
                b.routes.insert(
                    route_key(binding),
                    (api.id.clone(), binding.template.raw.clone()),
                );
            }
            if let Ok(Some(hot)) = hot_policy(&api.policy) {
                b.snap.hot.insert(name.to_owned(), Arc::new(hot));
            }
            b.snap.apis.insert(name.to_owned(), Arc::new(api));
        }
    }

    let digest = config_digest(
        b.snap
            .accepted
            .iter()
            .map(|(p, d)| (p.as_str(), d.as_slice())),
    );
    b.snap.version = ConfigVersion {
        generation: tree.generation,
        digest,
    };
    b.snap
}

/// A document's check failed: the reason, and whether the check itself panicked (see
/// [`Rejection::internal`]).
type Failed = (String, bool);

/// Runs one document's check; a panic inside it becomes an error naming it an internal
/// error (and is logged), so that it rejects that document alone.
fn isolated<T>(path: &str, check: impl FnOnce() -> Result<T, String>) -> Result<T, Failed> {
    match std::panic::catch_unwind(AssertUnwindSafe(check)) {
        Ok(result) => result.map_err(|reason| (reason, false)),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            tracing::error!(path, panic = %what, "{INTERNAL_ERROR_REASON}");
            Err((
                format!("{INTERNAL_ERROR_REASON} ({what}); please report it"),
                true,
            ))
        }
    }
}

/// The digest of a configuration: the first 16 hex digits of the SHA-256 over its documents
/// (path length, path, byte length, bytes; lengths as big-endian u64), in path order.
pub fn config_digest<'a>(docs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut h = Sha256::new();
    for (path, bytes) in docs {
        h.update((path.len() as u64).to_be_bytes());
        h.update(path.as_bytes());
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    }
    let mut hex = hex::encode(h.finalize());
    hex.truncate(16);
    hex
}

/// (tree path, document name, its bytes or why it could not be read).
type Doc<'a> = (&'a str, &'a str, Result<&'a [u8], &'a str>);

type RouteKey = (String, Vec<Segment>, Option<String>);

fn route_key(b: &Binding) -> RouteKey {
    (
        b.method.clone(),
        b.template.segments().to_vec(),
        b.template.verb().map(str::to_owned),
    )
}

struct Builder<'p> {
    snap: Snapshot,
    previous: Option<&'p Snapshot>,
    /// Decoded descriptor pools of the accepted descriptors, by sha256.
    pools: HashMap<String, DescriptorPool>,
    /// Accepted bindings: (method, shape, verb) → (API id, template as written).
    routes: HashMap<RouteKey, (String, String)>,
}

impl<'p> Builder<'p> {
    /// Sorts the tree's documents by kind, with the entries the source could not read: an
    /// unreadable document is considered (and rejected) like a bad one; for a kind folder that
    /// could not be listed, the documents it held in `previous` are considered again as they
    /// were (so they stay unless they no longer fit), and the folder itself is rejected.
    fn group<'t>(&mut self, tree: &'t Tree) -> BTreeMap<DocKind, Vec<Doc<'t>>>
    where
        'p: 't,
    {
        let mut by_kind: BTreeMap<DocKind, Vec<Doc<'t>>> = BTreeMap::new();
        for (path, bytes) in &tree.docs {
            if let Some((kind, name)) = DocKind::classify(path) {
                by_kind
                    .entry(kind)
                    .or_default()
                    .push((path.as_str(), name, Ok(bytes.as_slice())));
            }
        }
        for (path, why) in &tree.unreadable {
            if tree.docs.contains_key(path) {
                continue;
            }
            if let Some((kind, name)) = DocKind::classify(path) {
                by_kind
                    .entry(kind)
                    .or_default()
                    .push((path.as_str(), name, Err(why.as_str())));
                continue;
            }
            let mut kept_previous = false;
            if let (Some(kind), Some(prev)) = (DocKind::from_dir(path), self.previous) {
                for (old_path, old) in &prev.accepted {
                    let Some((k, name)) = DocKind::classify(old_path) else {
                        continue;
                    };
                    if k == kind
                        && !tree.docs.contains_key(old_path)
                        && !tree.unreadable.contains_key(old_path)
                    {
                        by_kind.entry(kind).or_default().push((
                            old_path.as_str(),
                            name,
                            Ok(old.as_slice()),
                        ));
                        kept_previous = true;
                    }
                }
            }
            tracing::warn!(path = %path, reason = %why, kept_previous, "configuration entry unreadable");
            self.snap.rejected.push(Rejection {
                path: path.clone(),
                reason: bounded(format!("cannot be read: {why}")),
                kept_previous,
                internal: false,
            });
        }
        for docs in by_kind.values_mut() {
            docs.sort_by(|a, b| a.0.cmp(b.0));
        }
        by_kind
    }

    /// Checks `bytes` as the document at `path`: refused unparsed above
    /// [`MAX_DOCUMENT_BYTES`], otherwise checked in isolation (see [`isolated`]).
    fn checked<T>(
        &self,
        path: &str,
        bytes: &[u8],
        check: &impl Fn(&Self, &[u8]) -> Result<T, String>,
    ) -> Result<T, Failed> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err((
                format!(
                    "document: {} bytes, more than the limit of {MAX_DOCUMENT_BYTES}",
                    bytes.len()
                ),
                false,
            ));
        }
        isolated(path, || check(self, bytes))
    }

    /// Checks a document; on failure (or when it could not be read) records the rejection
    /// and falls back to the previous snapshot's accepted version of the same path if that
    /// still checks out. Returns the parsed document and the bytes now accepted for `path`.
    fn consider<T>(
        &mut self,
        path: &str,
        read: Result<&[u8], &str>,
        check: impl Fn(&Self, &[u8]) -> Result<T, String>,
    ) -> Option<(T, Arc<Vec<u8>>)> {
        let (reason, internal) = match read {
            Err(why) => (format!("cannot be read: {why}"), false),
            Ok(bytes) => match self.checked(path, bytes, &check) {
                Ok(v) => {
                    let kept = Arc::new(bytes.to_vec());
                    self.snap.accepted.insert(path.to_owned(), kept.clone());
                    return Some((v, kept));
                }
                Err(failed) => failed,
            },
        };
        let reason = bounded(reason);
        let mut previous_problem = None;
        let fallback = self
            .previous
            .and_then(|p| p.accepted.get(path))
            .filter(|old| read.ok() != Some(old.as_slice()))
            .and_then(|old| match self.checked(path, old, &check) {
                Ok(v) => Some((v, old.clone())),
                Err((e, _)) => {
                    previous_problem = Some(e);
                    None
                }
            });
        let kept_previous = fallback.is_some();
        match &previous_problem {
            Some(prev) => tracing::warn!(
                path,
                reason = %reason,
                previous = %prev,
                "configuration document rejected; its previous version no longer fits either"
            ),
            None => {
                tracing::warn!(path, reason = %reason, kept_previous, "configuration document rejected")
            }
        }
        self.snap.rejected.push(Rejection {
            path: path.to_owned(),
            reason,
            kept_previous,
            internal,
        });
        let (v, old) = fallback?;
        self.snap.accepted.insert(path.to_owned(), old.clone());
        Some((v, old))
    }

    fn check_api(&self, name: &str, raw: &[u8]) -> Result<Api, String> {
        let def: v1::ApiDefinition = parse_json(raw)?;
        check_name(&def.id).map_err(|e| format!("id: {e}"))?;
        if def.id != name {
            return Err(format!(
                "id: {:?} must equal the document name {:?}",
                excerpt(&def.id),
                excerpt(name)
            ));
        }

        let bindings = self.check_bindings(&def.http)?;
        let be = &def.backend;
        let backend = self.check_backend(be, &bindings)?;

        check_policy(&def.policy)?;
        for (field, schema) in [
            ("request_schema", &def.request_schema),
            ("response_schema", &def.response_schema),
        ] {
            if let Some(schema) = schema {
                if matches!(backend, BackendKind::Grpc { .. }) {
                    return Err(format!(
                        "{field}: only for HTTP backends (a gRPC API's schemas come from its descriptor)"
                    ));
                }
                check_schema(schema).map_err(|e| format!("{field}{e}"))?;
            }
        }
        if let Some(owner) = &def.owner {
            check_email(owner).map_err(|e| format!("owner: {e}"))?;
        }

        Ok(Api {
            id: def.id.clone(),
            version: def.version,
            bindings,
            backend,
            cluster: be.cluster.clone(),
            timeout_ms: be.timeout_ms,
            auth: def.auth,
            policy: def.policy.clone(),
            definition: def,
        })
    }

    /// The bindings of an API (`http` and its `additional_bindings`), none of which repeats
    /// another of the API or of an API already accepted.
    fn check_bindings(&self, http: &v1::HttpRule) -> Result<Vec<Binding>, String> {
        if http.additional_bindings.len() > MAX_ADDITIONAL_BINDINGS {
            return Err(format!(
                "http.additional_bindings: at most {MAX_ADDITIONAL_BINDINGS}"
            ));
        }
        let mut bindings = Vec::with_capacity(1 + http.additional_bindings.len());
        bindings.push(check_binding(
            "http",
            &http.method,
            &http.path,
            http.body.as_deref(),
            http.response_body.as_deref(),
        )?);
        for (i, ab) in http.additional_bindings.iter().enumerate() {
            let field = format!("http.additional_bindings[{i}]");
            bindings.push(check_binding(
                &field,
                &ab.method,
                &ab.path,
                ab.body.as_deref(),
                ab.response_body.as_deref(),
            )?);
        }
        let mut own_routes: HashMap<RouteKey, usize> = HashMap::with_capacity(bindings.len());
        for (i, b) in bindings.iter().enumerate() {
            let field = binding_field(i);
            let key = route_key(b);
            if let Some(j) = own_routes.get(&key) {
                return Err(format!(
                    "{field}.path: {} {} duplicates {}",
                    b.method,
                    b.template,
                    binding_field(*j)
                ));
            }
            if let Some((other, tpl)) = self.routes.get(&key) {
                return Err(format!(
                    "{field}.path: {} {} is already bound by API {other} ({} {tpl})",
                    b.method, b.template, b.method
                ));
            }
            own_routes.insert(key, i);
        }
        Ok(bindings)
    }

    /// An API's backend: its deadline, its cluster (of the backend's protocol), and the gRPC
    /// method or the HTTP rewrite (whose variables every binding must have).
    fn check_backend(&self, be: &v1::Backend, bindings: &[Binding]) -> Result<BackendKind, String> {
        if !(1..=MAX_TIMEOUT_MS).contains(&be.timeout_ms) {
            return Err(format!(
                "backend.timeout_ms: must be between 1 and {MAX_TIMEOUT_MS}"
            ));
        }
        let Some(cluster) = self.snap.clusters.get(&be.cluster) else {
            return Err(format!(
                "backend.cluster: no cluster {:?}",
                excerpt(&be.cluster)
            ));
        };
        match (&be.grpc, &be.http) {
            (Some(g), None) => {
                if cluster.protocol != v1::Protocol::Grpc {
                    return Err(format!(
                        "backend.cluster: cluster {:?} is http, the backend is grpc",
                        be.cluster
                    ));
                }
                self.check_grpc(g, bindings)?;
                Ok(BackendKind::Grpc {
                    service: g.service.clone(),
                    method: g.method.clone(),
                    descriptor: g.descriptor.clone(),
                })
            }
            (None, Some(h)) => {
                if cluster.protocol != v1::Protocol::Http {
                    return Err(format!(
                        "backend.cluster: cluster {:?} is grpc, the backend is http",
                        be.cluster
                    ));
                }
                if let Some(p) = &h.path {
                    let rw = Rewrite::parse(p).map_err(|e| format!("backend.http.path: {e}"))?;
                    for f in rw.fields() {
                        for (i, b) in bindings.iter().enumerate() {
                            if b.template.variable(f).is_none() {
                                return Err(format!(
                                    "backend.http.path: {{{f}}} is not a variable of {}.path",
                                    binding_field(i)
                                ));
                            }
                        }
                    }
                }
                Ok(BackendKind::Http {
                    path: h.path.clone(),
                })
            }
            _ => Err("backend: set exactly one of grpc and http".to_owned()),
        }
    }

    fn check_grpc(&self, g: &v1::GrpcBackend, bindings: &[Binding]) -> Result<(), String> {
        let Some(pool) = self.pools.get(&g.descriptor) else {
            return Err(format!(
                "backend.grpc.descriptor: no descriptor {:?}",
                g.descriptor
            ));
        };
        let Some(service) = pool.get_service_by_name(&g.service) else {
            return Err(format!(
                "backend.grpc.service: {:?} is not in descriptor {}",
                g.service,
                short(&g.descriptor)
            ));
        };
        let Some(method) = service.methods().find(|m| m.name() == g.method) else {
            return Err(format!(
                "backend.grpc.method: {} has no method {:?}",
                g.service, g.method
            ));
        };
        if method.is_client_streaming() || method.is_server_streaming() {
            return Err(format!(
                "backend.grpc.method: {}.{} is streaming; only unary methods are supported",
                g.service, g.method
            ));
        }
        let input = method.input();
        for (i, b) in bindings.iter().enumerate() {
            let field = binding_field(i);
            for v in b.template.variables() {
                fieldpath::resolve(&input, &v.field_path, Syntax::Rule)
                    .and_then(|p| p.check_scalar())
                    .map_err(|e| format!("{field}.path: variable {{{}}}: {e}", v.field_path))?;
            }
            if let Some(body) = b.body.as_deref().filter(|b| *b != "*") {
                fieldpath::resolve(&input, body, Syntax::Rule)
                    .map_err(|e| format!("{field}.body: {e}"))?;
            }
            if let Some(rb) = &b.response_body {
                fieldpath::resolve(&method.output(), rb, Syntax::Rule)
                    .map_err(|e| format!("{field}.response_body: {e}"))?;
            }
        }
        Ok(())
    }
}

/// The longest rejection reason kept, in characters (a reason may quote the document, and
/// serde's messages quote whole values).
const MAX_REASON_CHARS: usize = 512;

/// `reason`, cut to [`MAX_REASON_CHARS`].
fn bounded(reason: String) -> String {
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((at, _)) => format!("{}...", &reason[..at]),
        None => reason,
    }
}

/// At most the first 64 characters of `s` (and `...` when cut), for a reason that quotes a
/// value: a document's value can be long, its rejection reason stays short.
fn excerpt(s: &str) -> String {
    const MAX_CHARS: usize = 64;
    match s.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_owned(),
    }
}

fn binding_field(i: usize) -> String {
    if i == 0 {
        "http".to_owned()
    } else {
        format!("http.additional_bindings[{}]", i - 1)
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn check_binding(
    field: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    response_body: Option<&str>,
) -> Result<Binding, String> {
    let m = method.to_ascii_uppercase();
    if !METHODS.contains(&m.as_str()) {
        return Err(format!(
            "{field}.method: {:?} is not one of {}",
            excerpt(method),
            METHODS.join("/")
        ));
    }
    let template =
        PathTemplate::parse(path).map_err(|e| format!("{field}.path: {:?}: {e}", excerpt(path)))?;
    if m == "POST"
        && template.verb().is_none()
        && template.segments() == [Segment::Literal("router".to_owned())]
    {
        return Err(format!(
            "{field}.path: POST /router is reserved for the router style"
        ));
    }
    // The gateway's own notification endpoints live under /notify/v1/ (docs/PROTOCOL.md,
    // "Notifications") and are matched before the configured APIs: an API there would be
    // shadowed without a word.
    if let [Segment::Literal(a), Segment::Literal(b), ..] = template.segments() {
        if a == "notify" && b == "v1" {
            return Err(format!(
                "{field}.path: /notify/v1/ is reserved for the gateway's notification endpoints"
            ));
        }
    }
    if let Some(b) = body {
        if b != "*" && !is_field_path(b) {
            return Err(format!(
                "{field}.body: {:?} must be \"*\" or a field path",
                excerpt(b)
            ));
        }
    }
    if let Some(rb) = response_body {
        if !is_field_path(rb) {
            return Err(format!(
                "{field}.response_body: {:?} must be a field path (omit it for the whole message)",
                excerpt(rb)
            ));
        }
    }
    Ok(Binding {
        method: m,
        template,
        body: body.map(str::to_owned),
        response_body: response_body.map(str::to_owned),
    })
}

fn check_policy(p: &v1::Policy) -> Result<(), String> {
    if let Some(bh) = &p.bulkhead {
        if bh.max_concurrent == 0 {
            return Err("policy.bulkhead.max_concurrent: must be at least 1".to_owned());
        }
        if bh.max_wait_ms.is_some_and(|w| w > MAX_TIMEOUT_MS) {
            return Err(format!(
                "policy.bulkhead.max_wait_ms: must be at most {MAX_TIMEOUT_MS}"
            ));
        }
    }
    if let Some(br) = &p.breaker {
        let at_least_one = [
            (
                "consecutive_failures",
                br.consecutive_failures.map(u64::from),
            ),
            (
                "consecutive_slow_calls",
                br.consecutive_slow_calls.map(u64::from),
            ),
            ("half_open_probes", br.half_open_probes.map(u64::from)),
            ("min_calls", br.min_calls.map(u64::from)),
        ];
        for (name, v) in at_least_one {
            if v == Some(0) {
                return Err(format!("policy.breaker.{name}: must be at least 1"));
            }
        }
        const DAY_MS: u64 = 86_400_000;
        let durations = [
            ("slow_call_ms", br.slow_call_ms, MAX_TIMEOUT_MS),
            ("open_ms", br.open_ms, DAY_MS),
            ("window_ms", br.window_ms, DAY_MS),
        ];
        for (name, v, max) in durations {
            if let Some(v) = v {
                if !(1..=max).contains(&v) {
                    return Err(format!(
                        "policy.breaker.{name}: must be between 1 and {max}"
                    ));
                }
            }
        }
        if let Some(r) = br.error_ratio {
            if !(r > 0.0 && r <= 1.0) {
                return Err("policy.breaker.error_ratio: must be in (0, 1]".to_owned());
            }
        }
    }
    for (i, rl) in p.rate_limits.iter().enumerate() {
        let field = format!("policy.rate_limits[{i}]");
        check_rate_key(&rl.key).map_err(|e| format!("{field}.key: {e}"))?;
        if rl.limit == 0 {
            return Err(format!("{field}.limit: must be at least 1"));
        }
        if rl.burst == Some(0) {
            return Err(format!("{field}.burst: must be at least 1"));
        }
    }
    if p.max_body_bytes == Some(0) {
        return Err("policy.max_body_bytes: must be at least 1".to_owned());
    }
    hot_policy(p)?;
    Ok(())
}

// Hot APIs: `policy.cache`, `policy.hot_keys` (docs/OPERATIONS.md, "Caching and hot keys").

/// Default and bounds of `policy.cache.max_entries`.
pub const DEFAULT_CACHE_ENTRIES: u64 = 10_000;
pub const MAX_CACHE_ENTRIES: u64 = 1_000_000;
/// Default and bounds of `policy.cache.max_body_bytes`.
pub const DEFAULT_CACHE_BODY_BYTES: u64 = 65_536;
pub const MAX_CACHE_BODY_BYTES: u64 = 8 << 20;
/// The longest cache ttl and hot-key `auto_cache_ms`: one day.
pub const MAX_CACHE_TTL_MS: u64 = 86_400_000;
/// The most keys a hot-key detector tracks (`policy.hot_keys.top`).
pub const MAX_HOT_TOP: u32 = 1000;

/// `field[i]: ...` for an error of one selector, `field: ...` for one of the whole key.
fn key_error(field: &str, e: &str) -> String {
    if e.starts_with('[') {
        format!("{field}{e}")
    } else {
        format!("{field}: {e}")
    }
}

/// The most names in `policy.cache.query`.
pub const MAX_CACHE_QUERY_NAMES: usize = 32;

/// `policy.cache.query`: distinct, non-empty names of at most 128 bytes, sorted.
fn cache_query_names(names: &[String]) -> Result<Vec<String>, String> {
    if names.len() > MAX_CACHE_QUERY_NAMES {
        return Err(format!(
            "policy.cache.query: at most {MAX_CACHE_QUERY_NAMES} names"
        ));
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() || n.len() > 128 {
            return Err(format!("policy.cache.query[{i}]: a name of 1 to 128 bytes"));
        }
        if out.contains(n) {
            return Err(format!("policy.cache.query[{i}]: {n:?} is named twice"));
        }
        out.push(n.clone());
    }
    out.sort();
    Ok(out)
}

/// The parsed cache and hot-key policy of `p`; `None` when it has neither.
pub fn hot_policy(p: &v1::Policy) -> Result<Option<HotPolicy>, String> {
    let cache = match &p.cache {
        None => None,
        Some(c) => {
            if c.ttl_ms > MAX_CACHE_TTL_MS {
                return Err(format!(
                    "policy.cache.ttl_ms: must be at most {MAX_CACHE_TTL_MS}"
                ));
            }
            let key = if c.key.is_empty() {
                Vec::new()
            } else {
                Selector::parse_key(&c.key).map_err(|e| key_error("policy.cache.key", &e))?
            };
            let max_entries = c.max_entries.unwrap_or(DEFAULT_CACHE_ENTRIES);
            if !(1..=MAX_CACHE_ENTRIES).contains(&max_entries) {
                return Err(format!(
                    "policy.cache.max_entries: must be between 1 and {MAX_CACHE_ENTRIES}"
                ));
            }
            let max_body = c.max_body_bytes.unwrap_or(DEFAULT_CACHE_BODY_BYTES);
            if !(1..=MAX_CACHE_BODY_BYTES).contains(&max_body) {
                return Err(format!(
                    "policy.cache.max_body_bytes: must be between 1 and {MAX_CACHE_BODY_BYTES}"
                ));
            }
            Some(CacheSpec {
                ttl_ms: c.ttl_ms,
                key,
                max_entries: max_entries as usize,
                max_body_bytes: max_body as usize,
                shared: c.shared,
                query: match &c.query {
                    None => None,
                    Some(names) => Some(cache_query_names(names)?),
                },
            })
        }
    };
    let hot_keys = match &p.hot_keys {
        None => None,
        Some(h) => {
            let key =
                Selector::parse_key(&h.key).map_err(|e| key_error("policy.hot_keys.key", &e))?;
            let rate_above = h.rate_above.unwrap_or(200.0);
            if !(rate_above.is_finite() && rate_above > 0.0) {
                return Err("policy.hot_keys.rate_above: must be above 0".to_owned());
            }
            let share = h.bandwidth_share_above.unwrap_or(0.7);
            if !(share > 0.0 && share <= 1.0) {
                return Err("policy.hot_keys.bandwidth_share_above: must be in (0, 1]".to_owned());
            }
            if h.link_bytes_per_s == Some(0) {
                return Err("policy.hot_keys.link_bytes_per_s: must be at least 1".to_owned());
            }
            // Automatic caching is opt-in (docs/OPERATIONS.md, "Caching and hot keys"): an
            // API that may be cached by itself says so twice, `read_only` and the ttl.
            let auto_cache_ms = match h.auto_cache_ms {
                Some(ms) if p.read_only => ms,
                _ => 0,
            };
            if auto_cache_ms > MAX_CACHE_TTL_MS {
                return Err(format!(
                    "policy.hot_keys.auto_cache_ms: must be at most {MAX_CACHE_TTL_MS}"
                ));
            }
            let top = h.top.unwrap_or(20);
            if !(1..=MAX_HOT_TOP).contains(&top) {
                return Err(format!(
                    "policy.hot_keys.top: must be between 1 and {MAX_HOT_TOP}"
                ));
            }
            Some(HotKeysSpec {
                key,
                rate_above,
                bandwidth_share_above: share,
                link_bytes_per_s: h.link_bytes_per_s,
                auto_cache_ms,
                top: top as usize,
            })
        }
    };
    if cache.is_none() && hot_keys.is_none() && !p.read_only {
        return Ok(None);
    }
    Ok(Some(HotPolicy {
        cache,
        hot_keys,
        read_only: p.read_only,
    }))
}

/// The deepest nesting of an API's `request_schema` / `response_schema`.
pub const MAX_SCHEMA_DEPTH: usize = 32;

/// An API's optional JSON Schema (`request_schema`, `response_schema`): a JSON object whose
/// `$ref`s are local (`#`, `#/$defs/...`: the portal embeds the schema in its OpenAPI
/// document and rewrites them), with no `$id` (which would change what they resolve
/// against), nested at most [`MAX_SCHEMA_DEPTH`] deep. The error starts with the JSON path
/// of the fault (`.properties.qty.$ref: ...`), or `: ` for the schema itself.
fn check_schema(schema: &serde_json::Value) -> Result<(), String> {
    if !schema.is_object() {
        return Err(": must be a JSON object (a JSON Schema)".to_owned());
    }
    fn walk(v: &serde_json::Value, at: &str, depth: usize) -> Result<(), String> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(format!(
                "{at}: nested deeper than {MAX_SCHEMA_DEPTH} levels"
            ));
        }
        match v {
            serde_json::Value::Object(map) => {
                for (k, child) in map {
                    let here = format!("{at}.{k}");
                    match k.as_str() {
                        "$ref" | "$dynamicRef" => match child.as_str() {
                            Some(r) if r.starts_with('#') => {}
                            _ => {
                                return Err(format!(
                                    "{here}: only local references (\"#/$defs/...\") are allowed"
                                ))
                            }
                        },
                        "$id" => {
                            return Err(format!(
                                "{here}: not allowed (the schema is embedded in the portal's OpenAPI document)"
                            ))
                        }
                        _ => walk(child, &here, depth + 1)?,
                    }
                }
                Ok(())
            }
            serde_json::Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{at}[{i}]"), depth + 1)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(schema, "", 0)
}

fn check_rate_key(k: &v1::RateKey) -> Result<(), String> {
    let parts = k.parts();
    if parts.is_empty() {
        return Err("must not be an empty list".to_owned());
    }
    let mut seen = HashSet::with_capacity(parts.len());
    for p in &parts {
        let ok = match *p {
            "api" | "app" | "ip" => true,
            other => other.strip_prefix("header:").is_some_and(is_header_name),
        };
        if !ok {
            return Err(format!(
                "{:?} is not one of api, app, ip, header:<Name>",
                excerpt(p)
            ));
        }
        if !seen.insert(p.to_ascii_lowercase()) {
            return Err(format!("{:?} appears twice", excerpt(p)));
        }
    }
    Ok(())
}

/// An HTTP header name: an RFC 9110 token.
fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// A document name (API id, cluster name, app key, switch id): 1–128 of `[A-Za-z0-9._-]`,
/// not starting with `.` (a dot-file is invisible in the directory layout).
fn check_name(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 128 {
        return Err(format!("{:?} must be 1 to 128 characters", excerpt(s)));
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
    {
        return Err(format!("{:?} may only hold A-Z a-z 0-9 . _ -", excerpt(s)));
    }
    if s.starts_with('.') {
        return Err(format!("{:?} must not start with '.'", excerpt(s)));
    }
    Ok(())
}

/// Parses JSON into `T`, naming the field of the first error.
fn parse_json<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    let v = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." || path == "?" || path.is_empty() {
            format!("invalid document: {}", e.inner())
        } else {
            format!("{path}: {}", e.inner())
        }
    })?;
    de.end().map_err(|e| format!("invalid document: {e}"))?;
    Ok(v)
}

fn check_descriptor(name: &str, raw: &[u8]) -> Result<DescriptorPool, String> {
    if name.len() != 64 || !name.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(
            "name: must be the 64 lower-case hex digits of the SHA-256 of its bytes".to_owned(),
        );
    }
    let sha = hex::encode(Sha256::digest(raw));
    if sha != name {
        return Err(format!("bytes: their SHA-256 is {sha}, not the name"));
    }
    DescriptorPool::decode(raw).map_err(|e| format!("bytes: not a FileDescriptorSet: {e}"))
}

fn check_cluster(name: &str, raw: &[u8]) -> Result<v1::Cluster, String> {
    check_name(name).map_err(|e| format!("name: {e}"))?;
    let c: v1::Cluster = parse_json(raw)?;
    if c.endpoints.is_empty() {
        return Err("endpoints: must list at least one endpoint".to_owned());
    }
    let mut seen: HashMap<&str, String> = HashMap::with_capacity(c.endpoints.len());
    check_endpoints("endpoints", &c.endpoints, &mut seen)?;
    check_routing(&c, &mut seen)?;
    if let Some(host) = &c.host {
        check_host(host).map_err(|e| format!("host: {e}"))?;
    }
    if let Some(g) = &c.grpc {
        if c.protocol != v1::Protocol::Grpc {
            return Err(
                "grpc: gRPC client settings on a cluster whose protocol is not grpc".to_owned(),
            );
        }
        check_grpc_client(g)?;
    }
    Ok(c)
}

/// A cluster's gRPC client settings (docs/OPERATIONS.md, "gRPC client settings").
fn check_grpc_client(g: &v1::GrpcClient) -> Result<(), String> {
    // grpc-core's default server policy answers a PING more often than every 5 minutes
    // with GOAWAY too_many_pings once a few arrived; grpc-go and grpc-java clients refuse
    // intervals under 10 s. Below that a keep-alive would kill the calls it protects.
    if let Some(ms) = g.keepalive_ms {
        if ms != 0 && !(10_000..=MAX_ROUTING_MS).contains(&ms) {
            return Err(format!(
                "grpc.keepalive_ms: must be 0 (no PINGs) or 10000..{MAX_ROUTING_MS} ms, not {ms}"
            ));
        }
    }
    if let Some(ms) = g.keepalive_timeout_ms {
        if !(1_000..=600_000).contains(&ms) {
            return Err(format!(
                "grpc.keepalive_timeout_ms: must be 1000..600000 ms, not {ms}"
            ));
        }
    }
    if let Some(ms) = g.connect_timeout_ms {
        if !(10..=60_000).contains(&ms) {
            return Err(format!(
                "grpc.connect_timeout_ms: must be 10..60000 ms, not {ms}"
            ));
        }
    }
    if let Some(n) = g.compress_min_bytes {
        // A gRPC message is at most 4 GiB (its length prefix); requests are far smaller.
        if n > u64::from(u32::MAX) {
            return Err(format!(
                "grpc.compress_min_bytes: must be at most {}, not {n}",
                u32::MAX
            ));
        }
    }
    Ok(())
}

/// A cluster's `host`: a host name or address, with an optional port, as a `Host` header
/// carries it (RFC 9110 §7.2: no user info, path or spaces), at most 255 bytes.
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() || host.len() > 255 {
        return Err("must be 1 to 255 bytes".to_owned());
    }
    let ok = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']'));
    if !ok {
        return Err(format!(
            "{host:?} is not a host name or address with an optional port"
        ));
    }
    Ok(())
}

/// A list of endpoints: addresses, weights, no address twice (across both sets).
fn check_endpoints<'c>(
    field: &str,
    eps: &'c [v1::Endpoint],
    seen: &mut HashMap<&'c str, String>,
) -> Result<(), String> {
    for (i, ep) in eps.iter().enumerate() {
        check_addr(&ep.addr).map_err(|e| format!("{field}[{i}].addr: {e}"))?;
        if ep.weight == 0 {
            return Err(format!("{field}[{i}].weight: must be at least 1"));
        }
        if let Some(j) = seen.insert(&ep.addr, format!("{field}[{i}]")) {
            return Err(format!(
                "{field}[{i}].addr: {:?} repeats {j}",
                excerpt(&ep.addr)
            ));
        }
    }
    Ok(())
}

/// Upper bound of the routing durations (intervals, holds, ejections): one day.
const MAX_ROUTING_MS: u64 = 86_400_000;

/// The routing parts of a cluster (docs/OPERATIONS.md, "Clusters: balancing, health,
/// failover, sleep").
fn check_routing<'c>(
    c: &'c v1::Cluster,
    seen: &mut HashMap<&'c str, String>,
) -> Result<(), String> {
    let ms = |field: &str, v: u64| -> Result<(), String> {
        if v == 0 || v > MAX_ROUTING_MS {
            return Err(format!("{field}: must be 1..{MAX_ROUTING_MS} ms, not {v}"));
        }
        Ok(())
    };
    match (c.balancing(), &c.hash_key) {
        (v1::Balancing::ConsistentHash, None) => {
            return Err("hash_key: balancing consistent_hash needs a hash_key \
                        (app, ip, header:<Name>, query:<name> or path:<var>)"
                .to_owned())
        }
        (v1::Balancing::ConsistentHash, Some(k)) => {
            check_hash_key(k).map_err(|e| format!("hash_key: {e}"))?
        }
        (b, Some(_)) => {
            return Err(format!(
                "hash_key: only used by balancing consistent_hash, not {}",
                b.as_str()
            ))
        }
        (_, None) => {}
    }
    if let Some(s) = &c.sticky {
        if !is_cookie_name(&s.cookie) {
            return Err(format!(
                "sticky.cookie: {:?} is not a cookie name (an RFC 6265 token)",
                excerpt(&s.cookie)
            ));
        }
        if s.ttl_s == 0 || s.ttl_s > 400 * 86_400 {
            return Err(format!("sticky.ttl_s: must be 1..{} s", 400 * 86_400));
        }
    }
    if let Some(h) = &c.health_check {
        if !h.path.starts_with('/') || h.path.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err(format!(
                "health_check.path: {:?} must start with '/' and hold no spaces or controls",
                excerpt(&h.path)
            ));
        }
        ms("health_check.interval_ms", h.interval_ms)?;
        ms("health_check.timeout_ms", h.timeout_ms)?;
        if h.unhealthy_after == 0 || h.unhealthy_after > 100 {
            return Err("health_check.unhealthy_after: must be 1..100".to_owned());
        }
        if h.healthy_after == 0 || h.healthy_after > 100 {
            return Err("health_check.healthy_after: must be 1..100".to_owned());
        }
    }
    if let Some(o) = &c.outlier {
        if o.consecutive_failures == 0 || o.consecutive_failures > 10_000 {
            return Err("outlier.consecutive_failures: must be 1..10000".to_owned());
        }
        ms("outlier.eject_ms", o.eject_ms)?;
    }
    if let Some(sb) = &c.standby {
        if sb.endpoints.is_empty() {
            return Err("standby.endpoints: must list at least one endpoint".to_owned());
        }
        check_endpoints("standby.endpoints", &sb.endpoints, seen)?;
        if !(sb.failover_below > 0.0 && sb.failover_below <= 1.0) {
            return Err(format!(
                "standby.failover_below: must be in (0, 1], not {}",
                sb.failover_below
            ));
        }
    }
    if c.active() == v1::ActiveSet::Standby && c.standby.is_none() {
        return Err("active: \"standby\" but the cluster has no standby set".to_owned());
    }
    if let Some(s) = &c.sleep {
        check_url(&s.wake_url).map_err(|e| format!("sleep.wake_url: {e}"))?;
        if c.health_check.is_none() {
            return Err(
                "sleep: needs a health_check (it tells when the backend is awake)".to_owned(),
            );
        }
        if s.hold_ms > MAX_ROUTING_MS {
            return Err(format!(
                "sleep.hold_ms: must be at most {MAX_ROUTING_MS} ms"
            ));
        }
        if s.retry_after_s == 0 || s.retry_after_s > 86_400 {
            return Err("sleep.retry_after_s: must be 1..86400 s".to_owned());
        }
        if let Some(u) = &s.sleep_url {
            check_url(u).map_err(|e| format!("sleep.sleep_url: {e}"))?;
        }
        if s.idle_s == Some(0) {
            return Err("sleep.idle_s: must be at least 1 s".to_owned());
        }
    }
    if let Some(a) = &c.autoscale {
        check_url(&a.webhook).map_err(|e| format!("autoscale.webhook: {e}"))?;
        if a.rules.is_empty() {
            return Err("autoscale.rules: must list at least one rule".to_owned());
        }
        for (i, r) in a.rules.iter().enumerate() {
            let f = format!("autoscale.rules[{i}]");
            match (r.rps_above, r.rps_below) {
                (None, None) => {
                    return Err(format!("{f}: needs rps_above or rps_below"));
                }
                (Some(_), Some(_)) => {
                    return Err(format!("{f}: set rps_above or rps_below, not both"));
                }
                (Some(v), None) | (None, Some(v)) if !(v.is_finite() && v >= 0.0) => {
                    return Err(format!("{f}: the rate must be a number >= 0, not {v}"));
                }
                _ => {}
            }
            if r.for_s == 0 || r.for_s > 86_400 {
                return Err(format!("{f}.for_s: must be 1..86400 s"));
            }
        }
        if a.cooldown_s > 86_400 {
            return Err("autoscale.cooldown_s: must be at most 86400 s".to_owned());
        }
    }
    Ok(())
}

/// `app` | `ip` | `header:<Name>` | `query:<name>` | `path:<var>`.
fn check_hash_key(k: &str) -> Result<(), String> {
    let ok = match k.split_once(':') {
        None => matches!(k, "app" | "ip"),
        Some(("header", n)) => is_header_name(n),
        Some(("query", n)) => {
            !n.is_empty()
                && n.bytes()
                    .all(|b| (0x21..0x7f).contains(&b) && b != b'&' && b != b'=')
        }
        Some(("path", n)) => {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        }
        Some(_) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not one of app, ip, header:<Name>, query:<name>, path:<var>",
            excerpt(k)
        ))
    }
}

/// A cookie name: an RFC 6265 token (RFC 9110 token characters).
fn is_cookie_name(s: &str) -> bool {
    s.len() <= 64 && is_header_name(s)
}

/// An absolute `http://` or `https://` URL with a host.
fn check_url(u: &str) -> Result<(), String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or_else(|| format!("{:?} must start with http:// or https://", excerpt(u)))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || u.len() > 2048 || u.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(format!("{:?} is not an absolute URL", excerpt(u)));
    }
    Ok(())
}

/// `ip:port` (`[v6]:port`) or `hostname:port`.
fn check_addr(addr: &str) -> Result<(), String> {
    if addr.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let bad = || format!("{:?} is not host:port", excerpt(addr));
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("{:?}: port must be 1..65535", excerpt(addr))),
    }
    if host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
        return Err(bad());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!(
            "{:?}: {:?} is not a hostname or IP address",
            excerpt(addr),
            excerpt(host)
        ));
    }
    Ok(())
}

fn check_app(name: &str, raw: &[u8]) -> Result<v1::App, String> {
    check_name(name).map_err(|e| format!("app key: {e}"))?;
    let app: v1::App = parse_json(raw)?;
    if app.secret.chars().count() < MIN_SECRET_CHARS {
        return Err(format!(
            "secret: must be at least {MIN_SECRET_CHARS} characters"
        ));
    }
    for (i, a) in app.apis.iter().enumerate() {
        if a != "*" {
            check_name(a).map_err(|e| format!("apis[{i}]: must be \"*\" or an API id: {e}"))?;
        }
    }
    for (i, t) in app.topics.iter().enumerate() {
        check_name(t).map_err(|e| format!("topics[{i}]: must be a topic name: {e}"))?;
    }
    if let Some(url) = &app.callback_url {
        check_callback_url(url).map_err(|e| format!("callback_url: {e}"))?;
    }
    for (i, rl) in app.rate_limits.iter().enumerate() {
        if rl.limit == 0 {
            return Err(format!("rate_limits[{i}].limit: must be at least 1"));
        }
        if rl.burst == Some(0) {
            return Err(format!("rate_limits[{i}].burst: must be at least 1"));
        }
    }
    Ok(app)
}

/// The longest topic retention: 30 days.
pub const MAX_RETENTION_S: u64 = 30 * 86_400;
/// The longest app callback URL.
pub const MAX_CALLBACK_URL_CHARS: usize = 2048;

/// `topics/<name>`: a notification topic (docs/OPERATIONS.md, "Notifications").
fn check_topic(name: &str, raw: &[u8]) -> Result<v1::Topic, String> {
    check_name(name).map_err(|e| format!("name: {e}"))?;
    let topic: v1::Topic = parse_json(raw)?;
    for (i, a) in topic.apps.iter().enumerate() {
        if a != "*" {
            check_name(a).map_err(|e| format!("apps[{i}]: must be \"*\" or an app key: {e}"))?;
        }
    }
    if !(1..=MAX_RETENTION_S).contains(&topic.retention_s) {
        return Err(format!(
            "retention_s: must be between 1 and {MAX_RETENTION_S}"
        ));
    }
    Ok(topic)
}

/// An app's `callback_url`: an absolute `http://` or `https://` URL with a host and no
/// spaces or fragment.
fn check_callback_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_CALLBACK_URL_CHARS {
        return Err(format!(
            "must be at most {MAX_CALLBACK_URL_CHARS} characters"
        ));
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("must start with http:// or https://")?;
    if url.bytes().any(|b| !b.is_ascii_graphic()) || url.contains('#') {
        return Err("must be visible ASCII without spaces or a fragment".into());
    }
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err("must name a host (and no user info)".into());
    }
    Ok(())
}

/// A key-level switch's API id, label and parsed `match`.
type KeyMatch = (String, String, Vec<(Selector, Vec<String>)>);

/// The most values one selector of a switch's `match` may list.
pub const MAX_MATCH_VALUES: usize = 1000;
/// The longest value in a switch's `match`.
pub const MAX_MATCH_VALUE_CHARS: usize = 256;

/// `switches/<api_id>` (API-wide, no `match`) or `switches/<api_id>@<label>` (key-level,
/// with a `match`).
fn check_switch(name: &str, raw: &[u8]) -> Result<(v1::Switch, Option<KeyMatch>), String> {
    let (api_id, label) = split_switch_name(name);
    check_name(api_id).map_err(|e| format!("name: {e}"))?;
    if let Some(label) = label {
        check_name(label).map_err(|e| format!("name: label {e}"))?;
    }
    let sw: v1::Switch = parse_json(raw)?;
    let key = match label {
        None if !sw.matches.is_empty() => {
            return Err(format!(
                "match: only a key-level switch switches/{api_id}@<label> has a match"
            ))
        }
        None => None,
        // A key-level switch that is off may leave its match out.
        Some(_) if !sw.degraded && sw.matches.is_empty() => None,
        Some(label) => Some((
            api_id.to_owned(),
            label.to_owned(),
            check_match(&sw.matches)?,
        )),
    };
    if let Some(m) = &sw.message {
        // Shown to merchants in the 503 envelope: one short line of text.
        if m.chars().count() > 200 || m.chars().any(char::is_control) {
            return Err(
                "message: at most 200 characters, no control characters (it is shown to merchants)"
                    .to_owned(),
            );
        }
    }
    if let Some(fb) = &sw.fallback {
        if !(100..=599).contains(&fb.status) {
            return Err("fallback.status: must be between 100 and 599".to_owned());
        }
        for (k, v) in &fb.headers {
            if !is_header_name(k) {
                return Err(format!(
                    "fallback.headers: {:?} is not a header name",
                    excerpt(k)
                ));
            }
            let reserved = ["content-length", "transfer-encoding", "connection"];
            if reserved.iter().any(|r| r.eq_ignore_ascii_case(k)) {
                return Err(format!("fallback.headers.{k}: set by the gateway itself"));
            }
            if v.chars()
                .any(|c| (c.is_control() && c != '\t') || c == '\u{7f}')
            {
                return Err(format!(
                    "fallback.headers.{k}: control characters are not allowed"
                ));
            }
        }
    }
    Ok((sw, key))
}

/// A key-level switch's `match`: 1 to `MAX_SELECTORS` selectors, each with 1 to
/// [`MAX_MATCH_VALUES`] values.
fn check_match(m: &BTreeMap<String, Vec<String>>) -> Result<Vec<(Selector, Vec<String>)>, String> {
    if m.is_empty() || m.len() > crate::selector::MAX_SELECTORS {
        return Err(format!(
            "match: must list 1 to {} selectors",
            crate::selector::MAX_SELECTORS
        ));
    }
    let mut out: Vec<(Selector, Vec<String>)> = Vec::with_capacity(m.len());
    for (name, values) in m {
        let sel = Selector::parse(name).map_err(|e| format!("match: {e}"))?;
        if out.iter().any(|(s, _)| *s == sel) {
            return Err(format!("match: {sel} appears twice"));
        }
        if values.is_empty() || values.len() > MAX_MATCH_VALUES {
            return Err(format!(
                "match.{name}: must list 1 to {MAX_MATCH_VALUES} values"
            ));
        }
        if let Some(v) = values
            .iter()
            .find(|v| v.chars().count() > MAX_MATCH_VALUE_CHARS)
        {
            return Err(format!(
                "match.{name}: {:?} is longer than {MAX_MATCH_VALUE_CHARS} characters",
                excerpt(v)
            ));
        }
        out.push((sel, values.clone()));
    }
    Ok(out)
}

/// The longest alert `for_s`: a day.
pub const MAX_ALERT_FOR_S: u64 = 86_400;

/// Checks an alert rule (`alerts/<name>`, docs/OPERATIONS.md "Alerts") on its own: the
/// condition is known, the threshold fits it, the receivers are usable.
pub fn check_alert(name: &str, raw: &[u8]) -> Result<v1::AlertRule, String> {
    check_name(name).map_err(|e| format!("name: {e}"))?;
    let rule: v1::AlertRule = parse_json(raw)?;
    if rule.api != "*" {
        check_name(&rule.api).map_err(|e| format!("api: must be \"*\" or an API id: {e}"))?;
    }
    if !v1::ALERT_CONDITIONS.contains(&rule.condition.as_str()) {
        return Err(format!(
            "condition: {:?} is not one of {}",
            rule.condition,
            v1::ALERT_CONDITIONS.join(", ")
        ));
    }
    let optional = matches!(rule.condition.as_str(), "breaker_open" | "node_missing");
    match rule.threshold {
        None if !optional => {
            return Err(format!(
                "threshold: required for {} (in {})",
                rule.condition,
                threshold_unit(&rule.condition)
            ))
        }
        None => {}
        Some(t) if !t.is_finite() || t < 0.0 => {
            return Err("threshold: must be a number of at least 0".to_owned())
        }
        Some(t) if rule.condition == "availability_below" && t > 1.0 => {
            return Err(
                "threshold: availability is a fraction, 0 to 1 (0.999 for 99.9%)".to_owned(),
            )
        }
        Some(_) => {}
    }
    if rule.for_s > MAX_ALERT_FOR_S {
        return Err(format!("for_s: must be at most {MAX_ALERT_FOR_S}"));
    }
    if let Some(sev) = &rule.severity {
        let ok = (1..=32).contains(&sev.len())
            && sev
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'));
        if !ok {
            return Err("severity: 1 to 32 of A-Z a-z 0-9 _ -".to_owned());
        }
    }
    for (i, r) in rule.receivers.iter().enumerate() {
        match (&r.webhook, &r.email) {
            (Some(url), None) => {
                check_webhook_url(url).map_err(|e| format!("receivers[{i}].webhook: {e}"))?
            }
            (None, Some(addr)) => {
                check_email(addr).map_err(|e| format!("receivers[{i}].email: {e}"))?
            }
            _ => {
                return Err(format!(
                    "receivers[{i}]: set exactly one of webhook and email"
                ))
            }
        }
    }
    if rule.description.as_ref().is_some_and(|d| d.len() > 1000) {
        return Err("description: at most 1000 bytes".to_owned());
    }
    Ok(rule)
}

/// The unit of a condition's threshold, for messages.
fn threshold_unit(condition: &str) -> &'static str {
    match condition {
        "tp99_ms_above" => "milliseconds",
        "availability_below" => "a fraction, 0 to 1",
        "qps_above" | "qps_below" => "requests per second",
        "config_lag_above" => "seconds",
        _ => "nodes",
    }
}

/// `http://` or `https://`, a host, no spaces or control characters.
fn check_webhook_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url:?} must start with http:// or https://"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err(format!("{url:?} needs a host (and no user info)"));
    }
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{url:?} is not a URL"));
    }
    Ok(())
}

/// A plain email address: `local@domain.tld`, at most 254 bytes, no spaces, quotes or angle
/// brackets.
pub fn check_email(addr: &str) -> Result<(), String> {
    let bad = || format!("{addr:?} is not an email address (local@domain)");
    if addr.is_empty() || addr.len() > 254 {
        return Err(bad());
    }
    let (local, domain) = addr.rsplit_once('@').ok_or_else(bad)?;
    let plain = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|c| {
                c.is_ascii_graphic()
                    && !matches!(
                        c,
                        b'@' | b'<'
                            | b'>'
                            | b'"'
                            | b'('
                            | b')'
                            | b','
                            | b';'
                            | b':'
                            | b'\\'
                            | b'['
                            | b']'
                    )
            })
    };
    if !plain(local)
        || !plain(domain)
        || !domain.contains('.')
        || domain.starts_with('.')
        || domain.ends_with('.')
    {
        return Err(bad());
    }
    Ok(())
}

fn check_ipacl(raw: &[u8]) -> Result<IpAclRules, String> {
    let acl: v1::IpAcl = parse_json(raw)?;
    let parse_list = |field: &str, list: &[String]| -> Result<Vec<IpNet>, String> {
        list.iter()
            .enumerate()
            .map(|(i, s)| {
                parse_net(s).ok_or_else(|| {
                    format!("{field}[{i}]: {:?} is not a CIDR or IP address", excerpt(s))
                })
            })
            .collect()
    };
    Ok(IpAclRules {
        deny: parse_list("deny", &acl.deny)?,
        allow: parse_list("allow", &acl.allow)?,
        trusted_proxies: parse_list("trusted_proxies", &acl.trusted_proxies)?,
    })
}

/// A CIDR (`10.0.0.0/8`, host bits cleared) or a bare address (`/32` or `/128`).
pub fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        return Some(n.trunc());
    }
    s.parse::<IpAddr>().ok().map(IpNet::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::prost_types::{
        field_descriptor_proto::{Label, Type},
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, MethodDescriptorProto,
        ServiceDescriptorProto,
    };
    use serde_json::json;

    fn field(name: &str, number: i32, ty: Type, type_name: Option<&str>) -> FieldDescriptorProto {
        FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(Label::Optional as i32),
            r#type: Some(ty as i32),
            type_name: type_name.map(str::to_owned),
            ..Default::default()
        }
    }

    /// A FileDescriptorSet with `demo.order.v1.OrderService/GetOrder(GetOrderRequest{order_id,
    /// page{size}, tags[]}) -> Order{id}` and a streaming `Watch`.
    fn descriptor() -> Vec<u8> {
        let file = FileDescriptorProto {
            name: Some("demo/order.proto".into()),
            package: Some("demo.order.v1".into()),
            syntax: Some("proto3".into()),
            message_type: vec![
                DescriptorProto {
                    name: Some("Page".into()),
                    field: vec![field("size", 1, Type::Int32, None)],
                    ..Default::default()
                },
                DescriptorProto {
                    name: Some("GetOrderRequest".into()),
                    field: vec![
                        field("order_id", 1, Type::String, None),
                        field("page", 2, Type::Message, Some(".demo.order.v1.Page")),
                        FieldDescriptorProto {
                            label: Some(Label::Repeated as i32),
                            ..field("tags", 3, Type::String, None)
                        },
                    ],
                    ..Default::default()
                },
                DescriptorProto {
                    name: Some("Order".into()),
                    field: vec![field("id", 1, Type::String, None)],
                    ..Default::default()
                },
            ],
            service: vec![ServiceDescriptorProto {
                name: Some("OrderService".into()),
                method: vec![
                    MethodDescriptorProto {
                        name: Some("GetOrder".into()),
                        input_type: Some(".demo.order.v1.GetOrderRequest".into()),
                        output_type: Some(".demo.order.v1.Order".into()),
                        ..Default::default()
                    },
                    MethodDescriptorProto {
                        name: Some("Watch".into()),
                        input_type: Some(".demo.order.v1.GetOrderRequest".into()),
                        output_type: Some(".demo.order.v1.Order".into()),
                        server_streaming: Some(true),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut pool = DescriptorPool::new();
        pool.add_file_descriptor_proto(file).unwrap();
        pool.encode_to_vec()
    }

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    struct T(Tree);

    impl T {
        fn new() -> T {
            let d = descriptor();
            let mut t = T(Tree {
                generation: 7,
                ..Tree::default()
            });
            t.bytes(&format!("descriptors/{}", sha(&d)), d);
            t.put(
                "clusters/order-svc",
                json!({"protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:50051"}]}),
            );
            t.put("clusters/web", json!({"protocol": "http", "endpoints": [{"addr": "web.internal:8080", "weight": 2}]}));
            t
        }
        fn put(&mut self, path: &str, v: serde_json::Value) -> &mut Self {
            self.bytes(path, serde_json::to_vec(&v).unwrap())
        }
        fn bytes(&mut self, path: &str, b: Vec<u8>) -> &mut Self {
            self.0.docs.insert(path.into(), b);
            self
        }
        fn api(&mut self, v: serde_json::Value) -> &mut Self {
            let id = v["id"].as_str().unwrap().to_owned();
            self.put(&format!("apis/{id}"), v)
        }
        fn build(&self, prev: Option<&Snapshot>) -> Snapshot {
            build_snapshot(&self.0, prev)
        }
    }

    fn grpc_api(id: &str, path: &str) -> serde_json::Value {
        json!({
            "id": id, "version": 1,
            "http": {"method": "get", "path": path},
            "backend": {"cluster": "order-svc", "timeout_ms": 800,
                "grpc": {"service": "demo.order.v1.OrderService", "method": "GetOrder", "descriptor": sha(&descriptor())}},
        })
    }

    fn http_api(id: &str, method: &str, path: &str) -> serde_json::Value {
        json!({
            "id": id,
            "http": {"method": method, "path": path},
            "backend": {"cluster": "web", "http": {}},
            "auth": "none",
        })
    }

    fn reason(s: &Snapshot, path: &str) -> String {
        s.rejected
            .iter()
            .find(|r| r.path == path)
            .map(|r| r.reason.clone())
            .unwrap_or_else(|| panic!("{path} not rejected: {:?}", s.rejected))
    }

    /// Applies `edit` to a good API document and returns the rejection reason.
    fn api_reason(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = grpc_api("order.get", "/v1/orders/{order_id}");
        edit(&mut v);
        let s = T::new().put("apis/order.get", v).build(None);
        assert!(
            !s.apis.contains_key("order.get"),
            "{:?}",
            s.apis["order.get"].definition
        );
        reason(&s, "apis/order.get")
    }

    #[test]
    fn good_tree() {
        let mut t = T::new();
        t.api(grpc_api("order.get", "/v1/orders/{order_id}"))
            .api(http_api("web.list", "GET", "/v1/items/{id}"))
            .put("apps/merchant-1", json!({"secret": "s3cr3t-value", "apis": ["*"], "rate_limits": [{"limit": 100, "per": "second"}]}))
            .put("switches/order.get", json!({"degraded": true, "fallback": {"status": 200, "headers": {"X-Degraded": "1"}, "body": {"items": []}}}))
            .put("ipacl", json!({"deny": ["203.0.113.0/24", "2001:db8::/32", "10.1.2.3"], "allow": []}))
            .bytes("nodes/gw-1", b"ignored".to_vec());
        let s = t.build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
        assert_eq!(s.apis.len(), 2);
        let api = &s.apis["order.get"];
        assert_eq!(api.bindings[0].method, "GET");
        assert_eq!(api.timeout_ms, 800);
        assert!(matches!(&api.backend, BackendKind::Grpc { method, .. } if method == "GetOrder"));
        assert_eq!(s.apps.len(), 1);
        assert!(s.switches["order.get"].degraded);
        assert_eq!(s.ipacl.deny.len(), 3);
        assert_eq!(s.ipacl.deny[2].to_string(), "10.1.2.3/32");
        assert_eq!(s.descriptors.len(), 1);
        assert_eq!(s.accepted.len(), 8);
        assert_eq!(s.version.generation, 7);
        assert_eq!(s.version.digest.len(), 16);
        // The digest depends only on the accepted documents.
        let again = t.build(None);
        assert_eq!(again.version, s.version);
        t.put("apps/merchant-1", json!({"secret": "another-secret"}));
        assert_ne!(t.build(None).version.digest, s.version.digest);
    }

    #[test]
    fn bad_json_names_field() {
        let mut t = T::new();
        t.bytes("apis/a", b"{not json".to_vec());
        t.put("apis/b", json!({"id": "b", "http": {"method": "GET", "path": "/b"}, "backend": {"cluster": "web", "timeout_ms": "x", "http": {}}}));
        t.put(
            "apis/c",
            json!({"id": "c", "http": {"method": "GET", "path": "/c"}}),
        );
        let s = t.build(None);
        assert!(
            reason(&s, "apis/a").starts_with("invalid document"),
            "{}",
            reason(&s, "apis/a")
        );
        assert!(
            reason(&s, "apis/b").starts_with("backend.timeout_ms: invalid type"),
            "{}",
            reason(&s, "apis/b")
        );
        assert!(
            reason(&s, "apis/c").contains("missing field `backend`"),
            "{}",
            reason(&s, "apis/c")
        );
    }

    #[test]
    fn api_rules() {
        let r = api_reason(|v| v["id"] = json!("other"));
        assert!(r.starts_with("id:") && r.contains("document name"), "{r}");
        let r = api_reason(|v| v["backend"]["timeout_ms"] = json!(0));
        assert_eq!(r, "backend.timeout_ms: must be between 1 and 600000");
        let r = api_reason(|v| v["backend"]["timeout_ms"] = json!(600_001));
        assert_eq!(r, "backend.timeout_ms: must be between 1 and 600000");
        let r = api_reason(|v| v["http"]["method"] = json!("FETCH"));
        assert!(r.starts_with("http.method:"), "{r}");
        let r = api_reason(|v| v["http"]["path"] = json!("/v1/**/x"));
        assert!(r.starts_with("http.path:") && r.contains("last"), "{r}");
        let r = api_reason(|v| v["http"]["body"] = json!("a..b"));
        assert!(r.starts_with("http.body:"), "{r}");
        let r = api_reason(|v| {
            v["http"]["additional_bindings"] = json!([{"method": "POST", "path": "v1"}])
        });
        assert!(r.starts_with("http.additional_bindings[0].path:"), "{r}");
        let r = api_reason(|v| v["backend"]["http"] = json!({}));
        assert_eq!(r, "backend: set exactly one of grpc and http");
        let r = api_reason(|v| {
            v["backend"].as_object_mut().unwrap().remove("grpc");
        });
        assert_eq!(r, "backend: set exactly one of grpc and http");
        let r = api_reason(|v| v["backend"]["cluster"] = json!("nope"));
        assert!(r.starts_with("backend.cluster: no cluster"), "{r}");
        let r = api_reason(|v| v["backend"]["cluster"] = json!("web"));
        assert!(
            r.starts_with("backend.cluster:") && r.contains("is http"),
            "{r}"
        );
        let r = api_reason(|v| v["policy"] = json!({"bulkhead": {"max_concurrent": 0}}));
        assert_eq!(r, "policy.bulkhead.max_concurrent: must be at least 1");
        let r = api_reason(|v| v["policy"] = json!({"breaker": {"error_ratio": 0.0}}));
        assert!(r.starts_with("policy.breaker.error_ratio"), "{r}");
        let r = api_reason(|v| v["policy"] = json!({"breaker": {"error_ratio": 1.5}}));
        assert!(r.starts_with("policy.breaker.error_ratio"), "{r}");
        let r = api_reason(|v| v["policy"] = json!({"breaker": {"open_ms": 0}}));
        assert!(r.starts_with("policy.breaker.open_ms"), "{r}");
        let r = api_reason(|v| {
            v["policy"] = json!({"rate_limits": [{"key": "user", "limit": 1, "per": "second"}]})
        });
        assert!(r.starts_with("policy.rate_limits[0].key:"), "{r}");
        let r = api_reason(|v| {
            v["policy"] = json!({"rate_limits": [{"key": [], "limit": 1, "per": "second"}]})
        });
        assert!(r.starts_with("policy.rate_limits[0].key:"), "{r}");
        let r = api_reason(|v| {
            v["policy"] = json!({"rate_limits": [{"key": "header:", "limit": 1, "per": "second"}]})
        });
        assert!(r.starts_with("policy.rate_limits[0].key:"), "{r}");
        let r = api_reason(|v| {
            v["policy"] = json!({"rate_limits": [{"key": "ip", "limit": 0, "per": "second"}]})
        });
        assert_eq!(r, "policy.rate_limits[0].limit: must be at least 1");
        let r = api_reason(|v| {
            v["policy"] = json!({"rate_limits": [{"limit": 1, "per": "second", "scope": "galaxy"}]})
        });
        assert!(r.contains("policy.rate_limits[0].scope"), "{r}");
        let r = api_reason(|v| {
            v["http"]["method"] = json!("POST");
            v["http"]["path"] = json!("/router");
        });
        assert!(r.contains("reserved"), "{r}");
        let r = api_reason(|v| {
            v["http"]["path"] = json!("/notify/v1/stream");
        });
        assert!(r.contains("/notify/v1/ is reserved"), "{r}");
        for id in ["", ".hidden", "a/b", "bad id"] {
            let v = json!({"id": id});
            let mut t = T::new();
            let mut d = grpc_api("x", "/x");
            d["id"] = v["id"].clone();
            t.put("apis/x", d);
            assert!(reason(&t.build(None), "apis/x").starts_with("id:"));
        }
    }

    #[test]
    fn optional_json_schemas() {
        let mut v = http_api("web.get", "GET", "/v1/a");
        v["request_schema"] = json!({"type": "object", "required": ["a"],
            "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}});
        v["response_schema"] = json!({"type": "array", "items": {"type": "integer"}});
        let s = T::new().api(v.clone()).build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
        let def = &s.apis["web.get"].definition;
        assert_eq!(
            def.request_schema.as_ref().unwrap()["required"],
            json!(["a"])
        );
        // Without them, a v1 document is unchanged.
        let plain = T::new().api(http_api("web.b", "GET", "/v1/b")).build(None);
        let def = &plain.apis["web.b"].definition;
        assert!(def.request_schema.is_none() && def.response_schema.is_none());
        assert!(!serde_json::to_string(def).unwrap().contains("schema"));

        let refused = |field: &str, schema: serde_json::Value| {
            let mut v = http_api("web.get", "GET", "/v1/a");
            v[field] = schema;
            let s = T::new().api(v).build(None);
            reason(&s, "apis/web.get")
        };
        assert_eq!(
            refused("request_schema", json!("string")),
            "request_schema: must be a JSON object (a JSON Schema)"
        );
        assert!(refused("response_schema", json!([1])).starts_with("response_schema: must be"));
        let r = refused(
            "request_schema",
            json!({"properties": {"a": {"$ref": "https://example.com/a.json"}}}),
        );
        assert!(
            r.starts_with("request_schema.properties.a.$ref: only local"),
            "{r}"
        );
        let r = refused("response_schema", json!({"allOf": [{"$id": "x"}]}));
        assert!(
            r.starts_with("response_schema.allOf[0].$id: not allowed"),
            "{r}"
        );
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"items": deep});
        }
        assert!(refused("request_schema", deep).contains("nested deeper than 32"));
        let r = api_reason(|v| v["response_schema"] = json!({"type": "object"}));
        assert!(
            r.starts_with("response_schema: only for HTTP backends"),
            "{r}"
        );
    }

    #[test]
    fn good_policy_and_keys() {
        let mut v = grpc_api("order.get", "/v1/orders/{order_id}");
        v["policy"] = json!({
            "bulkhead": {"max_concurrent": 64},
            "breaker": {"consecutive_failures": 3, "slow_call_ms": 50, "consecutive_slow_calls": 3, "open_ms": 5000, "error_ratio": 0.5},
            "rate_limits": [
                {"key": "app", "limit": 100, "per": "second"},
                {"key": ["api", "header:X-Region"], "limit": 600, "per": "minute"},
                {"limit": 5, "per": "second"}
            ]
        });
        let s = T::new().api(v).build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
    }

    #[test]
    fn grpc_checks() {
        let r = api_reason(|v| v["backend"]["grpc"]["descriptor"] = json!("ab".repeat(32)));
        assert!(r.starts_with("backend.grpc.descriptor:"), "{r}");
        let r = api_reason(|v| v["backend"]["grpc"]["service"] = json!("demo.Nope"));
        assert!(r.starts_with("backend.grpc.service:"), "{r}");
        let r = api_reason(|v| v["backend"]["grpc"]["method"] = json!("Nope"));
        assert!(r.starts_with("backend.grpc.method:"), "{r}");
        let r = api_reason(|v| v["backend"]["grpc"]["method"] = json!("Watch"));
        assert!(r.contains("streaming"), "{r}");
        let r = api_reason(|v| v["http"]["path"] = json!("/v1/orders/{nope}"));
        assert!(r.starts_with("http.path: variable {nope}"), "{r}");
        let r = api_reason(|v| v["http"]["path"] = json!("/v1/orders/{page}"));
        assert!(r.contains("is a message"), "{r}");
        let r = api_reason(|v| v["http"]["path"] = json!("/v1/orders/{tags}"));
        assert!(r.contains("repeated"), "{r}");
        let r = api_reason(|v| v["http"]["body"] = json!("nope"));
        assert!(r.starts_with("http.body:"), "{r}");
        let r = api_reason(|v| v["http"]["response_body"] = json!("nope"));
        assert!(r.starts_with("http.response_body:"), "{r}");
        // nested field paths resolve
        let mut v = grpc_api("order.get", "/v1/orders/{order_id}/{page.size}");
        v["http"]["body"] = json!("tags");
        v["http"]["response_body"] = json!("id");
        let s = T::new().api(v).build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
    }

    #[test]
    fn http_rewrite_checks() {
        let mut v = http_api("web.get", "GET", "/v1/items/{id}");
        v["backend"]["http"]["path"] = json!("/internal/{id}");
        v["http"]["additional_bindings"] = json!([{"method": "POST", "path": "/v2/items/{id}"}]);
        let s = T::new().api(v.clone()).build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
        assert_eq!(s.apis["web.get"].bindings.len(), 2);
        v["http"]["additional_bindings"] = json!([{"method": "POST", "path": "/v2/items"}]);
        let s = T::new().api(v).build(None);
        let r = reason(&s, "apis/web.get");
        assert!(
            r.starts_with(
                "backend.http.path: {id} is not a variable of http.additional_bindings[0]"
            ),
            "{r}"
        );
    }

    #[test]
    fn duplicate_routes() {
        let mut t = T::new();
        t.api(http_api("a", "GET", "/v1/items/{id}"))
            .api(http_api("b", "GET", "/v1/items/{item}"))
            .api(http_api("c", "POST", "/v1/items/{id}"))
            .api(http_api("d", "GET", "/v1/items/{id}:do"));
        let s = t.build(None);
        assert!(s.apis.contains_key("a") && s.apis.contains_key("c") && s.apis.contains_key("d"));
        let r = reason(&s, "apis/b");
        assert!(r.contains("already bound by API a"), "{r}");
        assert_eq!(s.rejected.len(), 1);
        // inside one API
        let mut v = http_api("e", "GET", "/v9/x");
        v["http"]["additional_bindings"] = json!([{"method": "get", "path": "/v9/x"}]);
        let s = T::new().api(v).build(None);
        assert!(
            reason(&s, "apis/e").contains("duplicates http"),
            "{}",
            reason(&s, "apis/e")
        );
    }

    #[test]
    fn cluster_rules() {
        let mut t = T::new();
        t.put("clusters/empty", json!({"protocol": "http", "endpoints": []}))
            .put("clusters/badaddr", json!({"protocol": "http", "endpoints": [{"addr": "nohost"}]}))
            .put("clusters/badport", json!({"protocol": "http", "endpoints": [{"addr": "h:0"}]}))
            .put("clusters/w0", json!({"protocol": "http", "endpoints": [{"addr": "h:80", "weight": 0}]}))
            .put("clusters/dup", json!({"protocol": "http", "endpoints": [{"addr": "h:80"}, {"addr": "h:80"}]}))
            .put("clusters/proto", json!({"protocol": "ftp", "endpoints": [{"addr": "h:80"}]}))
            .put("clusters/v6", json!({"protocol": "grpc", "endpoints": [{"addr": "[::1]:50051"}, {"addr": "a-b.c_d.example:1"}]}))
            .put("clusters/host", json!({"protocol": "http", "host": "orders.internal:8080", "endpoints": [{"addr": "h:80"}]}))
            .put("clusters/badhost", json!({"protocol": "http", "host": "a b/c", "endpoints": [{"addr": "h:80"}]}));
        let s = t.build(None);
        assert!(reason(&s, "clusters/empty").starts_with("endpoints:"));
        assert!(reason(&s, "clusters/badaddr").starts_with("endpoints[0].addr:"));
        assert!(reason(&s, "clusters/badport").starts_with("endpoints[0].addr:"));
        assert_eq!(
            reason(&s, "clusters/w0"),
            "endpoints[0].weight: must be at least 1"
        );
        assert!(reason(&s, "clusters/dup").starts_with("endpoints[1].addr:"));
        assert!(
            reason(&s, "clusters/proto").starts_with("protocol:"),
            "{}",
            reason(&s, "clusters/proto")
        );
        assert!(s.clusters.contains_key("v6"));
        assert!(s.clusters.contains_key("host"));
        assert!(reason(&s, "clusters/badhost").starts_with("host:"));
        assert_eq!(s.rejected.len(), 7);
    }

    /// A cluster document with every routing field of issue 11.
    fn full_cluster() -> serde_json::Value {
        json!({
            "protocol": "http",
            "endpoints": [{"addr": "127.0.0.1:18081", "weight": 1}, {"addr": "127.0.0.1:18082", "weight": 1}],
            "balancing": "least_load",
            "sticky": {"cookie": "PORTICO_STICKY", "ttl_s": 3600},
            "health_check": {"path": "/healthz", "interval_ms": 1000, "timeout_ms": 500, "unhealthy_after": 2, "healthy_after": 2},
            "outlier": {"consecutive_failures": 5, "eject_ms": 10000},
            "standby": {"endpoints": [{"addr": "127.0.0.1:28081", "weight": 1}], "failover_below": 0.5, "failback": "auto"},
            "active": "primary",
            "sleep": {"wake_url": "http://127.0.0.1:7000/wake/order-svc", "hold_ms": 3000, "retry_after_s": 2},
            "autoscale": {"webhook": "http://127.0.0.1:7000/scale", "rules": [
                {"rps_above": 500.0, "for_s": 10, "action": "up"},
                {"rps_below": 10.0, "for_s": 60, "action": "down"}], "cooldown_s": 60}
        })
    }

    #[test]
    fn routing_fields_round_trip_and_old_documents_stay_unchanged() {
        for doc in [
            json!({"protocol": "http", "endpoints": [{"addr": "h:80", "weight": 2}]}),
            json!({"protocol": "grpc", "endpoints": [{"addr": "h:80", "weight": 1}], "balancing": "round_robin"}),
            full_cluster(),
        ] {
            let c: v1::Cluster = serde_json::from_value(doc.clone()).unwrap();
            assert_eq!(serde_json::to_value(&c).unwrap(), doc);
        }
        let mut t = T::new();
        t.put("clusters/full", full_cluster());
        let s = t.build(None);
        let c = &s.clusters["full"];
        assert_eq!(c.balancing(), v1::Balancing::LeastLoad);
        assert_eq!(c.active(), v1::ActiveSet::Primary);
        // Defaults of the optional parts.
        let c: v1::Cluster = serde_json::from_value(json!({
            "protocol": "http", "endpoints": [{"addr": "h:80"}],
            "sticky": {}, "health_check": {}, "outlier": {},
            "standby": {"endpoints": [{"addr": "h:81"}]},
            "sleep": {"wake_url": "http://w/"}
        }))
        .unwrap();
        assert_eq!(c.balancing(), v1::Balancing::RoundRobin);
        let st = c.sticky.unwrap();
        assert_eq!((st.cookie.as_str(), st.ttl_s), ("PORTICO_STICKY", 3600));
        let h = c.health_check.unwrap();
        assert_eq!(
            (
                h.path.as_str(),
                h.interval_ms,
                h.timeout_ms,
                h.unhealthy_after,
                h.healthy_after
            ),
            ("/healthz", 1000, 500, 2, 2)
        );
        let o = c.outlier.unwrap();
        assert_eq!((o.consecutive_failures, o.eject_ms), (5, 10_000));
        let sb = c.standby.unwrap();
        assert_eq!((sb.failover_below, sb.failback), (0.5, v1::Failback::Auto));
        let sl = c.sleep.unwrap();
        assert_eq!((sl.hold_ms, sl.retry_after_s), (3000, 2));
    }

    #[test]
    fn routing_rules() {
        type Edit = Box<dyn Fn(&mut serde_json::Value)>;
        let bad: Vec<(&str, Edit, &str)> = vec![
            (
                "balancing",
                Box::new(|v| v["balancing"] = json!("random")),
                "balancing: unknown variant `random`",
            ),
            (
                "hash needs key",
                Box::new(|v| v["balancing"] = json!("consistent_hash")),
                "hash_key: balancing consistent_hash needs a hash_key",
            ),
            (
                "hash key syntax",
                Box::new(|v| {
                    v["balancing"] = json!("consistent_hash");
                    v["hash_key"] = json!("cookie:x");
                }),
                "hash_key: \"cookie:x\" is not one of",
            ),
            (
                "header name",
                Box::new(|v| {
                    v["balancing"] = json!("consistent_hash");
                    v["hash_key"] = json!("header:a b");
                }),
                "hash_key:",
            ),
            (
                "key without hash",
                Box::new(|v| v["hash_key"] = json!("ip")),
                "hash_key: only used by balancing consistent_hash, not least_load",
            ),
            (
                "cookie",
                Box::new(|v| v["sticky"]["cookie"] = json!("a;b")),
                "sticky.cookie:",
            ),
            (
                "ttl",
                Box::new(|v| v["sticky"]["ttl_s"] = json!(0)),
                "sticky.ttl_s:",
            ),
            (
                "path",
                Box::new(|v| v["health_check"]["path"] = json!("healthz")),
                "health_check.path:",
            ),
            (
                "interval",
                Box::new(|v| v["health_check"]["interval_ms"] = json!(0)),
                "health_check.interval_ms: must be 1..",
            ),
            (
                "timeout",
                Box::new(|v| v["health_check"]["timeout_ms"] = json!(0)),
                "health_check.timeout_ms:",
            ),
            (
                "unhealthy",
                Box::new(|v| v["health_check"]["unhealthy_after"] = json!(0)),
                "health_check.unhealthy_after:",
            ),
            (
                "healthy",
                Box::new(|v| v["health_check"]["healthy_after"] = json!(0)),
                "health_check.healthy_after:",
            ),
            (
                "failures",
                Box::new(|v| v["outlier"]["consecutive_failures"] = json!(0)),
                "outlier.consecutive_failures:",
            ),
            (
                "eject",
                Box::new(|v| v["outlier"]["eject_ms"] = json!(0)),
                "outlier.eject_ms:",
            ),
            (
                "below 0",
                Box::new(|v| v["standby"]["failover_below"] = json!(0.0)),
                "standby.failover_below: must be in (0, 1]",
            ),
            (
                "below >1",
                Box::new(|v| v["standby"]["failover_below"] = json!(1.5)),
                "standby.failover_below:",
            ),
            (
                "failback",
                Box::new(|v| v["standby"]["failback"] = json!("never")),
                "standby.failback: unknown variant",
            ),
            (
                "standby empty",
                Box::new(|v| v["standby"]["endpoints"] = json!([])),
                "standby.endpoints: must list",
            ),
            (
                "standby dup",
                Box::new(|v| v["standby"]["endpoints"] = json!([{"addr": "127.0.0.1:18082"}])),
                "standby.endpoints[0].addr: \"127.0.0.1:18082\" repeats endpoints[1]",
            ),
            (
                "standby addr",
                Box::new(|v| v["standby"]["endpoints"] = json!([{"addr": "nohost"}])),
                "standby.endpoints[0].addr:",
            ),
            (
                "active",
                Box::new(|v| v["active"] = json!("secondary")),
                "active: unknown variant",
            ),
            (
                "active no standby",
                Box::new(|v| {
                    v["active"] = json!("standby");
                    v.as_object_mut().unwrap().remove("standby");
                }),
                "active: \"standby\" but the cluster has no standby set",
            ),
            (
                "wake",
                Box::new(|v| v["sleep"]["wake_url"] = json!("ftp://x")),
                "sleep.wake_url:",
            ),
            (
                "wake host",
                Box::new(|v| v["sleep"]["wake_url"] = json!("http:///x")),
                "sleep.wake_url:",
            ),
            (
                "retry",
                Box::new(|v| v["sleep"]["retry_after_s"] = json!(0)),
                "sleep.retry_after_s:",
            ),
            (
                "sleep url",
                Box::new(|v| v["sleep"]["sleep_url"] = json!("x")),
                "sleep.sleep_url:",
            ),
            (
                "idle",
                Box::new(|v| v["sleep"]["idle_s"] = json!(0)),
                "sleep.idle_s:",
            ),
            (
                "webhook",
                Box::new(|v| v["autoscale"]["webhook"] = json!("")),
                "autoscale.webhook:",
            ),
            (
                "no rules",
                Box::new(|v| v["autoscale"]["rules"] = json!([])),
                "autoscale.rules: must list",
            ),
            (
                "rule neither",
                Box::new(|v| v["autoscale"]["rules"][1] = json!({"for_s": 5, "action": "down"})),
                "autoscale.rules[1]: needs rps_above or rps_below",
            ),
            (
                "rule both",
                Box::new(|v| v["autoscale"]["rules"][0]["rps_below"] = json!(1.0)),
                "autoscale.rules[0]: set rps_above or rps_below, not both",
            ),
            (
                "rule negative",
                Box::new(|v| v["autoscale"]["rules"][0]["rps_above"] = json!(-1.0)),
                "autoscale.rules[0]: the rate must be",
            ),
            (
                "rule for",
                Box::new(|v| v["autoscale"]["rules"][0]["for_s"] = json!(0)),
                "autoscale.rules[0].for_s:",
            ),
            (
                "rule action",
                Box::new(|v| v["autoscale"]["rules"][0]["action"] = json!("sideways")),
                "autoscale.rules[0].action: unknown variant",
            ),
        ];
        for (what, edit, want) in bad {
            let mut doc = full_cluster();
            edit(&mut doc);
            let mut t = T::new();
            t.put("clusters/c", doc);
            let s = t.build(None);
            let r = reason(&s, "clusters/c");
            assert!(r.starts_with(want), "{what}: {r}");
        }
        for key in [
            "app",
            "ip",
            "header:X-User",
            "query:user_id",
            "path:order_id",
        ] {
            let mut doc = full_cluster();
            doc["balancing"] = json!("consistent_hash");
            doc["hash_key"] = json!(key);
            let mut t = T::new();
            t.put("clusters/c", doc);
            assert!(t.build(None).clusters.contains_key("c"), "{key}");
        }
    }

    #[test]
    fn topics_and_the_app_notification_fields() {
        let mut t = T::new();
        t.put(
            "topics/orders",
            json!({"owner": "order-team", "apps": ["m1"], "retention_s": 3600}),
        )
        .put("topics/all", json!({"apps": ["*"]}))
        .put("topics/bad-app", json!({"apps": ["a b"]}))
        .put("topics/forever", json!({"apps": ["*"], "retention_s": 0}))
        .put(
            "apps/m1",
            json!({"secret": "12345678", "topics": ["orders"], "callback_url": "https://m1.example/cb?x=1"}),
        )
        .put("apps/m2", json!({"secret": "12345678"}))
        .put(
            "apps/badcb",
            json!({"secret": "12345678", "callback_url": "ftp://x/"}),
        )
        .put(
            "apps/badtopic",
            json!({"secret": "12345678", "topics": ["no spaces"]}),
        );
        let s = t.build(None);
        assert_eq!(s.topics["orders"].retention_s, 3600);
        assert_eq!(s.topics["all"].retention_s, v1::DEFAULT_RETENTION_S);
        assert!(reason(&s, "topics/bad-app").starts_with("apps[0]:"));
        assert!(reason(&s, "topics/forever").starts_with("retention_s:"));
        assert!(reason(&s, "apps/badcb").starts_with("callback_url:"));
        assert!(reason(&s, "apps/badtopic").starts_with("topics[0]:"));
        assert!(s.topic_granted("m1", "orders") && s.topic_granted("m2", "all"));
        assert!(!s.topic_granted("m2", "orders") && !s.topic_granted("m1", "nope"));
        assert_eq!(s.granted_topics("m2"), vec!["all".to_owned()]);
        assert!(check_callback_url("http://h:1/p").is_ok());
        assert!(check_callback_url("https://u@h/").is_err());
        assert!(check_callback_url("https:///p").is_err());
    }

    #[test]
    fn app_switch_ipacl_descriptor_rules() {
        let mut t = T::new();
        t.put("apps/short", json!({"secret": "1234567"}))
            .put(
                "apps/bad-api",
                json!({"secret": "12345678", "apis": ["a b"]}),
            )
            .put(
                "apps/status",
                json!({"secret": "12345678", "status": "paused"}),
            )
            .put(
                "apps/ok",
                json!({"secret": "12345678", "status": "disabled", "apis": ["order.get"]}),
            )
            .put(
                "switches/bad",
                json!({"degraded": true, "fallback": {"status": 99}}),
            )
            .put(
                "switches/hdr",
                json!({"degraded": true, "fallback": {"headers": {"Bad Name": "x"}}}),
            )
            .put("switches/good", json!({"degraded": true}))
            .put("ipacl", json!({"deny": ["10.0.0.0/8", "300.1.1.1"]}))
            .bytes(&format!("descriptors/{}", "0".repeat(64)), b"x".to_vec())
            .bytes("descriptors/XYZ", b"x".to_vec());
        let junk = b"\xff\xff\xff".to_vec();
        t.bytes(&format!("descriptors/{}", sha(&junk)), junk);
        let s = t.build(None);
        assert!(reason(&s, "apps/short").starts_with("secret:"));
        assert!(reason(&s, "apps/bad-api").starts_with("apis[0]:"));
        assert!(reason(&s, "apps/status").starts_with("status:"));
        assert!(s.apps.contains_key("ok"));
        assert!(reason(&s, "switches/bad").starts_with("fallback.status:"));
        assert!(reason(&s, "switches/hdr").starts_with("fallback.headers:"));
        assert!(s.switches.contains_key("good"));
        assert_eq!(
            reason(&s, "ipacl"),
            "deny[1]: \"300.1.1.1\" is not a CIDR or IP address"
        );
        assert!(reason(&s, &format!("descriptors/{}", "0".repeat(64))).contains("SHA-256"));
        assert!(reason(&s, "descriptors/XYZ").starts_with("name:"));
        assert!(reason(&s, &format!("descriptors/{}", sha(b"\xff\xff\xff")))
            .contains("FileDescriptorSet"));
        assert_eq!(*s.ipacl, IpAclRules::default());
    }

    #[test]
    fn alert_rules_and_owners() {
        let mut t = T::new();
        let ok = json!({"api": "order.get", "condition": "tp99_ms_above", "threshold": 200,
            "for_s": 10, "severity": "page", "receivers": [{"webhook": "http://127.0.0.1:7000/hook"},
            {"email": "sre@example.com"}]});
        t.put("alerts/order-slow", ok)
            .put("alerts/any-breaker", json!({"condition": "breaker_open"}))
            .put(
                "alerts/cond",
                json!({"condition": "tp99_above", "threshold": 1}),
            )
            .put("alerts/no-threshold", json!({"condition": "qps_below"}))
            .put(
                "alerts/avail",
                json!({"condition": "availability_below", "threshold": 99.9}),
            )
            .put(
                "alerts/neg",
                json!({"condition": "qps_above", "threshold": -1}),
            )
            .put(
                "alerts/api",
                json!({"api": "a b", "condition": "qps_above", "threshold": 1}),
            )
            .put(
                "alerts/for",
                json!({"condition": "node_missing", "for_s": 100000}),
            )
            .put(
                "alerts/recv",
                json!({"condition": "node_missing", "receivers": [{}]}),
            )
            .put(
                "alerts/both",
                json!({"condition": "node_missing",
                "receivers": [{"webhook": "http://x/", "email": "a@b.c"}]}),
            )
            .put(
                "alerts/url",
                json!({"condition": "node_missing", "receivers": [{"webhook": "ftp://x/"}]}),
            )
            .put(
                "alerts/mail",
                json!({"condition": "node_missing", "receivers": [{"email": "nobody"}]}),
            )
            .put(
                "alerts/sev",
                json!({"condition": "node_missing", "severity": "very bad"}),
            );
        let mut owned = http_api("owned", "GET", "/owned");
        owned["owner"] = json!("team-orders@example.com");
        let mut badly = http_api("badly", "GET", "/badly");
        badly["owner"] = json!("Team <orders@example.com>");
        t.api(owned).api(badly);
        let s = t.build(None);
        assert!(s.accepted.contains_key("alerts/order-slow"));
        assert!(s.accepted.contains_key("alerts/any-breaker"));
        assert!(reason(&s, "alerts/cond").starts_with("condition: \"tp99_above\" is not one of"));
        assert_eq!(
            reason(&s, "alerts/no-threshold"),
            "threshold: required for qps_below (in requests per second)"
        );
        assert!(reason(&s, "alerts/avail").contains("fraction"));
        assert!(reason(&s, "alerts/neg").starts_with("threshold:"));
        assert!(reason(&s, "alerts/api").starts_with("api:"));
        assert!(reason(&s, "alerts/for").starts_with("for_s:"));
        assert!(reason(&s, "alerts/recv").starts_with("receivers[0]: set exactly one"));
        assert!(reason(&s, "alerts/both").starts_with("receivers[0]: set exactly one"));
        assert!(reason(&s, "alerts/url").starts_with("receivers[0].webhook:"));
        assert!(reason(&s, "alerts/mail").starts_with("receivers[0].email:"));
        assert!(reason(&s, "alerts/sev").starts_with("severity:"));
        assert_eq!(
            s.apis["owned"].definition.owner.as_deref(),
            Some("team-orders@example.com")
        );
        assert!(reason(&s, "apis/badly").starts_with("owner:"));
        // A rule may name an API that does not exist (yet, or any more).
        let rule = check_alert(
            "x",
            br#"{"api":"gone","condition":"qps_above","threshold":5}"#,
        );
        assert_eq!(rule.unwrap().for_s, 0);
        for good in ["a@b.co", "first.last+tag@mail.example.com"] {
            assert!(check_email(good).is_ok(), "{good}");
        }
        for bad in ["", "a@b", "@b.c", "a@.b", "a b@c.d", "a@b.c.", "<a@b.c>"] {
            assert!(check_email(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keeps_previous_good_version() {
        let mut t = T::new();
        t.api(grpc_api("order.get", "/v1/orders/{order_id}"))
            .put("apps/m1", json!({"secret": "s3cr3t-value"}))
            .put("switches/s1", json!({"degraded": true}))
            .put("ipacl", json!({"deny": ["10.0.0.0/8"]}));
        let s1 = t.build(None);
        assert!(s1.rejected.is_empty());

        let mut bad = grpc_api("order.get", "/v1/orders/{order_id}");
        bad["backend"]["timeout_ms"] = json!(0);
        t.api(bad)
            .put("apps/m1", json!({"secret": "short"}))
            .put("switches/s1", json!({"degraded": "yes"}))
            .put("switches/s2", json!({"degraded": true}))
            .put("ipacl", json!({"deny": ["nope"]}))
            .api(http_api("web.new", "GET", "/v1/new"));
        t.0.generation = 8;
        let s2 = t.build(Some(&s1));
        assert_eq!(s2.rejected.len(), 4, "{:?}", s2.rejected);
        assert!(s2.rejected.iter().all(|r| r.kept_previous));
        assert_eq!(s2.apis["order.get"].timeout_ms, 800);
        assert_eq!(s2.apps["m1"].secret, "s3cr3t-value");
        assert!(s2.switches["s1"].degraded && s2.switches["s2"].degraded);
        assert_eq!(s2.ipacl.deny.len(), 1);
        assert!(s2.apis.contains_key("web.new"));
        for p in ["apis/order.get", "apps/m1", "switches/s1", "ipacl"] {
            assert_eq!(s2.accepted[p], s1.accepted[p], "{p}");
        }
        assert_eq!(s2.version.generation, 8);

        // Kept versions carry on through a third build.
        let s3 = t.build(Some(&s2));
        assert_eq!(s3.apis["order.get"].timeout_ms, 800);
        assert_eq!(s3.version.digest, s2.version.digest);

        // The previous version no longer fits (its cluster is gone): dropped.
        t.0.docs.remove("clusters/order-svc");
        let s4 = t.build(Some(&s3));
        assert!(!s4.apis.contains_key("order.get"));
        let rej = s4
            .rejected
            .iter()
            .find(|r| r.path == "apis/order.get")
            .unwrap();
        assert!(!rej.kept_previous);
        assert!(!s4.accepted.contains_key("apis/order.get"));
    }

    #[test]
    fn previous_unchanged_but_now_inconsistent_is_dropped() {
        let mut t = T::new();
        t.api(http_api("web.get", "GET", "/v1/a"));
        let s1 = t.build(None);
        t.put(
            "clusters/web",
            json!({"protocol": "grpc", "endpoints": [{"addr": "h:1"}]}),
        );
        let s2 = t.build(Some(&s1));
        let rej = s2
            .rejected
            .iter()
            .find(|r| r.path == "apis/web.get")
            .unwrap();
        assert!(!rej.kept_previous);
        assert!(s2.apis.is_empty());
    }

    #[test]
    fn a_switch_message_is_one_short_line() {
        let doc = |m: &str| serde_json::to_vec(&json!({"degraded": true, "message": m})).unwrap();
        let (sw, _) = check_switch("order.get", &doc("back at 10:00")).unwrap();
        assert_eq!(sw.message.as_deref(), Some("back at 10:00"));
        for bad in ["a\nb".to_owned(), "x".repeat(201)] {
            let e = check_switch("order.get", &doc(&bad)).unwrap_err();
            assert!(e.starts_with("message:"), "{e}");
        }
    }

    #[test]
    fn grpc_client_settings_are_checked() {
        let doc = |grpc: serde_json::Value, protocol: &str| {
            serde_json::to_vec(
                &json!({"protocol": protocol, "endpoints": [{"addr": "h:1"}], "grpc": grpc}),
            )
            .unwrap()
        };
        let c = check_cluster(
            "svc",
            &doc(
                json!({"keepalive_ms": 300000, "keepalive_timeout_ms": 20000,
                       "compress_min_bytes": 1024, "connect_timeout_ms": 500}),
                "grpc",
            ),
        )
        .unwrap();
        let g = c.grpc.unwrap();
        assert_eq!(
            (g.keepalive_ms, g.compress_min_bytes, g.connect_timeout_ms),
            (Some(300_000), Some(1024), Some(500))
        );
        assert!(check_cluster("svc", &doc(json!({"keepalive_ms": 0}), "grpc")).is_ok());
        for (grpc, protocol, expect) in [
            (
                json!({"keepalive_ms": 30}),
                "grpc",
                "grpc.keepalive_ms: must be 0",
            ),
            (
                json!({"keepalive_timeout_ms": 10}),
                "grpc",
                "grpc.keepalive_timeout_ms:",
            ),
            (
                json!({"connect_timeout_ms": 0}),
                "grpc",
                "grpc.connect_timeout_ms:",
            ),
            (
                json!({"compress_min_bytes": 1u64 << 40}),
                "grpc",
                "grpc.compress_min_bytes:",
            ),
            (json!({"keepalive": 1}), "grpc", "unknown field `keepalive`"),
            (
                json!({}),
                "http",
                "grpc: gRPC client settings on a cluster whose protocol is not grpc",
            ),
        ] {
            let e = check_cluster("svc", &doc(grpc.clone(), protocol)).unwrap_err();
            assert!(e.contains(expect), "{grpc}: {e}");
        }
    }

    #[test]
    fn broken_cluster_keeps_previous_and_apis_stay() {
        let mut t = T::new();
        t.api(grpc_api("order.get", "/v1/orders/{order_id}"));
        let s1 = t.build(None);
        t.put(
            "clusters/order-svc",
            json!({"protocol": "grpc", "endpoints": []}),
        );
        let s2 = t.build(Some(&s1));
        assert_eq!(s2.rejected.len(), 1);
        assert!(s2.rejected[0].kept_previous);
        assert!(s2.apis.contains_key("order.get"));
        // Without a previous snapshot the API falls with its cluster.
        let s3 = t.build(None);
        assert_eq!(s3.rejected.len(), 2);
        assert!(s3.apis.is_empty());
    }

    #[test]
    fn deleted_documents_disappear() {
        let mut t = T::new();
        t.api(http_api("web.get", "GET", "/v1/a"));
        let s1 = t.build(None);
        t.0.docs.remove("apis/web.get");
        let s2 = t.build(Some(&s1));
        assert!(s2.apis.is_empty() && s2.rejected.is_empty());
    }

    #[test]
    fn digest_is_stable() {
        let d1 = config_digest([("a", b"1".as_slice()), ("b", b"2".as_slice())]);
        let d2 = config_digest([("a", b"12".as_slice()), ("b", b"".as_slice())]);
        assert_eq!(d1.len(), 16);
        assert_ne!(d1, d2);
        assert_eq!(config_digest([]), "e3b0c44298fc1c14");
    }

    /// Issue #8: the rewrite that panicked the control thread is now an ordinary rejection,
    /// and the switch beside it applies.
    #[test]
    fn non_ascii_rewrite_is_rejected_alone() {
        let mut t = T::new();
        let mut v = http_api("web.get", "GET", "/v1/items/{id}");
        v["backend"]["http"]["path"] = json!("/x/%€{id}");
        t.api(v)
            .api(http_api("web.list", "GET", "/v1/items"))
            .put("switches/web.list", json!({"degraded": false}));
        let s = t.build(None);
        assert_eq!(s.rejected.len(), 1, "{:?}", s.rejected);
        let r = reason(&s, "apis/web.get");
        assert!(
            r.starts_with("backend.http.path: at byte 3: invalid percent-encoding"),
            "{r}"
        );
        assert!(s.apis.contains_key("web.list") && s.switches.contains_key("web.list"));
    }

    #[test]
    fn a_reason_quoting_the_internal_error_text_is_not_an_internal_error() {
        // Found by the `snapshot` fuzz target: a reason starts with the document's own key,
        // so the text cannot tell a bug from a bad document; `internal` can.
        let mut t = T::new();
        t.put(
            "clusters/c",
            json!({ format!("{INTERNAL_ERROR_REASON} x"): {"a": 1}, "protocol": "http" }),
        );
        let s = t.build(None);
        assert!(!s.rejected.is_empty());
        assert!(s.rejected.iter().all(|r| !r.internal), "{:?}", s.rejected);
    }

    #[test]
    fn a_panicking_check_rejects_its_document_alone() {
        let mut t = T::new();
        t.put("switches/a", json!({"degraded": true}));
        let s1 = t.build(None);
        let mut b = Builder {
            snap: Snapshot::default(),
            previous: Some(&s1),
            pools: HashMap::new(),
            routes: HashMap::new(),
        };
        // A check that panics on the new bytes only: the previous version is kept.
        let panics_on_new = |_: &Builder<'_>, raw: &[u8]| -> Result<(), String> {
            assert!(raw != b"new", "a bug in a parser");
            Ok(())
        };
        assert!(b
            .consider("switches/a", Ok(b"new"), panics_on_new)
            .is_some());
        let r = &b.snap.rejected[0];
        assert!(
            r.reason.starts_with(INTERNAL_ERROR_REASON) && r.internal,
            "{r:?}"
        );
        assert!(r.reason.contains("a bug in a parser"), "{r:?}");
        assert!(r.kept_previous);
        assert_eq!(b.snap.accepted["switches/a"], s1.accepted["switches/a"]);
        // One that always panics: no fallback, nothing accepted, the builder goes on.
        let always = |_: &Builder<'_>, _: &[u8]| -> Result<(), String> { panic!("boom") };
        assert!(b.consider("switches/b", Ok(b"x"), always).is_none());
        assert_eq!(b.snap.rejected.len(), 2);
        assert!(b
            .consider("switches/c", Ok(b"{}"), |_, raw| check_switch("c", raw))
            .is_some());
        assert_eq!(b.snap.rejected.len(), 2);
    }

    #[test]
    fn unreadable_documents_are_rejected_alone_keeping_the_previous() {
        let mut t = T::new();
        t.api(http_api("web.get", "GET", "/v1/a"))
            .put("switches/web.get", json!({"degraded": true}));
        let s1 = t.build(None);
        t.0.docs.remove("switches/web.get");
        t.0.insert_unreadable("switches/web.get", "permission denied");
        t.0.insert_unreadable("apps/m1", "not a regular file");
        t.put("switches/other", json!({"degraded": true}));
        let s2 = t.build(Some(&s1));
        assert_eq!(s2.rejected.len(), 2, "{:?}", s2.rejected);
        let r = s2
            .rejected
            .iter()
            .find(|r| r.path == "switches/web.get")
            .unwrap();
        assert_eq!(r.reason, "cannot be read: permission denied");
        assert!(r.kept_previous);
        assert!(s2.switches["web.get"].degraded);
        assert!(s2.switches.contains_key("other"));
        assert_eq!(reason(&s2, "apps/m1"), "cannot be read: not a regular file");
        // Without a previous snapshot the document is simply absent.
        let s3 = t.build(None);
        assert!(!s3.switches.contains_key("web.get"));
        assert_eq!(s3.rejected.len(), 2);
    }

    #[test]
    fn an_unlistable_folder_keeps_what_it_held() {
        let mut t = T::new();
        t.api(http_api("web.get", "GET", "/v1/a"))
            .api(http_api("web.put", "PUT", "/v1/a"));
        let s1 = t.build(None);
        // The apis folder cannot be listed any more; one API was still read.
        t.0.docs.remove("apis/web.get");
        t.0.insert_unreadable("apis", "cannot list the folder: too many symbolic links");
        let s2 = t.build(Some(&s1));
        assert!(s2.apis.contains_key("web.get") && s2.apis.contains_key("web.put"));
        assert_eq!(s2.rejected.len(), 1, "{:?}", s2.rejected);
        assert_eq!(s2.rejected[0].path, "apis");
        assert!(s2.rejected[0].kept_previous);
        assert_eq!(
            s2.accepted.keys().collect::<Vec<_>>(),
            s1.accepted.keys().collect::<Vec<_>>()
        );
        // Still consistent only: without its cluster the kept API goes.
        t.0.docs.remove("clusters/web");
        let s3 = t.build(Some(&s2));
        assert!(s3.apis.is_empty());
        let s4 = t.build(None);
        assert!(!s4.apis.contains_key("web.get"));
        assert!(
            !s4.rejected
                .iter()
                .find(|r| r.path == "apis")
                .unwrap()
                .kept_previous
        );
    }

    #[test]
    fn oversized_documents_are_not_parsed() {
        let mut t = T::new();
        let mut big = b"{\"degraded\": true, \"reason\": \"".to_vec();
        big.resize(MAX_DOCUMENT_BYTES + 1, b'x');
        big.extend_from_slice(b"\"}");
        t.bytes("switches/big", big);
        let s = t.build(None);
        assert!(
            reason(&s, "switches/big").starts_with("document: "),
            "{:?}",
            s.rejected
        );
    }

    #[test]
    fn limits_and_duplicates_stay_linear() {
        // Duplicate endpoints far apart are still found (by a map, not a scan).
        let mut endpoints: Vec<serde_json::Value> = (1..=20_000)
            .map(|p| json!({"addr": format!("h:{p}")}))
            .collect();
        endpoints.push(json!({"addr": "h:7"}));
        let s = T::new()
            .put(
                "clusters/many",
                json!({"protocol": "http", "endpoints": endpoints}),
            )
            .build(None);
        assert_eq!(
            reason(&s, "clusters/many"),
            "endpoints[20000].addr: \"h:7\" repeats endpoints[6]"
        );
        let r = api_reason(|v| {
            v["http"]["additional_bindings"] = json!(vec![
                json!({"method": "GET", "path": "/v9"});
                MAX_ADDITIONAL_BINDINGS + 1
            ])
        });
        assert!(r.starts_with("http.additional_bindings: at most"), "{r}");
        let r = api_reason(
            |v| v["policy"] = json!({"rate_limits": [{"key": ["header:A", "ip", "header:a"], "limit": 1, "per": "second"}]}),
        );
        assert!(r.contains("appears twice"), "{r}");
    }

    #[test]
    fn reasons_stay_short() {
        let long = "x".repeat(100_000);
        let r = api_reason(|v| v["http"]["path"] = json!(format!("/{long}")));
        assert!(r.len() < 200, "{r}");
        let r = api_reason(|v| v["backend"]["cluster"] = json!(long));
        assert!(r.len() < 200, "{r}");
        // serde quotes a whole bad value: the reason is cut.
        let s = T::new()
            .put("clusters/c", json!({"protocol": long, "endpoints": []}))
            .build(None);
        let r = reason(&s, "clusters/c");
        assert!(
            r.starts_with("protocol:") && r.chars().count() <= MAX_REASON_CHARS + 3,
            "{r}"
        );
        assert!(bounded("é".repeat(1000)).ends_with("..."));
        assert_eq!(excerpt("ab"), "ab");
    }

    #[test]
    fn parse_net_forms() {
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("::1").unwrap().to_string(), "::1/128");
        assert!(parse_net("10.0.0.0/33").is_none());
        assert!(parse_net("").is_none());
    }

    // Hot APIs: key-level switches and cache/hot-key policies.

    #[test]
    fn key_level_switches() {
        let mut t = T::new();
        t.put(
            "switches/order.get@sku-BK-1",
            json!({"degraded": true, "match": {"path:sku": ["BK-1"]}, "fallback": {"status": 200, "body": {"stock": 0}}}),
        )
        .put(
            "switches/order.get@north-cm",
            json!({"degraded": true, "match": {"header:X-Region": ["north"], "header:X-Carrier": ["cm"]}}),
        )
        .put("switches/order.get", json!({"degraded": false}))
        .put("switches/a@nomatch", json!({"degraded": true}))
        .put("switches/a@off", json!({"degraded": false}))
        .put("switches/a@bad", json!({"degraded": true, "match": {"cookie:x": ["1"]}}))
        .put("switches/a@empty", json!({"degraded": true, "match": {"app": []}}))
        .put("switches/a@b@c", json!({"degraded": true, "match": {"app": ["m1"]}}))
        .put("switches/a@", json!({"degraded": true, "match": {"app": ["m1"]}}))
        .put("switches/wide", json!({"degraded": true, "match": {"app": ["m1"]}}));
        let s = t.build(None);
        let keyed = &s.key_switches["order.get"];
        assert_eq!(keyed.len(), 2);
        let bk = keyed.iter().find(|k| k.label == "sku-BK-1").unwrap();
        assert_eq!(
            bk.matches,
            vec![(Selector::Path("sku".into()), vec!["BK-1".to_owned()])]
        );
        let rc = keyed.iter().find(|k| k.label == "north-cm").unwrap();
        assert_eq!(rc.matches.len(), 2);
        assert!(rc.matches.contains(&(
            Selector::Header("x-region".into()),
            vec!["north".to_owned()]
        )));
        assert!(s.switches.contains_key("order.get@sku-BK-1"));
        assert!(!s.switches["order.get"].degraded);
        assert!(reason(&s, "switches/a@nomatch").starts_with("match: must list 1"));
        assert!(reason(&s, "switches/a@bad").starts_with("match: "));
        assert!(reason(&s, "switches/a@empty").starts_with("match.app: "));
        assert!(reason(&s, "switches/a@b@c").starts_with("name: label"));
        assert!(reason(&s, "switches/a@").starts_with("name: label"));
        assert!(reason(&s, "switches/wide").starts_with("match: only a key-level switch"));
        assert!(!s.key_switches.contains_key("a"));
        assert!(s.switches.contains_key("a@off"));
    }

    #[test]
    fn cache_and_hot_key_policies() {
        let mut v = http_api("sku.get", "GET", "/v1/skus/{sku}");
        v["policy"] = json!({
            "cache": {"ttl_ms": 2000, "key": ["path:sku", "query:region"], "max_entries": 100},
            "hot_keys": {"key": ["path:sku"], "rate_above": 50, "link_bytes_per_s": 1000000}
        });
        let mut plain = http_api("plain.get", "GET", "/v1/plain");
        plain["policy"] = json!({});
        let s = T::new().api(v).api(plain).build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
        let hot = &s.hot["sku.get"];
        let cache = hot.cache.as_ref().unwrap();
        assert_eq!(cache.ttl_ms, 2000);
        assert_eq!(cache.max_entries, 100);
        assert_eq!(cache.max_body_bytes, DEFAULT_CACHE_BODY_BYTES as usize);
        assert_eq!(cache.key.len(), 2);
        let hk = hot.hot_keys.as_ref().unwrap();
        assert_eq!((hk.rate_above, hk.bandwidth_share_above), (50.0, 0.7));
        // Hot keys cache themselves only on an API that opts in twice (issue 24).
        assert_eq!((hk.auto_cache_ms, hk.top), (0, 20));
        assert!(!s.hot.contains_key("plain.get"));
        let opted = |policy: serde_json::Value| {
            let mut a = http_api("a.get", "GET", "/v1/a/{sku}");
            a["policy"] = policy;
            let s = T::new().api(a).build(None);
            assert!(s.rejected.is_empty(), "{:?}", s.rejected);
            s.hot["a.get"].hot_keys.as_ref().unwrap().auto_cache_ms
        };
        let hot = json!({"key": ["path:sku"], "auto_cache_ms": 1500});
        assert_eq!(opted(json!({"hot_keys": hot, "read_only": true})), 1500);
        assert_eq!(opted(json!({"hot_keys": hot})), 0);
        assert_eq!(
            opted(json!({"hot_keys": {"key": ["path:sku"]}, "read_only": true})),
            0
        );
        // The cache's own options: shared, and the query parameters that count (sorted).
        let mut c = http_api("c.get", "GET", "/v1/c");
        c["policy"] = json!({"cache": {"ttl_ms": 5, "shared": true, "query": ["z", "a"]}});
        let s = T::new().api(c).build(None);
        let cache = s.hot["c.get"].cache.as_ref().unwrap();
        assert!(cache.shared);
        assert_eq!(
            cache.query.as_deref(),
            Some(&["a".to_owned(), "z".to_owned()][..])
        );

        for (policy, field) in [
            (
                json!({"cache": {"ttl_ms": 1, "query": ["a", "a"]}}),
                "policy.cache.query[1]:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "query": [""]}}),
                "policy.cache.query[0]:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "key": ["bogus"]}}),
                "policy.cache.key[0]:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "max_entries": 0}}),
                "policy.cache.max_entries:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "max_body_bytes": 0}}),
                "policy.cache.max_body_bytes:",
            ),
            (
                json!({"cache": {"ttl_ms": 90000000}}),
                "policy.cache.ttl_ms:",
            ),
            (json!({"hot_keys": {"key": []}}), "policy.hot_keys.key:"),
            (
                json!({"hot_keys": {"key": ["app"], "rate_above": 0}}),
                "policy.hot_keys.rate_above:",
            ),
            (
                json!({"hot_keys": {"key": ["app"], "bandwidth_share_above": 1.5}}),
                "policy.hot_keys.bandwidth_share_above:",
            ),
            (
                json!({"hot_keys": {"key": ["app"], "top": 0}}),
                "policy.hot_keys.top:",
            ),
            (
                json!({"hot_keys": {"key": ["app"], "link_bytes_per_s": 0}}),
                "policy.hot_keys.link_bytes_per_s:",
            ),
        ] {
            let r = api_reason(|v| v["policy"] = policy.clone());
            assert!(r.starts_with(field), "{policy}: {r}");
        }
    }
}
