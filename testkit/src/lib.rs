//! Test support shared by Portico's integration tests: a real ZooKeeper server (the Debian
//! `zookeeper` package) on a free loopback port with a private data directory, its `zkCli.sh`
//! client, a real Redis ([`Redis`], Debian's `redis-server`), and free ports.
//!
//! ```no_run
//! let zk = portico_testkit::ZooKeeper::start();
//! let out = portico_testkit::zkcli(&zk.connect_string(), &["create", "/portico", ""]);
//! assert!(out.success, "{}", out.stderr);
//! ```
//!
//! [`ZooKeeper::start_locked`] starts one whose `/portico` tree is locked down the way
//! `./ops/up.sh` and `portico zk lockdown` leave it (docs/operations/zookeeper.md, "ZooKeeper
//! credentials and ACLs"): the three roles' credentials are in [`ZooKeeper::credentials`], and
//! [`zkcli_as`] runs zkCli after `addauth digest`.
//!
//! The ZooKeeper installation is `/usr/share/zookeeper` unless `PORTICO_ZK_HOME` names another.
//! Everything here panics with a clear message on failure: it is for tests and start-up only.
#![allow(clippy::expect_used)]

pub mod netns;
pub mod procs;
pub mod source_graph;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long [`ZooKeeper::start`] and [`ZooKeeper::restart`] wait for the server to accept a session.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The ZooKeeper installation directory (`PORTICO_ZK_HOME`, default `/usr/share/zookeeper`).
pub fn zk_home() -> PathBuf {
    std::env::var_os("PORTICO_ZK_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/zookeeper"))
}

/// A free TCP port on 127.0.0.1 for a server a test starts: bound once and released, so it
/// is free at the time of the call. It is chosen *below* the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, where outgoing connections take their local ports), so
/// that no test's client connection can take it before the server binds it (a port from
/// `bind(0)` is an ephemeral one, and under parallel tests one was taken that way), and one
/// process never hands out the same port twice.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_start);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    if high > low + 1_000 {
        let random = std::collections::hash_map::RandomState::new();
        for attempt in 0u64..2_000 {
            let mut h = random.build_hasher();
            h.write_u64(attempt);
            let port = low + (h.finish() % u64::from(high - low)) as u16;
            if given.contains(&port) {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return port;
            }
        }
    }
    // No room below the ephemeral range: any free port.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    let port = listener
        .local_addr()
        .expect("local_addr of a bound listener")
        .port();
    given.insert(port);
    port
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `target/<profile>/<name>`: a binary of the workspace built beside the running test's
/// (`deps/`) directory, such as `portico-registry` or the `portico` CLI, unless `<NAME>_BIN`
/// (`PORTICO_GATEWAY_BIN` for `portico-gateway`) names another one. Panics, saying how to
/// build it, when it is missing.
pub fn sibling_bin(name: &str) -> PathBuf {
    let env_override = format!("{}_BIN", name.to_uppercase().replace('-', "_"));
    if let Some(p) = std::env::var_os(&env_override) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test's directory");
    let profile = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("the profile directory")
    } else {
        deps
    };
    let bin = profile.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build --workspace --all-targets` first (./ops/test.sh does), \
         or set {env_override}",
        bin.display()
    );
    bin
}

/// The Python interpreter with the pinned grpcio and protobuf that `./ops/test.sh` installs:
/// `PORTICO_GRPCIO_PYTHON` (test.sh exports it), else the workspace's `.run/venv/bin/python`.
/// Panics, saying how to get one, unless it can `import` every module of `imports` (e.g.
/// `["grpc", "google.protobuf"]`).
pub fn grpcio_python(imports: &[&str]) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ has a parent");
    let py = std::env::var_os("PORTICO_GRPCIO_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join(".run/venv/bin/python"));
    let statement = format!("import {}", imports.join(", "));
    let ok = Command::new(&py)
        .args(["-c", &statement])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot `{statement}`: run ./ops/test.sh, or `bash -c '. ops/lib.sh && \
         ensure_grpcio'` and set PORTICO_GRPCIO_PYTHON to the python it prints",
        py.display()
    );
    py
}

/// The `zoo.cfg` of one member of a test ensemble: 500 ms ticks, sessions of 1 to 60 s, the
/// four-letter commands tests read, data in `data`, clients on `client_addr:client_port`, and
/// `servers` (`server.N=host:2888:3888` lines).
pub fn ensemble_member_config(
    data: &Path,
    client_addr: &str,
    client_port: u16,
    servers: &str,
) -> String {
    format!(
        "tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={client_port}\n\
         clientPortAddress={client_addr}\nadmin.enableServer=false\nminSessionTimeout=1000\n\
         maxSessionTimeout=60000\nmaxClientCnxns=0\n4lw.commands.whitelist={FOUR_LETTER_WORDS}\n{servers}",
        data.display()
    )
}

/// The four-letter commands test servers answer.
const FOUR_LETTER_WORDS: &str = "ruok,srvr,stat,mntr,cons";

/// Makes `cmd`, which runs `zkServer.sh` (directly, or through a wrapper such as `ip netns
/// exec`), serve `dir/zoo.cfg` in the foreground: logs in `dir`, `heap_mib` MiB of heap, the
/// serial collector, no JMX.
pub fn zk_server_command(cmd: &mut Command, dir: &Path, heap_mib: u32) {
    cmd.arg("start-foreground")
        .arg(dir.join("zoo.cfg"))
        .env("ZOOCFGDIR", dir)
        .env("ZOO_LOG_DIR", dir)
        .env("JMXDISABLE", "true")
        .env(
            "JVMFLAGS",
            format!(
                "-Xmx{heap_mib}m -XX:+UseSerialGC -Dzookeeper.log.dir={} -Dzookeeper.root.logger=INFO,CONSOLE",
                dir.display()
            ),
        )
        .current_dir(dir);
}

/// A ZooKeeper server process owned by a test. Killed (and its data directory removed) on drop.
///
/// Or a test's own tree on the process's shared server ([`ZooKeeper::on_shared`]): the same
/// interface, under a root of its own ([`ZooKeeper::root`]); dropping it leaves the server
/// running, and stopping, pausing or killing it panics.
pub struct ZooKeeper {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    paused: bool,
    credentials: Option<ZkCredentials>,
    /// The tree's root: `/portico` on a server of the test's own, `/t-<n>-<random>/portico`
    /// on the shared one.
    root: String,
    /// A handle on the shared server (which it does not own).
    shared: bool,
    /// Whether the server dies with the thread that spawned it (the shared server's).
    dies_with_parent: bool,
}

/// The process's shared server ([`ZooKeeper::on_shared`]).
static SHARED: std::sync::OnceLock<ZooKeeper> = std::sync::OnceLock::new();

/// The prefix of the shared servers' directories in the temporary directory
/// (`<prefix><pid>-<random>`), so that the next process can remove those of dead ones.
const SHARED_DIR_PREFIX: &str = "portico-zk-shared-";

/// The `digest` ACL id of `user:password`: `user:base64(sha1("user:password"))`.
pub fn digest_id(user_password: &str) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    let user = user_password.split(':').next().unwrap_or("");
    let hash = sha1::Sha1::digest(user_password.as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

/// The three roles' credentials (`user:password`, random passwords), also as `0600` files.
pub struct ZkCredentials {
    dir: tempfile::TempDir,
    /// `portico-registry:PASSWORD`.
    pub registry: String,
    /// `portico-gateway:PASSWORD`.
    pub gateway: String,
    /// `portico-operator:PASSWORD`.
    pub operator: String,
}

impl ZkCredentials {
    /// Fresh random credentials, written to `registry`, `gateway` and `operator` files (0600).
    pub fn generate() -> ZkCredentials {
        let dir = tempfile::Builder::new()
            .prefix("portico-zk-auth-")
            .tempdir()
            .expect("temporary directory for credentials");
        let password = |role: &str| {
            let mut seed = [0u8; 16];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut seed))
                .expect("read /dev/urandom");
            let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
            format!("portico-{role}:{hex}")
        };
        let creds = ZkCredentials {
            registry: password("registry"),
            gateway: password("gateway"),
            operator: password("operator"),
            dir,
        };
        for (name, text) in [
            ("registry", &creds.registry),
            ("gateway", &creds.gateway),
            ("operator", &creds.operator),
        ] {
            write_private(&creds.dir.path().join(name), text);
        }
        creds
    }

    /// The file holding the registry's credentials.
    pub fn registry_file(&self) -> PathBuf {
        self.dir.path().join("registry")
    }

    /// The file holding the gateway's credentials.
    pub fn gateway_file(&self) -> PathBuf {
        self.dir.path().join("gateway")
    }

    /// The file holding the operator's credentials.
    pub fn operator_file(&self) -> PathBuf {
        self.dir.path().join("operator")
    }

    /// The ACL of the root as `portico zk lockdown` sets it (zkCli syntax).
    pub fn root_acl(&self) -> String {
        format!(
            "digest:{}:cdrwa,digest:{}:r,digest:{}:r",
            digest_id(&self.registry),
            digest_id(&self.gateway),
            digest_id(&self.operator)
        )
    }

    /// The ACL of a `nodes/` folder (gateways register there).
    pub fn nodes_acl(&self) -> String {
        format!(
            "digest:{}:cdrwa,digest:{}:crda,digest:{}:r",
            digest_id(&self.registry),
            digest_id(&self.gateway),
            digest_id(&self.operator)
        )
    }
}

/// Writes `text` to a new file readable by its owner only.
pub fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

impl ZooKeeper {
    /// Starts a standalone server on a free 127.0.0.1 port with a fresh data directory, and
    /// returns once a client session can be established. Panics if it cannot start.
    pub fn start() -> ZooKeeper {
        Self::try_start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"))
    }

    /// Like [`ZooKeeper::start`], with the failure as an error.
    pub fn try_start() -> Result<ZooKeeper, String> {
        let script = zk_home().join("bin/zkServer.sh");
        if !script.exists() {
            return Err(format!(
                "{} is missing: install ZooKeeper with `apt-get install -y zookeeper`",
                script.display()
            ));
        }
        let mut last_error = String::new();
        // A port found free can be taken before ZooKeeper binds it: try a few.
        for _ in 0..3 {
            let mut zk = ZooKeeper {
                dir: tempfile::Builder::new()
                    .prefix("portico-zk-")
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?,
                port: free_port(),
                child: None,
                paused: false,
                credentials: None,
                root: "/portico".to_owned(),
                shared: false,
                dies_with_parent: false,
            };
            match zk.write_config().and_then(|()| zk.spawn()) {
                Ok(()) => return Ok(zk),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// Starts a server (as [`ZooKeeper::start`]) and locks the `/portico` tree down with fresh
    /// credentials ([`ZooKeeper::credentials`]): the root, `nodes/`, `sandbox/` and
    /// `sandbox/nodes/` exist with the ACLs `portico zk lockdown` gives them; the registry
    /// creates the rest with the right ACLs.
    pub fn start_locked() -> ZooKeeper {
        let mut zk = ZooKeeper::start();
        let creds = ZkCredentials::generate();
        zk.lock_tree("/portico", &creds);
        zk.credentials = Some(creds);
        zk
    }

    /// A tree of the test's own on the process's shared server, started by the first call (a
    /// ZooKeeper per test process rather than per test): the root is `/t-<n>-<random>/portico`
    /// ([`ZooKeeper::root`]), missing until a registry or a gateway creates it, as on a fresh
    /// server. For tests that need only a plain, open server: one that stops, pauses, kills,
    /// locks down or counts the sessions of its ZooKeeper starts its own
    /// ([`ZooKeeper::start`]). The server dies with the test process, even a killed one (it
    /// gets SIGKILL when the thread that started it, which never ends, dies); the next
    /// process removes the directories of dead ones.
    pub fn on_shared() -> ZooKeeper {
        let server = Self::shared_server();
        static TREES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = TREES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let random = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(n);
            h.finish() & 0xffff_ffff
        };
        ZooKeeper {
            dir: tempfile::Builder::new()
                .prefix("portico-zk-tree-")
                .tempdir()
                .expect("a temporary directory"),
            port: server.port,
            child: None,
            paused: false,
            credentials: None,
            root: format!("/t-{n}-{random:08x}/portico"),
            shared: true,
            dies_with_parent: false,
        }
    }

    /// [`ZooKeeper::on_shared`] with the tree locked down with fresh credentials, as
    /// [`ZooKeeper::start_locked`] does with `/portico` (the parent of the root stays open).
    pub fn on_shared_locked() -> ZooKeeper {
        let mut zk = ZooKeeper::on_shared();
        let creds = ZkCredentials::generate();
        zk.lock_tree(&zk.root.clone(), &creds);
        zk.credentials = Some(creds);
        zk
    }

    /// The shared server, started on the first call.
    fn shared_server() -> &'static ZooKeeper {
        SHARED.get_or_init(|| {
            remove_dead_shared_dirs();
            // PR_SET_PDEATHSIG fires when the *thread* that spawned the child ends: the
            // server is spawned from a thread that never ends, so it dies with the process.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("shared-zookeeper".to_owned())
                .spawn(move || {
                    let _ = tx.send(ZooKeeper::try_start_shared());
                    loop {
                        std::thread::park();
                    }
                })
                .expect("a thread for the shared ZooKeeper");
            rx.recv()
                .expect("the shared ZooKeeper's thread answers")
                .unwrap_or_else(|e| panic!("cannot start the shared ZooKeeper: {e}"))
        })
    }

    /// Starts the shared server: as [`ZooKeeper::try_start`], in a directory named for this
    /// process, under `setpriv --pdeathsig KILL`.
    fn try_start_shared() -> Result<ZooKeeper, String> {
        let mut last_error = String::new();
        for _ in 0..3 {
            let mut zk = ZooKeeper {
                dir: tempfile::Builder::new()
                    .prefix(&format!("{SHARED_DIR_PREFIX}{}-", std::process::id()))
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?,
                port: free_port(),
                child: None,
                paused: false,
                credentials: None,
                root: "/portico".to_owned(),
                shared: false,
                dies_with_parent: true,
            };
            match zk.write_config().and_then(|()| zk.spawn()) {
                Ok(()) => return Ok(zk),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// The root of the test's tree: `/portico`, or `/t-<n>-<random>/portico` on the shared
    /// server. Registries and gateways take it as `--zk-root`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Whether this is a tree on the shared server ([`ZooKeeper::on_shared`]).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    #[track_caller]
    fn assert_own(&self, what: &str) {
        assert!(
            !self.shared,
            "cannot {what} the shared ZooKeeper: a test that does starts its own (ZooKeeper::start)"
        );
    }

    /// Creates the locked skeleton of the tree at `root` (which must not exist yet; its
    /// missing ancestors are created open).
    pub fn lock_tree(&self, root: &str, creds: &ZkCredentials) {
        let root_acl = creds.root_acl();
        let nodes_acl = creds.nodes_acl();
        let mut commands = Vec::new();
        let mut ancestor = String::new();
        let segments: Vec<&str> = root.split('/').filter(|s| !s.is_empty()).collect();
        for segment in segments.iter().take(segments.len().saturating_sub(1)) {
            ancestor.push('/');
            ancestor.push_str(segment);
            commands.push(format!("create {ancestor} ''"));
        }
        let ancestors = commands.len();
        commands.extend([
            format!("create {root} '' {root_acl}"),
            format!("create {root}/nodes '' {nodes_acl}"),
            format!("create {root}/sandbox '' {root_acl}"),
            format!("create {root}/sandbox/nodes '' {nodes_acl}"),
        ]);
        let refs: Vec<&str> = commands.iter().map(String::as_str).collect();
        let out = zkcli_session(&self.connect_string(), Some(&creds.registry), &refs);
        assert!(
            out.stdout.matches("Created ").count() == 4 + ancestors,
            "cannot lock {root}: {out:?}"
        );
    }

    /// The credentials of a server made by [`ZooKeeper::start_locked`].
    pub fn credentials(&self) -> Option<&ZkCredentials> {
        self.credentials.as_ref()
    }

    /// `127.0.0.1:PORT`, for a client's connect string.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's private directory (`zoo.cfg`, `data/`, `zookeeper.out`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the server process is running (paused counts as running).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server gracefully (SIGTERM, then SIGKILL after 10 s) and waits for it to exit.
    /// The data directory is kept for [`ZooKeeper::restart`].
    pub fn stop(&mut self) {
        self.assert_own("stop");
        self.resume_if_paused();
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server at once (SIGKILL), as a crash would. The data directory is kept.
    pub fn kill(&mut self) {
        self.assert_own("kill");
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered, so client
    /// sessions time out. Use to force a session expiry: pause longer than the session timeout.
    pub fn pause(&mut self) {
        self.assert_own("pause");
        if let Some(pid) = self.pid() {
            signal(pid, "STOP");
            self.paused = true;
        }
    }

    /// Unfreezes a paused server (SIGCONT).
    pub fn resume(&mut self) {
        self.assert_own("resume");
        if let Some(pid) = self.pid() {
            signal(pid, "CONT");
        }
        self.paused = false;
    }

    /// Starts the server again on the same port and data directory (stopping it first if it
    /// runs), and returns once it accepts sessions. Sessions and data survive.
    pub fn restart(&mut self) {
        self.assert_own("restart");
        self.stop();
        self.spawn()
            .unwrap_or_else(|e| panic!("cannot restart ZooKeeper: {e}"));
    }

    /// Starts a stopped or killed server again (same port and data); no-op if it runs.
    pub fn start_again(&mut self) {
        self.assert_own("start again");
        if self.is_running() {
            return;
        }
        self.spawn()
            .unwrap_or_else(|e| panic!("cannot start ZooKeeper again: {e}"));
    }

    /// Blocks until a client session can be established, or `timeout` passes.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        wait_for(timeout, || session_handshake(addr).is_ok())
    }

    /// The server's console output so far (for failure messages).
    pub fn output(&self) -> String {
        if self.shared {
            return SHARED.get().map(ZooKeeper::output).unwrap_or_default();
        }
        std::fs::read_to_string(self.dir.path().join("zookeeper.out")).unwrap_or_default()
    }

    fn resume_if_paused(&mut self) {
        if self.paused {
            self.resume();
        }
    }

    fn write_config(&self) -> Result<(), String> {
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).map_err(|e| format!("create {}: {e}", data.display()))?;
        // tickTime 500 ms lets tests use short session timeouts (1 s .. 60 s).
        let cfg = format!(
            "tickTime=500\n\
             initLimit=10\n\
             syncLimit=5\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             minSessionTimeout=1000\n\
             maxSessionTimeout=60000\n\
             maxClientCnxns=0\n\
             4lw.commands.whitelist={FOUR_LETTER_WORDS}\n",
            data.display(),
            self.port
        );
        let path = self.dir.path().join("zoo.cfg");
        std::fs::write(&path, cfg).map_err(|e| format!("write {}: {e}", path.display()))
    }

    fn spawn(&mut self) -> Result<(), String> {
        let dir = self.dir.path().to_path_buf();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("zookeeper.out"))
            .map_err(|e| format!("open zookeeper.out: {e}"))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("clone zookeeper.out: {e}"))?;
        let mut cmd = if self.dies_with_parent {
            let mut c = Command::new("setpriv");
            c.args(["--pdeathsig", "KILL", "--"])
                .arg(zk_home().join("bin/zkServer.sh"));
            c
        } else {
            Command::new(zk_home().join("bin/zkServer.sh"))
        };
        zk_server_command(&mut cmd, &dir, 256);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn zkServer.sh: {e}"))?;
        self.child = Some(child);
        self.paused = false;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if session_handshake(addr).is_ok() {
                return Ok(());
            }
            if !self.is_running() {
                self.child = None;
                return Err(format!(
                    "ZooKeeper exited during start-up on port {}:\n{}",
                    self.port,
                    self.output()
                ));
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "ZooKeeper did not accept a session on port {} within {:?}:\n{}",
                    self.port,
                    START_TIMEOUT,
                    self.output()
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        if !self.shared {
            self.kill();
        }
    }
}

/// Removes the directories of shared servers whose process is gone.
fn remove_dead_shared_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(SHARED_DIR_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Opens a ZooKeeper session with a raw ConnectRequest and closes it again: proof that the
/// server is up and serving, not just listening.
fn session_handshake(addr: SocketAddr) -> std::io::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut req = Vec::with_capacity(49);
    req.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
    req.extend_from_slice(&0i64.to_be_bytes()); // lastZxidSeen
    req.extend_from_slice(&2000i32.to_be_bytes()); // timeOut (ms)
    req.extend_from_slice(&0i64.to_be_bytes()); // sessionId
    req.extend_from_slice(&16i32.to_be_bytes()); // passwd length
    req.extend_from_slice(&[0u8; 16]); // passwd
    req.push(0); // readOnly
    let mut framed = (req.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&req);
    stream.write_all(&framed)?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if !(16..=1024).contains(&len) {
        return Err(std::io::Error::other("bad ConnectResponse length"));
    }
    let mut resp = vec![0u8; len as usize];
    stream.read_exact(&mut resp)?;
    let timeout = i32::from_be_bytes([resp[4], resp[5], resp[6], resp[7]]);
    let mut sid = [0u8; 8];
    sid.copy_from_slice(&resp[8..16]);
    let session_id = i64::from_be_bytes(sid);
    if timeout <= 0 || session_id == 0 {
        return Err(std::io::Error::other("session refused"));
    }
    // closeSession: xid 1, type -11.
    let mut close = 8i32.to_be_bytes().to_vec();
    close.extend_from_slice(&1i32.to_be_bytes());
    close.extend_from_slice(&(-11i32).to_be_bytes());
    stream.write_all(&close)?;
    let mut reply = [0u8; 20];
    let _ = stream.read_exact(&mut reply);
    Ok(())
}

/// What a `zkCli.sh` run printed.
#[derive(Debug, Clone)]
pub struct ZkCliOutput {
    /// Whether zkCli exited with status 0 (a failed command, e.g. `get` of a missing node, is not).
    pub success: bool,
    /// Standard output without zkCli's own connection chatter.
    pub stdout: String,
    pub stderr: String,
}

impl ZkCliOutput {
    /// The last line of output: the data for a `get`.
    pub fn last_line(&self) -> &str {
        self.stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    }
}

/// Runs `zkCli.sh -server CONNECT ARGS...`, e.g. `zkcli(&zk.connect_string(), &["set",
/// "/portico/switches/order.get", r#"{"degraded":true}"#])`. Each argument is passed as is
/// (JSON with spaces needs no quoting).
pub fn zkcli(connect: &str, args: &[&str]) -> ZkCliOutput {
    let output = Command::new(zk_home().join("bin/zkCli.sh"))
        .arg("-server")
        .arg(connect)
        .args(args)
        .env("JMXDISABLE", "true")
        .env("CLIENT_JVMFLAGS", "-Xmx128m -XX:+UseSerialGC")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run zkCli.sh: {e}"));
    cli_output(output)
}

/// Runs one zkCli session: `addauth digest AUTH` first (if given), then each command in turn
/// (as typed at zkCli's prompt; quote an argument with spaces in `'...'`).
pub fn zkcli_session(connect: &str, auth: Option<&str>, commands: &[&str]) -> ZkCliOutput {
    let mut script = String::new();
    if let Some(auth) = auth {
        script.push_str(&format!("addauth digest {auth}\n"));
    }
    for c in commands {
        script.push_str(c);
        script.push('\n');
    }
    script.push_str("quit\n");
    let mut child = Command::new(zk_home().join("bin/zkCli.sh"))
        .arg("-server")
        .arg(connect)
        .env("JMXDISABLE", "true")
        .env("CLIENT_JVMFLAGS", "-Xmx128m -XX:+UseSerialGC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run zkCli.sh: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(script.as_bytes());
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("zkCli.sh: {e}"));
    let mut out = cli_output(output);
    // Fed from stdin, zkCli prints results and errors on stderr: keep them with stdout.
    for line in out.stderr.lines().filter(|l| !l.starts_with("SLF4J")) {
        out.stdout.push('\n');
        out.stdout.push_str(line);
    }
    out
}

/// Runs one zkCli command after `addauth digest AUTH` (e.g. the operator's credentials),
/// like [`zkcli`]. The command's failure (e.g. `Insufficient permission`) shows in `stdout`
/// and makes `success` false.
pub fn zkcli_as(connect: &str, auth: &str, args: &[&str]) -> ZkCliOutput {
    let line = args
        .iter()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                (*a).to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = zkcli_session(connect, Some(auth), &[&line]);
    let refused = [
        "Insufficient permission",
        "Authentication is not valid",
        "Node does not exist",
        "Node already exists",
        "KeeperErrorCode",
    ];
    if refused
        .iter()
        .any(|r| out.stdout.contains(r) || out.stderr.contains(r))
    {
        out.success = false;
    }
    out
}

fn cli_output(output: std::process::Output) -> ZkCliOutput {
    let stdout = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| {
            !(l.starts_with("Connecting to ")
                || l.starts_with("WATCHER::")
                || l.starts_with("WatchedEvent state:"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    ZkCliOutput {
        success: output.status.success(),
        stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A three-server ZooKeeper ensemble on 127.0.0.1 (each server with its own port, data
/// directory and quorum ports), for tests that lose a server. Killed on drop.
pub struct ZkEnsemble {
    dirs: Vec<tempfile::TempDir>,
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
}

impl ZkEnsemble {
    /// Starts three servers and waits until every one of them serves (a quorum, a leader).
    pub fn start() -> ZkEnsemble {
        let script = zk_home().join("bin/zkServer.sh");
        assert!(
            script.exists(),
            "{} is missing: apt-get install -y zookeeper",
            script.display()
        );
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let servers: String = (1..=3)
            .map(|n| format!("server.{n}=127.0.0.1:{}:{}\n", free_port(), free_port()))
            .collect();
        let mut ens = ZkEnsemble {
            dirs: Vec::new(),
            ports: ports.clone(),
            children: Vec::new(),
        };
        for (i, port) in ports.iter().enumerate() {
            let dir = tempfile::Builder::new()
                .prefix("portico-zk-ens-")
                .tempdir()
                .expect("temporary directory");
            let data = dir.path().join("data");
            std::fs::create_dir_all(&data).expect("data dir");
            std::fs::write(data.join("myid"), format!("{}\n", i + 1)).expect("myid");
            let cfg = ensemble_member_config(&data, "127.0.0.1", *port, &servers);
            std::fs::write(dir.path().join("zoo.cfg"), cfg).expect("zoo.cfg");
            ens.dirs.push(dir);
            ens.children.push(None);
            ens.spawn(i);
        }
        assert!(
            wait_for(START_TIMEOUT, || (0..3).all(|i| ens.mode(i).is_some())),
            "the ensemble did not reach a quorum"
        );
        ens
    }

    fn spawn(&mut self, i: usize) {
        let dir = self.dirs[i].path().to_path_buf();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("zookeeper.out"))
            .expect("zookeeper.out");
        let err = out.try_clone().expect("zookeeper.out");
        let mut cmd = Command::new(zk_home().join("bin/zkServer.sh"));
        zk_server_command(&mut cmd, &dir, 128);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn zkServer.sh");
        self.children[i] = Some(child);
    }

    /// `host:port,host:port,host:port`.
    pub fn connect_string(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Server `i`'s role (`leader`, `follower`) from `srvr`, `None` while it does not serve.
    pub fn mode(&self, i: usize) -> Option<String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.ports[i]));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(b"srvr").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_owned())
    }

    /// The index of the current leader, if there is one.
    pub fn leader(&self) -> Option<usize> {
        (0..3).find(|&i| self.children[i].is_some() && self.mode(i).as_deref() == Some("leader"))
    }

    /// Kills server `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// A real Redis server (Debian's `redis-server`, or `PORTICO_REDIS_SERVER`) on a free
/// loopback port, without persistence, stopped when dropped.
pub struct Redis {
    port: u16,
    child: Option<Child>,
    _dir: tempfile::TempDir,
    /// The `default` user's password (`requirepass`, written to a 0600 config file, never on
    /// the server's command line), if any.
    password: Option<String>,
    /// For a TLS-only server: the directory holding `cert.pem`, `key.pem` and `ca.pem`.
    tls: Option<PathBuf>,
}

impl Redis {
    /// Starts a server and waits until it answers `PING` (panics if it does not within
    /// [`START_TIMEOUT`]).
    pub fn start() -> Redis {
        Redis::start_with(None)
    }

    /// Starts a server whose `default` user needs `password` (`requirepass`).
    pub fn start_with_password(password: &str) -> Redis {
        Redis::start_with(Some(password.to_owned()))
    }

    /// Starts a server that speaks TLS only (`rediss://`, clients not asked for certificates)
    /// with the certificate, key and CA of `cert_dir` (`cert.pem`, `key.pem`, `ca.pem`), whose
    /// `default` user needs `password`; waits until it accepts connections. [`Redis::command`]
    /// and [`Redis::ping`] speak plain text, so they do not work on it.
    pub fn start_tls(cert_dir: &Path, password: &str) -> Redis {
        Redis::start_inner(Some(password.to_owned()), Some(cert_dir.to_path_buf()))
    }

    fn start_with(password: Option<String>) -> Redis {
        Redis::start_inner(password, None)
    }

    fn start_inner(password: Option<String>, tls: Option<PathBuf>) -> Redis {
        let dir = tempfile::tempdir().expect("temporary directory for redis");
        let mut redis = Redis {
            port: free_port(),
            child: None,
            _dir: dir,
            password,
            tls,
        };
        redis.start_again();
        redis
    }

    /// The password, if the server has one.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Writes the password to a new file of mode 0600 under the server's directory (for
    /// `--redis-password-file`); panics without a password.
    pub fn password_file(&self) -> std::path::PathBuf {
        use std::os::unix::fs::OpenOptionsExt;
        let password = self
            .password
            .as_deref()
            .expect("a Redis without a password");
        let path = self._dir.path().join(format!("password-{}", free_port()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("writing the Redis password file");
        f.write_all(password.as_bytes())
            .expect("writing the Redis password file");
        path
    }

    /// Starts the server again on the same port (after [`Redis::kill`]).
    pub fn start_again(&mut self) {
        let bin = std::env::var("PORTICO_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut cmd = Command::new(&bin);
        if self.password.is_some() || self.tls.is_some() {
            // The password goes in a config file (0600), not on the command line.
            use std::os::unix::fs::OpenOptionsExt;
            let conf = self._dir.path().join("redis.conf");
            let _ = std::fs::remove_file(&conf);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&conf)
                .expect("writing redis.conf");
            if let Some(password) = &self.password {
                writeln!(f, "requirepass \"{password}\"").expect("writing redis.conf");
            }
            if let Some(d) = &self.tls {
                let d = d.display();
                writeln!(
                    f,
                    "tls-cert-file {d}/cert.pem\ntls-key-file {d}/key.pem\n\
                     tls-ca-cert-file {d}/ca.pem\ntls-auth-clients no"
                )
                .expect("writing redis.conf");
            }
            cmd.arg(&conf);
        }
        // A TLS server listens on its TLS port only.
        let (plain, tls) = match self.tls {
            Some(_) => ("0".to_owned(), Some(self.port.to_string())),
            None => (self.port.to_string(), None),
        };
        cmd.args(["--port", &plain]);
        if let Some(tls) = &tls {
            cmd.args(["--tls-port", tls]);
        }
        let child = cmd
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self._dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin} (apt-get install redis-server): {e}"));
        self.child = Some(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        assert!(
            wait_for(START_TIMEOUT, || if self.tls.is_some() {
                TcpStream::connect(addr).is_ok()
            } else {
                self.ping()
            }),
            "redis-server on port {} did not answer",
            self.port
        );
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server answers `PING` with `+PONG` (authenticating first when it has a
    /// password).
    pub fn ping(&self) -> bool {
        self.command("PING\r\n")
            .is_some_and(|r| r.starts_with("+PONG"))
    }

    /// Sends one inline command (after `AUTH` when the server has a password) and returns
    /// the first reply read (for tests' checks).
    pub fn command(&self, line: &str) -> Option<String> {
        self.command_as(self.password.as_deref(), line)
    }

    /// Sends one inline command after `AUTH password` when given, without it else.
    pub fn command_as(&self, password: Option<&str>, line: &str) -> Option<String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut buf = [0u8; 4096];
        if let Some(p) = password {
            s.write_all(&resp(&["AUTH", p])).ok()?;
            let n = s.read(&mut buf).ok()?;
            if !buf[..n].starts_with(b"+OK") {
                return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        s.write_all(line.as_bytes()).ok()?;
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Sends one command given as its arguments (RESP, so any bytes), with `AUTH` first when
    /// the server has a password; the first reply read.
    pub fn command_args(&self, args: &[&str]) -> Option<String> {
        self.command_as(
            self.password.as_deref(),
            &String::from_utf8_lossy(&resp(args)),
        )
    }

    /// Kills the server (SIGKILL) and waits for it to end.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `args` as a RESP array of bulk strings.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The calls that change the whole test process (the patterns are split so that a scan of
/// this file would not find itself): an environment variable, the current directory, the
/// process-wide rustls provider, a signal handler.
fn process_wide_calls() -> Vec<String> {
    vec![
        ["set", "_var("].concat(),
        ["remove", "_var("].concat(),
        ["set_current", "_dir("].concat(),
        ["install", "_default("].concat(),
        ["signal_hook", "::"].concat(),
        ["libc::", "signal("].concat(),
        ["libc::", "sigaction("].concat(),
    ]
}

/// The rule of a crate's one integration-test binary (`tests/it/main.rs`; docs/operations/
/// ops-scripts.md, "Test lanes"): all its modules run in one process, in parallel, so none
/// may change process-wide state. Reads every `.rs` file under `<manifest_dir>/tests/it` and
/// panics naming each line that calls one of [`process_wide_calls`] or of `extra` (a crate's
/// own process-wide settings), or if fewer than `min_files` files were read.
pub fn assert_no_process_wide_state(manifest_dir: &str, extra: &[String], min_files: usize) {
    let forbidden: Vec<String> = process_wide_calls()
        .into_iter()
        .chain(extra.iter().cloned())
        .collect();
    let root = Path::new(manifest_dir).join("tests/it");
    let mut dirs = vec![root.clone()];
    let (mut read, mut found) = (0, Vec::new());
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            read += 1;
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            for (no, line) in text.lines().enumerate() {
                for f in forbidden.iter().filter(|f| line.contains(f.as_str())) {
                    let rel = path.strip_prefix(&root).unwrap_or(&path).display();
                    found.push(format!("it/{rel}:{}: {f}", no + 1));
                }
            }
        }
    }
    assert!(
        read >= min_files,
        "only {read} files read under {}",
        root.display()
    );
    assert!(
        found.is_empty(),
        "process-wide state changed by a test module (all modules share one process):\n{}",
        found.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_repeated() {
        let start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(32768);
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port handed out twice");
        if start > 11_000 {
            assert!(
                ports.iter().all(|p| *p < start),
                "{ports:?} (ephemeral from {start})"
            );
        }
        // Each is free: a server can bind it.
        for p in ports.iter().take(20) {
            TcpListener::bind(("127.0.0.1", *p)).unwrap();
        }
    }

    #[test]
    fn start_zkcli_pause_restart() {
        let mut zk = ZooKeeper::start();
        let connect = zk.connect_string();
        let out = zkcli(&connect, &["create", "/t", r#"{"a": 1}"#]);
        assert!(out.success, "{out:?}");
        let out = zkcli(&connect, &["get", "/t"]);
        assert!(out.success, "{out:?}");
        assert_eq!(out.last_line(), r#"{"a": 1}"#);
        assert!(!zkcli(&connect, &["get", "/missing"]).success);

        zk.pause();
        assert!(session_handshake(SocketAddr::from(([127, 0, 0, 1], zk.port()))).is_err());
        zk.resume();
        assert!(zk.wait_ready(Duration::from_secs(10)));

        let port = zk.port();
        zk.restart();
        assert_eq!(zk.port(), port);
        assert_eq!(zkcli(&connect, &["get", "/t"]).last_line(), r#"{"a": 1}"#);

        zk.kill();
        assert!(!zk.is_running());
        zk.start_again();
        assert!(zk.is_running());
    }

    #[test]
    fn locked_tree_refuses_the_world() {
        // ZooKeeper's documented example digest.
        assert_eq!(
            digest_id("super:test"),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        let zk = ZooKeeper::start_locked();
        let creds = zk.credentials().unwrap();
        let connect = zk.connect_string();
        let out = zkcli(&connect, &["create", "/portico/apps", ""]);
        assert!(
            format!("{}{}", out.stdout, out.stderr).contains("Insufficient permission"),
            "{out:?}"
        );
        let out = zkcli_as(&connect, &creds.registry, &["create", "/portico/apps", ""]);
        assert!(out.success, "{out:?}");
        let out = zkcli_as(&connect, &creds.operator, &["getAcl", "/portico"]);
        assert!(
            out.success && out.stdout.contains("portico-gateway"),
            "{out:?}"
        );
        let out = zkcli_as(&connect, &creds.gateway, &["create", "/portico/apis", ""]);
        assert!(!out.success, "{out:?}");
    }
}
