//! The public document (`GET /portal/openapi.json`), cached: the route needs no credentials,
//! so what one request costs (reading the live tree from ZooKeeper, decoding descriptors,
//! building schemas, examples and five code snippets per operation) must not be paid again by
//! each of many callers. One build at a time (callers meanwhile wait for it and share it);
//! the result is reused for [`FRESH_FOR`] without looking at ZooKeeper, and after that for as
//! long as the live tree's digest and the gateway addresses stay the same.

use super::{catalog, openapi};
use crate::error::{ApiError, ApiResult};
use crate::state::Shared;
use axum::body::Bytes;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long a built document is served without reading the tree again: a change published
/// to ZooKeeper shows in the portal at most this much later.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

struct Entry {
    checked: Instant,
    /// The live tree's digest and the servers the document was built for.
    key: String,
    body: Bytes,
}

/// One registry's cached public document.
#[derive(Default)]
pub struct PublicDocument {
    entry: Mutex<Option<Entry>>,
}

impl PublicDocument {
    /// The public document's JSON bytes: the cached ones while fresh or while the tree and
    /// the nodes are unchanged, else built anew.
    pub async fn get(&self, state: &Shared) -> ApiResult<Bytes> {
        let mut slot = self.entry.lock().await;
        if let Some(e) = slot.as_ref().filter(|e| e.checked.elapsed() < FRESH_FOR) {
            return Ok(e.body.clone());
        }
        let live = catalog::load(state).await?;
        let servers = catalog::servers(&live.nodes);
        let key = format!(
            "{}|{}|{}",
            live.snapshot.version.digest,
            servers.live.join(" "),
            servers.sandbox.join(" ")
        );
        if let Some(e) = slot.as_mut().filter(|e| e.key == key) {
            e.checked = Instant::now();
            return Ok(e.body.clone());
        }
        let apis = catalog::public_apis(&live.snapshot);
        let doc = openapi::document(&live.snapshot, &apis, &servers, openapi::Audience::Public);
        let body = Bytes::from(
            serde_json::to_vec(&doc)
                .map_err(|e| ApiError::internal(format!("encoding the OpenAPI document: {e}")))?,
        );
        tracing::info!(
            digest = %live.snapshot.version.digest,
            apis = apis.len(),
            bytes = body.len(),
            "portal: public OpenAPI document built"
        );
        *slot = Some(Entry {
            checked: Instant::now(),
            key,
            body: body.clone(),
        });
        Ok(body)
    }
}
