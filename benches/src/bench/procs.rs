//! Child processes of a benchmark: start (optionally pinned with `taskset`), wait until
//! ready, read their CPU time from `/proc/<pid>/stat`, and kill them (by their own pid) when
//! dropped.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

/// A started child process; killed and reaped on drop.
pub struct Proc {
    pub name: String,
    pub pid: u32,
    child: Child,
    pub stderr_path: PathBuf,
}

/// How to start a process.
pub struct Spawn<'a> {
    pub name: &'a str,
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(&'a str, String)>,
    /// Pin to this CPU with `taskset -c` (which execs the program: the pid is the program's).
    pub cpu: Option<&'a str>,
    /// Run with this niceness (`nice -n`, which execs too); 0: unchanged.
    pub nice: i32,
    /// Directory for the stdout/stderr log files.
    pub log_dir: &'a Path,
    /// Pipe stdout to the caller instead of a log file.
    pub pipe_stdout: bool,
    /// How to launch it: a wrapper (valgrind), a file-descriptor limit.
    pub launch: &'a Launch,
}

/// How a process under test is launched: as is (the default), or under a wrapper such as
/// `valgrind --tool=callgrind ...`, with a raised open-file limit, and how long to wait for
/// it to be ready (a program under callgrind starts 10–50× slower).
#[derive(Debug, Clone)]
pub struct Launch {
    /// Inserted before the program (after `nice` and `taskset`).
    pub wrapper: Vec<String>,
    /// `prlimit --nofile=N:N` (for 10,000 idle connections).
    pub nofile: Option<u64>,
    pub ready_timeout: Duration,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            wrapper: Vec::new(),
            nofile: None,
            ready_timeout: Duration::from_secs(30),
        }
    }
}

impl Spawn<'_> {
    pub fn start(self) -> anyhow::Result<(Proc, Option<std::process::ChildStdout>)> {
        let mut cmd = command_with(
            self.program,
            self.cpu,
            self.nice,
            self.launch.nofile,
            &self.launch.wrapper,
        );
        cmd.args(&self.args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // A sequence number keeps the logs of every suite's processes apart.
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stem = format!("{seq:02}-{}", self.name);
        let stderr_path = self.log_dir.join(format!("{stem}.stderr"));
        cmd.stderr(File::create(&stderr_path)?);
        if self.pipe_stdout {
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdout(File::create(self.log_dir.join(format!("{stem}.stdout")))?);
        }
        cmd.stdin(Stdio::null());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.program.display()))?;
        let stdout = child.stdout.take();
        let pid = child.id();
        Ok((
            Proc {
                name: self.name.to_owned(),
                pid,
                child,
                stderr_path,
            },
            stdout,
        ))
    }
}

impl Proc {
    /// (user, system) CPU time of the whole process (all its threads) so far, in seconds.
    pub fn cpu_times(&self) -> anyhow::Result<(f64, f64)> {
        cpu_times(self.pid)
    }

    /// Fails with the tail of its stderr if the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); stderr tail:\n{}",
                self.name,
                self.stderr_tail()
            );
        }
        Ok(())
    }

    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `program` behind `nice -n N` and `taskset -c CPU` when asked (both exec the next
/// program, so the child's pid is the program's own).
pub fn command(program: &Path, cpu: Option<&str>, nice: i32) -> Command {
    command_with(program, cpu, nice, None, &[])
}

/// [`command`] with an open-file limit (`prlimit`, which execs too) and a wrapper program
/// (valgrind) in front of `program`.
pub fn command_with(
    program: &Path,
    cpu: Option<&str>,
    nice: i32,
    nofile: Option<u64>,
    wrapper: &[String],
) -> Command {
    let mut parts: Vec<std::ffi::OsString> = Vec::new();
    if let Some(n) = nofile {
        parts.extend([
            "prlimit".into(),
            format!("--nofile={n}:{n}").into(),
            "--".into(),
        ]);
    }
    if nice != 0 {
        parts.extend(["nice".into(), "-n".into(), nice.to_string().into()]);
    }
    if let Some(cpu) = cpu {
        parts.extend(["taskset".into(), "-c".into(), cpu.into()]);
    }
    parts.extend(wrapper.iter().map(Into::into));
    parts.push(program.as_os_str().to_owned());
    let mut cmd = Command::new(&parts[0]);
    cmd.args(&parts[1..]);
    cmd
}

/// Resident set size of process `pid` (`VmRSS` of `/proc/<pid>/status`), in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))
}

/// Open file descriptors of process `pid` (sockets included).
pub fn fd_count(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`, 100 on Linux).
pub fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|v| *v > 0.0)
            .unwrap_or(100.0)
    })
}

/// (utime, stime) of process `pid` (every thread), in seconds.
pub fn cpu_times(pid: u32) -> anyhow::Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: fields are counted after its `)`.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("malformed /proc/{pid}/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After `)`: field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let utime: u64 = fields.get(11).context("utime")?.parse()?;
    let stime: u64 = fields.get(12).context("stime")?.parse()?;
    Ok((utime as f64 / clk_tck(), stime as f64 / clk_tck()))
}

/// A port that was free a moment ago on 127.0.0.1, below the kernel's ephemeral range so
/// that no load-generator connection can take it before the server binds it (the testkit's
/// choice, see `portico_testkit::free_port`; a `bind(0)` port is an ephemeral one).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(portico_testkit::free_port())
}

/// Reads lines from `stdout` until `parse` accepts one (or `timeout` passes).
pub fn wait_line<T: Send + 'static>(
    stdout: std::process::ChildStdout,
    timeout: Duration,
    parse: fn(&str) -> Option<T>,
) -> anyhow::Result<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let reader = BufReader::new(stdout);
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if let Some(v) = parse(&line) {
                let _ = tx.send(v);
                // Keep draining so the child never blocks on a full pipe.
            }
        }
    });
    rx.recv_timeout(timeout)
        .map_err(|_| anyhow!("no readiness line within {timeout:?}"))
}

/// A minimal blocking HTTP/1.1 exchange (`Connection: close`): status and body.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> anyhow::Result<(u16, String)> {
    http_exchange(addr, method, path_and_query, headers, body).map(|(s, _, b)| (s, b))
}

/// As [`http_request`], with the response head (status line and headers) as well:
/// (status, head, body).
pub fn http_exchange(
    addr: SocketAddr,
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> anyhow::Result<(u16, String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req =
        format!("{method} {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| anyhow!("no HTTP status in {:?}", &text[..text.len().min(200)]))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    Ok((status, head.to_owned(), body.to_owned()))
}

/// Waits until `addr` accepts TCP connections, checking that `proc` is still alive.
pub fn wait_tcp(proc: &mut Proc, addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        proc.check_alive()?;
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("{} does not accept on {addr} within {timeout:?}", proc.name)
}

/// Polls `GET path` on `addr` until it answers `want` (or `timeout` passes), checking that
/// `proc` is still alive in between.
pub fn wait_http(
    proc: &mut Proc,
    addr: SocketAddr,
    path: &str,
    want: u16,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        proc.check_alive()?;
        match http_request(addr, "GET", path, &[], b"") {
            Ok((s, _)) if s == want => return Ok(()),
            Ok((s, b)) => last = format!("status {s}: {}", &b[..b.len().min(300)]),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "{} not ready at http://{addr}{path} within {timeout:?} ({last}); stderr tail:\n{}",
        proc.name,
        proc.stderr_tail()
    )
}
