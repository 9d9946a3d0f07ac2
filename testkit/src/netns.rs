//! Hosts on a private network for tests that cut links (docs/operations/cluster.md, "Running a cluster",
//! its "Losing a ZooKeeper server"): each "host" is a network namespace with one veth interface,
//! its peer plugged into a bridge that lives in a namespace of its own, so nothing of the lab
//! touches the machine's own network. Processes run on a host with `ip netns exec`; the test's own
//! threads join a host with [`NetLab::in_host`]. Everything (processes, namespaces, and with them
//! the links) is removed when the lab is dropped, even when the test fails.
//!
//! Needs root and `ip netns` (Debian's `iproute2`): [`NetLab::unavailable`] says why not.

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};

/// A bridge namespace and hosts attached to it, each with an address in `10.213.0.0/24`.
pub struct NetLab {
    prefix: String,
    hosts: Vec<(String, Ipv4Addr)>,
    children: Vec<Child>,
}

/// Why this machine cannot run a [`NetLab`] (not root, no `ip netns`), or `None` if it can.
pub fn unavailable() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_default();
    if uid != "0" {
        return Some(format!("not root (effective uid {uid})"));
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("`ip` not found ({e}): apt-get install iproute2")),
    }
}

/// Runs `ip ARGS`, panicking with its error output when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Whether a process with this pid exists.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl NetLab {
    /// Creates the bridge namespace; hosts are added with [`NetLab::host`]. Namespaces left
    /// behind by earlier runs that were killed (their test process is gone) are removed first.
    pub fn new() -> NetLab {
        Self::sweep();
        let prefix = format!("ptc{}", std::process::id());
        let lab = NetLab {
            prefix,
            hosts: Vec::new(),
            children: Vec::new(),
        };
        let sw = lab.switch();
        ip(&["netns", "add", &sw]);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &sw, "link", "set", "br0", "up"]);
        ip(&["-n", &sw, "link", "set", "lo", "up"]);
        lab
    }

    /// Removes `ptc<pid>-*` namespaces whose test process no longer runs.
    fn sweep() {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            let pid = name
                .strip_prefix("ptc")
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid {
                if !alive(pid) {
                    let _ = Command::new("ip").args(["netns", "del", name]).status();
                }
            }
        }
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    /// The namespace of host `name`.
    pub fn netns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// Adds host `name` (up to 12 characters) with address `10.213.0.<octet>/24` on its
    /// `eth0`, plugged into the bridge by the port named `name`; returns its address.
    pub fn host(&mut self, name: &str, octet: u8) -> Ipv4Addr {
        assert!(name.len() <= 12, "host name {name} is too long for a link");
        let ns = self.netns(name);
        let sw = self.switch();
        let addr = Ipv4Addr::new(10, 213, 0, octet);
        ip(&["netns", "add", &ns]);
        self.hosts.push((name.to_owned(), addr));
        ip(&[
            "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", name, "netns", &sw,
        ]);
        ip(&["-n", &sw, "link", "set", name, "master", "br0", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        addr
    }

    /// Takes host `name`'s link down (its bridge port: the cable pulled at the switch).
    pub fn cut(&self, name: &str) {
        ip(&["-n", &self.switch(), "link", "set", name, "down"]);
    }

    /// Brings host `name`'s link up again.
    pub fn mend(&self, name: &str) {
        ip(&["-n", &self.switch(), "link", "set", name, "up"]);
    }

    /// A command that runs `program` on host `name` (`ip netns exec`, which execs it: the
    /// child's pid is the program's).
    pub fn command(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.netns(name)])
            .arg(program)
            .stdin(Stdio::null());
        cmd
    }

    /// Spawns `cmd` (from [`NetLab::command`]) and keeps it, to be killed with the lab.
    /// Returns its index for [`NetLab::kill`].
    pub fn spawn(&mut self, mut cmd: Command) -> usize {
        let child = cmd.spawn().expect("spawn on a lab host");
        self.children.push(child);
        self.children.len() - 1
    }

    /// The pid of child `i`.
    pub fn pid(&self, i: usize) -> u32 {
        self.children[i].id()
    }

    /// Kills child `i` (SIGKILL) and waits for it.
    pub fn kill(&mut self, i: usize) {
        let _ = self.children[i].kill();
        let _ = self.children[i].wait();
    }

    /// Runs `f` on a thread that has joined host `name`'s network namespace: the sockets it
    /// opens (and those of threads it starts, e.g. a blocking HTTP client's) are the host's.
    pub fn in_host<T: Send>(&self, name: &str, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.netns(name));
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {path}: {e}"));
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }
}

impl Default for NetLab {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting a namespace deletes its end of each veth pair, and with it the peer.
        for (name, _) in &self.hosts {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.netns(name)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch()])
            .status();
    }
}
