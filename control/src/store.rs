//! The last-known-good snapshot on disk (`--snapshot-dir DIR`): the accepted documents of
//! the applied [`Snapshot`] in the directory layout of docs/OPERATIONS.md ("The configuration tree"), plus a `VERSION` file
//! (`{"generation", "digest", "written_at_ms"}`). A gateway that starts without ZooKeeper
//! boots from it.
//!
//! # How a write stays atomic
//!
//! `DIR` is a symbolic link to a sibling data folder `DIR.d-<digest>-<pid>-<n>`. A write:
//!
//! 1. fills `DIR.tmp-<pid>-<n>` and fsyncs every file and folder in it;
//! 2. renames it to `DIR.d-<digest>-<pid>-<n>` (the name marks it complete);
//! 3. makes a new link `DIR.link-<pid>-<n>` to it and renames that over `DIR` (`rename(2)`
//!    replaces the old link atomically), then fsyncs the parent folder;
//! 4. removes the siblings left by earlier writes or crashes (`DIR.tmp-*`, `DIR.d-*` other
//!    than the new target, `DIR.link-*`, `DIR.old-*`).
//!
//! A crash at any point leaves `DIR` pointing at either the old or the new complete snapshot;
//! leftovers are removed by the next write and never read. The one exception is the first
//! write over a `DIR` that is a real folder (not yet a link, e.g. copied by hand): it is
//! renamed aside to `DIR.old-<pid>-<n>` just before the link takes its place. If the process
//! dies inside that window `DIR` is missing, and [`read_snapshot`] falls back to the newest
//! complete `DIR.d-*` sibling (written in step 2, before the window opened).
//!
//! # Modes
//! A snapshot holds the apps' secrets: folders are written `0700` and files `0600` (whatever
//! the umask), a parent folder the write creates is `0700`, and the modes of a snapshot that
//! an older version wrote more openly are tightened when it is read or replaced
//! (docs/SECURITY.md, "Control plane (ZooKeeper)").
//!
//! One gateway process owns a snapshot folder; two writing the same one may remove each
//! other's in-flight temporary folders (each write then fails and is retried by the next).

use crate::snapshot::{ConfigVersion, Snapshot};
use crate::source::{file_path_for, read_tree};
use crate::tree::Tree;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The name of the version file inside a snapshot folder.
pub const VERSION_FILE: &str = "VERSION";

/// The content of the `VERSION` file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VersionFile {
    pub generation: u64,
    pub digest: String,
    pub written_at_ms: u64,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// (parent folder, file name of `dir`).
fn split(dir: &Path) -> io::Result<(PathBuf, String)> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a usable snapshot folder name", dir.display()),
            )
        })?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name.to_owned()))
}

/// The mode of snapshot folders.
pub const DIR_MODE: u32 = 0o700;
/// The mode of snapshot files.
pub const FILE_MODE: u32 = 0o600;

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    let mut f = options.open(path)?;
    set_mode(path, FILE_MODE)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Sets the permission bits of `path` (no-op off unix).
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Creates `path` as a `0700` folder (its missing parents too, also `0700`).
fn create_private_dir_all(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir_all(parent)?;
    }
    match fs::create_dir(path) {
        Ok(()) => set_mode(path, DIR_MODE),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Tightens every folder under `dir` (itself included) to `0700` and every file to `0600`;
/// symbolic links are not followed.
pub fn tighten_modes(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    if meta.is_dir() {
        set_mode(dir, DIR_MODE)?;
        for entry in fs::read_dir(dir)? {
            tighten_modes(&entry?.path())?;
        }
    } else if meta.is_file() {
        set_mode(dir, FILE_MODE)?;
    }
    Ok(())
}

fn sync_dir(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        fs::File::open(path)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Fills `tmp` with the snapshot's accepted documents and the VERSION file, all fsynced.
fn fill(tmp: &Path, snapshot: &Snapshot) -> io::Result<()> {
    fs::create_dir(tmp)?;
    set_mode(tmp, DIR_MODE)?;
    let mut dirs = vec![tmp.to_path_buf()];
    for (path, bytes) in &snapshot.accepted {
        let Some(rel) = file_path_for(path) else {
            tracing::warn!(path = %path, "not writing a document whose name cannot be a file name");
            continue;
        };
        let file = tmp.join(rel);
        if let Some(parent) = file.parent() {
            if !parent.exists() {
                create_private_dir_all(parent)?;
                dirs.push(parent.to_path_buf());
            }
        }
        write_synced(&file, bytes)?;
    }
    let version = VersionFile {
        generation: snapshot.version.generation,
        digest: snapshot.version.digest.clone(),
        written_at_ms: crate::clock::now_ms(),
    };
    let json = serde_json::to_vec_pretty(&version).map_err(io::Error::other)?;
    write_synced(&tmp.join(VERSION_FILE), &json)?;
    for d in dirs.iter().rev() {
        sync_dir(d)?;
    }
    Ok(())
}

/// Writes `snapshot.accepted` to `dir` atomically (see the module documentation).
pub fn write_snapshot(dir: &Path, snapshot: &Snapshot) -> io::Result<()> {
    let (parent, name) = split(dir)?;
    create_private_dir_all(&parent)?;
    let id = unique();
    let tmp = parent.join(format!("{name}.tmp-{id}"));
    if let Err(e) = fill(&tmp, snapshot) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let digest: String = snapshot
        .version
        .digest
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(16)
        .collect();
    let data_name = format!("{name}.d-{digest}-{id}");
    let data = parent.join(&data_name);
    if let Err(e) = fs::rename(&tmp, &data) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    sync_dir(&parent)?;
    swap_in(&parent, &name, &data_name, &id)?;
    sync_dir(&parent)?;
    cleanup(&parent, &name, Some(&data_name));
    Ok(())
}

/// Points `parent/name` at `parent/data_name`.
#[cfg(unix)]
fn swap_in(parent: &Path, name: &str, data_name: &str, id: &str) -> io::Result<()> {
    let dir = parent.join(name);
    let link = parent.join(format!("{name}.link-{id}"));
    std::os::unix::fs::symlink(data_name, &link)?;
    let is_real_dir = fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
    if is_real_dir {
        // First write over a hand-made folder: move it aside (see the crash window above).
        let old = parent.join(format!("{name}.old-{id}"));
        fs::rename(&dir, &old)?;
    }
    if let Err(e) = fs::rename(&link, &dir) {
        let _ = fs::remove_file(&link);
        return Err(e);
    }
    Ok(())
}

/// Without symbolic links: move the old folder aside and the new one into place.
#[cfg(not(unix))]
fn swap_in(parent: &Path, name: &str, data_name: &str, id: &str) -> io::Result<()> {
    let dir = parent.join(name);
    if dir.exists() {
        fs::rename(&dir, parent.join(format!("{name}.old-{id}")))?;
    }
    fs::rename(parent.join(data_name), &dir)
}

/// Whether `entry` (a file name in the parent folder) is a leftover sibling of snapshot `name`.
fn is_sibling(entry: &str, name: &str) -> bool {
    entry
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|rest| {
            ["tmp-", "d-", "link-", "old-"]
                .iter()
                .any(|p| rest.starts_with(p))
        })
}

/// Removes every sibling left by earlier writes or crashes, except `keep`.
fn cleanup(parent: &Path, name: &str, keep: Option<&str>) {
    let Ok(rd) = fs::read_dir(parent) else { return };
    for de in rd.flatten() {
        let Some(entry) = de.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_sibling(&entry, name) || Some(entry.as_str()) == keep {
            continue;
        }
        let path = de.path();
        let res = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&path),
            Ok(_) => fs::remove_file(&path),
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove an old snapshot folder");
        }
    }
}

fn read_version(dir: &Path) -> Option<VersionFile> {
    let bytes = fs::read(dir.join(VERSION_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Reads the snapshot at `dir`: its tree (the generation is the one written in VERSION,
/// else the files' newest mtime) and its version (`None` if VERSION is missing or
/// unreadable, e.g. a folder made by hand or a registry export). Temporary and old
/// siblings are never read. If `dir` is missing, the newest complete `DIR.d-*` sibling is
/// used (a crash while replacing a hand-made folder); if there is none, `NotFound`.
pub fn read_snapshot(dir: &Path) -> io::Result<(Tree, Option<ConfigVersion>)> {
    let resolved = match fs::canonicalize(dir) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => newest_complete(dir).ok_or(e)?,
        Err(e) => return Err(e),
    };
    // A snapshot written by an older version may be world-readable (module docs, "Modes").
    if let Err(e) = tighten_modes(&resolved) {
        tracing::warn!(dir = %resolved.display(), error = %e, "cannot tighten the modes of the snapshot");
    }
    let mut tree = read_tree(&resolved)?;
    let version = read_version(&resolved);
    if let Some(v) = &version {
        tree.generation = v.generation;
    }
    Ok((
        tree,
        version.map(|v| ConfigVersion {
            generation: v.generation,
            digest: v.digest,
        }),
    ))
}

/// The newest `DIR.d-*` sibling with a readable VERSION file.
fn newest_complete(dir: &Path) -> Option<PathBuf> {
    let (parent, name) = split(dir).ok()?;
    let prefix = format!("{name}.d-");
    fs::read_dir(&parent)
        .ok()?
        .flatten()
        .filter(|de| {
            de.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .filter_map(|de| {
            let v = read_version(&de.path())?;
            Some(((v.generation, v.written_at_ms), de.path()))
        })
        .max_by_key(|(k, _)| *k)
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn snapshot(docs: &[(&str, &[u8])], generation: u64) -> Snapshot {
        let accepted: BTreeMap<String, Arc<Vec<u8>>> = docs
            .iter()
            .map(|(p, b)| (p.to_string(), Arc::new(b.to_vec())))
            .collect();
        let digest = crate::validate::config_digest(
            accepted.iter().map(|(p, b)| (p.as_str(), b.as_slice())),
        );
        Snapshot {
            version: ConfigVersion { generation, digest },
            accepted,
            ..Snapshot::default()
        }
    }

    fn siblings(parent: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(parent)
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn round_trip() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("snap");
        let s1 = snapshot(
            &[
                ("apis/order.get", b"{\"id\":\"order.get\"}"),
                ("clusters/c", b"{}"),
                ("ipacl", b"{\"deny\":[]}"),
                ("descriptors/abc", b"\x00\x01"),
                ("alerts/slow", b"{\"condition\":\"node_missing\"}"),
            ],
            42,
        );
        write_snapshot(&dir, &s1).unwrap();
        let (tree, version) = read_snapshot(&dir).unwrap();
        assert_eq!(version, Some(s1.version.clone()));
        assert_eq!(tree.generation, 42);
        let want: BTreeMap<String, Vec<u8>> = s1
            .accepted
            .iter()
            .map(|(k, v)| (k.clone(), v.to_vec()))
            .collect();
        assert_eq!(tree.docs, want);
        assert!(dir.join("apis/order.get.json").is_file());
        assert!(dir.join("descriptors/abc.pb").is_file());
        assert!(dir.join("alerts/slow.json").is_file());
        let vf: VersionFile =
            serde_json::from_slice(&fs::read(dir.join("VERSION")).unwrap()).unwrap();
        assert_eq!(vf.digest, s1.version.digest);
        assert!(vf.written_at_ms > 0);

        // A second write replaces the first entirely (a removed document is gone).
        let s2 = snapshot(&[("clusters/c", b"{\"x\":1}")], 43);
        write_snapshot(&dir, &s2).unwrap();
        let (tree, version) = read_snapshot(&dir).unwrap();
        assert_eq!(version, Some(s2.version.clone()));
        assert_eq!(tree.docs.len(), 1);
        assert_eq!(tree.docs["clusters/c"], b"{\"x\":1}");
        // Only the link and its one data folder remain.
        let sib = siblings(d.path());
        assert_eq!(sib.len(), 2, "{sib:?}");
        assert!(sib.contains(&"snap".to_owned()));
    }

    #[test]
    #[cfg(unix)]
    fn snapshots_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let d = tempfile::tempdir().unwrap();
        // An older, open snapshot made by hand: tightened when read.
        let dir = d.path().join("state/snap");
        fs::create_dir_all(dir.join("apps")).unwrap();
        fs::write(dir.join("apps/a.json"), br#"{"secret":"s"}"#).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(dir.join("apps/a.json"), fs::Permissions::from_mode(0o644)).unwrap();
        read_snapshot(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("apps")), 0o700);
        assert_eq!(mode(&dir.join("apps/a.json")), 0o600);
        // Written: every folder 0700 and file 0600, whatever the umask; a new parent 0700.
        let fresh = d.path().join("new-parent/snap");
        for target in [&dir, &fresh] {
            write_snapshot(
                target,
                &snapshot(&[("apps/a", b"{}"), ("apis/x", b"{}")], 3),
            )
            .unwrap();
            let real = fs::canonicalize(target).unwrap();
            assert_eq!(mode(&real), 0o700);
            for sub in ["apps", "apis"] {
                assert_eq!(mode(&real.join(sub)), 0o700, "{sub}");
            }
            assert_eq!(mode(&real.join("apps/a.json")), 0o600);
            assert_eq!(mode(&real.join(VERSION_FILE)), 0o600);
        }
        assert_eq!(mode(&d.path().join("new-parent")), 0o700);
    }

    #[test]
    fn crash_leftovers_are_ignored_then_cleaned() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("snap");
        write_snapshot(&dir, &snapshot(&[("apps/a", b"{}")], 1)).unwrap();
        // A write that died half-way, and an unrelated folder that must survive.
        let tmp = d.path().join("snap.tmp-999-0");
        fs::create_dir_all(tmp.join("apis")).unwrap();
        fs::write(tmp.join("apis/half.json"), b"{").unwrap();
        fs::create_dir(d.path().join("snapshots-other")).unwrap();
        fs::write(d.path().join("snap.link-999-1"), b"").unwrap();

        let (tree, _) = read_snapshot(&dir).unwrap();
        assert_eq!(tree.docs.keys().collect::<Vec<_>>(), vec!["apps/a"]);

        write_snapshot(&dir, &snapshot(&[("apps/b", b"{}")], 2)).unwrap();
        assert!(!tmp.exists());
        assert!(!d.path().join("snap.link-999-1").exists());
        assert!(d.path().join("snapshots-other").exists());
        let (tree, v) = read_snapshot(&dir).unwrap();
        assert_eq!(tree.docs.keys().collect::<Vec<_>>(), vec!["apps/b"]);
        assert_eq!(v.unwrap().generation, 2);
    }

    #[test]
    fn replaces_a_hand_made_folder_and_survives_a_missing_link() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("snap");
        fs::create_dir_all(dir.join("apis")).unwrap();
        fs::write(dir.join("apis/old.json"), b"{}").unwrap();
        let (tree, version) = read_snapshot(&dir).unwrap();
        assert!(tree.docs.contains_key("apis/old"));
        assert_eq!(version, None);

        write_snapshot(&dir, &snapshot(&[("apis/new", b"{}")], 5)).unwrap();
        let (tree, _) = read_snapshot(&dir).unwrap();
        assert_eq!(tree.docs.keys().collect::<Vec<_>>(), vec!["apis/new"]);
        assert_eq!(siblings(d.path()).len(), 2);

        // The crash window of that migration: the link is missing, the data folder is there.
        fs::remove_file(&dir).unwrap();
        let (tree, version) = read_snapshot(&dir).unwrap();
        assert_eq!(tree.docs.keys().collect::<Vec<_>>(), vec!["apis/new"]);
        assert_eq!(version.unwrap().generation, 5);
    }

    #[test]
    fn garbage_in_a_snapshot_is_skipped_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("snap");
        write_snapshot(&dir, &snapshot(&[("apps/a", b"{}"), ("apps/b", b"{}")], 9)).unwrap();
        // Someone edits the snapshot by hand: garbage VERSION, a folder and a dangling link
        // where documents were.
        fs::write(dir.join(VERSION_FILE), b"\xff{not json").unwrap();
        fs::remove_file(dir.join("apps/b.json")).unwrap();
        fs::create_dir(dir.join("apps/b.json")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("apps/c.json")).unwrap();
        let (tree, version) = read_snapshot(&dir).unwrap();
        assert_eq!(version, None);
        assert_eq!(tree.docs.keys().collect::<Vec<_>>(), vec!["apps/a"]);
        assert_eq!(
            tree.unreadable.keys().collect::<Vec<_>>(),
            vec!["apps/b", "apps/c"]
        );
    }

    #[test]
    fn missing_snapshot_is_not_found() {
        let d = tempfile::tempdir().unwrap();
        let e = read_snapshot(&d.path().join("none")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn sibling_names() {
        assert!(is_sibling("snap.tmp-1-2", "snap"));
        assert!(is_sibling("snap.d-abc-1-2", "snap"));
        assert!(!is_sibling("snap", "snap"));
        assert!(!is_sibling("snapx.tmp-1", "snap"));
        assert!(!is_sibling("snap.json", "snap"));
    }
}
