//! `muster kv …`: read, write (optionally compare-and-set), delete, list and watch keys.

use std::time::Duration;

use muster_shared::form::urlencode;

use super::{CliError, Target};
use crate::api::ErrorKind;
use crate::api::paths;
use crate::api::types::KvEntry;
use crate::outln;
use crate::state::kv::{EventKind, KvEvent, WatchAnswer};
use muster_shared::retry::{Backoff, RetryPolicy};

/// How long one watch call is held by the agent when nothing changes (below the CLI's 30 s).
const WATCH_WAIT_MS: u64 = 20_000;

fn key_path(base: &str, key: &str) -> String {
    format!("{base}?key={}", urlencode(key))
}

pub async fn get(target: &Target, key: &str, json: bool) -> Result<(), CliError> {
    let entry: KvEntry = target.call("GET", &key_path(paths::KV, key), None).await?;
    if json {
        outln!("{}", serde_json::to_string(&entry)?);
    } else {
        outln!("{}", entry.value);
    }
    Ok(())
}

/// A compare-and-set condition from the command line.
pub enum Condition {
    None,
    Revision(u64),
    Absent,
}

pub async fn put(
    target: &Target,
    key: &str,
    value: &str,
    condition: Condition,
    json: bool,
) -> Result<(), CliError> {
    let body = match condition {
        Condition::None => serde_json::json!({ "value": value }),
        Condition::Revision(rev) => serde_json::json!({ "value": value, "if_revision": rev }),
        Condition::Absent => serde_json::json!({ "value": value, "if_absent": true }),
    };
    let v: serde_json::Value = target
        .call("PUT", &key_path(paths::KV, key), Some(body.to_string()))
        .await?;
    if json {
        outln!("{v}");
    }
    Ok(())
}

pub async fn del(
    target: &Target,
    key: &str,
    if_revision: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    let mut path = key_path(paths::KV, key);
    if let Some(rev) = if_revision {
        path.push_str(&format!("&if_revision={rev}"));
    }
    let v: serde_json::Value = target.call("DELETE", &path, None).await?;
    if json {
        outln!("{v}");
    }
    Ok(())
}

pub async fn list(target: &Target, prefix: &str, json: bool) -> Result<(), CliError> {
    let path = format!("{}?prefix={}", paths::KV_LIST, urlencode(prefix));
    let entries: Vec<KvEntry> = target.call("GET", &path, None).await?;
    if json {
        outln!("{}", serde_json::to_string(&entries)?);
    } else {
        for e in entries {
            outln!("{}\t{}", e.key, e.value);
        }
    }
    Ok(())
}

/// Whether a failed watch call is worth repeating from the same revision: the agent or the
/// leader is away for a moment. Anything else (compacted, unauthorized, a bad revision) ends
/// the watch.
fn transient(e: &CliError) -> bool {
    match e {
        CliError::Unreachable(_) => true,
        CliError::Api(e) => matches!(e.kind, ErrorKind::NoLeader | ErrorKind::QuorumLost),
        _ => false,
    }
}

/// Streams the changes under `prefix` from `from` on (0: from now on), one per line, until
/// `limit` changes were printed (if given). Reconnects by itself and resumes at the next
/// revision, so nothing is lost or printed twice across an agent restart or a leader change.
pub async fn watch(
    target: &Target,
    prefix: &str,
    from: u64,
    limit: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    let mut from = from;
    let mut printed = 0u64;
    let mut outage: Option<Backoff> = None;
    loop {
        // "From now on" is pinned to a revision by a first answer that does not wait, so that a
        // retry after a lost answer resumes there instead of at a later "now".
        let wait_ms = if from == 0 { 0 } else { WATCH_WAIT_MS };
        let path = format!(
            "{}?prefix={}&from_revision={from}&wait_ms={wait_ms}",
            paths::KV_WATCH,
            urlencode(prefix)
        );
        let answer: WatchAnswer = match target.call("GET", &path, None).await {
            Ok(a) => a,
            Err(e) if transient(&e) => {
                let backoff = outage.get_or_insert_with(|| {
                    eprintln!("muster: watch interrupted ({e}); resuming at revision {from}");
                    RetryPolicy::exponential(Duration::from_millis(200), Duration::from_secs(2))
                        .start()
                });
                backoff.wait().await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if outage.take().is_some() {
            eprintln!("muster: watch resumed at revision {from}");
        }
        for event in &answer.events {
            print_event(event, json)?;
            printed += 1;
            if limit.is_some_and(|l| printed >= l) {
                return Ok(());
            }
        }
        from = answer.next_revision;
    }
}

fn print_event(e: &KvEvent, json: bool) -> Result<(), CliError> {
    if json {
        outln!("{}", serde_json::to_string(e)?);
        return Ok(());
    }
    match e.kind {
        EventKind::Put => outln!(
            "{}\tput\t{}\t{}",
            e.revision,
            e.key,
            e.value.as_deref().unwrap_or_default()
        ),
        EventKind::Del => outln!("{}\tdel\t{}", e.revision, e.key),
    }
    Ok(())
}
