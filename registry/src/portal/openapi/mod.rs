//! The merchants' OpenAPI 3.1 document of a set of published APIs: one operation per HTTP
//! binding (the RESTful paths), one `POST /router` operation for the router style, the
//! notification endpoints (stream, WebSocket, ack) and callbacks as a webhook, the
//! signature headers as security schemes, the error envelope as shared responses carrying
//! every code of docs/PROTOCOL.md ("The error envelope"), and per operation what the portal shows besides: an
//! example request the gateway accepts as it stands (`x-portico-example`), code that signs
//! and sends it (`x-codeSamples`), the rate limits, deadline and body limit.
//!
//! Schemas: for a gRPC-backed API from its descriptor (see [`super::schema`]), through the
//! same `MethodPlan` the gateway runs, so a binding the gateway could not transcode is not
//! documented either; for an HTTP-backed API from the `request_schema` / `response_schema`
//! its owner attached (docs/operations/portal.md, "The merchants' portal"), else "any JSON".
//!
//! Merchant words only: the document names no repository file (merchants have the portal's
//! Signing, Errors and Notifications pages instead), no gRPC service or method, and no
//! operator's reason; `registry/tests/it/portal.rs` checks it.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`document`]: the document's frame (info, servers, tags, components) and its paths |
//! | `operations` | each API described as operations, with the schemas they take and answer |
//! | `paths` | a path template as an OpenAPI path, its path parameters, the example path |
//! | `render` | an operation as the document shows it, and the `POST /router` operation |
//! | `errors` | [`ERROR_CODES`], [`what_to_do`], [`grpc_codes`], the shared error responses |
//! | `security` | the signature headers as security schemes |
//! | `notifications` | the `/notify/v1/` operations and the callback webhook |

mod errors;
mod notifications;
mod operations;
mod paths;
mod render;
mod security;

pub use errors::{grpc_codes, what_to_do, ERROR_CODES};

use crate::portal::example::example;
use errors::{error_responses, error_schema, grpc_codes_table};
use notifications::add_notifications;
use operations::{Builder, Described};
use portico_control::{v1, Api, Snapshot};
use render::{per_word, router_operation, tag_of};
use security::security_schemes;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Who a document is for.
#[derive(Debug, Clone, Copy)]
pub enum Audience<'a> {
    /// Anyone: `GET /portal/openapi.json`.
    Public,
    /// One app, by its key: `GET /portal/apps/<key>/openapi.json`.
    App(&'a str, &'a v1::App),
}

/// Where merchants send calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Servers {
    /// The live gateways' base URLs (`http://host:port`).
    pub live: Vec<String>,
    /// Their sandbox listeners' base URLs.
    pub sandbox: Vec<String>,
}

/// The document of `apis` (all of `snapshot`), for `audience`.
pub fn document(
    snapshot: &Snapshot,
    apis: &[Arc<Api>],
    servers: &Servers,
    audience: Audience<'_>,
) -> Value {
    let mut builder = Builder::new(snapshot);
    let base_url = servers
        .live
        .first()
        .cloned()
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
    let app_key = match audience {
        Audience::App(key, _) => key.to_owned(),
        Audience::Public => "your-app-key".to_owned(),
    };
    let described: Vec<Described> = apis.iter().filter_map(|a| builder.describe(a)).collect();
    // Schemas are complete once every API is described; examples resolve against them.
    let mut components: BTreeMap<String, Value> = builder.into_components();
    for d in &described {
        for (name, schema) in &d.extra_components {
            components.insert(name.clone(), schema.clone());
        }
    }
    components.insert("Error".to_owned(), error_schema());
    let root = json!({"components": {"schemas": &components}});
    let paths = operations_by_path(&described, &root, &base_url, &app_key);
    let (title, intro) = title_and_intro(audience);
    let mut doc = json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": info(&title, &intro, snapshot),
        "servers": server_list(servers, &base_url),
        "tags": tags(&described),
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": security_schemes(),
            "responses": error_responses(),
            "parameters": {
                "RequestId": {
                    "name": "X-Portico-Request-Id",
                    "in": "header",
                    "required": false,
                    "description": "Your own request id (1–64 of A-Z a-z 0-9 . _ -), kept and returned; the gateway makes one otherwise.",
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
                },
            },
        },
        "x-portico-error-codes": ERROR_CODES
            .iter()
            .map(|(status, code, meaning)| json!({"status": status, "code": code, "meaning": meaning, "what_to_do": what_to_do(code)}))
            .collect::<Vec<_>>(),
        "x-portico-grpc-codes": grpc_codes_table(),
    });
    if let Audience::App(key, _) = audience {
        doc["x-portico-app"] = json!(key);
    }
    let app = match audience {
        Audience::App(key, app) => Some((key, app)),
        Audience::Public => None,
    };
    add_notifications(&mut doc, snapshot, app);
    doc
}

/// Every operation by OpenAPI path and method, and the one `POST /router` of the APIs that
/// can be called in the router style.
fn operations_by_path(
    described: &[Described],
    root: &Value,
    base_url: &str,
    app_key: &str,
) -> BTreeMap<String, Map<String, Value>> {
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut router_bodies = Vec::new();
    let mut router_examples = Map::new();
    let mut router_ids = Vec::new();
    for d in described {
        for op in &d.operations {
            let op_value = op.render(d, root, base_url, app_key);
            paths
                .entry(op.openapi_path.clone())
                .or_default()
                .insert(op.method.to_ascii_lowercase(), op_value);
        }
        if let Some(router) = &d.router {
            router_ids.push(d.api.id.clone());
            let mut body = router.clone();
            if let Some(obj) = body.as_object_mut() {
                obj.insert(
                    "title".into(),
                    json!(format!("{} (router style)", d.api.id)),
                );
            }
            router_bodies.push(body);
            if let Some(ex) = example(router, root, None) {
                router_examples.insert(
                    d.api.id.clone(),
                    json!({"summary": format!("POST /router?method={}", d.api.id), "value": ex}),
                );
            }
        }
    }
    if !router_ids.is_empty() {
        paths.insert(
            "/router".to_owned(),
            router_operation(&router_ids, router_bodies, router_examples)
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
    }
    paths
}

/// The document's title and introduction: for an app, with its own rate limit.
fn title_and_intro(audience: Audience<'_>) -> (String, String) {
    match audience {
        Audience::Public => (
            "Portico open APIs".to_owned(),
            "Every published API that merchants can call: the public ones (no signature) and \
             those granted to at least one app."
                .to_owned(),
        ),
        Audience::App(key, app) => {
            let limits: Vec<String> = app
                .rate_limits
                .iter()
                .map(|l| format!("{} per {}", l.limit, per_word(l.per)))
                .collect();
            (
                format!("Portico open APIs for app {key}"),
                format!(
                    "The APIs app `{key}` can call: those granted to it and the public ones.{}",
                    if limits.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " The app's own rate limit, across all its calls: {}.",
                            limits.join(", ")
                        )
                    }
                ),
            )
        }
    }
}

/// The gateways merchants send calls to: the live ones, then their sandbox listeners, or
/// `base_url` when no live gateway is registered.
fn server_list(servers: &Servers, base_url: &str) -> Vec<Value> {
    let mut server_list: Vec<Value> = servers
        .live
        .iter()
        .map(|u| json!({"url": u, "description": "gateway (live)"}))
        .collect();
    server_list.extend(servers.sandbox.iter().map(
        |u| json!({"url": u, "description": "gateway sandbox listener (drafts and sandbox apps)"}),
    ));
    if server_list.is_empty() {
        server_list
            .push(json!({"url": base_url, "description": "gateway (no live node registered now)"}));
    }
    server_list
}

/// The document's `info`: its title, what it covers, and the configuration it was made from.
fn info(title: &str, intro: &str, snapshot: &Snapshot) -> Value {
    json!({
        "title": title,
        "version": format!("config {}", if snapshot.version.digest.is_empty() { "empty" } else { &snapshot.version.digest }),
        "description": format!(
            "{intro}\n\nSigned APIs need the four `X-Portico-*` headers of the portal's \
             Signing page (`/portal/#/signing`). Every API also \
             answers the router style, `POST /router?method=<api id>` with the whole request as \
             the JSON body, where its backend allows. Errors the gateway makes itself come as \
             `{{\"code\", \"message\", \"request_id\"}}`; branch on the status and `code` \
             (every code, with what to do, on the portal's Errors page, `/portal/#/errors`). \
             Notifications (events pushed to your app) are under `/notify/v1/` and, for apps \
             that receive callbacks, the `notification` webhook: see the portal's \
             Notifications page (`/portal/#/notifications`)."
        ),
    })
}

/// One tag per API-id family (the id up to its last dot: `grpc.order`, `order`).
fn tags(described: &[Described]) -> Vec<Value> {
    let mut names: Vec<String> = described.iter().map(|d| tag_of(&d.api.id)).collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|n| json!({"name": n})).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use portico_control::source::dir::read_tree;

    /// The example tree of `ops/examples/standalone` (the demo APIs), validated.
    fn example_snapshot() -> Snapshot {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../ops/examples/standalone");
        let tree = read_tree(std::path::Path::new(root)).unwrap();
        let snap = portico_control::build_snapshot(&tree, None);
        assert!(snap.rejected.is_empty(), "{:?}", snap.rejected);
        snap
    }

    fn servers() -> Servers {
        Servers {
            live: vec!["http://127.0.0.1:8080".into()],
            sandbox: vec!["http://127.0.0.1:8081".into()],
        }
    }

    #[test]
    fn every_demo_api_is_documented() {
        let snap = example_snapshot();
        let apis: Vec<Arc<Api>> = snap.apis.values().cloned().collect();
        let doc = document(&snap, &apis, &servers(), Audience::Public);
        if let Ok(out) = std::env::var("PORTICO_PORTAL_DUMP") {
            std::fs::write(out, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
        }
        let mut ids: Vec<String> = Vec::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                if let Some(id) = op["x-portico-api"].as_str() {
                    ids.push(id.to_owned());
                }
            }
        }
        ids.sort();
        ids.dedup();
        let want: Vec<String> = snap.apis.keys().cloned().collect();
        assert_eq!(ids, want);
        // Paths, parameters and examples of the tricky bindings.
        let get = &doc["paths"]["/grpc/v1/{name}"]["get"];
        assert_eq!(
            get["x-portico-example"]["path"],
            "/grpc/v1/shops/s1/products/p1"
        );
        assert_eq!(
            get["parameters"][0]["schema"]["pattern"],
            "^shops/[^/]+/products/[^/]+$"
        );
        let cancel = &doc["paths"]["/grpc/v1/orders/{order_id}:cancel"]["post"];
        assert_eq!(
            cancel["x-portico-example"]["path"],
            "/grpc/v1/orders/42:cancel"
        );
        let list = &doc["paths"]["/grpc/v1/orders"]["get"];
        let names: Vec<&str> = list["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for want in [
            "shop.id",
            "statuses",
            "filter.minTotalCents",
            "filter.createdAfter",
            "filter.minPrice.units",
            "includeCancelled",
            "ids",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let shop_list = &doc["paths"]["/grpc/v1/shops/{shop.id}/orders"]["get"];
        let names: Vec<&str> = shop_list["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["in"] == "query")
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(
            names.contains(&"shop.name") && !names.contains(&"shop.id"),
            "{names:?}"
        );
        assert!(
            doc["paths"]["/router"]["post"]["parameters"][0]["schema"]["enum"]
                .as_array()
                .unwrap()
                .contains(&json!("grpc.order.get"))
        );
        let order = &doc["components"]["schemas"]["demo.order.v1.Order"]["properties"];
        assert_eq!(order["totalCents"]["type"], "string");
        assert_eq!(order["sequence"]["format"], "uint64");
        assert_eq!(order["labels"]["additionalProperties"]["type"], "string");
        let status = &doc["paths"]["/grpc/v1/orders/{order_id}/status"]["get"];
        assert_eq!(
            status["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/demo.order.v1.OrderStatus"
        );
    }
}
