//! Launching the `portico-demo-backend` binary from tests, on ephemeral ports.
//!
//! ```no_run
//! let backend = portico_demo::process::BackendProcess::start_http()?;
//! println!("demo backend at http://{}", backend.http);
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! The binary is found, in order, at `$PORTICO_DEMO_BACKEND`, next to the running test
//! executable's profile dir (`target/<profile>/portico-demo-backend`, the test itself being
//! in `target/<profile>/deps/`), or next to the running executable. `cargo build --workspace
//! --all-targets` (what `ops/test.sh` runs first) puts it there; within `cargo test
//! --workspace` the integration test of this crate makes cargo build it as well.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};

/// The binary's name.
pub const BIN_NAME: &str = "portico-demo-backend";

/// What the readiness line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
}

/// Parses `portico-demo-backend http=127.0.0.1:41234 grpc=127.0.0.1:41235`.
/// Returns `None` for any other line.
pub fn parse_ready_line(line: &str) -> Option<Ready> {
    let mut words = line.split_whitespace();
    if words.next()? != crate::READY_PREFIX {
        return None;
    }
    let mut ready = Ready {
        http: None,
        grpc: None,
    };
    for word in words {
        let (key, value) = word.split_once('=')?;
        let addr: SocketAddr = value.parse().ok()?;
        match key {
            "http" => ready.http = Some(addr),
            "grpc" => ready.grpc = Some(addr),
            _ => {}
        }
    }
    if ready.http.is_none() && ready.grpc.is_none() {
        return None;
    }
    Some(ready)
}

/// Where the `portico-demo-backend` binary is (see the module docs).
pub fn backend_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("PORTICO_DEMO_BACKEND") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("current_exe")?;
    let mut candidates = Vec::new();
    if let Some(dir) = exe.parent() {
        if dir.file_name().is_some_and(|n| n == "deps") {
            if let Some(profile) = dir.parent() {
                candidates.push(profile.join(BIN_NAME));
            }
        }
        candidates.push(dir.join(BIN_NAME));
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "{BIN_NAME} not found (looked at {candidates:?}); run `cargo build --workspace --all-targets` or set PORTICO_DEMO_BACKEND"
            )
        })
}

/// A running `portico-demo-backend`; killed when dropped.
#[derive(Debug)]
pub struct BackendProcess {
    child: Child,
    /// The HTTP listener's address, when started with `--http`.
    pub http: SocketAddr,
    /// The gRPC listener's address, when started with `--grpc`.
    pub grpc: Option<SocketAddr>,
}

impl BackendProcess {
    /// Starts the backend with `--http 127.0.0.1:0`.
    pub fn start_http() -> anyhow::Result<Self> {
        Self::start(&["--http", "127.0.0.1:0"])
    }

    /// Starts the backend with `--http 127.0.0.1:0 --grpc 127.0.0.1:0`.
    pub fn start_http_grpc() -> anyhow::Result<Self> {
        Self::start(&["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
    }

    /// Starts the backend with these arguments and waits (up to 20 s) for its readiness line.
    /// The arguments must include `--http`.
    pub fn start(args: &[&str]) -> anyhow::Result<Self> {
        Self::start_bin(&backend_bin()?, args)
    }

    /// Like [`BackendProcess::start`], with the binary at `bin` (e.g.
    /// `env!("CARGO_BIN_EXE_portico-demo-backend")`).
    pub fn start_bin(bin: &std::path::Path, args: &[&str]) -> anyhow::Result<Self> {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout pipe"))?;
        let (tx, rx) = mpsc::channel();
        // Reads the readiness line, then keeps draining stdout so the child never blocks.
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent {
                    if let Some(ready) = parse_ready_line(&line) {
                        let _ = tx.send(ready);
                        sent = true;
                    }
                }
            }
        });
        let ready = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(ready) => ready,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                bail!("{BIN_NAME} printed no readiness line (exit: {status:?})");
            }
        };
        let Some(http) = ready.http else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{BIN_NAME} was started without --http");
        };
        Ok(BackendProcess {
            child,
            http,
            grpc: ready.grpc,
        })
    }

    /// `http://ADDR` of the HTTP listener.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_line() {
        let r =
            parse_ready_line("portico-demo-backend http=127.0.0.1:41234 grpc=127.0.0.1:5").unwrap();
        assert_eq!(r.http, Some("127.0.0.1:41234".parse().unwrap()));
        assert_eq!(r.grpc, Some("127.0.0.1:5".parse().unwrap()));
        let r = parse_ready_line("portico-demo-backend http=127.0.0.1:80").unwrap();
        assert_eq!(r.grpc, None);
        assert_eq!(parse_ready_line("portico-demo-backend"), None);
        assert_eq!(parse_ready_line("something else http=127.0.0.1:1"), None);
    }
}
