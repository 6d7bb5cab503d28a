//! `muster leader transfer [NAME]`, on the leader: hand the leadership to another voter (the one
//! named, or the first that holds the whole log) and say who leads now. The hand-over itself
//! (writes paused, heartbeats stopped, the successor asked to campaign) is the raft facade's
//! (`raft/node/handover.rs`); an agent stopped with SIGTERM runs the same before it goes.
//!
//! No answer here is `no_leader`: that kind means "nothing was done, ask the next leader", and
//! a transfer sent on to the next leader would move the leadership a second time.

use crate::agent::Here;
use crate::api::types::LeaderTransfer;
use crate::api::{ApiError, ErrorKind};
use crate::raft::HandOver;

pub async fn transfer(here: Here<'_>, to: Option<&str>) -> Result<LeaderTransfer, ApiError> {
    let me = here.me.name.clone();
    // Asked to move to itself (a retry that found the move already made, say): done.
    if to == Some(me.as_str()) {
        return Ok(LeaderTransfer {
            from: me.clone(),
            to: me,
            pause_ms: 0,
        });
    }
    match here.raft().hand_over(to).await {
        HandOver::Done { name, pause_ms, .. } => {
            tracing::info!(to = %name, pause_ms, "handed the leadership over");
            Ok(LeaderTransfer {
                from: me,
                to: name,
                pause_ms,
            })
        }
        HandOver::NotLeader => Err(ApiError::new(
            ErrorKind::Unavailable,
            format!(
                "{me} stopped leading before it could hand over (another hand-over, or an \
                 election, moved the leadership meanwhile); `muster status` says who leads"
            ),
        )),
        HandOver::Alone => Err(ApiError::invalid(format!(
            "{me} is the only voter: there is nobody to hand the leadership to"
        ))),
        HandOver::Failed { why } => Err(ApiError::new(
            ErrorKind::Unavailable,
            format!(
                "the leadership was not handed over: {why}. It may still have moved (an \
                 election started by the successor): `muster status` says who leads; name a \
                 voter that is up and caught up to try again"
            ),
        )),
    }
}
