//! Whether labs can be made on this machine.

use std::path::Path;

use anyhow::{Result, bail};

use super::{CMD_TIMEOUT, Lab, run_output};

impl Lab {
    /// Why labs cannot be made here, if they cannot: not root (CAP_NET_ADMIN and
    /// CAP_SYS_ADMIN are needed to create namespaces and links), no network namespace
    /// support, or no iproute2 (`ip`, `tc`).
    pub fn available() -> Result<(), String> {
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or("")
        };
        let euid = field("Uid:").split_whitespace().nth(1).unwrap_or("?");
        let caps = u64::from_str_radix(field("CapEff:"), 16).unwrap_or(0);
        const CAP_NET_ADMIN: u64 = 1 << 12;
        const CAP_SYS_ADMIN: u64 = 1 << 21;
        if caps & (CAP_NET_ADMIN | CAP_SYS_ADMIN) != CAP_NET_ADMIN | CAP_SYS_ADMIN {
            return Err(if euid == "0" {
                "running as root but without CAP_NET_ADMIN and CAP_SYS_ADMIN (an unprivileged \
                 container?): run the tests on the host or in a privileged container"
                    .to_string()
            } else {
                format!("network namespaces need root; these tests run as uid {euid}")
            });
        }
        if !Path::new("/proc/self/ns/net").exists() {
            return Err("the kernel has no network namespace support (CONFIG_NET_NS)".into());
        }
        for tool in ["ip", "tc"] {
            match run_output(tool, &["-V"], CMD_TIMEOUT) {
                Ok(out) if out.success() => {}
                Ok(out) => return Err(format!("`{tool} -V` failed: {}", out.stderr.trim())),
                Err(e) => {
                    return Err(format!(
                        "iproute2's `{tool}` is not usable ({e:#}): apt-get install -y iproute2"
                    ));
                }
            }
        }
        Ok(())
    }

    /// For a test about to use a lab: `Ok(true)` if labs work here. If they do not, the test
    /// must fail with the reason (`Err`) — unless `MUSTER_ALLOW_SKIP` contains `netns`, in which
    /// case a loud notice is printed and `Ok(false)` tells the test to return early.
    pub fn require(test: &str) -> Result<bool> {
        let Err(why) = Self::available() else {
            return Ok(true);
        };
        if std::env::var("MUSTER_ALLOW_SKIP").is_ok_and(|v| v.contains("netns")) {
            eprintln!("\n*** {test}: SKIPPED — {why} (MUSTER_ALLOW_SKIP contains netns) ***\n");
            return Ok(false);
        }
        bail!("{test} needs network namespaces: {why} (set MUSTER_ALLOW_SKIP=netns to skip)")
    }
}
