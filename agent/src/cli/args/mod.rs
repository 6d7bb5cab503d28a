//! The command line of `muster`: every subcommand and flag, with the help text that teaches
//! it. `cli::run` carries a parsed command out.
//!
//! Here: the top level (`Cli`, `Command`) and the flags many commands share (`OperatorArgs`,
//! `ApplyFlags`). Each family's subcommands are in a file of its own: `credentials.rs` (join
//! and operator tokens, the join secret), `cluster.rs` (membership, backups, certificates, the
//! cluster's config) and `services.rs` (key-value, leases, FleetLock).

mod cluster;
mod credentials;
mod services;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use self::cluster::{
    BackupCommand, CaCommand, CertCommand, ConfigCommand, LeaderCommand, NodeCommand,
};
pub use self::credentials::{OperatorTokenCommand, SecretCommand, TokenCommand};
pub use self::services::{FleetlockCommand, FleetlockGroupCommand, KvCommand, LeaseCommand};

use super::{CliError, Target};
use crate::config::AgentFlags;

#[derive(Parser)]
#[command(
    name = "muster",
    version,
    about = "Muster: identical machines form one raft cluster through a discovery URL",
    long_about = "Muster turns freshly booted machines into one healthy raft cluster.\n\n\
Form a cluster: mint a URL (curl <discovery-service>/new?size=3) and start every machine with\n\
    muster agent --name $(hostname) --advertise <ip>:7000 --discovery <URL>\n\
Add a machine later: on a member run `muster token create`, then on the new machine\n\
    muster agent --name $(hostname) --advertise <ip>:7000 --join <member>:7000 --token <TOKEN>\n\
Then, on any member:\n\
    muster status          who leads, who votes, who is reachable\n\
    muster kv put k v      a replicated write\n\
Operator commands talk to the local agent's socket (--data-dir), or to any member over TCP\n\
with --server HOST:PORT and an operator token in MUSTER_OPERATOR_TOKEN."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the node agent (the daemon).
    Agent(AgentFlags),
    /// Show the cluster: leader, term, members and their suffrage.
    Status(OperatorArgs),
    /// List the members (the member table of `status`).
    Members(OperatorArgs),
    /// Join tokens: create one for each machine (or a group), list them, revoke them.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Operator tokens for operator commands over TCP (--server with MUSTER_OPERATOR_TOKEN).
    #[command(name = "operator-token")]
    OperatorToken {
        #[command(subcommand)]
        command: OperatorTokenCommand,
    },
    /// Membership changes.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// The leader: hand it over to another voter before maintenance.
    Leader {
        #[command(subcommand)]
        command: LeaderCommand,
    },
    /// Write a consistent, checksummed copy of the committed cluster state to FILE (mode 0600:
    /// it holds the cluster CA's private key).
    /// `muster backup list` lists the scheduled snapshots (--snapshot-every) in a snapshot dir.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Backup {
        #[command(subcommand)]
        command: Option<BackupCommand>,
        /// Where to write the backup (refused if it exists)
        #[arg(required = true)]
        file: Option<PathBuf>,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Start a new one-node cluster from a backup (into an empty --data-dir), then keep running
    /// it like `muster agent`. It gets a new cluster id, keeps the CA, the key-value space and
    /// the operator tokens, revokes the join tokens, and prints a new operator token. Refused if
    /// a member of the backed-up cluster answers with another CA (the backup predates a CA
    /// rotation and would bring the retired CA back).
    #[command(
        mut_arg("discovery", |a| a.hide(true)),
        mut_arg("join", |a| a.hide(true)),
        mut_arg("token", |a| a.hide(true)),
        mut_arg("init", |a| a.hide(true)),
        mut_arg("initial_cluster", |a| a.hide(true)),
        mut_arg("join_secret_file", |a| a.hide(true)),
        mut_arg("join_secret_ttl", |a| a.hide(true)),
        mut_arg("ca_pin", |a| a.hide(true)),
        mut_arg("allow_address_change", |a| a.hide(true))
    )]
    Restore {
        /// The backup file (from `muster backup`)
        file: PathBuf,
        /// Restore a backup even though its cluster has retired its CA since (`muster ca rotate
        /// --finish`): the retired CA, whose key removed machines may hold, becomes the new
        /// cluster's CA.
        #[arg(long)]
        allow_retired_ca: bool,
        #[command(flatten)]
        flags: AgentFlags,
    },
    /// After a majority of the voters is lost for good: make this survivor (agent stopped) the
    /// cluster's only voter, keeping every write its log holds. The other survivors follow it
    /// when their agents start; the lost members are removed for good and refused if they
    /// come back. Prints what it will keep and drop; writes only with --yes.
    #[command(long_about = None, after_long_help = RECOVER_HELP)]
    Recover {
        /// The members lost for good, by name or member id (comma-separated or repeated)
        #[arg(long, value_delimiter = ',', required = true, value_name = "NAME")]
        lost: Vec<String>,
        /// The stopped survivor's data dir [env: MUSTER_DATA_DIR] [default: /var/lib/muster]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Carry it out (without it, only print the plan)
        #[arg(long)]
        yes: bool,
        /// Carry it out even if a lost member's address accepts connections (it is another
        /// machine now)
        #[arg(long, requires = "yes")]
        force: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Start a discovery service and N agents on loopback and watch them form a cluster.
    Demo {
        /// How many agents.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Stop everything once the cluster has formed (instead of waiting for Ctrl-C).
        #[arg(long)]
        exit: bool,
    },
    /// The pre-shared join secret: one credential in every machine's user-data from day one.
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
    /// FleetLock, Zincati's reboot coordination: who holds a reboot slot, groups and slots.
    Fleetlock {
        #[command(subcommand)]
        command: FleetlockCommand,
    },
    /// The replicated key-value space: revisions, compare-and-set, watch.
    Kv {
        #[command(subcommand)]
        command: KvCommand,
    },
    /// Leases: run a job on exactly one machine at a time (`lease run`), or claim by hand.
    Lease {
        #[command(subcommand)]
        command: LeaseCommand,
    },
    /// Certificates: every member's node certificate and CA expiry.
    Cert {
        #[command(subcommand)]
        command: CertCommand,
    },
    /// The cluster CA: replace it with a new one while the cluster serves.
    Ca {
        #[command(subcommand)]
        command: CaCommand,
    },
    /// The cluster's desired state as a file: `muster config export > cluster.toml`.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Compare cluster.toml with the running cluster: probe every member, print what differs
    /// and the quorum-safe order `apply` would change it in. Changes nothing.
    Plan {
        #[command(flatten)]
        apply: ApplyFlags,
        /// Exit with code 2 when anything differs (for drift checks from cron or CI).
        #[arg(long)]
        exit_code: bool,
    },
    /// Make the running cluster what cluster.toml describes: shows the plan, asks, then
    /// removes members the file does not list (dead first, the leader last, never below
    /// quorum), writes changed settings and issues a join token and command for each machine
    /// the file adds. Refuses to change anything when the quorum is lost, and prints the
    /// recovery steps instead.
    Apply {
        #[command(flatten)]
        apply: ApplyFlags,
        /// Do not ask before changing the cluster.
        #[arg(long)]
        yes: bool,
        /// Write each new machine's join token and settings to DIR/NAME.env (mode 0600, a
        /// systemd EnvironmentFile) instead of printing the token.
        #[arg(long, value_name = "DIR")]
        tokens_out: Option<PathBuf>,
    },
}

const RECOVER_HELP: &str = "\
When: a majority of the voters is gone for good (disks lost, machines terminated), so the
cluster has no quorum and cannot get one back. If the lost machines can come back, start them
instead: the cluster heals by itself. A backup (muster restore) loses every write since it was
taken; recover keeps what the survivors hold.

Steps:
  1. stop the agent on every survivor (systemctl stop muster)
  2. on each survivor: muster recover --lost c,d,e      (prints the plan; writes nothing)
     pick the survivor \"known committed through\" the highest index (on a tie, the one that
     \"holds the log through\" the latest term, then index)
  3. there only: muster recover --lost c,d,e --yes
  4. start that agent (it leads at once), then the other survivors' agents, unchanged
  5. wipe the lost machines before they boot again; add machines with muster token create

recover refuses while a lost member's address accepts connections (--force overrides, for an
address that is another machine now). A lost member that boots anyway asks the members it knows
before it campaigns, is refused by the survivors and stops. Lost members that boot cut off from
every survivor cannot learn of the recovery: keep them off the network. Every survivor must run
this muster or a newer one.";

#[derive(clap::Args, Clone)]
pub struct ApplyFlags {
    /// The desired cluster (see docs/apply.md; `muster config export` writes one).
    #[arg(short = 'f', long = "file", value_name = "cluster.toml")]
    pub file: PathBuf,
    /// A directory of `muster backup` files: when the quorum is lost, the recovery steps name
    /// the newest backup of this cluster found there.
    #[arg(long, value_name = "DIR")]
    pub backups: Option<PathBuf>,
    #[command(flatten)]
    pub op: OperatorArgs,
}

#[derive(clap::Args, Clone)]
pub struct OperatorArgs {
    /// The agent's data dir: talk to it over its unix socket, no token needed
    /// [env: MUSTER_DATA_DIR] [default: /var/lib/muster]
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Talk to any member over TCP instead (HOST:PORT of its --advertise); needs an operator
    /// token in the MUSTER_OPERATOR_TOKEN environment variable [env: MUSTER_SERVER]
    #[arg(long, conflicts_with = "data_dir")]
    pub server: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl OperatorArgs {
    pub fn target(&self) -> Result<Target, CliError> {
        Target::resolve(self.data_dir.clone(), self.server.clone())
    }
}
