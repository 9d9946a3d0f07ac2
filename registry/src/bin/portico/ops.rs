//! Operating from the command line: `portico switch`, `status`, `export` and `request` (any
//! registry route).

use crate::args::{
    parse_header, parse_method, Cli, ExportArgs, OnOff, ReportArgs, ReportFormat, ReportPeriod,
    RequestArgs, SwitchArgs,
};
use crate::table::{Align, Table};
use base64::Engine as _;
use portico_control::status::RejectedDocument;
use reqwest::Method;
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// The switch document `portico switch` sends.
fn switch_document(args: &SwitchArgs) -> Result<Value, String> {
    let degraded = matches!(args.state, OnOff::On);
    if degraded && args.reason.is_none() {
        return Err("--reason is required to turn a switch on".to_owned());
    }
    let mut doc = json!({"degraded": degraded});
    if let Some(r) = &args.reason {
        doc["reason"] = json!(r);
    }
    if let Some(m) = &args.message {
        doc["message"] = json!(m);
    }
    let keyed = args.api.contains('@');
    if keyed && degraded && args.matches.is_empty() {
        return Err(format!(
            "{}: a key-level switch needs --match <selector>=<value>",
            args.api
        ));
    }
    if !keyed && !args.matches.is_empty() {
        return Err("--match needs a key-level switch <api_id>@<label>".to_owned());
    }
    if !args.matches.is_empty() {
        let mut m = serde_json::Map::new();
        for spec in &args.matches {
            let (sel, values) = spec
                .split_once('=')
                .ok_or_else(|| format!("--match {spec:?}: expected <selector>=<value>"))?;
            let entry = m.entry(sel.trim().to_owned()).or_insert_with(|| json!([]));
            if let Some(list) = entry.as_array_mut() {
                list.extend(values.split(',').map(|v| json!(v)));
            }
        }
        doc["match"] = Value::Object(m);
    }
    if args.fallback_status.is_some()
        || args.fallback_body.is_some()
        || !args.fallback_headers.is_empty()
    {
        let body: Value = match &args.fallback_body {
            Some(b) => {
                serde_json::from_str(b).map_err(|e| format!("--fallback-body is not JSON: {e}"))?
            }
            None => Value::Null,
        };
        let mut headers = serde_json::Map::new();
        for h in &args.fallback_headers {
            let (n, v) = parse_header(h)?;
            headers.insert(n, json!(v));
        }
        doc["fallback"] = json!({
            "status": args.fallback_status.unwrap_or(200),
            "headers": headers,
            "body": body,
        });
    }
    Ok(doc)
}

/// `portico switch`: turns an API's degradation switch on or off.
pub(crate) async fn switch(cli: &Cli, args: &SwitchArgs) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let doc = switch_document(args)?;
    let prefix = if args.sandbox { "/sandbox" } else { "" };
    let a = c
        .put(&format!("{prefix}/switches/{}", args.api), &doc)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "switch {} {} (by {} at {})",
        args.api,
        if doc["degraded"] == true {
            "ON: degraded"
        } else {
            "OFF"
        },
        a.body["updated_by"].as_str().unwrap_or("?"),
        a.body["updated_at"].as_str().unwrap_or("?")
    );
    match args.wait {
        Some(secs) => crate::wait::until_applied(&c, secs).await,
        None => Ok(ExitCode::SUCCESS),
    }
}

/// `portico status`: the registry's health and the live gateway nodes, with their lag.
pub(crate) async fn status(cli: &Cli) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let health = c
        .send_raw(c.request(Method::GET, "/health"))
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "registry {}: {} (ZooKeeper {})",
        c.base(),
        health.body["status"].as_str().unwrap_or("?"),
        health.body["zookeeper"].as_str().unwrap_or("?")
    );
    let a = c.get("/nodes").await.map_err(|e| e.to_string())?;
    println!(
        "live tree: generation {} digest {}",
        a.body["generation"],
        a.body["digest"].as_str().unwrap_or("")
    );
    let nodes = a.body["nodes"].as_array().cloned().unwrap_or_default();
    if nodes.is_empty() {
        println!("no gateway nodes registered");
        return Ok(ExitCode::SUCCESS);
    }
    print_nodes(&nodes);
    Ok(ExitCode::SUCCESS)
}

/// `portico report`: asks the registry for the report and prints it.
pub(crate) async fn report(cli: &Cli, args: &ReportArgs) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let period = match args.period {
        ReportPeriod::Day => "day",
        ReportPeriod::Week => "week",
    };
    let format = if args.format == ReportFormat::Html {
        "html"
    } else {
        "json"
    };
    let mut req = c
        .request(Method::GET, "/reports")
        .query(&[("period", period), ("format", format)]);
    if let Some(api) = &args.api {
        req = req.query(&[("api", api)]);
    }
    let a = c.send_raw(req).await.map_err(|e| e.to_string())?;
    if !a.status.is_success() {
        return Err(portico_registry::client::describe_error(&a));
    }
    match args.format {
        ReportFormat::Html => {
            std::io::stdout()
                .write_all(&a.bytes)
                .map_err(|e| e.to_string())?;
        }
        ReportFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&a.body).unwrap_or_default()
        ),
        ReportFormat::Text => print_report(&a.body),
    }
    Ok(ExitCode::SUCCESS)
}

/// A report as a table: one line per API, the platform first; the top errors in the last
/// column.
fn print_report(r: &Value) {
    let num = |v: &Value, unit: &str| match v.as_f64() {
        Some(x) => format!("{x}{unit}"),
        None => "-".to_owned(),
    };
    println!(
        "{} report, {} calls",
        r["period"].as_str().unwrap_or("?"),
        r["platform"]["calls"]
    );
    let right = Align::Right;
    let mut t = Table::new(&[
        ("API", Align::Left),
        ("CALLS", right),
        ("AVAIL%", right),
        ("5XX", right),
        ("DEGRADED", right),
        ("TP50", right),
        ("TP90", right),
        ("TP99", right),
        ("TP99.9", right),
        ("BREAKER", right),
        ("SWITCH", right),
        ("CALLS Δ%", right),
        ("TOP ERRORS", Align::Left),
    ]);
    let rows = std::iter::once(&r["platform"]).chain(r["apis"].as_array().into_iter().flatten());
    for f in rows {
        let avail = f["availability"]
            .as_f64()
            .map(|a| format!("{:.3}", a * 100.0))
            .unwrap_or_else(|| "-".to_owned());
        let api = match f["api"].as_str() {
            Some("*") | None => "(all)",
            Some(a) => a,
        };
        let top: Vec<String> = f["top_errors"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                format!(
                    "{} {} x {}",
                    e["status"],
                    e["code"].as_str().unwrap_or(""),
                    e["count"]
                )
            })
            .collect();
        t.row(vec![
            api.to_owned(),
            f["calls"].to_string(),
            avail,
            f["errors"].to_string(),
            f["degraded"].as_u64().unwrap_or(0).to_string(),
            num(&f["p50_ms"], "ms"),
            num(&f["p90_ms"], "ms"),
            num(&f["p99_ms"], "ms"),
            num(&f["p999_ms"], "ms"),
            f["breaker_openings"].to_string(),
            f["switch_flips"].to_string(),
            num(&f["change"]["calls_pct"], ""),
            top.join(", "),
        ]);
    }
    t.print();
}

/// The nodes as a table, and a line when some are behind.
fn print_nodes(nodes: &[Value]) {
    let mut t = Table::new(&[
        ("NODE", Align::Left),
        ("ADDR", Align::Left),
        ("ADMIN", Align::Left),
        ("GENERATION", Align::Right),
        ("DIGEST", Align::Left),
        ("IN SYNC", Align::Left),
        ("LAG(ZXID)", Align::Right),
        ("UPDATED", Align::Right),
        ("REFUSED", Align::Right),
    ]);
    let mut behind = false;
    // Documents a node refuses (it serves the previous version, or nothing, in their place):
    // listed under the table (docs/operations/registry.md, "What the gateways serve").
    let mut refused = Vec::new();
    for n in nodes {
        let node = n["node_id"].as_str().unwrap_or("?");
        let mut count = 0;
        for (key, env) in [
            ("rejected_documents", "live"),
            ("sandbox_rejected_documents", "sandbox"),
        ] {
            // The gateway's `/status` `rejected_documents`, as the registry passes them on.
            let rejected: Vec<RejectedDocument> =
                serde_json::from_value(n[key].clone()).unwrap_or_default();
            for r in rejected {
                count += 1;
                let kept = if r.kept_previous {
                    "serving the previous version"
                } else {
                    "not served"
                };
                refused.push(format!(
                    "{node} refuses {} ({env}): {} ({kept})",
                    r.path, r.reason
                ));
            }
        }
        if n["in_sync"] != true {
            behind = true;
        }
        let updated = n["updated_ms_ago"]
            .as_i64()
            .map(|ms| format!("{:.1}s ago", ms as f64 / 1000.0))
            .unwrap_or_default();
        t.row(vec![
            n["node_id"].as_str().unwrap_or("?").to_owned(),
            n["addr"].as_str().unwrap_or("").to_owned(),
            n["admin_addr"].as_str().unwrap_or("").to_owned(),
            n["config_version"]["generation"].to_string(),
            n["config_version"]["digest"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            if n["in_sync"] == true { "yes" } else { "NO" }.to_owned(),
            n["lag_zxid"].to_string(),
            updated,
            count.to_string(),
        ]);
    }
    t.print();
    if behind {
        println!("some nodes have not applied the latest configuration");
    }
    for line in refused {
        println!("{line}");
    }
}

/// `portico export`: writes the tree as a directory (`--force` to write into a non-empty one).
pub(crate) async fn export(cli: &Cli, args: &ExportArgs) -> Result<ExitCode, String> {
    let c = cli.client()?;
    if args.dir.exists() {
        let non_empty = std::fs::read_dir(&args.dir)
            .map_err(|e| format!("{}: {e}", args.dir.display()))?
            .next()
            .is_some();
        if non_empty && !args.force {
            return Err(format!(
                "{} is not empty (use --force to write into it)",
                args.dir.display()
            ));
        }
    }
    let a = c
        .get(&format!(
            "/export?env={}&include_secrets={}",
            args.env, args.include_secrets
        ))
        .await
        .map_err(|e| e.to_string())?;
    let files = a.body["files"]
        .as_object()
        .ok_or("the registry's export has no files map")?;
    for (path, entry) in files {
        write_file(&args.dir, path, entry)?;
    }
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    println!(
        "wrote {} files of the {} tree (generation {}) to {}",
        files.len(),
        a.body["env"].as_str().unwrap_or("live"),
        a.body["generation"],
        args.dir.display()
    );
    if !args.include_secrets {
        println!("app secrets are redacted (use --include-secrets to export them; audited)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes one exported file under `dir` (refusing paths that would leave it).
fn write_file(dir: &Path, path: &str, entry: &Value) -> Result<(), String> {
    if path.split('/').any(|s| s == ".." || s.is_empty()) {
        return Err(format!("refusing the export path {path:?}"));
    }
    let content = entry["content"].as_str().unwrap_or("");
    let bytes = match entry["encoding"].as_str() {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(content)
            .map_err(|e| format!("{path}: bad base64: {e}"))?,
        _ => content.as_bytes().to_vec(),
    };
    let target = dir.join(path);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(&target, bytes).map_err(|e| format!("{}: {e}", target.display()))
}

/// `portico request`: any registry route; prints the ETag on stderr and the answer.
pub(crate) async fn request(cli: &Cli, args: &RequestArgs) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let mut req = c.request(parse_method(&args.method)?, &args.path);
    let data = match (&args.data, &args.data_file) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(f)) => {
            Some(std::fs::read_to_string(f).map_err(|e| format!("reading {}: {e}", f.display()))?)
        }
        _ => None,
    };
    if let Some(d) = data {
        let v: Value = serde_json::from_str(&d).map_err(|e| format!("--data is not JSON: {e}"))?;
        req = req.json(&v);
    }
    for h in &args.headers {
        let (n, v) = parse_header(h)?;
        req = req.header(n, v);
    }
    let a = c.send_raw(req).await.map_err(|e| e.to_string())?;
    if !a.status.is_success() {
        return Err(portico_registry::client::describe_error(&a));
    }
    if let Some(etag) = &a.etag {
        eprintln!("ETag: \"{etag}\"");
    }
    if a.body.is_null() {
        std::io::stdout()
            .write_all(&a.bytes)
            .map_err(|e| e.to_string())?;
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&a.body).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn switch_args(argv: &[&str]) -> SwitchArgs {
        let mut full = vec!["portico", "switch"];
        full.extend(argv);
        match Cli::parse_from(full).command {
            crate::args::Command::Switch(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn switch_documents() {
        let on = switch_args(&["order.get", "on", "--reason", "db down"]);
        assert_eq!(
            switch_document(&on).unwrap(),
            json!({"degraded": true, "reason": "db down"})
        );
        assert!(switch_document(&switch_args(&["order.get", "on"])).is_err());
        let told = switch_args(&[
            "order.get",
            "on",
            "--reason",
            "db down INC-1",
            "--message",
            "ordering is paused until 10:00 UTC",
        ]);
        assert_eq!(
            switch_document(&told).unwrap(),
            json!({"degraded": true, "reason": "db down INC-1",
                   "message": "ordering is paused until 10:00 UTC"})
        );
        let fallback = switch_args(&[
            "a",
            "on",
            "--reason",
            "r",
            "--fallback-body",
            r#"{"items":[]}"#,
            "--fallback-header",
            "X-Degraded: 1",
        ]);
        assert_eq!(
            switch_document(&fallback).unwrap()["fallback"],
            json!({"status": 200, "headers": {"X-Degraded": "1"}, "body": {"items": []}})
        );
        assert_eq!(
            switch_document(&switch_args(&["a", "off"])).unwrap(),
            json!({"degraded": false})
        );
    }

    #[test]
    fn key_level_switch_documents() {
        let on = switch_args(&[
            "sku.get@north-cm",
            "on",
            "--match",
            "header:X-Region=north",
            "--match",
            "header:X-Carrier=cm,ct",
            "--reason",
            "carrier outage",
        ]);
        assert_eq!(
            switch_document(&on).unwrap(),
            json!({"degraded": true, "reason": "carrier outage",
                "match": {"header:X-Region": ["north"], "header:X-Carrier": ["cm", "ct"]}})
        );
        let bare = switch_args(&["sku.get@x", "on", "--reason", "r"]);
        assert!(switch_document(&bare).unwrap_err().contains("--match"));
        let off = switch_args(&["sku.get@x", "off"]);
        assert_eq!(switch_document(&off).unwrap(), json!({"degraded": false}));
        let wide = switch_args(&["sku.get", "on", "--reason", "r", "--match", "app=m1"]);
        assert!(switch_document(&wide).is_err());
        let bad = switch_args(&["sku.get@x", "on", "--reason", "r", "--match", "app"]);
        assert!(switch_document(&bad).is_err());
    }

    #[test]
    fn exported_files_stay_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let text = json!({"encoding": "utf-8", "content": "{}"});
        write_file(dir.path(), "apis/a.json", &text).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("apis/a.json")).unwrap(),
            "{}"
        );
        let bin = json!({"encoding": "base64", "content": "AAE="});
        write_file(dir.path(), "descriptors/x.pb", &bin).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("descriptors/x.pb")).unwrap(),
            [0, 1]
        );
        assert!(write_file(dir.path(), "../escape.json", &text).is_err());
        assert!(write_file(dir.path(), "apis//a.json", &text).is_err());
    }
}
