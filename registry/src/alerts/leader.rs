//! Which registry sends: leader election by an ephemeral sequential znode under
//! `<root>/leader/alerts` (docs/operations/alerts.md, "Alerts"). Every registry evaluates the rules
//! (so any console shows the same alerts), but only the one holding the lowest node sends
//! notifications and scheduled reports.
//!
//! Each round a registry makes sure its node still exists (a new ZooKeeper session means the
//! old node is gone: it enrolls again, at the back) and reads the children. A registry that
//! cannot reach ZooKeeper is never the leader; a crashed leader's node disappears when its
//! session expires (10 s), and the next one takes over at its next round.

use crate::state::Shared;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The folder of the election.
pub const DIR: &str = "leader/alerts";
/// The prefix of the candidates' nodes.
const PREFIX: &str = "n-";

/// This registry's candidacy.
#[derive(Debug)]
pub struct Leadership {
    /// The folder of the election ([`DIR`] unless [`Leadership::in_dir`]).
    dir: &'static str,
    /// What the candidate node says (for people reading ZooKeeper): the registry's id.
    id: String,
    /// The name of this registry's node, once enrolled.
    node: Mutex<Option<String>>,
    /// The outcome of the latest check.
    leader: AtomicBool,
}

impl Leadership {
    /// A candidacy described by `id` (e.g. `hostname:pid listen-address`).
    pub fn new(id: &str) -> Leadership {
        Leadership::in_dir(DIR, id)
    }

    /// A candidacy in the election under `dir` (another task elected the same way).
    pub fn in_dir(dir: &'static str, id: &str) -> Leadership {
        Leadership {
            dir,
            id: id.to_owned(),
            node: Mutex::new(None),
            leader: AtomicBool::new(false),
        }
    }

    /// The registry's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the latest check found this registry the leader.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Enrolls if needed and finds out whether this registry leads now.
    pub async fn check(&self, state: &Shared) -> bool {
        let leads = match self.try_check(state).await {
            Ok(leads) => leads,
            Err(e) => {
                tracing::debug!(error = %e, "alert leadership: cannot check");
                false
            }
        };
        let was = self.leader.swap(leads, Ordering::Relaxed);
        if was != leads {
            tracing::info!(leader = leads, id = %self.id, "alert leadership changed");
        }
        leads
    }

    async fn try_check(&self, state: &Shared) -> Result<bool, String> {
        let mine = self.node.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let present = match &mine {
            Some(name) => state
                .store
                .stat(&format!("{}/{name}", self.dir))
                .await
                .map_err(|e| e.message)?
                .is_some_and(|s| s.ephemeral_owner != 0),
            None => false,
        };
        let mine = if present {
            mine
        } else {
            let name = state
                .store
                .create_ephemeral(self.dir, PREFIX, self.id.as_bytes())
                .await
                .map_err(|e| e.message)?;
            *self.node.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.clone());
            Some(name)
        };
        let children = state.store.list(self.dir).await.map_err(|e| e.message)?;
        // Sequence numbers are zero-padded: the lowest sorts first.
        let first = children.iter().filter(|c| c.starts_with(PREFIX)).min();
        Ok(first.is_some() && first == mine.as_ref())
    }
}
