//! Every write is validated the way a gateway will validate the tree (the same
//! `build_snapshot`; docs/operations/config-tree.md, "The configuration tree"), and refused with 422
//! `VALIDATION_FAILED`, naming document and field, if a changed document would be rejected or
//! would make another document be rejected.

use crate::error::{ApiError, ApiResult, Detail};
use crate::state::Shared;
use crate::zk_store::Env;
use portico_control::{build_snapshot, Tree};
use std::collections::BTreeSet;

/// One change to an env's tree: a tree path relative to the env (`apis/x`) and its new bytes
/// (`None`: deleted).
pub type Change = (String, Option<Vec<u8>>);

/// Validates `changes` to `env`'s tree as it is in ZooKeeper now: refused if a changed document
/// would be rejected, or if a document accepted now would be rejected after.
pub async fn validate_change(state: &Shared, env: Env, changes: &[Change]) -> ApiResult<()> {
    let tree = state.store.tree(env).await?;
    check_change(tree, env, changes)
}

/// [`validate_change`] against a given tree. A changed document naming an outbound target the
/// egress policy refuses (an alert webhook to `169.254.169.254`, ...) is refused first, with
/// 400 `BAD_REQUEST` and the reason ([`crate::egress::check_document`]).
pub fn check_change(tree: Tree, env: Env, changes: &[Change]) -> ApiResult<()> {
    let too_large = super::checks::size_problems(env, changes);
    if let Some(first) = too_large.first() {
        let message = refusal_of("ZooKeeper cannot hold", first, too_large.len());
        return Err(ApiError::too_large(message).with_details(too_large));
    }
    for (rel, data) in changes {
        let Some(doc) = data
            .as_deref()
            .and_then(|d| serde_json::from_slice::<serde_json::Value>(d).ok())
        else {
            continue;
        };
        crate::egress::check_document(rel, &doc).map_err(|why| {
            ApiError::bad_request(format!(
                "{}: refused by the egress policy (docs/operations/egress.md, \"Egress policy\"): {why}",
                env.path(rel)
            ))
        })?;
    }
    let before = build_snapshot(&tree, None);
    let mut after_tree = tree.clone();
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
    let mut problems = super::checks::problems(&tree, &after_tree, env, changes);
    let rejected_before: BTreeSet<&str> = before.rejected.iter().map(|r| r.path.as_str()).collect();
    let changed: BTreeSet<&str> = changes.iter().map(|(p, _)| p.as_str()).collect();
    let gateways = after
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
        });
    // The gateways' validation stops at a document's first problem; the registry's own checks
    // found the others. A field both name is listed once.
    for d in gateways.collect::<Vec<_>>() {
        if !problems
            .iter()
            .any(|p| p.path == d.path && d.field.is_some() && p.field == d.field)
        {
            problems.push(d);
        }
    }
    problems.sort_by(|a, b| a.path.cmp(&b.path));
    match problems.first() {
        None => Ok(()),
        Some(first) => Err(ApiError::invalid(refusal(first, problems.len()), problems)),
    }
}

/// The message of a refusal: the first problem, and how many more there are.
fn refusal(first: &Detail, count: usize) -> String {
    refusal_of("the change is refused", first, count)
}

/// `<lead>: <where>: <what> (and N more)`.
fn refusal_of(lead: &str, first: &Detail, count: usize) -> String {
    let location = match (&first.path, &first.field) {
        (Some(p), Some(f)) => format!("{p}: {f}"),
        (Some(p), None) => p.clone(),
        _ => String::new(),
    };
    let more = if count > 1 {
        format!(" (and {} more)", count - 1)
    } else {
        String::new()
    };
    format!("{lead}: {location}: {}{more}", first.reason)
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

    fn tree(docs: &[(&str, &str)]) -> Tree {
        let mut t = Tree::default();
        for (path, doc) in docs {
            t.docs.insert((*path).to_owned(), doc.as_bytes().to_vec());
        }
        t
    }

    const CLUSTER: &str = r#"{"protocol":"http","endpoints":[{"addr":"127.0.0.1:1"}]}"#;
    const API: &str =
        r#"{"id":"a","http":{"method":"GET","path":"/a"},"backend":{"cluster":"c","http":{}}}"#;

    #[test]
    fn a_change_breaking_another_document_is_refused() {
        let t = tree(&[("clusters/c", CLUSTER), ("apis/a", API)]);
        // Deleting the cluster would make the API be rejected.
        let e = check_change(t.clone(), Env::Sandbox, &[("clusters/c".into(), None)]).unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert_eq!(e.details[0].path.as_deref(), Some("sandbox/apis/a"));
        // A change that breaks nothing passes.
        let other = ("clusters/d".to_owned(), Some(CLUSTER.as_bytes().to_vec()));
        check_change(t, Env::Live, &[other]).unwrap();
    }

    #[test]
    fn documents_rejected_before_do_not_block_other_changes() {
        // The API is already rejected (no cluster): an unrelated write still passes, and a
        // write of the API itself is refused naming it.
        let t = tree(&[("apis/a", API)]);
        let other = ("clusters/d".to_owned(), Some(CLUSTER.as_bytes().to_vec()));
        check_change(t.clone(), Env::Live, &[other]).unwrap();
        let again = ("apis/a".to_owned(), Some(API.as_bytes().to_vec()));
        let e = check_change(t, Env::Live, &[again]).unwrap_err();
        assert!(e.message.contains("apis/a"), "{}", e.message);
    }
}
