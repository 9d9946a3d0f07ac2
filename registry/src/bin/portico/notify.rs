//! `portico notify`: publishes a notification on a gateway's internal listener
//! (`POST /internal/v1/notifications`, docs/operations/notifications.md "Notifications"), as a backend
//! would; prints the assigned event ids.

use crate::args::NotifyArgs;
use serde_json::{json, Value};
use std::process::ExitCode;

/// Publishes `args`; exit 0 on 200, 1 with the envelope otherwise.
pub(crate) async fn notify(args: &NotifyArgs) -> Result<ExitCode, String> {
    let payload: Value =
        serde_json::from_str(&args.payload).map_err(|e| format!("--payload must be JSON: {e}"))?;
    let file = args
        .publish_token_file
        .as_ref()
        .filter(|f| !f.as_os_str().is_empty());
    let token = match (&args.publish_token, file) {
        (Some(t), _) => t.clone(),
        (None, Some(file)) => crate::args::first_line(file, "--publish-token-file")?,
        (None, None) => {
            return Err("give the publisher token: --publish-token-file FILE (or \
                 PORTICO_PUBLISH_TOKEN_FILE), or PORTICO_PUBLISH_TOKEN"
                .into())
        }
    };
    let mut body = json!({"topic": args.topic, "payload": payload});
    if let Some(app) = &args.app {
        body["app"] = app.clone().into();
    }
    if let Some(id) = &args.id {
        body["id"] = id.clone().into();
    }
    if let Some(ttl) = args.ttl_s {
        body["ttl_s"] = ttl.into();
    }
    let url = format!(
        "{}/internal/v1/notifications",
        args.gateway.trim_end_matches('/')
    );
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let resp = http
        .post(&url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        eprintln!("{} {text}", status.as_u16());
        return Ok(ExitCode::FAILURE);
    }
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{url}: {e}"))?;
    let events = v["events"].as_array().cloned().unwrap_or_default();
    for e in &events {
        println!(
            "{}\t{}",
            e["app"].as_str().unwrap_or_default(),
            e["id"].as_str().unwrap_or_default()
        );
    }
    if events.is_empty() {
        eprintln!(
            "no app is granted the topic {:?}: nothing stored",
            args.topic
        );
    }
    Ok(ExitCode::SUCCESS)
}
