//! `--wait[=SECS]` of `portico switch` and `portico publish` (docs/operations/registry.md, "Waiting for
//! the gateways"): after the write, the live tree's generation is read from the registry
//! (`GET /nodes`), then every live gateway node (its `nodes/<id>` registration, which the
//! gateway updates with the `config_version` it serves) is polled until it serves that
//! generation or a later one, or the time is up.

use portico_registry::client::RegistryClient;
use serde_json::Value;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The exit status when some gateways did not apply the change in time.
pub(crate) const NOT_APPLIED: u8 = 3;

/// How often the nodes are read.
const POLL: Duration = Duration::from_millis(200);

/// A node that does not serve generation `target` yet: its id and what it serves (or why its
/// registration cannot be read).
fn pending(nodes: &[Value], target: u64) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|n| {
            let id = n["node_id"].as_str().unwrap_or("?");
            if let Some(e) = n["error"].as_str() {
                return Some(format!("{id} ({e})"));
            }
            let applied = n["config_version"]["generation"].as_u64().unwrap_or(0);
            (applied < target).then(|| format!("{id} (serves generation {applied})"))
        })
        .collect()
}

/// The live tree's generation and the registered nodes, as `GET /nodes` tells.
async fn read(c: &RegistryClient) -> Result<(u64, Vec<Value>), String> {
    let a = c.get("/nodes").await.map_err(|e| e.to_string())?;
    let generation = a.body["generation"]
        .as_u64()
        .ok_or("the registry's /nodes answer has no generation")?;
    let nodes = a.body["nodes"].as_array().cloned().unwrap_or_default();
    Ok((generation, nodes))
}

/// Waits up to `secs` seconds until every live gateway serves the live tree as it is now (the
/// write just made included). Success prints how many gateways applied it; a timeout prints
/// the gateways that have not and answers exit status [`NOT_APPLIED`].
pub(crate) async fn until_applied(c: &RegistryClient, secs: u64) -> Result<ExitCode, String> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let (target, mut nodes) = read(c).await?;
    loop {
        let late = pending(&nodes, target);
        if late.is_empty() {
            if nodes.is_empty() {
                println!("no live gateway is registered: nothing to wait for");
            } else {
                println!(
                    "applied by all {} live gateways (generation {target}) in {:.1}s",
                    nodes.len(),
                    started.elapsed().as_secs_f64()
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        if Instant::now() >= deadline {
            eprintln!(
                "error: not applied within {secs}s by {} of {} live gateways (generation {target}): {}",
                late.len(),
                nodes.len(),
                late.join(", ")
            );
            return Ok(ExitCode::from(NOT_APPLIED));
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        nodes = read(c).await?.1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_behind_the_generation_are_pending() {
        let nodes = [
            json!({"node_id": "a", "config_version": {"generation": 12}}),
            json!({"node_id": "b", "config_version": {"generation": 9}}),
            json!({"node_id": "c", "error": "unreadable node document"}),
            json!({"node_id": "d", "config_version": {"generation": 10}}),
        ];
        assert_eq!(
            pending(&nodes, 10),
            ["b (serves generation 9)", "c (unreadable node document)"]
        );
        assert!(pending(&nodes[..1], 12).is_empty());
    }
}
