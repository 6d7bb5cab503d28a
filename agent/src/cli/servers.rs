//! The addresses an operator command tries for `--server A,B,C`, as Juju's clients keep their
//! controllers' addresses: the last address that answered first, then the other given ones in
//! random order. Every answer over TCP carries the id of the cluster that answered (header
//! `muster-cluster`) and its current member addresses (header `muster-members`); they are kept
//! in a small state file per cluster CA (`$XDG_STATE_HOME/muster/servers-<ca pin>.json`, else
//! `~/.local/state/muster/…`), with the cluster id they belong to. The remembered members are
//! only ever tried for the cluster that listed them, once a given address has answered for it
//! (`tcp.rs`): never in place of a `--server` that fails.

use std::path::PathBuf;

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// Most addresses kept (a cluster's members are far fewer).
const MAX_KEPT: usize = 64;

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known {
    /// The cluster the addresses below belong to (another cluster may share its CA: one
    /// restored from the same backup).
    #[serde(default)]
    pub cluster_id: Option<String>,
    /// The address that answered last.
    #[serde(default)]
    pub last_good: Option<String>,
    /// The members' addresses from the latest answer.
    #[serde(default)]
    pub members: Vec<String>,
}

/// Splits `--server A,B,C` into addresses (empty items dropped).
pub fn parse_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The order to try the given addresses: the last good one first (if it is given), then the
/// rest, shuffled so that many clients spread over the members. Pure but for the shuffle,
/// which `shuffle` does.
pub fn order(given: &[String], known: &Known, shuffle: impl FnOnce(&mut [String])) -> Vec<String> {
    let mut rest: Vec<String> = Vec::new();
    for a in given {
        if !rest.contains(a) {
            rest.push(a.clone());
        }
    }
    let first = known.last_good.clone().filter(|a| rest.contains(a));
    rest.retain(|a| Some(a) != first.as_ref());
    shuffle(&mut rest);
    first.into_iter().chain(rest).collect()
}

/// The random order of [`order`].
pub fn shuffled(given: &[String], known: &Known) -> Vec<String> {
    order(given, known, |v| v.shuffle(&mut rand::rng()))
}

/// The remembered members of cluster `cluster_id`: none when what is remembered belongs to
/// another cluster (or to none known).
pub fn members_of<'a>(known: &'a Known, cluster_id: &str) -> &'a [String] {
    if known.cluster_id.as_deref() == Some(cluster_id) {
        &known.members
    } else {
        &[]
    }
}

/// Where the addresses of the cluster with CA pin `pin` are kept, if there is a home for them.
pub fn state_file(pin: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local/state"))
        })?;
    let short: String = pin
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    Some(dir.join("muster").join(format!("servers-{short}.json")))
}

pub fn load(pin: &str) -> Known {
    state_file(pin)
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Remembers that `good` answered for cluster `cluster_id` (if it said), and the member
/// addresses its answer listed (if any). What was kept for another cluster under this CA is
/// dropped. Best effort: a read-only home only costs the memory of the next command.
pub fn remember(pin: &str, cluster_id: Option<&str>, good: &str, members: Option<&str>) {
    let before = load(pin);
    let mut known = match cluster_id {
        Some(id) if before.cluster_id.as_deref() != Some(id) => Known {
            cluster_id: Some(id.to_string()),
            ..Known::default()
        },
        _ => before.clone(),
    };
    known.last_good = Some(good.to_string());
    if let Some(members) = members {
        let mut list = parse_list(members);
        list.truncate(MAX_KEPT);
        if !list.is_empty() {
            known.members = list;
        }
    }
    // Written only when it changed: `lease run` calls this on every renewal.
    if known != before {
        save(pin, &known);
    }
}

/// Forgets `bad` as the address to try first (it did not answer).
pub fn forget(pin: &str, bad: &str) {
    let mut known = load(pin);
    if known.last_good.as_deref() == Some(bad) {
        known.last_good = None;
        save(pin, &known);
    }
}

fn save(pin: &str, known: &Known) {
    let Some(path) = state_file(pin) else {
        return;
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(bytes) = serde_json::to_vec_pretty(known) {
        let _ = crate::datadir::write_private(&path, &bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_last_good_address_goes_first_then_every_other_given_once() {
        /// (given, last good, known members, expected order without shuffling)
        type Row<'a> = (&'a [&'a str], Option<&'a str>, &'a [&'a str], &'a [&'a str]);
        let table: &[Row] = &[
            (&["a", "b"], None, &[], &["a", "b"]),
            (&["a", "b"], Some("b"), &[], &["b", "a"]),
            // Remembered members are never tried in place of the given addresses.
            (&["a"], Some("c"), &["b", "c"], &["a"]),
            (&["a"], Some("z"), &["b"], &["a"]),
            (&["a", "a", "b"], None, &["b", "c"], &["a", "b"]),
        ];
        for (given, last, members, want) in table {
            let known = Known {
                cluster_id: Some("c1".into()),
                last_good: last.map(String::from),
                members: s(members),
            };
            assert_eq!(
                order(&s(given), &known, |_| {}),
                s(want),
                "{given:?} {last:?} {members:?}"
            );
        }
    }

    #[test]
    fn remembered_members_are_only_those_of_the_cluster_that_listed_them() {
        let known = Known {
            cluster_id: Some("c1".into()),
            last_good: None,
            members: s(&["a", "b"]),
        };
        assert_eq!(members_of(&known, "c1"), s(&["a", "b"]).as_slice());
        assert!(members_of(&known, "c2").is_empty());
        let unknown = Known {
            cluster_id: None,
            ..known
        };
        assert!(members_of(&unknown, "c1").is_empty());
    }

    #[test]
    fn lists_split_on_commas() {
        assert_eq!(parse_list(" a:1, ,b:2,"), s(&["a:1", "b:2"]));
    }
}
