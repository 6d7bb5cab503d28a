//! Server CPU time from /proc: user + system time of a set of processes, so that a workload's
//! cost can be told per operation whatever the load generator spends.

use std::time::Instant;

/// CPU time of some processes at one instant.
pub struct Sample {
    pids: Vec<u32>,
    ticks: u64,
    _at: Instant,
}

impl Sample {
    pub fn take(pids: &[u32]) -> Self {
        Sample {
            pids: pids.to_vec(),
            ticks: pids.iter().map(|p| ticks(*p)).sum(),
            _at: Instant::now(),
        }
    }

    /// Microseconds of CPU the processes used since the sample.
    pub fn elapsed_us(&self) -> f64 {
        let now: u64 = self.pids.iter().map(|p| ticks(*p)).sum();
        now.saturating_sub(self.ticks) as f64 * 1e6 / clock_ticks_per_sec()
    }
}

/// utime + stime of a process, in clock ticks (0 if it is gone).
fn ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // The command name (field 2) may hold spaces; the fields after its closing ')' do not.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line (utime, stime) are 12 and 13 after the ')'.
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(11) + get(12)
}

fn clock_ticks_per_sec() -> f64 {
    use std::sync::OnceLock;
    static HZ: OnceLock<f64> = OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = Sample::take(&[std::process::id()]);
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(s.elapsed_us() >= 0.0);
        assert!(ticks(std::process::id()) > 0 || x > 0);
    }
}
