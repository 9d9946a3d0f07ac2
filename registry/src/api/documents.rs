//! The generic document operations behind most routes: list a folder, read one document,
//! write one (precondition checked, validated, audited) and delete one.
//!
//! Conventions (docs/ARCHITECTURE.md, the control plane): a single document is answered as
//! itself with its znode version as `ETag: "N"`; lists are `{"items": [{"id", "etag",
//! "document"}]}`; writes are compare-and-set under the request's precondition.

use super::audit::audit;
use super::context::Ctx;
use super::reply::{json_response, list_item, raw_json_response};
use super::validation::validate_change;
use crate::error::{ApiError, ApiResult};
use crate::gateway_status::Served;
use crate::state::Shared;
use crate::zk_store::{Env, Precondition};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Lists a folder of JSON documents; the folders of [`SERVED_DIRS`] with what the gateways
/// serve of each ([`attach_served`]).
pub async fn list_json(state: &Shared, env: Env, dir: &str) -> ApiResult<Response> {
    let docs = state.store.list_docs(&env.path(dir)).await?;
    let mut items: Vec<Value> = docs
        .iter()
        .map(|(name, doc)| list_item(name, &doc.stat, &doc.data))
        .collect();
    let mut body = json!({});
    if SERVED_DIRS.contains(&dir) {
        let written = docs.iter().map(|(_, d)| d.stat.mtime);
        body["nodes"] = attach_served(state, env, dir, &mut items, written).await;
    }
    body["items"] = Value::Array(items);
    Ok(json_response(StatusCode::OK, &body, None))
}

/// The folders whose list items say what the gateways serve (docs/operations/registry.md, "What the
/// gateways serve").
pub const SERVED_DIRS: [&str; 4] = ["switches", "apps", "topics", "clusters"];

/// Adds to each list item of folder `dir` (by its `id`) `written_at` (when the znode was last
/// written, from `written`: its `mtime`s in item order) and `served`: what the live gateways
/// serve of it ([`Served::item`]); `served` is `null` when the gateways could not be listed.
/// Answers the view's `nodes` (`{node_id, ok, error?}`; `[]` then).
pub async fn attach_served(
    state: &Shared,
    env: Env,
    dir: &str,
    items: &mut [Value],
    written: impl Iterator<Item = i64>,
) -> Value {
    let served = match Served::read(state, env).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e.message, "gateways not read for the served state");
            None
        }
    };
    let refusals = served.as_ref().map(Served::refusals).unwrap_or_default();
    for (item, mtime) in items.iter_mut().zip(written) {
        let id = item["id"].as_str().unwrap_or_default().to_owned();
        item["written_at"] = Value::String(portico_control::clock::rfc3339_ms(mtime));
        item["served"] = served
            .as_ref()
            .map_or(Value::Null, |s| s.item(&refusals, dir, &id));
    }
    served.map_or_else(|| json!([]), |s| Value::Array(s.nodes))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{ctx, read, TestRegistry};
    use serde_json::json;

    const CLUSTER: &str = r#"{"protocol":"http","endpoints":[{"addr":"127.0.0.1:1"}]}"#;

    fn api(cluster: &str) -> Value {
        json!({"id": "a", "version": 0, "http": {"method": "GET", "path": "/a"},
               "backend": {"cluster": cluster, "http": {}}})
    }

    async fn last_audit(state: &Shared) -> Value {
        let names = state.store.list("audit").await.unwrap();
        let last = names.last().expect("an audit entry");
        let doc = state.store.get(&format!("audit/{last}")).await.unwrap();
        serde_json::from_slice(&doc.unwrap().data).unwrap()
    }

    #[tokio::test]
    async fn writes_check_the_precondition_validate_and_audit() {
        let reg = TestRegistry::start();
        let (state, c) = (&reg.state, ctx(&[]));
        let cluster: Value = serde_json::from_str(CLUSTER).unwrap();
        let write = |rel, value, pre, action| Write {
            env: Env::Sandbox,
            rel,
            value,
            pre,
            action,
            actor: "tester".to_owned(),
        };
        let created = write_json(
            state,
            &c,
            write(
                "clusters/c",
                &cluster,
                Precondition::Absent,
                "cluster.create",
            ),
        );
        let (status, etag, body) = read(created.await.unwrap()).await;
        assert_eq!((status, etag.as_deref()), (201, Some("0")));
        assert_eq!(body, cluster);
        let entry = last_audit(state).await;
        assert_eq!(entry["action"], "cluster.create");
        assert_eq!(entry["actor"], "tester");
        assert_eq!(entry["target"], "sandbox/clusters/c");
        assert_eq!(entry["request_id"], "req-test");
        assert_eq!(entry["detail"]["version"], 0);
        assert_eq!(entry["detail"]["created"], true);
        let written = state
            .store
            .stat("sandbox/clusters/c")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(entry["detail"]["zxid"], written.mzxid, "the write's zxid");

        // Preconditions fail before validation: a create over an existing document, a stale
        // version, a version of a missing document.
        let again = write_json(
            state,
            &c,
            write("clusters/c", &cluster, Precondition::Absent, "x"),
        );
        assert_eq!(again.await.unwrap_err().code, "CONFLICT");
        let stale = write_json(
            state,
            &c,
            write("clusters/c", &cluster, Precondition::Version(3), "x"),
        );
        let e = stale.await.unwrap_err();
        assert!(
            e.message.contains("is at version 0 (If-Match said 3)"),
            "{}",
            e.message
        );
        let missing = write_json(
            state,
            &c,
            write("clusters/d", &cluster, Precondition::Version(0), "x"),
        );
        assert_eq!(missing.await.unwrap_err().code, "NOT_FOUND");
        let updated = write_json(
            state,
            &c,
            write(
                "clusters/c",
                &cluster,
                Precondition::Version(0),
                "cluster.put",
            ),
        );
        let (status, etag, _) = read(updated.await.unwrap()).await;
        assert_eq!((status, etag.as_deref()), (200, Some("1")));

        // A document gateways would reject is refused, naming it, and not written.
        let orphan = api("nowhere");
        let refused = write_json(state, &c, write("apis/a", &orphan, Precondition::Any, "x"));
        let e = refused.await.unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert_eq!(e.details[0].path.as_deref(), Some("sandbox/apis/a"));
        assert!(state.store.get("sandbox/apis/a").await.unwrap().is_none());
        // The live tree is another tree: the sandbox cluster does not count there.
        let uses_c = api("c");
        let live = Write {
            env: Env::Live,
            ..write("apis/a", &uses_c, Precondition::Any, "x")
        };
        assert_eq!(
            write_json(state, &c, live).await.unwrap_err().code,
            "VALIDATION_FAILED"
        );
    }

    #[tokio::test]
    async fn deletes_keep_the_tree_valid_unless_forced() {
        let reg = TestRegistry::start();
        let state = &reg.state;
        let store = &state.store;
        store
            .put("clusters/c", CLUSTER.as_bytes(), Precondition::Any)
            .await
            .unwrap();
        let api = serde_json::to_vec(&api("c")).unwrap();
        store.put("apis/a", &api, Precondition::Any).await.unwrap();

        let e = delete_doc(
            state,
            &ctx(&[]),
            Env::Live,
            "clusters/c",
            false,
            "cluster.delete",
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert_eq!(e.details[0].path.as_deref(), Some("apis/a"));
        let stale = ctx(&[("if-match", "\"4\"")]);
        let e = delete_doc(state, &stale, Env::Live, "clusters/c", true, "x")
            .await
            .unwrap_err();
        assert_eq!(e.code, "CONFLICT");
        let plain = ctx(&[]);
        let done = delete_doc(
            state,
            &plain,
            Env::Live,
            "clusters/c",
            true,
            "cluster.delete",
        );
        assert_eq!(done.await.unwrap().status(), StatusCode::NO_CONTENT);
        assert!(store.get("clusters/c").await.unwrap().is_none());
        assert_eq!(last_audit(state).await["action"], "cluster.delete");
        let e = delete_doc(state, &ctx(&[]), Env::Live, "clusters/c", true, "x")
            .await
            .unwrap_err();
        assert_eq!(e.code, "NOT_FOUND");
    }

    #[tokio::test]
    async fn reads_answer_documents_with_their_etags() {
        let reg = TestRegistry::start();
        let state = &reg.state;
        state
            .store
            .put(
                "sandbox/switches/b",
                br#"{"degraded":true}"#,
                Precondition::Any,
            )
            .await
            .unwrap();
        state
            .store
            .put("sandbox/switches/a", b"{not json", Precondition::Any)
            .await
            .unwrap();
        state
            .store
            .put(
                "sandbox/switches/b",
                br#"{"degraded":false}"#,
                Precondition::Any,
            )
            .await
            .unwrap();

        let (status, _, body) =
            read(list_json(state, Env::Sandbox, "switches").await.unwrap()).await;
        assert_eq!(status, 200);
        let items = body["items"].as_array().unwrap();
        assert_eq!(items[0]["id"], "a");
        assert!(
            items[0]["error"].is_string(),
            "an unreadable document is listed"
        );
        assert_eq!(items[1]["document"], json!({"degraded": false}));
        assert_eq!(items[1]["etag"], "1");
        // No gateway runs: nothing is served.
        assert_eq!(items[1]["served"]["nodes"], 0);
        assert_eq!(items[1]["served"]["refused"], json!([]));
        assert!(items[1]["written_at"].as_str().unwrap().ends_with('Z'));
        let (_, _, empty) = read(list_json(state, Env::Live, "switches").await.unwrap()).await;
        assert_eq!(empty, json!({"items": [], "nodes": []}));

        let one = get_json(state, Env::Sandbox, "switches/b", "switch \"b\"");
        let (status, etag, body) = read(one.await.unwrap()).await;
        assert_eq!((status, etag.as_deref()), (200, Some("1")));
        assert_eq!(body, json!({"degraded": false}));
        let e = get_json(state, Env::Live, "switches/b", "switch \"b\"")
            .await
            .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("NOT_FOUND", "switch \"b\" does not exist")
        );
    }
}
