//! `portico failover <cluster> primary|standby --reason ...`: moves a cluster's traffic with
//! `POST /api/v1/clusters/<cluster>/failover` (docs/operations/clusters.md, "Failover runbook").

use crate::args::{Cli, FailoverArgs};
use serde_json::json;
use std::process::ExitCode;

/// Sends the failover and prints the set that now serves and the document's new version.
pub(crate) async fn failover(cli: &Cli, args: &FailoverArgs) -> Result<ExitCode, String> {
    if args.reason.trim().is_empty() {
        return Err("--reason must say why (it is recorded in the audit log)".to_owned());
    }
    let c = cli.client()?;
    let a = c
        .post(
            &format!("/clusters/{}/failover", args.cluster),
            &json!({"to": args.to.as_str(), "reason": args.reason}),
        )
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "cluster {}: {} serves now (version {}); the gateways apply it from ZooKeeper",
        args.cluster,
        a.body["active"].as_str().unwrap_or(args.to.as_str()),
        a.etag.as_deref().unwrap_or("?").trim_matches('"'),
    );
    Ok(ExitCode::SUCCESS)
}
