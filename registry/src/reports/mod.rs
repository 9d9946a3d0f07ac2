//! Daily and weekly per-API reports (docs/operations/history-and-reports.md, "Reports"), built from the history
//! store's per-minute rollups: per API and for the whole platform, calls, availability
//! (non-5xx share of the answers that were not deliberately degraded), degraded answers, TP50/90/99/999 from the merged latency histograms, top error codes,
//! breaker openings, switch flips, the change against the previous period, and a series for
//! the charts.
//!
//! A period is the rolling 24 hours (`day`) or 7 days (`week`) up to now, the current minute
//! included; the previous period is the same span just before it.
//!
//! - this module: [`build`] (the figures) and [`Report`];
//! - [`html`]: the report as a self-contained HTML page (mails, files, `--format html`);
//! - [`deliver`]: the owners' reports, written to `--reports-dir` and mailed, on schedule or
//!   on demand.

pub mod deliver;
pub mod html;

use crate::health::prometheus::is_degraded_code;
use crate::health::quantiles::{histogram_quantile, round3};
use crate::history::{HistoryStore, Rollup};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Top error codes listed per API and for the platform.
pub const TOP_CODES: usize = 5;
/// Slowest APIs listed.
pub const SLOWEST: usize = 5;

/// A report's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Week,
}

impl Period {
    /// `day` or `week`.
    pub fn parse(s: &str) -> Option<Period> {
        match s {
            "day" => Some(Period::Day),
            "week" => Some(Period::Week),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
        }
    }

    /// Its length in minutes.
    pub fn minutes(self) -> i64 {
        match self {
            Period::Day => 24 * 60,
            Period::Week => 7 * 24 * 60,
        }
    }

    /// The span of one point of its series, in minutes (an hour for a day, 6 hours for a week).
    pub fn step(self) -> i64 {
        match self {
            Period::Day => 60,
            Period::Week => 6 * 60,
        }
    }
}

/// Calls answered with one status and code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CodeCount {
    pub status: u16,
    pub code: String,
    pub count: u64,
}

/// One point of a series: the calls (5xx failures, degraded answers) of
/// `[at_ms, at_ms + step)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub at_ms: i64,
    pub calls: u64,
    pub errors: u64,
    /// Deliberately degraded answers (a switch that is on).
    pub degraded: u64,
}

/// The figures of the previous period, and how this one compares.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Change {
    /// The previous period's calls.
    pub previous_calls: u64,
    /// Its availability.
    pub previous_availability: Option<f64>,
    /// Its TP99, ms.
    pub previous_p99_ms: Option<f64>,
    /// Calls, percent change (`None` when the previous period had none).
    pub calls_pct: Option<f64>,
    /// Availability, change in percentage points.
    pub availability_pts: Option<f64>,
    /// TP99, percent change.
    pub p99_pct: Option<f64>,
}

/// The figures of one API (or of the platform, api `*`) over a period.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    pub api: String,
    /// The API's owner, if its document names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub calls: u64,
    /// Calls answered 5xx, degraded answers excluded.
    pub errors: u64,
    /// Calls deliberately degraded (503 `API_DEGRADED` or a switch's fallback answer): counted
    /// apart, never as failures (docs/operations/history-and-reports.md, "Availability and degraded answers").
    pub degraded: u64,
    /// The non-5xx share of the calls that were not degraded; `None` without such calls.
    pub availability: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    /// The commonest answers with a 4xx or 5xx status (degraded answers left out).
    pub top_errors: Vec<CodeCount>,
    pub breaker_openings: u64,
    pub switch_flips: u64,
    pub change: Change,
    /// Calls per [`Period::step`], oldest first.
    pub series: Vec<Point>,
}

/// A report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub period: Period,
    /// The first minute covered, Unix ms.
    pub from_ms: i64,
    /// The end of the current minute, Unix ms (exclusive).
    pub to_ms: i64,
    pub generated_at: String,
    /// The whole platform (or the APIs selected).
    pub platform: Figures,
    /// Each API with traffic or events in this period or the previous one, by id.
    pub apis: Vec<Figures>,
    /// The APIs with the highest TP99, slowest first.
    pub slowest: Vec<Slow>,
}

/// An API and its TP99.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slow {
    pub api: String,
    pub p99_ms: f64,
}

/// Sums of one API (or all) over a span.
#[derive(Default)]
struct Acc {
    total: Rollup,
    series: BTreeMap<i64, (u64, u64, u64)>,
}

impl Acc {
    fn add(&mut self, r: &Rollup, bucket: Option<i64>) {
        self.total.add(r);
        if let Some(b) = bucket {
            let e = self.series.entry(b).or_default();
            e.0 += r.calls();
            e.1 += errors_of(r);
            e.2 += degraded_of(r);
        }
    }
}

/// The 5xx failures of a rollup: 5xx answers that were not deliberate degradations.
fn errors_of(r: &Rollup) -> u64 {
    r.answers
        .iter()
        .filter(|((s, code), _)| *s >= 500 && !is_degraded_code(code))
        .map(|(_, n)| n)
        .sum()
}

/// The deliberately degraded answers of a rollup.
fn degraded_of(r: &Rollup) -> u64 {
    r.answers
        .iter()
        .filter(|((_, code), _)| is_degraded_code(code))
        .map(|(_, n)| n)
        .sum()
}

/// TP `q` in ms of a non-cumulative histogram.
fn quantile_ms(h: &[(f64, u64)], q: f64) -> Option<f64> {
    let mut cumulative = Vec::with_capacity(h.len());
    let mut sum = 0.0;
    for (le, n) in h {
        sum += *n as f64;
        cumulative.push((*le, sum));
    }
    histogram_quantile(q, &cumulative).map(|s| round3(s * 1000.0))
}

fn availability(calls: u64, errors: u64) -> Option<f64> {
    (calls > 0).then(|| {
        let a = 1.0 - errors as f64 / calls as f64;
        (a * 1_000_000.0).round() / 1_000_000.0
    })
}

fn pct(now: f64, before: f64) -> Option<f64> {
    (before > 0.0).then(|| ((now - before) / before * 1000.0).round() / 10.0)
}

/// The figures of an accumulated span, with the previous span's for the change.
fn figures(api: &str, cur: &Acc, prev: &Acc, from_min: i64, period: Period) -> Figures {
    let t = &cur.total;
    let calls = t.calls();
    let errors = errors_of(t);
    let degraded = degraded_of(t);
    let mut top: Vec<CodeCount> = t
        .answers
        .iter()
        .filter(|((s, code), n)| *s >= 400 && **n > 0 && !is_degraded_code(code))
        .map(|((status, code), n)| CodeCount {
            status: *status,
            code: code.clone(),
            count: *n,
        })
        .collect();
    top.sort_by(|a, b| b.count.cmp(&a.count).then(a.status.cmp(&b.status)));
    top.truncate(TOP_CODES);
    let p99 = quantile_ms(&t.latency, 0.99);
    let prev_calls = prev.total.calls();
    let prev_avail = availability(
        prev_calls.saturating_sub(degraded_of(&prev.total)),
        errors_of(&prev.total),
    );
    let prev_p99 = quantile_ms(&prev.total.latency, 0.99);
    let avail = availability(calls.saturating_sub(degraded), errors);
    let steps = period.minutes() / period.step();
    let series = (0..steps)
        .map(|i| {
            let (c, e, d) = cur.series.get(&i).copied().unwrap_or_default();
            Point {
                at_ms: (from_min + i * period.step()) * 60_000,
                calls: c,
                errors: e,
                degraded: d,
            }
        })
        .collect();
    Figures {
        api: api.to_owned(),
        owner: None,
        calls,
        errors,
        degraded,
        availability: avail,
        p50_ms: quantile_ms(&t.latency, 0.5),
        p90_ms: quantile_ms(&t.latency, 0.9),
        p99_ms: p99,
        p999_ms: quantile_ms(&t.latency, 0.999),
        top_errors: top,
        breaker_openings: t.breaker_openings,
        switch_flips: t.switch_flips,
        change: Change {
            previous_calls: prev_calls,
            previous_availability: prev_avail,
            previous_p99_ms: prev_p99,
            calls_pct: pct(calls as f64, prev_calls as f64),
            availability_pts: avail
                .zip(prev_avail)
                .map(|(a, b)| ((a - b) * 100_000.0).round() / 1000.0),
            p99_pct: p99.zip(prev_p99).and_then(|(a, b)| pct(a, b)),
        },
        series,
    }
}

/// The report of `period` up to `now_ms` (its minute included) over the APIs of `only` (all
/// when `None`); `owners` names each API's owner.
pub fn build(
    store: &HistoryStore,
    period: Period,
    only: Option<&BTreeSet<String>>,
    owners: &BTreeMap<String, String>,
    now_ms: u64,
) -> crate::history::store::Result<Report> {
    let now_min = i64::try_from(now_ms / 60_000).unwrap_or(i64::MAX);
    let len = period.minutes();
    let from = now_min - len + 1;
    let prev_from = from - len;
    let wanted = |api: &str| only.is_none_or(|set| set.contains(api));
    let one = only.filter(|s| s.len() == 1).and_then(|s| s.iter().next());
    let rows = store.minutes(prev_from, now_min, one.map(String::as_str))?;
    let mut cur: BTreeMap<String, Acc> = BTreeMap::new();
    let mut prev: BTreeMap<String, Acc> = BTreeMap::new();
    let mut all_cur = Acc::default();
    let mut all_prev = Acc::default();
    for r in rows.iter().filter(|r| wanted(&r.api)) {
        if r.minute >= from {
            let bucket = Some((r.minute - from) / period.step());
            cur.entry(r.api.clone()).or_default().add(r, bucket);
            all_cur.add(r, bucket);
        } else {
            prev.entry(r.api.clone()).or_default().add(r, None);
            all_prev.add(r, None);
        }
    }
    let ids: BTreeSet<&String> = cur.keys().chain(prev.keys()).collect();
    let empty = Acc::default();
    let mut apis: Vec<Figures> = ids
        .into_iter()
        .map(|id| {
            let mut f = figures(
                id,
                cur.get(id).unwrap_or(&empty),
                prev.get(id).unwrap_or(&empty),
                from,
                period,
            );
            f.owner = owners.get(id).cloned();
            f
        })
        .collect();
    apis.sort_by(|a, b| a.api.cmp(&b.api));
    let mut slowest: Vec<Slow> = apis
        .iter()
        .filter_map(|f| {
            f.p99_ms.map(|p| Slow {
                api: f.api.clone(),
                p99_ms: p,
            })
        })
        .collect();
    slowest.sort_by(|a, b| b.p99_ms.total_cmp(&a.p99_ms).then(a.api.cmp(&b.api)));
    slowest.truncate(SLOWEST);
    Ok(Report {
        period,
        from_ms: from * 60_000,
        to_ms: (now_min + 1) * 60_000,
        generated_at: portico_control::clock::now_rfc3339(),
        platform: figures("*", &all_cur, &all_prev, from, period),
        apis,
        slowest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Limits;

    fn rollup(
        api: &str,
        minute: i64,
        answers: &[(u16, &str, u64)],
        latency: &[(f64, u64)],
    ) -> Rollup {
        Rollup {
            api: api.to_owned(),
            minute,
            answers: answers
                .iter()
                .map(|(s, c, n)| ((*s, (*c).to_owned()), *n))
                .collect(),
            latency: latency.to_vec(),
            ..Rollup::default()
        }
    }

    #[test]
    fn figures_of_a_small_day() {
        let s = HistoryStore::in_memory(Limits::default()).unwrap();
        let now_min = 30_000_000;
        s.add(&[
            // This period: 90 OK, 10 502 in two minutes; 100 observations.
            rollup("a", now_min, &[(200, "OK", 50)], &[(0.01, 50)]),
            rollup(
                "a",
                now_min - 100,
                &[(200, "OK", 40), (502, "UPSTREAM_ERROR", 10)],
                &[(0.01, 40), (0.1, 10)],
            ),
            // The previous period: 40 calls, all OK.
            rollup("a", now_min - 24 * 60, &[(200, "OK", 40)], &[(0.01, 40)]),
            // Older than both: ignored.
            rollup("a", now_min - 2 * 24 * 60, &[(200, "OK", 7)], &[(0.01, 7)]),
        ])
        .unwrap();
        let r = build(
            &s,
            Period::Day,
            None,
            &BTreeMap::new(),
            (now_min as u64) * 60_000 + 5,
        )
        .unwrap();
        let a = &r.apis[0];
        assert_eq!((a.calls, a.errors), (100, 10));
        assert_eq!(a.availability, Some(0.9));
        // Rank 50 of 100: in (0, 10] ms, 50 of its 90: 50/90 * 10 ms.
        assert_eq!(a.p50_ms, Some(5.556));
        // Rank 99: the 9th of 10 in (10, 100] ms.
        assert_eq!(a.p99_ms, Some(91.0));
        assert_eq!(
            a.top_errors,
            vec![CodeCount {
                status: 502,
                code: "UPSTREAM_ERROR".into(),
                count: 10
            }]
        );
        assert_eq!(a.change.previous_calls, 40);
        assert_eq!(a.change.calls_pct, Some(150.0));
        assert_eq!(a.change.availability_pts, Some(-10.0));
        assert_eq!(a.series.len(), 24);
        assert_eq!(a.series.iter().map(|p| p.calls).sum::<u64>(), 100);
        assert_eq!(
            a.series[23].calls, 50,
            "the current minute is in the last hour"
        );
        assert_eq!(r.platform.calls, 100);
        assert_eq!(r.slowest[0].api, "a");
    }

    #[test]
    fn degraded_answers_are_reported_apart_from_failures() {
        let s = HistoryStore::in_memory(Limits::default()).unwrap();
        let now_min = 30_000_000;
        s.add(&[rollup(
            "promo.list",
            now_min - 5,
            &[
                (200, "OK", 99),
                (502, "UPSTREAM_ERROR", 1),
                (503, "API_DEGRADED", 300),
                (200, "DEGRADED_FALLBACK", 100),
            ],
            &[(0.01, 100)],
        )])
        .unwrap();
        let r = build(
            &s,
            Period::Day,
            None,
            &BTreeMap::new(),
            (now_min as u64) * 60_000,
        )
        .unwrap();
        let p = &r.apis[0];
        assert_eq!((p.calls, p.errors, p.degraded), (500, 1, 400));
        // 1 failure in the 100 answers not degraded: 99 %, where counting the 503s would
        // have said 39.8 %.
        assert_eq!(p.availability, Some(0.99));
        assert_eq!(p.top_errors.len(), 1, "{:?}", p.top_errors);
        assert_eq!(p.top_errors[0].code, "UPSTREAM_ERROR");
        assert_eq!(p.series.iter().map(|x| x.degraded).sum::<u64>(), 400);
        assert_eq!(r.platform.degraded, 400);
        assert_eq!(r.platform.availability, Some(0.99));
        let page = html::render(&r);
        assert!(page.contains("<td>400</td>"), "{page}");
    }
}
