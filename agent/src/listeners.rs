//! The agent's listeners by name, so that a port that cannot be bound is reported as *which*
//! listener of *which* agent failed, who holds the port when that can be found, and the flag
//! that moves it. Several agents on one host (the README's cluster, the demo, tests) is the
//! common case where this happens, and "address in use" alone sends the operator the wrong way.

use std::net::SocketAddr;

/// One of the agent's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The TLS node port (peers and operators).
    NodePort,
    /// The FleetLock endpoint for Zincati.
    FleetLock,
    /// /metrics, /healthz, /readyz and the status page.
    Metrics,
}

impl Listener {
    /// What an operator calls it.
    pub fn label(self) -> &'static str {
        match self {
            Listener::NodePort => "node port",
            Listener::FleetLock => "FleetLock listener",
            Listener::Metrics => "metrics listener",
        }
    }

    /// The flag that moves it.
    pub fn flag(self) -> &'static str {
        match self {
            Listener::NodePort => "--listen/--advertise",
            Listener::FleetLock => "--fleetlock-listen ADDR (or off)",
            Listener::Metrics => "--metrics-listen ADDR (or off)",
        }
    }
}

/// The message for `listener` of agent `agent` failing to bind `addr`.
pub fn bind_failure(
    agent: &str,
    listener: Listener,
    addr: SocketAddr,
    e: &std::io::Error,
) -> String {
    let holder = if e.kind() == std::io::ErrorKind::AddrInUse {
        match port_holder(addr.port()) {
            Some(holder) => format!("; port {} is held by {holder}", addr.port()),
            None => format!(
                "; another process listens on port {} (`ss -ltnp 'sport = :{}'` shows which)",
                addr.port(),
                addr.port()
            ),
        }
    } else {
        String::new()
    };
    format!(
        "agent {agent}: cannot open its {} on {addr} ({e}{holder}); choose another with {}",
        listener.label(),
        listener.flag()
    )
}

/// The process (pid and command line) listening on TCP `port`, found through /proc; `None`
/// when it cannot be told (another user's process, not Linux). Best effort: it only makes a
/// message better.
fn port_holder(port: u16) -> Option<String> {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return None;
    }
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|target| {
                    let target = target.to_string_lossy().into_owned();
                    target
                        .strip_prefix("socket:[")
                        .and_then(|s| s.strip_suffix(']'))
                        .map(str::to_owned)
                })
                .is_some_and(|inode| inodes.contains(&inode))
        });
        if holds {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let words: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            return Some(format!("pid {pid} (`{}`)", words.join(" ")));
        }
    }
    None
}

/// The socket inodes of TCP sockets listening on `port` (state 0A in /proc/net/tcp{,6}).
fn listening_inodes(port: u16) -> Vec<String> {
    let wanted = format!("{port:04X}");
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state == "0A" && local.rsplit(':').next() == Some(wanted.as_str()) {
                inodes.push((*inode).to_string());
            }
        }
    }
    inodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_names_the_listener_the_flag_and_the_holder() {
        // A holder in another process, so the lookup (which skips this process) can find it.
        let mut holder = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket,sys,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\n\
                 print(s.getsockname()[1],flush=True)\ntime.sleep(60)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.as_mut().expect("stdout")),
            &mut line,
        )
        .expect("port");
        let port: u16 = line.trim().parse().expect("a port number");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let e = std::net::TcpListener::bind(addr).expect_err("the port is taken");
        let message = bind_failure("n2", Listener::FleetLock, addr, &e);
        let _ = holder.kill();
        let _ = holder.wait();
        assert!(
            message.starts_with("agent n2: cannot open its FleetLock listener"),
            "{message}"
        );
        assert!(message.contains("--fleetlock-listen"), "{message}");
        assert!(
            message.contains(&format!("pid {}", holder.id())),
            "{message}"
        );
        assert!(message.contains("python3"), "{message}");
    }
}
