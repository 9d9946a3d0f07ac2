//! The fleet's dashboard and scrape configuration (docs/operations/monitoring.md, "Dashboards and scrape
//! configuration"): every metric (and label) a panel of `ops/grafana/portico-fleet.json`
//! queries exists in a real gateway's `/metrics` after some traffic; with Prometheus
//! installed, a real Prometheus scrapes the gateway through `ops/prometheus/prometheus.yml`
//! (its targets replaced) and answers every panel's query with data; `promtool check config`
//! accepts the scrape configuration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use crate::support::*;
use portico_testkit::{Redis, ZooKeeper};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const ROOT: &str = "/portico";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn dashboard() -> Value {
    let path = repo().join("ops/grafana/portico-fleet.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel, rows' nested panels included.
fn panels(dash: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

/// `(panel title, expr)` of every query of every panel.
fn queries(dash: &Value) -> Vec<(String, String)> {
    panels(dash)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(move |t| Some((title.clone(), t["expr"].as_str()?.to_owned())))
        })
        .collect()
}

/// A PromQL expression with Grafana's variables filled in as Prometheus would see them.
fn concrete(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
        .replace("$instance", ".*")
}

/// What an expression reads: each metric name with the label names its selector matches
/// on, and the label names of its `by (...)`/`without (...)`/`on (...)` clauses.
#[derive(Debug, Default)]
struct Uses {
    metrics: BTreeMap<String, BTreeSet<String>>,
    grouping: BTreeSet<String>,
}

const PROMQL_KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];
/// Aggregation operators: followed by `(` or by a `by (...)`/`without (...)` clause.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The index just past the quoted string that opens at `s[i]` (a backslash escapes the
/// character after it).
fn skip_quoted(s: &[char], mut i: usize) -> usize {
    let quote = s[i];
    i += 1;
    while i < s.len() && s[i] != quote {
        if s[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}
/// A small PromQL scanner: enough to tell metric names from functions, aggregations,
/// keywords, strings, numbers, durations and label lists.
fn uses(expr: &str) -> Uses {
    let s: Vec<char> = concrete(expr).chars().collect();
    let mut out = Uses::default();
    let mut i = 0;
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    // Reads the label names of `{...}` (matchers) or `(...)` (grouping) starting at `i`.
    let labels = |s: &[char], mut i: usize, close: char| -> (BTreeSet<String>, usize) {
        let mut names = BTreeSet::new();
        i += 1;
        let mut expect_name = true;
        while i < s.len() && s[i] != close {
            let c = s[i];
            if c == '"' || c == '\'' {
                i = skip_quoted(s, i);
            } else if expect_name && (c.is_ascii_alphabetic() || c == '_') {
                let start = i;
                while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '_') {
                    i += 1;
                }
                names.insert(s[start..i].iter().collect());
                expect_name = false;
            } else {
                if c == ',' {
                    expect_name = true;
                }
                i += 1;
            }
        }
        (names, i + 1)
    };
    while i < s.len() {
        let c = s[i];
        if c == '"' || c == '\'' {
            i = skip_quoted(&s, i);
        } else if c == '[' {
            while i < s.len() && s[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.') {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < s.len() && ident_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let mut j = i;
            while j < s.len() && s[j].is_whitespace() {
                j += 1;
            }
            let next = s.get(j).copied();
            if GROUPING.contains(&word.as_str()) {
                if next == Some('(') {
                    let (names, end) = labels(&s, j, ')');
                    out.grouping.extend(names);
                    i = end;
                }
            } else if next == Some('(')
                || PROMQL_KEYWORDS.contains(&word.as_str())
                || AGGREGATIONS.contains(&word.as_str())
            {
                // A function or an aggregation: its arguments are scanned next.
            } else if next == Some('{') {
                let (names, end) = labels(&s, j, '}');
                out.metrics.entry(word).or_default().extend(names);
                i = end;
            } else {
                out.metrics.entry(word).or_default();
            }
        } else if c == '{' {
            // A selector without a metric name: no name to check.
            let (_, end) = labels(&s, i, '}');
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Metric name → the label names its samples carry, from Prometheus text.
fn exposition(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let entry = out.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let close = line.rfind('}').unwrap();
            for pair in split_labels(&line[name_end + 1..close]) {
                entry.insert(pair);
            }
        }
    }
    out
}

/// The label names of `a="x",b="y"` (values may hold commas and escaped quotes).
fn split_labels(body: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = body;
    while let Some(eq) = rest.find("=\"") {
        names.push(rest[..eq].trim_start_matches(',').trim().to_owned());
        let mut k = eq + 2;
        let b = rest.as_bytes();
        while k < b.len() && b[k] != b'"' {
            if b[k] == b'\\' {
                k += 1;
            }
            k += 1;
        }
        rest = &rest[(k + 1).min(rest.len())..];
    }
    names
}

/// Labels Prometheus adds to every scraped series (the target's and the scrape config's).
const TARGET_LABELS: &[&str] = &["instance", "job", "fleet", "le", "__name__"];
/// Series Prometheus makes itself for every target.
const SCRAPE_SERIES: &[&str] = &["up", "scrape_duration_seconds", "scrape_samples_scraped"];

#[test]
fn the_scanner_tells_metrics_from_functions_labels_and_keywords() {
    let u = uses(
        r#"histogram_quantile(0.99, sum by (api, le) (rate(portico_request_duration_seconds_bucket{instance=~"$instance",plane="live"}[$__rate_interval])))"#,
    );
    assert_eq!(
        u.metrics.keys().collect::<Vec<_>>(),
        ["portico_request_duration_seconds_bucket"]
    );
    assert_eq!(
        u.metrics["portico_request_duration_seconds_bucket"],
        ["instance", "plane"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(
        u.grouping,
        ["api", "le"].into_iter().map(String::from).collect()
    );
    let u = uses(
        r#"count(count_values("generation", portico_config_generation{plane="live"})) / up == 1 and on (instance) portico_redis_up offset 5m"#,
    );
    assert_eq!(
        u.metrics.keys().collect::<Vec<_>>(),
        ["portico_config_generation", "portico_redis_up", "up"]
    );
    let labels = exposition(
        "# HELP x y\nportico_switch_degraded{plane=\"live\",switch=\"a,b=\\\"c\"} 1\nportico_redis_up 0\n",
    );
    assert_eq!(
        labels["portico_switch_degraded"],
        ["plane", "switch"].into_iter().map(String::from).collect()
    );
    assert!(labels["portico_redis_up"].is_empty());
}

#[test]
fn the_dashboard_is_importable_and_covers_the_fleet() {
    let dash = dashboard();
    assert_eq!(dash["uid"], "portico-fleet");
    assert!(dash["schemaVersion"].as_u64().unwrap() >= 36, "Grafana 10+");
    let vars = dash["templating"]["list"].as_array().unwrap();
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).cloned();
    let ds = var("datasource").expect("a datasource variable");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let inst = var("instance").expect("an instance variable");
    assert_eq!(inst["multi"], true);
    assert_eq!(inst["includeAll"], true);
    let mut ids = BTreeSet::new();
    for p in panels(&dash) {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        if p["type"] != "row" {
            assert_eq!(
                p["datasource"]["uid"], "${datasource}",
                "{} does not use the datasource variable",
                p["title"]
            );
            assert!(
                !p["targets"].as_array().unwrap().is_empty(),
                "{}",
                p["title"]
            );
        }
    }
    let all: BTreeSet<String> = queries(&dash)
        .iter()
        .flat_map(|(_, e)| uses(e).metrics.into_keys())
        .collect();
    // Per-API rate and errors, TP50/99, breakers, switches, config generation per node, the
    // ZooKeeper session, Redis fallback, cluster members (docs/operations/monitoring.md, "Dashboards and
    // scrape configuration").
    for needed in [
        "portico_requests_total",
        "portico_request_duration_seconds_bucket",
        "portico_breaker_state",
        "portico_switch_degraded",
        "portico_config_generation",
        "portico_zookeeper_session_state",
        "portico_redis_up",
        "portico_cluster_members",
    ] {
        assert!(all.contains(needed), "no panel queries {needed}");
    }
    for (title, expr) in queries(&dash) {
        assert!(
            expr.contains("$instance") || expr.starts_with("count(up"),
            "{title}: the query ignores the instance variable: {expr}"
        );
    }
}

/// Writes the test's documents into ZooKeeper (an open tree).
fn seed(zk_hosts: &str, backend: &str) {
    let dead = format!("127.0.0.1:{}", free_port());
    let docs: Vec<(&str, Value)> = vec![
        (
            "clusters/demo",
            json!({"protocol": "http", "endpoints": [{"addr": backend}]}),
        ),
        (
            "clusters/dead",
            json!({"protocol": "http", "endpoints": [{"addr": dead}]}),
        ),
        (
            "apps/merchant-1",
            json!({"secret": SECRET, "status": "active", "apis": ["*"]}),
        ),
        (
            "apis/echo.get",
            json!({"id": "echo.get", "http": {"method": "GET", "path": "/v1/echo"},
                   "backend": {"cluster": "demo", "http": {"path": "/echo"}},
                   "policy": {"breaker": {"consecutive_failures": 5, "open_ms": 10000},
                              "rate_limits": [{"limit": 2, "per": "minute", "burst": 2}]}}),
        ),
        (
            "apis/dead.get",
            // A backend answering 500 (a refused connection no longer moves a breaker).
            json!({"id": "dead.get", "http": {"method": "GET", "path": "/v1/dead"},
                   "backend": {"cluster": "demo", "timeout_ms": 2000, "http": {"path": "/echo"}},
                   "policy": {"breaker": {"consecutive_failures": 2, "open_ms": 60000}},
                   "auth": "none"}),
        ),
        (
            "apis/promo.get",
            json!({"id": "promo.get", "http": {"method": "GET", "path": "/v1/promo"},
                   "backend": {"cluster": "dead", "http": {}}, "auth": "none"}),
        ),
        (
            "switches/promo.get",
            json!({"degraded": true, "reason": "sale over",
                   "fallback": {"status": 200, "body": {"promo": false}}}),
        ),
    ];
    support::zk::put(zk_hosts, ROOT, &docs);
}

/// OK answers, a 401, 429s, 500s that open a breaker, a degraded switch's fallback.
fn traffic(gw: &GatewayProcess) {
    let http = client();
    let mut statuses = BTreeMap::new();
    for _ in 0..4 {
        let r = signed(&http, "GET", &gw.url("/v1/echo"), KEY, SECRET, None)
            .send()
            .unwrap();
        *statuses.entry(r.status().as_u16()).or_insert(0) += 1;
    }
    assert_eq!(statuses.get(&200), Some(&2), "{statuses:?}");
    assert_eq!(statuses.get(&429), Some(&2), "{statuses:?}");
    assert_eq!(http.get(gw.url("/v1/echo")).send().unwrap().status(), 401);
    for _ in 0..3 {
        let status = http
            .get(gw.url("/v1/dead"))
            .header("X-Demo-Status", "500")
            .send()
            .unwrap()
            .status();
        assert!(status.is_server_error(), "{status}");
    }
    let r = http.get(gw.url("/v1/promo")).send().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(gw.status()["invoke"]["dead.get"]["breaker"], "open");
}

#[test]
fn every_metric_the_dashboard_queries_is_served_by_a_gateway() {
    let zk = ZooKeeper::start();
    let redis = Redis::start();
    let backend = BackendProcess::start_http().expect("demo backend");
    seed(&zk.connect_string(), &backend.http.to_string());
    let gw = GatewayProcess::start_args(vec![
        "--zk".into(),
        zk.connect_string(),
        "--zk-root".into(),
        ROOT.into(),
        "--node-id".into(),
        "gw-dash".into(),
        "--redis".into(),
        redis.url(),
    ]);
    assert!(wait_until(Duration::from_secs(30), || {
        gw.status()["zookeeper"]["state"] == "connected" && gw.status()["apis_loaded"] == 3
    }));
    traffic(&gw);

    let served = exposition(&gw.metrics());
    let dash = dashboard();
    let mut problems = Vec::new();
    let mut checked = BTreeSet::new();
    for (title, expr) in queries(&dash) {
        let u = uses(&expr);
        if u.metrics.is_empty() {
            problems.push(format!("{title}: no metric found in {expr}"));
        }
        let mut carried: BTreeSet<&str> = TARGET_LABELS.iter().copied().collect();
        for (metric, labels) in &u.metrics {
            if SCRAPE_SERIES.contains(&metric.as_str()) {
                continue;
            }
            checked.insert(metric.clone());
            let Some(have) = served.get(metric) else {
                problems.push(format!("{title}: {metric} is not in /metrics"));
                continue;
            };
            carried.extend(have.iter().map(String::as_str));
            for l in labels {
                if !have.contains(l) && !TARGET_LABELS.contains(&l.as_str()) {
                    problems.push(format!("{title}: {metric} has no label {l}"));
                }
            }
        }
        for l in &u.grouping {
            if !carried.contains(l.as_str()) && !u.metrics.contains_key("up") {
                problems.push(format!("{title}: grouping by {l}, which no series has"));
            }
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            let metric = q
                .trim_start_matches("label_values(")
                .split(',')
                .next()
                .unwrap()
                .trim();
            if !served.contains_key(metric) {
                problems.push(format!(
                    "variable {}: {metric} is not in /metrics",
                    v["name"]
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "dashboard: {} queries over {} metrics, all in /metrics",
        queries(&dash).len(),
        checked.len()
    );

    // A real Prometheus on the real scrape configuration, when installed.
    match which("prometheus") {
        Some(bin) => prometheus_answers_every_panel(&bin, &gw, &dash),
        None => eprintln!(
            "prometheus is not installed (apt-get install prometheus): the panels' queries were not run"
        ),
    }
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file())
}

/// ops/prometheus/prometheus.yml with `targets` as its only targets and a 1 s scrape.
fn scrape_config(targets: &[String]) -> String {
    let text = std::fs::read_to_string(repo().join("ops/prometheus/prometheus.yml")).unwrap();
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if skipping && (line.starts_with("          -") || line.starts_with("          #")) {
            continue;
        }
        skipping = false;
        if line.trim_start().starts_with("scrape_interval:") && line.starts_with("    ") {
            out.push_str("    scrape_interval: 1s\n");
            continue;
        }
        if line.trim_start().starts_with("scrape_timeout:") {
            out.push_str("    scrape_timeout: 1s\n");
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if line.trim() == "- targets:" {
            for t in targets {
                out.push_str(&format!("          - {t}\n"));
            }
            skipping = true;
        }
    }
    out
}

fn prometheus_answers_every_panel(bin: &Path, gw: &GatewayProcess, dash: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, scrape_config(&[gw.admin.to_string()])).unwrap();
    let port = free_port();
    let _prom = portico_testkit::procs::Proc::spawn(
        "prometheus",
        Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}")),
        dir.path(),
    );
    let http = client();
    let query = |expr: &str| -> Option<Value> {
        http.get(format!("http://127.0.0.1:{port}/api/v1/query"))
            .query(&[("query", expr)])
            .send()
            .ok()?
            .json()
            .ok()
    };
    // Scraped at least three times, so rates over the last minute have points.
    let scraped = wait_until(Duration::from_secs(60), || {
        query("count_over_time(up[1m])").is_some_and(|v| {
            v["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n >= 3)
        })
    });
    let log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    assert!(scraped, "prometheus did not scrape the gateway\n{}", log());
    let up = query("up").unwrap();
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up}");
    let mut empty = Vec::new();
    for (title, expr) in queries(dash) {
        let answer = query(&concrete(&expr)).expect("prometheus answers");
        assert_eq!(answer["status"], "success", "{title}: {expr}: {answer}");
        if answer["data"]["result"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            empty.push(format!("{title}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "queries with no data after the traffic:\n{}",
        empty.join("\n")
    );
    let values: Value = http
        .get(format!(
            "http://127.0.0.1:{port}/api/v1/label/instance/values"
        ))
        .query(&[("match[]", "portico_config_generation")])
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(values["data"], json!([gw.admin.to_string()]));
    eprintln!(
        "prometheus answered all {} panel queries with data",
        queries(dash).len()
    );
}

#[test]
fn promtool_accepts_the_scrape_configuration() {
    let Some(promtool) = which("promtool") else {
        eprintln!("promtool is not installed (apt-get install prometheus): not checked");
        return;
    };
    let out = Command::new(promtool)
        .args(["check", "config"])
        .arg(repo().join("ops/prometheus/prometheus.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The copy the test (and ./ops/up.sh) makes with real targets is valid too.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("prometheus.yml");
    std::fs::write(
        &copy,
        scrape_config(&["127.0.0.1:9180".into(), "127.0.0.1:9181".into()]).replace(
            "\"alerts.yml\"",
            &format!("\"{}/ops/prometheus/alerts.yml\"", repo().display()),
        ),
    )
    .unwrap();
    let out = Command::new(which("promtool").unwrap())
        .args(["check", "config"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
