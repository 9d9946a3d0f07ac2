//! `/readyz` (docs/operations/gateway.md, "Admin endpoints"): `503` until the first configuration is
//! applied and this process holds its traffic listeners (live and sandbox). A gateway started
//! with `--upgrade` is not ready while it waits for the listening sockets of the gateway it
//! replaces, although that one answers on the same address; it is ready once they are
//! handed over. A gateway without a configuration is not ready although it listens.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_testkit::procs::{start_gateway, GatewayProc};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The gateway with `args` (its listeners among them), started by the shared test kit as
/// `name`, its log in `logs`.
fn gateway(name: &'static str, logs: &Path, args: &[String]) -> GatewayProc {
    start_gateway(name, logs, |cmd| {
        cmd.args(args)
            .args([
                "--access-log",
                "off",
                "--threads",
                "2",
                "--drain-seconds",
                "1",
                "--internal-listen",
                "off",
            ])
            .env("PORTICO_LOG", "warn,portico_gateway=info");
    })
}

/// `/readyz`'s status and text, `None` while the admin listener does not answer.
fn readyz(admin: &str) -> Option<(u16, String)> {
    let r = client().get(format!("http://{admin}/readyz")).send().ok()?;
    Some((r.status().as_u16(), r.text().unwrap_or_default()))
}

#[test]
fn an_upgrading_gateway_is_not_ready_until_it_holds_the_listeners() {
    let tree = degraded_ping_tree();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("upgrade.sock");
    let listen = format!("127.0.0.1:{}", free_port());
    let sandbox = format!("127.0.0.1:{}", free_port());
    let (admin_old, admin_new) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let args = |admin: &str, upgrade: bool| -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--config-dir".into(),
            tree.path().display().to_string(),
            "--listen".into(),
            listen.clone(),
            "--sandbox-listen".into(),
            sandbox.clone(),
            "--admin-listen".into(),
            admin.into(),
            "--upgrade-sock".into(),
            sock.display().to_string(),
        ];
        if upgrade {
            a.push("--upgrade".into());
        }
        a
    };
    let mut old = gateway("gateway-old", dir.path(), &args(&admin_old, false));
    assert!(
        wait_until(Duration::from_secs(30), || readyz(&admin_old)
            .is_some_and(|(s, _)| s == 200)),
        "the first gateway never became ready"
    );
    // Ready means serving: no waiting for the port here.
    let http = client();
    assert_eq!(
        http.get(format!("http://{listen}/v1/ping"))
            .send()
            .unwrap()
            .status(),
        200
    );

    // The new process has its configuration and its admin listener, and waits for the
    // sockets: the old one still serves the address, but the new one is not ready.
    let _ = std::fs::remove_file(&sock);
    let new = gateway("gateway-new", dir.path(), &args(&admin_new, true));
    assert!(
        wait_until(Duration::from_secs(30), || sock.exists()
            && readyz(&admin_new).is_some()),
        "the new gateway never waited on the upgrade socket"
    );
    for _ in 0..5 {
        let (status, text) = readyz(&admin_new).unwrap();
        assert_eq!(status, 503, "{text}");
        assert!(text.contains("traffic listener"), "{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        http.get(format!("http://{listen}/v1/ping"))
            .send()
            .unwrap()
            .status(),
        200
    );

    // Handed over: ready.
    let ok = Command::new("kill")
        .args(["-QUIT", &old.proc.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert!(
        wait_until(Duration::from_secs(30), || readyz(&admin_new)
            .is_some_and(|(s, _)| s == 200)),
        "the new gateway never became ready: {:?}",
        readyz(&admin_new)
    );
    assert_eq!(
        http.get(format!("http://{sandbox}/v1/ping"))
            .send()
            .unwrap()
            .status()
            .as_u16()
            / 100,
        4
    );
    assert!(wait_until(Duration::from_secs(30), || matches!(
        old.proc.child.try_wait(),
        Ok(Some(_))
    )));
    // The old process is gone: what answers now is the new one.
    assert_eq!(
        http.get(format!("http://{listen}/v1/ping"))
            .send()
            .unwrap()
            .status(),
        200
    );
    drop(new);
}

#[test]
fn a_gateway_without_a_configuration_is_not_ready_although_it_listens() {
    let dead_zk = format!("127.0.0.1:{}", free_port());
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let logs = tempfile::tempdir().unwrap();
    let _gw = gateway(
        "gateway",
        logs.path(),
        &[
            "--zk".into(),
            dead_zk,
            "--listen".into(),
            listen.clone(),
            "--admin-listen".into(),
            admin.clone(),
        ],
    );
    assert!(wait_until(Duration::from_secs(30), || {
        std::net::TcpStream::connect(&listen).is_ok()
    }));
    // Listening for a while, with nothing to serve: never ready.
    std::thread::sleep(Duration::from_millis(500));
    let (status, text) = readyz(&admin).expect("the admin listener answers");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("no configuration"), "{text}");
}
