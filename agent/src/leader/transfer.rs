//! `muster leader transfer [NAME]`, on the leader: hand the leadership to another voter (the one
//! named, or the first that holds the whole log) and say who leads now. The hand-over itself
//! (writes paused, heartbeats stopped, the successor asked to campaign) is the raft facade's
//! (`raft/node/handover.rs`); an agent stopped with SIGTERM runs the same before it goes.

use crate::agent::Here;
use crate::api::types::LeaderTransfer;
use crate::api::{ApiError, ErrorKind};
use crate::raft::HandOver;

pub async fn transfer(here: Here<'_>, to: Option<&str>) -> Result<LeaderTransfer, ApiError> {
    match here.raft().hand_over(to).await {
        HandOver::Done { name, pause_ms, .. } => {
            tracing::info!(to = %name, pause_ms, "handed the leadership over");
            Ok(LeaderTransfer {
                from: here.me.name.clone(),
                to: name,
                pause_ms,
            })
        }
        HandOver::NotLeader => Err(ApiError::new(
            ErrorKind::NoLeader,
            "this node stopped leading before it could hand over; see `muster status`",
        )),
        HandOver::Alone => Err(ApiError::invalid(format!(
            "{} is the only voter: there is nobody to hand the leadership to",
            here.me.name
        ))),
        HandOver::Failed { why } => Err(ApiError::new(
            ErrorKind::Unavailable,
            format!(
                "the leadership was not handed over: {why}. {} still leads; try again, or name \
                 a voter that is up (`muster status` shows who is caught up)",
                here.me.name
            ),
        )),
    }
}
