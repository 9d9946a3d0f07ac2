//! Locking a tree down: creating the locked root (and the folders gateways cannot create) and
//! setting the ACL of every existing node to what [`AclPolicy::acl_for`] says. Used by
//! `portico zk lockdown` (docs/operations/zookeeper.md, "Migrating an open tree") and `./ops/up.sh`.
//! Idempotent: a node whose ACL is already right is not touched.

use super::auth::{AclPolicy, ZkAuth};
use super::node::ensure_path_with;
use super::paths::{join_path, normalize_root, relative_path, KIND_DIRS};
use std::collections::VecDeque;
use zookeeper_client as zk;

/// Folders a locked tree needs before anyone but the registry writes: gateways register under
/// `nodes/` (live) and `sandbox/nodes/` (sandbox listeners) and may not create them.
fn standard_folders() -> Vec<String> {
    let mut dirs: Vec<String> = KIND_DIRS.iter().map(|d| (*d).to_owned()).collect();
    dirs.push("nodes".to_owned());
    dirs.push("sandbox".to_owned());
    dirs.push("sandbox/nodes".to_owned());
    dirs
}

/// One node whose ACL lockdown changes (or would, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclChange {
    /// The absolute path.
    pub path: String,
    /// The ACL before (`None`: the node did not exist and is created).
    pub before: Option<Vec<zk::Acl>>,
    /// The ACL after.
    pub after: Vec<zk::Acl>,
}

/// `digest:user:hash:cdrwa,...`, as zkCli's `getAcl` shows it.
pub fn format_acl(acl: &[zk::Acl]) -> String {
    acl.iter()
        .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), perms(a.permission())))
        .collect::<Vec<_>>()
        .join(",")
}

fn perms(p: zk::Permission) -> String {
    use zk::Permission as P;
    [
        (P::CREATE, 'c'),
        (P::DELETE, 'd'),
        (P::READ, 'r'),
        (P::WRITE, 'w'),
        (P::ADMIN, 'a'),
    ]
    .iter()
    .filter(|(bit, _)| p.has(*bit))
    .map(|(_, c)| *c)
    .collect()
}

fn same_acl(a: &[zk::Acl], b: &[zk::Acl]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Locks the tree under `root` with `policy`, authenticated on `client` as `caller`. Refuses
/// (before changing anything) when `caller` is not one of the policy's registry identities:
/// the caller would lock itself out. With `dry_run`, only reports what it would change.
pub async fn lockdown(
    client: &zk::Client,
    root: &str,
    policy: &AclPolicy,
    caller: &ZkAuth,
    dry_run: bool,
) -> Result<Vec<AclChange>, String> {
    let root = normalize_root(root);
    if root == "/" {
        return Err("refusing to lock down `/`: give the tree's root (e.g. /portico)".to_owned());
    }
    if !policy.registry.contains(&caller.digest_id()) {
        return Err(format!(
            "refusing to lock the caller out: it authenticates as {:?}, which is not one of the \
             registry identities given",
            caller.user()
        ));
    }
    if policy.gateway.is_empty() || policy.operator.is_empty() {
        return Err("give at least one gateway and one operator identity".to_owned());
    }
    let mut changes = Vec::new();
    // The locked skeleton: root and standard folders, created where missing.
    for rel in std::iter::once(String::new()).chain(standard_folders()) {
        let path = join_path(&root, &rel);
        let exists = client
            .check_stat(&path)
            .await
            .map_err(|e| format!("{path}: {e}"))?
            .is_some();
        if !exists {
            changes.push(AclChange {
                path: path.clone(),
                before: None,
                after: policy.acl_for(&rel),
            });
            if !dry_run {
                ensure_path_with(client, &root, &path, Some(policy))
                    .await
                    .map_err(|e| format!("create {path}: {e}"))?;
            }
        }
    }
    // Every existing node, top-down (the caller keeps cdrwa on each node it has changed).
    let mut queue = VecDeque::from([root.clone()]);
    while let Some(path) = queue.pop_front() {
        let rel = relative_path(&root, &path).unwrap_or("").to_owned();
        let desired = policy.acl_for(&rel);
        let (before, _) = match client.get_acl(&path).await {
            Ok(acl) => acl,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(format!("read the ACL of {path}: {e}")),
        };
        if !same_acl(&before, &desired) {
            if !dry_run {
                client.set_acl(&path, &desired, None).await.map_err(|e| {
                    format!(
                        "set the ACL of {path}: {e} (a tree locked with other credentials needs \
                         the superDigest break-glass, docs/OPERATIONS.md)"
                    )
                })?;
            }
            changes.push(AclChange {
                path: path.clone(),
                before: Some(before),
                after: desired,
            });
        }
        match client.list_children(&path).await {
            Ok(mut children) => {
                children.sort();
                queue.extend(children.iter().map(|c| join_path(&path, c)));
            }
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(format!("list {path}: {e}")),
        }
    }
    Ok(changes)
}

/// Connects to `hosts` authenticated as each of `auths` (the caller's identities).
pub async fn connect_as(hosts: &str, auths: &[&ZkAuth]) -> Result<zk::Client, String> {
    let mut connector = zk::Client::connector().with_fail_eagerly();
    for auth in auths {
        connector = connector.with_auth("digest", &auth.packet());
    }
    connector
        .connect(hosts)
        .await
        .map_err(|e| format!("cannot connect to ZooKeeper at {hosts}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acls_print_like_zkcli() {
        let acl = [
            zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", "u:h")),
            zk::Acl::new(
                zk::Permission::READ | zk::Permission::WRITE,
                zk::AuthId::new("digest", "o:h"),
            ),
        ];
        assert_eq!(format_acl(&acl), "digest:u:h:cdrwa,digest:o:h:rw");
        let reversed = [acl[1].clone(), acl[0].clone()];
        assert!(same_acl(&acl, &reversed));
        assert!(!same_acl(&acl, &acl[..1]));
    }
}
