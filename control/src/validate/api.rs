//! `apis/<api_id>`: an API definition (docs/operations/config-tree.md, "The configuration tree": "An
//! API document"): its id, its HTTP bindings (`google.api.http` templates, none bound twice
//! across the tree), its backend (a cluster of the same protocol; the gRPC method through
//! its descriptor, or the HTTP rewrite), its policy ([`super::policy`]), its optional JSON
//! Schemas and owner.

use super::fields::{check_email, check_name, excerpt, parse_json, MAX_TIMEOUT_MS};
use super::policy::check_policy;
use crate::fieldpath::{self, Syntax};
use crate::snapshot::{Api, BackendKind, Binding};
use crate::template::{is_field_path, PathTemplate, Rewrite, Segment};
use crate::v1;
use prost_reflect::DescriptorPool;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The HTTP methods an API may bind.
pub const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];

/// The most `http.additional_bindings` an API may have.
pub const MAX_ADDITIONAL_BINDINGS: usize = 64;

pub(super) type RouteKey = (String, Vec<Segment>, Option<String>);

pub(super) fn route_key(b: &Binding) -> RouteKey {
    (
        b.method.clone(),
        b.template.segments().to_vec(),
        b.template.verb().map(str::to_owned),
    )
}

/// What an API's check needs of the documents accepted before it (the builder's, see
/// [`super::build`]): the clusters, the decoded descriptor pools, the bindings already taken.
pub(super) struct Accepted<'a> {
    pub(super) clusters: &'a BTreeMap<String, Arc<v1::Cluster>>,
    /// Decoded descriptor pools of the accepted descriptors, by sha256.
    pub(super) pools: &'a HashMap<String, DescriptorPool>,
    /// Accepted bindings: (method, shape, verb) → (API id, template as written).
    pub(super) routes: &'a HashMap<RouteKey, (String, String)>,
}

impl Accepted<'_> {
    pub(super) fn check_api(&self, name: &str, raw: &[u8]) -> Result<Api, String> {
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
        let Some(cluster) = self.clusters.get(&be.cluster) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::test_support::*;
    use serde_json::json;

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

    /// A rewrite that once panicked the control thread is an ordinary rejection, and the
    /// switch beside it applies.
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
}
