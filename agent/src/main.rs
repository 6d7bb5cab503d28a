use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use muster_agent::api::types::{ApiError, Status};
use muster_agent::bootstrap::{self, NeverFormSecondCluster};
use muster_agent::config::{self, AgentFlags};
use muster_agent::operator;
use muster_shared::form::urlencode;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "muster",
    version,
    about = "Muster: identical machines form one raft cluster through a discovery URL",
    long_about = "Muster turns freshly booted machines into one healthy raft cluster.\n\n\
Form a cluster: mint a URL (curl <discovery-service>/new?size=3) and start every machine with\n\
    muster agent --name $(hostname) --advertise <ip>:7000 --discovery <URL>\n\
Then, on any member:\n\
    muster status          who leads, who votes, who is reachable\n\
    muster kv put k v      a replicated write"
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
    /// The agent's data dir (its operator socket lives there) [env: MUSTER_DATA_DIR]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
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

/// Exit code for command-line mistakes (BSD's EX_USAGE). Exit code 2 is reserved for "this node
/// would form a second cluster", which supervisors must not retry.
const EXIT_USAGE: u8 = 64;

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
    let result = runtime.block_on(run(cli));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<NeverFormSecondCluster>().is_some() => {
            eprintln!("muster: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("muster: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Agent(flags) => {
            init_logging();
            let env: HashMap<String, String> = std::env::vars().collect();
            let config = config::resolve(&flags, &env)?;
            bootstrap::run(config).await
        }
        Command::Status(op) => {
            let status = fetch_status(&op).await?;
            if op.json {
                muster_agent::outln!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                muster_agent::cli_output::print_status(&status);
            }
            Ok(())
        }
        Command::Members(op) => {
            let status = fetch_status(&op).await?;
            if op.json {
                muster_agent::outln!("{}", serde_json::to_string_pretty(&status.members)?);
            } else {
                muster_agent::cli_output::print_members(&status);
            }
            Ok(())
        }
        Command::Kv { command } => kv(command).await,
        Command::Demo { nodes, exit } => muster_agent::demo::run(nodes, exit).await,
    }
}

fn socket(op: &OperatorArgs) -> PathBuf {
    let dir = op
        .data_dir
        .clone()
        .or_else(|| std::env::var_os("MUSTER_DATA_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR));
    operator::socket_path(&dir)
}

/// One call to the local agent; turns API errors into messages that say what to do.
async fn call(
    op: &OperatorArgs,
    method: &str,
    path: &str,
    body: Option<String>,
) -> Result<serde_json::Value> {
    let sock = socket(op);
    let (status, text) = operator::call(&sock, method, path, body).await.with_context(|| {
        format!(
            "cannot reach the agent at {} (is `muster agent` running with this --data-dir? are you its user or root?)",
            sock.display()
        )
    })?;
    if status >= 400 {
        let err: ApiError = serde_json::from_str(&text).unwrap_or(ApiError {
            kind: "internal".into(),
            message: text,
        });
        bail!("{} ({})", err.message, err.kind);
    }
    Ok(serde_json::from_str(&text)?)
}

async fn fetch_status(op: &OperatorArgs) -> Result<Status> {
    Ok(serde_json::from_value(
        call(op, "GET", "/v1/status", None).await?,
    )?)
}

async fn kv(command: KvCommand) -> Result<()> {
    match command {
        KvCommand::Get { key, op } => {
            let v = call(&op, "GET", &format!("/v1/kv?key={}", urlencode(&key)), None).await?;
            if op.json {
                muster_agent::outln!("{v}");
            } else {
                muster_agent::outln!("{}", v["value"].as_str().unwrap_or_default());
            }
        }
        KvCommand::Put { key, value, op } => {
            let body = serde_json::json!({ "value": value }).to_string();
            let v = call(
                &op,
                "PUT",
                &format!("/v1/kv?key={}", urlencode(&key)),
                Some(body),
            )
            .await?;
            if op.json {
                muster_agent::outln!("{v}");
            }
        }
        KvCommand::Del { key, op } => {
            let v = call(
                &op,
                "DELETE",
                &format!("/v1/kv?key={}", urlencode(&key)),
                None,
            )
            .await?;
            if op.json {
                muster_agent::outln!("{v}");
            }
        }
        KvCommand::List { prefix, op } => {
            let v = call(
                &op,
                "GET",
                &format!("/v1/kv/list?prefix={}", urlencode(&prefix)),
                None,
            )
            .await?;
            if op.json {
                muster_agent::outln!("{v}");
            } else if let Some(entries) = v.as_array() {
                for e in entries {
                    muster_agent::outln!(
                        "{}\t{}",
                        e["key"].as_str().unwrap_or_default(),
                        e["value"].as_str().unwrap_or_default()
                    );
                }
            }
        }
    }
    Ok(())
}

fn init_logging() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
