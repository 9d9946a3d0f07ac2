//! Whether the gateways serve an API as the tree holds it (docs/operations/registry.md, "Draft →
//! sandbox → publish → rollback"): a document a gateway refuses (on a route another API
//! owns, on no cluster, ...) is not served, and the console must not show it as if it were.
//!
//! Two sources, both reported: what each live gateway's plane says in its `/status`
//! (`rejected_documents`, or `sandbox.rejected_documents` for drafts; read with
//! [`read_all`]), and the registry's own build of the env's tree with the gateways' code
//! (`build_snapshot`), which answers even when no gateway runs and before one has applied a
//! change. A draft either refuses is not tried in the sandbox
//! ([`crate::sandbox_call::call`] answers 409 `DRAFT_REFUSED`).

use crate::error::{ApiError, ApiResult, Detail};
use crate::gateway_status::read_all;
use crate::state::Shared;
use crate::zk_store::Env;
use axum::http::StatusCode;
use portico_control::build_snapshot;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One refusal of one document: by a gateway node (`node_id`) or by the registry's own
/// build of the tree (`node_id` `"registry"`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Refusal {
    /// The gateway node, or `registry`.
    pub node_id: String,
    /// Why, naming the field (`http.path: GET /v1/x is already bound by API a (...)`).
    pub reason: String,
    /// Whether the gateway still serves the previous version it accepted.
    pub kept_previous: bool,
}

/// The refusals of an env's APIs, by tree path relative to the env (`apis/<id>`), and how many
/// gateways answered for the env.
#[derive(Debug, Clone, Default)]
pub struct ApiRefusals {
    /// Refusals by `apis/<id>`.
    pub by_path: BTreeMap<String, Vec<Refusal>>,
    /// The gateways whose plane for the env was read.
    pub nodes: usize,
}

impl ApiRefusals {
    /// The `served` object of API `id` in a list item: `{nodes, refused: [Refusal]}`.
    pub fn served(&self, id: &str) -> Value {
        let refused = self
            .by_path
            .get(&format!("apis/{id}"))
            .cloned()
            .unwrap_or_default();
        json!({"nodes": self.nodes, "refused": refused})
    }

    /// The refusals of API `id`.
    pub fn of(&self, id: &str) -> &[Refusal] {
        self.by_path
            .get(&format!("apis/{id}"))
            .map_or(&[], Vec::as_slice)
    }
}

/// Reads every live gateway's plane for `env` and builds the env's tree: the refusals of its
/// APIs. A gateway that cannot be read is left out; the registry's own build always counts.
pub async fn api_refusals(state: &Shared, env: Env) -> ApiResult<ApiRefusals> {
    let mut out = ApiRefusals::default();
    let tree = state.store.tree(env).await?;
    for r in build_snapshot(&tree, None).rejected {
        if r.path.starts_with("apis/") {
            out.by_path.entry(r.path).or_default().push(Refusal {
                node_id: "registry".to_owned(),
                reason: r.reason,
                kept_previous: false,
            });
        }
    }
    // A registry with no gateway to read (ZooKeeper has no nodes) still answers.
    let reads = read_all(state).await.unwrap_or_default();
    for (info, read) in reads {
        let Ok(status) = read else { continue };
        let Some(plane) = status.plane(env == Env::Sandbox) else {
            continue;
        };
        out.nodes += 1;
        for r in &plane.rejected_documents {
            if !r.path.starts_with("apis/") {
                continue;
            }
            out.by_path
                .entry(r.path.clone())
                .or_default()
                .push(Refusal {
                    node_id: info.node_id.clone(),
                    reason: r.reason.clone(),
                    kept_previous: r.kept_previous,
                });
        }
    }
    Ok(out)
}

/// 409 `DRAFT_REFUSED` for a draft the sandbox refuses, every refusal in `details` (the
/// reasons the registry and each gateway give, once each); `Ok` when none refuses it.
pub fn refuse_try(id: &str, refusals: &[Refusal]) -> ApiResult<()> {
    if refusals.is_empty() {
        return Ok(());
    }
    let mut details: Vec<Detail> = Vec::new();
    for r in refusals {
        let (field, reason) = match r.reason.split_once(": ") {
            Some((f, rest)) if !f.contains(' ') => (Some(f.to_owned()), rest.to_owned()),
            _ => (None, r.reason.clone()),
        };
        let reason = format!("{reason} (refused by {})", r.node_id);
        if !details
            .iter()
            .any(|d| d.field == field && d.reason == reason)
        {
            details.push(Detail {
                path: Some(Env::Sandbox.path(&format!("apis/{id}"))),
                field,
                reason,
            });
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "DRAFT_REFUSED",
        format!(
            "draft API {id:?} is refused by the sandbox, so trying it would call whatever the \
             sandbox serves instead: {} (fix the draft first)",
            refusals[0].reason
        ),
    )
    .with_details(details))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_draft_is_not_tried_and_every_reason_is_listed() {
        refuse_try("a", &[]).unwrap();
        let r = |node: &str, reason: &str| Refusal {
            node_id: node.to_owned(),
            reason: reason.to_owned(),
            kept_previous: false,
        };
        let e = refuse_try(
            "a",
            &[
                r(
                    "registry",
                    "http.path: GET /x is already bound by API b (GET /x)",
                ),
                r(
                    "gw-1",
                    "http.path: GET /x is already bound by API b (GET /x)",
                ),
                r("gw-1", "no cluster here"),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code, "DRAFT_REFUSED");
        assert_eq!(e.status, StatusCode::CONFLICT);
        assert!(
            e.message.contains("already bound by API b"),
            "{}",
            e.message
        );
        assert_eq!(e.details.len(), 3);
        assert_eq!(e.details[0].field.as_deref(), Some("http.path"));
        assert_eq!(e.details[2].field, None);
    }
}
