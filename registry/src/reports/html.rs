//! A report as one self-contained HTML page (inline styles and SVG charts, no scripts): what
//! owners receive by mail, what `--reports-dir` holds and what `--format html` answers.

use super::{Change, Figures, Report};
use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v} ms"))
        .unwrap_or_else(|| "-".to_owned())
}

fn percent(v: Option<f64>) -> String {
    v.map(|v| format!("{:.3}%", v * 100.0))
        .unwrap_or_else(|| "-".to_owned())
}

fn signed(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(v) if v >= 0.0 => format!("+{v}{unit}"),
        Some(v) => format!("{v}{unit}"),
        None => "-".to_owned(),
    }
}

fn change_line(c: &Change) -> String {
    format!(
        "vs previous: calls {} ({}), availability {} pts, TP99 {}",
        c.previous_calls,
        signed(c.calls_pct, "%"),
        signed(c.availability_pts, ""),
        signed(c.p99_pct, "%"),
    )
}

/// A bar chart of the calls series (5xx in red on top of each bar).
fn chart(f: &Figures) -> String {
    let w = 480.0;
    let h = 80.0;
    let n = f.series.len().max(1) as f64;
    let max = f.series.iter().map(|p| p.calls).max().unwrap_or(0).max(1) as f64;
    let bw = w / n;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"calls of {}\">",
        esc(&f.api)
    );
    for (i, p) in f.series.iter().enumerate() {
        let x = i as f64 * bw;
        let bh = p.calls as f64 / max * (h - 2.0);
        let eh = p.errors as f64 / max * (h - 2.0);
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"#4a7bd0\"/>",
            h - bh,
            (bw - 1.0).max(1.0)
        );
        if p.errors > 0 {
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{eh:.1}\" fill=\"#d04a4a\"/>",
                h - bh,
                (bw - 1.0).max(1.0)
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

fn section(out: &mut String, title: &str, f: &Figures) {
    let _ = write!(out, "<h2>{}</h2>", esc(title));
    if let Some(o) = &f.owner {
        let _ = write!(out, "<p>owner: {}</p>", esc(o));
    }
    let _ = write!(
        out,
        "<table><tr><th>calls</th><th>availability</th><th>TP50</th><th>TP90</th><th>TP99</th><th>TP99.9</th><th>5xx</th><th>degraded answers</th><th>breaker openings</th><th>switch flips</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        f.calls,
        percent(f.availability),
        ms(f.p50_ms),
        ms(f.p90_ms),
        ms(f.p99_ms),
        ms(f.p999_ms),
        f.errors,
        f.degraded,
        f.breaker_openings,
        f.switch_flips
    );
    let _ = write!(out, "<p>{}</p>", esc(&change_line(&f.change)));
    if !f.top_errors.is_empty() {
        out.push_str("<p>top errors: ");
        let items: Vec<String> = f
            .top_errors
            .iter()
            .map(|c| format!("{} {} × {}", c.status, esc(&c.code), c.count))
            .collect();
        out.push_str(&items.join(", "));
        out.push_str("</p>");
    }
    out.push_str(&chart(f));
}

/// The page.
pub fn render(r: &Report) -> String {
    let from = portico_control::clock::rfc3339_ms(r.from_ms);
    let to = portico_control::clock::rfc3339_ms(r.to_ms);
    let mut out = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Portico {} report</title>\
         <style>body{{font-family:sans-serif;margin:1.5em;color:#222}}table{{border-collapse:collapse}}\
         th,td{{border:1px solid #ccc;padding:3px 8px;text-align:right}}h2{{margin-top:1.5em}}</style></head><body>\
         <h1>Portico {} report</h1><p>{} to {} (generated {})</p>",
        r.period.name(),
        r.period.name(),
        esc(&from),
        esc(&to),
        esc(&r.generated_at)
    );
    if !r.slowest.is_empty() {
        out.push_str("<h2>Slowest APIs (TP99)</h2><ol>");
        for s in &r.slowest {
            let _ = write!(out, "<li>{}: {} ms</li>", esc(&s.api), s.p99_ms);
        }
        out.push_str("</ol>");
    }
    section(&mut out, "All APIs", &r.platform);
    for f in &r.apis {
        section(&mut out, &f.api, f);
    }
    if r.apis.is_empty() {
        out.push_str("<p>No traffic recorded in this period.</p>");
    }
    out.push_str("</body></html>\n");
    out
}

/// The plain-text alternative of a mailed report.
pub fn text(r: &Report) -> String {
    let mut out = format!(
        "Portico {} report, {} to {}\n\n",
        r.period.name(),
        portico_control::clock::rfc3339_ms(r.from_ms),
        portico_control::clock::rfc3339_ms(r.to_ms)
    );
    for f in std::iter::once(&r.platform).chain(&r.apis) {
        let name = if f.api == "*" { "All APIs" } else { &f.api };
        let _ = writeln!(
            out,
            "{name}: {} calls, availability {}, degraded answers {}, TP50 {}, TP90 {}, TP99 {}, TP99.9 {}, breaker openings {}, switch flips {}\n  {}",
            f.calls,
            percent(f.availability),
            f.degraded,
            ms(f.p50_ms),
            ms(f.p90_ms),
            ms(f.p99_ms),
            ms(f.p999_ms),
            f.breaker_openings,
            f.switch_flips,
            change_line(&f.change)
        );
    }
    out
}
