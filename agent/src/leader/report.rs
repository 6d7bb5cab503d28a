//! A member's report of itself, on the leader: the failure zone it runs in (`--zone`) and its
//! agent version go into its member record, where the role policy (zones, newer versions
//! first) and `muster status` read them. Only the member itself reports (the leader compares
//! the id with the caller's certificate, see `authority.rs`); a record that already says the
//! same is left as it is, so a member restarting unchanged writes nothing.

use serde::{Deserialize, Serialize};

use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::state::{NodeId, Request, member_id, valid_zone};

/// What the leader answers a member's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportRecorded {
    /// False when the record already said the same.
    pub changed: bool,
}

/// Records that member `id` runs `version` in `zone` (`None`: no zone said).
/// Refuses a zone `--zone` would not accept and a version that is not 1 to 64 printable
/// characters: both end up in log lines, metric labels and `muster status`.
pub fn check_zone_and_version(zone: Option<&str>, version: &str) -> Result<(), ApiError> {
    if zone.is_some_and(|z| !valid_zone(z)) {
        return Err(ApiError::invalid(
            "a zone is 1 to 63 letters, digits, `.`, `_` or `-`",
        ));
    }
    if version.is_empty() || version.len() > 64 || version.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "a version is 1 to 64 printable characters",
        ));
    }
    Ok(())
}

pub async fn record(
    leader: Leader<'_, impl Replica>,
    id: NodeId,
    zone: Option<String>,
    version: String,
) -> Result<ReportRecorded, ApiError> {
    check_zone_and_version(zone.as_deref(), &version)?;
    // One membership write at a time: an address change or a removal of the same member must
    // not be undone by a record read before it.
    let _one_at_a_time = leader.local.membership_ops.lock().await;
    let record = leader.replica.read(|s| s.nodes.get(&id).cloned()).await?;
    let Some(mut record) = record else {
        return Err(ApiError::new(
            ErrorKind::Unauthorized,
            format!("node {} is not a member of this cluster", member_id(id)),
        ));
    };
    if record.zone == zone && record.version.as_deref() == Some(version.as_str()) {
        return Ok(ReportRecorded { changed: false });
    }
    tracing::info!(
        node = %record.name,
        zone = zone.as_deref().unwrap_or("-"),
        %version,
        "a member reported its zone and version"
    );
    record.zone = zone;
    record.version = Some(version);
    leader
        .replica
        .write(Request::UpsertNode { id, node: record })
        .await?;
    Ok(ReportRecorded { changed: true })
}
