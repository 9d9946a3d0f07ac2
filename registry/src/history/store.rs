//! The history store: one SQLite file (`--history-db`) holding what this registry observed of
//! the gateways, per API and per minute, and the alerts it evaluated (docs/operations/history-and-reports.md, "The
//! history store").
//!
//! Tables:
//! - `minutes (api, minute, calls, latency, breaker_openings, switch_flips)`: one row per API
//!   and Unix minute with traffic or events; `latency` is the minute's latency histogram with
//!   the gateways' buckets, as text `le=count` pairs (non-cumulative counts; `+Inf` last);
//! - `answers (api, minute, status, code, count)`: the minute's calls by HTTP status and
//!   envelope code;
//! - `alert_events`: alerts that fired or resolved, with their notifications.
//!
//! Rows are added to (a minute is written every 2 s while it is current, so the current minute
//! is always in the store); [`HistoryStore::prune`] drops minutes and events older than the
//! retention, then the oldest minutes while the file is larger than its bound, and gives the
//! space back (`auto_vacuum = INCREMENTAL`).
//!
//! This module sits with `zk_store` in the registry's layers: it imports nothing of the crate.
//! The store is synchronous; callers on the runtime go through `tokio::task::spawn_blocking`.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Days of history kept by default.
pub const DEFAULT_RETENTION_DAYS: u32 = 35;
/// The default bound of the file, in MiB.
pub const DEFAULT_MAX_MB: u64 = 1024;

/// A failure of the store (the file cannot be opened, a statement failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryError(pub String);

impl std::fmt::Display for HistoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HistoryError {}

impl From<rusqlite::Error> for HistoryError {
    fn from(e: rusqlite::Error) -> Self {
        HistoryError(format!("history store: {e}"))
    }
}

/// The store's results.
pub type Result<T> = std::result::Result<T, HistoryError>;

/// How much history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Minutes and events older than this many days are dropped.
    pub retention_days: u32,
    /// The file's bound in bytes: above it the oldest minutes are dropped first.
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            retention_days: DEFAULT_RETENTION_DAYS,
            max_bytes: DEFAULT_MAX_MB * 1024 * 1024,
        }
    }
}

/// A latency histogram: `(le, count)` with non-cumulative counts (observations in
/// `(previous le, le]`), sorted by `le`, in seconds; the last bound may be `+Inf`.
pub type Histogram = Vec<(f64, u64)>;

/// One API's figures for one minute (or, summed, for a longer span).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollup {
    /// The API id.
    pub api: String,
    /// The Unix minute (Unix seconds / 60).
    pub minute: i64,
    /// Calls by (HTTP status, envelope code).
    pub answers: BTreeMap<(u16, String), u64>,
    /// The latency histogram.
    pub latency: Histogram,
    /// Times a gateway's breaker for the API went open.
    pub breaker_openings: u64,
    /// Times the API's degradation switch was turned on or off.
    pub switch_flips: u64,
}

impl Rollup {
    /// Every call of the minute.
    pub fn calls(&self) -> u64 {
        self.answers.values().sum()
    }

    /// Adds `other`'s figures into these (the API and minute stay).
    pub fn add(&mut self, other: &Rollup) {
        for (k, n) in &other.answers {
            *self.answers.entry(k.clone()).or_default() += n;
        }
        self.latency = merge_histograms(&self.latency, &other.latency);
        self.breaker_openings += other.breaker_openings;
        self.switch_flips += other.switch_flips;
    }

    /// Whether there is nothing to record.
    pub fn is_empty(&self) -> bool {
        self.answers.values().all(|n| *n == 0)
            && self.latency.iter().all(|(_, n)| *n == 0)
            && self.breaker_openings == 0
            && self.switch_flips == 0
    }
}

/// The sum of two histograms, bound by bound (bounds of either kept).
pub fn merge_histograms(a: &[(f64, u64)], b: &[(f64, u64)]) -> Histogram {
    let mut by_le: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    for &(le, n) in a.iter().chain(b) {
        // Positive floats (and +Inf) order like their bits.
        by_le.entry(le.to_bits()).or_insert((le, 0)).1 += n;
    }
    by_le.into_values().filter(|(_, n)| *n > 0).collect()
}

/// `le=count` pairs, space-separated (`+Inf` for infinity).
fn encode_histogram(h: &[(f64, u64)]) -> String {
    let mut out = String::new();
    for (le, n) in h.iter().filter(|(_, n)| *n > 0) {
        if !out.is_empty() {
            out.push(' ');
        }
        if le.is_infinite() {
            out.push_str("+Inf");
        } else {
            out.push_str(&le.to_string());
        }
        out.push('=');
        out.push_str(&n.to_string());
    }
    out
}

fn decode_histogram(s: &str) -> Histogram {
    let mut h: Histogram = s
        .split_whitespace()
        .filter_map(|pair| {
            let (le, n) = pair.split_once('=')?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, n.parse().ok()?))
        })
        .collect();
    h.sort_by(|a, b| a.0.total_cmp(&b.0));
    h
}

/// An alert that fired or resolved, as the registry evaluated it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AlertEvent {
    /// The event's id (0 before it is stored).
    pub id: i64,
    /// When it happened, Unix milliseconds.
    pub at_ms: i64,
    /// The rule's name.
    pub rule: String,
    /// The API (`*` for the gateway-wide conditions).
    pub api: String,
    /// The rule's condition.
    pub condition: String,
    /// The rule's severity.
    pub severity: String,
    /// `firing` or `resolved`.
    pub state: String,
    /// The condition's value when it happened (`None`: no data, e.g. no traffic).
    pub value: Option<f64>,
    /// The rule's threshold.
    pub threshold: f64,
    /// When the condition started to hold, Unix milliseconds.
    pub started_at_ms: i64,
    /// The notifications sent for it (set by the registry that sent them): JSON.
    pub notifications: Option<serde_json::Value>,
}

/// The current state of one alert (rule × API) as the registry evaluates it now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AlertNow {
    /// The rule's name.
    pub rule: String,
    /// The API (`*` for the gateway-wide conditions).
    pub api: String,
    /// The rule's condition.
    pub condition: String,
    /// The rule's severity.
    pub severity: String,
    /// `pending` (holds, not yet for `for_s`), `firing`, or `resolving` (firing, false for
    /// less than `for_s`).
    pub state: String,
    /// The latest value.
    pub value: Option<f64>,
    /// The rule's threshold.
    pub threshold: f64,
    /// When the condition started to hold, Unix milliseconds.
    pub started_at_ms: i64,
    /// When it fired, Unix milliseconds.
    pub fired_at_ms: Option<i64>,
    /// A sentence for people.
    pub summary: String,
}

/// What the evaluator last published: whether it runs, when it last evaluated, and the alerts
/// that are not inactive.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AlertBoard {
    /// Whether this registry evaluates rules.
    pub evaluating: bool,
    /// Whether this registry sends the notifications (holds the `leader/alerts` lead).
    pub leader: bool,
    /// When the rules were last evaluated, Unix milliseconds.
    pub evaluated_at_ms: Option<i64>,
    /// Rules evaluated in that round.
    pub rules: usize,
    /// Why the last round could not evaluate (no metrics yet, ZooKeeper away, ...).
    pub problem: Option<String>,
    /// Pending, firing and resolving alerts.
    pub alerts: Vec<AlertNow>,
}

/// What [`HistoryStore::prune`] dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Minute rows dropped for their age.
    pub expired: usize,
    /// Minute rows dropped to bring the file under its bound.
    pub for_size: usize,
    /// The oldest minute kept afterwards.
    pub oldest_minute: Option<i64>,
}

/// The store: one SQLite connection, plus the alert board (in memory).
pub struct HistoryStore {
    conn: Mutex<Connection>,
    path: Option<PathBuf>,
    limits: Limits,
    board: Mutex<AlertBoard>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS minutes (
    api TEXT NOT NULL,
    minute INTEGER NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    latency TEXT NOT NULL DEFAULT '',
    breaker_openings INTEGER NOT NULL DEFAULT 0,
    switch_flips INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (api, minute)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS minutes_by_time ON minutes (minute);
CREATE TABLE IF NOT EXISTS answers (
    api TEXT NOT NULL,
    minute INTEGER NOT NULL,
    status INTEGER NOT NULL,
    code TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (api, minute, status, code)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS answers_by_time ON answers (minute);
CREATE TABLE IF NOT EXISTS alert_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    rule TEXT NOT NULL,
    api TEXT NOT NULL,
    condition TEXT NOT NULL,
    severity TEXT NOT NULL,
    state TEXT NOT NULL,
    value REAL,
    threshold REAL NOT NULL,
    started_at_ms INTEGER NOT NULL,
    notifications TEXT
);
CREATE INDEX IF NOT EXISTS alert_events_by_time ON alert_events (at_ms);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', '1');
";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HistoryStore {
    /// Opens (creating it and its folder if missing) the store at `path`.
    pub fn open(path: &Path, limits: Limits) -> Result<HistoryStore> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                HistoryError(format!(
                    "history store: cannot create {}: {e}",
                    parent.display()
                ))
            })?;
        }
        let conn = Connection::open(path).map_err(|e| {
            HistoryError(format!(
                "history store: cannot open {}: {e}",
                path.display()
            ))
        })?;
        // WAL: readers (reports) never wait for the writer; NORMAL is durable enough for
        // statistics (a power cut loses at most the last transactions).
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Self::init(conn, Some(path.to_path_buf()), limits)
    }

    /// A store in memory (for tests).
    pub fn in_memory(limits: Limits) -> Result<HistoryStore> {
        Self::init(Connection::open_in_memory()?, None, limits)
    }

    fn init(conn: Connection, path: Option<PathBuf>, limits: Limits) -> Result<HistoryStore> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Only effective on a new file (before the first table), which is when it matters.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.execute_batch(SCHEMA)?;
        Ok(HistoryStore {
            conn: Mutex::new(conn),
            path,
            limits,
            board: Mutex::new(AlertBoard::default()),
        })
    }

    /// Where the file is (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How much is kept.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Adds rollups to their minutes (one transaction): calls, histograms, openings and flips
    /// are summed with what the minute already holds.
    pub fn add(&self, rollups: &[Rollup]) -> Result<()> {
        let mut conn = lock(&self.conn);
        let tx = conn.transaction()?;
        {
            let mut read =
                tx.prepare_cached("SELECT latency FROM minutes WHERE api = ?1 AND minute = ?2")?;
            let mut write = tx.prepare_cached(
                "INSERT INTO minutes (api, minute, calls, latency, breaker_openings, switch_flips)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (api, minute) DO UPDATE SET
                   calls = calls + excluded.calls,
                   latency = excluded.latency,
                   breaker_openings = breaker_openings + excluded.breaker_openings,
                   switch_flips = switch_flips + excluded.switch_flips",
            )?;
            let mut answer = tx.prepare_cached(
                "INSERT INTO answers (api, minute, status, code, count) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (api, minute, status, code) DO UPDATE SET count = count + excluded.count",
            )?;
            for r in rollups.iter().filter(|r| !r.is_empty()) {
                let before: Option<String> = read
                    .query_row(params![r.api, r.minute], |row| row.get(0))
                    .optional()?;
                let latency = match before {
                    Some(text) => merge_histograms(&decode_histogram(&text), &r.latency),
                    None => merge_histograms(&[], &r.latency),
                };
                write.execute(params![
                    r.api,
                    r.minute,
                    to_i64(r.calls()),
                    encode_histogram(&latency),
                    to_i64(r.breaker_openings),
                    to_i64(r.switch_flips),
                ])?;
                for ((status, code), n) in r.answers.iter().filter(|(_, n)| **n > 0) {
                    answer.execute(params![r.api, r.minute, status, code, to_i64(*n)])?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The minutes `from..=to` (Unix minutes), of one API or all, ordered by API then minute.
    pub fn minutes(&self, from: i64, to: i64, api: Option<&str>) -> Result<Vec<Rollup>> {
        let conn = lock(&self.conn);
        let mut rows: BTreeMap<(String, i64), Rollup> = BTreeMap::new();
        let mut q = conn.prepare_cached(
            "SELECT api, minute, latency, breaker_openings, switch_flips FROM minutes
             WHERE minute >= ?1 AND minute <= ?2 AND (?3 IS NULL OR api = ?3)",
        )?;
        let found = q.query_map(params![from, to, api], |row| {
            Ok(Rollup {
                api: row.get(0)?,
                minute: row.get(1)?,
                answers: BTreeMap::new(),
                latency: decode_histogram(&row.get::<_, String>(2)?),
                breaker_openings: to_u64(row.get(3)?),
                switch_flips: to_u64(row.get(4)?),
            })
        })?;
        for r in found {
            let r = r?;
            rows.insert((r.api.clone(), r.minute), r);
        }
        let mut q = conn.prepare_cached(
            "SELECT api, minute, status, code, count FROM answers
             WHERE minute >= ?1 AND minute <= ?2 AND (?3 IS NULL OR api = ?3)",
        )?;
        let found = q.query_map(params![from, to, api], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, u16>(2)?,
                row.get::<_, String>(3)?,
                to_u64(row.get(4)?),
            ))
        })?;
        for a in found {
            let (api, minute, status, code, n) = a?;
            let r = rows.entry((api.clone(), minute)).or_insert_with(|| Rollup {
                api,
                minute,
                ..Rollup::default()
            });
            *r.answers.entry((status, code)).or_default() += n;
        }
        Ok(rows.into_values().collect())
    }

    /// The API ids with any minute in `from..=to`.
    pub fn apis(&self, from: i64, to: i64) -> Result<Vec<String>> {
        let conn = lock(&self.conn);
        let mut q = conn.prepare_cached(
            "SELECT DISTINCT api FROM minutes WHERE minute >= ?1 AND minute <= ?2 ORDER BY api",
        )?;
        let ids = q
            .query_map(params![from, to], |row| row.get(0))?
            .collect::<std::result::Result<Vec<String>, _>>()?;
        Ok(ids)
    }

    /// The oldest and newest minute held, if any.
    pub fn span(&self) -> Result<Option<(i64, i64)>> {
        let conn = lock(&self.conn);
        let span = conn.query_row("SELECT MIN(minute), MAX(minute) FROM minutes", [], |row| {
            Ok((row.get::<_, Option<i64>>(0)?, row.get::<_, Option<i64>>(1)?))
        })?;
        Ok(span.0.zip(span.1))
    }

    /// The file's size as SQLite sees it (pages in use and free), in bytes.
    pub fn size_bytes(&self) -> Result<u64> {
        let conn = lock(&self.conn);
        Ok(file_bytes(&conn)?)
    }

    /// Drops what is older than the retention (relative to `now_minute`), then the oldest
    /// minutes while the file exceeds its bound; returns the space to the file system.
    pub fn prune(&self, now_minute: i64) -> Result<Pruned> {
        let conn = lock(&self.conn);
        let horizon = now_minute - i64::from(self.limits.retention_days) * 24 * 60;
        let mut pruned = Pruned {
            expired: conn.execute("DELETE FROM minutes WHERE minute < ?1", [horizon])?,
            ..Pruned::default()
        };
        conn.execute("DELETE FROM answers WHERE minute < ?1", [horizon])?;
        conn.execute(
            "DELETE FROM alert_events WHERE at_ms < ?1",
            [horizon.saturating_mul(60_000)],
        )?;
        conn.execute_batch("PRAGMA incremental_vacuum;")?;
        // Over the bound: drop the oldest hour, again, until under it (never the last day).
        while file_bytes(&conn)? > self.limits.max_bytes {
            let Some(oldest) = conn.query_row("SELECT MIN(minute) FROM minutes", [], |r| {
                r.get::<_, Option<i64>>(0)
            })?
            else {
                break;
            };
            if oldest >= now_minute - 24 * 60 {
                break;
            }
            let cut = oldest + 60;
            pruned.for_size += conn.execute("DELETE FROM minutes WHERE minute < ?1", [cut])?;
            conn.execute("DELETE FROM answers WHERE minute < ?1", [cut])?;
            conn.execute_batch("PRAGMA incremental_vacuum;")?;
        }
        pruned.oldest_minute =
            conn.query_row("SELECT MIN(minute) FROM minutes", [], |r| r.get(0))?;
        Ok(pruned)
    }

    /// Stores an alert event; returns its id.
    pub fn add_event(&self, e: &AlertEvent) -> Result<i64> {
        let conn = lock(&self.conn);
        conn.execute(
            "INSERT INTO alert_events (at_ms, rule, api, condition, severity, state, value,
                threshold, started_at_ms, notifications)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                e.at_ms,
                e.rule,
                e.api,
                e.condition,
                e.severity,
                e.state,
                e.value,
                e.threshold,
                e.started_at_ms,
                e.notifications.as_ref().map(|v| v.to_string()),
            ],
        )?;
        Ok(conn.last_insert_rowid())
    }

    /// Records the notifications sent for an event.
    pub fn set_notifications(&self, id: i64, notifications: &serde_json::Value) -> Result<()> {
        let conn = lock(&self.conn);
        conn.execute(
            "UPDATE alert_events SET notifications = ?2 WHERE id = ?1",
            params![id, notifications.to_string()],
        )?;
        Ok(())
    }

    /// The newest `limit` events (older than event `before`, if given), newest first; of one
    /// rule and/or API if given.
    pub fn events(
        &self,
        limit: usize,
        before: Option<i64>,
        rule: Option<&str>,
        api: Option<&str>,
    ) -> Result<Vec<AlertEvent>> {
        let conn = lock(&self.conn);
        let mut q = conn.prepare_cached(
            "SELECT id, at_ms, rule, api, condition, severity, state, value, threshold,
                    started_at_ms, notifications
             FROM alert_events
             WHERE (?1 IS NULL OR id < ?1) AND (?2 IS NULL OR rule = ?2) AND (?3 IS NULL OR api = ?3)
             ORDER BY id DESC LIMIT ?4",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let events = q
            .query_map(params![before, rule, api, limit], |row| {
                Ok(AlertEvent {
                    id: row.get(0)?,
                    at_ms: row.get(1)?,
                    rule: row.get(2)?,
                    api: row.get(3)?,
                    condition: row.get(4)?,
                    severity: row.get(5)?,
                    state: row.get(6)?,
                    value: row.get(7)?,
                    threshold: row.get(8)?,
                    started_at_ms: row.get(9)?,
                    notifications: row
                        .get::<_, Option<String>>(10)?
                        .and_then(|s| serde_json::from_str(&s).ok()),
                })
            })?
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(events)
    }

    /// The alert board the evaluator last published.
    pub fn board(&self) -> AlertBoard {
        lock(&self.board).clone()
    }

    /// Publishes the evaluator's board.
    pub fn set_board(&self, board: AlertBoard) {
        *lock(&self.board) = board;
    }
}

/// Bytes of the database: pages in use plus free pages, times the page size.
fn file_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(to_u64(pages.saturating_mul(size)))
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollup(api: &str, minute: i64, ok: u64, bad: u64, latency: &[(f64, u64)]) -> Rollup {
        let mut answers = BTreeMap::new();
        answers.insert((200, "OK".to_owned()), ok);
        if bad > 0 {
            answers.insert((502, "UPSTREAM_ERROR".to_owned()), bad);
        }
        Rollup {
            api: api.to_owned(),
            minute,
            answers,
            latency: latency.to_vec(),
            ..Rollup::default()
        }
    }

    #[test]
    fn histograms_round_trip_and_merge() {
        let h = vec![(0.005, 3), (0.01, 0), (0.1, 7), (f64::INFINITY, 1)];
        let text = encode_histogram(&h);
        assert_eq!(text, "0.005=3 0.1=7 +Inf=1");
        assert_eq!(
            decode_histogram(&text),
            vec![(0.005, 3), (0.1, 7), (f64::INFINITY, 1)]
        );
        assert_eq!(
            merge_histograms(&[(0.1, 1), (0.005, 2)], &[(0.005, 1), (0.2, 4)]),
            vec![(0.005, 3), (0.1, 1), (0.2, 4)]
        );
        assert_eq!(decode_histogram(""), vec![]);
    }

    #[test]
    fn minutes_add_up_and_read_back() {
        let s = HistoryStore::in_memory(Limits::default()).unwrap();
        s.add(&[
            rollup("a", 100, 10, 1, &[(0.005, 11)]),
            rollup("b", 100, 5, 0, &[(0.1, 5)]),
        ])
        .unwrap();
        // The same minute again (the next 2 s of it): summed.
        let mut more = rollup("a", 100, 4, 2, &[(0.005, 1), (0.5, 5)]);
        more.breaker_openings = 1;
        more.switch_flips = 2;
        s.add(&[more, Rollup::default()]).unwrap();
        let rows = s.minutes(0, 1000, Some("a")).unwrap();
        assert_eq!(rows.len(), 1);
        let a = &rows[0];
        assert_eq!(a.calls(), 17);
        assert_eq!(a.answers[&(502, "UPSTREAM_ERROR".to_owned())], 3);
        assert_eq!(a.latency, vec![(0.005, 12), (0.5, 5)]);
        assert_eq!((a.breaker_openings, a.switch_flips), (1, 2));
        assert_eq!(s.minutes(0, 1000, None).unwrap().len(), 2);
        assert_eq!(s.minutes(101, 1000, None).unwrap().len(), 0);
        assert_eq!(s.apis(0, 1000).unwrap(), ["a", "b"]);
        assert_eq!(s.span().unwrap(), Some((100, 100)));
    }

    #[test]
    fn prune_keeps_the_retention_and_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            retention_days: 2,
            max_bytes: 400 * 1024,
        };
        let s = HistoryStore::open(&dir.path().join("sub/history.sqlite"), limits).unwrap();
        let now = 10_000_000;
        // Three days of one API, one row a minute, plus an old event.
        let rows: Vec<Rollup> = (0..3 * 24 * 60)
            .map(|i| {
                rollup(
                    "some.rather.long.api.name",
                    now - i,
                    100,
                    1,
                    &[(0.001, 30), (0.002, 30), (0.005, 41)],
                )
            })
            .collect();
        s.add(&rows).unwrap();
        s.add_event(&AlertEvent {
            at_ms: (now - 3 * 24 * 60) * 60_000,
            rule: "old".into(),
            ..AlertEvent::default()
        })
        .unwrap();
        let before = s.size_bytes().unwrap();
        assert!(before > limits.max_bytes, "{before}");
        let p = s.prune(now).unwrap();
        assert_eq!(
            p.expired,
            24 * 60 - 1,
            "the third day is past the retention"
        );
        assert!(p.for_size > 0, "then the oldest hours go for the bound");
        assert!(
            s.size_bytes().unwrap() <= limits.max_bytes || p.oldest_minute >= Some(now - 24 * 60)
        );
        let (oldest, newest) = s.span().unwrap().unwrap();
        assert_eq!(newest, now);
        assert_eq!(Some(oldest), p.oldest_minute);
        assert!(oldest > now - 2 * 24 * 60);
        assert!(s.events(10, None, None, None).unwrap().is_empty());
    }

    #[test]
    fn events_are_listed_newest_first_with_their_notifications() {
        let s = HistoryStore::in_memory(Limits::default()).unwrap();
        let mut e = AlertEvent {
            id: 0,
            at_ms: 1000,
            rule: "slow".into(),
            api: "a".into(),
            condition: "tp99_ms_above".into(),
            severity: "page".into(),
            state: "firing".into(),
            value: Some(312.5),
            threshold: 200.0,
            started_at_ms: 900,
            notifications: None,
        };
        let first = s.add_event(&e).unwrap();
        e.state = "resolved".into();
        e.value = None;
        e.at_ms = 2000;
        let second = s.add_event(&e).unwrap();
        s.set_notifications(first, &serde_json::json!([{"webhook": "x", "ok": true}]))
            .unwrap();
        let all = s.events(10, None, None, None).unwrap();
        assert_eq!(
            all.iter().map(|e| e.id).collect::<Vec<_>>(),
            [second, first]
        );
        assert_eq!(all[1].notifications.as_ref().unwrap()[0]["ok"], true);
        assert_eq!(all[0].value, None);
        assert_eq!(s.events(10, Some(second), None, None).unwrap().len(), 1);
        assert_eq!(s.events(10, None, Some("other"), None).unwrap().len(), 0);
        assert_eq!(
            s.events(1, None, Some("slow"), Some("a")).unwrap()[0].id,
            second
        );
    }
}
