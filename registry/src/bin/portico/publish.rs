//! The publishing workflow from the command line: `portico publish`, `rollback`, `history`.

use crate::args::{Cli, HistoryArgs, PublishArgs, RollbackArgs};
use crate::table::{Align, Table};
use portico_registry::client::RegistryClient;
use reqwest::Method;
use serde_json::json;
use std::process::ExitCode;

/// Publishes each draft in turn, printing the version each got; a failure is printed and the
/// others still published. Fails if any failed.
pub(crate) async fn publish_each(
    c: &RegistryClient,
    ids: Vec<String>,
    comment: Option<&str>,
    if_match: Option<&str>,
) -> ExitCode {
    let mut failed = false;
    for id in ids {
        let mut req = c
            .request(Method::POST, &format!("/apis/{id}/publish"))
            .json(&json!({ "comment": comment }));
        if let Some(v) = if_match {
            req = req.header("If-Match", format!("\"{}\"", v.trim_matches('"')));
        }
        match c.send(req).await {
            Ok(a) if a.body["unchanged"] == true => println!(
                "{id} unchanged: the draft is version {} as published; nothing published",
                a.body["version"]
            ),
            Ok(a) => println!("published {id} version {}", a.body["version"]),
            Err(e) => {
                eprintln!("error: publishing {id}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `portico publish`: the drafts named, or every draft with `--all`.
pub(crate) async fn publish(cli: &Cli, args: &PublishArgs) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let ids = if args.all {
        let drafts = c.get("/sandbox/apis").await.map_err(|e| e.to_string())?;
        drafts.body["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        args.ids.clone()
    };
    if ids.is_empty() {
        return Err("no drafts to publish".to_owned());
    }
    let comment = args.comment.as_deref();
    let published = publish_each(&c, ids, comment, args.if_match.as_deref()).await;
    match args.wait {
        Some(secs) if published == ExitCode::SUCCESS => crate::wait::until_applied(&c, secs).await,
        _ => Ok(published),
    }
}

/// `portico rollback`: publishes an earlier version's content again, as a new version.
pub(crate) async fn rollback(cli: &Cli, args: &RollbackArgs) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let a = c
        .post(
            &format!("/apis/{}/rollback", args.id),
            &json!({"version": args.to_version, "comment": args.comment}),
        )
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "rolled {} back to the content of version {}: now version {}",
        args.id, args.to_version, a.body["version"]
    );
    Ok(ExitCode::SUCCESS)
}

/// `portico history`: the published versions, the live one starred.
pub(crate) async fn history(cli: &Cli, args: &HistoryArgs) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let a = c
        .get(&format!("/apis/{}/history", args.id))
        .await
        .map_err(|e| e.to_string())?;
    let mut t = Table::new(&[
        ("VERSION", Align::Right),
        ("PUBLISHED", Align::Left),
        ("LIVE", Align::Left),
    ]);
    for v in a.body["versions"].as_array().into_iter().flatten() {
        t.row(vec![
            v["version"].to_string(),
            v["published_at"].as_str().unwrap_or("").to_owned(),
            if v["live"] == true { "*" } else { "" }.to_owned(),
        ]);
    }
    t.print();
    Ok(ExitCode::SUCCESS)
}
