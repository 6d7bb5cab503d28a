//! The writing side of `cluster.toml`: the file `muster config export` writes, and the same
//! manifest as JSON for scripts. Separate from the parsing (`manifest.rs`), which it must read
//! back to the same manifest (a table test holds them together).

use std::collections::BTreeSet;

use muster_shared::duration::format_duration;

use super::{DEFAULT_DATA_DIR, Manifest};

impl Manifest {
    /// The file `muster config export` writes: what `parse` reads back to the same manifest.
    /// `cluster_notes` are comment lines under `[cluster]` (where its values come from).
    pub fn to_toml(&self, cluster_notes: &[String]) -> String {
        let mut out = String::from(
            "# The desired cluster, for `muster plan -f` and `muster apply -f` (docs/apply.md).\n\n",
        );
        let s = &self.settings;
        out.push_str("[cluster]\n");
        for note in cluster_notes {
            out.push_str(&format!("# {note}\n"));
        }
        if let Some(ms) = s.replace_after_ms {
            out.push_str(&format!(
                "replace_after = {:?}        # a silent voter is replaced after this; \"0\" turns it off\n",
                delay_text(ms)
            ));
        }
        if let Some(ms) = s.cleanup_dead_after_ms {
            out.push_str(&format!(
                "cleanup_dead_after = {:?}   # a silent member is removed after this; \"0\" turns it off\n",
                delay_text(ms)
            ));
        }
        if let Some(n) = s.min_voters {
            out.push_str(&format!(
                "min_voters = {n}               # cleanup never leaves fewer members\n"
            ));
        }
        if let Some(n) = s.standbys {
            out.push_str(&format!(
                "standbys = {n}                 # nonvoters kept replicating, ready to be promoted\n"
            ));
        }
        if let Some(f) = &self.fleetlock {
            out.push_str("\n[fleetlock]\n");
            if let Some(mode) = &f.unknown_groups {
                out.push_str(&format!("unknown_groups = {mode:?}\n"));
            }
            for (name, g) in &f.groups {
                out.push_str(&format!(
                    "\n[[fleetlock.group]]\nname = {name:?}\nslots = {}\n",
                    g.slots
                ));
                if !g.windows.is_empty() {
                    let list: Vec<String> = g.windows.iter().map(|w| format!("{w:?}")).collect();
                    out.push_str(&format!("windows = [{}]   # UTC\n", list.join(", ")));
                }
                if !g.gates.is_empty() {
                    let list: Vec<String> = g.gates.iter().map(|n| format!("{n:?}")).collect();
                    out.push_str(&format!("gates = [{}]\n", list.join(", ")));
                }
            }
        }
        let dirs: BTreeSet<&str> = self.members.iter().map(|m| m.data_dir.as_str()).collect();
        let common_dir = match dirs.iter().collect::<Vec<_>>().as_slice() {
            [one] => Some(**one),
            _ => None,
        };
        if let Some(dir) = common_dir.filter(|d| *d != DEFAULT_DATA_DIR) {
            out.push_str(&format!("\n[defaults]\ndata_dir = {dir:?}\n"));
        }
        for m in &self.members {
            out.push_str(&format!(
                "\n[[member]]\nname = {:?}\naddress = {:?}\n",
                m.name, m.address
            ));
            if common_dir.is_none() && m.data_dir != DEFAULT_DATA_DIR {
                out.push_str(&format!("data_dir = {:?}\n", m.data_dir));
            }
        }
        out
    }

    /// The file as JSON, in the TOML's own shape and keys (`cluster`, `fleetlock.group`,
    /// `member`; durations as the same text), for scripts.
    pub fn to_json(&self) -> serde_json::Value {
        let s = &self.settings;
        let mut cluster = serde_json::Map::new();
        if let Some(ms) = s.replace_after_ms {
            cluster.insert("replace_after".into(), delay_text(ms).into());
        }
        if let Some(ms) = s.cleanup_dead_after_ms {
            cluster.insert("cleanup_dead_after".into(), delay_text(ms).into());
        }
        if let Some(n) = s.min_voters {
            cluster.insert("min_voters".into(), n.into());
        }
        if let Some(n) = s.standbys {
            cluster.insert("standbys".into(), n.into());
        }
        let mut file = serde_json::Map::new();
        file.insert("cluster".into(), cluster.into());
        if let Some(f) = &self.fleetlock {
            let mut fleetlock = serde_json::Map::new();
            if let Some(mode) = &f.unknown_groups {
                fleetlock.insert("unknown_groups".into(), mode.clone().into());
            }
            let groups: Vec<serde_json::Value> = f
                .groups
                .iter()
                .map(|(name, g)| {
                    let mut group = serde_json::json!({ "name": name, "slots": g.slots });
                    if !g.windows.is_empty() {
                        group["windows"] = g.windows.clone().into();
                    }
                    if !g.gates.is_empty() {
                        group["gates"] = g.gates.clone().into();
                    }
                    group
                })
                .collect();
            fleetlock.insert("group".into(), groups.into());
            file.insert("fleetlock".into(), fleetlock.into());
        }
        let members: Vec<serde_json::Value> = self
            .members
            .iter()
            .map(|m| {
                serde_json::json!({ "name": m.name, "address": m.address, "data_dir": m.data_dir })
            })
            .collect();
        file.insert("member".into(), members.into());
        file.into()
    }
}

/// A delay as the file writes it: `0` (off), milliseconds when not whole seconds, else a
/// duration such as `30s`.
fn delay_text(ms: u64) -> String {
    if ms == 0 {
        "0".into()
    } else if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        format_duration(std::time::Duration::from_millis(ms))
    }
}
