//! Telling the cluster this member's failure zone (`--zone`) and agent version: the role
//! policy spreads voters over zones and prefers newer versions from what the member records
//! say, and `muster status` shows both. The member compares its own record in the applied
//! state with what it runs and, when they differ (a first start, a restart with another
//! `--zone`, an upgrade), asks the leader to record it (`leader/report.rs`), retrying until the
//! leader answers. Older leaders do not know the request and are asked again later.
//!
//! [`needs_report`] is the rule (pure); [`report_loop`] carries it out.

use std::time::Duration;

use muster_shared::retry::RetryPolicy;

use crate::agent::Here;
use crate::leader::{self, Authority, LeaderOp};
use crate::state::member_id;

/// This agent's version, as members report it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// How often the record is compared with what this member runs. A look reads only the local
/// applied state; the leader is asked only when they differ. Often, because until a member has
/// reported, the role policy leaves it out of its zone arithmetic.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// After the leader took a report, the next one waits at least this long even if the local
/// state still differs: a spare's applied state lags behind the leader's until it rejoins the
/// configuration, and it must not ask the leader every second meanwhile. A record that lost
/// the report (rewritten by an agent of an older version) is put right after this.
const AFTER_ACCEPTED: Duration = Duration::from_secs(60);

/// What this member's record says of it: its zone, and the version it last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub zone: Option<String>,
    pub version: Option<String>,
}

/// Whether the leader must be told (pure): the record is missing (not applied here yet: the
/// leader has it) never counts, and a record saying the same needs nothing.
pub fn needs_report(recorded: Option<&Recorded>, zone: Option<&str>, version: &str) -> bool {
    recorded.is_some_and(|r| r.zone.as_deref() != zone || r.version.as_deref() != Some(version))
}

/// Reports this member's zone and version whenever its record differs from them.
pub async fn report_loop(here: Here<'_>, zone: Option<String>) {
    let id = here.me.node_id;
    let retry = RetryPolicy::exponential(Duration::from_millis(500), Duration::from_secs(30))
        .with_jitter(50);
    let mut backoff = retry.start();
    loop {
        let recorded = here
            .raft()
            .read_local(|s| {
                s.nodes.get(&id).map(|r| Recorded {
                    zone: r.zone.clone(),
                    version: r.version.clone(),
                })
            })
            .ok()
            .flatten();
        if !needs_report(recorded.as_ref(), zone.as_deref(), VERSION) {
            tokio::time::sleep(LOOK_EVERY).await;
            continue;
        }
        let op = LeaderOp::ReportSelf {
            node_id: member_id(id),
            zone: zone.clone(),
            version: VERSION.to_string(),
        };
        match leader::run(here, &Authority::Node, op).await {
            Ok(_) => {
                tracing::info!(
                    zone = zone.as_deref().unwrap_or("-"),
                    version = VERSION,
                    "the cluster records this member's zone and version"
                );
                backoff = retry.start();
                tokio::time::sleep(AFTER_ACCEPTED).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot report this member's zone and version yet; retrying");
                backoff.wait().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Recorded, needs_report};

    #[test]
    fn the_leader_is_told_only_what_the_record_does_not_say() {
        let rec = |zone: Option<&str>, version: Option<&str>| Recorded {
            zone: zone.map(String::from),
            version: version.map(String::from),
        };
        let cases: &[(Option<Recorded>, Option<&str>, bool)] = &[
            // Not applied here yet: nothing to compare, the leader may not know it either.
            (None, Some("a"), false),
            (Some(rec(Some("a"), Some("1.0.0"))), Some("a"), false),
            (Some(rec(None, Some("1.0.0"))), None, false),
            // Restarted in another zone, or without one.
            (Some(rec(Some("a"), Some("1.0.0"))), Some("b"), true),
            (Some(rec(Some("a"), Some("1.0.0"))), None, true),
            // Never reported (an older version wrote the record), or upgraded.
            (Some(rec(None, None)), None, true),
            (Some(rec(None, Some("0.9.0"))), None, true),
        ];
        for (recorded, zone, expect) in cases {
            assert_eq!(
                needs_report(recorded.as_ref(), *zone, "1.0.0"),
                *expect,
                "{recorded:?} {zone:?}"
            );
        }
    }
}
