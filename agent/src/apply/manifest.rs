//! `cluster.toml`, the desired cluster: its members and the settings it should have. Parsed and
//! checked here, before anything is probed; every refusal names the line and what to write
//! instead. `muster config export` writes the same format ([`Manifest::to_toml`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use muster_shared::duration::parse_duration;
use serde::Deserialize;
use toml::Spanned;

mod export;
mod fleetlock;

pub use fleetlock::DesiredGroup;
use fleetlock::{RawFleetLock, fleetlock};

use crate::config::{validate_host_port, validate_name};
use crate::state::settings::{
    MAX_DELAY_MS, MAX_MIN_VOTERS, MAX_STANDBYS, MIN_DELAY_MS, MIN_MIN_VOTERS,
};

/// Where a member keeps its data when the file does not say (`muster agent`'s default).
pub const DEFAULT_DATA_DIR: &str = crate::config::DEFAULT_DATA_DIR;
/// Most slots a FleetLock group may have (as `muster fleetlock group set`).
pub const MAX_SLOTS: u32 = 1_000;

/// A refusal of the file: the line it is about, what is wrong and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ManifestError {
    pub line: usize,
    pub message: String,
}

/// One machine the cluster should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredMember {
    pub name: String,
    /// `host:port` it advertises.
    pub address: String,
    /// Its `--data-dir` (for the commands apply prints for it).
    pub data_dir: String,
    /// The file gave `data_dir` (for the member or in `[defaults]`); else it is the default,
    /// and the member's own report of its data dir, when there is one, wins.
    pub data_dir_given: bool,
}

/// The membership repairs' settings the file sets (`None`: left as the cluster has it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DesiredSettings {
    pub replace_after_ms: Option<u64>,
    pub cleanup_dead_after_ms: Option<u64>,
    pub min_voters: Option<u32>,
    pub standbys: Option<u32>,
}

/// FleetLock as the file wants it: when given, exactly these groups are configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredFleetLock {
    /// `create` or `reject` (`None`: left as it is).
    pub unknown_groups: Option<String>,
    pub groups: BTreeMap<String, DesiredGroup>,
}

/// The whole desired cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub members: Vec<DesiredMember>,
    pub settings: DesiredSettings,
    /// `None` when the file has no `[fleetlock]` table: FleetLock is then left alone.
    pub fleetlock: Option<DesiredFleetLock>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    cluster: Option<RawCluster>,
    fleetlock: Option<RawFleetLock>,
    #[serde(default)]
    member: Vec<RawMember>,
    defaults: Option<RawDefaults>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    replace_after: Option<Spanned<String>>,
    cleanup_dead_after: Option<Spanned<String>>,
    min_voters: Option<Spanned<i64>>,
    standbys: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMember {
    name: Spanned<String>,
    address: Spanned<String>,
    data_dir: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    data_dir: Option<Spanned<String>>,
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |before| before.bytes().filter(|b| *b == b'\n').count())
        + 1
}

impl Manifest {
    /// Parses and checks `text`: unknown keys, wrong types, duplicate names or addresses, bad
    /// addresses and out-of-range settings are refused with their line.
    pub fn parse(text: &str) -> Result<Self, ManifestError> {
        let raw: RawManifest = toml::from_str(text).map_err(|e| ManifestError {
            line: e.span().map_or(1, |s| line_of(text, s.start)),
            message: format!(
                "{}; the keys are [cluster] replace_after, cleanup_dead_after, min_voters, \
                 standbys; [fleetlock] unknown_groups and [[fleetlock.group]] name, slots, windows, gates; \
                 [defaults] data_dir; [[member]] name, address, data_dir (docs/apply.md)",
                e.message()
            ),
        })?;
        let members = members(text, &raw)?;
        let settings = match &raw.cluster {
            Some(c) => settings(text, c)?,
            None => DesiredSettings::default(),
        };
        let fleetlock = raw
            .fleetlock
            .as_ref()
            .map(|f| fleetlock(text, f))
            .transpose()?;
        Ok(Manifest {
            members,
            settings,
            fleetlock,
        })
    }
}

/// A refusal of the value at `span` of `text`, with its line.
fn refuse(text: &str, span: Range<usize>, message: &dyn std::fmt::Display) -> ManifestError {
    ManifestError {
        line: line_of(text, span.start),
        message: message.to_string(),
    }
}

/// The `[[member]]` tables, each with its data dir (its own, `[defaults]`' or the default):
/// names and addresses unique, at least one member.
fn members(text: &str, raw: &RawManifest) -> Result<Vec<DesiredMember>, ManifestError> {
    let (default_dir, default_given) = match &raw.defaults {
        Some(RawDefaults {
            data_dir: Some(dir),
        }) => (
            checked_dir(dir).map_err(|m| refuse(text, dir.span(), &m))?,
            true,
        ),
        _ => (DEFAULT_DATA_DIR.to_string(), false),
    };
    let mut members = Vec::new();
    let mut names = BTreeSet::new();
    let mut addresses = BTreeMap::new();
    for m in &raw.member {
        let name = m.name.get_ref();
        validate_name(name)
            .map_err(|e| refuse(text, m.name.span(), &format!("member name: {e}")))?;
        if !names.insert(name.clone()) {
            return Err(refuse(
                text,
                m.name.span(),
                &format!("member {name:?} is listed twice; every member needs its own name"),
            ));
        }
        let address = m.address.get_ref();
        validate_host_port("address", address)
            .map_err(|e| refuse(text, m.address.span(), &format!("member {name}: {e}")))?;
        if let Some(other) = addresses.insert(address.clone(), name.clone()) {
            return Err(refuse(
                text,
                m.address.span(),
                &format!("members {other} and {name} both have address {address}"),
            ));
        }
        let (data_dir, data_dir_given) = match &m.data_dir {
            Some(dir) => (
                checked_dir(dir).map_err(|e| refuse(text, dir.span(), &e))?,
                true,
            ),
            None => (default_dir.clone(), default_given),
        };
        members.push(DesiredMember {
            name: name.clone(),
            address: address.clone(),
            data_dir,
            data_dir_given,
        });
    }
    if members.is_empty() {
        return Err(ManifestError {
            line: line_of(text, text.len()),
            message: "the file lists no member; add a [[member]] table with name and \
                      address for each machine (`muster config export` writes one)"
                .into(),
        });
    }
    Ok(members)
}

/// The `[cluster]` settings, each in its range.
fn settings(text: &str, c: &RawCluster) -> Result<DesiredSettings, ManifestError> {
    let delay_at = |d: &Spanned<String>| delay(d).map_err(|m| refuse(text, d.span(), &m));
    let count_at = |n: &Spanned<i64>, min, max, what| {
        count(n, min, max, what).map_err(|m| refuse(text, n.span(), &m))
    };
    Ok(DesiredSettings {
        replace_after_ms: c.replace_after.as_ref().map(delay_at).transpose()?,
        cleanup_dead_after_ms: c.cleanup_dead_after.as_ref().map(delay_at).transpose()?,
        min_voters: c
            .min_voters
            .as_ref()
            .map(|n| count_at(n, MIN_MIN_VOTERS, MAX_MIN_VOTERS, "min_voters"))
            .transpose()?,
        standbys: c
            .standbys
            .as_ref()
            .map(|n| count_at(n, 0, MAX_STANDBYS, "standbys"))
            .transpose()?,
    })
}

/// A value in `cluster.toml` that parses but cannot be used; [`Manifest::parse`] puts its line
/// in front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FieldError {
    #[error("data_dir {0:?}: give an absolute path of [A-Za-z0-9._/-], such as {DEFAULT_DATA_DIR}")]
    DataDir(String),
    #[error("{reason}; write a duration such as \"30s\" or \"10m\", or \"0\" for off")]
    NotADuration { reason: String },
    #[error("{0:?}: write a delay between 1s and 30d, or \"0\" to turn the repair off")]
    DelayOutOfRange(String),
    #[error("{what} = {value}: write a number from {min} to {max}")]
    Count {
        what: &'static str,
        value: i64,
        min: u32,
        max: u32,
    },
}

/// True for a data dir the file may hold: printed into shell commands and an
/// EnvironmentFile, so an absolute path of plain characters only.
pub fn is_plain_dir(d: &str) -> bool {
    let plain = d
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
    d.starts_with('/') && plain && !d.split('/').any(|part| part == "..")
}

fn checked_dir(dir: &Spanned<String>) -> Result<String, FieldError> {
    let d = dir.get_ref();
    if is_plain_dir(d) {
        Ok(d.clone())
    } else {
        Err(FieldError::DataDir(d.clone()))
    }
}

/// A delay such as "30s" or "10m"; "0" or "off" turns the repair off (stored as 0 ms).
fn delay(text: &Spanned<String>) -> Result<u64, FieldError> {
    let t = text.get_ref().trim();
    if t == "0" || t == "off" {
        return Ok(0);
    }
    let ms = parse_duration(t)
        .map_err(|e| FieldError::NotADuration {
            reason: e.to_string(),
        })
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))?;
    if !(MIN_DELAY_MS..=MAX_DELAY_MS).contains(&ms) {
        return Err(FieldError::DelayOutOfRange(t.to_string()));
    }
    Ok(ms)
}

fn count(n: &Spanned<i64>, min: u32, max: u32, what: &'static str) -> Result<u32, FieldError> {
    u32::try_from(*n.get_ref())
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or(FieldError::Count {
            what,
            value: *n.get_ref(),
            min,
            max,
        })
}
