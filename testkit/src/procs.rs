//! Portico's own processes started by tests, as the binaries `cargo build --workspace` leaves
//! in `target/<profile>/` ([`sibling_bin`]): a [`Proc`] (a child whose output is kept in a log
//! file, killed on drop), the registry ([`spawn_registry`]), the gateway standalone
//! ([`start_gateway`]) or in ZooKeeper mode ([`spawn_gateway`]), each on free 127.0.0.1 ports
//! and, when the test's ZooKeeper is locked ([`ZooKeeper::start_locked`]), with its role's
//! credentials; and the demo backend ([`BackendProcess`], on ports it picks and reports).
//! ZooKeeper itself is [`ZooKeeper`], Redis [`crate::Redis`].
//!
//! ```no_run
//! let zk = portico_testkit::ZooKeeper::start_locked();
//! let logs = tempfile::tempdir().unwrap();
//! let reg = portico_testkit::procs::spawn_registry(&zk, "registry", logs.path(), "token", |_| {});
//! let gw = portico_testkit::procs::spawn_gateway(&zk, "gw-1", logs.path(), |_| {});
//! println!("registry {} gateway {} (admin {})", reg.base, gw.url, gw.admin);
//! ```
//!
//! Health checks are plain HTTP/1.1 GETs on a `TcpStream` ([`http_get`]): no HTTP client
//! crate here.

use crate::{free_port, sibling_bin, wait_for, ZooKeeper};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long [`spawn_registry`] waits for `/api/v1/health`.
pub const REGISTRY_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A child process killed (SIGKILL) when dropped, also when an assertion fails (then the end
/// of its log is printed); its stdout and stderr in the log file `log`.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` as `name`, stdin closed, stdout and stderr in `logdir/<name>.log`
    /// (created or truncated). Panics if it cannot start.
    pub fn spawn(name: &'static str, cmd: &mut Command, logdir: &Path) -> Proc {
        let log = logdir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let err = out.try_clone().expect("a second handle on the log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name, child, log }
    }

    /// The last 40 lines of its log.
    pub fn tail(&self) -> String {
        tail_of(&self.log, 40)
    }

    /// Panics, with the end of its log, if it has exited.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.name, self.tail());
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    /// Kills it; when the test is failing (a panic unwinding), prints the end of its log
    /// first, since a log in a temporary directory goes with the test.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- the last 40 lines of {} ({}) ---\n{}",
                self.name,
                self.log.display(),
                self.tail()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `n` lines of a file (empty if it cannot be read).
pub fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `GET path` on `addr` over HTTP/1.1 (`Connection: close`, each of `headers` added), read
/// to the end: the status code and the body, `None` when nothing valid answers within 5 s.
/// A chunked body is returned as sent (health checks read the status).
pub fn http_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Option<(u16, String)> {
    let timeout = Duration::from_secs(5);
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).ok()?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).ok()?;
    let text = String::from_utf8_lossy(&reply);
    let status = text
        .strip_prefix("HTTP/1.")?
        .get(2..5)?
        .parse::<u16>()
        .ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// `127.0.0.1:port`.
fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The `portico-registry` binary's command on `zk` (root [`ZooKeeper::root`], with the registry's
/// credentials when `zk` is locked) listening on 127.0.0.1:`port`; the caller adds the admin
/// token and the rest. The binary is [`sibling_bin`]'s (`PORTICO_REGISTRY_BIN` names another).
pub fn registry_command(zk: &ZooKeeper, port: u16) -> Command {
    let mut cmd = Command::new(sibling_bin("portico-registry"));
    cmd.args(["--zk", &zk.connect_string(), "--zk-root", zk.root()])
        .args(["--listen", &format!("127.0.0.1:{port}")]);
    if let Some(c) = zk.credentials() {
        cmd.arg("--zk-auth-file").arg(c.registry_file());
    }
    cmd
}

/// A running registry binary.
pub struct RegistryProc {
    pub proc: Proc,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

/// Starts the registry binary as `name` (its log in `logs/<name>.log`) on a free port with
/// the admin token `token`, `configure` adding its own flags and environment, and waits
/// ([`REGISTRY_START_TIMEOUT`]) until `/api/v1/health` answers 200. Panics, with the end of
/// its log, if it exits or does not come up.
pub fn spawn_registry(
    zk: &ZooKeeper,
    name: &'static str,
    logs: &Path,
    token: &str,
    configure: impl FnOnce(&mut Command),
) -> RegistryProc {
    let port = free_port();
    let mut cmd = registry_command(zk, port);
    cmd.env("PORTICO_ADMIN_TOKEN", token);
    configure(&mut cmd);
    let mut proc = Proc::spawn(name, &mut cmd, logs);
    let bearer = format!("Bearer {token}");
    let up = wait_for(REGISTRY_START_TIMEOUT, || {
        http_get(
            loopback(port),
            "/api/v1/health",
            &[("Authorization", &bearer)],
        )
        .is_some_and(|(status, _)| status == 200)
    });
    proc.assert_alive();
    assert!(up, "{name} did not come up:\n{}", proc.tail());
    RegistryProc {
        proc,
        base: format!("http://127.0.0.1:{port}"),
    }
}

/// A running gateway binary in ZooKeeper mode.
pub struct GatewayProc {
    pub proc: Proc,
    /// `http://127.0.0.1:<port>` of the traffic listener.
    pub url: String,
    /// `http://127.0.0.1:<port>` of the admin listener.
    pub admin: String,
}

/// Starts the `portico-gateway` binary ([`sibling_bin`]; `PORTICO_GATEWAY_BIN` names
/// another) as `name` (its log in `logdir/<name>.log`); `configure` adds the configuration
/// source (`--config-dir`, `--zk`) and the rest. The traffic and admin listeners are on free
/// 127.0.0.1 ports unless `configure` gives `--listen` or `--admin-listen` (a test that hands
/// listeners over between two gateways), the internal listener off unless it asks for one.
/// Does not wait for it: the caller waits for what it needs (ready, registered, in sync).
pub fn start_gateway(
    name: &'static str,
    logdir: &Path,
    configure: impl FnOnce(&mut Command),
) -> GatewayProc {
    let mut cmd = Command::new(sibling_bin("portico-gateway"));
    configure(&mut cmd);
    let mut address = |flag: &str| -> String {
        let given = cmd
            .get_args()
            .skip_while(|a| *a != flag)
            .nth(1)
            .map(|a| a.to_string_lossy().into_owned());
        given.unwrap_or_else(|| {
            let addr = format!("127.0.0.1:{}", free_port());
            cmd.args([flag, &addr]);
            addr
        })
    };
    let listen = address("--listen");
    let admin = address("--admin-listen");
    // The internal listener defaults to a fixed port (127.0.0.1:9181): off unless asked.
    if !cmd.get_args().any(|a| a == "--internal-listen") {
        cmd.args(["--internal-listen", "off"]);
    }
    GatewayProc {
        proc: Proc::spawn(name, &mut cmd, logdir),
        url: format!("http://{listen}"),
        admin: format!("http://{admin}"),
    }
}

/// [`start_gateway`] in ZooKeeper mode: node `node_id` on `zk` (root [`ZooKeeper::root`], with the
/// gateways' credentials when `zk` is locked), its snapshot in `work/snapshot-<node_id>` and
/// its log in `work/gateway.log`; `configure` adds its own flags. Does not wait for it.
pub fn spawn_gateway(
    zk: &ZooKeeper,
    node_id: &str,
    work: &Path,
    configure: impl FnOnce(&mut Command),
) -> GatewayProc {
    start_gateway("gateway", work, |cmd| {
        cmd.args(["--zk", &zk.connect_string(), "--zk-root", zk.root()]);
        if let Some(c) = zk.credentials() {
            cmd.arg("--zk-auth-file").arg(c.gateway_file());
        }
        cmd.arg("--snapshot-dir")
            .arg(work.join(format!("snapshot-{node_id}")))
            .args(["--node-id", node_id]);
        configure(cmd);
    })
}

/// The first word of the demo backend's readiness line.
pub const DEMO_READY_PREFIX: &str = "portico-demo-backend";

/// What the demo backend's readiness line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
}

/// Parses the line `portico-demo-backend` prints on stdout once every listener is bound
/// (docs/operations/ops-scripts.md, "The demo backend"), e.g. `portico-demo-backend
/// http=127.0.0.1:41234 grpc=127.0.0.1:41235`; `None` for any other line.
pub fn parse_ready_line(line: &str) -> Option<Ready> {
    let mut words = line.split_whitespace();
    if words.next()? != DEMO_READY_PREFIX {
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

/// A running `portico-demo-backend` ([`sibling_bin`]; `PORTICO_DEMO_BACKEND` or
/// `PORTICO_DEMO_BACKEND_BIN` names another); killed when dropped.
#[derive(Debug)]
pub struct BackendProcess {
    child: Child,
    /// The HTTP listener's address.
    pub http: SocketAddr,
    /// The gRPC listener's address, when started with `--grpc`.
    pub grpc: Option<SocketAddr>,
}

impl BackendProcess {
    /// Starts the backend with `--http 127.0.0.1:0`.
    pub fn start_http() -> Result<Self, String> {
        Self::start(&["--http", "127.0.0.1:0"])
    }

    /// Starts the backend with `--http 127.0.0.1:0 --grpc 127.0.0.1:0`.
    pub fn start_http_grpc() -> Result<Self, String> {
        Self::start(&["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
    }

    /// Starts the backend with these arguments and waits (up to 20 s) for its readiness line.
    /// The arguments must include `--http`.
    pub fn start(args: &[&str]) -> Result<Self, String> {
        let bin = std::env::var_os("PORTICO_DEMO_BACKEND")
            .map(PathBuf::from)
            .unwrap_or_else(|| sibling_bin(DEMO_READY_PREFIX));
        Self::start_bin(&bin, args)
    }

    /// Like [`BackendProcess::start`], with the binary at `bin` (e.g.
    /// `env!("CARGO_BIN_EXE_portico-demo-backend")`).
    pub fn start_bin(bin: &Path, args: &[&str]) -> Result<Self, String> {
        use std::io::BufRead;
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the readiness line, then keeps draining stdout so the child never blocks.
        std::thread::spawn(move || {
            let mut sent = false;
            for line in std::io::BufReader::new(stdout).lines() {
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
                return Err(format!(
                    "{DEMO_READY_PREFIX} printed no readiness line (exit: {status:?})"
                ));
            }
        };
        let Some(http) = ready.http else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{DEMO_READY_PREFIX} was started without --http"));
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

    #[test]
    fn http_get_reads_status_and_body() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut byte).unwrap();
                head.push(byte[0]);
            }
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\nno")
                .unwrap();
            String::from_utf8(head).unwrap()
        });
        let got = http_get(addr, "/readyz", &[("Authorization", "Bearer t")]);
        assert_eq!(got, Some((503, "no".to_owned())));
        let head = server.join().unwrap();
        assert!(head.starts_with("GET /readyz HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("\r\nAuthorization: Bearer t\r\n"), "{head}");
    }

    #[test]
    fn a_proc_keeps_its_log_and_is_killed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo started; exec sleep 60"]);
        let mut proc = Proc::spawn("sleeper", &mut cmd, dir.path());
        assert!(wait_for(Duration::from_secs(10), || proc.tail() == "started"));
        proc.assert_alive();
        let pid = proc.pid();
        drop(proc);
        // Killed and reaped: no process of that id runs `sleep` any more.
        let alive = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.contains("sleep"));
        assert!(!alive, "{pid} still runs");
    }
}
