//! What the agent is doing before its node runs (joining through a member, waiting for its
//! discovery peers): told to systemd as `STATUS=` and answered on `/readyz` from the moment the
//! metrics port is bound, so that a probe learns "not yet, and why" instead of a connection
//! nobody accepts.

use std::sync::Mutex;

use crate::api::{ApiError, ErrorKind};

/// The start's latest step, for `/readyz` until the node serves.
static PHASE: Mutex<Option<String>> = Mutex::new(None);

/// Records the start's current step and tells systemd.
pub fn set_phase(text: &str) {
    if let Ok(mut phase) = PHASE.lock() {
        *phase = Some(text.to_string());
    }
    crate::notify::status(text);
}

/// Why the node is not ready yet: `cluster_uninitialized` (503), with the start's step.
pub fn not_ready() -> ApiError {
    let phase = PHASE.lock().ok().and_then(|p| p.clone());
    not_ready_in(phase.as_deref())
}

fn not_ready_in(phase: Option<&str>) -> ApiError {
    let step = phase.unwrap_or("starting");
    ApiError::new(
        ErrorKind::ClusterUninitialized,
        format!("not a serving member yet: {step}"),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn not_ready_names_the_step_with_a_stable_kind() {
        for (phase, want) in [
            (None, "not a serving member yet: starting"),
            (
                Some("waiting for peers 1/2"),
                "not a serving member yet: waiting for peers 1/2",
            ),
        ] {
            let e = super::not_ready_in(phase);
            assert_eq!(e.kind, crate::api::ErrorKind::ClusterUninitialized);
            assert_eq!(e.status(), 503);
            assert_eq!(e.message, want);
        }
    }
}
