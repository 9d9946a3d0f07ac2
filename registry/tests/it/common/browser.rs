//! The console's browser tests: building `admin-ui/` into a directory the registry serves,
//! and running one `admin-ui/e2e/*.e2e.mjs` script (playwright-core driving Debian's
//! Chromium, see `admin-ui/e2e/harness.mjs`) with the addresses of the processes a test
//! started. Needs node, `admin-ui/node_modules` and Chromium (./ops/test.sh installs them);
//! without them the test fails and says what is missing.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("registry/ has a parent")
        .to_path_buf()
}

/// Where screenshots go: `$PORTICO_SCREENSHOT_DIR` or `target/console-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = std::env::var_os("PORTICO_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/console-screenshots"));
    std::fs::create_dir_all(&dir).expect("creating the screenshot directory");
    dir
}

/// Checks node, the npm dependencies and Chromium, and builds the console into `out`.
/// Returns the Chromium to drive (`$PORTICO_CHROMIUM` or `/usr/bin/chromium`).
pub fn build_console(out: &Path) -> PathBuf {
    let ui = workspace().join("admin-ui");
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(node_ok, "node is not installed (./ops/test.sh installs it)");
    for dep in ["playwright-core", "vite", "preact", "typescript"] {
        assert!(
            ui.join("node_modules").join(dep).is_dir(),
            "admin-ui/node_modules/{dep} is missing: `cd admin-ui && npm ci`"
        );
    }
    let chromium =
        std::env::var("PORTICO_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(
        Path::new(&chromium).is_file(),
        "{chromium} is missing (apt-get install chromium), or set PORTICO_CHROMIUM"
    );
    copy_tree(built_console(&ui), out);
    PathBuf::from(chromium)
}

/// The console, built once per test process (the browser tests of all areas run in this one
/// process, several at a time: one `npm run build` rather than one each, racing on the two
/// cores) into `target/console-e2e/<pid>`; the directories of dead processes are removed.
fn built_console(ui: &Path) -> &'static Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let parent = workspace().join("target/console-e2e");
        if let Ok(entries) = std::fs::read_dir(&parent) {
            for entry in entries.flatten() {
                let pid = entry.file_name().to_string_lossy().into_owned();
                if !Path::new("/proc").join(&pid).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let out = parent.join(std::process::id().to_string());
        let status = Command::new("npm")
            .args(["run", "build", "--", "--outDir"])
            .arg(&out)
            .arg("--emptyOutDir")
            .current_dir(ui)
            .status()
            .expect("running npm");
        assert!(status.success(), "`npm run build` of admin-ui failed");
        out
    })
}

/// Copies the directory tree `from` into `to` (created if missing).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating the console directory");
    for entry in std::fs::read_dir(from).expect("reading the built console") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copying the built console");
        }
    }
}

/// Runs `admin-ui/e2e/<script>` with `env` (plus `SCREENSHOT_DIR` and `CHROMIUM`, unless
/// `env` sets them), echoing its output, and says whether every step passed; panics after
/// `limit`.
pub fn run_script(
    script: &str,
    chromium: &Path,
    env: &BTreeMap<&str, String>,
    limit: Duration,
) -> bool {
    run_script_output(script, chromium, env, limit).0
}

/// As [`run_script`], also answering the lines the script printed on its standard output.
pub fn run_script_output(
    script: &str,
    chromium: &Path,
    env: &BTreeMap<&str, String>,
    limit: Duration,
) -> (bool, Vec<String>) {
    let started = Instant::now();
    let mut node = Command::new("node")
        .arg(workspace().join("admin-ui/e2e").join(script))
        .current_dir(workspace().join("admin-ui"))
        .env("SCREENSHOT_DIR", screenshot_dir())
        .env("CHROMIUM", chromium)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running node");
    let stdout = node.stdout.take().expect("piped stdout");
    let echo = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            lines.push(line);
        }
        lines
    });
    let status = loop {
        if let Some(status) = node.try_wait().expect("waiting for node") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = node.kill();
            let _ = node.wait();
            panic!("the browser run of {script} took more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines = echo.join().unwrap_or_default();
    (status.success(), lines)
}
