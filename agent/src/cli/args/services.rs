//! The flags of the commands for what the cluster serves: `muster kv`, `muster lease` and
//! `muster fleetlock`. Kept apart by command family so that each file reads as one part of the
//! command line.

use clap::Subcommand;

use super::OperatorArgs;

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
    /// Create a group, or change its slots (machines that may reboot at once), its
    /// maintenance windows (when they may) and its health gates (what must be healthy first).
    Set {
        /// The group's name, as Zincati's `group` setting says it
        name: String,
        /// How many machines of the group may reboot at once (1 to 1000)
        #[arg(long)]
        slots: u32,
        /// A maintenance window, in UTC: `Sat 02:00-06:00 UTC`, `Mon-Fri 22:00-02:00 UTC`
        /// (an end before the start is the next day), `daily 02:00-04:00 UTC`. Repeat for
        /// several (at most 16); none: always open. Replaces the group's windows.
        #[arg(long = "window", value_name = "WINDOW")]
        windows: Vec<String>,
        /// A health gate the leader checks before it grants a slot of the group: the NAME of
        /// a gate every member defines with `--fleetlock-gate NAME=prometheus:URL` or
        /// `NAME=command:PATH`. Repeat for several (at most 8; all must pass); none: no gate.
        /// Replaces the group's gates.
        #[arg(long = "gate", value_name = "GATE")]
        gates: Vec<String>,
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
