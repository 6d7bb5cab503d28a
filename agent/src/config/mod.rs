//! `muster agent` configuration from three sources, in this order of precedence:
//! command-line flags > `MUSTER_<FLAG>` environment variables > the TOML file (`--config`).
//!
//! `--env-file` reads a systemd EnvironmentFile (e.g. Flatcar's `/run/metadata/flatcar`). Its
//! variables count as environment variables (the real environment wins over the file), and any
//! value may refer to them as `${NAME}`, so one identical config works on every machine:
//! `--advertise '${COREOS_EC2_IPV4_LOCAL}:7000'`.

//!
//! # Layout
//!
//! `resolve` opens the three sources once (`sources.rs`: flag > variable > file, empty means
//! unset) and asks each group of settings for its part, in the order `--help` lists them:
//!
//! | file | settings |
//! |---|---|
//! | `identity.rs` | name, advertise, listen, data dir |
//! | `start.rs` | discovery, join, token, init, initial cluster, join secret, CA pin (the credentials themselves: `credentials.rs`) |
//! | `timing.rs` | heartbeat, election timeout, promote-after, cert validity |
//! | `roles.rs` | replace-after, cleanup-dead-after, min-voters, standbys, fleetlock-min-tolerance, fleetlock-id |
//! | `listeners.rs` | FleetLock, metrics, connection and request limits |
//! | `fleetlock_gates.rs` | FleetLock health gates (local to each agent, never replicated) |
//! | `snapshots.rs` | the snapshot schedule |
//!
//! `flags.rs` and `file.rs` hold the two typed sources, `values.rs` the parsers the groups
//! share, `address.rs` and `env_file.rs` address checks and systemd EnvironmentFiles.

mod address;
mod credentials;
mod env_file;
mod file;
mod flags;
mod fleetlock_gates;
mod identity;
mod listeners;
mod roles;
mod snapshots;
mod sources;
mod start;
mod timing;
mod values;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::policy::Automation;

pub use address::host_of;
pub(crate) use address::{validate_host_port, validate_name};
pub use env_file::{EnvFileError, expand, read_env_file};
pub use flags::{
    AgentFlags, HELP_NETWORK, HELP_OBSERVABILITY, HELP_ROLES, HELP_SNAPSHOTS, HELP_START,
    HELP_TIMING, HELP_TLS,
};
pub use fleetlock_gates::{
    DEFAULT_GATE_TIMEOUT, FleetLockGates, GateCheck, GateSpec, parse_gate, split_gate_list,
};

pub const DEFAULT_DATA_DIR: &str = "/var/lib/muster";
pub const DEFAULT_CONFIG: &str = "/etc/muster/agent.toml";
/// The environment variable for `--token`.
pub const JOIN_TOKEN_ENV: &str = "MUSTER_JOIN_TOKEN";
/// The name both tokens shared until operators found that an exported operator token broke
/// `muster agent`; still read, with a warning, for one release.
pub const LEGACY_TOKEN_ENV: &str = "MUSTER_TOKEN";
pub const DEFAULT_PROMOTE_AFTER: Duration = Duration::from_secs(3);
/// The FleetLock port on loopback, where each machine's Zincati finds its own agent. Node
/// ports are numbered from 7000 up (7001, 7002, … in the README's one-host cluster), so the
/// loopback-only listeners sit at 790x, where a node port would be the 900th of a host: a
/// node's FleetLock or metrics listener never takes the port another node advertises.
pub const DEFAULT_FLEETLOCK_PORT: u16 = 7902;
/// Where `/metrics`, `/healthz`, `/readyz` and the status page are served by default
/// (loopback: no authentication there); next to FleetLock's, apart from the node ports.
pub const DEFAULT_METRICS_PORT: u16 = 7903;
/// Connection limits on the node port: far above what a cluster's members and operators use
/// (each member keeps a couple of connections to each peer), far below a descriptor limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
pub const DEFAULT_MAX_CONNECTIONS_PER_SOURCE: usize = 256;
/// FleetLock requests per second from one source: one Zincati sends one every few seconds at
/// most, and a flood of them is cut down to this.
pub const DEFAULT_FLEETLOCK_RATE_LIMIT: usize = 10;
const MAX_PROMOTE_AFTER: Duration = Duration::from_secs(3600);
/// Node certificates last a year unless `--cert-validity` says otherwise.
pub const DEFAULT_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
const MIN_CERT_VALIDITY: Duration = Duration::from_secs(10);
const MAX_CERT_VALIDITY: Duration = Duration::from_secs(3650 * 24 * 3600);

/// The merged, validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub name: String,
    pub advertise: String,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub discovery: Option<String>,
    pub join: Vec<String>,
    pub token: Option<JoinTokenSetting>,
    pub heartbeat: Duration,
    pub election_timeout: Duration,
    pub promote_after: Duration,
    /// `--cert-validity`: lifetime of the node certificates this node issues.
    pub cert_validity: Duration,
    /// `--allow-address-change`: a restart may move this member to a new --advertise.
    pub allow_address_change: bool,
    /// `--replace-after`, `--cleanup-dead-after`, `--min-voters`.
    pub automation: Automation,
    /// `--init`: form a one-node cluster here.
    pub init: bool,
    /// `--initial-cluster`: every member of a static bootstrap, in the given order.
    pub initial_cluster: Vec<StaticMember>,
    pub join_secret: Option<JoinSecretSetting>,
    /// How long the join secret admits machines after formation (`None`: until revoked).
    pub join_secret_ttl: Option<Duration>,
    /// `--ca-pin`: the CA a join-secret joiner trusts instead of the discovery record's.
    pub ca_pin: Option<String>,
    /// Where FleetLock is served (`None`: off), and whether that was asked for explicitly (a
    /// taken default port is skipped with a warning; a taken explicit one stops the agent).
    pub fleetlock_listen: Option<SocketAddr>,
    pub fleetlock_explicit: bool,
    /// `--max-connections` and `--max-connections-per-source` on the node port.
    pub max_connections: usize,
    pub max_connections_per_source: usize,
    /// `--metrics-listen` (`None`: off).
    pub metrics_listen: Option<SocketAddr>,
    /// True when `--metrics-listen` was given: failing to bind it is then an error, not a
    /// warning (another agent on the host holds the default port).
    pub metrics_explicit: bool,
    /// FleetLock over TLS with an operator's certificate: (certificate chain, key) PEM files.
    pub fleetlock_tls: Option<(PathBuf, PathBuf)>,
    /// The CA (PEM file) of FleetLock clients' certificates, which bind ids to machines.
    pub fleetlock_client_ca: Option<PathBuf>,
    /// FleetLock requests per second per source (0: no limit).
    pub fleetlock_rate_limit: u32,
    /// `--fleetlock-min-tolerance`: voters the quorum gate keeps to spare (`None`: off).
    pub fleetlock_min_tolerance: Option<u32>,
    /// `--fleetlock-id`, else Zincati's id derived from /etc/machine-id (`None`: neither).
    pub fleetlock_id: Option<String>,
    /// `--zone`: this machine's failure zone (`None`: not said).
    pub zone: Option<String>,
    /// `--fleetlock-gate`, `--fleetlock-gate-timeout`: the health gates this agent runs when
    /// it leads.
    pub fleetlock_gates: FleetLockGates,
    /// `--snapshot-every`, `--snapshot-keep`, `--snapshot-dir` (`None`: no scheduled snapshots).
    pub snapshots: Option<SnapshotSchedule>,
    /// Settings that work but are probably not what was meant; logged at start.
    pub warnings: Vec<String>,
}

/// `--snapshot-keep` when not given: a day of hourly snapshots.
pub const DEFAULT_SNAPSHOT_KEEP: usize = 24;

/// `--snapshot-every`, `--snapshot-keep`, `--snapshot-dir`: when and where this member takes
/// scheduled snapshots (`snapshots.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSchedule {
    pub every: Duration,
    pub keep: usize,
    pub dir: PathBuf,
}

/// One member of `--initial-cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticMember {
    pub name: String,
    pub addr: String,
}

/// The join secret and where it came from, so a refusal can name the setting to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinSecretSetting {
    pub source: String,
    pub secret: muster_shared::token::JoinSecret,
}

/// The join token and where it came from, so a refusal can name the setting to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinTokenSetting {
    /// `--token`, `MUSTER_JOIN_TOKEN`, `MUSTER_TOKEN` or `token` in the config file.
    pub source: &'static str,
    pub value: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("{setting}: {message}")]
    Invalid {
        setting: &'static str,
        message: String,
    },
    #[error("missing --{0}: set the flag, MUSTER_{1}, or `{2} = …` in the config file")]
    Missing(&'static str, &'static str, &'static str),
}

/// Resolves the configuration. `process_env` is the real environment (passed in for tests).
pub fn resolve(
    flags: &AgentFlags,
    process_env: &HashMap<String, String>,
) -> Result<AgentConfig, ConfigError> {
    let src = sources::Sources::open(flags, process_env)?;
    let mut warnings = Vec::new();
    let me = identity::resolve(&src, &mut warnings)?;
    let start = start::resolve(&src, &me, &mut warnings)?;
    let timing = timing::resolve(&src)?;
    let automation = roles::resolve(&src)?;
    let ports = listeners::resolve(&src, me.listen)?;
    let snapshots = snapshots::resolve(&src, &me.data_dir)?;
    let fleetlock_gates = fleetlock_gates::resolve(&src)?;
    Ok(AgentConfig {
        name: me.name,
        advertise: me.advertise,
        listen: me.listen,
        data_dir: me.data_dir,
        discovery: start.discovery,
        join: start.join,
        token: start.token,
        heartbeat: timing.heartbeat,
        election_timeout: timing.election_timeout,
        promote_after: timing.promote_after,
        cert_validity: timing.cert_validity,
        allow_address_change: start.allow_address_change,
        automation,
        init: start.init,
        initial_cluster: start.initial_cluster,
        join_secret: start.join_secret,
        join_secret_ttl: start.join_secret_ttl,
        ca_pin: start.ca_pin,
        fleetlock_listen: ports.fleetlock_listen,
        fleetlock_explicit: ports.fleetlock_explicit,
        metrics_listen: ports.metrics_listen,
        metrics_explicit: ports.metrics_explicit,
        max_connections: ports.max_connections,
        max_connections_per_source: ports.max_connections_per_source,
        fleetlock_tls: ports.fleetlock_tls,
        fleetlock_client_ca: ports.fleetlock_client_ca,
        fleetlock_rate_limit: ports.fleetlock_rate_limit,
        fleetlock_min_tolerance: roles::fleetlock_min_tolerance(&src)?,
        fleetlock_id: roles::fleetlock_id(&src)?,
        zone: roles::zone(&src)?,
        fleetlock_gates,
        snapshots,
        warnings,
    })
}

/// What to say about a flag given on the command line with an empty value.
pub(super) fn empty_flag_hint(setting: &str) -> String {
    match setting {
        "discovery" => "--discovery is empty. If it came from $(curl <service>/new?size=N), that \
            command failed: is the discovery service running? Mint the URL again and check it is \
            not empty before starting the agents"
            .into(),
        "token" => "--token is empty. If it came from $(muster token create …), that command \
            failed; create the token again on a member and check it is not empty"
            .into(),
        other => format!("--{other} is empty: give it a value, or leave the flag out"),
    }
}

#[cfg(test)]
mod tests;
