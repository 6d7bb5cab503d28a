//! Ports for processes that must know theirs before they start: below the kernel's ephemeral
//! range, never handed out twice by one test process.

/// The ports tests hand out when the process cannot be given a bound socket (`muster agent`
/// must know the port it advertises before it starts; so must etcd; Docker publishes a fixed
/// host port): from 20000 up to the start of the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), so that no outgoing connection is ever given one
/// of them between our check and the process's own bind.
fn port_range() -> (u16, u16) {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low >= 21_000 {
        (20_000, low)
    } else if low >= 2_048 {
        (1_024, low)
    } else {
        // Almost every port is ephemeral here: nothing below the range is left to use.
        (20_000, 30_000)
    }
}

/// A TCP port on 127.0.0.1 for a process that binds it itself. It comes from [`port_range`],
/// below the kernel's ephemeral ports; each test process starts at its own offset (derived from
/// its pid), never hands a port out twice, and checks by binding that nothing listens on it.
/// Where the process can bind port 0 and report its address (`muster-discovery --listen
/// 127.0.0.1:0`), use that instead.
pub fn free_port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    static RANGE: OnceLock<(u16, u16, u32)> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high, start) = *RANGE.get_or_init(|| {
        let (low, high) = port_range();
        let span = u32::from(high - low);
        // Spread the processes of parallel test runs over the range (Fibonacci hashing of the
        // pid), so that they rarely start near each other.
        let start = std::process::id().wrapping_mul(2_654_435_761) % span;
        (low, high, start)
    });
    let span = u32::from(high - low);
    for _ in 0..span {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = low + ((start + i) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port on 127.0.0.1 in {low}..{high}")
}

/// Whether ports `P1`…`P4` (as a doc's `700$i` or `1720$i`) are all free on 127.0.0.1.
fn block_free(prefix: u32) -> bool {
    (1..=4).all(|i| {
        u16::try_from(prefix * 10 + i)
            .is_ok_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
    })
}

/// A port prefix `P` whose ports `P1`…`P4` are free: `preferred` (a doc's own, e.g. 700 for
/// 7001–7004) when it is, else a block from [`free_port`]'s range, said on stderr (someone runs
/// the doc by hand beside the test).
pub fn free_port_block(preferred: u32) -> u32 {
    if block_free(preferred) {
        return preferred;
    }
    for _ in 0..200 {
        let prefix = u32::from(free_port()) / 10;
        if block_free(prefix) {
            eprintln!(
                "127.0.0.1:{preferred}1-{preferred}4 are taken here: using {prefix}1-{prefix}4 instead"
            );
            return prefix;
        }
    }
    panic!("no four free ports in a row on 127.0.0.1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_free_and_below_the_ephemeral_range() {
        let (low, high) = port_range();
        let ephemeral_low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(32768);
        if ephemeral_low >= 2_048 {
            assert!(high <= ephemeral_low, "{low}..{high} vs {ephemeral_low}");
        }
        let ports: Vec<u16> = (0..64).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            ports.len(),
            "a port was handed out twice: {ports:?}"
        );
        for port in &ports {
            assert!((low..high).contains(port), "{port} outside {low}..{high}");
        }
        // Each one can be bound right now (nothing else took it).
        let held: Vec<std::net::TcpListener> = ports
            .iter()
            .map(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).expect("free"))
            .collect();
        assert_eq!(held.len(), ports.len());
    }
}
