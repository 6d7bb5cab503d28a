//! `muster`: parse the command line, run the command, turn a failure into its message (or,
//! with `--json`, one JSON object on stdout) and its exit code.

use std::process::ExitCode;

use clap::Parser;
use muster_agent::cli::{self, Cli, Failure};
use muster_agent::error::{EXIT_USAGE, ExitClass};

fn main() -> ExitCode {
    // With --json, errors are JSON on stdout too, so a script reads one document either way
    // and tells them apart by the exit code.
    let json = wants_json(std::env::args());
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if json => {
            let message = e.render().to_string();
            let failure = Failure::Cli(cli::CliError::Usage(message.trim().to_string()));
            muster_agent::outln!("{}", failure.to_json());
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(EXIT_USAGE);
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
    match runtime.block_on(cli::run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        // CMD's own status from `lease run`: CMD has said what it had to.
        Err(Failure::Cli(cli::CliError::CommandExit(code))) => ExitCode::from(code),
        Err(failure) => {
            if json {
                muster_agent::outln!("{}", failure.to_json());
            } else if matches!(&failure, Failure::Agent(e) if e.class() == ExitClass::Refused) {
                eprintln!("muster: {}", failure.message());
            } else {
                eprintln!("muster: error: {}", failure.message());
            }
            ExitCode::from(failure.exit_code())
        }
    }
}

/// True when `--json` is among the arguments (before a `--` that starts a command's own).
fn wants_json(args: impl Iterator<Item = String>) -> bool {
    args.skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}
