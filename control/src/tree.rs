//! A raw configuration tree: document paths relative to the root (`apis/order.get`,
//! `ipacl`, `descriptors/<sha256>`) mapped to their bytes, as ZooKeeper or a directory hold
//! them (docs/operations/config-tree.md, "The configuration tree"). Only the kinds of a served tree are
//! kept (`alerts/` too: gateways validate the rules and ignore them, the registry evaluates
//! them); `sandbox/`, `nodes/`, `history/` and anything unknown are not part of a tree.
//!
//! A source never drops a whole tree because one entry of it cannot be read: that entry goes
//! to [`Tree::unreadable`] with the reason, and [`crate::build_snapshot`] rejects it alone.

use std::collections::BTreeMap;

/// The largest document a tree holds, in bytes (16 MiB). A bigger one is not read (a
/// directory source) or not parsed (any source): it is rejected on its own. ZooKeeper's own
/// default limit (`jute.maxbuffer`) is lower, about 1 MiB.
pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// The kinds of document in a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DocKind {
    Api,
    Cluster,
    App,
    Switch,
    IpAcl,
    Descriptor,
    /// `alerts/<name>`: an alerting rule (the registry's; gateways only validate it).
    Alert,
    Topic,
}

impl DocKind {
    /// Classifies a tree path: `apis/x` → (Api, "x"), `ipacl` → (IpAcl, "").
    /// Returns `None` for paths that are not documents of a served tree.
    pub fn classify(path: &str) -> Option<(DocKind, &str)> {
        if path == "ipacl" {
            return Some((DocKind::IpAcl, ""));
        }
        let (dir, name) = path.split_once('/')?;
        if name.is_empty() || name.contains('/') {
            return None;
        }
        Some((DocKind::from_dir(dir)?, name))
    }

    /// The folder (or, for `ipacl`, the node) of this kind in the tree.
    pub fn dir(self) -> &'static str {
        match self {
            DocKind::Api => "apis",
            DocKind::Cluster => "clusters",
            DocKind::App => "apps",
            DocKind::Switch => "switches",
            DocKind::IpAcl => "ipacl",
            DocKind::Descriptor => "descriptors",
            DocKind::Alert => "alerts",
            DocKind::Topic => "topics",
        }
    }

    /// The kind whose folder is `dir` (`apis` → Api, ...); `None` for anything else, `ipacl`
    /// included (a document, not a folder).
    pub fn from_dir(dir: &str) -> Option<DocKind> {
        match dir {
            "apis" => Some(DocKind::Api),
            "clusters" => Some(DocKind::Cluster),
            "apps" => Some(DocKind::App),
            "switches" => Some(DocKind::Switch),
            "descriptors" => Some(DocKind::Descriptor),
            "alerts" => Some(DocKind::Alert),
            "topics" => Some(DocKind::Topic),
            _ => None,
        }
    }

    /// The file extension of this kind on disk (docs/operations/config-tree.md, "The configuration
    /// tree"): `.pb` for descriptors, `.json` for the rest.
    pub fn file_ext(self) -> &'static str {
        match self {
            DocKind::Descriptor => "pb",
            _ => "json",
        }
    }
}

/// A whole tree as read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// Document path → raw bytes (UTF-8 JSON, or a binary FileDescriptorSet).
    pub docs: BTreeMap<String, Vec<u8>>,
    /// A number the source guarantees to grow with every change it reports (ZooKeeper: the
    /// highest mzxid/pzxid seen; a directory: a reload counter). Used for the config version.
    pub generation: u64,
    /// Entries the source found but could not read, with why: a document path (a file that
    /// is not a regular file, too big, unreadable, or named in bytes that are not UTF-8) or a
    /// kind folder (`apis`, ...) that cannot be listed. Each is rejected on its own by
    /// [`crate::build_snapshot`], which keeps the last good version of what it held.
    pub unreadable: BTreeMap<String, String>,
}

impl Tree {
    /// Inserts a document if its path is one a served tree holds; returns whether it was kept.
    pub fn insert(&mut self, path: &str, bytes: Vec<u8>) -> bool {
        if DocKind::classify(path).is_some() {
            self.unreadable.remove(path);
            self.docs.insert(path.to_owned(), bytes);
            true
        } else {
            false
        }
    }

    /// Records an entry that could not be read (see [`Tree::unreadable`]); a later good read
    /// of the same document path wins.
    pub fn insert_unreadable(&mut self, path: &str, reason: impl Into<String>) {
        if !self.docs.contains_key(path) {
            self.unreadable.insert(path.to_owned(), reason.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_paths() {
        assert_eq!(
            DocKind::classify("apis/order.get"),
            Some((DocKind::Api, "order.get"))
        );
        assert_eq!(DocKind::classify("ipacl"), Some((DocKind::IpAcl, "")));
        assert_eq!(
            DocKind::classify("descriptors/ab12"),
            Some((DocKind::Descriptor, "ab12"))
        );
        assert_eq!(
            DocKind::classify("alerts/order-slow"),
            Some((DocKind::Alert, "order-slow"))
        );
        assert_eq!(DocKind::Alert.dir(), "alerts");
        assert_eq!(DocKind::classify("nodes/gw-1"), None);
        assert_eq!(DocKind::classify("sandbox/apis/x"), None);
        assert_eq!(DocKind::classify("apis/"), None);
        assert_eq!(DocKind::classify("apis/a/b"), None);
        assert_eq!(DocKind::classify("ipacl/x"), None);
        assert_eq!(DocKind::from_dir("switches"), Some(DocKind::Switch));
        assert_eq!(DocKind::from_dir("ipacl"), None);
        assert_eq!(
            DocKind::classify("topics/orders"),
            Some((DocKind::Topic, "orders"))
        );
    }

    #[test]
    fn unreadable_entries_do_not_shadow_documents() {
        let mut t = Tree::default();
        t.insert("apis/a", b"{}".to_vec());
        t.insert_unreadable("apis/a", "later");
        t.insert_unreadable("apis/b", "permission denied");
        assert_eq!(t.unreadable.len(), 1);
        assert_eq!(t.unreadable["apis/b"], "permission denied");
    }
}
