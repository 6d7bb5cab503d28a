//! `muster agent` configuration from three sources, in this order of precedence:
//! command-line flags > `MUSTER_<FLAG>` environment variables > the TOML file (`--config`).
//!
//! `--env-file` reads a systemd EnvironmentFile (e.g. Flatcar's `/run/metadata/flatcar`). Its
//! variables count as environment variables (the real environment wins over the file), and any
//! value may refer to them as `${NAME}`, so one identical config works on every machine:
//! `--advertise '${COREOS_EC2_IPV4_LOCAL}:7000'`.

mod address;
mod credentials;
mod env_file;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use muster_shared::duration::parse_duration;

use crate::policy::Automation;
use serde::Deserialize;

pub use address::host_of;
use address::{default_listen, listen_warning};
pub(crate) use address::{validate_host_port, validate_name};
use credentials::{ca_pin, join_secret, join_token, truthy};
pub use env_file::{EnvFileError, expand, read_env_file};

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

/// The headings `muster agent --help` groups its flags under.
pub const HELP_START: &str = "Start: form, join or restart";
pub const HELP_NETWORK: &str = "Network";
pub const HELP_ROLES: &str = "Roles: voters, standbys, spares";
pub const HELP_TIMING: &str = "Timing";
pub const HELP_TLS: &str = "TLS";
pub const HELP_OBSERVABILITY: &str = "Observability";
pub const HELP_SNAPSHOTS: &str = "Scheduled snapshots";

/// Flags of `muster agent`. Every one is optional here: defaults are applied after merging.
/// Grouped for `--help` under the `HELP_*` headings, in this order.
#[derive(Debug, Clone, Default, Args)]
pub struct AgentFlags {
    /// This node's name, unique in the cluster [env: MUSTER_NAME]
    #[arg(long, help_heading = HELP_START)]
    pub name: Option<String>,
    /// Where this node keeps its state [default: /var/lib/muster] [env: MUSTER_DATA_DIR]
    #[arg(long, help_heading = HELP_START)]
    pub data_dir: Option<PathBuf>,
    /// Discovery URL from `curl <discovery-service>/new?size=N` [env: MUSTER_DISCOVERY]
    #[arg(long, help_heading = HELP_START)]
    pub discovery: Option<String>,
    /// Existing members to join through, host:port[,host:port…]; used with --token or the
    /// join secret [env: MUSTER_JOIN]
    #[arg(long, help_heading = HELP_START)]
    pub join: Option<String>,
    /// Join token (K1.…) from `muster token create` on a member. With --join, join through
    /// those members; with --discovery, join if the URL formed without this node
    /// [env: MUSTER_JOIN_TOKEN]
    #[arg(long, help_heading = HELP_START)]
    pub token: Option<String>,
    /// Form a new one-node cluster on this machine (its CA, cluster id and an operator token,
    /// printed once); other machines then join it with a join token or the join secret. Refused
    /// on a data dir that already holds a cluster [env: MUSTER_INIT=true]
    #[arg(long, help_heading = HELP_START)]
    pub init: bool,
    /// Static bootstrap, no discovery service: every member as NAME=HOST:PORT, comma-separated,
    /// the same on every machine, with --join-secret-file. The first name (in byte order)
    /// creates the cluster and the others join it [env: MUSTER_INITIAL_CLUSTER]
    #[arg(long, help_heading = HELP_START)]
    pub initial_cluster: Option<String>,
    /// File holding the pre-shared join secret (from `muster secret generate`), the same on
    /// every machine: it admits machines with no token. Only its owner may read it (mode 0600;
    /// otherwise refused, as ssh refuses such a key). Or give the secret itself in
    /// MUSTER_JOIN_SECRET (never as a flag: `ps` shows flags) [env: MUSTER_JOIN_SECRET_FILE]
    #[arg(long, help_heading = HELP_START)]
    pub join_secret_file: Option<PathBuf>,
    /// How long the join secret admits machines, counted from formation, e.g. 30d [default:
    /// no expiry; revoke it with `muster token revoke`] [env: MUSTER_JOIN_SECRET_TTL]
    #[arg(long, help_heading = HELP_START)]
    pub join_secret_ttl: Option<String>,
    /// The cluster CA's pin (64 hex, as in a join token) for a machine that joins with the join
    /// secret through a discovery service reached over plain HTTP: trust this pin, not the
    /// discovery record's [env: MUSTER_CA_PIN]
    #[arg(long, help_heading = HELP_START)]
    pub ca_pin: Option<String>,
    /// TOML file with any of these settings [default: /etc/muster/agent.toml if it exists]
    /// [env: MUSTER_CONFIG]
    #[arg(long, help_heading = HELP_START)]
    pub config: Option<PathBuf>,
    /// systemd EnvironmentFile whose variables ${VAR} in other settings may use
    /// [env: MUSTER_ENV_FILE]
    #[arg(long, help_heading = HELP_START)]
    pub env_file: Option<PathBuf>,

    /// host:port other nodes use to reach this one; ${VAR} expands from the env file
    /// [env: MUSTER_ADVERTISE]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub advertise: Option<String>,
    /// Address to listen on for node-to-node and operator traffic [default: 0.0.0.0 with
    /// --advertise's port; the advertised address itself when that is a loopback address]
    /// [env: MUSTER_LISTEN]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub listen: Option<String>,
    /// Let this member start with an --advertise that differs from the address it joined with
    /// (a re-created VM, a new IP): it asks the leader to record the new address, gets a
    /// certificate for it, and its peers dial it there. Without it such a start is refused
    /// (`muster node set-address` moves a running member instead)
    /// [env: MUSTER_ALLOW_ADDRESS_CHANGE=true]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub allow_address_change: bool,
    /// Most connections the node port holds open at once; one more is closed before its TLS
    /// handshake [default: 4096] [env: MUSTER_MAX_CONNECTIONS]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub max_connections: Option<String>,
    /// Most connections from one IP address at once (members keep a few to each peer; a
    /// runaway client cannot take the rest) [default: 256]
    /// [env: MUSTER_MAX_CONNECTIONS_PER_SOURCE]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub max_connections_per_source: Option<String>,
    /// Where this agent answers FleetLock (Zincati's reboot coordination) and serves /metrics,
    /// plain HTTP; `off` to disable [default: 127.0.0.1:7902, so the machine's own Zincati
    /// reaches it; apart from node ports, which the docs number from 7000] [env:
    /// MUSTER_FLEETLOCK_LISTEN]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub fleetlock_listen: Option<String>,
    /// FleetLock requests per second from one source address (IPv6: /64), with twice that as
    /// a burst; more are answered 429; 0 for no limit [default: 10]
    /// [env: MUSTER_FLEETLOCK_RATE_LIMIT]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub fleetlock_rate_limit: Option<String>,

    /// How many members beyond the voters replicate the log, ready to be promoted when a voter
    /// fails (standbys); every further member is a spare: it serves the operator API,
    /// FleetLock and leases by forwarding to the leader but does not replicate
    /// [default: 2] [env: MUSTER_STANDBYS]
    #[arg(long, help_heading = HELP_ROLES)]
    pub standbys: Option<String>,
    /// How long a new standby must have been in the configuration (and caught up) before the
    /// leader may make it a voter [default: 3s] [env: MUSTER_PROMOTE_AFTER]
    #[arg(long, help_heading = HELP_ROLES)]
    pub promote_after: Option<String>,
    /// A voter the leader has not heard from this long is demoted to standby when a
    /// reachable, caught-up standby can take its place (which is then promoted); `0` turns
    /// replacement off [default: 30s] [env: MUSTER_REPLACE_AFTER]
    #[arg(long, help_heading = HELP_ROLES)]
    pub replace_after: Option<String>,
    /// A member the leader has not heard from this long is removed, as `muster node remove`
    /// would (a machine that comes back is refused); `0` turns cleanup off
    /// [default: 10m] [env: MUSTER_CLEANUP_DEAD_AFTER]
    #[arg(long, help_heading = HELP_ROLES)]
    pub cleanup_dead_after: Option<String>,
    /// Automatic cleanup never leaves fewer members than this [default: 3]
    /// [env: MUSTER_MIN_VOTERS]
    #[arg(long, help_heading = HELP_ROLES)]
    pub min_voters: Option<String>,

    /// Raft heartbeat interval [default: 50ms] [env: MUSTER_HEARTBEAT]
    #[arg(long, help_heading = HELP_TIMING)]
    pub heartbeat: Option<String>,
    /// Election timeout E, at least twice --heartbeat. A voter that hears from no leader for a
    /// time drawn afresh from [E, 2E) asks the other voters (pre-vote) and, with a majority,
    /// calls an election: a new leader takes about E to 2E after the old one dies
    /// [default: 200ms] [env: MUSTER_ELECTION_TIMEOUT]
    #[arg(long, help_heading = HELP_TIMING)]
    pub election_timeout: Option<String>,

    /// How long the node certificates this node's CA issues are valid (as the leader, for
    /// joins and renewals; as the initiator, for its own). Every member renews its own when
    /// two thirds have passed, without a restart [default: 365d] [env: MUSTER_CERT_VALIDITY]
    #[arg(long, help_heading = HELP_TLS)]
    pub cert_validity: Option<String>,
    /// Serve FleetLock over TLS with this certificate chain (PEM), for Zincati on other machines;
    /// needs --fleetlock-tls-key [env: MUSTER_FLEETLOCK_TLS_CERT]
    #[arg(long, help_heading = HELP_TLS)]
    pub fleetlock_tls_cert: Option<String>,
    /// The private key (PEM) of --fleetlock-tls-cert [env: MUSTER_FLEETLOCK_TLS_KEY]
    #[arg(long, help_heading = HELP_TLS)]
    pub fleetlock_tls_key: Option<String>,
    /// CA certificates (PEM) of the machines' client certificates on FleetLock over TLS: a
    /// client then locks and unlocks only the ids its certificate names (CN or DNS SAN)
    /// [env: MUSTER_FLEETLOCK_TLS_CLIENT_CA]
    #[arg(long, help_heading = HELP_TLS)]
    pub fleetlock_tls_client_ca: Option<String>,

    /// Where this agent serves Prometheus /metrics, /healthz, /readyz and its status page at /,
    /// plain HTTP without authentication; `off` to disable (the operator port serves /metrics
    /// too, with an operator token) [default: 127.0.0.1:7903] [env: MUSTER_METRICS_LISTEN]
    #[arg(long, help_heading = HELP_OBSERVABILITY)]
    pub metrics_listen: Option<String>,

    /// Take a snapshot this often while this member is a voter: the committed cluster state,
    /// as `muster backup` writes it, into --snapshot-dir (1s to 30d; e.g. 1h) [default: off]
    /// [env: MUSTER_SNAPSHOT_EVERY]
    #[arg(long, help_heading = HELP_SNAPSHOTS)]
    pub snapshot_every: Option<String>,
    /// How many scheduled snapshots to keep; the oldest beyond that are deleted (1 to 10000)
    /// [default: 24] [env: MUSTER_SNAPSHOT_KEEP]
    #[arg(long, help_heading = HELP_SNAPSHOTS)]
    pub snapshot_keep: Option<String>,
    /// Where scheduled snapshots go (mode 0600 files: they hold the CA key); best on another
    /// disk than --data-dir [default: <data-dir>/snapshots] [env: MUSTER_SNAPSHOT_DIR]
    #[arg(long, help_heading = HELP_SNAPSHOTS)]
    pub snapshot_dir: Option<PathBuf>,
}

/// The TOML file: the same settings, spelled with underscores (`data_dir = "/var/lib/muster"`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    name: Option<String>,
    advertise: Option<String>,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    discovery: Option<String>,
    join: Option<String>,
    token: Option<String>,
    env_file: Option<PathBuf>,
    heartbeat: Option<String>,
    election_timeout: Option<String>,
    promote_after: Option<String>,
    replace_after: Option<String>,
    cleanup_dead_after: Option<String>,
    min_voters: Option<u32>,
    standbys: Option<u32>,
    max_connections: Option<u32>,
    max_connections_per_source: Option<u32>,
    cert_validity: Option<String>,
    allow_address_change: Option<bool>,
    init: Option<bool>,
    initial_cluster: Option<String>,
    join_secret_file: Option<PathBuf>,
    join_secret_ttl: Option<String>,
    ca_pin: Option<String>,
    fleetlock_listen: Option<String>,
    metrics_listen: Option<String>,
    fleetlock_tls_cert: Option<String>,
    fleetlock_tls_key: Option<String>,
    fleetlock_tls_client_ca: Option<String>,
    fleetlock_rate_limit: Option<u32>,
    snapshot_every: Option<String>,
    snapshot_keep: Option<u32>,
    snapshot_dir: Option<PathBuf>,
}

/// True when listeners on `a` and `b` cannot both be bound: one port, and the same address or
/// a wildcard on either side.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

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
    // The config file and env file can themselves come from flags or env.
    let config_path = flags
        .config
        .clone()
        .or_else(|| process_env.get("MUSTER_CONFIG").map(PathBuf::from));
    let file = match &config_path {
        Some(path) => read_file_config(path)?,
        None if Path::new(DEFAULT_CONFIG).exists() => read_file_config(Path::new(DEFAULT_CONFIG))?,
        None => FileConfig::default(),
    };
    let env_file = flags
        .env_file
        .clone()
        .or_else(|| process_env.get("MUSTER_ENV_FILE").map(PathBuf::from))
        .or(file.env_file.clone());
    let mut env = match &env_file {
        Some(path) => read_env_file(path)?,
        None => HashMap::new(),
    };
    // The real environment wins over the env file.
    env.extend(process_env.iter().map(|(k, v)| (k.clone(), v.clone())));

    // An empty value in the environment or the file counts as unset: `MUSTER_DISCOVERY=` in a
    // unit file or compose file must not stop a formed member from restarting. An empty value
    // on the command line is a mistake, though: `--discovery "$URL"` with an empty `$URL` means
    // the command that minted it failed, and silently ignoring it hides that.
    let pick = |setting: &'static str,
                flag: &Option<String>,
                var: &str,
                file: &Option<String>|
     -> Result<Option<String>, ConfigError> {
        if let Some(v) = flag
            && v.trim().is_empty()
        {
            return Err(ConfigError::Invalid {
                setting,
                message: empty_flag_hint(setting),
            });
        }
        let set = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        Ok(set(flag.clone())
            .or_else(|| set(env.get(var).cloned()))
            .or_else(|| set(file.clone())))
    };
    let expand_opt =
        |setting: &'static str, v: Option<String>| -> Result<Option<String>, ConfigError> {
            v.map(|v| {
                expand(&v, &env).map_err(|e| ConfigError::Invalid {
                    setting,
                    message: e.to_string(),
                })
            })
            .transpose()
        };
    let mut warnings = Vec::new();

    let name = expand_opt(
        "name",
        pick("name", &flags.name, "MUSTER_NAME", &file.name)?,
    )?
    .ok_or(ConfigError::Missing("name", "NAME", "name"))?;
    validate_name(&name)?;
    let advertise = expand_opt(
        "advertise",
        pick(
            "advertise",
            &flags.advertise,
            "MUSTER_ADVERTISE",
            &file.advertise,
        )?,
    )?
    .ok_or(ConfigError::Missing("advertise", "ADVERTISE", "advertise"))?;
    validate_host_port("advertise", &advertise)?;
    let listen = match expand_opt(
        "listen",
        pick("listen", &flags.listen, "MUSTER_LISTEN", &file.listen)?,
    )? {
        Some(raw) => {
            let listen: SocketAddr = raw.parse().map_err(|_| ConfigError::Invalid {
                setting: "listen",
                message: format!("{raw:?} is not an IP:port such as 0.0.0.0:7000"),
            })?;
            if let Some(warning) = listen_warning(listen, &advertise) {
                warnings.push(warning);
            }
            listen
        }
        None => default_listen(&advertise)?,
    };
    let data_dir = flags
        .data_dir
        .clone()
        .or_else(|| env.get("MUSTER_DATA_DIR").map(PathBuf::from))
        .or(file.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let discovery = expand_opt(
        "discovery",
        pick(
            "discovery",
            &flags.discovery,
            "MUSTER_DISCOVERY",
            &file.discovery,
        )?,
    )?;
    if let Some(url) = &discovery
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(ConfigError::Invalid {
            setting: "discovery",
            message: format!(
                "{url:?} is not a discovery URL; mint one with curl <service>/new?size=3"
            ),
        });
    }
    let join: Vec<String> = expand_opt(
        "join",
        pick("join", &flags.join, "MUSTER_JOIN", &file.join)?,
    )?
    .map(|j| {
        j.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
    .unwrap_or_default();
    for peer in &join {
        validate_host_port("join", peer)?;
    }
    let token = join_token(flags, &env, &file, &mut warnings)?
        .map(|(source, raw)| {
            expand(&raw, &env)
                .map(|value| JoinTokenSetting { source, value })
                .map_err(|e| ConfigError::Invalid {
                    setting: "token",
                    message: e.to_string(),
                })
        })
        .transpose()?;
    let heartbeat = duration_setting(
        "heartbeat",
        expand_opt(
            "heartbeat",
            pick(
                "heartbeat",
                &flags.heartbeat,
                "MUSTER_HEARTBEAT",
                &file.heartbeat,
            )?,
        )?,
        "50ms",
    )?;
    let election_timeout = duration_setting(
        "election-timeout",
        expand_opt(
            "election-timeout",
            pick(
                "election-timeout",
                &flags.election_timeout,
                "MUSTER_ELECTION_TIMEOUT",
                &file.election_timeout,
            )?,
        )?,
        "200ms",
    )?;
    if election_timeout < heartbeat * 2 {
        return Err(ConfigError::Invalid {
            setting: "election-timeout",
            message: format!(
                "{election_timeout:?} must be at least twice the heartbeat ({heartbeat:?}), or leaders flap"
            ),
        });
    }
    let promote_after = match expand_opt(
        "promote-after",
        pick(
            "promote-after",
            &flags.promote_after,
            "MUSTER_PROMOTE_AFTER",
            &file.promote_after,
        )?,
    )? {
        None => DEFAULT_PROMOTE_AFTER,
        Some(raw) => {
            let d = parse_duration(&raw).map_err(|e| ConfigError::Invalid {
                setting: "promote-after",
                message: e.to_string(),
            })?;
            if d > MAX_PROMOTE_AFTER {
                return Err(ConfigError::Invalid {
                    setting: "promote-after",
                    message: format!("{raw} is more than 1h"),
                });
            }
            d
        }
    };
    let optional_duration = |setting: &'static str, raw: Option<String>, default: Duration| {
        let Some(raw) = raw else {
            return Ok(Some(default));
        };
        let d = parse_duration(&raw).map_err(|e| ConfigError::Invalid {
            setting,
            message: format!("{e}; `0` turns it off"),
        })?;
        if d.is_zero() {
            return Ok(None);
        }
        if d < Duration::from_secs(1) || d > Duration::from_secs(30 * 24 * 3600) {
            return Err(ConfigError::Invalid {
                setting,
                message: format!("{raw} is not between 1s and 30d (or 0 for off)"),
            });
        }
        Ok(Some(d))
    };
    let replace_after = optional_duration(
        "replace-after",
        expand_opt(
            "replace-after",
            pick(
                "replace-after",
                &flags.replace_after,
                "MUSTER_REPLACE_AFTER",
                &file.replace_after,
            )?,
        )?,
        Automation::DEFAULT_REPLACE_AFTER,
    )?;
    let cleanup_dead_after = optional_duration(
        "cleanup-dead-after",
        expand_opt(
            "cleanup-dead-after",
            pick(
                "cleanup-dead-after",
                &flags.cleanup_dead_after,
                "MUSTER_CLEANUP_DEAD_AFTER",
                &file.cleanup_dead_after,
            )?,
        )?,
        Automation::DEFAULT_CLEANUP_DEAD_AFTER,
    )?;
    let count = |setting: &'static str,
                 flag: &Option<String>,
                 var: &str,
                 file: Option<u32>,
                 default: usize,
                 range: std::ops::RangeInclusive<usize>| {
        let raw = expand_opt(
            setting,
            pick(setting, flag, var, &file.map(|n| n.to_string()))?,
        )?;
        let Some(raw) = raw else {
            return Ok(default);
        };
        match raw.trim().parse::<usize>() {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(ConfigError::Invalid {
                setting,
                message: format!(
                    "{raw:?} is not a whole number from {} to {}",
                    range.start(),
                    range.end()
                ),
            }),
        }
    };
    let min_voters = count(
        "min-voters",
        &flags.min_voters,
        "MUSTER_MIN_VOTERS",
        file.min_voters,
        Automation::DEFAULT_MIN_VOTERS,
        1..=7,
    )?;
    let standbys = count(
        "standbys",
        &flags.standbys,
        "MUSTER_STANDBYS",
        file.standbys,
        Automation::DEFAULT_STANDBYS,
        0..=100,
    )?;
    let max_connections = count(
        "max-connections",
        &flags.max_connections,
        "MUSTER_MAX_CONNECTIONS",
        file.max_connections,
        DEFAULT_MAX_CONNECTIONS,
        16..=1_000_000,
    )?;
    let max_connections_per_source = count(
        "max-connections-per-source",
        &flags.max_connections_per_source,
        "MUSTER_MAX_CONNECTIONS_PER_SOURCE",
        file.max_connections_per_source,
        DEFAULT_MAX_CONNECTIONS_PER_SOURCE,
        4..=1_000_000,
    )?;
    let fleetlock_rate_limit = count(
        "fleetlock-rate-limit",
        &flags.fleetlock_rate_limit,
        "MUSTER_FLEETLOCK_RATE_LIMIT",
        file.fleetlock_rate_limit,
        DEFAULT_FLEETLOCK_RATE_LIMIT,
        0..=1_000_000,
    )? as u32;
    let snapshot_every = optional_duration(
        "snapshot-every",
        expand_opt(
            "snapshot-every",
            pick(
                "snapshot-every",
                &flags.snapshot_every,
                "MUSTER_SNAPSHOT_EVERY",
                &file.snapshot_every,
            )?,
        )?,
        // Off unless asked for: the default stands for "off" here.
        Duration::ZERO,
    )?
    .filter(|d| !d.is_zero());
    let snapshot_keep = count(
        "snapshot-keep",
        &flags.snapshot_keep,
        "MUSTER_SNAPSHOT_KEEP",
        file.snapshot_keep,
        DEFAULT_SNAPSHOT_KEEP,
        1..=10_000,
    )?;
    let snapshot_dir = flags
        .snapshot_dir
        .clone()
        .or_else(|| env.get("MUSTER_SNAPSHOT_DIR").map(PathBuf::from))
        .or(file.snapshot_dir.clone())
        .unwrap_or_else(|| data_dir.join("snapshots"));
    let snapshots = snapshot_every.map(|every| SnapshotSchedule {
        every,
        keep: snapshot_keep,
        dir: snapshot_dir,
    });
    let automation = Automation {
        replace_after,
        cleanup_dead_after,
        min_voters,
        standbys,
    };
    let init = flags.init
        || env.get("MUSTER_INIT").is_some_and(|v| truthy(v))
        || file.init.unwrap_or(false);
    let allow_address_change = flags.allow_address_change
        || env
            .get("MUSTER_ALLOW_ADDRESS_CHANGE")
            .is_some_and(|v| truthy(v))
        || file.allow_address_change.unwrap_or(false);
    let cert_validity = match expand_opt(
        "cert-validity",
        pick(
            "cert-validity",
            &flags.cert_validity,
            "MUSTER_CERT_VALIDITY",
            &file.cert_validity,
        )?,
    )? {
        None => DEFAULT_CERT_VALIDITY,
        Some(raw) => {
            let d = parse_duration(&raw).map_err(|e| ConfigError::Invalid {
                setting: "cert-validity",
                message: e.to_string(),
            })?;
            if !(MIN_CERT_VALIDITY..=MAX_CERT_VALIDITY).contains(&d) {
                return Err(ConfigError::Invalid {
                    setting: "cert-validity",
                    message: format!(
                        "{raw} is not between 10s and 3650d (a certificate renews itself at two \
                         thirds of its lifetime; it cannot outlive the CA's ten years)"
                    ),
                });
            }
            d
        }
    };
    let initial_cluster = expand_opt(
        "initial-cluster",
        pick(
            "initial-cluster",
            &flags.initial_cluster,
            "MUSTER_INITIAL_CLUSTER",
            &file.initial_cluster,
        )?,
    )?
    .map(|list| parse_initial_cluster(&list, &name, &advertise))
    .transpose()?
    .unwrap_or_default();
    let join_secret = join_secret(flags, &env, &file)?;
    let join_secret_ttl = expand_opt(
        "join-secret-ttl",
        pick(
            "join-secret-ttl",
            &flags.join_secret_ttl,
            "MUSTER_JOIN_SECRET_TTL",
            &file.join_secret_ttl,
        )?,
    )?
    .map(|raw| {
        parse_duration(&raw).map_err(|e| ConfigError::Invalid {
            setting: "join-secret-ttl",
            message: e.to_string(),
        })
    })
    .transpose()?;
    let ca_pin = ca_pin(expand_opt(
        "ca-pin",
        pick("ca-pin", &flags.ca_pin, "MUSTER_CA_PIN", &file.ca_pin)?,
    )?)?;
    let fleetlock_setting = expand_opt(
        "fleetlock-listen",
        pick(
            "fleetlock-listen",
            &flags.fleetlock_listen,
            "MUSTER_FLEETLOCK_LISTEN",
            &file.fleetlock_listen,
        )?,
    )?;
    let fleetlock_explicit = fleetlock_setting.is_some();
    let fleetlock_listen = match fleetlock_setting.as_deref().map(str::trim) {
        Some("off") => None,
        Some(addr) => Some(
            addr.parse::<SocketAddr>()
                .map_err(|_| ConfigError::Invalid {
                    setting: "fleetlock-listen",
                    message: format!("{addr:?} is not an IP:port such as 127.0.0.1:7902, or `off`"),
                })?,
        ),
        None => Some(SocketAddr::from(([127, 0, 0, 1], DEFAULT_FLEETLOCK_PORT))),
    };
    let metrics_setting = expand_opt(
        "metrics-listen",
        pick(
            "metrics-listen",
            &flags.metrics_listen,
            "MUSTER_METRICS_LISTEN",
            &file.metrics_listen,
        )?,
    )?;
    let metrics_explicit = metrics_setting.is_some();
    let metrics_listen = match metrics_setting.as_deref().map(str::trim) {
        Some("off") => None,
        Some(addr) => Some(
            addr.parse::<SocketAddr>()
                .map_err(|_| ConfigError::Invalid {
                    setting: "metrics-listen",
                    message: format!("{addr:?} is not an IP:port such as 127.0.0.1:7903, or `off`"),
                })?,
        ),
        None => Some(SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT))),
    };
    // One process cannot open two listeners on one port: say which two before binding fails.
    let taken = [
        ("fleetlock-listen", fleetlock_listen, "FleetLock"),
        ("metrics-listen", metrics_listen, "metrics"),
    ];
    for (setting, addr, what) in taken {
        if let Some(addr) = addr
            && overlaps(addr, listen)
        {
            return Err(ConfigError::Invalid {
                setting,
                message: format!(
                    "{what} at {addr} would share port {} with this agent's node port ({listen}); \
                     give --{setting} another port, or off",
                    addr.port()
                ),
            });
        }
    }
    if let (Some(f), Some(m)) = (fleetlock_listen, metrics_listen)
        && overlaps(f, m)
    {
        return Err(ConfigError::Invalid {
            setting: "metrics-listen",
            message: format!(
                "metrics at {m} would share port {} with FleetLock ({f}); give --metrics-listen \
                 or --fleetlock-listen another port",
                m.port()
            ),
        });
    }
    let fleetlock_tls = match (
        pick(
            "fleetlock-tls-cert",
            &flags.fleetlock_tls_cert,
            "MUSTER_FLEETLOCK_TLS_CERT",
            &file.fleetlock_tls_cert,
        )?,
        pick(
            "fleetlock-tls-key",
            &flags.fleetlock_tls_key,
            "MUSTER_FLEETLOCK_TLS_KEY",
            &file.fleetlock_tls_key,
        )?,
    ) {
        (None, None) => None,
        (Some(cert), Some(key)) if fleetlock_listen.is_some() => {
            Some((PathBuf::from(cert), PathBuf::from(key)))
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid {
                setting: "fleetlock-tls-cert",
                message: "FleetLock is off (--fleetlock-listen off); drop the TLS files or \
                          give a listen address"
                    .into(),
            });
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(ConfigError::Invalid {
                setting: "fleetlock-tls-cert",
                message: "FleetLock over TLS needs both --fleetlock-tls-cert and \
                          --fleetlock-tls-key"
                    .into(),
            });
        }
    };
    let fleetlock_client_ca = pick(
        "fleetlock-tls-client-ca",
        &flags.fleetlock_tls_client_ca,
        "MUSTER_FLEETLOCK_TLS_CLIENT_CA",
        &file.fleetlock_tls_client_ca,
    )?
    .map(PathBuf::from);
    if fleetlock_client_ca.is_some() && fleetlock_tls.is_none() {
        return Err(ConfigError::Invalid {
            setting: "fleetlock-tls-client-ca",
            message: "client certificates need FleetLock over TLS: give --fleetlock-tls-cert \
                      and --fleetlock-tls-key too"
                .into(),
        });
    }
    if init && (discovery.is_some() || !join.is_empty() || !initial_cluster.is_empty()) {
        return Err(ConfigError::Invalid {
            setting: "init",
            message: "--init forms a new cluster on this machine alone; drop --discovery, --join \
                      and --initial-cluster (other machines join it with a token or the join \
                      secret)"
                .into(),
        });
    }
    if !initial_cluster.is_empty() && join_secret.is_none() {
        return Err(ConfigError::Invalid {
            setting: "initial-cluster",
            message: "a static bootstrap needs the join secret on every machine: \
                      --join-secret-file F with a secret from `muster secret generate` (it \
                      proves each machine to the others)"
                .into(),
        });
    }
    Ok(AgentConfig {
        name,
        advertise,
        listen,
        data_dir,
        discovery,
        join,
        token,
        heartbeat,
        election_timeout,
        promote_after,
        cert_validity,
        allow_address_change,
        automation,
        init,
        initial_cluster,
        join_secret,
        join_secret_ttl,
        ca_pin,
        fleetlock_listen,
        fleetlock_explicit,
        metrics_listen,
        metrics_explicit,
        max_connections,
        max_connections_per_source,
        fleetlock_tls,
        fleetlock_client_ca,
        fleetlock_rate_limit,
        snapshots,
        warnings,
    })
}

/// Parses `--initial-cluster NAME=HOST:PORT,…`: valid, distinct names and addresses, and this
/// node among them at its advertised address.
fn parse_initial_cluster(
    list: &str,
    me: &str,
    advertise: &str,
) -> Result<Vec<StaticMember>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: "initial-cluster",
        message,
    };
    let mut members: Vec<StaticMember> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, addr) = entry
            .split_once('=')
            .ok_or_else(|| invalid(format!("{entry:?} is not NAME=HOST:PORT")))?;
        validate_name(name)?;
        validate_host_port("initial-cluster", addr)?;
        if members.iter().any(|m| m.name == name || m.addr == addr) {
            return Err(invalid(format!("{entry:?} repeats a name or an address")));
        }
        members.push(StaticMember {
            name: name.into(),
            addr: addr.into(),
        });
    }
    match members.iter().find(|m| m.name == me) {
        None => Err(invalid(format!(
            "this machine ({me}) is not in the list. To add it to the cluster those machines \
             formed, give it the join secret and one of them to join through: muster agent \
             --name {me} --advertise {advertise} --join {} --join-secret-file F",
            members.first().map_or("HOST:PORT", |m| m.addr.as_str())
        ))),
        Some(m) if m.addr != advertise => Err(invalid(format!(
            "the list has {me} at {}, but --advertise is {advertise}; they must match",
            m.addr
        ))),
        Some(_) => Ok(members),
    }
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

fn duration_setting(
    setting: &'static str,
    value: Option<String>,
    default: &str,
) -> Result<Duration, ConfigError> {
    let raw = value.unwrap_or_else(|| default.to_string());
    let d = parse_duration(&raw).map_err(|e| ConfigError::Invalid {
        setting,
        message: e.to_string(),
    })?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(60) {
        return Err(ConfigError::Invalid {
            setting,
            message: format!("{raw} is not between 10ms and 60s"),
        });
    }
    Ok(d)
}

fn read_file_config(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
