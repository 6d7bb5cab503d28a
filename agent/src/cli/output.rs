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
    crate::outln!("leader    {}", leader_line(s));
    crate::outln!("term      {}", s.term);
    crate::outln!("commit    {}", s.commit_index);
    if s.revoked_certificates > 0 {
        crate::outln!(
            "revoked   {} removed member(s)' certificates refused at the handshake",
            s.revoked_certificates
        );
    }
    if let Some(r) = &s.recovered {
        crate::outln!(
            "recovered epoch {}: {} ran muster recover at {} after losing {} (kept its log through index {})",
            r.epoch,
            r.by,
            utc_time(r.at_ms),
            r.lost.join(", "),
            r.kept_through_index
        );
    }
    crate::outln!();
    print_members(s);
    if !s.membership_waiting.is_empty() {
        crate::outln!();
        crate::outln!("waiting:");
        for wait in &s.membership_waiting {
            crate::outln!("  {wait}");
        }
    }
    if !s.membership_events.is_empty() {
        crate::outln!();
        crate::outln!("membership events (this leader, oldest first):");
        for e in &s.membership_events {
            crate::outln!("  {}  {}: {}", utc_time(e.at_ms), e.change, e.cause);
        }
    }
}

/// The `leader` line: the leader's name, or why there is none and how many voters answer.
fn leader_line(s: &Status) -> String {
    let voters = s.members.iter().filter(|m| m.suffrage == "voter").count();
    let counted = s
        .voters_reachable
        .map(|k| format!("{k} of {voters} voters reachable"));
    match (&s.leader, s.quorum_lost, counted) {
        // An older agent's answer: it named the leader it led as, cut off.
        (Some(leader), true, _) => {
            format!("{leader} (QUORUM LOST: no majority of the voters answers it; writes fail)")
        }
        (Some(leader), false, _) => leader.clone(),
        (None, true, Some(counted)) => format!(
            "none: no leader reachable; quorum lost ({counted}): writes fail until a majority \
             is back; start the voters that do not answer (`muster plan` prints the recovery \
             steps if they are gone for good)"
        ),
        (None, true, None) => "none: no leader reachable; quorum lost: writes fail".into(),
        (None, false, Some(counted)) => format!(
            "none: no leader reachable ({counted}: an election is under way, or this node is \
             cut off from the leader)"
        ),
        (None, false, None) => "none: no leader reachable".into(),
    }
}

/// `YYYY-MM-DD HH:MM:SSZ` for milliseconds since the Unix epoch.
fn utc_time(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

pub fn print_members(s: &Status) {
    // The zone column only when some member said a zone.
    let zoned = !s.zones.is_empty();
    let rows = s
        .members
        .iter()
        .map(|m| {
            let leader = if s.leader.as_deref() == Some(m.name.as_str()) {
                "*"
            } else {
                ""
            };
            let mut row = vec![
                format!("{}{leader}", m.name),
                m.id.clone(),
                m.address.clone(),
                if m.role.is_empty() {
                    m.suffrage.clone()
                } else {
                    m.role.clone()
                },
            ];
            if zoned {
                row.push(m.zone.clone().unwrap_or_else(|| "-".into()));
            }
            row.extend([
                m.reachable
                    .map(|r| if r { "yes" } else { "NO" })
                    .unwrap_or("-")
                    .to_string(),
                m.last_seen_ms
                    .map(|ms| format!("{ms}ms"))
                    .unwrap_or_else(|| "-".into()),
                m.match_index
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
            ]);
            row
        })
        .collect();
    let mut headers = vec!["NAME", "ID", "ADDRESS", "ROLE"];
    if zoned {
        headers.push("ZONE");
    }
    headers.extend(["REACHABLE", "LAST SEEN", "MATCH"]);
    let shift = usize::from(zoned);
    print_table(&headers, rows, &[5 + shift, 6 + shift]);
    if zoned {
        crate::outln!();
        crate::outln!("zones:");
        for line in zone_lines(&s.zones) {
            crate::outln!("  {line}");
        }
    }
}

/// One line per failure zone: its members by role, and a warning for a zone that holds a
/// majority of the voters while there are other zones (losing it loses quorum).
fn zone_lines(zones: &[crate::api::types::ZoneCoverage]) -> Vec<String> {
    let voters: usize = zones.iter().map(|z| z.voters).sum();
    zones
        .iter()
        .map(|z| {
            let name = if z.zone.is_empty() {
                "(no zone)"
            } else {
                z.zone.as_str()
            };
            let reachable = z
                .reachable
                .map(|n| format!(", {n} reachable"))
                .unwrap_or_default();
            let warn = if zones.len() > 1 && voters > 1 && z.voters * 2 > voters {
                " (a majority of the voters: losing this zone loses quorum; run members in \
                 three or more zones)"
            } else {
                ""
            };
            format!(
                "{name}: {} voter(s), {} standby(s), {} spare(s){reachable}{warn}",
                z.voters, z.standbys, z.spares
            )
        })
        .collect()
}

/// Prints rows under a header, each column as wide as its widest cell (names, ids and
/// addresses vary in length), the columns in `right` aligned right (numbers).
pub fn print_table(header: &[&str], rows: Vec<Vec<String>>, right: &[usize]) {
    let lines: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(rows)
        .collect();
    let mut widths = vec![0; header.len()];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for line in lines {
        let last = line.len().saturating_sub(1);
        let cells: Vec<String> = line
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let w = widths.get(i).copied().unwrap_or(0);
                if right.contains(&i) {
                    format!("{cell:>w$}")
                } else if i == last {
                    cell.clone()
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        crate::outln!("{}", cells.join("  "));
    }
}

/// "in 23h 59m" / "5m ago" for a moment given in milliseconds since the Unix epoch.
/// "5m ago" for a moment in the past given in milliseconds since the Unix epoch.
pub fn ago(ms: u64, now: u64) -> String {
    relative(ms, now)
}

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
    let rows = list
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.state.clone(),
                if t.uses_total == u32::MAX {
                    "unlimited".to_string()
                } else {
                    format!("{}/{}", t.uses_total - t.uses_left, t.uses_total)
                },
                relative(t.created_ms, now),
                if t.expires_ms == u64::MAX {
                    "never".to_string()
                } else {
                    relative(t.expires_ms, now)
                },
                t.last_used_by.clone().unwrap_or_else(|| "-".into()),
                t.description.clone(),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "STATE",
            "USES",
            "CREATED",
            "EXPIRES",
            "LAST USED BY",
            "DESCRIPTION",
        ],
        rows,
        &[],
    );
}

pub fn print_operator_tokens(list: &[crate::api::types::OperatorTokenInfo]) {
    let now = crate::clock::now_ms();
    let rows = list
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.state.clone(),
                relative(t.created_ms, now),
                t.scopes.join(","),
                t.description.clone(),
            ]
        })
        .collect();
    print_table(
        &["ID", "STATE", "CREATED", "SCOPES", "DESCRIPTION"],
        rows,
        &[],
    );
}

#[cfg(test)]
mod tests {
    use crate::api::types::{Member, Status};

    fn status(leader: Option<&str>, quorum_lost: bool, voters_reachable: Option<usize>) -> Status {
        let member = |name: &str, suffrage: &str| Member {
            name: name.into(),
            id: "1".into(),
            address: "127.0.0.1:1".into(),
            suffrage: suffrage.into(),
            role: String::new(),
            reachable: None,
            last_seen_ms: None,
            match_index: None,
            zone: None,
            version: None,
        };
        Status {
            cluster_id: "c".into(),
            self_name: "m3".into(),
            leader: leader.map(String::from),
            term: 2,
            commit_index: 9,
            members: vec![
                member("m1", "voter"),
                member("m2", "voter"),
                member("m3", "voter"),
                member("m4", "nonvoter"),
            ],
            refused_rpcs: 0,
            revoked_certificates: 0,
            quorum_lost,
            voters_reachable,
            membership_events: Vec::new(),
            membership_waiting: Vec::new(),
            zones: Vec::new(),
            recovered: None,
        }
    }

    #[test]
    fn the_leader_line_says_why_there_is_no_leader() {
        // (leader, quorum lost, voters reachable) → what the line must hold
        type Case<'a> = ((Option<&'a str>, bool, Option<usize>), &'a [&'a str]);
        let table: [Case; 6] = [
            ((Some("m1"), false, Some(3)), &["m1"]),
            ((Some("m1"), true, None), &["m1", "QUORUM LOST"]),
            (
                (None, true, Some(1)),
                &[
                    "no leader reachable",
                    "quorum lost (1 of 3 voters reachable)",
                ],
            ),
            ((None, true, None), &["no leader reachable", "quorum lost"]),
            (
                (None, false, Some(2)),
                &["no leader reachable (2 of 3 voters reachable", "election"],
            ),
            ((None, false, None), &["no leader reachable"]),
        ];
        for ((leader, lost, reachable), want) in table {
            let line = super::leader_line(&status(leader, lost, reachable));
            for part in want {
                assert!(
                    line.contains(part),
                    "{leader:?} {lost} {reachable:?}: {line}"
                );
            }
            if leader.is_none() {
                assert!(line.starts_with("none"), "{line}");
            }
        }
    }

    #[test]
    fn utc_time_formats_known_instants() {
        assert_eq!(super::utc_time(0), "1970-01-01 00:00:00Z");
        // 2000-02-29 12:34:56 UTC, a leap day.
        assert_eq!(super::utc_time(951_827_696_000), "2000-02-29 12:34:56Z");
        assert_eq!(super::utc_time(1_795_000_000_123), "2026-11-18 11:06:40Z");
    }
}
