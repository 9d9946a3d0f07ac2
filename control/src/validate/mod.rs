//! Validation of a raw [`Tree`](crate::Tree) into one immutable [`Snapshot`](crate::Snapshot).
//!
//! Every document is parsed and checked on its own; errors name the field
//! (`backend.timeout_ms: must be between 1 and 600000`). A refused document never affects
//! the others: its last good version (from `previous`) is served in its place when that
//! version is still consistent with the new tree (its cluster still exists, ...), otherwise
//! the document is simply absent.
//!
//! Documents are checked in dependency order: descriptors, clusters, the IP ACL, apps,
//! switches, then APIs (which need their cluster and descriptor). Alert rules stand alone
//! (an `api` that names no API is allowed: deleting an API never makes a rule invalid). Two APIs binding the same
//! method to the same path shape: the one later by id is refused, naming the other.

//! One file per document kind, each with its checks and their tests:
//!
//! | file | checks |
//! |---|---|
//! | [`build`] | the builder: [`build_snapshot`], one document at a time in isolation, the last good version kept, the [`config_digest`] |
//! | `api` | `apis/<api_id>`: bindings, backend, schemas, owner |
//! | `policy` | an API's `policy`, and its [`hot_policy`] (cache, hot keys) |
//! | `cluster` | `clusters/<name>`: endpoints, balancing, health, failover, sleep, autoscale, gRPC client settings |
//! | `app` | `apps/<app_key>`: secret, APIs and topics, rate limits, callback URL |
//! | `topic` | `topics/<name>`: a notification topic |
//! | `switch` | `switches/<api_id>` and key-level `switches/<api_id>@<label>` |
//! | `alert` | `alerts/<name>`: [`check_alert`], used by the registry too |
//! | `ipacl` | `ipacl`: CIDR lists ([`parse_net`]) |
//! | `descriptor` | `descriptors/<sha256>`: a FileDescriptorSet |
//! | `fields` | names, JSON, header names, [`check_email`], quoting values in reasons |

mod alert;
mod api;
mod app;
mod build;
mod cluster;
mod descriptor;
mod fields;
mod ipacl;
mod policy;
mod switch;
#[cfg(test)]
mod test_support;
mod topic;

pub use alert::{check_alert, MAX_ALERT_FOR_S};
pub use api::{MAX_ADDITIONAL_BINDINGS, MAX_SCHEMA_DEPTH, METHODS};
pub use app::{MAX_CALLBACK_URL_CHARS, MIN_SECRET_CHARS};
pub use build::{build_snapshot, config_digest, INTERNAL_ERROR_REASON};
pub use fields::{check_email, MAX_TIMEOUT_MS};
pub use ipacl::parse_net;
pub use policy::{
    hot_policy, DEFAULT_CACHE_BODY_BYTES, DEFAULT_CACHE_ENTRIES, MAX_CACHE_BODY_BYTES,
    MAX_CACHE_ENTRIES, MAX_CACHE_QUERY_NAMES, MAX_CACHE_TTL_MS, MAX_HOT_TOP,
};
pub use switch::{MAX_MATCH_VALUES, MAX_MATCH_VALUE_CHARS};
pub use topic::MAX_RETENTION_S;
