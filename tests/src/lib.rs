//! Test harness: start real `muster-discovery`, `etcd` and `muster agent` processes on loopback
//! with temp data dirs, talk to them over HTTP and the operator API, build clusters, and poll
//! for conditions with deadlines.
//!
//! One file per job: [`process`] the child-process type every wrapper is built on,
//! [`discovery`], [`etcd`], [`etcd_discovery`] (discovery.etcd.io) and [`agent`] the wrappers, [`http`] plain HTTP, [`operator`] the
//! operator API, [`cluster`] cluster builders, [`wait`] deadlines, [`ports`] ports and
//! [`prereq`] missing prerequisites, [`exclusive`] one heavy test at a time, [`zincati`]
//! FleetLock requests as Zincati sends them. Everything is
//! re-exported here, so suites import from the crate root.
//!
//! Binaries are found next to the running test or bench executable (`target/<profile>/`), or in
//! `$MUSTER_BIN_DIR`. `cargo test --workspace` builds them before any test runs.

pub mod agent;
pub mod cluster;
pub mod discovery;
pub mod doc_blocks;
pub mod etcd;
pub mod etcd_cluster;
pub mod etcd_discovery;
pub mod exclusive;
pub mod history;
pub mod http;
pub mod netns;
pub mod operator;
pub mod peer_client;
pub mod ports;
pub mod powercut;
pub mod prereq;
pub mod process;
pub mod readme_script;
pub mod terminal;
pub mod v3_client;
pub mod wait;
pub mod workload;
pub mod zincati;

pub use agent::{AgentProc, CLI_TIMEOUT, clear_muster_env, run_muster};
pub use cluster::{
    form, form_through_discovery, init_and_join, init_and_join_binary, init_and_join_with,
    leader_view, refs, start_bare_through, voter_target, wait_formed,
};
pub use discovery::{Discovery, discovery_store_is_etcd, token_of};
pub use etcd::{Etcd, etcd_binary};
pub use http::{
    CONNECT_TIMEOUT, HTTP_TIMEOUT, Reply, WATCH_TIMEOUT, get, get_with, http_client, put_form, raw,
    register, urlencode,
};
pub use operator::{ApiReply, OperatorApi, Writer};
pub use ports::free_port;
pub use prereq::{env_truthy, missing_prerequisite, skip_allowed};
pub use process::{Process, bin_path, signal, tail};
pub use wait::{poll_until, wait_for};
pub use zincati::{PRE_REBOOT, STEADY_STATE, zincati};
