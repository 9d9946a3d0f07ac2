//! `portico zk lockdown`: locks a ZooKeeper tree down (docs/operations/zookeeper.md, "Migrating an open
//! tree"). Talks to ZooKeeper directly, authenticated with the registry's credentials.

use crate::args::LockdownArgs;
use portico_control::zk::auth::{AclPolicy, Role, ZkAuth};
use portico_control::zk::lockdown::{connect_as, format_acl, lockdown as lock};
use std::path::PathBuf;
use std::process::ExitCode;

/// Reads the credentials files of one role, checking that each names that role's user.
fn read_role(files: &[PathBuf], role: Role) -> Result<Vec<ZkAuth>, String> {
    files
        .iter()
        .map(|path| {
            let auth = ZkAuth::from_file(path)?;
            if auth.role() != Some(role) {
                return Err(format!(
                    "{}: the user is {:?}; the {role:?} role's user is {:?}",
                    path.display(),
                    auth.user(),
                    role.user()
                ));
            }
            Ok(auth)
        })
        .collect()
}

pub(crate) async fn lockdown(args: &LockdownArgs) -> Result<ExitCode, String> {
    let registry = read_role(&args.registry_auth_file, Role::Registry)?;
    let gateway = read_role(&args.gateway_auth_file, Role::Gateway)?;
    let operator = read_role(&args.operator_auth_file, Role::Operator)?;
    let Some(caller) = registry.first() else {
        return Err("give --registry-auth-file".to_owned());
    };
    let policy = AclPolicy {
        registry: registry.iter().map(ZkAuth::digest_id).collect(),
        gateway: gateway.iter().map(ZkAuth::digest_id).collect(),
        operator: operator.iter().map(ZkAuth::digest_id).collect(),
        others: Vec::new(),
    };
    let client = connect_as(&args.zk, &registry.iter().collect::<Vec<_>>()).await?;
    let changes = lock(&client, &args.root, &policy, caller, args.dry_run).await?;
    let verb = if args.dry_run { "would set" } else { "set" };
    for change in &changes {
        match &change.before {
            None => println!(
                "{} {}: create with {}",
                if args.dry_run { "would" } else { "did" },
                change.path,
                format_acl(&change.after)
            ),
            Some(before) => println!(
                "{verb} {}: {} -> {}",
                change.path,
                format_acl(before),
                format_acl(&change.after)
            ),
        }
    }
    println!(
        "{} node(s) {} under {} ({})",
        changes.len(),
        if args.dry_run { "to change" } else { "changed" },
        args.root,
        if changes.is_empty() {
            "already locked"
        } else if args.dry_run {
            "dry run: nothing changed"
        } else {
            "locked"
        }
    );
    Ok(ExitCode::SUCCESS)
}
