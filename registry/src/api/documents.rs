//! The generic document operations behind most routes: list a folder, read one document,
//! write one (precondition checked, validated, audited) and delete one.
//!
//! Conventions (docs/ARCHITECTURE.md, "Control plane"): a single document is answered as
//! itself with its znode version as `ETag: "N"`; lists are `{"items": [{"id", "etag",
//! "document"}]}`; writes are compare-and-set under the request's precondition.

use super::audit::audit;
use super::context::Ctx;
use super::reply::{json_response, list_item, raw_json_response};
use super::validation::validate_change;
use crate::error::{ApiError, ApiResult};
use crate::state::Shared;
use crate::zk_store::{Env, Precondition};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Lists a folder of JSON documents.
pub async fn list_json(state: &Shared, env: Env, dir: &str) -> ApiResult<Response> {
    let docs = state.store.list_docs(&env.path(dir)).await?;
    let items: Vec<Value> = docs
        .iter()
        .map(|(name, doc)| list_item(name, &doc.stat, &doc.data))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items }),
        None,
    ))
}

/// Answers one stored JSON document as itself, with its ETag (404 naming `what`).
pub async fn get_json(state: &Shared, env: Env, rel: &str, what: &str) -> ApiResult<Response> {
    let doc = state.store.require(&env.path(rel), what).await?;
    Ok(raw_json_response(StatusCode::OK, doc.data, Some(&doc.stat)))
}

/// A document write: where, what, under which precondition, and how it is audited.
#[derive(Debug, Clone)]
pub struct Write<'a> {
    /// The tree.
    pub env: Env,
    /// The tree path relative to the env (`clusters/c`).
    pub rel: &'a str,
    /// The document, already checked to fit its type.
    pub value: &'a Value,
    /// The request's precondition.
    pub pre: Precondition,
    /// The audit log's action (`cluster.put`).
    pub action: &'a str,
    /// Who writes, for the audit log.
    pub actor: String,
}

/// Validates and writes a JSON document, audits it, and answers it with its ETag (201 when
/// created).
pub async fn write_json(state: &Shared, ctx: &Ctx, w: Write<'_>) -> ApiResult<Response> {
    let data = serde_json::to_vec(w.value).map_err(|e| ApiError::internal(e.to_string()))?;
    check_precondition(state, w.env, w.rel, w.pre).await?;
    validate_change(state, w.env, &[(w.rel.to_owned(), Some(data.clone()))]).await?;
    let path = w.env.path(w.rel);
    let written = state.store.put(&path, &data, w.pre).await?;
    let detail = json!({"version": written.stat.version, "created": written.created});
    audit(state, ctx, &w.actor, w.action, &path, detail).await;
    let status = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(raw_json_response(status, data, Some(&written.stat)))
}

/// Answers 409 / 404 before validating when the precondition already fails (ZooKeeper
/// enforces it again at the write).
pub async fn check_precondition(
    state: &Shared,
    env: Env,
    rel: &str,
    pre: Precondition,
) -> ApiResult<()> {
    let path = env.path(rel);
    let stat = match pre {
        Precondition::Any => return Ok(()),
        _ => state.store.stat(&path).await?,
    };
    match (pre, stat) {
        (Precondition::Absent, Some(_)) => {
            Err(ApiError::conflict(format!("{path} already exists")))
        }
        (Precondition::Version(_), None) => {
            Err(ApiError::not_found(format!("{path} does not exist")))
        }
        (Precondition::Version(v), Some(s)) if s.version != v => Err(ApiError::conflict(format!(
            "{path} is at version {} (If-Match said {v}): read it again and retry",
            s.version
        ))),
        _ => Ok(()),
    }
}

/// Deletes a document under the request's precondition, after checking that nothing else
/// would be rejected (unless `force`); audits it and answers 204.
pub async fn delete_doc(
    state: &Shared,
    ctx: &Ctx,
    env: Env,
    rel: &str,
    force: bool,
    action: &str,
) -> ApiResult<Response> {
    let pre = ctx.precondition(None)?;
    let path = env.path(rel);
    if state.store.stat(&path).await?.is_none() {
        return Err(ApiError::not_found(format!("{path} does not exist")));
    }
    if !force {
        validate_change(state, env, &[(rel.to_owned(), None)]).await?;
    }
    state.store.delete(&path, pre).await?;
    audit(state, ctx, &ctx.actor(None), action, &path, json!({})).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
