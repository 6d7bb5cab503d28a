//! muster: the node agent (`muster agent`) and the operator CLI.
//!
//! # Layout
//!
//! Each module has one job and imports only modules listed below it (CI checks that the import
//! graph has no cycle: `../shared/tools/module-graph agent/src`).
//!
//! | module        | its one job |
//! |---------------|-------------|
//! | `demo`        | `muster demo`: a discovery service and N agents on loopback |
//! | `cli/`        | the operator commands: where a request goes, what is printed |
//! | `apply/`      | `cluster.toml` and the pure plan of `muster plan`/`apply` (quorum-safe order, tolerance arithmetic) |
//! | `start/`      | how this node comes up: `decide` a typed plan, then one file per path (restart, token join, discovery formation, initiation, restore) |
//! | `recover/`    | `muster recover`: a survivor of a lost majority made the only voter, offline (the pure plan, then the store surgery in `raft::recover`) |
//! | `node`        | a started node: raft and its tasks, run until stopped, shutdown order |
//! | `serve/`      | the servers: the mutual-TLS peer listener and the operator socket |
//! | `observe/`    | what monitoring sees: Prometheus metrics, health and readiness, the status page |
//! | `notify`      | systemd's notify protocol: READY=1, STATUS=, WATCHDOG=1 |
//! | `reconcile`   | the leader's reconciler: gather a view, ask `policy::plan`, apply one change |
//! | `report`      | telling the cluster this member's failure zone and agent version when its record differs |
//! | `renew`       | keeping this node's certificate valid, matching its address and its cluster's CAs, without a restart |
//! | `snapshots`   | scheduled snapshots: one backup file per interval on each voter, verified, the oldest pruned; `backup list` |
//! | `watch`       | a node learning of its own removal |
//! | `leader/`     | operations that run on the leader (admission, tokens and their scopes, removal, backup, kv, leases and their clock, FleetLock, status), the dispatcher and the forwarder |
//! | `agent`       | the running node in the parts its modules use, and `Here` |
//! | `leading/`    | what a leader action is given: the `Replica` trait (write, linearizable read, view, clock), leader-local state (with FleetLock's health gates and their recent results), and the in-memory fake its tests use |
//! | `error`       | how an agent run fails, and its exit code |
//! | `logging`     | what the agent logs by default |
//! | `discovery`   | the client of a discovery URL and its retry policy |
//! | `raft/`       | everything that touches openraft: the node facade, network, fjall storage (and `raft::testing`, that storage driven with plain types by its power-cut tests) |
//! | `client`      | the one way to build HTTP clients, read answers and errors, and back off |
//! | `policy/`     | pure membership rules: voter table, reachability, quorum checks, the reconciler's plan, where a joiner starts |
//! | `backup_file` | the backup file format |
//! | `datadir/`    | the data dir: lock, `cluster.json`, TLS files, identity, `peers.json`, private writes |
//! | `config/`     | `muster agent` settings from flags, env and file |
//! | `state/`      | the replicated domain: `ClusterState`, its commands and their checks (kv with revisions, leases, FleetLock, token scopes) |
//! | `api/`        | the HTTP contract: wire shapes, route paths, the error kinds |
//! | `clock`       | wall-clock milliseconds |
//!
//! A request from an operator on a follower travels top to bottom: `serve/operator` →
//! `leader::run` (forwarded to the leader over `client::PeerClients`) → `leader::execute` →
//! `raft::RaftNode::write` → `state::ClusterState::apply`. See docs/architecture.md.

pub(crate) mod agent;
pub(crate) mod api;
pub(crate) mod apply;
pub(crate) mod backup_file;
pub mod cli;
pub(crate) mod client;
pub(crate) mod clock;
pub mod config;
pub(crate) mod datadir;
pub mod demo;
pub(crate) mod discovery;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod leader;
pub(crate) mod leading;
pub(crate) mod listeners;
pub(crate) mod logging;
pub(crate) mod net_error;
pub(crate) mod node;
pub(crate) mod notify;
pub(crate) mod observe;
pub(crate) mod policy;
pub(crate) mod raft;
/// Test support for the raft store's power-cut tests (agent/tests/power_cut_store.rs); not an
/// API.
#[doc(hidden)]
pub use raft::testing as raft_testing;
pub(crate) mod reconcile;
pub(crate) mod recover;
pub(crate) mod renew;
pub(crate) mod report;
pub(crate) mod serve;
pub(crate) mod snapshots;
pub mod start;
pub(crate) mod state;
pub(crate) mod watch;
