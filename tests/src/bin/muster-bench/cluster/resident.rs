//! Resident memory of a process, read from /proc.

/// Resident memory of one process, in MiB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resident {
    /// `VmRSS`: what the goal is about.
    pub rss: f64,
    /// `RssAnon`: the process's own memory. The rest of `VmRSS` is file-backed (mostly the
    /// binary's code), shared by every process of the same binary on a host and dependent on
    /// how much of the file the page cache holds, so it is shown apart.
    pub anon: f64,
}

pub(crate) fn resident_mib(pid: u32) -> Option<Resident> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Resident {
        rss: status_kib(&status, "VmRSS:")? / 1024.0,
        anon: status_kib(&status, "RssAnon:")? / 1024.0,
    })
}

/// A `Field:   1234 kB` line of /proc/<pid>/status.
pub(crate) fn status_kib(status: &str, field: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
