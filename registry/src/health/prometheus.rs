//! Reading a gateway's `/metrics` (the Prometheus text exposition format) into what the
//! health report needs of it ([`NodeMetrics`]); the metric names are the gateway's
//! (docs/operations/gateway.md, "Admin endpoints").

use std::collections::HashMap;

/// A series' identity in the report: (plane, api).
pub type Key = (String, String);

/// What one scrape of one node says about the APIs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeMetrics {
    /// Requests by key: (all, 5xx failures, degraded answers). A degraded answer (503
    /// `API_DEGRADED`, or a switch's fallback, code `DEGRADED_FALLBACK`) is a deliberate
    /// degradation, never a failure (docs/operations/history-and-reports.md, "Availability and degraded answers").
    pub requests: HashMap<Key, (f64, f64, f64)>,
    /// Requests by key, then by answer: (HTTP status, envelope code), for the history's
    /// per-minute rollups.
    pub answers: HashMap<Key, HashMap<(u16, String), f64>>,
    /// Latency histogram by key: cumulative (le, count), sorted by le.
    pub buckets: HashMap<Key, Vec<(f64, f64)>>,
    /// Breaker gauge by key: 0 closed, 1 open, 2 half-open.
    pub breaker: HashMap<Key, i64>,
    /// Calls in flight (the bulkhead gauge) by key.
    pub in_flight: HashMap<Key, f64>,
    /// Applied config generation by plane.
    pub generation: HashMap<String, i64>,
}

/// One sample line of the text exposition format.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Line {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The (plane, api) of a per-API series.
    fn key(&self) -> Option<Key> {
        Some((
            self.label("plane")?.to_owned(),
            self.label("api")?.to_owned(),
        ))
    }
}

/// A sample value, `+Inf`, `-Inf` and `NaN` included.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Parses one line (`name{a="x",b="y"} 1.5 [timestamp]`); `None` for comments, blanks and
/// anything malformed.
fn parse_line(line: &str) -> Option<Line> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let rest = &line[name_end..];
    let (labels, rest) = match rest.strip_prefix('{') {
        Some(after) => parse_labels(after)?,
        None => (Vec::new(), rest),
    };
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Line {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses the labels after `{` up to the closing `}` (values with `\"`, `\\` and `\n`
/// escapes); returns them and the text after `}`.
fn parse_labels(after: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    let mut chars = after.char_indices().peekable();
    loop {
        while chars
            .next_if(|(_, c)| *c == ',' || c.is_whitespace())
            .is_some()
        {}
        let (start, c) = chars.next()?;
        if c == '}' {
            return Some((labels, &after[start + 1..]));
        }
        let mut key = String::from(c);
        loop {
            let (_, c) = chars.next()?;
            if c == '=' {
                break;
            }
            key.push(c);
        }
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()?.1 {
                '"' => break,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                other => value.push(other),
            }
        }
        labels.push((key.trim().to_owned(), value));
    }
}

/// Whether an answer's envelope code says it was a deliberate degradation (a switch that is
/// on): 503 `API_DEGRADED`, or the switch's fallback answer (`DEGRADED_FALLBACK`). Such
/// answers are counted apart, never as failures (docs/operations/history-and-reports.md, "Availability and
/// degraded answers").
pub fn is_degraded_code(code: &str) -> bool {
    code == "API_DEGRADED" || code == "DEGRADED_FALLBACK"
}

/// Reads a node's `/metrics` text: requests (and 5xx, and by answer) per API, the latency histogram, breaker
/// states, calls in flight and the applied config generation. Other series are ignored.
pub fn parse_metrics(text: &str) -> NodeMetrics {
    let mut m = NodeMetrics::default();
    for line in text.lines().filter_map(parse_line) {
        if line.name == "portico_config_generation" {
            if let Some(plane) = line.label("plane") {
                m.generation.insert(plane.to_owned(), line.value as i64);
            }
            continue;
        }
        let Some(k) = line.key() else { continue };
        match line.name.as_str() {
            "portico_requests_total" => {
                let degraded = line.label("code").is_some_and(is_degraded_code);
                let five = !degraded && line.label("status").is_some_and(|s| s.starts_with('5'));
                if let Some(status) = line.label("status").and_then(|s| s.parse::<u16>().ok()) {
                    let code = line.label("code").unwrap_or("").to_owned();
                    *m.answers
                        .entry(k.clone())
                        .or_default()
                        .entry((status, code))
                        .or_default() += line.value;
                }
                let e = m.requests.entry(k).or_default();
                e.0 += line.value;
                if five {
                    e.1 += line.value;
                }
                if degraded {
                    e.2 += line.value;
                }
            }
            "portico_request_duration_seconds_bucket" => {
                if let Some(le) = line.label("le").and_then(parse_value) {
                    m.buckets.entry(k).or_default().push((le, line.value));
                }
            }
            "portico_breaker_state" => {
                m.breaker.insert(k, line.value as i64);
            }
            "portico_bulkhead_in_flight" => {
                m.in_flight.insert(k, line.value);
            }
            _ => {}
        }
    }
    for b in m.buckets.values_mut() {
        b.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    m
}

/// A gateway's `/metrics` for one API (`order.get`, live), for the tests of the health modules.
#[cfg(test)]
pub const TEST_TEXT: &str = r#"# HELP portico_requests_total Requests by plane, API, status and code
# TYPE portico_requests_total counter
portico_requests_total{api="order.get",code="OK",plane="live",status="200"} 90
portico_requests_total{api="order.get",code="UPSTREAM_ERROR",plane="live",status="502"} 10
portico_requests_total{api="-",code="API_NOT_FOUND",plane="live",status="404"} 3
portico_requests_total{api="promo.list",code="API_DEGRADED",plane="live",status="503"} 6
portico_requests_total{api="promo.list",code="DEGRADED_FALLBACK",plane="live",status="200"} 4
portico_requests_total{api="promo.list",code="UPSTREAM_ERROR",plane="live",status="502"} 1
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.001"} 0
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.002"} 50
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.005"} 90
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="0.01"} 100
portico_request_duration_seconds_bucket{api="order.get",plane="live",le="+Inf"} 100
portico_request_duration_seconds_sum{api="order.get",plane="live"} 0.3
portico_breaker_state{api="order.get",plane="live"} 1
portico_bulkhead_in_flight{api="order.get",plane="live"} 2
portico_config_generation{plane="live"} 42
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_text_format() {
        let l = parse_line(r#"a_b{x="1",y="q\"uo\\te"} 2.5 1700000000"#).unwrap();
        assert_eq!(l.name, "a_b");
        assert_eq!(l.label("y"), Some("q\"uo\\te"));
        assert_eq!(l.value, 2.5);
        assert_eq!(parse_line("up 1").unwrap().value, 1.0);
        assert_eq!(parse_line("a{} 3").unwrap().labels, []);
        assert_eq!(
            parse_line(r#"a{x="l1\nl2"} +Inf"#).unwrap().value,
            f64::INFINITY
        );
        assert!(parse_line("# HELP x").is_none());
        assert!(parse_line("broken{x=\"1\" 2").is_none());
        assert!(parse_line("broken{x=1} 2").is_none());
        let m = parse_metrics(TEST_TEXT);
        let k = ("live".to_owned(), "order.get".to_owned());
        assert_eq!(m.requests[&k], (100.0, 10.0, 0.0));
        // Degraded answers are counted apart, not as 5xx failures.
        let promo = ("live".to_owned(), "promo.list".to_owned());
        assert_eq!(m.requests[&promo], (11.0, 1.0, 10.0));
        assert_eq!(m.answers[&k][&(502, "UPSTREAM_ERROR".to_owned())], 10.0);
        assert_eq!(m.answers[&k][&(200, "OK".to_owned())], 90.0);
        assert_eq!(m.buckets[&k].len(), 5);
        assert_eq!(m.buckets[&k][4].0, f64::INFINITY);
        assert_eq!(m.breaker[&k], 1);
        assert_eq!(m.in_flight[&k], 2.0);
        assert_eq!(m.generation["live"], 42);
    }
}
