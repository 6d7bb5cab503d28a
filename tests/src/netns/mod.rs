//! A network lab for fault tests: real processes on separate network namespaces ("hosts")
//! joined by one switch, with faults (isolation, partitions) injected at the switch.
//!
//! # Topology
//!
//! ```text
//!   root namespace (the test)          bridge namespace  mst<pid>-<k>-br
//!   mst<pid>-<k>g 10.A.B.254/32 ──veth── gw ┐
//!                                           ├─ br0 ── p0 ──veth── eth0 10.A.B.1/24  mst<pid>-<k>-h0
//!                                           │  ├──── p1 ──veth── eth0 10.A.B.2/24  mst<pid>-<k>-h1
//!                                           │  └──── …
//!                            sink ──veth── sinkp   (where cut traffic goes)
//! ```
//!
//! * **The bridge lives in a namespace of its own**, not in the root namespace. With
//!   `br_netfilter` loaded and `net.bridge.bridge-nf-call-iptables=1` (both true on this
//!   machine), frames crossing a bridge traverse the iptables FORWARD chain of the bridge's
//!   namespace, and Docker sets that chain's policy to DROP in the root namespace: a root
//!   bridge would silently drop all lab traffic on any machine with Docker. A fresh namespace
//!   has empty tables (policy ACCEPT), so the lab works whatever the host's firewall says, and
//!   its switch never shows up in the host's `ip link`. The bridge namespace does no routing:
//!   it is a pure L2 switch.
//! * **The root namespace is on the switch too** (the "gateway", `10.A.B.254`), so the test
//!   process can reach every host directly and hosts can reach services the test runs in the
//!   root namespace (e.g. `muster-discovery` listening on [`Lab::gateway`]). Faults never cut
//!   the gateway: it is the test's management network. Gateway traffic does pass the root
//!   namespace's INPUT/OUTPUT chains (not FORWARD), which Docker leaves open.
//! * **Addresses**: every host namespace is private, so host addresses could repeat across labs
//!   without harm; only the gateway's route in the root namespace must be unique. A lab claims
//!   `10.A.B.0/24` (A in 200..=249) by adding that route with `ip route add`, which fails with
//!   EEXIST if any lab, in this or another test process, holds it: the route itself is the lock.
//!   The first candidate is `10.(200 + pid % 50).(k % 256).0/24` (k: this process's lab
//!   counter); on a clash, or if the machine already routes an overlapping prefix (checked with
//!   `ip route show match/root`), the next /24 is tried.
//! * **Names** embed the test process's pid and the lab counter (`mst<pid>-<k>-…`), so
//!   concurrent labs never collide and [`Lab::sweep_stale`] can tell a dead process's
//!   leftovers from a live one's. The only interface in the root namespace, `mst<pid>-<k>g`,
//!   stays within the kernel's 15-byte limit (pid ≤ 7 digits, k ≤ 999); interfaces inside
//!   the lab's own namespaces have short fixed names.
//!
//! # Faults
//!
//! [`Lab::isolate`], [`Lab::partition`] and [`Lab::heal`] act at the switch; see [`faults`] for
//! the mechanism and why it was chosen.
//!
//! Only IPv4 is used: hosts get no IPv6 link-local addresses (`addrgenmode none`), so nothing
//! can slip past an IPv4 filter.

mod avail;
mod cmd;
pub mod faults;
mod proc;
mod sweep;
#[cfg(test)]
mod tests;

use std::ffi::{OsStr, OsString};
use std::fs::OpenOptions;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

pub use cmd::{CMD_TIMEOUT, CmdOutput, run, run_output};
pub use faults::Cut;
use faults::Faults;
pub use proc::LabProc;
use sweep::kill_all_in;

/// Prefix of every name a lab creates outside its own namespaces.
const PREFIX: &str = "mst";
/// Labs made by this process so far.
static LABS: AtomicU32 = AtomicU32::new(0);
/// Leftovers of dead test processes are swept once per process, before its first lab.
static SWEEP: Once = Once::new();

/// `n` hosts on one switch; see the module documentation. Dropping it kills every process
/// still in its namespaces and removes the namespaces and the gateway link.
pub struct Lab {
    n: usize,
    tag: String,
    bridge_ns: String,
    hosts: Vec<String>,
    /// Namespaces actually created (for cleanup after a failed setup).
    created: Vec<String>,
    /// The root-namespace veth, once created.
    uplink: Option<String>,
    net: [u8; 2],
    faults: Mutex<Faults>,
}

impl Lab {
    /// Creates `n` (1..=250) hosts on a new switch.
    pub fn new(n: usize) -> Result<Self> {
        Self::available().map_err(|e| anyhow!("network namespaces unavailable: {e}"))?;
        if !(1..=250).contains(&n) {
            bail!("a lab has 1..=250 hosts, not {n}");
        }
        SWEEP.call_once(|| {
            if let Err(e) = Self::sweep_stale() {
                eprintln!("netns: sweeping stale labs failed: {e:#}");
            }
        });
        let k = LABS.fetch_add(1, Ordering::Relaxed);
        if k > 999 {
            bail!("more than 1000 labs in one process: interface names would exceed 15 bytes");
        }
        let tag = format!("{PREFIX}{}-{k}", std::process::id());
        let mut lab = Self {
            n,
            bridge_ns: format!("{tag}-br"),
            hosts: (0..n).map(|i| format!("{tag}-h{i}")).collect(),
            tag,
            created: Vec::new(),
            uplink: None,
            net: [0, 0],
            faults: Mutex::new(Faults::default()),
        };
        // On error, dropping `lab` removes whatever was made so far.
        lab.setup(k)
            .with_context(|| format!("setting up lab {}", lab.tag))?;
        Ok(lab)
    }

    fn setup(&mut self, k: u32) -> Result<()> {
        let br = self.bridge_ns.clone();
        self.add_ns(&br)?;
        ipn(&br, &["link", "add", "br0", "type", "bridge"])?;
        ipn(&br, &["link", "set", "br0", "up"])?;
        ipn(
            &br,
            &[
                "link", "add", "sink", "type", "veth", "peer", "name", "sinkp",
            ],
        )?;
        ipn(&br, &["link", "set", "sink", "up"])?;
        ipn(&br, &["link", "set", "sinkp", "up"])?;

        let uplink = format!("{}g", self.tag);
        ip(&[
            "link", "add", &uplink, "type", "veth", "peer", "name", "gw", "netns", &br,
        ])?;
        self.uplink = Some(uplink.clone());
        let _ = ip(&["link", "set", &uplink, "addrgenmode", "none"]);
        ipn(&br, &["link", "set", "gw", "master", "br0", "up"])?;
        ip(&["link", "set", &uplink, "up"])?;
        self.net = claim_subnet(&uplink, k)?;
        let gw = format!("{}/32", self.gateway());
        ip(&["addr", "add", &gw, "dev", &uplink])?;

        for i in 0..self.n {
            let host = self.hosts[i].clone();
            let port = format!("p{i}");
            self.add_ns(&host)?;
            ipn(
                &br,
                &[
                    "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &host,
                ],
            )?;
            ipn(&br, &["link", "set", &port, "master", "br0", "up"])?;
            ipn(&host, &["link", "set", "lo", "up"])?;
            // Best effort: a kernel without IPv6 has no link-local addresses to suppress.
            let _ = ipn(&host, &["link", "set", "eth0", "addrgenmode", "none"]);
            let addr = format!("{}/24", self.addr(i));
            ipn(&host, &["addr", "add", &addr, "dev", "eth0"])?;
            ipn(&host, &["link", "set", "eth0", "up"])?;
        }
        // veth carrier comes up asynchronously; wait until every host's link is up.
        let deadline = Instant::now() + Duration::from_secs(5);
        for host in &self.hosts {
            while !ipn(host, &["-o", "link", "show", "dev", "eth0"])?.contains("LOWER_UP") {
                if Instant::now() > deadline {
                    bail!("eth0 in {host} did not come up within 5s");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    fn add_ns(&mut self, name: &str) -> Result<()> {
        ip(&["netns", "add", name])?;
        self.created.push(name.to_string());
        Ok(())
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always `false`: a lab has at least one host.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The common prefix of this lab's names (`mst<pid>-<k>`).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Host `i`'s address (`10.A.B.(i+1)`). Panics if `i` is not a host of this lab.
    pub fn addr(&self, i: usize) -> IpAddr {
        IpAddr::V4(self.addr_v4(i))
    }

    fn addr_v4(&self, i: usize) -> Ipv4Addr {
        assert!(i < self.n, "host {i} of a {}-host lab", self.n);
        let [a, b] = self.net;
        Ipv4Addr::new(10, a, b, (i + 1) as u8)
    }

    /// The root namespace's address on the switch (`10.A.B.254`): where hosts reach services
    /// the test runs itself. Never cut by faults.
    pub fn gateway(&self) -> IpAddr {
        let [a, b] = self.net;
        IpAddr::V4(Ipv4Addr::new(10, a, b, 254))
    }

    /// Host `i`'s network namespace name (for `ip netns exec`, `ip -n`). Panics if `i` is not a
    /// host of this lab.
    pub fn ns(&self, i: usize) -> &str {
        &self.hosts[i]
    }

    /// The namespace holding the switch.
    pub fn bridge_ns(&self) -> &str {
        &self.bridge_ns
    }

    /// The gateway's interface in the root namespace.
    pub fn uplink(&self) -> Option<&str> {
        self.uplink.as_deref()
    }

    /// Starts `program args…` inside host `i` with `env` added to the test's environment
    /// (minus any `MUSTER_*` variables), stdin from /dev/null and stdout and stderr appended
    /// to `log`. Needs a tokio runtime.
    pub fn spawn<S: AsRef<OsStr>>(
        &self,
        i: usize,
        program: &Path,
        args: &[S],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Result<LabProc> {
        let ns = self.hosts.get(i).ok_or_else(|| anyhow!("no host {i}"))?;
        if program.components().count() > 1 && !program.exists() {
            bail!("{} not found", program.display());
        }
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = tokio::process::Command::new("ip");
        command.args(["netns", "exec", ns]).arg(program).args(args);
        crate::clear_muster_env(&mut command);
        let child = command
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} in {ns}", program.display()))?;
        LabProc::new(child, i, log)
    }

    /// Runs a short command inside host `i` to completion (killed after `timeout`).
    pub fn exec<S: AsRef<OsStr>>(
        &self,
        i: usize,
        program: &str,
        args: &[S],
        timeout: Duration,
    ) -> Result<CmdOutput> {
        let ns = self.hosts.get(i).ok_or_else(|| anyhow!("no host {i}"))?;
        let mut all: Vec<OsString> = vec!["netns".into(), "exec".into(), ns.into(), program.into()];
        all.extend(args.iter().map(|a| a.as_ref().to_os_string()));
        run_output("ip", &all, timeout)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.created {
            kill_all_in(ns);
        }
        if let Some(uplink) = self.uplink.take()
            && let Err(e) = ip(&["link", "del", &uplink])
        {
            eprintln!("netns: cleanup of {}: {e:#}", self.tag);
        }
        for ns in self.created.drain(..) {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("netns: cleanup of {}: {e:#}", self.tag);
            }
        }
    }
}

/// Claims a free `10.A.B.0/24` for the gateway route on `uplink`; see the module docs.
fn claim_subnet(uplink: &str, k: u32) -> Result<[u8; 2]> {
    const SPACE: u32 = 50 * 256;
    let first = (std::process::id() % 50) * 256 + k % 256;
    for t in 0..256 {
        let j = (first + t) % SPACE;
        let net = [200 + (j / 256) as u8, (j % 256) as u8];
        let prefix = format!("10.{}.{}.0/24", net[0], net[1]);
        let inside = ip(&["-4", "route", "show", "table", "all", "root", &prefix])?;
        let covering = ip(&["-4", "route", "show", "match", &prefix])?;
        if !inside.trim().is_empty() || covering.lines().any(|l| !l.starts_with("default")) {
            continue;
        }
        let out = run_output("ip", &["route", "add", &prefix, "dev", uplink], CMD_TIMEOUT)?;
        if out.success() {
            return Ok(net);
        }
        if !out.stderr.contains("File exists") {
            bail!("ip route add {prefix} dev {uplink}: {}", out.stderr.trim());
        }
    }
    bail!(
        "no free /24 among 256 candidates in 10.200.0.0-10.249.255.255: each is held by another \
         lab or overlaps a route of this machine (see `ip route show table all`)"
    )
}

fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

fn ipn(ns: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn tcn(ns: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("tc", &all)
}
