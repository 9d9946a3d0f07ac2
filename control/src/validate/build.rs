//! The snapshot builder: a raw [`Tree`] into one immutable [`Snapshot`], each document
//! checked on its own by the check of its kind (the sibling modules), in dependency order,
//! a refused document replaced by its last good version when that still fits
//! (docs/operations/config-tree.md, "The configuration tree", "Validation").

use super::api::{route_key, Accepted, RouteKey};
use super::policy::hot_policy;
use super::{alert, app, cluster, descriptor, ipacl, switch, topic};
use crate::snapshot::{ConfigVersion, KeySwitch, Rejection, Snapshot};
use crate::tree::{DocKind, Tree, MAX_DOCUMENT_BYTES};
use prost_reflect::DescriptorPool;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

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
        if let Some((pool, kept)) = b.consider(path, bytes, |_, raw| {
            descriptor::check_descriptor(name, raw)
        }) {
            b.pools.insert(name.to_owned(), pool);
            b.snap.descriptors.insert(name.to_owned(), kept);
        }
    }
    for (path, name, bytes) in docs(DocKind::Cluster) {
        if let Some((c, _)) = b.consider(path, bytes, |_, raw| cluster::check_cluster(name, raw)) {
            b.snap.clusters.insert(name.to_owned(), Arc::new(c));
        }
    }
    for (path, _, bytes) in docs(DocKind::IpAcl) {
        if let Some((acl, _)) = b.consider(path, bytes, |_, raw| ipacl::check_ipacl(raw)) {
            b.snap.ipacl = Arc::new(acl);
        }
    }
    for (path, name, bytes) in docs(DocKind::App) {
        if let Some((app, _)) = b.consider(path, bytes, |_, raw| app::check_app(name, raw)) {
            b.snap.apps.insert(name.to_owned(), Arc::new(app));
        }
    }
    for (path, name, bytes) in docs(DocKind::Topic) {
        if let Some((topic, _)) = b.consider(path, bytes, |_, raw| topic::check_topic(name, raw)) {
            b.snap.topics.insert(name.to_owned(), Arc::new(topic));
        }
    }
    for (path, name, bytes) in docs(DocKind::Switch) {
        if let Some(((sw, key), _)) =
            b.consider(path, bytes, |_, raw| switch::check_switch(name, raw))
        {
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
        let _ = b.consider(path, bytes, |_, raw| alert::check_alert(name, raw));
    }
    for (path, name, bytes) in docs(DocKind::Api) {
        if let Some((api, _)) = b.consider(path, bytes, |b, raw| b.accepted().check_api(name, raw))
        {
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

    /// What an API's check needs of the documents accepted so far.
    fn accepted(&self) -> Accepted<'_> {
        Accepted {
            clusters: &self.snap.clusters,
            pools: &self.pools,
            routes: &self.routes,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::BackendKind;
    use crate::validate::fields::excerpt;
    use crate::validate::test_support::*;
    use serde_json::json;

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
            .consider("switches/c", Ok(b"{}"), |_, raw| switch::check_switch(
                "c", raw
            ))
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
}
