//! The namespace cluster (`scripts/cluster.sh`) from tests: hosts made of
//! Linux network namespaces on this machine, `mpirun` across them, and the
//! faults a network gives (a cut link, a stalled host, packet loss).
//!
//! The cluster needs root, so its tests run only when `RUDA_CLUSTER=1`
//! (which CI sets); without it they say so and pass. With it, a cluster
//! that cannot be made is a failure. One cluster exists at a time: [`Cluster::up`]
//! holds a process-wide lock until the value is dropped, which tears the
//! cluster down (a test's cleanup, not failure detection).
//!
//! # Example
//! ```no_run
//! use std::time::Duration;
//! use ruda_testkit::cluster::Cluster;
//! let Some(cluster) = Cluster::up(2) else { return }; // RUDA_CLUSTER unset
//! let out = cluster.mpirun(4, &[], "/bin/hostname", &[], Duration::from_secs(60));
//! assert!(out.status.success());
//! ```

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The variable that turns the cluster tests on.
pub const CLUSTER_ENV: &str = "RUDA_CLUSTER";

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// A running namespace cluster; dropping it tears it down.
pub struct Cluster {
    hosts: usize,
    _one: MutexGuard<'static, ()>,
}

/// The repository's `scripts/cluster.sh`.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/cluster.sh")
        .canonicalize()
        .expect("scripts/cluster.sh")
}

fn run(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .expect("run scripts/cluster.sh")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Cluster {
    /// Bring up `hosts` hosts (`ruda-h1` …), or `None` when `RUDA_CLUSTER`
    /// is not `1`.
    ///
    /// # Panics
    /// When `RUDA_CLUSTER=1` and the cluster cannot be made (not root, no
    /// network namespaces): the tests were asked for and cannot run.
    pub fn up(hosts: usize) -> Option<Cluster> {
        if std::env::var(CLUSTER_ENV).as_deref() != Ok("1") {
            eprintln!(
                "{CLUSTER_ENV} is not 1: the namespace cluster tests are not run (they need root; CI sets it)"
            );
            return None;
        }
        let one = ONE_CLUSTER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = run(&["up", &hosts.to_string()]);
        assert!(out.status.success(), "cluster up:\n{}", text(&out));
        Some(Cluster { hosts, _one: one })
    }

    /// The name of host `i` (from 1).
    pub fn host(&self, i: usize) -> String {
        assert!((1..=self.hosts).contains(&i), "host {i} of {}", self.hosts);
        format!("ruda-h{i}")
    }

    /// The `mpirun` command across the hosts (`n` ranks, 2 slots a host,
    /// filled in host order), with `env` exported to every rank, running
    /// `program args`, killed after `limit`.
    pub fn command(
        &self,
        n: usize,
        env: &[(&str, &str)],
        program: &str,
        args: &[&str],
        limit: Duration,
    ) -> Command {
        let mut c = Command::new("timeout");
        c.args(["-k", "5", &limit.as_secs().max(1).to_string(), "bash"])
            .arg(script())
            .args(["mpirun", "-n", &n.to_string()]);
        for (k, v) in env {
            c.args(["-x", &format!("{k}={v}")]);
        }
        c.arg(program).args(args);
        c
    }

    /// Run `program args` on `n` ranks across the hosts and wait for it.
    pub fn mpirun(
        &self,
        n: usize,
        env: &[(&str, &str)],
        program: &str,
        args: &[&str],
        limit: Duration,
    ) -> Output {
        self.command(n, env, program, args, limit)
            .output()
            .expect("start mpirun")
    }

    /// Start `program args` on `n` ranks across the hosts without waiting,
    /// its output piped.
    pub fn spawn(
        &self,
        n: usize,
        env: &[(&str, &str)],
        program: &str,
        args: &[&str],
        limit: Duration,
    ) -> Child {
        self.command(n, env, program, args, limit)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mpirun")
    }

    /// Cut (`false`) or restore (`true`) a host's link.
    pub fn link(&self, host: &str, up: bool) {
        self.ok(&["link", host, if up { "up" } else { "down" }]);
    }

    /// Stop every process of `host` for `ms` milliseconds.
    pub fn stall(&self, host: &str, ms: u64) {
        self.ok(&["stall", host, &ms.to_string()]);
    }

    /// Drop `pct` % of the packets `host` receives (0 clears).
    pub fn loss(&self, host: &str, pct: u32) {
        self.ok(&["loss", host, &pct.to_string()]);
    }

    /// How many packets `host`'s loss rule has dropped.
    pub fn dropped(&self, host: &str) -> u64 {
        let out = run(&["dropped", host]);
        assert!(out.status.success(), "cluster dropped:\n{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a packet count")
    }

    /// The processes on `host` whose command line contains `name`.
    pub fn pids(&self, host: &str, name: &str) -> Vec<u32> {
        let out = Command::new("ip")
            .args(["netns", "pids", host])
            .output()
            .expect("ip netns pids");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(name))
            })
            .collect()
    }

    fn ok(&self, args: &[&str]) {
        let out = run(args);
        assert!(
            out.status.success(),
            "cluster {}:\n{}",
            args.join(" "),
            text(&out)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let out = run(&["down"]);
        if !out.status.success() {
            eprintln!("cluster down:\n{}", text(&out));
        }
    }
}
