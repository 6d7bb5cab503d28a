//! How `muster agent` logs: to stderr, at `info` for Muster's own lines (formation progress,
//! peer state changes, refusals), with openraft's and fjall's internal chatter kept out
//! unless `RUST_LOG` asks for it. Muster reports raft failures that matter in its own words.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter without `RUST_LOG`: Muster's own crates at `info`, every library at `warn` (so a
/// new dependency's INFO chatter never reaches an operator's journal), and openraft off (Muster
/// reports the raft failures that matter in its own words).
pub const DEFAULT_FILTER: &str =
    "warn,muster=info,muster_agent=info,muster_shared=info,openraft=off";

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
