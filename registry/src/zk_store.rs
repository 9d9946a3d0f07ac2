//! The registry's view of ZooKeeper: one shared session (re-established when it expires),
//! tree paths relative to the root, and versioned writes (compare-and-set on the znode version).
//! The registry keeps no other state, so any number of registries can run side by side.
//!
//! Every session authenticates with the registry's `digest` credentials, if it has some
//! (`--zk-auth-file`, `PORTICO_ZK_AUTH`), and every node the registry creates gets the ACL the
//! root's ACL calls for (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs").

use crate::error::{ApiError, ApiResult};
use portico_control::zk::auth::{create_acl, read_policy};
use portico_control::zk::{
    ensure_path_with, join_path, normalize_root, read_generation, read_tree, AclPolicy, ZkAuth,
};
use portico_control::Tree;
use std::time::Duration;
use tokio::sync::Mutex;
use zookeeper_client as zk;

/// ZooKeeper's `jute.maxbuffer` as the testkit's, `ops/up.sh`'s and a default installation's
/// servers run it: `0xfffff` bytes (1 MiB − 1). A request longer than that (the data, the
/// path and about 50 bytes of framing) makes the server drop the client's session.
pub const JUTE_MAXBUFFER: usize = 0xfffff;

/// The largest document the registry writes: [`JUTE_MAXBUFFER`] less 1 KiB for the request's
/// path and framing (1,047,551 bytes). Measured against a real server in
/// `registry/tests/it/write_checks.rs`.
pub const MAX_DOCUMENT_BYTES: usize = JUTE_MAXBUFFER - 1024;

/// "N bytes: more than ZooKeeper holds in one node (...)".
pub fn too_large_reason(len: usize) -> String {
    format!(
        "document of {len} bytes: more than the {MAX_DOCUMENT_BYTES} bytes ZooKeeper holds in \
         one node (jute.maxbuffer {JUTE_MAXBUFFER}, less 1 KiB for the request)"
    )
}

pub use zk::Stat;

/// Which tree a document belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Env {
    /// The published tree under the root.
    Live,
    /// Drafts and sandbox apps under `<root>/sandbox`.
    Sandbox,
}

impl Env {
    /// The tree path of `rel` in this env: `apis/x` or `sandbox/apis/x`.
    pub fn path(self, rel: &str) -> String {
        match self {
            Env::Live => rel.to_owned(),
            Env::Sandbox => format!("sandbox/{rel}"),
        }
    }

    /// The prefix of this env's tree (`""` or `"sandbox"`).
    pub fn prefix(self) -> &'static str {
        match self {
            Env::Live => "",
            Env::Sandbox => "sandbox",
        }
    }

    /// `live` or `sandbox`.
    pub fn name(self) -> &'static str {
        match self {
            Env::Live => "live",
            Env::Sandbox => "sandbox",
        }
    }
}

/// A write's precondition, from `If-Match` / `If-None-Match: *` / `expected_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Unconditional (create or overwrite).
    Any,
    /// Only if the document exists with exactly this version.
    Version(i32),
    /// Only if the document does not exist.
    Absent,
}

/// A document as read: bytes and its znode stat (`stat.version` is the ETag).
#[derive(Debug, Clone)]
pub struct Doc {
    /// The bytes as stored.
    pub data: Vec<u8>,
    /// The znode's stat (`version` is the ETag).
    pub stat: Stat,
}

/// How a versioned write ended.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// The znode's stat (`version` is the ETag).
    pub stat: Stat,
    /// Whether the write created the document.
    pub created: bool,
}

/// The registry's ZooKeeper access.
pub struct Store {
    hosts: String,
    root: String,
    session_timeout: Duration,
    auth: Option<ZkAuth>,
    client: Mutex<Option<zk::Client>>,
    /// This process's latest writes, for the tree watcher ([`Store::wrote`]).
    own_writes: std::sync::Mutex<std::collections::VecDeque<OwnWrite>>,
}

/// One write this process made: the tree path, the written znode's `mzxid` (0 for a delete)
/// and when.
#[derive(Debug, Clone)]
struct OwnWrite {
    rel: String,
    mzxid: i64,
    at: std::time::Instant,
}

/// How many of its own writes a store remembers.
const OWN_WRITES_KEPT: usize = 4096;
/// How long a delete counts as this process's own for [`Store::wrote`] (a delete has no
/// zxid to compare).
const OWN_DELETE_WINDOW: Duration = Duration::from_secs(30);

/// The longest a ZooKeeper operation may take before the request is answered 503.
pub const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Bounds a ZooKeeper operation by [`OP_TIMEOUT`] (a lost connection would otherwise hold the
/// request until the client reconnects or the session expires).
async fn timed<T, E: From<zk::Error>>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(OP_TIMEOUT, fut).await {
        Ok(r) => r,
        Err(_) => Err(E::from(zk::Error::Timeout)),
    }
}

impl Store {
    /// A store of the tree under `root` on the ZooKeeper `hosts` (connected on first use).
    pub fn new(hosts: &str, root: &str) -> Store {
        Store {
            hosts: hosts.to_owned(),
            root: normalize_root(root),
            session_timeout: Duration::from_secs(10),
            auth: None,
            client: Mutex::new(None),
            own_writes: std::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Remembers a write of this process at tree path `rel` (`mzxid` 0: a delete).
    fn note_write(&self, rel: &str, mzxid: i64) {
        let mut writes = self.own_writes.lock().unwrap_or_else(|e| e.into_inner());
        if writes.len() >= OWN_WRITES_KEPT {
            writes.pop_front();
        }
        writes.push_back(OwnWrite {
            rel: rel.to_owned(),
            mzxid,
            at: std::time::Instant::now(),
        });
    }

    /// Whether this process wrote the document at `rel` as its znode's `mzxid` says (`None`:
    /// a delete, made by this process within the last 30 s). The tree watcher tells the
    /// registry's own writes from others' with it (docs/operations/registry.md, "Changes outside the
    /// registry").
    pub fn wrote(&self, rel: &str, mzxid: Option<i64>) -> bool {
        let writes = self.own_writes.lock().unwrap_or_else(|e| e.into_inner());
        writes.iter().rev().any(|w| {
            w.rel == rel
                && match mzxid {
                    Some(z) => w.mzxid == z,
                    None => w.mzxid == 0 && w.at.elapsed() < OWN_DELETE_WINDOW,
                }
        })
    }

    /// The `mzxid` of this process's latest write of `rel`, if it remembers one (0: a delete).
    pub fn last_write_zxid(&self, rel: &str) -> Option<i64> {
        let writes = self.own_writes.lock().unwrap_or_else(|e| e.into_inner());
        writes.iter().rev().find(|w| w.rel == rel).map(|w| w.mzxid)
    }

    /// Authenticates every session with `auth` (`None`: an open tree, as v1).
    pub fn with_auth(mut self, auth: Option<ZkAuth>) -> Store {
        self.auth = auth;
        self
    }

    /// The credentials the store authenticates with, if any.
    pub fn auth(&self) -> Option<&ZkAuth> {
        self.auth.as_ref()
    }

    /// The user the store authenticates as, if any.
    pub fn auth_user(&self) -> Option<&str> {
        self.auth.as_ref().map(ZkAuth::user)
    }

    /// The ACL policy of the tree (from the root's ACL); `None` for an open tree. A registry
    /// with credentials refuses to create an open tree: the root must be made by
    /// `portico zk lockdown` (or exist open, as a v1 tree).
    async fn policy(&self, client: &zk::Client) -> ApiResult<Option<AclPolicy>> {
        let policy = timed(read_policy(client, &self.root))
            .await
            .map_err(|e| ApiError::from_zk(e, "the root"))?;
        if policy.is_none() && self.auth.is_some() {
            let exists = timed(client.check_stat(&self.root))
                .await
                .map_err(|e| ApiError::from_zk(e, "the root"))?
                .is_some();
            if !exists {
                return Err(ApiError::unavailable(format!(
                    "the tree {} does not exist in ZooKeeper: create it locked with `portico zk lockdown` \
                     (docs/operations/zookeeper.md, \"ZooKeeper credentials and ACLs\")",
                    self.root
                )));
            }
        }
        Ok(policy)
    }

    /// The ACL of a new node at tree path `rel`.
    fn acl(&self, policy: Option<&AclPolicy>, rel: &str) -> Vec<zk::Acl> {
        create_acl(policy, rel)
    }

    /// The root of the tree (normalized, e.g. `/portico`).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The ZooKeeper connect string.
    pub fn hosts(&self) -> &str {
        &self.hosts
    }

    /// The absolute znode path of a tree path.
    pub fn abs(&self, rel: &str) -> String {
        join_path(&self.root, rel)
    }

    /// A client on a live session, connecting (again) if there is none or it has expired.
    pub async fn client(&self) -> ApiResult<zk::Client> {
        let mut guard = self.client.lock().await;
        if let Some(client) = guard.as_ref() {
            match client.state() {
                zk::SessionState::Disconnected => {
                    return Err(ApiError::unavailable(format!(
                        "lost the connection to ZooKeeper at {}; retry later",
                        self.hosts
                    )))
                }
                state if !state.is_terminated() => return Ok(client.clone()),
                _ => {}
            }
        }
        let client = timed(
            ZkAuth::connector(self.auth.as_ref())
                .with_session_timeout(self.session_timeout)
                .with_fail_eagerly()
                .connect(&self.hosts),
        )
        .await
        .map_err(|e| {
            ApiError::unavailable(format!(
                "cannot connect to ZooKeeper at {}: {e}",
                self.hosts
            ))
        })?;
        *guard = Some(client.clone());
        Ok(client)
    }

    /// Whether a session can be had now (for `/health`).
    pub async fn healthy(&self) -> bool {
        match self.client().await {
            Ok(c) => timed(c.check_stat("/")).await.is_ok(),
            Err(_) => false,
        }
    }

    /// Reads a document; `None` if it does not exist.
    pub async fn get(&self, rel: &str) -> ApiResult<Option<Doc>> {
        let client = self.client().await?;
        match timed(client.get_data(&self.abs(rel))).await {
            Ok((data, stat)) => Ok(Some(Doc { data, stat })),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(ApiError::from_zk(e, rel)),
        }
    }

    /// Reads a document that must exist (404 otherwise, naming `what`).
    pub async fn require(&self, rel: &str, what: &str) -> ApiResult<Doc> {
        self.get(rel)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("{what} does not exist")))
    }

    /// The stat of a node, if it exists.
    pub async fn stat(&self, rel: &str) -> ApiResult<Option<Stat>> {
        let client = self.client().await?;
        timed(client.check_stat(&self.abs(rel)))
            .await
            .map_err(|e| ApiError::from_zk(e, rel))
    }

    /// The children of a folder, sorted; empty if the folder does not exist.
    pub async fn list(&self, rel_dir: &str) -> ApiResult<Vec<String>> {
        let client = self.client().await?;
        match timed(client.list_children(&self.abs(rel_dir))).await {
            Ok(mut names) => {
                names.sort();
                Ok(names)
            }
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(ApiError::from_zk(e, rel_dir)),
        }
    }

    /// Reads every document of a folder (pipelined), sorted by name.
    pub async fn list_docs(&self, rel_dir: &str) -> ApiResult<Vec<(String, Doc)>> {
        let names = self.list(rel_dir).await?;
        let client = self.client().await?;
        let reads = timed(async {
            Ok::<_, zk::Error>(
                futures::future::join_all(
                    names
                        .iter()
                        .map(|n| client.get_data(&self.abs(&format!("{rel_dir}/{n}")))),
                )
                .await,
            )
        })
        .await
        .map_err(|e| ApiError::from_zk(e, rel_dir))?;
        let mut docs = Vec::with_capacity(names.len());
        for (name, read) in names.into_iter().zip(reads) {
            match read {
                Ok((data, stat)) => docs.push((name, Doc { data, stat })),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(ApiError::from_zk(e, rel_dir)),
            }
        }
        Ok(docs)
    }

    /// Creates the folder (and its ancestors) if missing.
    pub async fn ensure_dir(&self, rel_dir: &str) -> ApiResult<()> {
        let client = self.client().await?;
        let policy = self.policy(&client).await?;
        timed(ensure_path_with(
            &client,
            &self.root,
            &self.abs(rel_dir),
            policy.as_ref(),
        ))
        .await
        .map_err(|e| ApiError::from_zk(e, rel_dir))
    }

    /// Writes a document under a precondition: creates it (parents too) or sets it with the
    /// expected version. 409 on a version mismatch or an existing document under `Absent`,
    /// 404 when `Version` is given and the document is gone.
    pub async fn put(&self, rel: &str, data: &[u8], pre: Precondition) -> ApiResult<Written> {
        let written = self.put_unnoted(rel, data, pre).await?;
        self.note_write(rel, written.stat.mzxid);
        Ok(written)
    }

    async fn put_unnoted(&self, rel: &str, data: &[u8], pre: Precondition) -> ApiResult<Written> {
        // Over ZooKeeper's limit the server drops the session instead of answering: 413 first.
        if data.len() > MAX_DOCUMENT_BYTES {
            return Err(ApiError::too_large(format!(
                "{rel}: {}",
                too_large_reason(data.len())
            )));
        }
        let client = self.client().await?;
        let abs = self.abs(rel);
        match pre {
            Precondition::Version(v) => {
                let stat = timed(client.set_data(&abs, data, Some(v)))
                    .await
                    .map_err(|e| ApiError::from_zk(e, rel))?;
                Ok(Written {
                    stat,
                    created: false,
                })
            }
            Precondition::Absent => {
                let stat = self.create(&client, rel, data).await?;
                Ok(Written {
                    stat,
                    created: true,
                })
            }
            Precondition::Any => {
                for _ in 0..5 {
                    match timed(client.set_data(&abs, data, None)).await {
                        Ok(stat) => {
                            return Ok(Written {
                                stat,
                                created: false,
                            })
                        }
                        Err(zk::Error::NoNode) => {}
                        Err(e) => return Err(ApiError::from_zk(e, rel)),
                    }
                    match self.create(&client, rel, data).await {
                        Ok(stat) => {
                            return Ok(Written {
                                stat,
                                created: true,
                            })
                        }
                        Err(e) if e.code == "CONFLICT" => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(ApiError::conflict(format!(
                    "{rel} keeps being created and deleted concurrently"
                )))
            }
        }
    }

    async fn create(&self, client: &zk::Client, rel: &str, data: &[u8]) -> ApiResult<Stat> {
        let abs = self.abs(rel);
        let policy = self.policy(client).await?;
        let acl = self.acl(policy.as_ref(), rel);
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
        for _ in 0..2 {
            match timed(client.create(&abs, data, &options)).await {
                Ok((stat, _)) => return Ok(self.valid_stat(client, rel, stat).await),
                Err(zk::Error::NoNode) => {
                    if let Some((parent, _)) = abs.rsplit_once('/') {
                        timed(ensure_path_with(
                            client,
                            &self.root,
                            parent,
                            policy.as_ref(),
                        ))
                        .await
                        .map_err(|e| ApiError::from_zk(e, rel))?;
                    }
                }
                Err(e) => return Err(ApiError::from_zk(e, rel)),
            }
        }
        Err(ApiError::conflict(format!(
            "{rel}: parent keeps disappearing"
        )))
    }

    /// Some servers return an invalid stat for creates (ZOOKEEPER-4026): read it then.
    async fn valid_stat(&self, client: &zk::Client, rel: &str, stat: Stat) -> Stat {
        if stat.version >= 0 && stat.mzxid > 0 {
            return stat;
        }
        match timed(client.check_stat(&self.abs(rel))).await {
            Ok(Some(s)) => s,
            _ => stat,
        }
    }

    /// Deletes a document (with `Version`: only at that version). 404 if missing.
    pub async fn delete(&self, rel: &str, pre: Precondition) -> ApiResult<()> {
        let client = self.client().await?;
        let version = match pre {
            Precondition::Version(v) => Some(v),
            _ => None,
        };
        timed(client.delete(&self.abs(rel), version))
            .await
            .map_err(|e| ApiError::from_zk(e, rel))?;
        self.note_write(rel, 0);
        Ok(())
    }

    /// Runs several writes atomically (a ZooKeeper multi). Each op names its tree path.
    pub async fn multi(&self, ops: &[Op]) -> ApiResult<Vec<Option<Stat>>> {
        // One request carries every op: together they must fit ZooKeeper's limit.
        let total: usize = ops
            .iter()
            .map(|op| {
                let data = match op {
                    Op::Create { data, .. } | Op::Set { data, .. } => data.len(),
                    _ => 0,
                };
                data + self.abs(op.rel()).len() + 64
            })
            .sum();
        if total > MAX_DOCUMENT_BYTES {
            return Err(ApiError::too_large(format!(
                "one atomic write of {} documents: {}",
                ops.len(),
                too_large_reason(total)
            )));
        }
        let client = self.client().await?;
        let policy = if ops.iter().any(|op| matches!(op, Op::Create { .. })) {
            self.policy(&client).await?
        } else {
            None
        };
        let acls: Vec<Vec<zk::Acl>> = ops
            .iter()
            .map(|op| self.acl(policy.as_ref(), op.rel()))
            .collect();
        let mut writer = client.new_multi_writer();
        for (op, acl) in ops.iter().zip(&acls) {
            let result = match op {
                Op::Create { rel, data } => writer.add_create(
                    &self.abs(rel),
                    data,
                    &zk::CreateMode::Persistent.with_acls(zk::Acls::new(acl)),
                ),
                Op::Set { rel, data, version } => {
                    writer.add_set_data(&self.abs(rel), data, Some(*version))
                }
                Op::Check { rel, version } => writer.add_check_version(&self.abs(rel), *version),
                Op::Delete { rel, version } => writer.add_delete(&self.abs(rel), *version),
            };
            result.map_err(|e| ApiError::internal(format!("bad multi op: {e}")))?;
        }
        match timed(writer.commit()).await {
            Ok(results) => {
                let stats: Vec<Option<Stat>> = results
                    .into_iter()
                    .map(|r| match r {
                        zk::MultiWriteResult::Create { stat, .. } => Some(stat),
                        zk::MultiWriteResult::SetData { stat } => Some(stat),
                        _ => None,
                    })
                    .collect();
                for (op, stat) in ops.iter().zip(&stats) {
                    match (op, stat) {
                        (Op::Delete { rel, .. }, _) => self.note_write(rel, 0),
                        (_, Some(stat)) => {
                            let stat = self.valid_stat(&client, op.rel(), *stat).await;
                            self.note_write(op.rel(), stat.mzxid);
                        }
                        _ => {}
                    }
                }
                Ok(stats)
            }
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                let what = ops.get(index).map(Op::rel).unwrap_or("document");
                Err(ApiError::from_zk(source, what))
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                Err(ApiError::from_zk(source, "multi write"))
            }
        }
    }

    /// The absolute root of an env's served tree.
    fn env_root(&self, env: Env) -> String {
        match env {
            Env::Live => self.root.clone(),
            Env::Sandbox => self.abs("sandbox"),
        }
    }

    /// The whole served tree of an env, with its generation (as a gateway computes it).
    pub async fn tree(&self, env: Env) -> ApiResult<Tree> {
        let client = self.client().await?;
        let root = self.env_root(env);
        timed(read_tree(&client, &root))
            .await
            .map_err(|e| ApiError::from_zk(e, env.name()))
    }

    /// The generation [`Store::tree`] would answer, without reading the documents.
    pub async fn generation(&self, env: Env) -> ApiResult<u64> {
        let client = self.client().await?;
        let root = self.env_root(env);
        timed(read_generation(&client, &root))
            .await
            .map_err(|e| ApiError::from_zk(e, env.name()))
    }

    /// Appends a persistent sequential node `<rel_dir>/<prefix>NNNNNNNNNN`; returns its name.
    pub async fn append(&self, rel_dir: &str, prefix: &str, data: &[u8]) -> ApiResult<String> {
        self.create_sequential(rel_dir, prefix, data, zk::CreateMode::PersistentSequential)
            .await
    }

    /// Creates an ephemeral sequential node `<rel_dir>/<prefix>NNNNNNNNNN` on this store's
    /// session (ZooKeeper removes it when the session ends: leader election); returns its name.
    pub async fn create_ephemeral(
        &self,
        rel_dir: &str,
        prefix: &str,
        data: &[u8],
    ) -> ApiResult<String> {
        self.create_sequential(rel_dir, prefix, data, zk::CreateMode::EphemeralSequential)
            .await
    }

    /// Creates a sequential node of `mode` under `rel_dir` (made if missing); returns its name.
    async fn create_sequential(
        &self,
        rel_dir: &str,
        prefix: &str,
        data: &[u8],
        mode: zk::CreateMode,
    ) -> ApiResult<String> {
        let client = self.client().await?;
        let policy = self.policy(&client).await?;
        let acl = self.acl(policy.as_ref(), &format!("{rel_dir}/{prefix}"));
        let options = mode.with_acls(zk::Acls::new(&acl));
        let path = self.abs(&format!("{rel_dir}/{prefix}"));
        for _ in 0..2 {
            match timed(client.create(&path, data, &options)).await {
                Ok((_, seq)) => return Ok(format!("{prefix}{seq}")),
                Err(zk::Error::NoNode) => self.ensure_dir(rel_dir).await?,
                Err(e) => return Err(ApiError::from_zk(e, rel_dir)),
            }
        }
        Err(ApiError::internal(format!("cannot create {rel_dir}")))
    }
}

/// One write of a [`Store::multi`].
#[derive(Debug, Clone)]
pub enum Op {
    /// Create `rel` (its parent must exist).
    Create { rel: String, data: Vec<u8> },
    /// Set `rel`'s data if it is at `version`.
    Set {
        rel: String,
        data: Vec<u8>,
        version: i32,
    },
    /// Only if `rel` is at `version`.
    Check { rel: String, version: i32 },
    /// Delete `rel` (at `version`, if given).
    Delete { rel: String, version: Option<i32> },
}

impl Op {
    fn rel(&self) -> &str {
        match self {
            Op::Create { rel, .. }
            | Op::Set { rel, .. }
            | Op::Check { rel, .. }
            | Op::Delete { rel, .. } => rel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portico_testkit::{free_port, ZooKeeper};

    /// A store with the registry's credentials on a locked ZooKeeper.
    fn store(zk: &ZooKeeper) -> Store {
        let auth = zk
            .credentials()
            .map(|c| ZkAuth::parse(&c.registry).unwrap());
        Store::new(&zk.connect_string(), "/portico").with_auth(auth)
    }

    #[tokio::test]
    async fn writes_are_compare_and_set() {
        let zk = ZooKeeper::start_locked();
        let s = store(&zk);
        // Absent: created with its parents, version 0; a second create conflicts.
        let w = s
            .put("clusters/c", b"one", Precondition::Absent)
            .await
            .unwrap();
        assert!(w.created);
        assert_eq!(w.stat.version, 0);
        let e = s
            .put("clusters/c", b"x", Precondition::Absent)
            .await
            .unwrap_err();
        assert_eq!(e.code, "CONFLICT");
        // Version: only over that version.
        let e = s
            .put("clusters/c", b"x", Precondition::Version(7))
            .await
            .unwrap_err();
        assert_eq!(e.code, "CONFLICT");
        let w = s
            .put("clusters/c", b"two", Precondition::Version(0))
            .await
            .unwrap();
        assert!(!w.created);
        assert_eq!(w.stat.version, 1);
        let e = s
            .put("clusters/gone", b"x", Precondition::Version(0))
            .await
            .unwrap_err();
        assert_eq!(e.code, "NOT_FOUND");
        // Any: overwrites, or creates.
        let w = s
            .put("clusters/c", b"three", Precondition::Any)
            .await
            .unwrap();
        assert_eq!((w.created, w.stat.version), (false, 2));
        let w = s.put("apps/a", b"new", Precondition::Any).await.unwrap();
        assert!(w.created);

        let doc = s.get("clusters/c").await.unwrap().unwrap();
        assert_eq!((doc.data.as_slice(), doc.stat.version), (&b"three"[..], 2));
        assert!(s.get("clusters/none").await.unwrap().is_none());
        let e = s
            .require("clusters/none", "cluster \"none\"")
            .await
            .unwrap_err();
        assert_eq!(e.message, "cluster \"none\" does not exist");
        assert_eq!(s.stat("clusters/c").await.unwrap().unwrap().version, 2);

        // Deletes: at a version, or any; missing is 404.
        let e = s
            .delete("clusters/c", Precondition::Version(1))
            .await
            .unwrap_err();
        assert_eq!(e.code, "CONFLICT");
        s.delete("clusters/c", Precondition::Version(2))
            .await
            .unwrap();
        let e = s.delete("clusters/c", Precondition::Any).await.unwrap_err();
        assert_eq!(e.code, "NOT_FOUND");
        // Paths are under the root.
        assert_eq!(s.abs("apps/a"), "/portico/apps/a");
        assert!(s.healthy().await);
    }

    #[tokio::test]
    async fn folders_lists_and_appends() {
        let zk = ZooKeeper::start_locked();
        let s = store(&zk);
        assert!(
            s.list("apis").await.unwrap().is_empty(),
            "a missing folder is empty"
        );
        for (name, data) in [("b", "2"), ("a", "1"), ("c", "3")] {
            s.put(
                &format!("apis/{name}"),
                data.as_bytes(),
                Precondition::Absent,
            )
            .await
            .unwrap();
        }
        assert_eq!(s.list("apis").await.unwrap(), ["a", "b", "c"]);
        let docs = s.list_docs("apis").await.unwrap();
        let read: Vec<(&str, &[u8])> = docs
            .iter()
            .map(|(n, d)| (n.as_str(), d.data.as_slice()))
            .collect();
        assert_eq!(read, [("a", &b"1"[..]), ("b", b"2"), ("c", b"3")]);
        assert!(s.list_docs("nothing/here").await.unwrap().is_empty());

        s.ensure_dir("history/x/y").await.unwrap();
        s.ensure_dir("history/x/y").await.unwrap();
        assert_eq!(s.list("history/x").await.unwrap(), ["y"]);

        // Appends make the folder, and their names grow.
        let first = s.append("audit", "entry-", b"1").await.unwrap();
        let second = s.append("audit", "entry-", b"2").await.unwrap();
        assert!(
            first.starts_with("entry-") && second > first,
            "{first} {second}"
        );
        assert_eq!(s.list("audit").await.unwrap(), [first.clone(), second]);
        let doc = s.get(&format!("audit/{first}")).await.unwrap().unwrap();
        assert_eq!(doc.data, b"1");
    }

    #[tokio::test]
    async fn multi_writes_all_or_nothing() {
        let zk = ZooKeeper::start_locked();
        let s = store(&zk);
        s.ensure_dir("apis").await.unwrap();
        s.ensure_dir("history/a").await.unwrap();
        s.put("apis/a", b"v0", Precondition::Absent).await.unwrap();
        // A stale version fails the whole transaction: the history entry is not created.
        let stale = [
            Op::Set {
                rel: "apis/a".into(),
                data: b"v1".to_vec(),
                version: 5,
            },
            Op::Create {
                rel: "history/a/1".into(),
                data: b"v1".to_vec(),
            },
        ];
        let e = s.multi(&stale).await.unwrap_err();
        assert_eq!(e.code, "CONFLICT");
        assert!(e.message.contains("apis/a"), "{}", e.message);
        assert!(s.stat("history/a/1").await.unwrap().is_none());
        // The right version: every write, with the stats of creates and sets.
        let ok = [
            Op::Check {
                rel: "history/a".into(),
                version: 0,
            },
            Op::Set {
                rel: "apis/a".into(),
                data: b"v1".to_vec(),
                version: 0,
            },
            Op::Create {
                rel: "history/a/1".into(),
                data: b"v1".to_vec(),
            },
        ];
        let stats = s.multi(&ok).await.unwrap();
        assert!(stats[0].is_none());
        assert_eq!(stats[1].map(|st| st.version), Some(1));
        assert!(stats[2].is_some());
        assert_eq!(s.get("history/a/1").await.unwrap().unwrap().data, b"v1");
        let gone = [Op::Delete {
            rel: "apis/a".into(),
            version: Some(0),
        }];
        assert_eq!(s.multi(&gone).await.unwrap_err().code, "CONFLICT");
    }

    #[tokio::test]
    async fn trees_are_per_env() {
        let zk = ZooKeeper::start_locked();
        let s = store(&zk);
        s.put("clusters/live", b"{}", Precondition::Any)
            .await
            .unwrap();
        s.put(
            &Env::Sandbox.path("clusters/draft"),
            b"{}",
            Precondition::Any,
        )
        .await
        .unwrap();
        s.put("history/x/1", b"{}", Precondition::Any)
            .await
            .unwrap();
        let live = s.tree(Env::Live).await.unwrap();
        assert_eq!(live.docs.keys().collect::<Vec<_>>(), ["clusters/live"]);
        let sandbox = s.tree(Env::Sandbox).await.unwrap();
        assert_eq!(sandbox.docs.keys().collect::<Vec<_>>(), ["clusters/draft"]);
        assert!(live.generation > 0);
        // The stat-only generation is the full read's, in each env, and follows a write.
        assert_eq!(s.generation(Env::Live).await.unwrap(), live.generation);
        assert_eq!(
            s.generation(Env::Sandbox).await.unwrap(),
            sandbox.generation
        );
        s.put("clusters/live", b"{\"x\":1}", Precondition::Any)
            .await
            .unwrap();
        let after = s.tree(Env::Live).await.unwrap().generation;
        assert!(after > live.generation);
        assert_eq!(s.generation(Env::Live).await.unwrap(), after);
    }

    /// Every node the registry creates carries the ACL of docs/OPERATIONS.md: no world access,
    /// gateways read the served tree but not history, the operator never reads an app.
    #[tokio::test]
    async fn created_nodes_carry_the_policy_acl() {
        let zk = ZooKeeper::start_locked();
        let creds = zk.credentials().unwrap();
        let s = store(&zk);
        s.put("apps/a", br#"{"secret":"s"}"#, Precondition::Any)
            .await
            .unwrap();
        s.put("sandbox/apps/b", b"{}", Precondition::Absent)
            .await
            .unwrap();
        s.put("switches/x", b"{}", Precondition::Absent)
            .await
            .unwrap();
        s.ensure_dir("history").await.unwrap();
        s.multi(&[Op::Create {
            rel: "history/x".into(),
            data: b"{}".to_vec(),
        }])
        .await
        .unwrap();
        let entry = s.append("audit", "entry-", b"{}").await.unwrap();
        let client = s.client().await.unwrap();
        let perms = |acl: &[zk::Acl], who: &str| {
            let id = portico_testkit::digest_id(who);
            acl.iter()
                .find(|a| a.id() == id)
                .map_or(zk::Permission::NONE, |a| a.permission())
        };
        use zk::Permission as P;
        for (rel, gateway, operator) in [
            ("apps", P::READ, P::READ),
            ("apps/a", P::READ, P::NONE),
            ("sandbox/apps/b", P::READ, P::NONE),
            ("switches/x", P::READ, P::READ | P::WRITE),
            ("history", P::NONE, P::NONE),
            ("history/x", P::NONE, P::NONE),
            (&format!("audit/{entry}") as &str, P::NONE, P::READ),
        ] {
            let (acl, _) = client.get_acl(&s.abs(rel)).await.unwrap();
            assert!(acl.iter().all(|a| a.scheme() == "digest"), "{rel}: {acl:?}");
            assert_eq!(perms(&acl, &creds.registry), P::ALL, "{rel}");
            assert_eq!(perms(&acl, &creds.gateway), gateway, "{rel}");
            assert_eq!(perms(&acl, &creds.operator), operator, "{rel}");
        }
        // Without credentials: nothing.
        let anonymous = Store::new(&zk.connect_string(), "/portico");
        assert_eq!(
            anonymous.get("apps/a").await.unwrap_err().code,
            "ZOOKEEPER_UNAVAILABLE"
        );
        let e = anonymous
            .put("apis/y", b"{}", Precondition::Any)
            .await
            .unwrap_err();
        assert!(e.message.contains("refused"), "{}", e.message);
        // With credentials, a missing root is not created open.
        let elsewhere = Store::new(&zk.connect_string(), "/other")
            .with_auth(Some(ZkAuth::parse(&creds.registry).unwrap()));
        let e = elsewhere
            .put("apis/y", b"{}", Precondition::Any)
            .await
            .unwrap_err();
        assert!(e.message.contains("portico zk lockdown"), "{}", e.message);
    }

    #[tokio::test]
    async fn an_unreachable_zookeeper_is_503() {
        let s = Store::new(&format!("127.0.0.1:{}", free_port()), "/portico");
        assert!(!s.healthy().await);
        let e = s.get("apis/a").await.unwrap_err();
        assert_eq!(e.code, "ZOOKEEPER_UNAVAILABLE");
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
    }
}
