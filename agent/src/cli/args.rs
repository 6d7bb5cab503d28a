//! The command line of `muster`: every subcommand and flag, with the help text that teaches
//! it. `cli::run` carries a parsed command out.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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

#[derive(Subcommand)]
pub enum CertCommand {
    /// Every member's certificate and CA expiry, as each member reports it (needs an admin
    /// token over TCP).
    Status(OperatorArgs),
}

#[derive(Subcommand)]
pub enum CaCommand {
    /// Start replacing the cluster CA: every member trusts a new CA next to the old, then
    /// renews its certificate from it (no restart, no moment in which two members cannot
    /// talk). Once `muster ca status` says `ready`, end it with `--finish`: the old CA is no
    /// longer trusted, every join and operator token made under it is revoked (the finish
    /// lists them; make new ones), and a live join secret is replaced by a new one, printed
    /// once: put it in your machines' user-data. Needs an admin token over TCP.
    Rotate {
        /// End the rotation in progress (refused while a member still holds a certificate
        /// from the old CA).
        #[arg(long)]
        finish: bool,
        /// With --finish: end it even though a few members have not moved (gone for good: they
        /// must be wiped and joined again as new nodes). Refused while members lack the new CA
        /// or half or more still hold a certificate from the old one.
        #[arg(long, requires = "finish")]
        force: bool,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// The cluster CA, and the rotation in progress: its phase and the members it waits for.
    Status(OperatorArgs),
}

#[derive(Subcommand)]
pub enum BackupCommand {
    /// List the scheduled snapshots in a snapshot dir, oldest first, each read back in full and
    /// checked as `muster restore` would (header, size, checksum). Reads the files only: the
    /// agent need not run. Restore any of them with `muster restore FILE --name … --advertise …`.
    List {
        /// The snapshot dir (the agent's --snapshot-dir) [env: MUSTER_SNAPSHOT_DIR]
        /// [default: <data-dir>/snapshots]
        #[arg(long)]
        snapshot_dir: Option<PathBuf>,
        /// The agent's data dir, whose snapshots/ is listed when --snapshot-dir is not given
        /// [env: MUSTER_DATA_DIR] [default: /var/lib/muster]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Print today's cluster as a cluster.toml: members, membership settings, FleetLock.
    Export(OperatorArgs),
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

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a join token and print it (once). Single-use and valid for 24h unless told
    /// otherwise; for an autoscaling group use e.g. --uses 50 --ttl 30d.
    Create {
        /// How long the token works (1s to 365d; e.g. 1h, 7d)
        #[arg(long, default_value = "24h")]
        ttl: String,
        /// How many nodes it admits (1 to 10000)
        #[arg(long, default_value_t = 1)]
        uses: u32,
        /// A note shown by `muster token list`
        #[arg(long, default_value = "")]
        description: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// List join tokens (never their secrets): state, uses, expiry, who used them.
    List(OperatorArgs),
    /// Revoke a join token by its id (nodes it admitted stay members).
    Revoke {
        /// The token's id, as `muster token list` shows it
        id: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
pub enum OperatorTokenCommand {
    /// Create an operator token and print it (once). Without --scope it may do everything
    /// (admin); give a worker machine only what it needs, e.g. --scope lease:backup.
    Create {
        /// A note shown by `muster operator-token list`
        #[arg(long, default_value = "")]
        description: String,
        /// What the token may do; repeat for several: admin, kv:PREFIX (read and write keys
        /// under PREFIX), kv:PREFIX:ro (read only), lease:NAME, fleetlock
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// List operator tokens (never their secrets).
    List(OperatorArgs),
    /// Revoke an operator token by its id.
    Revoke {
        /// The token's id, as `muster operator-token list` shows it
        id: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
pub enum FleetlockCommand {
    /// Every group: its slots, who holds them, since when and through which member (holders
    /// of more than an hour are flagged STALE), and the last 10 events of the audit trail.
    Status(OperatorArgs),
    /// The audit trail: every slot taken and given back (lock, unlock, force-release, release
    /// with a removed member), oldest first, the last 1000 kept by the cluster.
    History {
        /// Only this group's events
        #[arg(long)]
        group: Option<String>,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Force-release a slot (a machine that will not come back to unlock). Logged.
    Release {
        /// The reboot group (`default` unless Zincati was configured otherwise)
        group: String,
        /// The machine's id in that group, as `muster fleetlock status` shows it
        id: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Reboot groups and their slots (`default` exists with 1 slot).
    Group {
        #[command(subcommand)]
        command: FleetlockGroupCommand,
    },
    /// What a lock or unlock for a group nobody configured gets: `create` it with 1 slot (the
    /// default), or `reject` it with unknown_group (a Zincati in such a group then never gets
    /// past its start-up unlock, so it never updates).
    UnknownGroups {
        /// `create` or `reject`
        #[arg(value_parser = ["create", "reject"])]
        mode: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
pub enum FleetlockGroupCommand {
    /// Create a group, or change its number of slots (machines that may reboot at once).
    Set {
        /// The group's name, as Zincati's `group` setting says it
        name: String,
        /// How many machines of the group may reboot at once (1 to 1000)
        #[arg(long)]
        slots: u32,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// List groups with their slots and holders (the same as `fleetlock status`).
    List(OperatorArgs),
    /// Delete a group that nobody holds a slot of.
    Del {
        /// The group's name
        name: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Print a new 256-bit join secret (JS1.…), once. Put it in a file (mode 0600) on every
    /// machine and start each with --join-secret-file FILE: the machine that forms the cluster
    /// records its hash, and every later machine joins with it, no token needed. List and
    /// revoke it like a join token (`muster token list|revoke`).
    Generate,
}

#[derive(Subcommand)]
pub enum NodeCommand {
    /// Remove a member for good: a voter is demoted first, the node stops by itself, its id is
    /// never reused. Refused if the remaining voters would lack a reachable majority.
    Remove {
        /// The member's name, as `muster members` shows it
        name: String,
        /// Remove even if the remaining voters would lack a reachable majority (the cluster then
        /// stops taking writes until enough of them are back).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Record a new address for a member (its machine got a new IP, say) while the cluster
    /// serves: peers dial it there from their next message, and the member renews its
    /// certificate for the new host by itself. The member must already listen there (its
    /// --listen covers the new address); restart it later with --advertise HOST:PORT. The
    /// member itself can ask instead: start it with the new --advertise and
    /// --allow-address-change.
    SetAddress {
        /// The member's name, as `muster members` shows it
        name: String,
        /// The new HOST:PORT, as the member's --advertise would say it.
        address: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
pub enum KvCommand {
    /// Read a key (linearizable).
    Get {
        /// The key
        key: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Write a key. With --if-revision N (or --if-absent) it is a compare-and-set: refused
    /// with revision_mismatch unless the key is still at revision N (or does not exist).
    Put {
        /// The key
        key: String,
        /// The value to write
        value: String,
        /// Write only if the key was last changed at revision N (`kv get --json` shows it)
        #[arg(long, value_name = "N", conflicts_with = "if_absent")]
        if_revision: Option<u64>,
        /// Write only if the key does not exist
        #[arg(long)]
        if_absent: bool,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Delete a key.
    Del {
        /// The key
        key: String,
        /// Delete only if the key was last changed at revision N
        #[arg(long, value_name = "N")]
        if_revision: Option<u64>,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Print changes under a prefix as they happen, one per line (REVISION put KEY VALUE, or
    /// REVISION del KEY). Survives agent restarts and leader changes without losing a change.
    Watch {
        /// Watch the keys that start with this [default: every key]
        #[arg(default_value = "", hide_default_value = true)]
        prefix: String,
        /// Start at this revision (the changes since it come first); default: from now on.
        /// Refused with `compacted` once the cluster's history (the last 1000 changes) no
        /// longer reaches back that far.
        #[arg(long, value_name = "N", default_value_t = 0)]
        from_revision: u64,
        /// Exit after N changes (e.g. 1: wait for the next change)
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// List keys under a prefix (linearizable).
    List {
        /// List the keys that start with this [default: every key]
        #[arg(default_value = "", hide_default_value = true)]
        prefix: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
pub enum LeaseCommand {
    /// Run CMD while holding lease NAME, so that it runs on one machine at a time. Waits for the
    /// lease (saying who holds it), renews it every third of --ttl, and stops CMD (SIGTERM,
    /// SIGKILL after --grace) before the lease could go elsewhere if it cannot renew. CMD gets
    /// MUSTER_LEASE_NAME, MUSTER_LEASE_HOLDER and MUSTER_LEASE_TOKEN (the fencing token, larger
    /// for every new grant). Exits with CMD's status; 75 if the lease is held and --wait=false;
    /// 69 if the lease was lost and CMD stopped. Signals to it go to CMD.
    Run {
        /// The lease's name: one name, one job at a time
        name: String,
        /// How long a grant lasts without renewal (1s to 1h)
        #[arg(long, default_value = "15s")]
        ttl: String,
        /// Who holds it: a label shown by `lease get` [default: HOSTNAME:PID:RANDOM, this
        /// machine's host name, this process's id and a random part]
        #[arg(long)]
        holder: Option<String>,
        /// How long CMD gets between SIGTERM and SIGKILL when the lease is lost [default: a
        /// third of --ttl, at most 3s]
        #[arg(long)]
        grace: Option<String>,
        /// Wait while someone else holds the lease (--wait=false: exit 75 at once)
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        wait: bool,
        #[command(flatten)]
        op: OperatorArgs,
        /// The command and its arguments, after `--`
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Claim lease NAME for HOLDER; refused with lease_held (exit 75) while it is held. A new
    /// grant prints its lease key once: renewing (`--key`) and releasing need it.
    Claim {
        /// The lease's name
        name: String,
        /// Who claims it: a label shown by `lease get` and in `lease_held`
        #[arg(long)]
        holder: String,
        /// How long the grant lasts without renewal (1s to 1h)
        #[arg(long, default_value = "15s")]
        ttl: String,
        /// The key the grant printed: renews that grant instead of asking for a new one
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Release lease NAME if HOLDER holds it with KEY (anything else changes nothing).
    Release {
        /// The lease's name
        name: String,
        /// The holder the grant was made to
        #[arg(long)]
        holder: String,
        /// The key the grant printed
        #[arg(long)]
        key: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Who holds lease NAME, its fencing token and time left (not_found when free).
    Get {
        /// The lease's name
        name: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Every held lease.
    List(OperatorArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::config;

    /// Every subcommand, depth first, with its path (`muster node remove`).
    fn commands() -> Vec<(String, clap::Command)> {
        fn walk(path: &str, command: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
            let path = format!("{path} {}", command.get_name()).trim().to_string();
            out.push((path.clone(), command.clone()));
            for sub in command.get_subcommands() {
                walk(&path, sub, out);
            }
        }
        let mut out = Vec::new();
        walk("", &Cli::command(), &mut out);
        out
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_positional_argument_is_described() {
        let mut missing = Vec::new();
        for (path, command) in commands() {
            for arg in command.get_positionals() {
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} <{}>", arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "undescribed: {missing:?}");
    }

    #[test]
    fn agent_flags_are_grouped_under_the_seven_headings_in_order() {
        let headings = [
            config::HELP_START,
            config::HELP_NETWORK,
            config::HELP_ROLES,
            config::HELP_TIMING,
            config::HELP_TLS,
            config::HELP_OBSERVABILITY,
            config::HELP_SNAPSHOTS,
        ];
        let mut agent = Cli::command()
            .find_subcommand("agent")
            .expect("agent")
            .clone();
        let ungrouped: Vec<String> = agent
            .get_arguments()
            .filter(|a| {
                a.get_long().is_some() && !["help", "version"].contains(&a.get_id().as_str())
            })
            .filter(|a| a.get_help_heading().is_none())
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(
            ungrouped.is_empty(),
            "flags without a heading: {ungrouped:?}"
        );
        let help = agent.render_help().to_string();
        let at: Vec<usize> = headings
            .iter()
            .map(|h| {
                help.find(&format!("{h}:"))
                    .unwrap_or_else(|| panic!("{h:?} in agent --help:\n{help}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "in order: {help}");
    }

    #[test]
    fn restore_help_lists_only_what_restore_reads() {
        let mut restore = Cli::command()
            .find_subcommand("restore")
            .expect("restore")
            .clone();
        let help = restore.render_long_help().to_string();
        for unread in [
            "--discovery",
            "--join ",
            "--token",
            "--init ",
            "--initial-cluster",
            "--join-secret-file",
            "--join-secret-ttl",
            "--ca-pin",
            "--allow-address-change",
        ] {
            assert!(
                !help.contains(unread),
                "{unread} in restore --help:\n{help}"
            );
        }
        for read in [
            "--name",
            "--advertise",
            "--data-dir",
            "--allow-retired-ca",
            "--metrics-listen",
        ] {
            assert!(help.contains(read), "{read} missing from restore --help");
        }
    }

    #[test]
    fn no_rust_range_syntax_in_help() {
        for (path, mut command) in commands() {
            let help = command.render_long_help().to_string();
            assert!(!help.contains("..="), "{path} --help says `..=`:\n{help}");
        }
    }
}
