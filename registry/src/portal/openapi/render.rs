//! An operation as the document shows it (docs/operations/portal.md, "The merchants' portal"): the
//! OpenAPI operation object and what the portal shows besides (an example request the
//! gateway accepts as it stands, code that signs and sends it, the rate limits, deadline and
//! body limit), and the one `POST /router` operation of the router style (docs/PROTOCOL.md,
//! "The router style").

use super::errors::error_statuses;
use super::operations::{Described, Operation};
use super::paths::example_path;
use super::security::security_requirement;
use crate::portal::example::example;
use crate::portal::snippets;
use portico_control::v1;
use serde_json::{json, Map, Value};

impl Operation {
    /// The operation object of this binding of `d`: examples resolve against `root`, the code
    /// samples call `base_url` as `app_key`.
    pub(super) fn render(
        &self,
        d: &Described,
        root: &Value,
        base_url: &str,
        app_key: &str,
    ) -> Value {
        let api = &d.api;
        let signed = api.auth == v1::AuthMode::Signature;
        let mut parameters = self.parameters.clone();
        parameters.push(json!({"$ref": "#/components/parameters/RequestId"}));
        let path = example_path(&self.template, &self.path_examples);
        let body_example = self.body.as_ref().and_then(|b| example(b, root, None));
        let body_text = body_example
            .as_ref()
            .map(|v| serde_json::to_string(v).unwrap_or_default())
            .unwrap_or_default();
        let request = snippets::Request {
            api_id: api.id.clone(),
            method: self.method.clone(),
            path: path.clone(),
            query: String::new(),
            body: body_text.clone(),
            signed,
        };
        let samples = snippets::all(&request, base_url, app_key);
        let reply_example = example(&self.reply, root, None);
        let responses = self.responses(signed, reply_example.as_ref());
        let policy = &api.policy;
        let mut op = json!({
            "operationId": if self.binding == 0 { api.id.clone() } else { format!("{}.binding{}", api.id, self.binding) },
            "summary": api.definition.description.clone().unwrap_or_else(|| api.id.clone()),
            "description": self.description(d, signed),
            "tags": [tag_of(&api.id)],
            "parameters": parameters,
            "responses": responses,
            "security": if signed { security_requirement() } else { json!([]) },
            "x-portico-api": api.id,
            "x-portico-binding": self.binding,
            "x-portico-auth": if signed { "signature" } else { "none" },
            "x-portico-backend": if self.grpc { "grpc" } else { "http" },
            "x-portico-timeout-ms": api.timeout_ms,
            "x-portico-max-body-bytes": policy.max_body_bytes.unwrap_or(1_048_576),
            "x-portico-rate-limits": rate_limits(policy),
            "x-portico-example": {
                "method": self.method,
                "path": path,
                "query": "",
                "body": body_text,
                "response": reply_example,
            },
            "x-codeSamples": snippets::code_samples(&samples),
        });
        if let Some(body) = &self.body {
            op["requestBody"] = self.request_body(body, body_example.as_ref());
        }
        if self.binding == 0 {
            if let Some(router) = &d.router {
                op["x-portico-router"] = router_extension(d, router, root);
            }
        }
        op
    }

    /// The success response (the reply's schema and example) and the shared error responses
    /// this operation can answer.
    fn responses(&self, signed: bool, reply_example: Option<&Value>) -> Map<String, Value> {
        let mut responses = Map::new();
        let success_status = if self.grpc { "200" } else { "2XX" };
        let mut success = json!({
            "description": if self.grpc {
                "The reply, in proto3 JSON.".to_owned()
            } else {
                "The backend's answer, with the status it chose.".to_owned()
            },
            "headers": {"X-Portico-Request-Id": {"description": "The request id (yours, or one the gateway made).", "schema": {"type": "string"}}},
            "content": {"application/json": {"schema": self.reply.clone()}},
        });
        if let Some(ex) = reply_example {
            success["content"]["application/json"]["example"] = ex.clone();
        }
        responses.insert(success_status.to_owned(), success);
        for (status, name) in error_statuses(signed, self.grpc) {
            responses.insert(
                status.to_string(),
                json!({"$ref": format!("#/components/responses/{name}")}),
            );
        }
        responses
    }

    /// The description: the API's own, what backs it (never the gRPC service or method),
    /// whether it is signed, its rate limits, and which binding this is.
    fn description(&self, d: &Described, signed: bool) -> String {
        let api = &d.api;
        let policy = &api.policy;
        let mut description = String::new();
        if let Some(text) = &api.definition.description {
            description.push_str(text);
            description.push_str("\n\n");
        }
        description.push_str(&format!(
            "API `{}` (version {}), {}. {}",
            api.id,
            api.version,
            // Never the gRPC service or method: the backend team's internal names.
            if d.grpc {
                "backed by gRPC, transcoded by the gateway"
            } else {
                "backed by HTTP"
            },
            if signed {
                "Signed: send the four X-Portico-* headers."
            } else {
                "Public: no signature needed."
            }
        ));
        if !policy.rate_limits.is_empty() {
            let words: Vec<String> = policy
                .rate_limits
                .iter()
                .map(|r| {
                    format!(
                        "{} per {} per {}",
                        r.limit,
                        per_word(r.per),
                        r.key.parts().join("+")
                    )
                })
                .collect();
            description.push_str(&format!(" Rate limits: {}.", words.join("; ")));
        }
        if self.binding > 0 {
            description.push_str(&format!(
                " Another binding of the same API (binding {}).",
                self.binding
            ));
        }
        description
    }

    /// The request body: its schema, an example, and what it carries.
    fn request_body(&self, body: &Value, body_example: Option<&Value>) -> Value {
        let mut content = json!({"schema": body});
        if let Some(ex) = body_example {
            content["example"] = ex.clone();
        }
        json!({
            "required": self.body_required,
            "description": if self.grpc && self.template.variables().is_empty() {
                "The request, in proto3 JSON.".to_owned()
            } else if self.grpc {
                "The request, in proto3 JSON; the fields bound by the path are taken from the path.".to_owned()
            } else {
                "The JSON body, passed on to the backend.".to_owned()
            },
            "content": {"application/json": content},
        })
    }
}

/// An API's rate limits as the portal lists them (`x-portico-rate-limits`).
fn rate_limits(policy: &v1::Policy) -> Vec<Value> {
    policy
        .rate_limits
        .iter()
        .map(|r| {
            json!({
                "key": r.key.parts(),
                "limit": r.limit,
                "per": per_word(r.per),
                "burst": r.burst.unwrap_or(r.limit),
            })
        })
        .collect()
}

/// How the same API is called in the router style (`x-portico-router`), with an example body.
fn router_extension(d: &Described, router: &Value, root: &Value) -> Value {
    let ex = example(router, root, None)
        .map(|v| serde_json::to_string(&v).unwrap_or_default())
        .unwrap_or_default();
    json!({
        "method": "POST",
        "path": "/router",
        "query": format!("method={}", d.api.id),
        "body": ex,
        "reply": d.router_reply,
    })
}

/// The one `POST /router` operation: `method=<api id>` names the API; the body is that
/// API's whole request.
pub(super) fn router_operation(
    ids: &[String],
    bodies: Vec<Value>,
    examples: Map<String, Value>,
) -> Value {
    let mut statuses = Map::new();
    statuses.insert(
        "200".to_owned(),
        json!({"description": "The API's answer, as on its RESTful path (a gRPC API answers its whole reply).",
               "content": {"application/json": {"schema": {}}}}),
    );
    for (status, name) in error_statuses(true, true) {
        statuses.insert(
            status.to_string(),
            json!({"$ref": format!("#/components/responses/{name}")}),
        );
    }
    json!({"post": {
        "operationId": "router",
        "summary": "Call any API in the router style",
        "description": "The open-platform router style: `POST /router?method=<api id>` with the whole \
            request as the JSON body. For a gRPC-backed API the body is the whole request message \
            (what the RESTful form takes from the path and query are fields of it). For an \
            HTTP-backed API the body is passed on as it is; only APIs whose backend path needs no \
            path variable are listed here. Signed like any call (the path line is /router and the \
            canonical query includes method=<api id>); public APIs need no signature.",
        "tags": ["router"],
        "parameters": [
            {"name": "method", "in": "query", "required": true, "description": "The API's id.",
             "schema": {"type": "string", "enum": ids}},
            {"$ref": "#/components/parameters/RequestId"},
        ],
        "requestBody": {"required": false, "content": {"application/json": {
            "schema": {"anyOf": bodies},
            "examples": examples,
        }}},
        "responses": statuses,
        "security": [{"AppKey": [], "Timestamp": [], "Nonce": [], "Signature": []}, {}],
    }})
}

pub(super) fn per_word(per: v1::Per) -> &'static str {
    match per {
        v1::Per::Second => "second",
        v1::Per::Minute => "minute",
    }
}

pub(super) fn tag_of(id: &str) -> String {
    match id.rsplit_once('.') {
        Some((family, _)) => family.to_owned(),
        None => id.to_owned(),
    }
}
