//! The `route` stage: which API (and which of its bindings) a request is for.
//!
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
//! `/v1/abc:cancel` with `name=abc`); otherwise the `:` is part of the segment.
//!
//! The method must match exactly (`HEAD` does not fall back to `GET`). An unknown path is
//! 404 `API_NOT_FOUND` ("no API for GET /x"); a known path with another method is also 404
//! `API_NOT_FOUND` (the contract has no 405), its message naming the methods the path takes.

use crate::edge::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use crate::model::RouteMatch;
use portico_control::template::{decode_segment, is_valid_percent_encoding, Segment};
use portico_control::{Api, BackendKind, Snapshot};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// The router-style endpoint.
pub const ROUTER_PATH: &str = "/router";

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
}

impl Table {
    fn insert(&mut self, api: &Arc<Api>, binding: usize) {
        let Some(b) = api.bindings.get(binding) else {
            return;
        };
        let mut node = &mut self.root;
        let verb = b.template.verb().map(str::to_owned);
        if let Some(v) = &verb {
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
    fn find<'a>(node: &'a Node, segs: &[String], verb: Option<&str>) -> Option<&'a Terminal> {
        match segs.split_first() {
            None => {
                if let Some(t) = node.ends.iter().find(|t| t.verb.as_deref() == verb) {
                    return Some(t);
                }
            }
            Some((first, tail)) => {
                if let Some(child) = node.literal.get(first) {
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
    /// raw segments and raw verb it matched with.
    fn lookup<'a, 'p>(
        &'a self,
        path: &CheckedPath<'p>,
    ) -> Option<(&'a Terminal, Vec<&'p str>, Option<&'p str>)> {
        if let Some((&last_raw, head_raw)) = path.raw.split_last() {
            if !self.verbs.is_empty() {
                for (p, _) in last_raw.match_indices(':').filter(|(p, _)| *p > 0) {
                    let verb_raw = &last_raw[p + 1..];
                    let Some(verb) = decode_segment(verb_raw) else {
                        continue;
                    };
                    if !self.verbs.contains(&verb) {
                        continue;
                    }
                    let stem_raw = &last_raw[..p];
                    let Some(stem) = decode_segment(stem_raw) else {
                        continue;
                    };
                    let mut segs = path.decoded.clone();
                    if let Some(l) = segs.last_mut() {
                        *l = stem;
                    }
                    if let Some(t) = Self::find(&self.root, &segs, Some(&verb)) {
                        let mut raw = head_raw.to_vec();
                        raw.push(stem_raw);
                        return Some((t, raw, Some(verb_raw)));
                    }
                }
            }
        }
        Self::find(&self.root, &path.decoded, None).map(|t| (t, path.raw.clone(), None))
    }
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
}

impl RouteStage {
    /// Indexes every binding of every API in `snapshot` (APIs in id order; validation has
    /// already refused two APIs binding the same method and path shape).
    fn index(snapshot: &Snapshot) -> Self {
        let mut stage = RouteStage {
            apis: snapshot.apis.clone(),
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
    /// the raw query. `Err` is 400 `BAD_REQUEST` or 404 `API_NOT_FOUND`.
    pub fn route(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
    ) -> Result<RouteMatch, GatewayError> {
        let checked = check_path(path)?;
        if path == ROUTER_PATH && method == "POST" {
            return self.router_style(query);
        }
        if let Some(m) = self.match_method(method, &checked)? {
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
        // An HTTP rewrite path re-encodes the values keeping `/`: an encoded slash inside a
        // single-segment variable would turn into a segment separator upstream.
        if matches!(&t.api.backend, BackendKind::Http { path: Some(_) }) {
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
    fn matches_and_extracts() {
        let s = demo();
        assert_eq!(
            ok(&s, "GET", "/v1/orders/42"),
            ("order.get".into(), Some(0), vars(&[("order_id", "42")]))
        );
        assert_eq!(id(&s, "PUT", "/v1/orders/42"), "order.put");
        assert_eq!(id(&s, "GET", "/v1/orders"), "order.list");
        assert_eq!(
            ok(&s, "GET", "/v1/orders/a%20b%2Fc").2,
            vars(&[("order_id", "a b/c")])
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
    fn encoded_slash_in_a_rewritten_single_variable() {
        let mut a = api("rw", &[("GET", "/v1/items/{id}/{rest=**}")]);
        Arc::get_mut(&mut a).unwrap().backend = BackendKind::Http {
            path: Some("/in/{id}/{rest}".into()),
        };
        let s = stage(vec![a, api("plain", &[("GET", "/v2/items/{id}")])]);
        let e = err(&s, "GET", "/v1/items/1%2Fdelete/x", None);
        assert_eq!(e.code, Code::BadRequest);
        assert!(e.message.contains("id"), "{}", e.message);
        assert_eq!(
            ok(&s, "GET", "/v1/items/1/x%2Fy/z").2,
            vars(&[("id", "1"), ("rest", "x%2Fy/z")])
        );
        // without a rewrite the value is just decoded
        assert_eq!(
            ok(&s, "GET", "/v2/items/1%2Fdelete").2,
            vars(&[("id", "1/delete")])
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
