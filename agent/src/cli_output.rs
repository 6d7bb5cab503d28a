//! Tables printed by the operator commands.

use crate::api::types::Status;

pub fn print_status(s: &Status) {
    println!("cluster   {}", s.cluster_id);
    println!("self      {}", s.self_name);
    println!("leader    {}", s.leader.as_deref().unwrap_or("(none)"));
    println!("term      {}", s.term);
    println!("commit    {}", s.commit_index);
    println!();
    print_members(s);
}

pub fn print_members(s: &Status) {
    println!(
        "{:<16} {:<17} {:<22} {:<9} {:<10} {:>10} {:>8}",
        "NAME", "ID", "ADDRESS", "SUFFRAGE", "REACHABLE", "LAST SEEN", "MATCH"
    );
    for m in &s.members {
        let leader = if s.leader.as_deref() == Some(m.name.as_str()) {
            "*"
        } else {
            ""
        };
        println!(
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
