//! The directory source (`--config-dir DIR`): the tree of docs/OPERATIONS.md ("The configuration tree") as files.
//!
//! ```text
//! DIR/apis/<api_id>.json         DIR/apps/<app_key>.json     DIR/ipacl.json
//! DIR/clusters/<name>.json       DIR/switches/<api_id>.json  DIR/descriptors/<sha256>.pb
//! ```
//!
//! Anything else is ignored: `sandbox/`, `nodes/`, `history/`, sub-folders, dot-files, files
//! with another extension, and editor leftovers (`*~`, `*.swp`, `#*#`, `*.tmp`). The same
//! layout is the registry's export and the gateway's disk snapshot (`crate::store`).
//!
//! The source checks a cheap fingerprint (path, length, mtime) and re-reads the tree when it
//! changes; a file modified within the last two seconds is also re-read on each check, so
//! that two writes inside one mtime tick are not missed.
//!
//! When to check: the operating system reports changes under the root ([`Watch`]: inotify
//! on Linux, through the `notify` crate), and a change is checked at once, a burst of them
//! (an export of the whole tree) as one check per [`EVENT_GAP`] (scaled by the tree's size
//! as below). Besides, the tree is checked every [`WATCHED_INTERVAL`] in case a change was
//! not reported (a network filesystem written from another host). Where no watch can be set
//! up (the root is missing, the system's watch limit is reached), and while an entry cannot
//! be read (a repair may change nothing that is reported), the source polls every 250 ms;
//! a large tree waits longer between polls, [`PAUSE_PER_FILE`] per file it holds (up to
//! [`MAX_INTERVAL`]): a check costs a few µs per file (10,000 APIs: 1.5 s between polls,
//! where every 250 ms cost 13% of a core). The pause depends on the file count, not on how
//! long a scan took, so a busy machine does not stretch it.

use crate::source::ConfigSource;
use crate::tree::{DocKind, Tree, MAX_DOCUMENT_BYTES};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// The default polling interval of [`DirSource`].
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(250);

/// The pause between two polls grows by this much per document file (a poll stats every
/// file: ≈ 3 µs each on the benchmark machine, so ≈ 2% of a core).
pub const PAUSE_PER_FILE: Duration = Duration::from_micros(150);
/// The longest pause between two polls, however large the tree.
pub const MAX_INTERVAL: Duration = Duration::from_secs(5);

/// How long to wait after a poll that found `files` document files: `interval`, or
/// [`PAUSE_PER_FILE`] per file when that is longer, never more than [`MAX_INTERVAL`] (nor
/// less than `interval`).
pub fn pause_for(interval: Duration, files: usize) -> Duration {
    PAUSE_PER_FILE
        .saturating_mul(u32::try_from(files).unwrap_or(u32::MAX))
        .min(MAX_INTERVAL)
        .max(interval)
}

/// How often a watched tree is checked anyway (changes the system did not report).
pub const WATCHED_INTERVAL: Duration = Duration::from_secs(5);

/// The least time between two checks woken by reported changes (a small tree; a large one
/// waits [`PAUSE_PER_FILE`] per file, as when polling), so that a burst of writes is read as
/// one tree, not file by file.
pub const EVENT_GAP: Duration = Duration::from_millis(100);

/// How long a reported change settles before the check (create, write and close of one file
/// arrive as three events).
const SETTLE: Duration = Duration::from_millis(10);

/// Files modified this recently are re-read on every poll (mtime granularity guard).
const RECENT: Duration = Duration::from_secs(2);

/// Reads a directory tree (`--config-dir`; docs/operations/config-tree.md, "The configuration tree") and
/// watches it by polling.
#[derive(Debug, Clone)]
pub struct DirSource {
    pub root: PathBuf,
    /// How often the directory is checked for changes.
    pub interval: Duration,
}

impl DirSource {
    /// A source for the tree under `root`, polled every 250 ms.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirSource {
            root: root.into(),
            interval: DEFAULT_INTERVAL,
        }
    }

    /// Sets the polling interval.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Reads the tree under `root` once (see [`read_tree`]).
    pub fn read_tree(root: &Path) -> io::Result<Tree> {
        read_tree(root)
    }
}

/// The file (relative to the tree's root) holding a tree document: `apis/x` →
/// `apis/x.json`, `ipacl` → `ipacl.json`, `descriptors/<sha>` → `descriptors/<sha>.pb`.
/// `None` for a path that is not a document, or a name that cannot be a file name here
/// (empty, starting with `.`, holding `/` or `\`).
pub fn file_path_for(tree_path: &str) -> Option<PathBuf> {
    let (kind, name) = DocKind::classify(tree_path)?;
    if kind == DocKind::IpAcl {
        return Some(PathBuf::from("ipacl.json"));
    }
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0']) {
        return None;
    }
    Some(Path::new(kind.dir()).join(format!("{name}.{}", kind.file_ext())))
}

/// Whether a file name is an editor leftover or hidden file, never a document.
fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.')
        || name.starts_with('#')
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".tmp")
}

/// One document file found by a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    tree_path: String,
    file: PathBuf,
    len: u64,
    mtime_ns: u128,
}

/// What a scan found: the document files, the entries that cannot be documents as they are
/// (tree path → why), and the newest mtime (files and folders, in ms).
#[derive(Debug, Default)]
struct Scan {
    entries: Vec<Entry>,
    unreadable: Vec<(String, String)>,
    max_mtime_ms: u64,
}

fn mtime_ns(meta: &std::fs::Metadata) -> u128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

fn ns_to_ms(ns: u128) -> u64 {
    u64::try_from(ns / 1_000_000).unwrap_or(u64::MAX)
}

impl Scan {
    /// Records the document file `file` at `tree_path` as `metadata` (following links)
    /// describes it: a regular file is an entry, anything else (a folder, a FIFO, a dangling
    /// or looping link) is unreadable with the reason; a file that vanished is nothing.
    fn add(&mut self, tree_path: String, file: PathBuf, metadata: io::Result<std::fs::Metadata>) {
        match metadata {
            Ok(meta) if meta.is_file() => {
                let ns = mtime_ns(&meta);
                self.max_mtime_ms = self.max_mtime_ms.max(ns_to_ms(ns));
                self.entries.push(Entry {
                    tree_path,
                    file,
                    len: meta.len(),
                    mtime_ns: ns,
                });
            }
            Ok(_) => self.unreadable(tree_path, &file, "not a regular file".to_owned()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling link is a document that cannot be read; a file removed since
                // the listing is simply gone.
                if std::fs::symlink_metadata(&file).is_ok() {
                    self.unreadable(tree_path, &file, e.to_string());
                }
            }
            Err(e) => self.unreadable(tree_path, &file, e.to_string()),
        }
    }

    fn unreadable(&mut self, tree_path: String, file: &Path, reason: String) {
        // Debug only: the source polls, and `build_snapshot` logs the rejection once per change.
        tracing::debug!(file = %file.display(), reason = %reason, "skipping a configuration entry");
        self.unreadable.push((tree_path, reason));
    }
}

/// Lists the document files under `root` with their length and mtime (no contents read).
/// Only a root that cannot be listed is an error. A kind folder that cannot be listed (or
/// not to its end) is recorded as unreadable, as is an entry at a document path that cannot
/// be a document (not a regular file, a name that is not UTF-8): `build_snapshot` rejects
/// each alone and keeps what it held before.
fn scan(root: &Path) -> io::Result<Scan> {
    let meta = std::fs::metadata(root)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", root.display()),
        ));
    }
    let mut scan = Scan {
        max_mtime_ms: ns_to_ms(mtime_ns(&meta)),
        ..Scan::default()
    };
    let ipacl = root.join("ipacl.json");
    let ipacl_meta = std::fs::metadata(&ipacl);
    scan.add("ipacl".to_owned(), ipacl, ipacl_meta);

    for kind in [
        DocKind::Api,
        DocKind::Cluster,
        DocKind::App,
        DocKind::Switch,
        DocKind::Descriptor,
        DocKind::Alert,
        DocKind::Topic,
    ] {
        scan_kind(root, kind, &mut scan);
    }
    scan.entries.sort_by(|a, b| a.tree_path.cmp(&b.tree_path));
    Ok(scan)
}

/// Adds the documents of one kind folder to `scan`.
fn scan_kind(root: &Path, kind: DocKind, scan: &mut Scan) {
    let dir = root.join(kind.dir());
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e)
            if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory =>
        {
            return
        }
        Err(e) => {
            let reason = format!("cannot list the folder: {e}");
            return scan.unreadable(kind.dir().to_owned(), &dir, reason);
        }
    };
    if let Ok(m) = std::fs::metadata(&dir) {
        scan.max_mtime_ms = scan.max_mtime_ms.max(ns_to_ms(mtime_ns(&m)));
    }
    let suffix = format!(".{}", kind.file_ext());
    for de in rd {
        let de = match de {
            Ok(de) => de,
            Err(e) => {
                let reason = format!("cannot list the folder to its end: {e}");
                return scan.unreadable(kind.dir().to_owned(), &dir, reason);
            }
        };
        let file = de.path();
        let os_name = de.file_name();
        let fname = os_name.to_string_lossy();
        if is_ignored_name(&fname) {
            continue;
        }
        let Some(name) = fname.strip_suffix(&suffix).filter(|n| !n.is_empty()) else {
            continue;
        };
        let tree_path = format!("{}/{name}", kind.dir());
        if DocKind::classify(&tree_path).is_none() {
            continue;
        }
        if os_name.to_str().is_none() {
            scan.unreadable(tree_path, &file, "its file name is not UTF-8".to_owned());
            continue;
        }
        let meta = std::fs::metadata(&file);
        scan.add(tree_path, file, meta);
    }
}

/// Reads one document file, refusing (unread) one over [`MAX_DOCUMENT_BYTES`].
fn read_document(file: &Path) -> io::Result<Vec<u8>> {
    let f = std::fs::File::open(file)?;
    let limit = u64::try_from(MAX_DOCUMENT_BYTES).unwrap_or(u64::MAX);
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > limit {
        return Err(io::Error::other(format!(
            "{len} bytes, more than the limit of {MAX_DOCUMENT_BYTES}"
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    f.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(io::Error::other(format!(
            "more than the limit of {MAX_DOCUMENT_BYTES} bytes"
        )));
    }
    Ok(bytes)
}

/// Reads the files a scan found. A file that cannot be read is skipped with a warning and
/// recorded in [`Tree::unreadable`].
fn read_entries(scan: &Scan) -> Tree {
    let mut tree = Tree {
        generation: scan.max_mtime_ms,
        ..Tree::default()
    };
    for (path, reason) in &scan.unreadable {
        tree.insert_unreadable(path, reason.clone());
    }
    for e in &scan.entries {
        match read_document(&e.file) {
            Ok(bytes) => {
                tree.insert(&e.tree_path, bytes);
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::debug!(file = %e.file.display(), error = %err, "skipping unreadable config file");
                tree.insert_unreadable(&e.tree_path, err.to_string());
            }
        }
    }
    tree
}

/// Reads the tree under `root` once, synchronously (start-up, booting from the disk
/// snapshot, the sandbox sub-folder). The tree's generation is the newest mtime of its files
/// and folders in Unix milliseconds. Errors only if `root` cannot be listed: an unreadable
/// file or kind folder, or garbage at a document path, is skipped with a warning and listed
/// in [`Tree::unreadable`].
pub fn read_tree(root: &Path) -> io::Result<Tree> {
    Ok(read_entries(&scan(root)?))
}

type Fingerprint = (Vec<(String, u64, u128)>, Vec<(String, String)>);

fn fingerprint(scan: &Scan) -> Fingerprint {
    (
        scan.entries
            .iter()
            .map(|e| (e.tree_path.clone(), e.len, e.mtime_ns))
            .collect(),
        scan.unreadable.clone(),
    )
}

fn has_recent(scan: &Scan) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    scan.entries
        .iter()
        .any(|e| now.saturating_sub(e.mtime_ns) < RECENT.as_nanos())
}

/// Change notification for a root directory and everything under it. Reads do not wake it
/// (the source's own reads would); errors do (a queue overflow means changes were lost,
/// which the check finds out).
struct Watch {
    _watcher: notify::RecommendedWatcher,
    changed: mpsc::Receiver<()>,
    /// The watched directory's identity: a root replaced by another directory (renamed
    /// over) is watched again.
    root_id: Option<(u64, u64)>,
}

impl Watch {
    fn new(root: &Path) -> Option<Watch> {
        use notify::event::{AccessKind, AccessMode, EventKind};
        use notify::Watcher as _;
        let root_id = dir_id(root);
        let (tx, rx) = mpsc::channel(1);
        let handler = move |event: notify::Result<notify::Event>| {
            let wakes = match &event {
                Ok(e) => match e.kind {
                    EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
                    EventKind::Access(_) => false,
                    _ => true,
                },
                Err(_) => true,
            };
            if wakes {
                // Full: a wake-up is already pending.
                let _ = tx.try_send(());
            }
        };
        let mut watcher = match notify::recommended_watcher(handler) {
            Ok(w) => w,
            Err(e) => {
                tracing::debug!(root = %root.display(), error = %e, "no change notification; polling");
                return None;
            }
        };
        if let Err(e) = watcher.watch(root, notify::RecursiveMode::Recursive) {
            tracing::debug!(root = %root.display(), error = %e, "cannot watch the configuration directory; polling");
            return None;
        }
        Some(Watch {
            _watcher: watcher,
            changed: rx,
            root_id,
        })
    }

    /// Whether the directory at `root` is still the one watched.
    fn still_watches(&self, root: &Path) -> bool {
        self.root_id.is_some() && dir_id(root) == self.root_id
    }
}

/// A directory's (device, inode).
fn dir_id(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[async_trait::async_trait]
impl ConfigSource for DirSource {
    fn describe(&self) -> String {
        format!("dir:{}", self.root.display())
    }

    async fn run(&self, updates: mpsc::Sender<Tree>) {
        let mut last_fp: Option<Fingerprint> = None;
        let mut last_content = None;
        let mut last_generation = 0u64;
        let mut last_error: Option<String> = None;
        let mut watch: Option<Watch> = None;
        loop {
            let root = self.root.clone();
            let prev_fp = last_fp.clone();
            // While something cannot be read, read again on every poll: fixing a permission
            // changes no mtime.
            let prev_unreadable = last_content
                .as_ref()
                .is_some_and(|(_, unreadable): &(_, BTreeMap<_, _>)| !unreadable.is_empty());
            let files = Arc::new(AtomicUsize::new(0));
            let counted = Arc::clone(&files);
            let polled =
                tokio::task::spawn_blocking(move || -> io::Result<Option<(Fingerprint, Tree)>> {
                    let scan = scan(&root)?;
                    counted.store(scan.entries.len(), Ordering::Relaxed);
                    let fp = fingerprint(&scan);
                    if prev_fp.as_ref() == Some(&fp) && !has_recent(&scan) && !prev_unreadable {
                        return Ok(None);
                    }
                    Ok(Some((fp, read_entries(&scan))))
                })
                .await;
            let files = files.load(Ordering::Relaxed);
            let readable = matches!(polled, Ok(Ok(_)));
            match polled {
                Ok(Ok(None)) => {}
                Ok(Ok(Some((fp, mut tree)))) => {
                    if last_error.take().is_some() {
                        tracing::info!(source = %self.describe(), "configuration directory readable again");
                    }
                    last_fp = Some(fp);
                    let content = (tree.docs.clone(), tree.unreadable.clone());
                    if last_content.as_ref() != Some(&content) {
                        if !tree.unreadable.is_empty() {
                            tracing::warn!(source = %self.describe(), entries = ?tree.unreadable, "configuration entries cannot be read; each is rejected alone");
                        }
                        last_generation = tree.generation.max(last_generation.saturating_add(1));
                        tree.generation = last_generation;
                        last_content = Some(content);
                        if updates.send(tree).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(Err(e)) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(source = %self.describe(), error = %msg, "cannot read the configuration directory; retrying");
                        last_error = Some(msg);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "configuration directory poll task failed"),
            }
            if !readable || watch.as_ref().is_some_and(|w| !w.still_watches(&self.root)) {
                watch = None;
            }
            if readable && watch.is_none() {
                watch = Watch::new(&self.root);
            }
            let unreadable_entries = last_content
                .as_ref()
                .is_some_and(|(_, unreadable): &(_, BTreeMap<_, _>)| !unreadable.is_empty());
            let polling = pause_for(self.interval, files);
            let pause = match &watch {
                Some(_) if !unreadable_entries => WATCHED_INTERVAL.max(self.interval),
                _ => polling,
            };
            let checked = tokio::time::Instant::now();
            let reported = async {
                match watch.as_mut() {
                    Some(w) => w.changed.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = updates.closed() => return,
                () = tokio::time::sleep(pause) => {}
                Some(()) = reported => {
                    let gap = pause_for(EVENT_GAP, files).min(pause);
                    let wait = gap.saturating_sub(checked.elapsed()).max(SETTLE);
                    tokio::select! {
                        () = updates.closed() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    if let Some(w) = watch.as_mut() {
                        while w.changed.try_recv().is_ok() {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_large_tree_is_polled_less_often_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(pause_for(ms(250), 12), ms(250));
        assert_eq!(pause_for(ms(250), 10_000), ms(1500));
        assert_eq!(pause_for(ms(250), 1_000_000), MAX_INTERVAL);
        assert_eq!(pause_for(ms(10_000), 10_000), ms(10_000));
    }

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    #[test]
    fn reads_the_layout_and_ignores_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(r, "apis/order.get.json", "{\"id\":\"order.get\"}");
        write(r, "clusters/order-svc.json", "{}");
        write(r, "apps/merchant-1.json", "{}");
        write(r, "switches/order.get.json", "{}");
        write(r, "ipacl.json", "{}");
        write(r, &format!("descriptors/{}.pb", "a".repeat(64)), "\x01\x02");
        // ignored
        write(r, "apis/.order.get.json.swp", "x");
        write(r, "apis/order.get.json~", "x");
        write(r, "apis/#order.get.json#", "x");
        write(r, "apis/notes.txt", "x");
        write(r, "apis/.json", "x");
        write(r, "apis/sub/x.json", "x");
        write(r, "descriptors/x.json", "x");
        write(r, "sandbox/apis/draft.json", "x");
        write(r, "nodes/gw-1.json", "x");
        write(r, "history/order.get/3.json", "x");
        write(r, "VERSION", "x");
        write(r, "ipacl.json.tmp", "x");
        let t = read_tree(r).unwrap();
        let paths: Vec<&str> = t.docs.keys().map(String::as_str).collect();
        let sha = "a".repeat(64);
        assert_eq!(
            paths,
            vec![
                "apis/order.get",
                "apps/merchant-1",
                "clusters/order-svc",
                &format!("descriptors/{sha}"),
                "ipacl",
                "switches/order.get"
            ]
        );
        assert_eq!(t.docs["apis/order.get"], b"{\"id\":\"order.get\"}");
        assert_eq!(t.docs[&format!("descriptors/{sha}")], b"\x01\x02");
        assert!(
            t.generation > 1_600_000_000_000,
            "generation is an mtime in ms: {}",
            t.generation
        );
        // the sandbox folder is itself a tree
        let s = read_tree(&r.join("sandbox")).unwrap();
        assert_eq!(s.docs.keys().collect::<Vec<_>>(), vec!["apis/draft"]);
    }

    #[test]
    fn garbage_at_document_paths_is_unreadable_not_fatal() {
        use std::os::unix::ffi::OsStrExt;
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(r, "apis/good.json", "{}");
        write(r, "switches/s.json", "{}");
        // A folder, a link to itself, a dangling link, a name that is not UTF-8, a file
        // over the size limit (sparse: nothing is written).
        fs::create_dir_all(r.join("apis/dir.json")).unwrap();
        std::os::unix::fs::symlink("loop.json", r.join("apis/loop.json")).unwrap();
        fs::create_dir_all(r.join("apps")).unwrap();
        std::os::unix::fs::symlink("nowhere", r.join("apps/gone.json")).unwrap();
        let bad_name = std::ffi::OsStr::from_bytes(b"bad\xff.json");
        fs::create_dir_all(r.join("clusters")).unwrap();
        fs::write(r.join("clusters").join(bad_name), "{}").unwrap();
        let big = fs::File::create(r.join("apis/big.json")).unwrap();
        big.set_len(MAX_DOCUMENT_BYTES as u64 + 1).unwrap();
        // A kind folder that cannot be listed: a link to itself.
        std::os::unix::fs::symlink("descriptors", r.join("descriptors")).unwrap();

        let t = read_tree(r).unwrap();
        assert_eq!(
            t.docs.keys().collect::<Vec<_>>(),
            vec!["apis/good", "switches/s"]
        );
        let u: Vec<&str> = t.unreadable.keys().map(String::as_str).collect();
        assert_eq!(
            u,
            vec![
                "apis/big",
                "apis/dir",
                "apis/loop",
                "apps/gone",
                "clusters/bad\u{fffd}",
                "descriptors"
            ],
            "{:?}",
            t.unreadable
        );
        assert!(t.unreadable["apis/dir"].contains("not a regular file"));
        assert!(t.unreadable["apis/big"].contains("limit"));
        assert!(t.unreadable["clusters/bad\u{fffd}"].contains("UTF-8"));
        assert!(t.unreadable["descriptors"].contains("cannot list"));
        // The snapshot built from it keeps the good documents.
        let s = crate::build_snapshot(&t, None);
        assert_eq!(
            s.rejected.len(),
            7,
            "the six, and an empty API: {:?}",
            s.rejected
        );
        assert!(s.switches.contains_key("s"));
    }

    #[tokio::test]
    async fn unreadable_entries_are_sent_and_their_repair_seen() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().to_path_buf();
        write(&r, "switches/a.json", "{}");
        std::os::unix::fs::symlink("b.json", r.join("switches/b.json")).unwrap();
        let (mut rx, task) = start(&r, Duration::from_millis(10));
        let t1 = next(&mut rx).await;
        assert!(t1.docs.contains_key("switches/a"));
        assert!(t1.unreadable.contains_key("switches/b"));
        // Repaired without touching any other file's mtime.
        fs::remove_file(r.join("switches/b.json")).unwrap();
        write(&r, "switches/b.json", "{\"degraded\":true}");
        let t2 = next(&mut rx).await;
        assert!(t2.unreadable.is_empty(), "{:?}", t2.unreadable);
        assert_eq!(t2.docs["switches/b"], b"{\"degraded\":true}");
        drop(rx);
        task.await.unwrap();
    }

    #[test]
    fn missing_root_is_an_error_empty_root_is_empty() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_tree(&d.path().join("nope")).is_err());
        assert!(read_tree(d.path()).unwrap().docs.is_empty());
    }

    #[test]
    fn file_paths() {
        assert_eq!(
            file_path_for("apis/order.get"),
            Some(PathBuf::from("apis/order.get.json"))
        );
        assert_eq!(file_path_for("ipacl"), Some(PathBuf::from("ipacl.json")));
        assert_eq!(
            file_path_for("descriptors/ab"),
            Some(PathBuf::from("descriptors/ab.pb"))
        );
        assert_eq!(file_path_for("apis/.hidden"), None);
        assert_eq!(file_path_for("nodes/x"), None);
        assert_eq!(file_path_for("apis/a\\b"), None);
    }

    /// Runs a source on `root` checked every `interval`: its trees, and its task.
    fn start(
        root: &Path,
        interval: Duration,
    ) -> (mpsc::Receiver<Tree>, tokio::task::JoinHandle<()>) {
        let src = DirSource::new(root).with_interval(interval);
        let (tx, rx) = mpsc::channel(4);
        (rx, tokio::spawn(async move { src.run(tx).await }))
    }

    async fn next(rx: &mut mpsc::Receiver<Tree>) -> Tree {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a tree in time")
            .expect("source alive")
    }

    #[tokio::test]
    async fn sends_the_tree_then_changes() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().to_path_buf();
        write(&r, "apis/a.json", "{\"v\":1}");
        let src = DirSource::new(&r).with_interval(Duration::from_millis(10));
        assert_eq!(src.describe(), format!("dir:{}", r.display()));
        let (tx, mut rx) = mpsc::channel(4);
        let task = tokio::spawn(async move { src.run(tx).await });

        let t1 = next(&mut rx).await;
        assert_eq!(t1.docs["apis/a"], b"{\"v\":1}");

        // An edit of the same length within the same mtime tick is still seen.
        write(&r, "apis/a.json", "{\"v\":2}");
        let t2 = next(&mut rx).await;
        assert_eq!(t2.docs["apis/a"], b"{\"v\":2}");
        assert!(t2.generation > t1.generation);

        write(&r, "clusters/c.json", "{}");
        let t3 = next(&mut rx).await;
        assert!(t3.docs.contains_key("clusters/c"));
        assert!(t3.generation > t2.generation);

        fs::remove_file(r.join("apis/a.json")).unwrap();
        let t4 = next(&mut rx).await;
        assert!(!t4.docs.contains_key("apis/a"));
        assert!(t4.generation > t3.generation);

        // An ignored file changes nothing.
        write(&r, "apis/x.json~", "junk");
        write(&r, "clusters/c.json", "{ }");
        let t5 = next(&mut rx).await;
        assert_eq!(t5.docs["clusters/c"], b"{ }");
        assert!(!t5.docs.contains_key("apis/x"));

        drop(rx);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("run ends when the receiver goes")
            .unwrap();
    }

    #[tokio::test]
    async fn a_reported_change_is_read_long_before_the_next_poll() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().to_path_buf();
        write(&r, "apis/a.json", "{\"v\":1}");
        // Polling alone would see nothing for a minute.
        let (mut rx, task) = start(&r, Duration::from_secs(60));
        let t1 = next(&mut rx).await;
        assert_eq!(t1.docs["apis/a"], b"{\"v\":1}");
        // Give the watch a moment to be set up after the first read.
        tokio::time::sleep(Duration::from_millis(100)).await;
        for v in 2..5 {
            let started = std::time::Instant::now();
            write(&r, "apis/a.json", &format!("{{\"v\":{v}}}"));
            let t = next(&mut rx).await;
            assert_eq!(t.docs["apis/a"], format!("{{\"v\":{v}}}").as_bytes());
            assert!(started.elapsed() < Duration::from_secs(5));
        }
        // A whole tree written at once arrives as few trees, the last one complete.
        for i in 0..200 {
            write(&r, &format!("apis/b{i}.json"), "{}");
        }
        let mut trees = 0;
        loop {
            let t = next(&mut rx).await;
            trees += 1;
            if t.docs.len() == 201 {
                break;
            }
        }
        assert!(trees < 20, "{trees} trees for one burst");
        drop(rx);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_root_replaced_by_another_directory_is_watched_again() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("tree");
        write(&r, "apis/a.json", "{}");
        let (mut rx, task) = start(&r, Duration::from_secs(60));
        assert!(next(&mut rx).await.docs.contains_key("apis/a"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Replaced the way a deployment swaps a directory: the old one moved away, the new
        // one moved in.
        let new = d.path().join("tree.new");
        write(&new, "apis/b.json", "{}");
        fs::rename(&r, d.path().join("tree.old")).unwrap();
        fs::rename(&new, &r).unwrap();
        let t = next(&mut rx).await;
        assert!(t.docs.contains_key("apis/b") && !t.docs.contains_key("apis/a"));
        // And changes in the new one are reported.
        tokio::time::sleep(Duration::from_millis(100)).await;
        write(&r, "apis/c.json", "{}");
        assert!(next(&mut rx).await.docs.contains_key("apis/c"));
        drop(rx);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn waits_for_a_missing_root() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("later");
        let (mut rx, task) = start(&r, Duration::from_millis(10));
        assert!(rx.try_recv().is_err());
        write(&r, "apis/a.json", "{}");
        let t = next(&mut rx).await;
        assert!(t.docs.contains_key("apis/a"));
        drop(rx);
        task.await.unwrap();
    }
}
