//! The flags of the credential commands: `muster token` (join tokens), `muster operator-token`
//! and `muster secret`. Kept apart by command family so that each file reads as one part of
//! the command line; the help text is exactly as `--help` prints it.

use clap::Subcommand;

use super::OperatorArgs;

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
pub enum SecretCommand {
    /// Print a new 256-bit join secret (JS1.…), once. Put it in a file (mode 0600) on every
    /// machine and start each with --join-secret-file FILE: the machine that forms the cluster
    /// records its hash, and every later machine joins with it, no token needed. List and
    /// revoke it like a join token (`muster token list|revoke`).
    Generate,
}
