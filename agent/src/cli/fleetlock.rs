//! `muster fleetlock …`: the reboot semaphores as an operator sees and changes them.

use muster_shared::form::urlencode;

use super::{CliError, Target, output};
use crate::api::fleetlock::{EventStatus, FleetLockHistory, FleetLockStatus, GroupStatus};
use crate::api::paths;
use crate::outln;
use crate::state::fleetlock::{MAX_GATES, Outcome, valid_gate_name};
use crate::state::fleetlock_window;

pub async fn status(target: &Target, json: bool) -> Result<(), CliError> {
    let status: FleetLockStatus = target.call("GET", paths::FLEETLOCK, None).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    outln!("unknown groups: {}", status.unknown_groups);
    let now = crate::clock::now_ms();
    let rows = status
        .groups
        .iter()
        .flat_map(|g| {
            let holders: Vec<Vec<String>> = if g.holders.is_empty() {
                vec![vec![
                    g.name.clone(),
                    format!("0/{}", g.slots),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]]
            } else {
                g.holders
                    .iter()
                    .map(|h| {
                        vec![
                            g.name.clone(),
                            format!("{}/{}", g.holders.len(), g.slots),
                            h.id.clone(),
                            format!(
                                "{}{}",
                                output::ago(h.since_ms, now),
                                if h.stale { " (STALE)" } else { "" }
                            ),
                            h.via.clone(),
                        ]
                    })
                    .collect()
            };
            holders
        })
        .collect();
    output::print_table(&["GROUP", "HELD", "HOLDER", "SINCE", "VIA"], rows, &[]);
    print_windows(&status.groups, now);
    print_quorum_gate(&status);
    print_gates(&status.groups, now);
    if !status.recent.is_empty() {
        outln!();
        outln!("recent events (all: muster fleetlock history):");
        print_events(&status.recent, now);
    }
    Ok(())
}

/// Each group with maintenance windows: its windows, and whether it is open now or when it
/// opens next (by the leader's clock, which the server decided with).
fn print_windows(groups: &[GroupStatus], now: u64) {
    let with: Vec<&GroupStatus> = groups.iter().filter(|g| !g.windows.is_empty()).collect();
    if with.is_empty() {
        return;
    }
    outln!();
    outln!("maintenance windows (UTC; groups not listed are always open):");
    let rows = with
        .iter()
        .map(|g| {
            let state = match g.next_open_ms {
                _ if g.open => "open now".to_string(),
                Some(at) => format!(
                    "closed; opens {}",
                    fleetlock_window::describe_opening(at, now)
                ),
                None => "closed".to_string(),
            };
            vec![g.name.clone(), g.windows.join(", "), state]
        })
        .collect();
    output::print_table(&["GROUP", "WINDOWS", "NOW"], rows, &[]);
}

/// The quorum gate: off, or each voter as it counts it, with its machine's Zincati id.
fn print_quorum_gate(status: &FleetLockStatus) {
    // An older leader says nothing about the gate.
    let Some(gate) = &status.quorum_gate else {
        return;
    };
    outln!();
    if !gate.on {
        outln!("quorum gate: off (voters reboot whatever the quorum)");
        return;
    }
    outln!(
        "quorum gate: a voter's machine gets a slot only while a majority of the voters stays up \
         with {} to spare:",
        gate.min_tolerance
    );
    let rows = gate
        .voters
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                v.state.clone(),
                v.machine_id
                    .clone()
                    .unwrap_or_else(|| "(not learned: gated only through its own agent)".into()),
            ]
        })
        .collect();
    output::print_table(&["VOTER", "NOW", "ZINCATI ID"], rows, &[]);
}

/// Each group's health gates, and each gate's last result on the leader that answered.
fn print_gates(groups: &[GroupStatus], now: u64) {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .flat_map(|g| {
            g.gates.iter().map(|gate| {
                let check = gate
                    .check
                    .clone()
                    .unwrap_or_else(|| "NOT DEFINED on the leader (locks are refused)".into());
                let last = match &gate.last {
                    None => "-".to_string(),
                    Some(r) if r.passed => format!("passed {}", output::ago(r.at_ms, now)),
                    Some(r) => format!("refused {}: {}", output::ago(r.at_ms, now), r.reason),
                };
                vec![g.name.clone(), gate.name.clone(), check, last]
            })
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    outln!();
    outln!("health gates (checked by the leader before a slot is granted):");
    output::print_table(
        &["GROUP", "GATE", "CHECKS", "LAST (on the leader)"],
        rows,
        &[],
    );
}

/// `muster fleetlock history`: the whole audit trail, or one group's.
pub async fn history(target: &Target, group: Option<&str>, json: bool) -> Result<(), CliError> {
    let path = match group {
        Some(g) => format!("{}?group={}", paths::FLEETLOCK_HISTORY, urlencode(g)),
        None => paths::FLEETLOCK_HISTORY.to_string(),
    };
    let history: FleetLockHistory = target.call("GET", &path, None).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&history)?);
        return Ok(());
    }
    if history.events.is_empty() {
        outln!(
            "no FleetLock events yet (the cluster keeps the last {})",
            history.kept
        );
        return Ok(());
    }
    print_events(&history.events, crate::clock::now_ms());
    Ok(())
}

/// Events as a table, oldest first: when (by the leader's clock), what, which slot, through
/// which member.
fn print_events(events: &[EventStatus], now: u64) {
    let rows = events
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                if e.at_ms == 0 {
                    "-".into()
                } else {
                    output::ago(e.at_ms, now)
                },
                e.kind.clone(),
                e.group.clone(),
                e.id.clone(),
                e.via.clone(),
            ]
        })
        .collect();
    output::print_table(&["SEQ", "WHEN", "EVENT", "GROUP", "ID", "VIA"], rows, &[0]);
}

pub async fn release(target: &Target, group: &str, id: &str, json: bool) -> Result<(), CliError> {
    let body = serde_json::json!({ "group": group, "id": id }).to_string();
    let outcome: Outcome = target
        .call("POST", paths::FLEETLOCK_RELEASE, Some(body))
        .await?;
    report(
        json,
        outcome,
        &format!("released {id}'s slot of group {group}"),
        &format!("{id} held no slot of group {group}"),
    )
}

/// What `muster fleetlock group set` sets.
pub struct GroupSetting<'a> {
    pub name: &'a str,
    pub slots: u32,
    /// As the operator wrote them; checked here before anything is sent.
    pub windows: &'a [String],
    /// Names of health gates the members define; checked here before anything is sent.
    pub gates: &'a [String],
}

pub async fn set_group(
    target: &Target,
    group: &GroupSetting<'_>,
    json: bool,
) -> Result<(), CliError> {
    let windows: Vec<String> = fleetlock_window::parse_all(group.windows)
        .map_err(|e| CliError::Usage(e.to_string()))?
        .iter()
        .map(ToString::to_string)
        .collect();
    let gates = group.gates;
    if let Some(bad) = gates.iter().find(|g| !valid_gate_name(g)) {
        return Err(CliError::Usage(format!(
            "--gate {bad:?}: a gate's NAME, as in --fleetlock-gate NAME=…: 1 to 63 characters \
             of [a-zA-Z0-9.-]"
        )));
    }
    if gates.len() > MAX_GATES {
        return Err(CliError::Usage(format!(
            "at most {MAX_GATES} --gate per group"
        )));
    }
    let (name, slots) = (group.name, group.slots);
    let path = format!("{}/{}", paths::FLEETLOCK_GROUPS, urlencode(name));
    let body =
        serde_json::json!({ "slots": slots, "windows": windows, "gates": gates }).to_string();
    let outcome: Outcome = target.call("PUT", &path, Some(body)).await?;
    // Without windows the line reads as it always did.
    let when = if windows.is_empty() {
        String::new()
    } else {
        format!(", open {}", windows.join(", "))
    };
    let when = if gates.is_empty() {
        when
    } else {
        format!("{when}, gates {}", gates.join(", "))
    };
    report(
        json,
        outcome,
        &format!("group {name}: {slots} slot(s){when}"),
        "",
    )
}

pub async fn delete_group(target: &Target, name: &str, json: bool) -> Result<(), CliError> {
    let path = format!("{}/{}", paths::FLEETLOCK_GROUPS, urlencode(name));
    let outcome: Outcome = target.call("DELETE", &path, None).await?;
    report(json, outcome, &format!("group {name} deleted"), "")
}

pub async fn unknown_groups(target: &Target, mode: &str, json: bool) -> Result<(), CliError> {
    let body = serde_json::json!({ "unknown_groups": mode }).to_string();
    let outcome: Outcome = target
        .call("PUT", paths::FLEETLOCK_SETTINGS, Some(body))
        .await?;
    report(json, outcome, &format!("unknown groups: {mode}"), "")
}

fn report(json: bool, outcome: Outcome, done: &str, nothing: &str) -> Result<(), CliError> {
    if json {
        outln!("{}", serde_json::json!({ "outcome": outcome }));
    } else if outcome == Outcome::NotHeld {
        outln!("{nothing}");
    } else {
        outln!("{done}");
    }
    Ok(())
}
