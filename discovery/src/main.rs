use std::process::ExitCode;

use clap::Parser;
use muster_discovery::config::{Cli, Command};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(config) => {
            init_logging(&config.log_format);
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("muster-discovery: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(muster_discovery::server::serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("muster-discovery: error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The filter without `RUST_LOG`: the service's own lines at `info`, libraries (fjall, hyper,
/// tonic, the etcd client) only from `warn`, so their INFO chatter stays out of the journal.
const DEFAULT_FILTER: &str = "warn,muster_discovery=info,muster_shared=info";

fn init_logging(format: &str) {
    use std::io::IsTerminal;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a journal or a log file.
        .with_ansi(std::io::stderr().is_terminal());
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
