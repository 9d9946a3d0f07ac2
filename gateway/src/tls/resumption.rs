//! TLS session resumption for returning merchants (docs/operations/gateway.md, "TLS"):
//! stateless session tickets and a session-ID cache, both added to the acceptor Pingora
//! builds.
//!
//! Tickets are sealed with AES-256-GCM under a ticket key. Where the keys come from decides
//! who can resume where:
//!
//! - **`--tls-ticket-keys FILE`** (a fleet): every gateway given the same file seals with its
//!   first key and opens tickets sealed with any key in it, so a merchant resumes on whichever
//!   gateway the balancer picks. The file is re-read when it changes (every
//!   [`super::RELOAD_POLL`]); a file that does not parse is refused and the keys in use are
//!   kept. `ops/tls-ticket-keys.sh rotate FILE` puts a fresh key first and keeps only the one
//!   before it, so a key is erased two rotations after it started sealing: tickets live at
//!   most two rotation periods, and a key read from the file cannot open tickets older than
//!   that. Whoever can read the file can open the tickets sealed under its keys (for TLS 1.2
//!   that is the session's master secret): keep it readable by the gateway's user alone.
//! - **No file**: rustls' own ticketer (a random key per process, rotated every 6 hours) — a
//!   merchant resumes on the gateway that served it, until that process restarts.
//!
//! The session-ID cache (`--tls-session-cache`, entries) serves TLS 1.2 clients that do not
//! take tickets; it is per process.
//!
//! Every successful resumption is counted in `portico_tls_resumptions_total{via}`
//! (`ticket`, `session_id`): the SRE's evidence that returning merchants resume.

use prometheus::IntCounterVec;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::{ProducesTickets, StoresServerSessions};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Bytes of a ticket key (hex in the file: 64 characters per line).
pub const KEY_LEN: usize = 32;
/// Bytes naming the key a ticket was sealed with (a digest of the key, not the key).
const ID_LEN: usize = 8;
/// At most this many keys in a file: the sealing key and the ones still opening tickets.
pub const MAX_KEYS: usize = 4;
/// The lifetime hint sent with each ticket: one day, the rotation period the docs advise.
pub const TICKET_LIFETIME_S: u32 = 86_400;

/// One ticket key: its public id and the AEAD key.
struct TicketKey {
    id: [u8; ID_LEN],
    aead: LessSafeKey,
}

impl TicketKey {
    /// `None` only if ring refuses a 32-byte AES-256-GCM key (it does not).
    fn new(secret: &[u8; KEY_LEN]) -> Option<TicketKey> {
        let id_digest = Sha256::new()
            .chain_update(b"portico tls ticket key id\0")
            .chain_update(secret)
            .finalize();
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(&id_digest[..ID_LEN]);
        // The AEAD key is derived, so the id never sits next to the key it names.
        let aead_key = Sha256::new()
            .chain_update(b"portico tls ticket aead key\0")
            .chain_update(secret)
            .finalize();
        let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &aead_key).ok()?);
        Some(TicketKey { id, aead })
    }
}

/// Why a ticket key file was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read the TLS ticket key file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TLS ticket key file {path}, line {line}: {why}")]
    Line {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("TLS ticket key file {path} holds no key (one key per line, 64 hex digits)")]
    Empty { path: PathBuf },
    #[error("TLS ticket key file {path} holds more than {MAX_KEYS} keys: rotation keeps two")]
    TooMany { path: PathBuf },
    #[error("TLS ticket key file {path}: the crypto library refused a ticket key")]
    Crypto { path: PathBuf },
}

/// Parses a key file: one key per line as 64 hex digits, the first one sealing; blank lines
/// and `#` comments ignored.
pub fn parse_keys(path: &Path, text: &str) -> Result<Vec<[u8; KEY_LEN]>, KeyFileError> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: String| KeyFileError::Line {
            path: path.to_owned(),
            line: n + 1,
            why,
        };
        if line.len() != KEY_LEN * 2 {
            return Err(bad(format!(
                "a key is {} hex digits, this line has {} characters",
                KEY_LEN * 2,
                line.len()
            )));
        }
        let mut key = [0u8; KEY_LEN];
        for (i, pair) in line.as_bytes().chunks(2).enumerate() {
            let hex = std::str::from_utf8(pair).ok();
            key[i] = hex
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| bad("not hex".to_owned()))?;
        }
        if key.iter().all(|b| *b == 0) {
            return Err(bad("an all-zero key".to_owned()));
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(KeyFileError::Empty {
            path: path.to_owned(),
        });
    }
    if keys.len() > MAX_KEYS {
        return Err(KeyFileError::TooMany {
            path: path.to_owned(),
        });
    }
    Ok(keys)
}

/// The sealing keys of a parsed file, in its order.
fn ticket_keys(path: &Path, keys: &[[u8; KEY_LEN]]) -> Result<Vec<TicketKey>, KeyFileError> {
    keys.iter()
        .map(|k| {
            TicketKey::new(k).ok_or_else(|| KeyFileError::Crypto {
                path: path.to_owned(),
            })
        })
        .collect()
}

/// The fleet's ticket keys, read from a file shared by every gateway.
pub struct FileTicketer {
    path: PathBuf,
    /// The keys in use (the first one seals) and the file contents they came from.
    keys: arc_swap::ArcSwap<Vec<TicketKey>>,
    last_text: Mutex<String>,
    rng: SystemRandom,
    resumed: IntCounterVec,
    /// `portico_tls_ticket_key_reloads_total{result}`: changed files applied or refused.
    reloads: IntCounterVec,
}

impl std::fmt::Debug for FileTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTicketer")
            .field("path", &self.path)
            .field("keys", &self.keys.load().len())
            .finish()
    }
}

/// What re-reading the key file did.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyReload {
    Unchanged,
    Applied { keys: usize },
}

impl FileTicketer {
    /// Reads the key file; an unreadable or malformed file is an error (the gateway does not
    /// start with keys it cannot read).
    pub fn open(
        path: &Path,
        resumed: IntCounterVec,
        reloads: IntCounterVec,
    ) -> Result<Arc<FileTicketer>, KeyFileError> {
        let text = read(path)?;
        let keys = parse_keys(path, &text)?;
        Ok(Arc::new(FileTicketer {
            path: path.to_owned(),
            keys: arc_swap::ArcSwap::from_pointee(ticket_keys(path, &keys)?),
            last_text: Mutex::new(text),
            rng: SystemRandom::new(),
            resumed,
            reloads,
        }))
    }

    /// Re-reads the file; applies it when it changed and parses, refuses it (keeping the keys
    /// in use) otherwise.
    pub fn reload(&self) -> Result<KeyReload, KeyFileError> {
        let text = read(&self.path)?;
        let mut last = self.last_text.lock().unwrap_or_else(|e| e.into_inner());
        if *last == text {
            return Ok(KeyReload::Unchanged);
        }
        let keys = parse_keys(&self.path, &text)?;
        let n = keys.len();
        self.keys.store(Arc::new(ticket_keys(&self.path, &keys)?));
        *last = text;
        Ok(KeyReload::Applied { keys: n })
    }

    /// Re-reads the file every `every`, forever, logging what changed or was refused.
    pub async fn watch(self: Arc<Self>, every: std::time::Duration) {
        let mut failing = false;
        loop {
            tokio::time::sleep(every).await;
            match self.reload() {
                Ok(KeyReload::Applied { keys }) => {
                    failing = false;
                    self.reloads.with_label_values(&["applied"]).inc();
                    tracing::info!(path = %self.path.display(), keys, "TLS ticket keys reloaded");
                }
                Ok(KeyReload::Unchanged) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    self.reloads.with_label_values(&["refused"]).inc();
                    tracing::error!(error = %e, "TLS ticket key file refused; the keys in use are kept");
                }
                Err(_) => {}
            }
        }
    }
}

fn read(path: &Path) -> Result<String, KeyFileError> {
    std::fs::read_to_string(path).map_err(|source| KeyFileError::Read {
        path: path.to_owned(),
        source,
    })
}

impl ProducesTickets for FileTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        TICKET_LIFETIME_S
    }

    /// `id ‖ nonce ‖ AES-256-GCM(plain)`, the id as associated data.
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.keys.load();
        let key = keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(ID_LEN + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let mut body = out.split_off(ID_LEN + NONCE_LEN);
        key.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&key.id),
                &mut body,
            )
            .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    /// Opens a ticket sealed with any key of the file; anything else (another fleet's
    /// ticket, an erased key, a forged or cut ticket) is `None`: a full handshake.
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < ID_LEN + NONCE_LEN + AES_256_GCM.tag_len() {
            return None;
        }
        let (id, rest) = cipher.split_at(ID_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let keys = self.keys.load();
        let key = keys.iter().find(|k| k.id == id)?;
        let mut buf = sealed.to_vec();
        let plain_len = key
            .aead
            .open_in_place(
                Nonce::try_assume_unique_for_key(nonce).ok()?,
                Aad::from(&key.id),
                &mut buf,
            )
            .ok()?
            .len();
        buf.truncate(plain_len);
        self.resumed.with_label_values(&["ticket"]).inc();
        Some(buf)
    }
}

/// rustls' own ticketer (a random key per process), counting the tickets it opens.
#[derive(Debug)]
pub struct ProcessTicketer {
    inner: Arc<dyn ProducesTickets>,
    resumed: IntCounterVec,
}

impl ProcessTicketer {
    pub fn new(resumed: IntCounterVec) -> Result<ProcessTicketer, rustls::Error> {
        Ok(ProcessTicketer {
            inner: rustls::crypto::ring::Ticketer::new()?,
            resumed,
        })
    }
}

impl ProducesTickets for ProcessTicketer {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }
    fn lifetime(&self) -> u32 {
        self.inner.lifetime()
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.inner.encrypt(plain)
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let plain = self.inner.decrypt(cipher)?;
        self.resumed.with_label_values(&["ticket"]).inc();
        Some(plain)
    }
}

/// rustls' in-memory session-ID cache, counting the sessions it gives back.
#[derive(Debug)]
pub struct SessionCache {
    inner: Arc<rustls::server::ServerSessionMemoryCache>,
    resumed: IntCounterVec,
}

impl SessionCache {
    pub fn new(entries: usize, resumed: IntCounterVec) -> SessionCache {
        SessionCache {
            inner: rustls::server::ServerSessionMemoryCache::new(entries),
            resumed,
        }
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let v = self.inner.get(key)?;
        self.resumed.with_label_values(&["session_id"]).inc();
        Some(v)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let v = self.inner.take(key)?;
        self.resumed.with_label_values(&["session_id"]).inc();
        Some(v)
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

/// How returning clients resume, from the flags.
#[derive(Debug, Clone, Default)]
pub struct ResumptionSettings {
    /// `--tls-ticket-keys`: the fleet's shared ticket key file.
    pub ticket_keys: Option<PathBuf>,
    /// `--tls-session-cache`: entries of the per-process session-ID cache.
    pub session_cache: usize,
}

/// The ticketer and session cache every TLS listener of this process uses.
pub struct Resumption {
    pub ticketer: Arc<dyn ProducesTickets>,
    pub sessions: Arc<dyn StoresServerSessions>,
    /// The fleet's key file, when one is given (its watcher reloads it).
    pub key_file: Option<Arc<FileTicketer>>,
}

impl Resumption {
    /// Reads the key file (if any) and registers `portico_tls_resumptions_total`.
    pub fn open(
        settings: &ResumptionSettings,
        registry: &prometheus::Registry,
    ) -> Result<Resumption, String> {
        let counter = |name: &str, help: &str, label: &str, values: [&str; 2]| {
            let c = IntCounterVec::new(prometheus::Opts::new(name, help), &[label])
                .map_err(|e| e.to_string())?;
            registry
                .register(Box::new(c.clone()))
                .map_err(|e| format!("registering {name}: {e}"))?;
            for v in values {
                c.with_label_values(&[v]);
            }
            Ok::<_, String>(c)
        };
        let resumed = counter(
            "portico_tls_resumptions_total",
            "TLS handshakes resumed on the traffic listeners, by how (ticket, session_id)",
            "via",
            ["ticket", "session_id"],
        )?;
        let sessions = Arc::new(SessionCache::new(settings.session_cache, resumed.clone()));
        Ok(match &settings.ticket_keys {
            Some(path) => {
                let reloads = counter(
                    "portico_tls_ticket_key_reloads_total",
                    "Changed TLS ticket key files, by result (applied, refused)",
                    "result",
                    ["applied", "refused"],
                )?;
                let file = FileTicketer::open(path, resumed, reloads).map_err(|e| e.to_string())?;
                tracing::info!(path = %path.display(), keys = file.keys.load().len(), "TLS ticket keys loaded: tickets resume on every gateway sharing this file");
                Resumption {
                    ticketer: file.clone(),
                    sessions,
                    key_file: Some(file),
                }
            }
            None => Resumption {
                ticketer: Arc::new(ProcessTicketer::new(resumed).map_err(|e| e.to_string())?),
                sessions,
                key_file: None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;

    fn counter() -> IntCounterVec {
        IntCounterVec::new(Opts::new("t", "t"), &["via"]).unwrap()
    }

    fn key_line(b: u8) -> String {
        format!("{:02x}", b).repeat(KEY_LEN)
    }

    fn ticketer(dir: &tempfile::TempDir, lines: &[String]) -> (PathBuf, Arc<FileTicketer>) {
        let path = dir.path().join("keys");
        std::fs::write(&path, lines.join("\n")).unwrap();
        let t = FileTicketer::open(&path, counter(), counter()).unwrap();
        (path, t)
    }

    #[test]
    fn two_gateways_with_the_same_file_open_each_others_tickets() {
        let dir = tempfile::tempdir().unwrap();
        let (_, a) = ticketer(&dir, &[key_line(1)]);
        let (_, b) = ticketer(&dir, &[key_line(1)]);
        let ticket = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&ticket).unwrap(), b"session state");
        assert_eq!(b.resumed.with_label_values(&["ticket"]).get(), 1);
        // Fresh nonce per ticket: the same state never seals to the same bytes.
        assert_ne!(a.encrypt(b"session state").unwrap(), ticket);
    }

    #[test]
    fn a_forged_cut_or_foreign_ticket_is_a_full_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let (_, a) = ticketer(&dir, &[key_line(1)]);
        let other = tempfile::tempdir().unwrap();
        let (_, foreign) = ticketer(&other, &[key_line(2)]);
        let ticket = a.encrypt(b"state").unwrap();
        let mut flipped = ticket.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(a.decrypt(&flipped).is_none());
        let mut wrong_id = ticket.clone();
        wrong_id[0] ^= 1;
        assert!(a.decrypt(&wrong_id).is_none());
        for n in 0..ticket.len() {
            assert!(a.decrypt(&ticket[..n]).is_none(), "cut at {n}");
        }
        assert!(foreign.decrypt(&ticket).is_none());
        assert_eq!(a.resumed.with_label_values(&["ticket"]).get(), 0);
    }

    #[test]
    fn rotation_keeps_the_previous_key_opening_and_erases_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let (path, t) = ticketer(&dir, &[key_line(1)]);
        let old = t.encrypt(b"day 1").unwrap();
        // Rotate: key 2 seals, key 1 still opens.
        std::fs::write(&path, format!("{}\n{}\n", key_line(2), key_line(1))).unwrap();
        assert_eq!(t.reload().unwrap(), KeyReload::Applied { keys: 2 });
        assert_eq!(t.reload().unwrap(), KeyReload::Unchanged);
        let new = t.encrypt(b"day 2").unwrap();
        assert_eq!(t.decrypt(&old).unwrap(), b"day 1");
        assert_eq!(&new[..ID_LEN], &TicketKey::new(&[2; KEY_LEN]).unwrap().id);
        // Rotate again: key 1 is gone, its tickets are refused.
        std::fs::write(&path, format!("{}\n{}\n", key_line(3), key_line(2))).unwrap();
        t.reload().unwrap();
        assert!(t.decrypt(&old).is_none());
        assert_eq!(t.decrypt(&new).unwrap(), b"day 2");
    }

    #[test]
    fn a_bad_file_is_refused_and_the_keys_in_use_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (path, t) = ticketer(&dir, &[key_line(1)]);
        let ticket = t.encrypt(b"s").unwrap();
        for (text, why) in [
            ("", "holds no key"),
            ("# only a comment\n", "holds no key"),
            ("abcd\n", "64 hex digits"),
            (&"zz".repeat(KEY_LEN)[..], "not hex"),
            (&"00".repeat(KEY_LEN)[..], "all-zero"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = t.reload().unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
            assert_eq!(t.decrypt(&ticket).unwrap(), b"s");
        }
        let five: Vec<String> = (1..=5).map(key_line).collect();
        std::fs::write(&path, five.join("\n")).unwrap();
        assert!(t.reload().unwrap_err().to_string().contains("more than"));
        std::fs::remove_file(&path).unwrap();
        assert!(t.reload().unwrap_err().to_string().contains("cannot read"));
        assert_eq!(t.decrypt(&ticket).unwrap(), b"s");
    }

    #[test]
    fn the_key_file_names_line_numbers_and_skips_comments() {
        let path = Path::new("/keys");
        let text = format!(
            "# rotated 2026-12-02\n\n{}\n{}x\n",
            key_line(1),
            key_line(2)
        );
        let e = parse_keys(path, &text).unwrap_err().to_string();
        assert!(e.contains("line 4"), "{e}");
        let ok = parse_keys(path, &format!("# c\n{}\n", key_line(7))).unwrap();
        assert_eq!(ok, vec![[7u8; KEY_LEN]]);
    }
}
