//! Reading a served tree from ZooKeeper: the whole of it (after every (re)connect, and for the
//! registry), or the documents that events named.
//!
//! A failure of the session or the connection fails the read (the caller retries it). A
//! failure that belongs to one node, and would come back on every retry (an ACL that does not
//! let this client read it, a name this client cannot address), does not: that node goes to
//! [`Tree::unreadable`] and is rejected alone by `build_snapshot`, so the rest of the tree
//! keeps being applied.

use super::paths::{join_path, parent_of, KIND_DIRS};
use crate::tree::{DocKind, Tree};
use std::collections::BTreeSet;
use zookeeper_client as zk;

/// Why a node is left out of the tree, when `e` is the node's own failure rather than the
/// session's (see the module documentation); `None` for a failure that fails the read.
pub(super) fn node_problem(e: &zk::Error) -> Option<String> {
    match e {
        zk::Error::NoAuth => Some(format!("{e} (its ACL)")),
        zk::Error::BadArguments(_) => Some(format!("cannot be addressed: {e}")),
        _ => None,
    }
}

/// A zxid as a generation (0 for the negative values ZooKeeper never hands out).
pub(super) fn zxid_to_generation(zxid: i64) -> u64 {
    u64::try_from(zxid).unwrap_or(0)
}

/// Lists the served tree under `root`: the generation of the root's and the kind folders'
/// `pzxid`s and every document path; `None` when the root is missing. A folder this client
/// may not list goes to `tree`'s unreadable entries.
async fn list_tree(
    client: &zk::Client,
    root: &str,
    tree: &mut Tree,
) -> Result<Option<(u64, Vec<String>)>, zk::Error> {
    let root_stat = match client.check_stat(root).await? {
        Some(stat) => stat,
        None => return Ok(None),
    };
    let mut generation = zxid_to_generation(root_stat.pzxid);
    let listings = futures::future::join_all(
        KIND_DIRS
            .iter()
            .map(|dir| client.get_children(&join_path(root, dir))),
    )
    .await;
    let mut paths = vec!["ipacl".to_owned()];
    for (dir, listing) in KIND_DIRS.iter().zip(listings) {
        match listing {
            Ok((children, stat)) => {
                generation = generation.max(zxid_to_generation(stat.pzxid));
                paths.extend(children.into_iter().map(|name| format!("{dir}/{name}")));
            }
            Err(zk::Error::NoNode) => {}
            Err(e) => match node_problem(&e) {
                Some(why) => tree.insert_unreadable(dir, format!("cannot list the folder: {why}")),
                None => return Err(e),
            },
        }
    }
    Ok(Some((generation, paths)))
}

/// Reads the whole served tree under `root` (absolute, normalized), with its generation (see
/// the module docs of [`crate::zk`]). A missing root or folder is an empty part of the tree;
/// a folder or document this client may not read is in [`Tree::unreadable`]. Requests are
/// pipelined.
pub async fn read_tree(client: &zk::Client, root: &str) -> Result<Tree, zk::Error> {
    let mut tree = Tree::default();
    let Some((mut generation, paths)) = list_tree(client, root, &mut tree).await? else {
        return Ok(tree);
    };
    let reads = futures::future::join_all(
        paths
            .iter()
            .map(|rel| client.get_data(&join_path(root, rel))),
    )
    .await;
    for (rel, read) in paths.iter().zip(reads) {
        match read {
            Ok((data, stat)) => {
                if tree.insert(rel, data) {
                    generation = generation.max(zxid_to_generation(stat.mzxid));
                }
            }
            // Deleted between the listing and the read: its event follows.
            Err(zk::Error::NoNode) => {}
            Err(e) => match node_problem(&e) {
                Some(why) => tree.insert_unreadable(rel, why),
                None => return Err(e),
            },
        }
    }
    tree.generation = generation;
    Ok(tree)
}

/// The generation [`read_tree`] would answer, from the nodes' stats alone (no document is
/// read: a registry watching for configuration lag asks every few seconds, and the tree holds
/// the descriptor sets). ZooKeeper answers a stat without checking the READ permission, so a
/// document this client may not read counts here where [`read_tree`] leaves it out: meant
/// for a client that reads the whole served tree (the registry).
pub async fn read_generation(client: &zk::Client, root: &str) -> Result<u64, zk::Error> {
    let mut scratch = Tree::default();
    let Some((mut generation, paths)) = list_tree(client, root, &mut scratch).await? else {
        return Ok(0);
    };
    let docs: Vec<&String> = paths
        .iter()
        .filter(|rel| DocKind::classify(rel).is_some())
        .collect();
    let stats = futures::future::join_all(
        docs.iter()
            .map(|rel| client.check_stat(&join_path(root, rel))),
    )
    .await;
    for stat in stats {
        match stat {
            Ok(Some(stat)) => generation = generation.max(zxid_to_generation(stat.mzxid)),
            // Deleted since the listing.
            Ok(None) => {}
            // A document that cannot be addressed does not count, as in `read_tree`.
            Err(e) if node_problem(&e).is_some() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(generation)
}

/// Re-reads the served documents `paths` into `tree`: a document read is replaced, a deleted
/// one removed (and its folder's `pzxid` taken into the generation), one this client may not
/// read marked unreadable.
pub(super) async fn read_paths(
    client: &zk::Client,
    root: &str,
    paths: &BTreeSet<String>,
    tree: &mut Tree,
) -> Result<(), zk::Error> {
    let reads = futures::future::join_all(
        paths
            .iter()
            .map(|rel| client.get_data(&join_path(root, rel))),
    )
    .await;
    let mut deleted_parents = BTreeSet::new();
    for (rel, read) in paths.iter().zip(reads) {
        match read {
            Ok((data, stat)) => {
                tree.generation = tree.generation.max(zxid_to_generation(stat.mzxid));
                tree.insert(rel, data);
            }
            Err(zk::Error::NoNode) => {
                tree.docs.remove(rel);
                tree.unreadable.remove(rel);
                deleted_parents.insert(parent_of(rel).to_owned());
            }
            Err(e) => match node_problem(&e) {
                Some(why) => {
                    tree.docs.remove(rel);
                    tree.insert_unreadable(rel, why);
                }
                None => return Err(e),
            },
        }
    }
    for parent in deleted_parents {
        if let Some(stat) = client.check_stat(&join_path(root, &parent)).await? {
            tree.generation = tree.generation.max(zxid_to_generation(stat.pzxid));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_problems_are_the_nodes_own() {
        assert!(node_problem(&zk::Error::NoAuth).is_some());
        assert!(node_problem(&zk::Error::BadArguments(&"bad path")).is_some());
        for session_wide in [
            zk::Error::ConnectionLoss,
            zk::Error::SessionExpired,
            zk::Error::Timeout,
            zk::Error::ClientClosed,
        ] {
            assert!(node_problem(&session_wide).is_none(), "{session_wide}");
        }
        assert_eq!(zxid_to_generation(-1), 0);
        assert_eq!(zxid_to_generation(42), 42);
    }
}
