use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use muster_agent::cli::{self, CliError, Target, output};
use muster_agent::config::{self, AgentFlags};
use muster_agent::error::{AgentError, EXIT_USAGE};
use muster_agent::{outln, start};
use muster_shared::duration::parse_duration;
use tracing_subscriber::EnvFilter;

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
with --server HOST:PORT and an operator token in MUSTER_TOKEN."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// Operator tokens for operator commands over TCP (--server with MUSTER_TOKEN).
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
    Backup {
        file: PathBuf,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Start a new one-node cluster from a backup (into an empty --data-dir), then keep running
    /// it like `muster agent`. It gets a new cluster id, keeps the CA, the key-value space and
    /// the operator tokens, revokes the join tokens, and prints a new operator token.
    Restore {
        file: PathBuf,
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
    /// The replicated key-value space.
    Kv {
        #[command(subcommand)]
        command: KvCommand,
    },
}

#[derive(clap::Args, Clone)]
struct OperatorArgs {
    /// The agent's data dir: talk to it over its unix socket, no token needed
    /// [env: MUSTER_DATA_DIR] [default: /var/lib/muster]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Talk to any member over TCP instead (HOST:PORT of its --advertise); needs an operator
    /// token in the MUSTER_TOKEN environment variable [env: MUSTER_SERVER]
    #[arg(long, conflicts_with = "data_dir")]
    server: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl OperatorArgs {
    fn target(&self) -> Result<Target, CliError> {
        Target::resolve(self.data_dir.clone(), self.server.clone())
    }
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a join token and print it (once). Single-use and valid for 24h unless told
    /// otherwise; for an autoscaling group use e.g. --uses 50 --ttl 30d.
    Create {
        /// How long the token works [default: 24h] (1s..=365d; e.g. 1h, 7d)
        #[arg(long, default_value = "24h")]
        ttl: String,
        /// How many nodes it admits (1..=10000)
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
        id: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
enum OperatorTokenCommand {
    /// Create an operator token and print it (once).
    Create {
        /// A note shown by `muster operator-token list`
        #[arg(long, default_value = "")]
        description: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// List operator tokens (never their secrets).
    List(OperatorArgs),
    /// Revoke an operator token by its id.
    Revoke {
        id: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
enum NodeCommand {
    /// Remove a member for good: a voter is demoted first, the node stops by itself, its id is
    /// never reused. Refused if the remaining voters would lack a reachable majority.
    Remove {
        name: String,
        /// Remove even if the remaining voters would lack a reachable majority (the cluster then
        /// stops taking writes until enough of them are back).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

#[derive(Subcommand)]
enum KvCommand {
    /// Read a key (linearizable).
    Get {
        key: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Write a key.
    Put {
        key: String,
        value: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// Delete a key.
    Del {
        key: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
    /// List keys under a prefix (linearizable).
    List {
        #[arg(default_value = "")]
        prefix: String,
        #[command(flatten)]
        op: OperatorArgs,
    },
}

/// How a command failed: the agent's run ends with its own exit code; an operator command
/// exits 64 for a command-line mistake and 1 otherwise.
enum Failure {
    Agent(AgentError),
    Cli(CliError),
}

impl From<AgentError> for Failure {
    fn from(e: AgentError) -> Self {
        Failure::Agent(e)
    }
}

impl From<CliError> for Failure {
    fn from(e: CliError) -> Self {
        Failure::Cli(e)
    }
}

impl From<config::ConfigError> for Failure {
    fn from(e: config::ConfigError) -> Self {
        Failure::Agent(e.into())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Cli(e.into())
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // Every TLS config in Muster names the ring provider explicitly; this default covers HTTP
    // clients built without one (reqwest is compiled without a bundled provider).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("muster: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Agent(e @ AgentError::Refused(_))) => {
            eprintln!("muster: {e}");
            ExitCode::from(e.exit_code())
        }
        Err(Failure::Agent(e)) => {
            eprintln!("muster: error: {e}");
            ExitCode::from(e.exit_code())
        }
        Err(Failure::Cli(e)) => {
            eprintln!("muster: error: {e}");
            ExitCode::from(match e {
                CliError::Usage(_) => EXIT_USAGE,
                _ => 1,
            })
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Agent(flags) => {
            init_logging();
            let env: HashMap<String, String> = std::env::vars().collect();
            let config = config::resolve(&flags, &env)?;
            Ok(start::run(config, None).await?)
        }
        Command::Restore { file, flags } => {
            init_logging();
            let env: HashMap<String, String> = std::env::vars().collect();
            let config = config::resolve(&flags, &env)?;
            Ok(start::run(config, Some(file)).await?)
        }
        Command::Status(op) => {
            let status = cli::status(&op.target()?).await?;
            if op.json {
                outln!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                output::print_status(&status);
            }
            Ok(())
        }
        Command::Members(op) => {
            let status = cli::status(&op.target()?).await?;
            if op.json {
                outln!("{}", serde_json::to_string_pretty(&status.members)?);
            } else {
                output::print_members(&status);
            }
            Ok(())
        }
        Command::Token { command } => match command {
            TokenCommand::Create {
                ttl,
                uses,
                description,
                op,
            } => {
                let ttl =
                    parse_duration(&ttl).map_err(|e| CliError::Usage(format!("--ttl: {e}")))?;
                Ok(cli::token_create(&op.target()?, ttl, uses, description, op.json).await?)
            }
            TokenCommand::List(op) => Ok(cli::token_list(&op.target()?, op.json).await?),
            TokenCommand::Revoke { id, op } => {
                Ok(cli::token_revoke(&op.target()?, &id, op.json).await?)
            }
        },
        Command::OperatorToken { command } => match command {
            OperatorTokenCommand::Create { description, op } => {
                Ok(cli::operator_token_create(&op.target()?, description, op.json).await?)
            }
            OperatorTokenCommand::List(op) => {
                Ok(cli::operator_token_list(&op.target()?, op.json).await?)
            }
            OperatorTokenCommand::Revoke { id, op } => {
                Ok(cli::operator_token_revoke(&op.target()?, &id, op.json).await?)
            }
        },
        Command::Node {
            command: NodeCommand::Remove { name, force, op },
        } => Ok(cli::node_remove(&op.target()?, &name, force, op.json).await?),
        Command::Backup { file, op } => Ok(cli::backup(&op.target()?, &file, op.json).await?),
        Command::Kv { command } => match command {
            KvCommand::Get { key, op } => Ok(cli::kv_get(&op.target()?, &key, op.json).await?),
            KvCommand::Put { key, value, op } => {
                Ok(cli::kv_put(&op.target()?, &key, &value, op.json).await?)
            }
            KvCommand::Del { key, op } => Ok(cli::kv_del(&op.target()?, &key, op.json).await?),
            KvCommand::List { prefix, op } => {
                Ok(cli::kv_list(&op.target()?, &prefix, op.json).await?)
            }
        },
        Command::Demo { nodes, exit } => Ok(muster_agent::demo::run(nodes, exit).await?),
    }
}

fn init_logging() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
