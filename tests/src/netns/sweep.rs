//! Removing what crashed test processes left behind.

use std::path::Path;

use anyhow::Result;

use super::{Lab, PREFIX, ip, run};

impl Lab {
    /// Removes namespaces and gateway links left by test processes that are no longer alive
    /// (crashed or killed before their labs' `Drop` ran). Touches only names of this module's
    /// exact format whose embedded pid does not exist. Returns how many it removed.
    pub fn sweep_stale() -> Result<usize> {
        let mut removed = 0;
        for line in run("ip", &["netns", "list"])?.lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if let Some((pid, Kind::Ns)) = owner(name)
                && !pid_alive(pid)
            {
                kill_all_in(name);
                match ip(&["netns", "del", name]) {
                    Ok(_) => removed += 1,
                    Err(e) => eprintln!("netns: cannot remove stale {name}: {e:#}"),
                }
            }
        }
        for line in run("ip", &["-o", "link", "show"])?.lines() {
            let name = line.split(": ").nth(1).unwrap_or("");
            let name = name.split('@').next().unwrap_or("");
            if let Some((pid, Kind::Link)) = owner(name)
                && !pid_alive(pid)
            {
                match ip(&["link", "del", name]) {
                    Ok(_) => removed += 1,
                    Err(e) => eprintln!("netns: cannot remove stale link {name}: {e:#}"),
                }
            }
        }
        Ok(removed)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Ns,
    Link,
}

/// The pid embedded in a name this module makes (`mst<pid>-<k>-br`, `mst<pid>-<k>-h<i>`,
/// `mst<pid>-<k>g`), and what it names; `None` for any other name.
pub(super) fn owner(name: &str) -> Option<(u32, Kind)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (pid, rest) = name.strip_prefix(PREFIX)?.split_once('-')?;
    if !digits(pid) {
        return None;
    }
    let kind = if let Some(k) = rest.strip_suffix('g') {
        digits(k).then_some(Kind::Link)?
    } else {
        let (k, what) = rest.split_once('-')?;
        let host = what.strip_prefix('h').is_some_and(digits);
        (digits(k) && (what == "br" || host)).then_some(Kind::Ns)?
    };
    Some((pid.parse().ok()?, kind))
}

pub(super) fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// SIGKILLs every process in namespace `ns` (best effort).
pub(super) fn kill_all_in(ns: &str) {
    let Ok(pids) = ip(&["netns", "pids", ns]) else {
        return;
    };
    for pid in pids.split_whitespace() {
        let _ = run("kill", &["-KILL", pid]);
    }
}
