//! How `muster agent` logs: to stderr, at `info` for Muster's own lines (formation progress,
//! peer state changes, refusals), with openraft's and fjall's internal chatter kept out
//! unless `RUST_LOG` asks for it. Muster reports raft failures that matter in its own words.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter without `RUST_LOG`.
pub const DEFAULT_FILTER: &str = "info,openraft=off,fjall=warn,lsm_tree=warn";

pub fn init_agent() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a journal or a log file.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
