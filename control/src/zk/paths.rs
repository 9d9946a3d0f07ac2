//! ZooKeeper paths of a configuration tree: the root as given on the command line, and tree
//! paths (`apis/x`) joined to and cut from absolute node paths. Shared by the source, the node
//! registration and the registry.

/// The folders of a served tree, below the root (the `ipacl` document sits at the root).
pub const KIND_DIRS: [&str; 7] = [
    "apis",
    "clusters",
    "apps",
    "switches",
    "descriptors",
    "alerts",
    "topics",
];

/// Normalizes a ZooKeeper root: a leading `/`, no trailing `/` (except for `/` itself).
pub fn normalize_root(root: &str) -> String {
    let trimmed = root.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        "/".to_owned()
    } else if trimmed.starts_with('/') {
        trimmed.to_owned()
    } else {
        format!("/{trimmed}")
    }
}

/// The absolute ZooKeeper path of `rel` (a tree path like `apis/x`) under `root`.
pub fn join_path(root: &str, rel: &str) -> String {
    if rel.is_empty() {
        root.to_owned()
    } else if root == "/" {
        format!("/{rel}")
    } else {
        format!("{root}/{rel}")
    }
}

/// The tree path of an absolute ZooKeeper `path` under `root`: `Some("")` for the root itself,
/// `None` outside it.
pub fn relative_path<'a>(root: &str, path: &'a str) -> Option<&'a str> {
    if root == "/" {
        return path.strip_prefix('/');
    }
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix('/')
    }
}

/// The tree path of the folder holding tree path `rel` (`apis/x` → `apis`, `ipacl` → the root,
/// `""`).
pub(super) fn parent_of(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(dir, _)| dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_paths() {
        assert_eq!(normalize_root("/portico/"), "/portico");
        assert_eq!(normalize_root("portico"), "/portico");
        assert_eq!(normalize_root(""), "/");
        assert_eq!(normalize_root(" /a/b// "), "/a/b");
        assert_eq!(join_path("/portico", "apis/x"), "/portico/apis/x");
        assert_eq!(join_path("/", "apis/x"), "/apis/x");
        assert_eq!(join_path("/portico", ""), "/portico");
        assert_eq!(relative_path("/portico", "/portico/apis/x"), Some("apis/x"));
        assert_eq!(relative_path("/portico", "/portico"), Some(""));
        assert_eq!(relative_path("/portico", "/porticox/apis"), None);
        assert_eq!(relative_path("/", "/apis/x"), Some("apis/x"));
        assert_eq!(relative_path("/portico", "/portico/apis/é"), Some("apis/é"));
        assert_eq!(parent_of("apis/x"), "apis");
        assert_eq!(parent_of("ipacl"), "");
    }
}
