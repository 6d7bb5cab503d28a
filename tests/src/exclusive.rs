//! One test at a time for the tests that load the machine.
//!
//! `cargo test` runs the tests of one binary on as many threads as there are cores. A test that
//! starts thirty agents starves a test next to it that waits for a time window (a voter replaced
//! after `--replace-after`, writes that never stop for long), and on two cores the second one
//! fails for a reason that is not its own. Tests that start many processes, or that measure a
//! time window, hold [`heavy`]'s guard for their whole run; the rest still run beside each other.
//! Test binaries run one after another, so a lock inside the process is enough.

use tokio::sync::{Mutex, MutexGuard};

static HEAVY: Mutex<()> = Mutex::const_new(());

/// Waits until no other heavy test of this binary runs, and keeps them out until the guard drops.
/// A heavy test that panicked does not poison it: the next one still runs.
pub async fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().await
}
