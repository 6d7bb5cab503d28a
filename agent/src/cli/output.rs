//! What the operator commands print.

use std::io::Write;

use crate::api::types::Status;

/// Writes one line to stdout. A closed pipe (`muster status | head -1`) ends the program quietly
/// instead of panicking the way `println!` does.
pub fn out(line: std::fmt::Arguments<'_>) {
    if let Err(e) = writeln!(std::io::stdout().lock(), "{line}")
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// `println!` for operator output; see [`out`].
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::output::out(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::out(format_args!($($arg)*))
    };
}

pub fn print_status(s: &Status) {
    crate::outln!("cluster   {}", s.cluster_id);
    crate::outln!("self      {}", s.self_name);
    crate::outln!("leader    {}", s.leader.as_deref().unwrap_or("(none)"));
    crate::outln!("term      {}", s.term);
    crate::outln!("commit    {}", s.commit_index);
    crate::outln!();
    print_members(s);
}

pub fn print_members(s: &Status) {
    crate::outln!(
        "{:<16} {:<17} {:<22} {:<9} {:<10} {:>10} {:>8}",
        "NAME",
        "ID",
        "ADDRESS",
        "SUFFRAGE",
        "REACHABLE",
        "LAST SEEN",
        "MATCH"
    );
    for m in &s.members {
        let leader = if s.leader.as_deref() == Some(m.name.as_str()) {
            "*"
        } else {
            ""
        };
        crate::outln!(
            "{:<16} {:<17} {:<22} {:<9} {:<10} {:>10} {:>8}",
            format!("{}{leader}", m.name),
            m.id,
            m.address,
            m.suffrage,
            m.reachable
                .map(|r| if r { "yes" } else { "NO" })
                .unwrap_or("-"),
            m.last_seen_ms
                .map(|ms| format!("{ms}ms"))
                .unwrap_or_else(|| "-".into()),
            m.match_index
                .map(|i| i.to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
}

/// "in 23h 59m" / "5m ago" for a moment given in milliseconds since the Unix epoch.
fn relative(ms: u64, now: u64) -> String {
    let secs =
        |d: u64| muster_shared::duration::format_duration(std::time::Duration::from_secs(d / 1000));
    if ms >= now {
        format!("in {}", secs(ms - now))
    } else {
        format!("{} ago", secs(now - ms))
    }
}

pub fn print_join_tokens(list: &[crate::api::types::JoinTokenInfo]) {
    let now = crate::clock::now_ms();
    crate::outln!(
        "{:<16} {:<9} {:<9} {:<18} {:<18} {:<14} DESCRIPTION",
        "ID",
        "STATE",
        "USES",
        "CREATED",
        "EXPIRES",
        "LAST USED BY"
    );
    for t in list {
        crate::outln!(
            "{:<16} {:<9} {:<9} {:<18} {:<18} {:<14} {}",
            t.id,
            t.state,
            format!("{}/{}", t.uses_total - t.uses_left, t.uses_total),
            relative(t.created_ms, now),
            relative(t.expires_ms, now),
            t.last_used_by.as_deref().unwrap_or("-"),
            t.description
        );
    }
}

pub fn print_operator_tokens(list: &[crate::api::types::OperatorTokenInfo]) {
    let now = crate::clock::now_ms();
    crate::outln!("{:<16} {:<8} {:<18} DESCRIPTION", "ID", "STATE", "CREATED");
    for t in list {
        crate::outln!(
            "{:<16} {:<8} {:<18} {}",
            t.id,
            t.state,
            relative(t.created_ms, now),
            t.description
        );
    }
}
