//! Zero-downtime restart (docs/operations/upgrades.md, "Restarts and upgrades"): a gateway started
//! with `--upgrade` takes the listening sockets over from the running one, which is sent
//! SIGQUIT and drains; under steady load no connection is refused and no request fails.
//! The same is done by `./ops/restart-gateway.sh`. A draining process answers the next
//! request of an idle keep-alive connection with `Connection: close` instead of closing the
//! connection under the client (`listener/accept.rs`, `CappedApp::cleanup`): keep-alive clients that
//! never retry see no reset. The load clients of the other tests still retry a GET once on
//! such a reset, as HTTP clients do for idempotent requests, and report how many they met
//! (docs/operations/upgrades.md, "Restarts and upgrades").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_testkit::procs::{start_gateway, Proc};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The gateway on `listen` and `admin` with the upgrade socket `sock` (`--upgrade`: taking
/// the listeners over from the one there), started by the shared test kit as `name`, its log
/// beside the socket; killed when dropped.
fn spawn(
    name: &'static str,
    tree: &Path,
    listen: &str,
    admin: &str,
    sock: &Path,
    upgrade: bool,
) -> Proc {
    let logs = sock.parent().expect("the socket's directory");
    start_gateway(name, logs, |cmd| {
        cmd.args(["--config-dir", &tree.display().to_string()])
            .args(["--listen", listen, "--admin-listen", admin])
            .args(["--internal-listen", "off"])
            .args([
                "--access-log",
                "off",
                "--threads",
                "2",
                "--drain-seconds",
                "2",
            ])
            .arg("--upgrade-sock")
            .arg(sock)
            .env("PORTICO_LOG", "warn,portico_gateway=info");
        if upgrade {
            cmd.arg("--upgrade");
        }
    })
    .proc
}

fn alive(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// Requests of this file's load loops that met a closed keep-alive connection (and were
/// retried): reported, to measure the drain's keep-alive handling.
static RESETS: AtomicU64 = AtomicU64::new(0);

/// One GET of the load loops: `Ok(retried)` when it answered 200. A request that failed on
/// an established connection without an answer (the old process closed an idle keep-alive
/// connection as the request went out: a reset, or the connection closed before a response)
/// is sent once more, as HTTP clients do for idempotent requests (RFC 9112 §9.3.1); a refused
/// connection, a timeout, a non-200 answer or a second failure is a failed request.
fn get_ok(http: &reqwest::blocking::Client, url: &str) -> Result<bool, String> {
    let mut retried = false;
    loop {
        match http.get(url).send() {
            Ok(r) if r.status() == 200 => return Ok(retried),
            Ok(r) => return Err(format!("status {}", r.status())),
            Err(e) if !retried && !e.is_connect() && !e.is_timeout() => {
                RESETS.fetch_add(1, Ordering::Relaxed);
                eprintln!("{url}: retried after {e:?}");
                retried = true;
            }
            Err(e) => return Err(format!("{url}: {e:?}")),
        }
    }
}

#[test]
fn an_upgrade_under_load_refuses_nothing_and_fails_nothing() {
    let tree = degraded_ping_tree();
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("upgrade.sock");
    let mut old = spawn("gateway-old", tree.path(), &listen, &admin, &sock, false);
    let http = client();
    let url = format!("http://{listen}/v1/ping");
    assert!(
        wait_until(Duration::from_secs(30), || http
            .get(&url)
            .send()
            .is_ok_and(|r| r.status() == 200)),
        "the first gateway never served"
    );

    // Steady load: keep-alive clients and fresh connections, each sending every 10 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let (stop, ok, failed, url) = (stop.clone(), ok.clone(), failed.clone(), url.clone());
            std::thread::spawn(move || {
                let builder = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .no_proxy();
                // Half the threads open a new connection per request (a refused connection
                // would show there), half reuse theirs.
                let http = if i % 2 == 0 {
                    builder.pool_max_idle_per_host(0).build().unwrap()
                } else {
                    builder.build().unwrap()
                };
                while !stop.load(Ordering::Relaxed) {
                    match get_ok(&http, &url) {
                        Ok(_) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("request failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    // The new process waits on the upgrade socket; the old one hands its sockets over on
    // SIGQUIT, keeps serving a while, stops accepting and drains.
    let _ = std::fs::remove_file(&sock);
    let mut new = spawn("gateway-new", tree.path(), &listen, &admin, &sock, true);
    assert!(
        wait_until(Duration::from_secs(30), || sock.exists()),
        "the new gateway never opened the upgrade socket"
    );
    let before = ok.load(Ordering::Relaxed);
    signal(&old.child, "QUIT");
    let started = Instant::now();
    assert!(
        wait_until(Duration::from_secs(30), || !alive(&mut old.child)),
        "the old gateway did not exit"
    );
    eprintln!("old gateway gone {:?} after SIGQUIT", started.elapsed());
    // The new one serves alone now.
    let after_exit = ok.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "upgrade under load: {ok} ok, {failed} failed, {} met a closed keep-alive connection",
        RESETS.load(Ordering::Relaxed)
    );
    assert_eq!(failed, 0, "requests failed during the upgrade");
    assert!(
        after_exit > before,
        "no request was served during the hand-over"
    );
    assert!(
        ok > after_exit,
        "nothing was served by the new gateway alone"
    );
    assert!(alive(&mut new.child));

    // SIGTERM: the gateway stops accepting, drains and exits within the drain deadline.
    signal(&new.child, "TERM");
    let t = Instant::now();
    assert!(
        wait_until(Duration::from_secs(15), || !alive(&mut new.child)),
        "SIGTERM did not stop the gateway"
    );
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
}

/// Stops the load threads when dropped (also when an assertion fails).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What keep-alive clients saw during a drain.
#[derive(Default)]
struct KeepAliveTally {
    ok: AtomicU64,
    /// Answers carrying `Connection: close` (the draining process asking the client to move).
    closes: AtomicU64,
    /// Requests that failed on an established connection without an answer.
    resets: AtomicU64,
    /// Anything else (refused connection, timeout, a non-200 answer).
    other: AtomicU64,
}

/// Keep-alive clients that never retry, sending back to back through an upgrade: the
/// draining process answers each one's next request with `Connection: close` instead of
/// closing its idle connection under it, so none sees a reset (docs/operations/upgrades.md,
/// "Restarts and upgrades").
#[test]
fn keep_alive_clients_are_asked_to_move_not_reset_during_a_drain() {
    const CLIENTS: u64 = 8;
    let tree = degraded_ping_tree();
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("upgrade.sock");
    let mut old = spawn("gateway-old", tree.path(), &listen, &admin, &sock, false);
    let url = format!("http://{listen}/v1/ping");
    assert!(
        wait_until(Duration::from_secs(30), || client()
            .get(&url)
            .send()
            .is_ok_and(|r| r.status() == 200)),
        "the first gateway never served"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(KeepAliveTally::default());
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (stop, tally, url) = (stop.clone(), tally.clone(), url.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .no_proxy()
                    .build()
                    .unwrap();
                while !stop.load(Ordering::Relaxed) {
                    match http.get(&url).send() {
                        Ok(r) if r.status() == 200 => {
                            let close = r
                                .headers()
                                .get("connection")
                                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                            if close {
                                tally.closes.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) if !e.is_connect() && !e.is_timeout() => {
                            eprintln!("reset: {e:?}");
                            tally.resets.fetch_add(1, Ordering::Relaxed);
                        }
                        other => {
                            eprintln!("failed: {:?}", other.map(|r| r.status()));
                            tally.other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();
    let _stop = StopOnDrop(stop.clone());
    std::thread::sleep(Duration::from_secs(1));
    let _ = std::fs::remove_file(&sock);
    let mut new = spawn("gateway-new", tree.path(), &listen, &admin, &sock, true);
    assert!(
        wait_until(Duration::from_secs(30), || sock.exists()),
        "the new gateway never opened the upgrade socket"
    );
    signal(&old.child, "QUIT");
    assert!(
        wait_until(Duration::from_secs(30), || !alive(&mut old.child)),
        "the old gateway did not exit"
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    eprintln!(
        "keep-alive clients through an upgrade: {} ok, {} answered with Connection: close, \
         {} reset, {} other failures",
        get(&tally.ok),
        get(&tally.closes),
        get(&tally.resets),
        get(&tally.other)
    );
    assert_eq!(get(&tally.resets), 0, "keep-alive requests were reset");
    assert_eq!(get(&tally.other), 0, "requests failed");
    // Every client's connection to the old process was closed by an answer, not under it.
    assert!(
        get(&tally.closes) >= CLIENTS,
        "{} answers with Connection: close for {CLIENTS} clients",
        get(&tally.closes)
    );
    assert!(alive(&mut new.child));
}

/// Kills the processes whose pids are in `dir/*.pid` when dropped (the gateways the script
/// started are not this test's children).
struct PidFiles(std::path::PathBuf);

impl Drop for PidFiles {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            if let Ok(pid) = std::fs::read_to_string(entry.path()) {
                let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
            }
        }
    }
}

#[test]
fn a_rolling_restart_by_the_script_fails_nothing() {
    let tree = degraded_ping_tree();
    // A run directory as ./ops/up.sh leaves it: pid files and logs.
    let run = tempfile::tempdir().unwrap();
    let pids = run.path().join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    std::fs::create_dir_all(run.path().join("logs")).unwrap();
    let _cleanup = PidFiles(pids.clone());
    let mut urls = vec![];
    for n in 1..=3 {
        let listen = format!("127.0.0.1:{}", free_port());
        let admin = format!("127.0.0.1:{}", free_port());
        // Started the way up.sh does (setsid, in the background): not a child of the test.
        let out = Command::new("sh")
            .arg("-c")
            .arg(r#"setsid "$@" >"$LOG" 2>&1 </dev/null & echo $!"#)
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_portico-gateway"))
            .args(["--config-dir", &tree.path().display().to_string()])
            .args(["--listen", &listen, "--admin-listen", &admin])
            .args(["--internal-listen", "off"])
            .args([
                "--access-log",
                "off",
                "--threads",
                "2",
                "--drain-seconds",
                "1",
            ])
            .arg("--upgrade-sock")
            .arg(run.path().join(format!("upgrade-{n}.sock")))
            .env("LOG", run.path().join(format!("logs/gateway-{n}.log")))
            .output()
            .unwrap();
        let pid = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        std::fs::write(pids.join(format!("gateway-{n}.pid")), &pid).unwrap();
        urls.push(format!("http://{listen}/v1/ping"));
    }
    let http = client();
    for url in &urls {
        assert!(wait_until(Duration::from_secs(30), || http
            .get(url)
            .send()
            .is_ok_and(|r| r.status() == 200)));
    }
    let before: Vec<String> = (1..=3)
        .map(|n| std::fs::read_to_string(pids.join(format!("gateway-{n}.pid"))).unwrap())
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = urls
        .iter()
        .map(|url| {
            let (stop, ok, failed, url) = (stop.clone(), ok.clone(), failed.clone(), url.clone());
            std::thread::spawn(move || {
                let http = client();
                while !stop.load(Ordering::Relaxed) {
                    match get_ok(&http, &url) {
                        Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("{e}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        })
        .collect();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/restart-gateway.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg("--all")
        .env("PORTICO_RUN_DIR", run.path())
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    assert!(status.success(), "restart-gateway.sh --all failed");
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("rolling restart of three gateways: {ok} ok, {failed} failed");
    assert_eq!(failed, 0);
    for (n, old) in (1..=3).zip(before) {
        let now = std::fs::read_to_string(pids.join(format!("gateway-{n}.pid"))).unwrap();
        assert_ne!(now, old, "gateway-{n} was not replaced");
        assert!(!pids.join(format!("gateway-{n}-draining.pid")).exists());
    }
}

/// One listener, one owner (docs/operations/upgrades.md, "Restarts and upgrades"): a second gateway started
/// on the admin or internal address another one holds refuses to start and names the address (with
/// SO_REUSEPORT alone both would share it, and publishes would reach either at random); only
/// `--upgrade` shares.
#[test]
fn a_second_gateway_on_a_held_admin_or_internal_address_refuses_to_start() {
    let tree = degraded_ping_tree();
    let dir = tempfile::tempdir().unwrap();
    let held_admin = format!("127.0.0.1:{}", free_port());
    let held_internal = format!("127.0.0.1:{}", free_port());
    let start = |admin: &str, internal: &str, sock: &str| {
        let listen = format!("127.0.0.1:{}", free_port());
        Command::new(env!("CARGO_BIN_EXE_portico-gateway"))
            .args(["--config-dir", &tree.path().display().to_string()])
            .args(["--listen", &listen, "--admin-listen", admin])
            .args(["--internal-listen", internal, "--access-log", "off"])
            .args(["--threads", "1"])
            .arg("--upgrade-sock")
            .arg(dir.path().join(sock))
            .env("PORTICO_LOG", "warn")
            .env_remove("PORTICO_PUBLISH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn portico-gateway")
    };
    let mut first = start(&held_admin, &held_internal, "first.sock");
    let http = client();
    assert!(
        wait_until(Duration::from_secs(30), || http
            .get(format!("http://{held_admin}/readyz"))
            .send()
            .is_ok_and(|r| r.status() == 200)),
        "the first gateway never became ready"
    );
    for (admin, internal, which) in [
        (
            held_admin.clone(),
            format!("127.0.0.1:{}", free_port()),
            &held_admin,
        ),
        (
            format!("127.0.0.1:{}", free_port()),
            held_internal.clone(),
            &held_internal,
        ),
    ] {
        let second = start(&admin, &internal, "second.sock");
        let out = second.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "the second gateway started on {which}"
        );
        assert!(
            stderr.contains(&format!("{which} is in use by another process")),
            "{stderr}"
        );
    }
    assert!(alive(&mut first), "the first gateway is unharmed");
    let _ = first.kill();
    let _ = first.wait();
}
