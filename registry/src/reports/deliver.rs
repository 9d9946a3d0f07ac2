//! The owners' reports (docs/operations/history-and-reports.md, "Reports"): the platform's report and each owner's
//! (the APIs whose document names them in `owner`) are written to `--reports-dir` as HTML and
//! JSON, and each owner's is mailed to them when an SMTP server is configured (`--smtp`).
//!
//! The scheduler sends the daily report once a day at `--report-hour` (UTC), and the weekly one
//! on Mondays too; only the registry leading `leader/alerts` sends
//! ([`crate::alerts::is_leader`]). It remembers the last day it sent in
//! `<reports-dir>/last-sent`, so a restart does not send twice. `POST /api/v1/reports/send`
//! sends at once, from any registry.

use super::{build, html, Period, Report};
use crate::alerts::mail::Mailer;
use crate::history::HistoryStore;
use crate::state::{AppState, Shared};
use portico_control::v1;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// How often the scheduler looks at the clock.
pub const CHECK_EVERY: Duration = Duration::from_secs(60);

/// Where reports go.
#[derive(Clone)]
pub struct Delivery {
    pub history: Arc<HistoryStore>,
    pub dir: PathBuf,
    pub mailer: Option<Mailer>,
}

/// What one delivery did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Delivered {
    pub period: String,
    /// Files written.
    pub files: Vec<String>,
    /// Mails, one per owner.
    pub mails: Vec<Mail>,
}

/// One owner's mail.
#[derive(Debug, Clone, Serialize)]
pub struct Mail {
    pub to: String,
    pub apis: Vec<String>,
    pub sent: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The delivery this process was started with (`portico-registry` sets it once).
static CONFIGURED: OnceLock<Delivery> = OnceLock::new();

/// Sets the delivery of this process (the first call wins).
pub fn configure(d: Delivery) {
    let _ = CONFIGURED.set(d);
}

/// The delivery of this process, if configured.
pub fn configured() -> Option<Delivery> {
    CONFIGURED.get().cloned()
}

/// Each live API's owner, from the API documents.
pub async fn owners(state: &AppState) -> Result<BTreeMap<String, String>, String> {
    let docs = state
        .store
        .list_docs("apis")
        .await
        .map_err(|e| format!("cannot read the APIs: {}", e.message))?;
    Ok(docs
        .into_iter()
        .filter_map(|(id, doc)| {
            let def: v1::ApiDefinition = serde_json::from_slice(&doc.data).ok()?;
            Some((id, def.owner?))
        })
        .collect())
}

/// A file name of an address or period: `[A-Za-z0-9@._-]` kept, the rest `_`.
fn file_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '@' | '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_pair(dir: &Path, stem: &str, r: &Report, files: &mut Vec<String>) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create --reports-dir {}: {e}", dir.display()))?;
    let json = serde_json::to_vec_pretty(r).map_err(|e| e.to_string())?;
    for (ext, bytes) in [("html", html::render(r).into_bytes()), ("json", json)] {
        let path = dir.join(format!("{stem}.{ext}"));
        let tmp = dir.join(format!(".{stem}.{ext}.tmp"));
        std::fs::write(&tmp, &bytes)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        files.push(path.display().to_string());
    }
    Ok(())
}

/// Builds, writes and mails the reports of `period` now.
pub async fn deliver(state: &AppState, d: &Delivery, period: Period) -> Result<Delivered, String> {
    let owners = owners(state).await?;
    let now = portico_control::clock::now_ms();
    let day = portico_control::clock::rfc3339_ms(i64::try_from(now).unwrap_or(0));
    let day = day.get(..10).unwrap_or("unknown").to_owned();
    let mut by_owner: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (api, owner) in &owners {
        by_owner
            .entry(owner.clone())
            .or_default()
            .insert(api.clone());
    }
    let store = d.history.clone();
    let dir = d.dir.clone();
    let owners_c = owners.clone();
    let by_owner_c = by_owner.clone();
    let (mut out, reports) = tokio::task::spawn_blocking(move || {
        let mut out = Delivered {
            period: period.name().to_owned(),
            ..Delivered::default()
        };
        let all = build(&store, period, None, &owners_c, now).map_err(|e| e.to_string())?;
        write_pair(
            &dir,
            &format!("{day}-{}", period.name()),
            &all,
            &mut out.files,
        )?;
        let mut reports = Vec::new();
        for (owner, apis) in &by_owner_c {
            let r = build(&store, period, Some(apis), &owners_c, now).map_err(|e| e.to_string())?;
            let stem = format!("{day}-{}-{}", period.name(), file_part(owner));
            write_pair(&dir, &stem, &r, &mut out.files)?;
            reports.push((owner.clone(), apis.clone(), r));
        }
        Ok::<_, String>((out, reports))
    })
    .await
    .map_err(|e| format!("the report task failed: {e}"))??;
    for (owner, apis, r) in reports {
        let mut mail = Mail {
            to: owner.clone(),
            apis: apis.into_iter().collect(),
            sent: false,
            error: None,
        };
        match &d.mailer {
            Some(m) => {
                let subject = format!(
                    "Portico {} report: {} API(s), {} calls, availability {}",
                    period.name(),
                    mail.apis.len(),
                    r.platform.calls,
                    r.platform
                        .availability
                        .map(|a| format!("{:.3}%", a * 100.0))
                        .unwrap_or_else(|| "-".to_owned())
                );
                match m
                    .send(&owner, &subject, html::text(&r), Some(html::render(&r)))
                    .await
                {
                    Ok(()) => mail.sent = true,
                    Err(e) => {
                        tracing::warn!(to = %owner, error = %e, "report not mailed");
                        mail.error = Some(e);
                    }
                }
            }
            None => {
                mail.error =
                    Some("no SMTP server (--smtp): written to --reports-dir only".to_owned())
            }
        }
        out.mails.push(mail);
    }
    tracing::info!(
        period = period.name(),
        files = out.files.len(),
        mails = out.mails.len(),
        "reports delivered"
    );
    Ok(out)
}

/// Starts the scheduler (daily at `hour` UTC, weekly on Mondays).
pub fn start(state: &Shared, d: Delivery, hour: u8) {
    let weak: Weak<AppState> = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(CHECK_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Some(state) = weak.upgrade() else { return };
            if !crate::alerts::is_leader(&state) {
                continue;
            }
            let now = time::OffsetDateTime::now_utc();
            if now.hour() < hour {
                continue;
            }
            let today = now.date().to_string();
            let marker = d.dir.join("last-sent");
            let last = std::fs::read_to_string(&marker).unwrap_or_default();
            if last.trim() == today {
                continue;
            }
            let mut periods = vec![Period::Day];
            if now.weekday() == time::Weekday::Monday {
                periods.push(Period::Week);
            }
            let mut ok = true;
            for p in periods {
                if let Err(e) = deliver(&state, &d, p).await {
                    tracing::warn!(period = p.name(), error = %e, "scheduled report not delivered");
                    ok = false;
                }
            }
            if ok {
                if let Err(e) = std::fs::write(&marker, &today) {
                    tracing::warn!(error = %e, path = %marker.display(), "cannot remember the report day");
                }
            }
        }
    });
}
