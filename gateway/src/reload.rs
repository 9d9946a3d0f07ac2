//! The reload loop of one plane: receive trees from the source, build and validate a
//! snapshot (keeping the last good version of any bad document), swap it in, and write it to
//! the disk snapshot as last-known-good. Runs on the control runtime, never on the request
//! path.

use crate::runtime::Plane;
use portico_control::{build_snapshot, ConfigSource, Snapshot, Tree};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Called after each applied snapshot (e.g. to update the node registration).
pub type OnApplied = Arc<dyn Fn(&Snapshot) + Send + Sync>;

/// Applies one tree to `plane`; returns the snapshot built.
pub fn apply_tree(plane: &Plane, tree: &Tree) -> Arc<Snapshot> {
    let started = Instant::now();
    let previous = plane.current.load_full();
    let has_previous = plane.ready.load(std::sync::atomic::Ordering::Acquire);
    let snapshot = Arc::new(build_snapshot(
        tree,
        has_previous.then_some(previous.snapshot.as_ref()),
    ));
    let m = &plane.shared.metrics;
    m.snapshot_build_seconds
        .observe(started.elapsed().as_secs_f64());
    let unchanged = has_previous && snapshot.version.digest == previous.snapshot.version.digest;
    m.config_reloads
        .with_label_values(&[
            plane.kind.as_str(),
            if unchanged { "unchanged" } else { "applied" },
        ])
        .inc();
    for r in &snapshot.rejected {
        tracing::warn!(plane = plane.kind.as_str(), path = %r.path, reason = %r.reason, kept_previous = r.kept_previous, "configuration document rejected");
    }
    plane.apply(snapshot.clone());
    tracing::info!(
        plane = plane.kind.as_str(),
        generation = snapshot.version.generation,
        digest = %snapshot.version.digest,
        apis = snapshot.apis.len(),
        rejected = snapshot.rejected.len(),
        build_us = started.elapsed().as_micros() as u64,
        "configuration applied"
    );
    snapshot
}

/// Runs `source` for `plane` until the process ends.
pub async fn run(
    plane: Arc<Plane>,
    source: Arc<dyn ConfigSource>,
    snapshot_dir: Option<PathBuf>,
    on_applied: Option<OnApplied>,
) {
    let (tx, mut rx) = mpsc::channel::<Tree>(4);
    let src = source.clone();
    tokio::spawn(async move { src.run(tx).await });
    while let Some(mut tree) = rx.recv().await {
        // Coalesce a burst: only the newest tree matters.
        while let Ok(newer) = rx.try_recv() {
            tree = newer;
        }
        let snapshot = apply_tree(&plane, &tree);
        plane.source.store(Arc::new(source.describe()));
        if let Some(f) = &on_applied {
            f(&snapshot);
        }
        if let Some(dir) = snapshot_dir.clone() {
            let snap = snapshot.clone();
            let res = tokio::task::spawn_blocking(move || {
                portico_control::store::write_snapshot(&dir, &snap)
            })
            .await;
            match res {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "writing the disk snapshot failed"),
                Err(e) => tracing::error!(error = %e, "disk snapshot task failed"),
            }
        }
    }
}
