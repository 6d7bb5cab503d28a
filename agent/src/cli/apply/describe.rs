//! The words for a plan's actions and settings: one line per action. Shared by the printed plan,
//! apply's progress lines and its "the cluster changed" errors, so that each names an action
//! the same way; kept apart so that none of those depends on another for its words.

use std::time::Duration;

use muster_shared::duration::format_duration;

use crate::api::probe::SettingsUpdate;
use crate::apply::Action;

fn delay_text(ms: u64) -> String {
    if ms == 0 {
        "off".into()
    } else {
        format_duration(Duration::from_millis(ms))
    }
}

pub fn settings_text(s: &SettingsUpdate) -> String {
    format!(
        "replace_after {}, cleanup_dead_after {}, min_voters {}, standbys {}",
        delay_text(s.replace_after_ms),
        delay_text(s.cleanup_dead_after_ms),
        s.min_voters,
        s.standbys
    )
}

/// One line per action, for the plan and apply's progress.
pub fn describe(action: &Action) -> String {
    match action {
        Action::RemoveMember { name, address } => format!("remove {name} ({address})"),
        Action::IssueToken { name, address, .. } => {
            format!("issue a join token for {name} ({address})")
        }
        Action::SetSettings { from, to } => format!(
            "set the cluster settings: {} (now {})",
            settings_text(to),
            settings_text(from)
        ),
        Action::SetFleetlockGroup {
            group,
            from,
            slots,
            from_windows,
            windows,
            from_gates,
            gates,
        } => {
            // Windows and gates are named only where a side has some: a plan of slots reads
            // as before.
            let any = !windows.is_empty() || !from_windows.is_empty();
            let any_gate = !gates.is_empty() || !from_gates.is_empty();
            let shown = |w: &[String], g: &[String]| {
                let mut text = if any { windows_text(w) } else { String::new() };
                if any_gate {
                    text.push_str(&gates_text(g));
                }
                text
            };
            match from {
                Some(n) => format!(
                    "set FleetLock group {group} to {slots} slot(s){} (now {n}{})",
                    shown(windows, gates),
                    shown(from_windows, from_gates)
                ),
                None => format!(
                    "configure FleetLock group {group} with {slots} slot(s){}",
                    shown(windows, gates)
                ),
            }
        }
        Action::DeleteFleetlockGroup { group } => format!("delete FleetLock group {group}"),
        Action::SetUnknownGroups { from, to } => {
            format!("FleetLock unknown groups: {to} (now {from})")
        }
        Action::Upgrade {
            name,
            from_version,
            to_version,
        } => format!("upgrade {name} from {from_version} to {to_version}"),
    }
}

/// A group's health gates in a plan's line, after its windows.
fn gates_text(gates: &[String]) -> String {
    if gates.is_empty() {
        ", no gate".into()
    } else {
        format!(", gates {}", gates.join(", "))
    }
}

/// A group's maintenance windows in a plan's line, after its slots.
fn windows_text(windows: &[String]) -> String {
    if windows.is_empty() {
        ", always open".into()
    } else {
        format!(", open {}", windows.join(", "))
    }
}
