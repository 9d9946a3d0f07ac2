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

use crate::common::browser::{build_console, run_script_output, workspace};
use crate::portal_world::{assert_merchant_words, World, M1, M1_SANDBOX, M2};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn portal_end_to_end_in_chromium() {
    let build = tempfile::tempdir().unwrap();
    let ui = build.path().join("dist");
    let chromium = build_console(&ui);
    assert!(
        ui.join("portal/index.html").is_file(),
        "the build has no portal/index.html"
    );
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
    let html = resp.text().unwrap();
    assert!(html.contains("id=\"portal\""));
    // The pages as served (the HTML and every script and style it loads) point merchants to
    // no repository file and name no gRPC service: the portal is self-contained.
    assert_merchant_words(&html, "/portal/");
    let mut assets = 0;
    for piece in html.split(['"', '\'']) {
        if piece.starts_with("/assets/") || piece.starts_with("/portal/assets/") {
            let text = world
                .http
                .get(format!("{}{piece}", world.registry_url))
                .send()
                .unwrap()
                .text()
                .unwrap();
            assert_merchant_words(&text, piece);
            assets += 1;
        }
    }
    assert!(
        assets >= 2,
        "the portal page loads {assets} assets:\n{html}"
    );

    let mut ids: Vec<String> = std::fs::read_dir(workspace().join("ops/examples/standalone/apis"))
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.trim_end_matches(".json").to_owned()
        })
        .collect();
    ids.sort();

    let env = BTreeMap::from([
        ("PORTAL_URL", world.registry_url.clone()),
        ("GATEWAY_URL", world.gateway_url.clone()),
        ("APP_KEY", M1.0.to_owned()),
        ("APP_SECRET", M1.1.to_owned()),
        ("APP_SANDBOX_SECRET", M1_SANDBOX.1.to_owned()),
        ("APP2_KEY", M2.0.to_owned()),
        ("APP2_SECRET", M2.1.to_owned()),
        ("EXPECT_APIS", ids.join(",")),
        ("SCREENSHOT_DIR", shots.display().to_string()),
    ]);
    let started = Instant::now();
    let (passed, lines) =
        run_script_output("portal.e2e.mjs", &chromium, &env, Duration::from_secs(240));
    world.registry.assert_alive();
    world.gateway.assert_alive();
    assert!(
        passed,
        "the browser run failed; screenshots in {}\n{}",
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
