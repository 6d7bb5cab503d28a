//! The TOML config file (`--config`, default /etc/muster/agent.toml): the flags' settings
//! spelled with underscores. Unknown keys are refused, so a typo is an error, not a silent
//! default.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;

/// The TOML file: the same settings, spelled with underscores (`data_dir = "/var/lib/muster"`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) name: Option<String>,
    pub(super) advertise: Option<String>,
    pub(super) listen: Option<String>,
    pub(super) data_dir: Option<PathBuf>,
    pub(super) discovery: Option<String>,
    pub(super) join: Option<String>,
    pub(super) token: Option<String>,
    pub(super) env_file: Option<PathBuf>,
    pub(super) heartbeat: Option<String>,
    pub(super) election_timeout: Option<String>,
    pub(super) promote_after: Option<String>,
    pub(super) replace_after: Option<String>,
    pub(super) cleanup_dead_after: Option<String>,
    pub(super) min_voters: Option<u32>,
    pub(super) standbys: Option<u32>,
    pub(super) max_connections: Option<u32>,
    pub(super) max_connections_per_source: Option<u32>,
    pub(super) cert_validity: Option<String>,
    pub(super) allow_address_change: Option<bool>,
    pub(super) init: Option<bool>,
    pub(super) initial_cluster: Option<String>,
    pub(super) join_secret_file: Option<PathBuf>,
    pub(super) join_secret_ttl: Option<String>,
    pub(super) ca_pin: Option<String>,
    pub(super) fleetlock_listen: Option<String>,
    pub(super) metrics_listen: Option<String>,
    pub(super) fleetlock_tls_cert: Option<String>,
    pub(super) fleetlock_tls_key: Option<String>,
    pub(super) fleetlock_tls_client_ca: Option<String>,
    pub(super) fleetlock_rate_limit: Option<u32>,
    pub(super) fleetlock_min_tolerance: Option<NumberOrWord>,
    pub(super) fleetlock_id: Option<String>,
    pub(super) zone: Option<String>,
    pub(super) snapshot_every: Option<String>,
    pub(super) snapshot_keep: Option<u32>,
    pub(super) snapshot_dir: Option<PathBuf>,
    /// `fleetlock_gate = ["alerts=prometheus:http://…", "drained=command:/usr/local/bin/drained"]`
    /// (or one string, as the variable takes it).
    pub(super) fleetlock_gate: Option<TextList>,
    pub(super) fleetlock_gate_timeout: Option<String>,
}

/// A list setting in the file: an array of strings, or one string of entries.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a list of strings, or one string")]
pub(super) enum TextList {
    One(String),
    Many(Vec<String>),
}

impl TextList {
    /// The entries one a line, as the repeated flag gives them.
    pub(super) fn lines(&self) -> String {
        match self {
            TextList::One(text) => text.clone(),
            TextList::Many(list) => list.join("\n"),
        }
    }
}

/// A setting that is a number or a word (`fleetlock_min_tolerance = 1`, or `= "off"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum NumberOrWord {
    Number(u32),
    Word(String),
}

impl std::fmt::Display for NumberOrWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NumberOrWord::Number(n) => write!(f, "{n}"),
            NumberOrWord::Word(w) => f.write_str(w),
        }
    }
}

/// Reads and parses the config file; a missing or unreadable file named by the operator is an
/// error (only the default path may be absent).
pub(super) fn read_file_config(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}
