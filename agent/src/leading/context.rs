//! What every leader action is given: the raft group behind the small [`Replica`] trait and this
//! node's leader-side state ([`LeaderLocal`]). The clocks a leader judges on, and which CA new
//! tokens are pinned to, are read here, in one place, from those two.

use super::local::{LeaderLocal, LeaderSettings};
use super::replica::Replica;
use crate::api::ApiError;

/// A leader action's view of the world. Cheap to copy; built by `leader::execute` from the
/// agent, or in unit tests from `leader/fake.rs`.
pub struct Leader<'a, R> {
    pub replica: &'a R,
    pub local: &'a LeaderLocal,
}

impl<R> Clone for Leader<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Leader<'_, R> {}

impl<'a, R: Replica> Leader<'a, R> {
    pub fn new(replica: &'a R, local: &'a LeaderLocal) -> Self {
        Self { replica, local }
    }

    pub fn settings(&self) -> &'a LeaderSettings {
        &self.local.settings
    }

    /// The pin new tokens carry: that of the CA that signs members' certificates now (the new
    /// one during a CA rotation, once every member trusts it).
    pub fn ca_pin(&self) -> String {
        self.replica
            .read_local(|s| s.signing_ca().map(|ca| ca.cert_pem.clone()))
            .ok()
            .flatten()
            .and_then(|pem| muster_shared::tls::spki_pin(&pem).ok())
            .unwrap_or_else(|| self.local.settings.start_ca_pin.clone())
    }

    /// True if `pin` is that of a CA this cluster trusts now (during a CA rotation, either).
    pub fn trusts_ca_pin(&self, pin: &str) -> bool {
        let pins: Vec<String> = self
            .replica
            .read_local(|s| s.trusted_ca_pems())
            .unwrap_or_default()
            .iter()
            .filter_map(|pem| muster_shared::tls::spki_pin(pem).ok())
            .collect();
        if pins.is_empty() {
            return pin == self.local.settings.start_ca_pin;
        }
        pins.iter().any(|p| p == pin)
    }

    /// The time token expiry is judged on: this leader's token clock. Its term starts it at
    /// this node's wall clock, but never behind the latest reading the cluster has committed
    /// (`ClusterState::wall_clock_ms`), so a leader whose clock lags does not revive tokens an
    /// earlier leader saw expire; from there it counts monotonic time, so a wall-clock step
    /// while this node leads neither ages every token (a step forward, committed, then back)
    /// nor freezes them. A step is logged.
    pub fn cluster_now(&self) -> Result<u64, ApiError> {
        let term = self.replica.view().term;
        let wall = self.replica.wall_ms();
        let clock = &self.local.token_clock;
        let now = match clock.reading(term) {
            Some(now) => now,
            None => {
                let committed = self.replica.read_local(|s| s.wall_clock_ms)?;
                clock.start(term, wall.max(committed))
            }
        };
        let stepped = wall.abs_diff(now);
        if stepped >= CLOCK_STEP_LOGGED_MS && log_clock_step(wall) {
            tracing::warn!(
                wall_ms = wall,
                token_clock_ms = now,
                "this node's wall clock differs from the token clock by {} s (a clock step?); \
                 join tokens keep the monotonic time counted since this node became leader",
                stepped / 1000
            );
        }
        Ok(now)
    }

    /// This leader's reading of the lease clock (see `leader::lease`): a new term starts it
    /// from everything committed so far.
    pub async fn lease_now(&self) -> Result<u64, ApiError> {
        let term = self.replica.view().term;
        if let Some(ms) = self.local.lease_clock.reading(term) {
            return Ok(ms);
        }
        let base = self.replica.read(|s| s.leases.clock_ms).await?;
        Ok(self.local.lease_clock.start(term, base))
    }
}

/// A difference between the wall and token clocks worth a log line.
const CLOCK_STEP_LOGGED_MS: u64 = 5_000;

/// True at most once a minute.
fn log_clock_step(wall: u64) -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let last = LAST.load(Ordering::Relaxed);
    wall.abs_diff(last) >= 60_000
        && LAST
            .compare_exchange(last, wall, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}
