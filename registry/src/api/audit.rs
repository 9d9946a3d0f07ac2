//! The audit log as the routes write it: one entry per write, under the request's id. The log
//! itself (entries, trimming, the outside actor) is [`crate::audit`].

use super::context::Ctx;
use crate::state::Shared;
use serde_json::Value;

pub use crate::audit::{append, AUDIT_KEEP, OUTSIDE_ACTOR};

/// Appends an entry for the request `ctx` (see [`crate::audit::record`]).
pub async fn audit(
    state: &Shared,
    ctx: &Ctx,
    actor: &str,
    action: &str,
    target: &str,
    detail: Value,
) {
    crate::audit::record(state, &ctx.request_id, actor, action, target, detail).await;
}
