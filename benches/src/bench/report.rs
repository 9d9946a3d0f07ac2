//! Medians, formatting, and writing a generated section into benches/RESULTS.md between
//! `<!-- portico-bench:<key>:begin -->` and `<!-- portico-bench:<key>:end -->` markers (the
//! hand-written reading around them is left alone).

use std::path::Path;

/// Median of `v` (mean of the two middle values for an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub fn f0(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0}")
    } else {
        "–".into()
    }
}

pub fn f1(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "–".into()
    }
}

pub fn ratio(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}×")
    } else {
        "–".into()
    }
}

pub fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.0}%", v * 100.0)
    } else {
        "–".into()
    }
}

/// µs shown as ms with two decimals.
pub fn ms(us: f64) -> String {
    if us.is_finite() {
        format!("{:.2}", us / 1000.0)
    } else {
        "–".into()
    }
}

/// Replaces (or appends) the generated section `key` of the results file.
pub fn write_section(path: &Path, key: &str, body: &str) -> anyhow::Result<()> {
    let begin = format!("<!-- portico-bench:{key}:begin -->");
    let end = format!("<!-- portico-bench:{key}:end -->");
    let old =
        std::fs::read_to_string(path).unwrap_or_else(|_| "# Portico benchmark results\n".into());
    let block = format!("{begin}\n{}\n{end}", body.trim_end());
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if e > b => format!("{}{}{}", &old[..b], block, &old[e + end.len()..]),
        _ => format!("{}\n\n{}\n", old.trim_end(), block),
    };
    std::fs::write(path, new)?;
    Ok(())
}

/// A markdown table from a header row and rows.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    out.push_str(&format!("| {} |\n", header.join(" | ")));
    out.push_str(&format!(
        "|{}\n",
        header.iter().map(|_| "---|").collect::<String>()
    ));
    for r in rows {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    out
}
