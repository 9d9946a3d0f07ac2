//! The public document (`GET /portal/openapi.json`), cached: the route needs no credentials,
//! so what one request costs (reading the live tree from ZooKeeper, decoding descriptors,
//! building schemas, examples and five code snippets per operation) must not be paid again by
//! each of many callers. One build at a time (callers meanwhile wait for it and share it);
//! the result is reused for [`FRESH_FOR`] without looking at ZooKeeper, and after that for as
//! long as the live tree's digest and the gateway addresses stay the same.
//!
//! An app's document (`GET /portal/apps/<key>/openapi.json`) is built once per app for a
//! given live tree and gateway addresses, too ([`AppDocuments`]): the tree is still read and
//! the signature checked on every request, but the document (tens of milliseconds of schemas,
//! examples and snippets) is not made again while nothing it is made of has changed.

use super::catalog::{self, Live};
use super::openapi::{self, Audience, Servers};
use crate::error::{ApiError, ApiResult};
use crate::state::Shared;
use axum::body::Bytes;
use portico_control::v1;
use std::collections::HashMap;
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
        let key = built_from(&live, &servers);
        if let Some(e) = slot.as_mut().filter(|e| e.key == key) {
            e.checked = Instant::now();
            return Ok(e.body.clone());
        }
        let apis = catalog::public_apis(&live.snapshot);
        let started = Instant::now();
        let body = encode(&openapi::document(
            &live.snapshot,
            &apis,
            &servers,
            Audience::Public,
        ))?;
        tracing::info!(
            digest = %live.snapshot.version.digest,
            apis = apis.len(),
            bytes = body.len(),
            build_ms = started.elapsed().as_millis() as u64,
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

/// What a document is made of: the live tree's digest and the servers it names.
fn built_from(live: &Live, servers: &Servers) -> String {
    format!(
        "{}|{}|{}",
        live.snapshot.version.digest,
        servers.live.join(" "),
        servers.sandbox.join(" ")
    )
}

fn encode(doc: &serde_json::Value) -> ApiResult<Bytes> {
    serde_json::to_vec(doc)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("encoding the OpenAPI document: {e}")))
}

/// The most apps whose documents are kept at once (beyond that, the oldest tree's are
/// dropped first, then all).
const MAX_APP_DOCUMENTS: usize = 1024;

/// One registry's cached app documents: app key → (what it was built from, its JSON bytes).
#[derive(Default)]
pub struct AppDocuments {
    entries: std::sync::Mutex<HashMap<String, (String, Bytes)>>,
}

impl AppDocuments {
    /// The document of the APIs `app` (key `app_key`) may call in `live`: the one built
    /// before while the tree and the servers are the same, else built anew. Call it only
    /// once the request is verified as `app_key`'s.
    pub fn get(&self, live: &Live, app_key: &str, app: &v1::App) -> ApiResult<Bytes> {
        let servers = catalog::servers(&live.nodes);
        let key = built_from(live, &servers);
        if let Some((_, body)) = self.lock().get(app_key).filter(|(k, _)| *k == key) {
            return Ok(body.clone());
        }
        // Built outside the lock: another app's request need not wait for this one.
        let apis = catalog::app_apis(&live.snapshot, app);
        let started = Instant::now();
        let body = encode(&openapi::document(
            &live.snapshot,
            &apis,
            &servers,
            Audience::App(app_key, app),
        ))?;
        tracing::info!(
            app_key,
            digest = %live.snapshot.version.digest,
            apis = apis.len(),
            bytes = body.len(),
            build_ms = started.elapsed().as_millis() as u64,
            "portal: app OpenAPI document built"
        );
        let mut entries = self.lock();
        if entries.len() >= MAX_APP_DOCUMENTS && !entries.contains_key(app_key) {
            entries.retain(|_, (k, _)| *k == key);
            if entries.len() >= MAX_APP_DOCUMENTS {
                entries.clear();
            }
        }
        entries.insert(app_key.to_owned(), (key, body.clone()));
        Ok(body)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Bytes)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portico_control::Snapshot;
    use std::sync::Arc;

    fn live(digest: &str, app: &v1::App) -> Live {
        let mut snapshot = Snapshot::default();
        snapshot.version.digest = digest.into();
        snapshot
            .apps
            .insert("merchant-1".into(), Arc::new(app.clone()));
        Live {
            snapshot,
            nodes: Vec::new(),
        }
    }

    #[test]
    fn an_app_document_is_built_once_per_tree() {
        let app = v1::App {
            secret: "s3cr3t-value".into(),
            status: v1::AppStatus::Active,
            apis: vec!["*".into()],
            rate_limits: vec![],
            name: None,
            topics: Vec::new(),
            callback_url: None,
        };
        let cache = AppDocuments::default();
        let first = cache.get(&live("d1", &app), "merchant-1", &app).unwrap();
        let again = cache.get(&live("d1", &app), "merchant-1", &app).unwrap();
        assert_eq!(first.as_ptr(), again.as_ptr(), "the same tree: not rebuilt");
        let other = cache.get(&live("d1", &app), "merchant-2", &app).unwrap();
        assert_ne!(
            first.as_ptr(),
            other.as_ptr(),
            "another app: its own document"
        );
        let changed = cache.get(&live("d2", &app), "merchant-1", &app).unwrap();
        assert_ne!(first.as_ptr(), changed.as_ptr(), "a new tree: rebuilt");
        let doc: serde_json::Value = serde_json::from_slice(&changed).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
    }
}
