//! What the fuzz targets share: cutting one fuzzer input into the pieces a target needs, and
//! the invariants checked after each run. A broken invariant panics, which libFuzzer reports
//! as a crash with the input that caused it.

use portico_control::template::is_valid_percent_encoding;
use portico_control::{Snapshot, Tree};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// The input cut at its first `n - 1` line feeds into `n` strings (missing ones empty), each
/// decoded as UTF-8 with replacement characters.
pub fn fields(data: &[u8], n: usize) -> Vec<String> {
    let mut out: Vec<String> = data
        .splitn(n, |&b| b == b'\n')
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    out.resize(n, String::new());
    out
}

/// Separates documents in a `snapshot` input.
pub const RECORD: u8 = 0x1e;
/// Separates a document's path from its bytes.
pub const UNIT: u8 = 0x1f;
/// Bytes starting with this make the entry unreadable (the rest is the reason).
pub const UNREADABLE: u8 = 0x15;
/// A descriptor path named like this is renamed to the SHA-256 of its bytes, so that the
/// fuzzer reaches the descriptor decoder.
pub const AUTO_DESCRIPTOR: &str = "descriptors/#";

/// One entry of a `snapshot` input: its tree path, and its bytes or why it is unreadable.
pub type Entry = (String, Result<Vec<u8>, String>);

/// Cuts a `snapshot` input into entries: records separated by [`RECORD`], each `path UNIT
/// bytes` (a record without [`UNIT`] is skipped).
pub fn documents(data: &[u8]) -> Vec<Entry> {
    data.split(|&b| b == RECORD)
        .filter_map(|rec| {
            let at = rec.iter().position(|&b| b == UNIT)?;
            let (path, rest) = rec.split_at(at);
            let bytes = rest.get(1..).unwrap_or_default();
            let mut path = String::from_utf8_lossy(path).into_owned();
            if path == AUTO_DESCRIPTOR {
                path = format!("descriptors/{}", hex::encode(Sha256::digest(bytes)));
            }
            Some(match bytes.split_first() {
                Some((&UNREADABLE, why)) => (path, Err(String::from_utf8_lossy(why).into_owned())),
                _ => (path, Ok(bytes.to_vec())),
            })
        })
        .collect()
}

/// Encodes entries as a `snapshot` input (the seeds are made this way).
pub fn encode_documents(docs: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (path, bytes)) in docs.iter().enumerate() {
        if i > 0 {
            out.push(RECORD);
        }
        out.extend_from_slice(path.as_bytes());
        out.push(UNIT);
        out.extend_from_slice(bytes);
    }
    out
}

/// Good documents added to every `snapshot` run at paths the input did not write: they must
/// be accepted whatever else the tree holds.
pub const GOOD: [(&str, &str); 4] = [
    (
        "clusters/zz-fuzz-good",
        r#"{"protocol":"http","endpoints":[{"addr":"127.0.0.1:1"}]}"#,
    ),
    (
        "apis/zz-fuzz-good",
        r#"{"id":"zz-fuzz-good","http":{"method":"GET","path":"/zz-fuzz-good/{id}"},"backend":{"cluster":"zz-fuzz-good","http":{"path":"/x/{id}"}}}"#,
    ),
    (
        "apps/zz-fuzz-good",
        r#"{"secret":"zz-fuzz-good-secret","apis":["zz-fuzz-good"]}"#,
    ),
    ("switches/zz-fuzz-good", r#"{"degraded":true}"#),
];

/// Whether `s` is an upstream path a rewrite may render: `/` then RFC 3986 path characters,
/// every `%` starting a valid escape.
pub fn is_valid_upstream_path(s: &str) -> bool {
    s.starts_with('/')
        && is_valid_percent_encoding(s)
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&c))
}

/// Checks what must hold of `snap`, built from `tree` (and `previous`) where the input wrote
/// the paths `written`.
pub fn check_snapshot(
    tree: &Tree,
    previous: Option<&Snapshot>,
    snap: &Snapshot,
    written: &BTreeSet<String>,
) {
    assert_eq!(snap.version.generation, tree.generation);
    let mut rejected = BTreeSet::new();
    for r in &snap.rejected {
        assert!(
            !r.internal,
            "a check panicked on {}: {}",
            r.path,
            r.reason
        );
        assert!(
            rejected.insert(r.path.as_str()),
            "{} rejected twice",
            r.path
        );
        if r.kept_previous {
            let prev = previous.and_then(|p| p.accepted.get(&r.path));
            assert!(
                prev.is_some(),
                "{} kept a previous version it never had",
                r.path
            );
        }
    }
    for (path, bytes) in &snap.accepted {
        let fresh = tree.docs.get(path).map(Vec::as_slice) == Some(bytes.as_slice());
        let kept = previous
            .and_then(|p| p.accepted.get(path))
            .is_some_and(|old| old == bytes);
        assert!(fresh || kept, "{path} accepted with bytes it never had");
        let own_rejection = snap.rejected.iter().find(|r| r.path == *path);
        if fresh {
            assert!(own_rejection.is_none(), "{path} accepted and rejected");
        } else {
            // Kept in place of its rejected new version, or of a folder that could not be
            // listed.
            let folder = path.split_once('/').map_or("", |(dir, _)| dir);
            assert!(
                own_rejection.is_some_and(|r| r.kept_previous)
                    || tree.unreadable.contains_key(folder),
                "{path} kept without a rejection saying so"
            );
        }
    }
    for path in tree.docs.keys().chain(tree.unreadable.keys()) {
        assert!(
            snap.accepted.contains_key(path) && !tree.unreadable.contains_key(path)
                || rejected.contains(path.as_str()),
            "{path} neither accepted nor rejected"
        );
    }
    for (path, _) in GOOD {
        if written.contains(path) {
            continue;
        }
        let why = snap.rejected.iter().find(|r| r.path == path);
        let excused = why.is_some_and(|r| {
            // An API of the input bound the same route first, or the input replaced the
            // good cluster the good API uses.
            path.starts_with("apis/")
                && (r.reason.contains("already bound by API") || written.contains(GOOD[0].0))
        });
        assert!(
            why.is_none() || excused,
            "a good document was rejected: {why:?}"
        );
    }
}
