//! Plain SVG charts for benches/plots/ (no dependency, no network): horizontal bar charts
//! with groups of series, and line charts over time. Written by the suites next to their
//! RESULTS.md sections.

use std::fmt::Write as _;
use std::path::Path;

const COLORS: &[&str] = &[
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" upper bound for an axis holding `max`.
fn nice_max(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(max.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * mag >= max {
            return m * mag;
        }
    }
    10.0 * mag
}

fn fmt_val(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v.abs() >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// One group of bars (a target) with one value per series.
pub struct Group {
    pub label: String,
    pub values: Vec<f64>,
}

/// Horizontal grouped bar chart: one row per group, one bar per series in it.
pub fn bars(
    path: &Path,
    title: &str,
    unit: &str,
    series: &[&str],
    groups: &[Group],
) -> anyhow::Result<()> {
    let label_w = 230.0;
    let plot_w = 520.0;
    let bar_h = 16.0;
    let gap = 10.0;
    let top = 48.0 + if series.len() > 1 { 18.0 } else { 0.0 };
    let per_group = bar_h * series.len() as f64 + gap;
    let height = top + per_group * groups.len() as f64 + 40.0;
    let width = label_w + plot_w + 90.0;
    let max = groups
        .iter()
        .flat_map(|g| g.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let axis = nice_max(max);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    if series.len() > 1 {
        let mut x = label_w;
        for (i, name) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let _ = writeln!(
                s,
                r#"<rect x="{x}" y="34" width="12" height="12" fill="{c}"/><text x="{}" y="44">{}</text>"#,
                x + 16.0,
                esc(name)
            );
            x += 30.0 + 7.0 * name.len() as f64;
        }
    }
    // grid
    for i in 0..=5 {
        let v = axis * i as f64 / 5.0;
        let x = label_w + plot_w * i as f64 / 5.0;
        let y1 = top - 4.0;
        let y2 = height - 34.0;
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{y1}" x2="{x}" y2="{y2}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
            y2 + 14.0,
            fmt_val(v)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
        label_w + plot_w / 2.0,
        height - 6.0,
        esc(unit)
    );
    for (gi, g) in groups.iter().enumerate() {
        let y0 = top + per_group * gi as f64;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            label_w - 8.0,
            y0 + bar_h * series.len() as f64 / 2.0 + 4.0,
            esc(&g.label)
        );
        for (si, v) in g.values.iter().enumerate() {
            if !v.is_finite() {
                continue;
            }
            let y = y0 + bar_h * si as f64;
            let w = plot_w * (v / axis).clamp(0.0, 1.0);
            let c = COLORS[si % COLORS.len()];
            let _ = writeln!(
                s,
                r#"<rect x="{label_w}" y="{y}" width="{w:.1}" height="{}" fill="{c}"/><text x="{:.1}" y="{}" font-size="11">{}</text>"#,
                bar_h - 2.0,
                label_w + w + 4.0,
                y + bar_h - 4.0,
                fmt_val(*v)
            );
        }
    }
    s.push_str("</svg>\n");
    write(path, &s)
}

/// One line of a line chart: (x, y) points.
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart of `lines` over a shared x axis.
pub fn lines(
    path: &Path,
    title: &str,
    x_unit: &str,
    y_unit: &str,
    lines: &[Line],
) -> anyhow::Result<()> {
    let (left, right, top, bottom) = (70.0, 20.0, 52.0, 44.0);
    let (width, height) = (760.0, 380.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let x_max = nice_max(xs.fold(0.0, f64::max));
    let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let y_max = nice_max(ys.filter(|v| v.is_finite()).fold(0.0, f64::max));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let mut lx = left;
    for (i, l) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="32" width="12" height="12" fill="{c}"/><text x="{}" y="42">{}</text>"#,
            lx + 16.0,
            esc(&l.label)
        );
        lx += 30.0 + 7.0 * l.label.len() as f64;
    }
    for i in 0..=5 {
        let y = top + plot_h - plot_h * i as f64 / 5.0;
        let x = left + plot_w * i as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end" fill="#555">{}</text>"##,
            left + plot_w,
            left - 6.0,
            y + 4.0,
            fmt_val(y_max * i as f64 / 5.0)
        );
        let _ = writeln!(
            s,
            r##"<text x="{x}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
            top + plot_h + 16.0,
            fmt_val(x_max * i as f64 / 5.0)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
        left + plot_w / 2.0,
        height - 8.0,
        esc(x_unit)
    );
    let _ = writeln!(
        s,
        r##"<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle" fill="#555">{}</text>"##,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        esc(y_unit)
    );
    for (i, l) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = l
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    left + plot_w * (x / x_max),
                    top + plot_h - plot_h * (y / y_max).clamp(0.0, 1.0)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
            pts.join(" ")
        );
    }
    s.push_str("</svg>\n");
    write(path, &s)
}

fn write(path: &Path, svg: &str) -> anyhow::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, svg)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_bounds() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(87.0), 100.0);
        assert_eq!(nice_max(101.0), 120.0);
        assert_eq!(nice_max(2.4e5), 2.5e5);
    }
}
