//! `ops/prometheus/alerts.yml` (the registry's alert conditions as Prometheus alerting rules)
//! is valid for `promtool check rules`, and its unit tests (`alerts_test.yml`: the TP99,
//! availability and breaker rules fire on synthetic series, the others stay quiet) pass.
//! promtool comes with Debian's `prometheus` package, which `./ops/test.sh` installs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn promtool() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("PORTICO_PROMTOOL") {
        return Some(PathBuf::from(p));
    }
    ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

fn run(args: &[&str]) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/prometheus");
    let Some(tool) = promtool() else {
        panic!("promtool is missing: install Debian's `prometheus` package (./ops/test.sh does)");
    };
    let out = Command::new(tool)
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerting_rules_check_and_their_unit_tests_pass() {
    let checked = run(&["check", "rules", "alerts.yml"]);
    assert!(checked.contains("SUCCESS: 7 rules found"), "{checked}");
    let tested = run(&["test", "rules", "alerts_test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}
