//! systemd's notify protocol (`Type=notify`, sd_notify(3)), spoken directly: datagrams such as
//! `READY=1` or `STATUS=…` to the socket named by `$NOTIFY_SOCKET` (a path, or `@name` in the
//! abstract namespace). Without that variable (not under systemd) every call does nothing.
//!
//! The agent says `STATUS=` at each step of its start (formation progress), `READY=1` once it
//! has the cluster's log and sees a leader with a quorum (`observe::health`), and, when the
//! unit sets `WatchdogSec=`, `WATCHDOG=1` at half that interval for as long as its runtime
//! turns: a wedged agent is restarted by systemd.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::agent::Group;
use crate::observe::health::{ReadyInput, readiness};
use crate::state::NodeId;

/// How often readiness is looked at.
const TICK: Duration = Duration::from_millis(250);

/// Where the notifications go.
pub struct Notifier {
    target: String,
}

impl Notifier {
    /// The socket systemd gave this process, if any.
    pub fn from_env() -> Option<Self> {
        let target = std::env::var("NOTIFY_SOCKET").ok()?;
        (!target.is_empty()).then_some(Self { target })
    }

    /// Sends one datagram; a failure is logged once at debug level and otherwise ignored
    /// (systemd not listening must never stop the agent).
    pub fn send(&self, message: &str) {
        let sent = UnixDatagram::unbound().and_then(|socket| {
            if let Some(name) = self.target.strip_prefix('@') {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                socket.send_to_addr(message.as_bytes(), &addr)
            } else {
                socket.send_to(message.as_bytes(), &self.target)
            }
        });
        if let Err(e) = sent {
            tracing::debug!(socket = %self.target, error = %e, "systemd notification not sent");
        }
    }
}

/// `STATUS=text` (a step of the start, for `systemctl status`).
pub fn status(text: &str) {
    if let Some(n) = Notifier::from_env() {
        n.send(&format!("STATUS={}", one_line(text)));
    }
}

/// `STOPPING=1`, as the agent begins to shut down.
pub fn stopping() {
    if let Some(n) = Notifier::from_env() {
        n.send("STOPPING=1");
    }
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// The watchdog interval systemd asks for, halved (ping twice per interval), if it is meant
/// for this process.
fn watchdog_every() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Runs for the node's life: READY=1 once, STATUS= on every change, WATCHDOG=1 when asked.
pub async fn readiness_loop(group: &Group, me: NodeId) {
    let Some(notifier) = Notifier::from_env() else {
        return;
    };
    let watchdog = watchdog_every();
    let mut ready_sent = false;
    let mut last_status = String::new();
    let mut last_ping: Option<Instant> = None;
    loop {
        let decided = readiness(&ReadyInput::of(group, me));
        let mut message = String::new();
        if decided.is_ok() && !ready_sent {
            message.push_str("READY=1\n");
            ready_sent = true;
        }
        let text = match decided {
            Ok(text) => one_line(&text),
            Err(e) => one_line(&e.message),
        };
        if text != last_status {
            message.push_str(&format!("STATUS={text}\n"));
            last_status = text;
        }
        if let Some(every) = watchdog
            && last_ping.is_none_or(|at| at.elapsed() >= every)
        {
            message.push_str("WATCHDOG=1\n");
            last_ping = Some(Instant::now());
        }
        if !message.is_empty() {
            notifier.send(&message);
        }
        let pause = watchdog.map_or(TICK, |every| every.min(TICK));
        tokio::time::sleep(pause).await;
    }
}
