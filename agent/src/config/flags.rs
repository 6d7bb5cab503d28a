//! The flags of `muster agent`, as clap parses them, and the headings `--help` groups them
//! under. Nothing here is validated: `resolve` merges them with the environment and the file.

use std::path::PathBuf;

use clap::Args;

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
    /// FleetLock's quorum gate: a machine that is a voter gets a reboot slot only while the
    /// other voters, less those unreachable or holding slots, keep a majority with this many
    /// to spare; `off` lets voters reboot whatever the quorum. Give every member the same
    /// value (the leader's decides) [default: 0] [env: MUSTER_FLEETLOCK_MIN_TOLERANCE]
    #[arg(long, help_heading = HELP_ROLES)]
    pub fleetlock_min_tolerance: Option<String>,
    /// The id this machine's Zincati sends FleetLock (its `node_uuid`), so that the quorum
    /// gate knows its locks are this member's; needed only when Zincati's id is not the one it
    /// derives from /etc/machine-id (the default) [env: MUSTER_FLEETLOCK_ID]
    #[arg(long, help_heading = HELP_ROLES)]
    pub fleetlock_id: Option<String>,
    /// The failure zone this machine is in (a rack, a room, a cloud availability zone): the
    /// cluster spreads its voters over zones first, replaces a failed voter from its own zone
    /// and spreads the standbys too. 1 to 63 letters, digits, `.`, `_` or `-`; from cloud
    /// metadata through an EnvironmentFile, e.g. --zone ${AFTERBURN_AWS_AVAILABILITY_ZONE}
    /// [default: none; members without one count as one zone of their own] [env: MUSTER_ZONE]
    #[arg(long, help_heading = HELP_ROLES)]
    pub zone: Option<String>,
    /// A FleetLock health gate, as NAME=prometheus:URL (a Prometheus query or alerts API URL:
    /// passes while no alert fires) or NAME=command:PATH (an absolute path, run with no
    /// arguments and no shell, MUSTER_FLEETLOCK_GROUP and MUSTER_FLEETLOCK_ID set: passes on
    /// exit 0). Repeat for several. The leader runs a group's gates (`muster fleetlock group
    /// set NAME --gate NAME`) before it grants a reboot slot; give every member the same gates,
    /// since any may lead. In the variable: comma-separated [env: MUSTER_FLEETLOCK_GATE]
    #[arg(long, value_name = "NAME=KIND:TARGET", help_heading = HELP_NETWORK)]
    pub fleetlock_gate: Vec<String>,
    /// How long a health gate may take before it counts as refusing (100ms to 20s); a lock
    /// waits at most this much longer for its answer [default: 10s]
    /// [env: MUSTER_FLEETLOCK_GATE_TIMEOUT]
    #[arg(long, help_heading = HELP_NETWORK)]
    pub fleetlock_gate_timeout: Option<String>,

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
    /// time drawn afresh from [F, F+E), F being E less one heartbeat (at least 0.8 E), as etcd
    /// counts it, asks the other voters (pre-vote) and, with a majority, calls an election: a
    /// new leader takes about F to F+E after the old one dies
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
