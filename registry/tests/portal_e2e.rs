//! The merchants' developer portal end to end, in a real headless Chromium: a real ZooKeeper,
//! the demo backend, a gateway with live and sandbox listeners, and the registry binary
//! serving a fresh build of `admin-ui/` (the portal is its second entry, `admin-ui/portal/`),
//! with the example tree published to both trees (`portal_world`).
//!
//! `admin-ui/e2e/portal.e2e.mjs` (playwright-core driving Debian's `/usr/bin/chromium`) checks
//! the catalogue, the search, one API page, copies the Python snippet to the clipboard, runs
//! "try it" against the sandbox listener (200, and 401 with a wrong secret), the signing guide
//! and the per-app view; screenshots go to `target/portal-screenshots/` (or
//! `$PORTICO_SCREENSHOT_DIR`). Afterwards this test runs the snippet the browser copied, as a
//! merchant would, against the live gateway: it must get 200.
//!
//! Needs node + `admin-ui/node_modules` and Chromium; `./ops/test.sh` installs both. Without
//! them the test fails and says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod portal_world;

use portal_world::{workspace, World, M1, M2};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Checks node, the npm dependencies and Chromium, and builds the console (and the portal)
/// into `out`; the Chromium to drive.
fn build_ui(out: &Path) -> PathBuf {
    let ui = workspace().join("admin-ui");
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        node_ok,
        "node is not installed: the portal end-to-end test needs Node.js and npm \
         (./ops/test.sh installs them)"
    );
    for dep in ["playwright-core", "vite", "preact", "typescript"] {
        assert!(
            ui.join("node_modules").join(dep).is_dir(),
            "admin-ui/node_modules/{dep} is missing: run ./ops/test.sh (it runs `npm ci` in \
             admin-ui/), or `cd admin-ui && npm ci`"
        );
    }
    let chromium =
        std::env::var("PORTICO_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(
        Path::new(&chromium).is_file(),
        "{chromium} is missing: the portal end-to-end test drives Debian's Chromium \
         (./ops/test.sh installs it: apt-get install chromium), or set PORTICO_CHROMIUM"
    );
    let status = Command::new("npm")
        .args(["run", "build", "--", "--outDir"])
        .arg(out)
        .arg("--emptyOutDir")
        .current_dir(&ui)
        .status()
        .expect("running npm");
    assert!(
        status.success(),
        "`npm run build` of admin-ui failed ({status})"
    );
    assert!(
        out.join("portal/index.html").is_file(),
        "the build has no portal/index.html"
    );
    PathBuf::from(chromium)
}

#[test]
fn portal_end_to_end_in_chromium() {
    let build = tempfile::tempdir().unwrap();
    let ui = build.path().join("dist");
    let chromium = build_ui(&ui);
    let mut world = World::start(Some(&ui));
    let shots = std::env::var_os("PORTICO_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/portal-screenshots"));

    // The pages are served without a token, with the console's security headers.
    let resp = world
        .http
        .get(format!("{}/portal/", world.registry_url))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers().get("x-portico-portal").is_none(),
        "the portal is not built"
    );
    assert!(resp.headers().contains_key("content-security-policy"));
    assert!(resp.text().unwrap().contains("id=\"portal\""));

    let mut ids: Vec<String> = std::fs::read_dir(workspace().join("ops/examples/standalone/apis"))
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.trim_end_matches(".json").to_owned()
        })
        .collect();
    ids.sort();

    let started = Instant::now();
    let mut node = Command::new("node")
        .arg(workspace().join("admin-ui/e2e/portal.e2e.mjs"))
        .current_dir(workspace().join("admin-ui"))
        .env("PORTAL_URL", &world.registry_url)
        .env("GATEWAY_URL", &world.gateway_url)
        .env("APP_KEY", M1.0)
        .env("APP_SECRET", M1.1)
        .env("APP2_KEY", M2.0)
        .env("APP2_SECRET", M2.1)
        .env("EXPECT_APIS", ids.join(","))
        .env("SCREENSHOT_DIR", &shots)
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running node");
    let stdout = node.stdout.take().unwrap();
    let echo = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            lines.push(line);
        }
        lines
    });
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(240) {
            let _ = node.kill();
            let _ = node.wait();
            panic!(
                "the browser run took more than 240 s; screenshots in {}",
                shots.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines = echo.join().unwrap();
    world.registry.assert_alive();
    world.gateway.assert_alive();
    assert!(
        status.success(),
        "the browser run failed ({status}); screenshots in {}\n{}",
        shots.display(),
        world.logs()
    );
    println!("browser run: {:?}", started.elapsed());

    // The snippet the browser copied, run as the merchant would: it signs and gets 200.
    let begin = lines
        .iter()
        .position(|l| l == "SNIPPET-BEGIN")
        .expect("no copied snippet");
    use base64::Engine as _;
    let snippet = base64::engine::general_purpose::STANDARD
        .decode(lines[begin + 1].trim())
        .unwrap();
    let file = build.path().join("call.py");
    std::fs::write(&file, &snippet).unwrap();
    let out = Command::new("python3")
        .arg(&file)
        .env("PORTICO_BASE_URL", &world.gateway_url)
        .env("PORTICO_APP_KEY", M1.0)
        .env("PORTICO_SECRET", M1.1)
        .env_remove("PORTICO_TIMESTAMP")
        .env_remove("PORTICO_NONCE")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("HTTP 200"),
        "the copied snippet did not get 200:\n{text}"
    );
    println!("the copied Python snippet: HTTP 200");
}
