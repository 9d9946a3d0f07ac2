//! The `route` stage: which API (and which of its bindings) a request is for.
//!
//! 0. Limits, checked before anything else looks at the target (docs/SECURITY.md, "Bounded
//!    work before authentication"): a request target (path and query) over
//!    [`MAX_TARGET_BYTES`] is 414 `URI_TOO_LONG`; more than [`MAX_PATH_SEGMENTS`] path
//!    segments or [`MAX_QUERY_PARAMS`] query parameters is 400 `BAD_REQUEST`; so is, for an
//!    API backed by gRPC (whose query parameters name fields), a parameter name with more than
//!    [`MAX_FIELD_PATH_DEPTH`] dot-separated parts.
//! 1. The path is checked first: it must start with `/`, have no empty segment (`//`, a
//!    trailing `/`), valid percent-encoding that decodes to UTF-8, and no `.` or `..`
//!    segment, raw or percent-encoded (`%2e`, `%2E%2e`, `..;x`, or hidden behind an encoded
//!    `%2F` / `\`): 400 `BAD_REQUEST`. Dot segments are never resolved into another route.
//! 2. `POST /router?method=<api_id>` is the open-platform router style: that API, no binding,
//!    no path variables. A missing `method` is 400; an unknown id is 404 `API_NOT_FOUND`.
//!    Another method on `/router` is matched like any path (an API may bind `GET /router`;
//!    only `POST /router` is reserved by validation), and is 404 when nothing binds it.
//! 3. Otherwise method and path are matched against every binding through a per-method
//!    segment trie (literal children in a hash map, plus `*` and `**` branches), so the cost
//!    grows with the path's length, not with the number of APIs. When several templates
//!    match, the most specific wins: segment by segment from the left, a literal beats `*`,
//!    which beats `**`; a template with a custom verb beats one without.
//!
//! Custom verbs follow grpc-gateway: the last segment is split at a `:` only when what
//! follows is a verb some template of that method uses (`/v1/{name}:cancel` matches
//! `/v1/abc:cancel` with `name=abc`); otherwise the `:` is part of the segment. An encoded
//! single-segment variable of an API backed by HTTP may not hold an encoded `/` (`%2F`): 400
//! `BAD_REQUEST`, with or without a rewrite (the backend would see another path).
//!
//! Cost: every step is linear in the length of the target, with small constants, whatever
//! it holds. Each segment is percent-decoded once; a custom verb is looked for only among the
//! `:`s whose (decoded) suffix is no longer than the longest verb the method's templates use,
//! and the stem and the verb are slices of the decoded segment, never decoded again.
//!
//! The method must match exactly (`HEAD` does not fall back to `GET`). An unknown path is
//! 404 `API_NOT_FOUND` ("no API for GET /x"); a known path with another method is also 404
//! `API_NOT_FOUND` (the contract has no 405), its message naming the methods the path takes.

use crate::edge::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use crate::model::{notify_api, RouteMatch, NOTIFY_ENDPOINTS};
use portico_control::template::{decode_segment, is_valid_percent_encoding, Segment};
use portico_control::{Api, BackendKind, Snapshot};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// The router-style endpoint.
pub const ROUTER_PATH: &str = "/router";

/// Longest request target (path and query, as on the request line) routed: 414
/// `URI_TOO_LONG` beyond.
pub const MAX_TARGET_BYTES: usize = 8 * 1024;
/// Most path segments routed: 400 `BAD_REQUEST` beyond.
pub const MAX_PATH_SEGMENTS: usize = 128;
/// Most query parameters (non-empty `&`-separated parts) accepted: 400 `BAD_REQUEST` beyond.
pub const MAX_QUERY_PARAMS: usize = 256;
/// Most dot-separated parts of a query parameter name (a field path) for an API backed by
/// gRPC: 400 `BAD_REQUEST` beyond.
pub const MAX_FIELD_PATH_DEPTH: usize = 16;

/// Longest path echoed back in an error message.
const MAX_ECHO: usize = 200;

/// One template ending at a trie node.
#[derive(Debug)]
struct Terminal {
    verb: Option<String>,
    api: Arc<Api>,
    binding: usize,
}

#[derive(Debug, Default)]
struct Node {
    /// Literal segments (percent-decoded) → the node after them.
    literal: HashMap<String, Node>,
    /// The node after a `*` segment.
    single: Option<Box<Node>>,
    /// Templates ending at this node.
    ends: Vec<Terminal>,
    /// Templates whose final `**` starts at this node (it matches zero or more segments).
    rest: Vec<Terminal>,
}

/// The bindings of one HTTP method.
#[derive(Debug, Default)]
struct Table {
    root: Node,
    /// The custom verbs (decoded) its templates use.
    verbs: HashSet<String>,
    /// The longest of `verbs`, in bytes.
    max_verb: usize,
}

impl Table {
    fn insert(&mut self, api: &Arc<Api>, binding: usize) {
        let Some(b) = api.bindings.get(binding) else {
            return;
        };
        let mut node = &mut self.root;
        let verb = b.template.verb().map(str::to_owned);
        if let Some(v) = &verb {
            self.max_verb = self.max_verb.max(v.len());
            self.verbs.insert(v.clone());
        }
        let term = Terminal {
            verb,
            api: api.clone(),
            binding,
        };
        for seg in b.template.segments() {
            match seg {
                Segment::Literal(l) => node = node.literal.entry(l.clone()).or_default(),
                Segment::Single => node = node.single.get_or_insert_with(Box::default),
                Segment::Multi => {
                    node.rest.push(term);
                    return;
                }
            }
        }
        node.ends.push(term);
    }

    /// The most specific template matching `segs` (decoded) with `verb`.
    fn find<'a>(node: &'a Node, segs: &[&str], verb: Option<&str>) -> Option<&'a Terminal> {
        match segs.split_first() {
            None => {
                if let Some(t) = node.ends.iter().find(|t| t.verb.as_deref() == verb) {
                    return Some(t);
                }
            }
            Some((first, tail)) => {
                if let Some(child) = node.literal.get(*first) {
                    if let Some(t) = Self::find(child, tail, verb) {
                        return Some(t);
                    }
                }
                if let Some(child) = &node.single {
                    if let Some(t) = Self::find(child, tail, verb) {
                        return Some(t);
                    }
                }
            }
        }
        node.rest.iter().find(|t| t.verb.as_deref() == verb)
    }

    /// Matches a checked path: tries each split of a custom verb this table knows off the
    /// last segment (longest verb first), then the path as it is. Returns the terminal and the
    /// raw segments and raw verb it matched with. Linear in the path's length (see the module
    /// docs): only the `:`s of [`verb_splits`] are tried, and nothing is decoded again.
    fn lookup<'a, 'p>(
        &'a self,
        path: &CheckedPath<'p>,
    ) -> Option<(&'a Terminal, Vec<&'p str>, Option<&'p str>)> {
        let mut segs: Vec<&str> = path.decoded.iter().map(String::as_str).collect();
        if let (Some(&last_raw), Some(last)) = (path.raw.last(), path.decoded.last()) {
            if !self.verbs.is_empty() {
                let at = segs.len() - 1;
                for (p, k) in verb_splits(last_raw, last, self.max_verb) {
                    let verb = &last[k + 1..];
                    if !self.verbs.contains(verb) {
                        continue;
                    }
                    segs[at] = &last[..k];
                    if let Some(t) = Self::find(&self.root, &segs, Some(verb)) {
                        let mut raw = path.raw.clone();
                        raw[at] = &last_raw[..p];
                        return Some((t, raw, Some(&last_raw[p + 1..])));
                    }
                }
                segs[at] = last;
            }
        }
        Self::find(&self.root, &segs, None).map(|t| (t, path.raw.clone(), None))
    }
}

/// Where the raw last segment `raw` (decoding to `decoded`) may be split into a stem and a
/// custom verb of at most `max_verb` decoded bytes: each unencoded `:` after the first byte,
/// as (its index in `raw`, its index in `decoded`), leftmost (longest verb) first. One pass
/// over `raw`; at most `max_verb + 1` splits. `raw` has passed [`check_path`], so every `%`
/// starts a valid escape and a `:` in `raw` is a `:` of `decoded` (the stem and the verb are
/// then `decoded[..k]` and `decoded[k + 1..]`, both on character boundaries).
fn verb_splits(raw: &str, decoded: &str, max_verb: usize) -> Vec<(usize, usize)> {
    // A split at decoded index k leaves a verb of decoded.len() - k - 1 bytes.
    let from = decoded.len().saturating_sub(max_verb + 1);
    let bytes = raw.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut k) = (0, 0);
    while i < bytes.len() {
        if bytes[i] == b'%' {
            i += 3;
        } else {
            if bytes[i] == b':' && i > 0 && k >= from {
                out.push((i, k));
            }
            i += 1;
        }
        k += 1;
    }
    out
}

/// A path that passed the checks: its raw segments and their decoded forms.
#[derive(Debug)]
struct CheckedPath<'p> {
    raw: Vec<&'p str>,
    decoded: Vec<String>,
}

/// Refuses what must never be routed (see the module documentation) and splits the rest.
fn check_path(path: &str) -> Result<CheckedPath<'_>, GatewayError> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(GatewayError::bad_request("the path must start with '/'"));
    };
    let mut out = CheckedPath {
        raw: Vec::new(),
        decoded: Vec::new(),
    };
    if rest.is_empty() {
        return Ok(out);
    }
    for seg in rest.split('/') {
        if out.raw.len() == MAX_PATH_SEGMENTS {
            return Err(GatewayError::bad_request(format!(
                "the path has more than {MAX_PATH_SEGMENTS} segments"
            )));
        }
        if seg.is_empty() {
            return Err(GatewayError::bad_request(
                "empty path segment ('//' or a trailing '/')",
            ));
        }
        if !is_valid_percent_encoding(seg) {
            return Err(GatewayError::bad_request(
                "invalid percent-encoding in the path",
            ));
        }
        let Some(decoded) = decode_segment(seg) else {
            return Err(GatewayError::bad_request(
                "the path is not UTF-8 once percent-decoded",
            ));
        };
        let dotty = decoded.split(['/', '\\']).any(|part| {
            let part = part.split(';').next().unwrap_or(part);
            part == "." || part == ".."
        });
        if dotty {
            return Err(GatewayError::bad_request(
                "'.' and '..' path segments are not allowed",
            ));
        }
        out.raw.push(seg);
        out.decoded.push(decoded);
    }
    Ok(out)
}

/// Refuses a request target longer than [`MAX_TARGET_BYTES`] (414) and a query with more than
/// [`MAX_QUERY_PARAMS`] parameters (400). One pass over the query, no allocation.
fn check_target(path: &str, query: Option<&str>) -> Result<(), GatewayError> {
    let len = path.len() + query.map_or(0, |q| q.len() + 1);
    if len > MAX_TARGET_BYTES {
        return Err(GatewayError::new(
            Code::UriTooLong,
            format!("the request target is longer than {MAX_TARGET_BYTES} bytes"),
        ));
    }
    let params = query.map_or(0, |q| q.split('&').filter(|p| !p.is_empty()).count());
    if params > MAX_QUERY_PARAMS {
        return Err(GatewayError::bad_request(format!(
            "more than {MAX_QUERY_PARAMS} query parameters"
        )));
    }
    Ok(())
}

/// Refuses a query parameter whose name is a field path deeper than [`MAX_FIELD_PATH_DEPTH`]
/// (dots, raw or encoded as `%2E`, before any `[` of a map key): 400 `BAD_REQUEST`. One pass
/// over the query, no allocation.
fn check_field_paths(query: Option<&str>) -> Result<(), GatewayError> {
    for part in query.unwrap_or("").split('&') {
        let name = part.split('=').next().unwrap_or(part);
        let name = name.split('[').next().unwrap_or(name);
        let dots =
            name.matches('.').count() + name.matches("%2E").count() + name.matches("%2e").count();
        if dots >= MAX_FIELD_PATH_DEPTH {
            return Err(GatewayError::bad_request(format!(
                "query parameter names are field paths of at most {MAX_FIELD_PATH_DEPTH} parts"
            )));
        }
    }
    Ok(())
}

fn echo(path: &str) -> &str {
    if path.len() <= MAX_ECHO {
        return path;
    }
    let mut end = MAX_ECHO;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    &path[..end]
}

/// The route stage: all bindings of a snapshot, indexed by method and path segments.
#[derive(Debug, Default)]
pub struct RouteStage {
    by_method: HashMap<String, Table>,
    /// Bindings with method `*` (any method), tried after the exact method.
    any_method: Table,
    apis: BTreeMap<String, Arc<Api>>,
    /// The notification endpoints (`model::NOTIFY_ENDPOINTS`): method, path, API.
    notify: Vec<(&'static str, &'static str, Arc<Api>)>,
}

impl RouteStage {
    /// Indexes every binding of every API in `snapshot` (APIs in id order; validation has
    /// already refused two APIs binding the same method and path shape).
    fn index(snapshot: &Snapshot) -> Self {
        let notify = NOTIFY_ENDPOINTS
            .into_iter()
            .filter_map(|e| notify_api(e).map(|api| (e.0, e.1, Arc::new(api))))
            .collect();
        let mut stage = RouteStage {
            apis: snapshot.apis.clone(),
            notify,
            ..RouteStage::default()
        };
        for api in snapshot.apis.values() {
            for (i, b) in api.bindings.iter().enumerate() {
                let table = if b.method == "*" {
                    &mut stage.any_method
                } else {
                    stage
                        .by_method
                        .entry(b.method.to_ascii_uppercase())
                        .or_default()
                };
                table.insert(api, i);
            }
        }
        stage
    }

    /// Routes one request: `method` upper-case as sent, `path` without the query, `query`
    /// the raw query. `Err` is 400 `BAD_REQUEST`, 404 `API_NOT_FOUND` or 414 `URI_TOO_LONG`.
    pub fn route(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
    ) -> Result<RouteMatch, GatewayError> {
        check_target(path, query)?;
        let checked = check_path(path)?;
        if path == ROUTER_PATH && method == "POST" {
            return self.router_style(query);
        }
        if let Some((_, _, api)) = self
            .notify
            .iter()
            .find(|(m, p, _)| *p == path && *m == method)
        {
            return Ok(RouteMatch {
                api: Arc::clone(api),
                binding: None,
                vars: Vec::new(),
                router_style: false,
            });
        }
        if let Some(m) = self.match_method(method, &checked)? {
            if matches!(m.api.backend, BackendKind::Grpc { .. }) {
                check_field_paths(query)?;
            }
            return Ok(m);
        }
        let mut allowed: Vec<&str> = self
            .by_method
            .iter()
            .filter(|(m, t)| m.as_str() != method && t.lookup(&checked).is_some())
            .map(|(m, _)| m.as_str())
            .collect();
        allowed.sort_unstable();
        let mut msg = format!("no API for {method} {}", echo(path));
        if !allowed.is_empty() {
            msg.push_str(&format!(" (this path takes {})", allowed.join(", ")));
        } else if path == ROUTER_PATH {
            msg.push_str(" (the router style is POST /router?method=<api_id>)");
        }
        Err(GatewayError::new(Code::ApiNotFound, msg))
    }

    fn match_method(
        &self,
        method: &str,
        checked: &CheckedPath<'_>,
    ) -> Result<Option<RouteMatch>, GatewayError> {
        let hit = self
            .by_method
            .get(method)
            .and_then(|t| t.lookup(checked))
            .or_else(|| self.any_method.lookup(checked));
        let Some((t, raw, verb)) = hit else {
            return Ok(None);
        };
        let template = t.api.bindings.get(t.binding).map(|b| &b.template);
        let Some((tpl, vars)) =
            template.and_then(|tpl| Some((tpl, tpl.match_segments(&raw, verb)?)))
        else {
            return Err(GatewayError::bad_request("bad path variable"));
        };
        // An HTTP backend would see an encoded slash inside a single-segment variable as a
        // segment separator: a rewrite path re-encodes the values keeping `/`, and without a
        // rewrite the path goes as sent, `%2F` and all, to a backend that may well decode it.
        if matches!(&t.api.backend, BackendKind::Http { .. }) {
            let slashed = vars
                .iter()
                .find(|(k, v)| v.contains('/') && tpl.variable(k).is_some_and(|var| !var.multi));
            if let Some((k, _)) = slashed {
                return Err(GatewayError::bad_request(format!(
                    "bad path variable {k}: an encoded '/' is not allowed"
                )));
            }
        }
        Ok(Some(RouteMatch {
            api: t.api.clone(),
            binding: Some(t.binding),
            vars,
            router_style: false,
        }))
    }

    /// `POST /router?method=<api_id>`.
    fn router_style(&self, query: Option<&str>) -> Result<RouteMatch, GatewayError> {
        let mut id: Option<String> = None;
        for part in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            if decode_segment(name).as_deref() != Some("method") {
                continue;
            }
            if id.is_some() {
                return Err(GatewayError::bad_request(
                    "query parameter method is given more than once",
                ));
            }
            let Some(v) = decode_segment(value) else {
                return Err(GatewayError::bad_request(
                    "query parameter method: invalid percent-encoding",
                ));
            };
            id = Some(v);
        }
        let Some(id) = id.filter(|i| !i.is_empty()) else {
            return Err(GatewayError::bad_request(
                "the router style needs POST /router?method=<api_id>",
            ));
        };
        match self.apis.get(&id) {
            Some(api) => Ok(RouteMatch {
                api: api.clone(),
                binding: None,
                vars: Vec::new(),
                router_style: true,
            }),
            None => Err(GatewayError::new(
                Code::ApiNotFound,
                format!("no API with id {:?}", echo(&id)),
            )),
        }
    }
}

impl Stage for RouteStage {
    /// Reload phase: indexes every binding of the snapshot into per-method tries. Carries
    /// nothing.
    fn build(snapshot: &Snapshot, _carried: &Carried) -> Self {
        RouteStage::index(snapshot)
    }

    fn name(&self) -> &'static str {
        "route"
    }

    /// Request phase, after `ip_acl` and before the body is read. `Continue`: `ctx.route` is
    /// set (API, binding, decoded path variables). `Respond`: 400 `BAD_REQUEST` (a refused
    /// path, a bad router-style query) or 404 `API_NOT_FOUND`.
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow {
        match self.route(req.method, req.path, req.query) {
            Ok(m) => {
                ctx.route = Some(m);
                Flow::Continue
            }
            Err(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portico_control::template::PathTemplate;
    use portico_control::v1;
    use portico_control::Binding;

    fn api(id: &str, bindings: &[(&str, &str)]) -> Arc<Api> {
        let bindings: Vec<Binding> = bindings
            .iter()
            .map(|(m, p)| Binding {
                method: m.to_string(),
                template: PathTemplate::parse(p).unwrap(),
                body: None,
                response_body: None,
            })
            .collect();
        let (m0, p0) = bindings
            .first()
            .map(|b| (b.method.clone(), b.template.raw.clone()))
            .unwrap_or_default();
        Arc::new(Api {
            id: id.to_owned(),
            version: 1,
            bindings,
            backend: BackendKind::Http { path: None },
            cluster: "c".into(),
            timeout_ms: 1000,
            auth: v1::AuthMode::None,
            policy: v1::Policy::default(),
            definition: v1::ApiDefinition {
                id: id.to_owned(),
                version: 1,
                http: v1::HttpRule {
                    method: m0,
                    path: p0,
                    body: None,
                    response_body: None,
                    additional_bindings: vec![],
                },
                backend: v1::Backend {
                    cluster: "c".into(),
                    timeout_ms: 1000,
                    grpc: None,
                    http: Some(v1::HttpBackend::default()),
                },
                auth: v1::AuthMode::None,
                policy: v1::Policy::default(),
                description: None,
                request_schema: None,
                response_schema: None,
                owner: None,
            },
        })
    }

    fn stage(apis: Vec<Arc<Api>>) -> RouteStage {
        let snap = Snapshot {
            apis: apis.into_iter().map(|a| (a.id.clone(), a)).collect(),
            ..Snapshot::default()
        };
        RouteStage::build(&snap, &Carried::default())
    }

    fn demo() -> RouteStage {
        stage(vec![
            api("order.get", &[("GET", "/v1/orders/{order_id}")]),
            api("order.put", &[("PUT", "/v1/orders/{order_id}")]),
            api("order.list", &[("GET", "/v1/orders")]),
            api("order.mine", &[("GET", "/v1/orders/mine")]),
            api("order.cancel", &[("POST", "/v1/{name=orders/*}:cancel")]),
            api("order.post", &[("POST", "/v1/{name=orders/*}")]),
            api("shelf.book", &[("GET", "/v1/{name=shelves/*/books/*}")]),
            api("files", &[("GET", "/files/{path=**}")]),
            api("files.meta", &[("GET", "/files/meta/{id}")]),
            api(
                "msg",
                &[
                    ("GET", "/v1/messages/{message_id}"),
                    ("GET", "/v1/users/{user.id}/messages/{message_id}"),
                ],
            ),
            api("root", &[("GET", "/")]),
            api("router.get", &[("GET", "/router")]),
            api("colon", &[("GET", "/v2/a:b")]),
        ])
    }

    fn ok(
        s: &RouteStage,
        method: &str,
        path: &str,
    ) -> (String, Option<usize>, Vec<(String, String)>) {
        let m = s
            .route(method, path, None)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert!(!m.router_style);
        (m.api.id.clone(), m.binding, m.vars)
    }

    fn id(s: &RouteStage, method: &str, path: &str) -> String {
        ok(s, method, path).0
    }

    fn err(s: &RouteStage, method: &str, path: &str, query: Option<&str>) -> GatewayError {
        match s.route(method, path, query) {
            Ok(m) => panic!("{method} {path} routed to {}", m.api.id),
            Err(e) => e,
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn notification_endpoints_are_built_in() {
        let s = stage(vec![]);
        let m = s.route("GET", "/notify/v1/stream", None).unwrap();
        assert_eq!(m.api.id, "portico.notify.stream");
        assert_eq!(m.api.auth, v1::AuthMode::Signature);
        let m = s.route("POST", "/notify/v1/ack", None).unwrap();
        assert_eq!(m.api.id, "portico.notify.ack");
        assert_eq!(
            s.route("POST", "/notify/v1/stream", None).unwrap_err().code,
            Code::ApiNotFound
        );
        // Not reachable in the router style.
        assert!(s
            .route("POST", "/router", Some("method=portico.notify.stream"))
            .is_err());
    }

    #[test]
    fn matches_and_extracts() {
        let s = demo();
        assert_eq!(
            ok(&s, "GET", "/v1/orders/42"),
            ("order.get".into(), Some(0), vars(&[("order_id", "42")]))
        );
        assert_eq!(id(&s, "PUT", "/v1/orders/42"), "order.put");
        assert_eq!(id(&s, "GET", "/v1/orders"), "order.list");
        assert_eq!(
            ok(&s, "GET", "/v1/orders/a%20b%3Ac").2,
            vars(&[("order_id", "a b:c")])
        );
        assert_eq!(
            ok(&s, "GET", "/v1/shelves/s1/books/b%2F2"),
            (
                "shelf.book".into(),
                Some(0),
                vars(&[("name", "shelves/s1/books/b%2F2")])
            )
        );
        assert_eq!(
            ok(&s, "GET", "/files/a/b/c.txt").2,
            vars(&[("path", "a/b/c.txt")])
        );
        assert_eq!(ok(&s, "GET", "/files").2, vars(&[("path", "")]));
        assert_eq!(
            ok(&s, "GET", "/v1/users/u1/messages/m2"),
            (
                "msg".into(),
                Some(1),
                vars(&[("user.id", "u1"), ("message_id", "m2")])
            )
        );
        assert_eq!(ok(&s, "GET", "/v1/messages/m2").1, Some(0));
        assert_eq!(id(&s, "GET", "/"), "root");
        assert_eq!(id(&s, "GET", "/v2/a:b"), "colon");
        // literals compare decoded
        assert_eq!(id(&s, "GET", "/v1/%6Frders/mine"), "order.mine");
    }

    #[test]
    fn most_specific_wins() {
        let s = demo();
        // literal beats `*`
        assert_eq!(id(&s, "GET", "/v1/orders/mine"), "order.mine");
        // literal beats `**`
        assert_eq!(
            ok(&s, "GET", "/files/meta/7"),
            ("files.meta".into(), Some(0), vars(&[("id", "7")]))
        );
        // but backtracks to `**` when the literal branch dead-ends
        assert_eq!(
            ok(&s, "GET", "/files/meta/7/x").2,
            vars(&[("path", "meta/7/x")])
        );
        assert_eq!(ok(&s, "GET", "/files/meta").2, vars(&[("path", "meta")]));
        let s = stage(vec![
            api("a", &[("GET", "/x/{a}/y")]),
            api("b", &[("GET", "/x/lit/{b}")]),
            api("c", &[("GET", "/x/**")]),
        ]);
        assert_eq!(id(&s, "GET", "/x/lit/z"), "b");
        assert_eq!(id(&s, "GET", "/x/lit/y"), "b");
        assert_eq!(id(&s, "GET", "/x/other/y"), "a");
        assert_eq!(id(&s, "GET", "/x/other/z"), "c");
        assert_eq!(id(&s, "GET", "/x"), "c");
    }

    #[test]
    fn custom_verbs() {
        let s = demo();
        assert_eq!(
            ok(&s, "POST", "/v1/orders/42:cancel"),
            (
                "order.cancel".into(),
                Some(0),
                vars(&[("name", "orders/42")])
            )
        );
        // no such verb: the colon stays in the value
        assert_eq!(
            ok(&s, "POST", "/v1/orders/42:refund").2,
            vars(&[("name", "orders/42:refund")])
        );
        assert_eq!(ok(&s, "POST", "/v1/orders/42").0, "order.post");
        // a GET has no verb templates: the colon is part of the segment
        assert_eq!(
            ok(&s, "GET", "/v1/orders/42:cancel").2,
            vars(&[("order_id", "42:cancel")])
        );
        let s = stage(vec![api("c", &[("POST", "/v1/{name=*}:cancel")])]);
        assert_eq!(ok(&s, "POST", "/v1/abc:cancel").2, vars(&[("name", "abc")]));
        assert_eq!(ok(&s, "POST", "/v1/a:b:cancel").2, vars(&[("name", "a:b")]));
        assert_eq!(err(&s, "POST", "/v1/abc", None).code, Code::ApiNotFound);
        assert_eq!(err(&s, "POST", "/v1/:cancel", None).code, Code::ApiNotFound);
        // an encoded colon is not a verb separator
        assert_eq!(
            err(&s, "POST", "/v1/abc%3Acancel", None).code,
            Code::ApiNotFound
        );
    }

    #[test]
    fn refuses_dot_segments_and_bad_paths() {
        let s = demo();
        for p in [
            "/v1/orders/.",
            "/v1/orders/..",
            "/v1/../v1/orders/1",
            "/./v1/orders/1",
            "/v1/orders/%2e",
            "/v1/orders/%2E",
            "/v1/orders/%2e%2e",
            "/v1/orders/%2E%2e",
            "/v1/orders/.%2E",
            "/v1/orders/%2e.",
            "/files/a/%2e%2e/b",
            "/files/a%2F..%2Fb",
            "/files/a%5C..%5Cb",
            "/files/..;x/y",
            "/v1//orders",
            "//v1/orders/1",
            "/v1/orders/",
            "v1/orders/1",
            "",
            "*",
            "/v1/orders/%zz",
            "/v1/orders/%2",
            "/v1/orders/%ff",
        ] {
            let e = err(&s, "GET", p, None);
            assert_eq!(e.code, Code::BadRequest, "{p:?}: {e}");
            assert_eq!(e.status(), 400);
        }
        // dots inside a segment are fine
        assert_eq!(
            ok(&s, "GET", "/v1/orders/a.b").2,
            vars(&[("order_id", "a.b")])
        );
        assert_eq!(
            ok(&s, "GET", "/v1/orders/...").2,
            vars(&[("order_id", "...")])
        );
        assert_eq!(
            ok(&s, "GET", "/files/.well-known/x").2,
            vars(&[("path", ".well-known/x")])
        );
        // a dot segment is refused before the router style too
        assert_eq!(
            err(&s, "POST", "/x/../router", Some("method=root")).code,
            Code::BadRequest
        );
    }

    #[test]
    fn not_found_and_methods() {
        let s = demo();
        let e = err(&s, "GET", "/x", None);
        assert_eq!(e.code, Code::ApiNotFound);
        assert_eq!(e.message, "no API for GET /x");
        let e = err(&s, "DELETE", "/v1/orders/42", None);
        assert_eq!(e.code, Code::ApiNotFound);
        assert_eq!(
            e.message,
            "no API for DELETE /v1/orders/42 (this path takes GET, POST, PUT)"
        );
        // exact methods only: HEAD does not fall back to GET
        assert_eq!(err(&s, "HEAD", "/v1/orders", None).code, Code::ApiNotFound);
        assert_eq!(
            err(&s, "GET", "/v1/orders/1/2", None).code,
            Code::ApiNotFound
        );
        let long = format!("/{}", "a".repeat(1000));
        assert!(err(&s, "GET", &long, None).message.len() < 300);
    }

    #[test]
    fn encoded_slash_in_a_single_variable_of_an_http_api() {
        let mut a = api("rw", &[("GET", "/v1/items/{id}/{rest=**}")]);
        Arc::get_mut(&mut a).unwrap().backend = BackendKind::Http {
            path: Some("/in/{id}/{rest}".into()),
        };
        let mut g = api("grpc", &[("GET", "/v3/items/{id}")]);
        Arc::get_mut(&mut g).unwrap().backend = BackendKind::Grpc {
            service: "s".into(),
            method: "m".into(),
            descriptor: "d".into(),
        };
        let s = stage(vec![a, api("plain", &[("GET", "/v2/items/{id}")]), g]);
        let e = err(&s, "GET", "/v1/items/1%2Fdelete/x", None);
        assert_eq!(e.code, Code::BadRequest);
        assert!(e.message.contains("id"), "{}", e.message);
        assert_eq!(
            ok(&s, "GET", "/v1/items/1/x%2Fy/z").2,
            vars(&[("id", "1"), ("rest", "x%2Fy/z")])
        );
        // Without a rewrite too: the path would reach the backend as sent, %2F and all.
        for p in ["/v2/items/1%2Fdelete", "/v2/items/1%2fdelete"] {
            let e = err(&s, "GET", p, None);
            assert_eq!(e.code, Code::BadRequest, "{p}");
            assert!(e.message.contains("'/'"), "{}", e.message);
        }
        // A gRPC backend gets the value as a field: nothing to confuse.
        assert_eq!(
            ok(&s, "GET", "/v3/items/1%2Fdelete").2,
            vars(&[("id", "1/delete")])
        );
    }

    fn grpc_api(id: &str, bindings: &[(&str, &str)]) -> Arc<Api> {
        let mut a = api(id, bindings);
        Arc::get_mut(&mut a).unwrap().backend = BackendKind::Grpc {
            service: "s".into(),
            method: "m".into(),
            descriptor: "d".into(),
        };
        a
    }

    #[test]
    fn limits_on_the_target_segments_and_query() {
        let s = stage(vec![
            api("files", &[("GET", "/files/{path=**}")]),
            grpc_api("list", &[("GET", "/grpc/items")]),
        ]);
        // The whole target: path and query together.
        let long = format!("/files/{}", "a".repeat(MAX_TARGET_BYTES - 7));
        assert_eq!(long.len(), MAX_TARGET_BYTES);
        assert_eq!(id(&s, "GET", &long), "files");
        let e = err(&s, "GET", &format!("{long}a"), None);
        assert_eq!((e.status(), e.code.as_str()), (414, "URI_TOO_LONG"));
        let e = err(&s, "GET", "/files/x", Some(&"q".repeat(MAX_TARGET_BYTES)));
        assert_eq!(e.status(), 414);
        // Segments.
        let deep = "/files".to_owned() + &"/s".repeat(MAX_PATH_SEGMENTS - 1);
        assert_eq!(id(&s, "GET", &deep), "files");
        let e = err(&s, "GET", &format!("{deep}/s"), None);
        assert_eq!(e.code, Code::BadRequest);
        assert!(e.message.contains("segments"), "{}", e.message);
        // Query parameters (empty parts are not parameters).
        let many = vec!["a=1"; MAX_QUERY_PARAMS].join("&");
        assert!(s
            .route("GET", "/files/x", Some(&format!("{many}&&")))
            .is_ok());
        let e = err(&s, "GET", "/files/x", Some(&format!("{many}&b")));
        assert_eq!(e.code, Code::BadRequest);
        assert!(e.message.contains("query parameters"), "{}", e.message);
        // The router style counts them too.
        let e = err(&s, "POST", "/router", Some(&format!("{many}&method=files")));
        assert_eq!(e.code, Code::BadRequest);
        // Field paths of a gRPC API: at most MAX_FIELD_PATH_DEPTH parts, dots raw or encoded.
        let fits = vec!["f"; MAX_FIELD_PATH_DEPTH].join(".");
        assert!(s
            .route("GET", "/grpc/items", Some(&format!("{fits}=1")))
            .is_ok());
        assert!(s
            .route("GET", "/grpc/items", Some(&format!("labels[{fits}.x.y]=1")))
            .is_ok());
        for q in [
            format!("{fits}.f=1"),
            format!("{fits}%2Ef"),
            format!("{fits}%2ef=2"),
        ] {
            let e = err(&s, "GET", "/grpc/items", Some(&q));
            assert_eq!(e.code, Code::BadRequest, "{q}");
            assert!(e.message.contains("field paths"), "{}", e.message);
        }
        // An HTTP backend's query is its own business.
        assert!(s
            .route("GET", "/files/x", Some(&format!("{fits}.f.g=1")))
            .is_ok());
    }

    /// The least time one call of `small` and of `large` takes, over `runs` interleaved runs
    /// (interleaved so that a burst of load on the machine disturbs both alike).
    fn least_times(
        runs: usize,
        small: impl Fn(),
        large: impl Fn(),
    ) -> (std::time::Duration, std::time::Duration) {
        let time = |f: &dyn Fn()| {
            let started = std::time::Instant::now();
            f();
            started.elapsed()
        };
        let (mut s, mut l) = (std::time::Duration::MAX, std::time::Duration::MAX);
        for _ in 0..runs {
            s = s.min(time(&small));
            l = l.min(time(&large));
        }
        (s, l)
    }

    /// Routing work grows linearly with the path, whatever it holds: 8× the input may cost at
    /// most 16× the time (quadratic work would cost 64×). Measured through `route` on the
    /// sizes a client can send (1 KiB and 8 KiB, the target limit; longer targets are refused
    /// before any other work, see `limits_on_the_target_segments_and_query`, and 64 KiB paths
    /// measured here would mostly measure the allocator of a busy test process). The least of several interleaved
    /// runs keeps a loaded machine from disturbing the ratio, and a ratio over the bound is
    /// measured again (up to three times): noise passes on a retry, quadratic work never does.
    #[test]
    fn routing_work_is_linear_in_the_path() {
        let s = demo();
        /// What a flood is called, its method, and its path of about `n` bytes.
        type Flood = (&'static str, &'static str, fn(usize) -> String);
        let floods: [Flood; 4] = [
            ("colons", "POST", |n| {
                format!("/v1/orders/4{}", ":".repeat(n))
            }),
            ("colons and a verb", "POST", |n| {
                format!("/v1/orders/4{}cancel", ":".repeat(n))
            }),
            ("escapes", "GET", |n| {
                format!("/v1/orders/{}", "%41".repeat(n / 3))
            }),
            ("escaped colons", "POST", |n| {
                format!("/v1/orders/4{}", "%3A:".repeat(n / 4))
            }),
        ];
        for (what, method, make) in floods {
            let small = make(1024 - 64);
            let large = make(MAX_TARGET_BYTES - 64);
            let route = |path: &str| {
                let _ = std::hint::black_box(s.route(method, path, None));
            };
            route(&large);
            let mut seen = Vec::new();
            let linear = (0..3).any(|_| {
                let (t_small, t_large) = least_times(9, || route(&small), || route(&large));
                seen.push((t_small, t_large));
                t_large < t_small * 16
            });
            assert!(linear, "{what}: (1 KiB, 8 KiB) took {seen:?} (not linear)");
        }
        // And it still routes what it should.
        assert_eq!(
            ok(&s, "POST", "/v1/orders/4:::cancel").2,
            vars(&[("name", "orders/4::")])
        );
    }

    #[test]
    fn any_method_bindings() {
        let s = stage(vec![
            api("any", &[("*", "/hook/{id}")]),
            api("get", &[("GET", "/hook/special")]),
        ]);
        assert_eq!(id(&s, "PATCH", "/hook/1"), "any");
        assert_eq!(id(&s, "GET", "/hook/special"), "get");
        assert_eq!(id(&s, "POST", "/hook/special"), "any");
    }

    #[test]
    fn router_style() {
        let s = demo();
        let m = s
            .route("POST", "/router", Some("method=order.get"))
            .unwrap();
        assert_eq!(m.api.id, "order.get");
        assert!(m.router_style);
        assert_eq!(m.binding, None);
        assert!(m.vars.is_empty());
        // percent-decoded, other parameters ignored
        let m = s
            .route("POST", "/router", Some("v=1&method=order%2Eget&x"))
            .unwrap();
        assert_eq!(m.api.id, "order.get");
        let e = err(&s, "POST", "/router", Some("method=nope"));
        assert_eq!(e.code, Code::ApiNotFound);
        assert_eq!(e.message, "no API with id \"nope\"");
        for q in [
            None,
            Some(""),
            Some("method="),
            Some("other=1"),
            Some("method=a&method=b"),
            Some("method=%zz"),
        ] {
            assert_eq!(
                err(&s, "POST", "/router", q).code,
                Code::BadRequest,
                "{q:?}"
            );
        }
        // other methods on /router route like any path: here an API binds GET /router
        assert_eq!(id(&s, "GET", "/router"), "router.get");
        let e = err(&s, "PUT", "/router", Some("method=order.get"));
        assert_eq!(e.code, Code::ApiNotFound);
        assert!(e.message.contains("GET"), "{}", e.message);
        let e = err(&stage(vec![]), "GET", "/router", None);
        assert!(e.message.contains("POST /router?method="), "{}", e.message);
        // /router/x is an ordinary path
        assert_eq!(
            err(&s, "POST", "/router/x", Some("method=order.get")).code,
            Code::ApiNotFound
        );
    }

    #[test]
    fn stage_sets_the_route() {
        let s = demo();
        let headers = http::HeaderMap::new();
        let req = EdgeRequest {
            method: "GET",
            path: "/v1/orders/7",
            query: Some("x=1"),
            headers: &headers,
            peer: None,
            body: &[],
            now_ms: 0,
        };
        let mut ctx = EdgeCtx::default();
        assert!(matches!(s.apply(&req, &mut ctx), Flow::Continue));
        assert_eq!(ctx.api().map(|a| a.id.as_str()), Some("order.get"));
        assert_eq!(s.name(), "route");
        let req = EdgeRequest {
            path: "/v1/%2e%2e/x",
            ..req
        };
        let mut ctx = EdgeCtx::default();
        match s.apply(&req, &mut ctx) {
            Flow::Respond(Err(e)) => assert_eq!(e.code, Code::BadRequest),
            other => panic!("{other:?}"),
        }
        assert!(ctx.route.is_none());
    }

    #[test]
    fn ten_thousand_apis() {
        let mut apis = Vec::new();
        for i in 0..10_000 {
            let svc = i % 50;
            let a = match i % 4 {
                0 => api(
                    &format!("api{i}"),
                    &[("GET", &format!("/v1/svc{svc}/res{i}/{{id}}"))],
                ),
                1 => api(
                    &format!("api{i}"),
                    &[("POST", &format!("/v1/svc{svc}/res{i}/{{id}}:run"))],
                ),
                2 => api(
                    &format!("api{i}"),
                    &[("PUT", &format!("/v1/svc{svc}/res{i}"))],
                ),
                _ => api(
                    &format!("api{i}"),
                    &[("GET", &format!("/v1/svc{svc}/files{i}/{{path=**}}"))],
                ),
            };
            apis.push(a);
        }
        apis.push(api("catchall", &[("GET", "/v1/{rest=**}")]));
        let s = stage(apis);
        for i in 0..10_000 {
            let svc = i % 50;
            let want = format!("api{i}");
            match i % 4 {
                0 => {
                    let (got, _, v) = ok(&s, "GET", &format!("/v1/svc{svc}/res{i}/x{i}"));
                    assert_eq!((got, v), (want, vars(&[("id", &format!("x{i}"))])));
                }
                1 => {
                    let (got, _, v) = ok(&s, "POST", &format!("/v1/svc{svc}/res{i}/y:run"));
                    assert_eq!((got, v), (want, vars(&[("id", "y")])));
                    assert_eq!(
                        err(&s, "POST", &format!("/v1/svc{svc}/res{i}/y"), None).code,
                        Code::ApiNotFound
                    );
                }
                2 => assert_eq!(id(&s, "PUT", &format!("/v1/svc{svc}/res{i}")), want),
                _ => {
                    let (got, _, v) = ok(&s, "GET", &format!("/v1/svc{svc}/files{i}/a/b"));
                    assert_eq!((got, v), (want, vars(&[("path", "a/b")])));
                }
            }
        }
        // wrong service: falls to the catch-all, never to another API
        assert_eq!(id(&s, "GET", "/v1/svc1/res0/x"), "catchall");
        assert_eq!(
            err(&s, "DELETE", "/v1/svc0/res0/x", None).code,
            Code::ApiNotFound
        );
        assert_eq!(
            s.route("POST", "/router", Some("method=api9999"))
                .unwrap()
                .api
                .id,
            "api9999"
        );
    }
}
