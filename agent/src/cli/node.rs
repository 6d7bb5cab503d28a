//! `muster node remove`, `muster node set-address` and `muster leader transfer`: the
//! membership and leadership changes an operator asks for by hand (`apply` makes the same
//! calls from a file).

use muster_shared::form::urlencode;

use super::{CliError, Target, print_json};
use crate::api::paths;
use crate::api::types::{AddressChange, LeaderTransfer, NodeRemoved};
use crate::outln;

pub async fn node_remove(
    target: &Target,
    name: &str,
    force: bool,
    json: bool,
) -> Result<(), CliError> {
    let path = format!("{}/{}?force={force}", paths::MEMBERS, urlencode(name));
    let removed: NodeRemoved = target.call("DELETE", &path, None).await?;
    if json {
        return print_json(&removed);
    }
    outln!("{}", removed.message);
    Ok(())
}

pub async fn node_set_address(
    target: &Target,
    name: &str,
    address: &str,
    json: bool,
) -> Result<(), CliError> {
    let path = format!("{}/{}/address", paths::MEMBERS, urlencode(name));
    let body = serde_json::json!({ "address": address });
    let change: AddressChange = target.call("PUT", &path, Some(body.to_string())).await?;
    if json {
        return print_json(&change);
    }
    if change.changed {
        outln!(
            "{} ({}) moved from {} to {}: peers dial it there now, and it renews its certificate \
             for the new host. Restart it later with --advertise {}",
            change.name,
            change.id,
            change.from,
            change.to,
            change.to
        );
    } else {
        outln!(
            "{} is already at {}; nothing changed",
            change.name,
            change.to
        );
    }
    Ok(())
}

pub async fn leader_transfer(
    target: &Target,
    name: Option<&str>,
    json: bool,
) -> Result<(), CliError> {
    let path = match name {
        Some(name) => format!("{}?to={}", paths::LEADER_TRANSFER, urlencode(name)),
        None => paths::LEADER_TRANSFER.to_string(),
    };
    let moved: LeaderTransfer = target.call("POST", &path, None).await?;
    if json {
        return print_json(&moved);
    }
    outln!(
        "{} leads now (was {}); writes paused for {} ms",
        moved.to,
        moved.from,
        moved.pause_ms
    );
    Ok(())
}
