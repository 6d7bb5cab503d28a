//! The flags of the commands that change or copy the cluster itself: `muster node`, `muster
//! backup list`, `muster cert`, `muster ca` and `muster config`. Kept apart by command family
//! so that each file reads as one part of the command line.

use std::path::PathBuf;

use clap::Subcommand;

use super::OperatorArgs;

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
pub enum LeaderCommand {
    /// Hand the leadership to another voter (NAME, or the first that holds the whole log):
    /// writes pause for about three quarters of --election-timeout instead of the election a
    /// vanished leader costs. An agent stopped with SIGTERM (systemctl stop, a reboot) does the
    /// same by itself; use this before other maintenance of the leader's machine.
    Transfer {
        /// The voter to lead next, as `muster members` shows it
        name: Option<String>,
        #[command(flatten)]
        op: OperatorArgs,
    },
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
pub enum ConfigCommand {
    /// Print today's cluster as a cluster.toml: members, membership settings, FleetLock.
    Export(OperatorArgs),
}
