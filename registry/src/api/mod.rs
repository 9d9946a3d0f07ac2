//! The admin REST API under `/api/v1`: one table of routes ([`routes`]) from which both the
//! router ([`crate::server`]) and the OpenAPI document ([`crate::openapi`]) are built, so they
//! cannot drift apart.
//!
//! Conventions:
//! - A single document is answered as itself, with its znode version as `ETag: "N"`
//!   ([`reply`]).
//! - Lists are `{"items": [{"id", "etag", "document"}]}`.
//! - Writes take `If-Match: "N"` (compare-and-set; 409 `CONFLICT` if the document changed),
//!   `If-None-Match: *` (create only; 409 if it exists) or neither (unconditional); see
//!   [`context`]. `POST` to a collection always creates (409 if the id exists).
//! - Every write is validated the way a gateway will validate the tree, and refused (422
//!   `VALIDATION_FAILED`, naming document and field) if the document would be rejected or would
//!   make another document be rejected ([`validation`]).
//! - Every write is appended to the audit log, with the operator from `X-Portico-Operator`
//!   ([`audit`]).
//!
//! One file (or folder) per resource, each with its routes; [`documents`] holds the generic
//! read/write/delete of a document they share. Clusters, switches, the IP ACL, descriptors,
//! apps and notification topics are described once and exist live and under `/sandbox` ([`crate::route::in_each_env`]).

pub mod alerts;
pub mod apis;
pub mod apps;
pub mod audit;
pub mod checks;
pub mod cluster_ops;
pub mod clusters;
pub mod context;
pub mod descriptors;
pub mod documents;
pub mod health;
pub mod hot_keys;
pub mod ipacl;
pub mod notifications;
pub mod ops;
pub mod reply;
pub mod reports;
pub mod sandbox;
pub mod switches;
pub mod topics;
pub mod tree;
pub mod validation;

use crate::route::{in_each_env, Route};

/// Every route of the API, in documentation order.
pub fn routes() -> Vec<Route> {
    let in_both_envs = [
        clusters::routes(),
        switches::routes(),
        ipacl::routes(),
        descriptors::routes(),
        apps::routes(),
        topics::routes(),
    ]
    .concat();
    [
        ops::routes(),
        tree::routes(),
        apis::routes(),
        sandbox::routes(),
        health::routes(),
        hot_keys::routes(),
        notifications::routes(),
        alerts::routes(),
        reports::routes(),
        // Live-only cluster operations (failover, overview, autoscale events).
        cluster_ops::routes(),
        in_each_env(&in_both_envs),
    ]
    .concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

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

    #[test]
    fn env_resources_exist_live_and_in_the_sandbox() {
        let all: BTreeSet<(String, String)> = routes()
            .iter()
            .map(|r| (r.method.to_string(), r.path.clone()))
            .collect();
        for (method, path) in [
            ("GET", "/clusters/{name}"),
            ("PUT", "/switches/{api_id}"),
            ("PUT", "/ipacl"),
            ("GET", "/descriptors/{sha256}"),
            ("POST", "/apps/{app_key}/rotate-secret"),
        ] {
            assert!(
                all.contains(&(method.into(), path.into())),
                "{method} {path}"
            );
            let sandbox = format!("/sandbox{path}");
            assert!(
                all.contains(&(method.into(), sandbox)),
                "{method} /sandbox{path}"
            );
        }
        assert_eq!(all.len(), 91);
    }

    /// Every route is in the OpenAPI document, and every `$ref` resolves.
    #[test]
    fn the_openapi_document_is_complete_and_consistent() {
        let routes = routes();
        let doc = crate::openapi::document(&routes);
        for route in &routes {
            let op = &doc["paths"][&route.path][route.method.as_str().to_ascii_lowercase()];
            assert!(
                op.is_object(),
                "{} {} missing from the OpenAPI document",
                route.method,
                route.path
            );
        }
        let text = doc.to_string();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("\"$ref\":\"#/components/") {
            let tail = &rest[i + "\"$ref\":\"#/components/".len()..];
            let end = tail.find('"').unwrap();
            let mut target = &doc["components"];
            for part in tail[..end].split('/') {
                target = &target[part];
            }
            assert!(!target.is_null(), "dangling $ref {}", &tail[..end]);
            rest = &tail[end..];
        }
    }
}
