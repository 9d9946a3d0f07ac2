//! The admin REST API under `/api/v1`: one table of routes ([`routes`]) from which both the
//! router and the OpenAPI document ([`crate::openapi`]) are built, so they cannot drift apart.
//!
//! Conventions:
//! - A single document is answered as itself, with its znode version as `ETag: "N"`.
//! - Lists are `{"items": [{"id", "etag", "document"}]}`.
//! - Writes take `If-Match: "N"` (compare-and-set; 409 `CONFLICT` if the document changed),
//!   `If-None-Match: *` (create only; 409 if it exists) or neither (unconditional). `POST` to a
//!   collection always creates (409 if the id exists).
//! - Every write is validated the way a gateway will validate the tree, and refused (422
//!   `VALIDATION_FAILED`, naming document and field) if the document would be rejected or would
//!   make another document be rejected.
//! - Every write is appended to the audit log, with the operator from `X-Portico-Operator`.

pub mod apis;
pub mod apps;
pub mod docs;
pub mod ops;

use crate::error::{ApiError, ApiResult, Detail};
use crate::server::{RequestId, Shared, OPERATOR_HEADER};
use crate::zk_store::{Env, Precondition, Stat};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use portico_control::build_snapshot;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// What a request body is, for the OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    /// JSON of the named component schema.
    Json(&'static str),
    /// JSON of the named schema, or `multipart/form-data` (proto uploads).
    JsonOrMultipart(&'static str),
    /// JSON of the named schema, or `application/octet-stream` (descriptor sets).
    JsonOrBinary(&'static str),
}

/// What a successful response is, for the OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// JSON of the named component schema, with this status.
    Json(u16, &'static str),
    /// `application/octet-stream`.
    Binary,
    /// 204 No Content.
    Empty,
}

/// One route: where, what it does, and its handler.
pub struct Route {
    pub method: Method,
    /// Path under `/api/v1`, axum/OpenAPI syntax (`/apis/{id}`).
    pub path: String,
    pub summary: String,
    pub tag: &'static str,
    pub body: Body,
    pub reply: Reply,
    /// Query parameters: (name, description).
    pub query: Vec<(&'static str, &'static str)>,
    /// Reachable without the admin token.
    pub public: bool,
    /// Whether the route takes `If-Match` / `If-None-Match`.
    pub conditional: bool,
    pub handler: MethodRouter<Shared>,
}

impl Route {
    pub fn new(
        method: Method,
        path: impl Into<String>,
        tag: &'static str,
        summary: impl Into<String>,
        handler: MethodRouter<Shared>,
    ) -> Route {
        Route {
            method,
            path: path.into(),
            summary: summary.into(),
            tag,
            body: Body::None,
            reply: Reply::Json(200, "Any"),
            query: Vec::new(),
            public: false,
            conditional: false,
            handler,
        }
    }

    pub fn body(mut self, body: Body) -> Route {
        self.body = body;
        self
    }

    pub fn reply(mut self, reply: Reply) -> Route {
        self.reply = reply;
        self
    }

    pub fn query(mut self, name: &'static str, description: &'static str) -> Route {
        self.query.push((name, description));
        self
    }

    pub fn public(mut self) -> Route {
        self.public = true;
        self
    }

    pub fn conditional(mut self) -> Route {
        self.conditional = true;
        self
    }
}

/// Every route of the API, in documentation order.
pub fn routes() -> Vec<Route> {
    let mut all = Vec::new();
    all.extend(ops::routes());
    all.extend(apis::routes());
    all.extend(crate::sandbox_call::routes());
    all.extend(crate::health::routes());
    for env in [Env::Live, Env::Sandbox] {
        all.extend(docs::routes(env));
        all.extend(apps::routes(env));
    }
    all
}

/// Per-request context: request id and operator.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub request_id: String,
    /// `X-Portico-Operator`, or `None`.
    pub operator: Option<String>,
    pub headers: HeaderMap,
}

impl Ctx {
    /// Who is acting: the operator header, else `fallback` (e.g. a body's `updated_by`), else
    /// `admin`.
    pub fn actor(&self, fallback: Option<&str>) -> String {
        self.operator
            .clone()
            .or_else(|| fallback.filter(|s| !s.is_empty()).map(str::to_owned))
            .unwrap_or_else(|| "admin".to_owned())
    }

    /// The write precondition from `If-Match` / `If-None-Match`, or `expected` from a body.
    pub fn precondition(&self, expected: Option<i64>) -> ApiResult<Precondition> {
        if let Some(v) = self.headers.get(header::IF_NONE_MATCH) {
            if v.to_str().map(str::trim).ok() == Some("*") {
                return Ok(Precondition::Absent);
            }
            return Err(ApiError::bad_request(
                "If-None-Match: only `*` is supported",
            ));
        }
        if let Some(v) = self.headers.get(header::IF_MATCH) {
            let raw = v
                .to_str()
                .map_err(|_| ApiError::bad_request("If-Match: not ASCII"))?
                .trim();
            if raw == "*" {
                return Ok(Precondition::Any);
            }
            let unquoted = raw.trim_start_matches("W/").trim_matches('"');
            return unquoted
                .parse::<i32>()
                .map(Precondition::Version)
                .map_err(|_| {
                    ApiError::bad_request(format!(
                        "If-Match: {raw:?} is not a version (send the ETag you read, e.g. \"3\")"
                    ))
                });
        }
        match expected {
            Some(v) => i32::try_from(v)
                .map(Precondition::Version)
                .map_err(|_| ApiError::bad_request("expected_version: out of range")),
            None => Ok(Precondition::Any),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Ctx {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let request_id = parts
            .extensions
            .get::<RequestId>()
            .map(|r| r.0.clone())
            .unwrap_or_default();
        let operator = parts
            .headers
            .get(OPERATOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 128)
            .map(str::to_owned);
        Ok(Ctx {
            request_id,
            operator,
            headers: parts.headers.clone(),
        })
    }
}

/// A document name (API id, cluster, app key): 1–128 of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn check_name(what: &str, name: &str) -> ApiResult<()> {
    let ok = (1..=128).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "{what} {name:?}: must be 1-128 characters of A-Z a-z 0-9 . _ -"
        )))
    }
}

/// Parses a JSON body: 400 `BAD_REQUEST` if it is not JSON, 422 naming the field if it does
/// not fit `T`. Returns the typed value and the JSON as sent (unknown fields kept).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> ApiResult<(T, Value)> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("{what}: not valid JSON: {e}")))?;
    let typed = typed_from(&value, what)?;
    Ok((typed, value))
}

/// Checks that `value` fits `T` (422 naming the field otherwise).
pub fn typed_from<T: DeserializeOwned>(value: &Value, what: &str) -> ApiResult<T> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { None } else { Some(field) };
        let reason = e.inner().to_string();
        let message = match &field {
            Some(f) => format!("{what}: {f}: {reason}"),
            None => format!("{what}: {reason}"),
        };
        ApiError::invalid(
            message,
            vec![Detail {
                path: None,
                field,
                reason,
            }],
        )
    })
}

/// Splits a validation reason `field.path: what` into its field and text.
fn split_reason(reason: &str) -> (Option<String>, String) {
    if let Some((field, rest)) = reason.split_once(": ") {
        if !field.is_empty() && !field.contains(' ') {
            return (Some(field.to_owned()), rest.to_owned());
        }
    }
    (None, reason.to_owned())
}

/// Validates a change to an env's tree the way a gateway will: `changes` are tree paths
/// (relative to the env, e.g. `apis/x`) with their new bytes (`None`: deleted). Refused if a
/// changed document would be rejected, or if a document accepted now would be rejected after.
pub async fn validate_change(
    state: &Shared,
    env: Env,
    changes: &[(String, Option<Vec<u8>>)],
) -> ApiResult<()> {
    let tree = state.store.tree(env).await?;
    let before = build_snapshot(&tree, None);
    let mut after_tree = tree;
    for (rel, data) in changes {
        match data {
            Some(bytes) => {
                after_tree.docs.insert(rel.clone(), bytes.clone());
            }
            None => {
                after_tree.docs.remove(rel);
            }
        }
    }
    let after = build_snapshot(&after_tree, None);
    let rejected_before: BTreeSet<&str> = before.rejected.iter().map(|r| r.path.as_str()).collect();
    let changed: BTreeSet<&str> = changes.iter().map(|(p, _)| p.as_str()).collect();
    let problems: Vec<Detail> = after
        .rejected
        .iter()
        .filter(|r| changed.contains(r.path.as_str()) || !rejected_before.contains(r.path.as_str()))
        .map(|r| {
            let (field, reason) = split_reason(&r.reason);
            Detail {
                path: Some(env.path(&r.path)),
                field,
                reason,
            }
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    let first = &problems[0];
    let location = match (&first.path, &first.field) {
        (Some(p), Some(f)) => format!("{p}: {f}"),
        (Some(p), None) => p.clone(),
        _ => String::new(),
    };
    Err(ApiError::invalid(
        format!(
            "the change would be rejected by gateways: {location}: {}{}",
            first.reason,
            if problems.len() > 1 {
                format!(" (and {} more)", problems.len() - 1)
            } else {
                String::new()
            }
        ),
        problems,
    ))
}

/// `ETag: "N"` for a znode version.
pub fn etag(stat: &Stat) -> String {
    format!("\"{}\"", stat.version)
}

/// A JSON response with an optional ETag.
pub fn json_response<T: Serialize>(status: StatusCode, body: &T, stat: Option<&Stat>) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    raw_json_response(status, bytes, stat)
}

/// Already-encoded JSON with an optional ETag.
pub fn raw_json_response(status: StatusCode, bytes: Vec<u8>, stat: Option<&Stat>) -> Response {
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(stat) = stat {
        if let Ok(v) = HeaderValue::from_str(&etag(stat)) {
            response.headers_mut().insert(header::ETAG, v);
        }
    }
    response
}

/// One item of a list response.
pub fn list_item(id: &str, stat: &Stat, data: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(data) {
        Ok(document) => json!({"id": id, "etag": stat.version.to_string(), "document": document}),
        Err(e) => json!({
            "id": id,
            "etag": stat.version.to_string(),
            "document": null,
            "error": format!("not valid JSON: {e}"),
            "raw": String::from_utf8_lossy(data),
        }),
    }
}

/// Appends an entry to the audit log (`<root>/audit/entry-NNNNNNNNNN`). A failure is logged,
/// never returned: the change itself has been made.
pub async fn audit(
    state: &Shared,
    ctx: &Ctx,
    actor: &str,
    action: &str,
    target: &str,
    detail: Value,
) {
    let entry = json!({
        "at": portico_control::clock::now_rfc3339(),
        "actor": actor,
        "action": action,
        "target": target,
        "request_id": ctx.request_id,
        "detail": detail,
    });
    let bytes = serde_json::to_vec(&entry).unwrap_or_default();
    match state.store.append("audit", "entry-", &bytes).await {
        Ok(name) => {
            let seq = name
                .trim_start_matches("entry-")
                .parse::<u64>()
                .unwrap_or(1);
            if seq > 0 && seq % AUDIT_TRIM_EVERY == 0 {
                let state = state.clone();
                tokio::spawn(async move { trim_audit(&state).await });
            }
        }
        Err(e) => tracing::warn!(action, target, error = %e, "audit entry not written"),
    }
}

/// The audit log keeps this many newest entries.
pub const AUDIT_KEEP: usize = 10_000;
/// Every this many appends, older entries are removed.
const AUDIT_TRIM_EVERY: u64 = 500;

/// Removes all but the newest [`AUDIT_KEEP`] audit entries (best effort).
async fn trim_audit(state: &Shared) {
    let Ok(mut names) = state.store.list("audit").await else {
        return;
    };
    if names.len() <= AUDIT_KEEP {
        return;
    }
    names.sort();
    let excess = names.len() - AUDIT_KEEP;
    for name in names.into_iter().take(excess) {
        let _ = state
            .store
            .delete(&format!("audit/{name}"), Precondition::Any)
            .await;
    }
}

/// A query-string flag (`?force=true`).
pub fn flag(query: &std::collections::HashMap<String, String>, name: &str) -> bool {
    query
        .get(name)
        .is_some_and(|v| v.is_empty() || v == "true" || v == "1")
}

/// The path prefix of an env's routes (`""` or `"/sandbox"`).
pub fn env_prefix(env: Env) -> &'static str {
    match env {
        Env::Live => "",
        Env::Sandbox => "/sandbox",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_split_into_field_and_text() {
        assert_eq!(
            split_reason("backend.timeout_ms: must be between 1 and 600000"),
            (
                Some("backend.timeout_ms".to_owned()),
                "must be between 1 and 600000".to_owned()
            )
        );
        assert_eq!(
            split_reason("invalid document: x"),
            (None, "invalid document: x".to_owned())
        );
    }

    #[test]
    fn names() {
        assert!(check_name("id", "order.get").is_ok());
        assert!(check_name("id", "..").is_err());
        assert!(check_name("id", "a/b").is_err());
        assert!(check_name("id", "").is_err());
    }

    #[test]
    fn every_route_is_unique() {
        let mut seen = BTreeSet::new();
        for r in routes() {
            assert!(
                seen.insert((r.method.to_string(), r.path.clone())),
                "duplicate {} {}",
                r.method,
                r.path
            );
        }
    }
}
