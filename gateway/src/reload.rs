//! The reload loop of one plane, supervised: receive trees from the source, build and
//! validate a snapshot (keeping the last good version of any bad document), swap it in, and
//! write it to the disk snapshot as last-known-good. Runs on the control runtime, never on
//! the request path (docs/ARCHITECTURE.md, "Configuration").
//!
//! Failures are contained and reported, never silent:
//! - a build that panics (building the snapshot or the runtime from it) is caught: the
//!   previous configuration keeps being served, and the tree is reported as rejected (a
//!   `rejected_documents` entry with path `*` in `/status`, `result="failed"` in
//!   `portico_config_reloads_total`, `kind="snapshot"` in
//!   `portico_config_document_rejections_total`) until a later tree builds;
//! - a loop that dies (it panicked, or its source stopped) is restarted by [`run`] after a
//!   short, growing delay, with an error log line, `portico_config_loop_restarts_total` and
//!   `config_loop` in `/status` (running or not, restarts, the last reason). The restarted
//!   loop runs the source again, which sends the whole tree.

use crate::runtime::Plane;
use portico_control::{build_snapshot, ConfigSource, Rejection, Snapshot, Tree};
use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};

/// Called after each applied snapshot (e.g. to update the node registration).
pub type OnApplied = Arc<dyn Fn(&Snapshot) + Send + Sync>;

/// The first restart of a dead loop waits this long; each further one twice as long.
const MIN_RESTART_DELAY: Duration = Duration::from_millis(100);
/// The longest wait before a restart.
const MAX_RESTART_DELAY: Duration = Duration::from_secs(10);
/// A loop that ran this long before dying is restarted after [`MIN_RESTART_DELAY`] again.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// The `rejected_documents` path of a tree whose whole build failed.
pub const FAILED_BUILD_PATH: &str = "*";

/// Applies one tree to `plane`; returns the snapshot applied, or `None` when building it
/// panicked (the previous configuration is kept and the failure reported).
pub fn apply_tree(plane: &Plane, tree: &Tree) -> Option<Arc<Snapshot>> {
    apply_with(plane, tree, build_snapshot)
}

/// [`apply_tree`] with the snapshot builder as a parameter (tests make it fail).
fn apply_with(
    plane: &Plane,
    tree: &Tree,
    build: impl FnOnce(&Tree, Option<&Snapshot>) -> Snapshot,
) -> Option<Arc<Snapshot>> {
    let started = Instant::now();
    let built = panic::catch_unwind(AssertUnwindSafe(|| {
        let previous = plane.current.load_full();
        let has_previous = plane.ready.load(Ordering::Acquire);
        let snapshot = Arc::new(build(tree, has_previous.then_some(&*previous.snapshot)));
        plane
            .shared
            .metrics
            .snapshot_build_seconds
            .observe(started.elapsed().as_secs_f64());
        let unchanged = has_previous && snapshot.version.digest == previous.snapshot.version.digest;
        plane.apply(Arc::clone(&snapshot));
        (snapshot, unchanged)
    }));
    match built {
        Ok((snapshot, unchanged)) => {
            applied(plane, &snapshot, unchanged, started);
            Some(snapshot)
        }
        Err(payload) => {
            build_failed(plane, tree, &panic_message(payload.as_ref()));
            None
        }
    }
}

/// Logs and counts an applied snapshot.
fn applied(plane: &Plane, snapshot: &Snapshot, unchanged: bool, started: Instant) {
    let name = plane.kind.as_str();
    let result = if unchanged { "unchanged" } else { "applied" };
    plane
        .shared
        .metrics
        .config_reloads
        .with_label_values(&[name, result])
        .inc();
    for r in &snapshot.rejected {
        tracing::warn!(plane = name, path = %r.path, reason = %r.reason, kept_previous = r.kept_previous, "configuration document rejected");
    }
    tracing::info!(
        plane = name,
        generation = snapshot.version.generation,
        digest = %snapshot.version.digest,
        apis = snapshot.apis.len(),
        rejected = snapshot.rejected.len(),
        build_us = started.elapsed().as_micros() as u64,
        "configuration applied"
    );
}

/// Reports a tree whose build panicked: the previous configuration stays applied.
fn build_failed(plane: &Plane, tree: &Tree, why: &str) {
    let name = plane.kind.as_str();
    let reason = format!(
        "building the configuration (generation {}) failed: {why}; the previous configuration is kept",
        tree.generation
    );
    tracing::error!(plane = name, reason = %reason, "configuration rejected");
    let m = &plane.shared.metrics;
    m.config_reloads.with_label_values(&[name, "failed"]).inc();
    m.config_rejections
        .with_label_values(&[name, "snapshot"])
        .inc();
    plane.reload.build_failure.store(Some(Arc::new(Rejection {
        path: FAILED_BUILD_PATH.to_owned(),
        reason,
        kept_previous: true,
        // The build panicked: a bug, not the tree.
        internal: true,
    })));
    m.config_rejected_documents
        .with_label_values(&[name])
        .set(plane.rejected_documents().len() as i64);
}

/// The message of a panic payload (`panic!("...")` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Runs `source` for `plane` until the process ends: the reload loop, restarted whenever it
/// dies (see the module docs).
pub async fn run(
    plane: Arc<Plane>,
    source: Arc<dyn ConfigSource>,
    snapshot_dir: Option<PathBuf>,
    on_applied: Option<OnApplied>,
) {
    let mut delay = MIN_RESTART_DELAY;
    loop {
        let started = Instant::now();
        plane.reload.running.store(true, Ordering::Release);
        let task = tokio::spawn(reload_loop(
            Arc::clone(&plane),
            Arc::clone(&source),
            snapshot_dir.clone(),
            on_applied.clone(),
        ));
        let ended = task.await;
        plane.reload.running.store(false, Ordering::Release);
        let reason = match ended {
            Ok(()) => "its configuration source stopped".to_owned(),
            Err(e) if e.is_panic() => format!("it panicked: {}", panic_message(&*e.into_panic())),
            // Cancelled: the runtime is shutting down.
            Err(_) => return,
        };
        if started.elapsed() >= HEALTHY_RUN {
            delay = MIN_RESTART_DELAY;
        }
        restarting(&plane, &reason, delay);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RESTART_DELAY);
    }
}

/// Logs, counts and records a restart of `plane`'s loop.
fn restarting(plane: &Plane, reason: &str, delay: Duration) {
    let name = plane.kind.as_str();
    tracing::error!(plane = name, reason = %reason, delay_ms = delay.as_millis() as u64, "configuration loop died; restarting it");
    plane
        .shared
        .metrics
        .config_loop_restarts
        .with_label_values(&[name])
        .inc();
    plane.reload.restarts.fetch_add(1, Ordering::Relaxed);
    let at = portico_control::clock::now_ms();
    plane
        .reload
        .last_restart
        .store(Some(Arc::new((at, reason.to_owned()))));
}

/// The source's task, aborted when the loop that reads it ends (or unwinds).
struct Feeder(Option<JoinHandle<()>>);

impl Feeder {
    /// How the source's task ended (after its channel closed).
    async fn ended(mut self) -> Result<(), JoinError> {
        match self.0.take() {
            Some(task) => task.await,
            None => Ok(()),
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// One run of the reload loop: until the source stops (a panic in the source is passed on
/// to [`run`]).
async fn reload_loop(
    plane: Arc<Plane>,
    source: Arc<dyn ConfigSource>,
    snapshot_dir: Option<PathBuf>,
    on_applied: Option<OnApplied>,
) {
    let (tx, mut rx) = mpsc::channel::<Tree>(4);
    let src = Arc::clone(&source);
    let feeder = Feeder(Some(tokio::spawn(async move { src.run(tx).await })));
    while let Some(mut tree) = rx.recv().await {
        // Coalesce a burst: only the newest tree matters.
        while let Ok(newer) = rx.try_recv() {
            tree = newer;
        }
        let Some(snapshot) = apply_tree(&plane, &tree) else {
            continue;
        };
        plane.source.store(Arc::new(source.describe()));
        if let Some(f) = &on_applied {
            f(&snapshot);
        }
        if let Some(dir) = &snapshot_dir {
            write_disk_snapshot(dir.clone(), snapshot).await;
        }
    }
    if let Err(e) = feeder.ended().await {
        if e.is_panic() {
            panic::resume_unwind(e.into_panic());
        }
    }
}

/// Writes `snapshot` as the last-known-good tree in `dir` (off the async workers).
async fn write_disk_snapshot(dir: PathBuf, snapshot: Arc<Snapshot>) {
    let res = tokio::task::spawn_blocking(move || {
        portico_control::store::write_snapshot(&dir, &snapshot)
    })
    .await;
    match res {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "writing the disk snapshot failed"),
        Err(e) => tracing::error!(error = %e, "disk snapshot task failed"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::{cluster_doc, http_api_doc, plane, tree};
    use async_trait::async_trait;
    use serde_json::json;
    use std::sync::atomic::AtomicUsize;

    fn good_tree() -> Tree {
        tree(&[
            ("apis/a", http_api_doc("a", "c", None, json!({}))),
            ("clusters/c", cluster_doc(&["127.0.0.1:1".to_owned()])),
        ])
    }

    fn metric(plane: &Plane, line_start: &str) -> Option<String> {
        plane
            .shared
            .metrics
            .render()
            .lines()
            .find(|l| l.starts_with(line_start))
            .map(str::to_owned)
    }

    #[test]
    fn a_panicking_build_is_a_rejection_and_the_previous_configuration_stays() {
        let plane = plane();
        let first = apply_tree(&plane, &good_tree()).unwrap();
        let serving = plane.current.load_full();

        let failed = apply_with(&plane, &good_tree(), |_, _| panic!("validator bug"));
        assert!(failed.is_none());
        assert!(Arc::ptr_eq(&serving, &plane.current.load_full()));
        assert_eq!(plane.current.load().snapshot.version, first.version);
        let rejected = plane.rejected_documents();
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].path, FAILED_BUILD_PATH);
        assert!(
            rejected[0].reason.contains("validator bug"),
            "{:?}",
            rejected[0]
        );
        assert!(rejected[0].kept_previous);
        assert_eq!(
            metric(
                &plane,
                r#"portico_config_reloads_total{plane="live",result="failed"}"#
            ),
            Some(r#"portico_config_reloads_total{plane="live",result="failed"} 1"#.to_owned())
        );
        assert!(metric(
            &plane,
            r#"portico_config_document_rejections_total{kind="snapshot",plane="live"} 1"#
        )
        .is_some());
        assert!(metric(
            &plane,
            r#"portico_config_rejected_documents{plane="live"} 1"#
        )
        .is_some());

        // The next tree that builds clears it.
        assert!(apply_tree(&plane, &good_tree()).is_some());
        assert!(plane.rejected_documents().is_empty());
        assert!(metric(
            &plane,
            r#"portico_config_rejected_documents{plane="live"} 0"#
        )
        .is_some());
        assert!(metric(
            &plane,
            r#"portico_config_reloads_total{plane="live",result="unchanged"} 1"#
        )
        .is_some());
    }

    #[test]
    fn a_build_that_panics_before_any_configuration_leaves_the_plane_unready() {
        let plane = plane();
        assert!(apply_with(&plane, &good_tree(), |_, _| panic!("boom")).is_none());
        assert!(!plane.ready.load(Ordering::Acquire));
        assert_eq!(plane.rejected_documents().len(), 1);
    }

    /// A source that stops on its first run, panics on its second, and from its third on
    /// sends `tree` once and stays connected.
    struct Flaky {
        runs: AtomicUsize,
        tree: Tree,
    }

    #[async_trait]
    impl ConfigSource for Flaky {
        fn describe(&self) -> String {
            "test:flaky".to_owned()
        }

        async fn run(&self, updates: mpsc::Sender<Tree>) {
            match self.runs.fetch_add(1, Ordering::SeqCst) {
                0 => {}
                1 => panic!("source lost its session"),
                _ => {
                    let _ = updates.send(self.tree.clone()).await;
                    updates.closed().await;
                }
            }
        }
    }

    #[tokio::test]
    async fn a_dead_loop_is_restarted_and_says_so() {
        let plane = Arc::new(plane());
        let source = Arc::new(Flaky {
            runs: AtomicUsize::new(0),
            tree: good_tree(),
        });
        let supervisor = tokio::spawn(run(Arc::clone(&plane), source.clone(), None, None));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !plane.ready.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the loop never came back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(source.runs.load(Ordering::SeqCst), 3);
        assert_eq!(plane.reload.restarts.load(Ordering::Relaxed), 2);
        assert!(plane.reload.running.load(Ordering::Acquire));
        let last = plane.reload.last_restart.load_full().unwrap();
        assert!(last.1.contains("source lost its session"), "{}", last.1);
        assert_eq!(plane.source.load().as_str(), "test:flaky");
        assert!(metric(
            &plane,
            r#"portico_config_loop_restarts_total{plane="live"} 2"#
        )
        .is_some());
        supervisor.abort();
    }
}
