//! A raw configuration tree: document paths relative to the root (`apis/order.get`,
//! `ipacl`, `descriptors/<sha256>`) mapped to their bytes, as ZooKeeper or a directory hold
//! them. Only the kinds of a served tree are kept (`alerts/` too: gateways validate the rules
//! and ignore them, the registry evaluates them); `sandbox/`, `nodes/`, `history/` and anything
//! unknown are not part of a tree.

use std::collections::BTreeMap;

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
        let kind = match dir {
            "apis" => DocKind::Api,
            "clusters" => DocKind::Cluster,
            "apps" => DocKind::App,
            "switches" => DocKind::Switch,
            "descriptors" => DocKind::Descriptor,
            "alerts" => DocKind::Alert,
            _ => return None,
        };
        Some((kind, name))
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
        }
    }

    /// The file extension of this kind on disk: `.pb` for descriptors, `.json` for the rest.
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
}

impl Tree {
    /// Inserts a document if its path is one a served tree holds; returns whether it was kept.
    pub fn insert(&mut self, path: &str, bytes: Vec<u8>) -> bool {
        if DocKind::classify(path).is_some() {
            self.docs.insert(path.to_owned(), bytes);
            true
        } else {
            false
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
    }
}
