//! The directory source (`--config-dir DIR`): the §3.3 tree as files.
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
//! The source polls a cheap fingerprint (path, length, mtime) every 250 ms and re-reads the
//! tree when it changes; a file modified within the last two seconds is also re-read on each
//! poll, so that two writes inside one mtime tick are not missed.

use crate::source::ConfigSource;
use crate::tree::{DocKind, Tree};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// The default polling interval of [`DirSource`].
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(250);

/// Files modified this recently are re-read on every poll (mtime granularity guard).
const RECENT: Duration = Duration::from_secs(2);

/// Reads a §3.3 directory tree (`--config-dir`) and watches it by polling.
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

/// What a scan found: the document files, and the newest mtime (files and folders, in ms).
#[derive(Debug, Default)]
struct Scan {
    entries: Vec<Entry>,
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

/// Lists the document files under `root` with their length and mtime (no contents read).
/// A root or kind folder that cannot be listed is an error (a partial tree would look like
/// deleted documents); a single entry that cannot be inspected is skipped with a warning.
fn scan(root: &Path) -> io::Result<Scan> {
    let meta = std::fs::metadata(root)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", root.display()),
        ));
    }
    let mut scan = Scan {
        entries: Vec::new(),
        max_mtime_ms: ns_to_ms(mtime_ns(&meta)),
    };
    let add = |scan: &mut Scan, tree_path: String, file: PathBuf, meta: &std::fs::Metadata| {
        let ns = mtime_ns(meta);
        scan.max_mtime_ms = scan.max_mtime_ms.max(ns_to_ms(ns));
        scan.entries.push(Entry {
            tree_path,
            file,
            len: meta.len(),
            mtime_ns: ns,
        });
    };

    let ipacl = root.join("ipacl.json");
    match std::fs::metadata(&ipacl) {
        Ok(m) if m.is_file() => add(&mut scan, "ipacl".to_owned(), ipacl, &m),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(file = %ipacl.display(), error = %e, "skipping unreadable config file")
        }
    }

    for kind in [
        DocKind::Api,
        DocKind::Cluster,
        DocKind::App,
        DocKind::Switch,
        DocKind::Descriptor,
        DocKind::Alert,
    ] {
        let dir = root.join(kind.dir());
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.kind() == io::ErrorKind::NotADirectory =>
            {
                continue
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
        };
        if let Ok(m) = std::fs::metadata(&dir) {
            scan.max_mtime_ms = scan.max_mtime_ms.max(ns_to_ms(mtime_ns(&m)));
        }
        let suffix = format!(".{}", kind.file_ext());
        for de in rd {
            let de = de.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            let file = de.path();
            let Some(fname) = de.file_name().to_str().map(str::to_owned) else {
                tracing::warn!(file = %file.display(), "skipping a config file whose name is not UTF-8");
                continue;
            };
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
            match std::fs::metadata(&file) {
                Ok(m) if m.is_file() => add(&mut scan, tree_path, file, &m),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "skipping unreadable config file")
                }
            }
        }
    }
    scan.entries.sort_by(|a, b| a.tree_path.cmp(&b.tree_path));
    Ok(scan)
}

/// Reads the files a scan found. A file that cannot be read is skipped with a warning.
fn read_entries(scan: &Scan) -> Tree {
    let mut tree = Tree {
        generation: scan.max_mtime_ms,
        ..Tree::default()
    };
    for e in &scan.entries {
        match std::fs::read(&e.file) {
            Ok(bytes) => {
                tree.insert(&e.tree_path, bytes);
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(file = %e.file.display(), error = %err, "skipping unreadable config file")
            }
        }
    }
    tree
}

/// Reads the §3.3 tree under `root` once, synchronously (start-up, booting from the disk
/// snapshot, the sandbox sub-folder). The tree's generation is the newest mtime of its files
/// and folders in Unix milliseconds. Errors if `root` (or a kind folder in it) cannot be
/// listed; a single unreadable file is skipped with a warning.
pub fn read_tree(root: &Path) -> io::Result<Tree> {
    Ok(read_entries(&scan(root)?))
}

type Fingerprint = Vec<(String, u64, u128)>;

fn fingerprint(scan: &Scan) -> Fingerprint {
    scan.entries
        .iter()
        .map(|e| (e.tree_path.clone(), e.len, e.mtime_ns))
        .collect()
}

fn has_recent(scan: &Scan) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    scan.entries
        .iter()
        .any(|e| now.saturating_sub(e.mtime_ns) < RECENT.as_nanos())
}

#[async_trait::async_trait]
impl ConfigSource for DirSource {
    fn describe(&self) -> String {
        format!("dir:{}", self.root.display())
    }

    async fn run(&self, updates: mpsc::Sender<Tree>) {
        let mut last_fp: Option<Fingerprint> = None;
        let mut last_docs = None;
        let mut last_generation = 0u64;
        let mut last_error: Option<String> = None;
        loop {
            let root = self.root.clone();
            let prev_fp = last_fp.clone();
            let polled =
                tokio::task::spawn_blocking(move || -> io::Result<Option<(Fingerprint, Tree)>> {
                    let scan = scan(&root)?;
                    let fp = fingerprint(&scan);
                    if prev_fp.as_ref() == Some(&fp) && !has_recent(&scan) {
                        return Ok(None);
                    }
                    Ok(Some((fp, read_entries(&scan))))
                })
                .await;
            match polled {
                Ok(Ok(None)) => {}
                Ok(Ok(Some((fp, mut tree)))) => {
                    if last_error.take().is_some() {
                        tracing::info!(source = %self.describe(), "configuration directory readable again");
                    }
                    last_fp = Some(fp);
                    if last_docs.as_ref() != Some(&tree.docs) {
                        last_generation = tree.generation.max(last_generation + 1);
                        tree.generation = last_generation;
                        last_docs = Some(tree.docs.clone());
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
            tokio::select! {
                () = updates.closed() => return,
                () = tokio::time::sleep(self.interval) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
    async fn waits_for_a_missing_root() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("later");
        let src = DirSource::new(&r).with_interval(Duration::from_millis(10));
        let (tx, mut rx) = mpsc::channel(4);
        let task = tokio::spawn(async move { src.run(tx).await });
        assert!(rx.try_recv().is_err());
        write(&r, "apis/a.json", "{}");
        let t = next(&mut rx).await;
        assert!(t.docs.contains_key("apis/a"));
        drop(rx);
        task.await.unwrap();
    }
}
