//! Route paths of the agent's two HTTP surfaces, shared by the servers and their clients.

/// Raft RPCs between members (mutual TLS).
pub const RAFT_APPEND: &str = "/raft/append";
pub const RAFT_VOTE: &str = "/raft/vote";
pub const RAFT_SNAPSHOT: &str = "/raft/snapshot";
/// Before calling an election, a member asks the voters whether they would vote at all
/// (etcd's pre-vote; see raft/pacemaker.rs).
pub const RAFT_PREVOTE: &str = "/raft/prevote";
/// A leader that hands over asks its successor to call an election now (raft/node/handover.rs).
pub const RAFT_CAMPAIGN: &str = "/raft/campaign";
/// A leader that hands over asks the other voters not to campaign meanwhile (their election
/// timeouts may run out as soon as their leases do; raft/node/handover.rs).
pub const RAFT_HOLD: &str = "/raft/hold";
/// A follower forwarding an operation to the leader (mutual TLS).
pub const FORWARD: &str = "/raft/client";
/// A member asks a peer for its report of itself (version, certificate, data dir), for
/// `muster plan`.
pub const RAFT_PROBE: &str = "/raft/probe";
/// A member asks a peer whether it is still a member (answered `410 removed` if not).
pub const MEMBER_CHECK: &str = "/raft/member";

/// A first-N registrant of the discovery URL joining the initiator (no client certificate).
pub const JOIN: &str = "/v1/join";
/// A node joining with a join token (no client certificate).
pub const TOKEN_JOIN: &str = "/v1/join/token";
/// A machine with the pre-shared join secret and no CA pin asks a member to prove the secret.
pub const SECRET_HELLO: &str = "/v1/join/hello";
/// Liveness of the node's TLS listener (no authentication).
pub const HEALTH: &str = "/v1/health";

/// The operator API (unix socket as is; the TLS port with an operator token).
pub const STATUS: &str = "/v1/status";
pub const KV: &str = "/v1/kv";
pub const KV_LIST: &str = "/v1/kv/list";
pub const KV_WATCH: &str = "/v1/kv/watch";
pub const LEASES: &str = "/v1/leases";
pub const TOKENS: &str = "/v1/tokens";
pub const OPERATOR_TOKENS: &str = "/v1/operator-tokens";
pub const MEMBERS: &str = "/v1/members";
/// `muster leader transfer [NAME]`: the leader hands over (`?to=NAME`, else the first
/// caught-up voter).
pub const LEADER_TRANSFER: &str = "/v1/leader/transfer";
pub const BACKUP: &str = "/v1/backup";
pub const FLEETLOCK: &str = "/v1/fleetlock";
/// The membership repairs' settings (`muster apply`, `muster config export`).
pub const SETTINGS: &str = "/v1/settings";
/// Every member's report of itself, gathered by the member asked (`muster plan`).
pub const PROBE: &str = "/v1/probe";
/// `GET`: the cluster CA and the rotation in progress; `POST …/rotate`: start or finish one.
pub const CA: &str = "/v1/ca";
pub const CA_ROTATE: &str = "/v1/ca/rotate";
pub const FLEETLOCK_GROUPS: &str = "/v1/fleetlock/groups";
pub const FLEETLOCK_RELEASE: &str = "/v1/fleetlock/release";
pub const FLEETLOCK_SETTINGS: &str = "/v1/fleetlock/settings";
/// FleetLock's audit trail, oldest first (`?group=G` for one group).
pub const FLEETLOCK_HISTORY: &str = "/v1/fleetlock/history";

/// The FleetLock protocol (Zincati), on the agent's FleetLock listener.
pub const PRE_REBOOT: &str = "/v1/pre-reboot";
pub const STEADY_STATE: &str = "/v1/steady-state";
/// On every answer to an operator call over TCP: the members' advertise addresses,
/// comma-separated, so that clients keep a current list (`--server A,B,C`).
pub const MEMBERS_HEADER: &str = "muster-members";
/// On every answer to an operator call over TCP: the id of the cluster that answered, so that
/// a client can tell that every answer of one command came from the cluster it meant.
pub const CLUSTER_HEADER: &str = "muster-cluster";
/// Prometheus text (the metrics listener; the operator API with a token).
pub const METRICS: &str = "/metrics";
/// Liveness and readiness, on the metrics listener.
pub const HEALTHZ: &str = "/healthz";
pub const READYZ: &str = "/readyz";
