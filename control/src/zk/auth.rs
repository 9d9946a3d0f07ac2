//! ZooKeeper credentials and ACLs (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs";
//! docs/SECURITY.md, "Control plane (ZooKeeper)").
//!
//! Every Portico process authenticates with the `digest` scheme as one of three roles, told
//! apart by the user name: `portico-registry` (writes the tree), `portico-gateway` (reads it,
//! registers under `nodes/`) and `portico-operator` (the SREs' emergency identity: flips
//! switches with zkCli). Credentials come from a file (`--zk-auth-file`, `user:password`, not
//! readable by group or others) or `PORTICO_ZK_AUTH`, never from the command line.
//!
//! # Where the ACLs come from
//! The ACL of the tree's root is the policy: its `digest` entries name the identities of each
//! role (several per role while a password is rotated), and [`AclPolicy::acl_for`] derives the
//! ACL of every other node from them ([`AclPolicy::from_root_acl`]). ZooKeeper shows the
//! digest ids of an ACL only to a client with ADMIN on the node (others see `user:x`), so the
//! registry reads the root's ACL, and a gateway the ACL of `nodes/` (where it has ADMIN). `portico zk lockdown`
//! writes it (and every existing node's ACL). A root that grants `world:anyone` anything is an
//! open tree (v1's default): nodes are then created open, as before.

use std::fmt;
use std::path::Path;
use zookeeper_client as zk;

/// The environment variable holding `user:password` when no `--zk-auth-file` is given.
pub const AUTH_ENV: &str = "PORTICO_ZK_AUTH";
/// The user name of the registry role (cdrwa on the tree).
pub const REGISTRY_USER: &str = "portico-registry";
/// The user name of the gateway role (r on the served tree, its own `nodes/` entry).
pub const GATEWAY_USER: &str = "portico-gateway";
/// The user name of the operator role (rw on each switch, r elsewhere except apps and history).
pub const OPERATOR_USER: &str = "portico-operator";

/// `digest` credentials: `user:password`. The password never appears in `Debug` or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkAuth {
    user: String,
    password: String,
}

impl fmt::Debug for ZkAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkAuth")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl ZkAuth {
    /// Parses `user:password` (surrounding whitespace and a trailing newline ignored).
    pub fn parse(text: &str) -> Result<ZkAuth, String> {
        let text = text.trim();
        let (user, password) = text
            .split_once(':')
            .ok_or_else(|| "expected `user:password`".to_owned())?;
        if user.is_empty() || password.is_empty() {
            return Err("expected `user:password` with neither part empty".to_owned());
        }
        if text.contains('\n') {
            return Err("expected one line `user:password`".to_owned());
        }
        Ok(ZkAuth {
            user: user.to_owned(),
            password: password.to_owned(),
        })
    }

    /// Reads `user:password` from `path`, refusing a file that group or others may read (like
    /// ssh does for keys).
    pub fn from_file(path: &Path) -> Result<ZkAuth, String> {
        let text = crate::secret_file::read(path)?;
        ZkAuth::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The credentials of a process: `--zk-auth-file` if given, else `PORTICO_ZK_AUTH` if set
    /// and not empty, else none (an open tree).
    pub fn from_file_or_env(file: Option<&Path>) -> Result<Option<ZkAuth>, String> {
        if let Some(path) = file {
            return ZkAuth::from_file(path).map(Some);
        }
        match std::env::var(AUTH_ENV) {
            Ok(text) if !text.trim().is_empty() => ZkAuth::parse(&text)
                .map(Some)
                .map_err(|e| format!("{AUTH_ENV}: {e}")),
            _ => Ok(None),
        }
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The bytes of the `digest` auth packet (`addauth digest user:password`).
    pub fn packet(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password).into_bytes()
    }

    /// The ACL id these credentials authenticate as: `user:base64(sha1(user:password))`.
    pub fn digest_id(&self) -> String {
        digest_id(&self.user, &self.password)
    }

    /// The [`zk::AuthId`] of [`ZkAuth::digest_id`].
    pub fn auth_id(&self) -> zk::AuthId {
        zk::AuthId::new("digest", &self.digest_id())
    }

    /// The role of these credentials, by user name.
    pub fn role(&self) -> Option<Role> {
        Role::of_user(&self.user)
    }

    /// A connector that authenticates every session it makes (and the client re-sends the
    /// auth after reconnects of that session).
    pub fn connector(auth: Option<&ZkAuth>) -> zk::Connector {
        let connector = zk::Client::connector();
        match auth {
            Some(auth) => connector.with_auth("digest", &auth.packet()),
            None => connector,
        }
    }
}

/// ZooKeeper's `digest` ACL id of `user:password`: `user:base64(sha1("user:password"))`
/// (`DigestAuthenticationProvider.generateDigest`).
pub fn digest_id(user: &str, password: &str) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    let hash = sha1::Sha1::digest(format!("{user}:{password}").as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

/// A Portico role in ZooKeeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Registry,
    Gateway,
    Operator,
}

impl Role {
    /// The role a user name stands for.
    pub fn of_user(user: &str) -> Option<Role> {
        match user {
            REGISTRY_USER => Some(Role::Registry),
            GATEWAY_USER => Some(Role::Gateway),
            OPERATOR_USER => Some(Role::Operator),
            _ => None,
        }
    }

    /// The user name of the role.
    pub fn user(self) -> &'static str {
        match self {
            Role::Registry => REGISTRY_USER,
            Role::Gateway => GATEWAY_USER,
            Role::Operator => OPERATOR_USER,
        }
    }
}

/// The identities of each role, and how each node's ACL follows from them (module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclPolicy {
    /// `digest` ids (`user:hash`) of the registry role.
    pub registry: Vec<String>,
    /// `digest` ids of the gateway role.
    pub gateway: Vec<String>,
    /// `digest` ids of the operator role.
    pub operator: Vec<String>,
    /// Other entries of the root's ACL (e.g. a break-glass identity), kept on every node.
    pub others: Vec<zk::Acl>,
}

/// What a tree path is, for its ACL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeClass {
    /// The root, `sandbox`, a served folder or document (not `apps`/`switches`/`nodes`).
    Served,
    AppsDir,
    App,
    SwitchesDir,
    Switch,
    NodesDir,
    Node,
    /// `history/` and below: old documents, apps with their secrets included.
    History,
    /// `audit/` and anything else the registry keeps.
    Registry,
}

fn classify(rel: &str) -> NodeClass {
    let rel = rel.trim_matches('/');
    let rel = match rel.strip_prefix("sandbox") {
        Some("") => "",
        Some(rest) if rest.starts_with('/') => &rest[1..],
        _ => rel,
    };
    if rel.is_empty() || rel == "ipacl" {
        return NodeClass::Served;
    }
    let (top, below) = match rel.split_once('/') {
        Some((top, below)) => (top, !below.is_empty()),
        None => (rel, false),
    };
    match (top, below) {
        ("apps", false) => NodeClass::AppsDir,
        ("apps", true) => NodeClass::App,
        ("switches", false) => NodeClass::SwitchesDir,
        ("switches", true) => NodeClass::Switch,
        ("nodes", false) => NodeClass::NodesDir,
        ("nodes", true) => NodeClass::Node,
        ("apis" | "clusters" | "descriptors" | "alerts" | "topics", _) => NodeClass::Served,
        ("history", _) => NodeClass::History,
        _ => NodeClass::Registry,
    }
}

impl AclPolicy {
    /// The policy of three credentials (one identity per role).
    pub fn of(registry: &ZkAuth, gateway: &ZkAuth, operator: &ZkAuth) -> AclPolicy {
        AclPolicy {
            registry: vec![registry.digest_id()],
            gateway: vec![gateway.digest_id()],
            operator: vec![operator.digest_id()],
            others: Vec::new(),
        }
    }

    /// The policy a root ACL states; `None` for an open tree (the root grants `world:anyone`
    /// something, or names no registry identity).
    pub fn from_root_acl(acl: &[zk::Acl]) -> Option<AclPolicy> {
        let mut policy = AclPolicy::default();
        for entry in acl {
            if entry.scheme() == "world" {
                return None;
            }
            if entry.scheme() == "digest" && entry.id().ends_with(":x") {
                // Redacted by the server (no ADMIN on the node): not a usable policy.
                return None;
            }
            let role = (entry.scheme() == "digest")
                .then(|| {
                    entry
                        .id()
                        .split_once(':')
                        .and_then(|(u, _)| Role::of_user(u))
                })
                .flatten();
            match role {
                Some(Role::Registry) => policy.registry.push(entry.id().to_owned()),
                Some(Role::Gateway) => policy.gateway.push(entry.id().to_owned()),
                Some(Role::Operator) => policy.operator.push(entry.id().to_owned()),
                None => policy.others.push(entry.clone()),
            }
        }
        (!policy.registry.is_empty()).then_some(policy)
    }

    /// The ACL of the root (and of its ancestors the registry creates).
    pub fn root_acl(&self) -> Vec<zk::Acl> {
        self.acl_for("")
    }

    /// The ACL of the node at tree path `rel` (relative to the root; `sandbox/…` as the same
    /// path of the live tree). See the table in docs/OPERATIONS.md.
    pub fn acl_for(&self, rel: &str) -> Vec<zk::Acl> {
        use zk::Permission as P;
        let (gateway, operator) = match classify(rel) {
            NodeClass::Served => (P::READ, P::READ),
            NodeClass::AppsDir => (P::READ, P::READ),
            // App secrets: no operator access (docs/SECURITY.md, "Control plane").
            NodeClass::App => (P::READ, P::NONE),
            // No CREATE for the operator: zkCli creates nodes open (world:anyone cdrwa) unless
            // given an ACL, which would leave a switch anyone can flip. Switches are created by
            // the registry; the operator flips (`set`) them.
            NodeClass::SwitchesDir => (P::READ, P::READ),
            NodeClass::Switch => (P::READ, P::READ | P::WRITE),
            // ADMIN: ZooKeeper shows digest ids only to a client with ADMIN on the node, and a
            // gateway learns the identities for its own node's ACL from this folder's ACL.
            NodeClass::NodesDir => (P::READ | P::CREATE | P::DELETE | P::ADMIN, P::READ),
            NodeClass::Node => (P::ALL, P::READ),
            NodeClass::History => (P::NONE, P::NONE),
            NodeClass::Registry => (P::NONE, P::READ),
        };
        let mut acl = Vec::new();
        let mut push = |perm: P, ids: &[String]| {
            if perm == P::NONE {
                return;
            }
            for id in ids {
                let entry = zk::Acl::new(perm, zk::AuthId::new("digest", id));
                if !acl.contains(&entry) {
                    acl.push(entry);
                }
            }
        };
        push(P::ALL, &self.registry);
        push(gateway, &self.gateway);
        push(operator, &self.operator);
        for other in &self.others {
            if !acl.contains(other) {
                acl.push(other.clone());
            }
        }
        acl
    }
}

/// The ACL to create the node at tree path `rel` with: the policy's when locked, open otherwise.
pub fn create_acl(policy: Option<&AclPolicy>, rel: &str) -> Vec<zk::Acl> {
    match policy {
        Some(policy) => policy.acl_for(rel),
        None => zk::Acls::anyone_all().to_vec(),
    }
}

/// Reads the policy from the ACL of `root` (absolute): `Ok(None)` for an open or missing root.
pub async fn read_policy(client: &zk::Client, root: &str) -> Result<Option<AclPolicy>, zk::Error> {
    match client.get_acl(root).await {
        Ok((acl, _)) => Ok(AclPolicy::from_root_acl(&acl)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_ids_match_zookeeper() {
        // `DigestAuthenticationProvider.generateDigest("super:test")` (ZooKeeper's docs).
        assert_eq!(
            digest_id("super", "test"),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        let auth = ZkAuth::parse("portico-gateway:s3cret\n").unwrap();
        assert_eq!(auth.user(), "portico-gateway");
        assert_eq!(auth.role(), Some(Role::Gateway));
        assert!(!format!("{auth:?}").contains("s3cret"));
        assert!(ZkAuth::parse("nopassword").is_err());
        assert!(ZkAuth::parse(":pw").is_err());
        assert!(ZkAuth::parse("user:").is_err());
    }

    #[cfg(unix)]
    #[test]
    fn auth_files_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zk-auth");
        std::fs::write(&path, "portico-registry:pw\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ZkAuth::from_file(&path).unwrap_err();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let auth = ZkAuth::from_file(&path).unwrap();
        assert_eq!(auth.role(), Some(Role::Registry));
    }

    fn policy() -> AclPolicy {
        let r = ZkAuth::parse("portico-registry:a").unwrap();
        let g = ZkAuth::parse("portico-gateway:b").unwrap();
        let o = ZkAuth::parse("portico-operator:c").unwrap();
        AclPolicy::of(&r, &g, &o)
    }

    fn perms(acl: &[zk::Acl], user: &str) -> zk::Permission {
        acl.iter()
            .find(|a| a.id().starts_with(&format!("{user}:")))
            .map_or(zk::Permission::NONE, |a| a.permission())
    }

    #[test]
    fn acls_follow_the_table() {
        use zk::Permission as P;
        let p = policy();
        let root = p.root_acl();
        assert_eq!(AclPolicy::from_root_acl(&root), Some(p.clone()));
        assert!(AclPolicy::from_root_acl(&zk::Acls::anyone_all()).is_none());
        let redacted = [zk::Acl::new(
            zk::Permission::ALL,
            zk::AuthId::new("digest", "portico-registry:x"),
        )];
        assert!(AclPolicy::from_root_acl(&redacted).is_none());
        for (rel, g, o) in [
            ("", P::READ, P::READ),
            ("apis/x", P::READ, P::READ),
            ("ipacl", P::READ, P::READ),
            ("apps", P::READ, P::READ),
            ("apps/a", P::READ, P::NONE),
            ("sandbox/apps/a", P::READ, P::NONE),
            ("switches", P::READ, P::READ),
            ("switches/s", P::READ, P::READ | P::WRITE),
            ("nodes", P::READ | P::CREATE | P::DELETE | P::ADMIN, P::READ),
            ("sandbox/nodes/gw", P::ALL, P::READ),
            ("history/apps/a/1", P::NONE, P::NONE),
            ("audit/entry-1", P::NONE, P::READ),
            ("sandbox", P::READ, P::READ),
        ] {
            let acl = p.acl_for(rel);
            assert_eq!(perms(&acl, REGISTRY_USER), P::ALL, "{rel}");
            assert_eq!(perms(&acl, GATEWAY_USER), g, "{rel}");
            assert_eq!(perms(&acl, OPERATOR_USER), o, "{rel}");
            assert!(acl.iter().all(|a| a.scheme() == "digest"), "{rel}");
        }
        // Rotation: two identities of one role both get the role's rights.
        let mut rotating = p.clone();
        rotating.gateway.push(digest_id(GATEWAY_USER, "new"));
        let acl = rotating.acl_for("apis/x");
        assert_eq!(
            acl.iter()
                .filter(|a| a.id().starts_with("portico-gateway:"))
                .count(),
            2
        );
        assert_eq!(create_acl(None, "apps/a"), zk::Acls::anyone_all().to_vec());
    }
}
