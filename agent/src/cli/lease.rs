//! `muster lease claim|release|get|list`: leases by hand (for scripts and for looking).
//! `lease run` is in `lease_run.rs`.

use std::time::Duration;

use muster_shared::duration::{format_duration, parse_duration};
use muster_shared::form::urlencode;

use super::{CliError, Target, output};
use crate::api::paths;
use crate::api::types::LeaseInfo;
use crate::outln;
use crate::state::lease::{MAX_TTL_MS, MIN_TTL_MS};

/// `--ttl`: 1s..=1h.
pub fn ttl(text: &str) -> Result<Duration, CliError> {
    let ttl = parse_duration(text).map_err(|e| CliError::Usage(format!("--ttl: {e}")))?;
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if !(MIN_TTL_MS..=MAX_TTL_MS).contains(&ms) {
        return Err(CliError::Usage(format!(
            "--ttl {text}: a lease lasts between {} and {}",
            format_duration(Duration::from_millis(MIN_TTL_MS)),
            format_duration(Duration::from_millis(MAX_TTL_MS))
        )));
    }
    Ok(ttl)
}

/// The holder id when `--holder` is not given: this machine's host name, this process and a
/// random part, so that two runs never share a claim (two containers can both be pid 1 of the
/// same host name).
pub fn default_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect::<String>();
    let host = if host.is_empty() { "host".into() } else { host };
    format!(
        "{host}:{}:{}",
        std::process::id(),
        muster_shared::token::random_hex(4)
    )
}

fn lease_path(name: &str) -> String {
    format!("{}/{}", paths::LEASES, urlencode(name))
}

/// Claims `name` for `holder`, or renews the grant whose key is `key`.
pub async fn claim_once(
    target: &Target,
    name: &str,
    holder: &str,
    ttl: Duration,
    key: Option<&str>,
) -> Result<LeaseInfo, CliError> {
    let body = serde_json::json!({
        "holder": holder,
        "ttl_ms": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        "key": key,
    });
    target
        .call("POST", &lease_path(name), Some(body.to_string()))
        .await
}

pub async fn release_once(
    target: &Target,
    name: &str,
    holder: &str,
    key: &str,
) -> Result<(), CliError> {
    let body = serde_json::json!({ "holder": holder, "key": key });
    let _: serde_json::Value = target
        .call("DELETE", &lease_path(name), Some(body.to_string()))
        .await?;
    Ok(())
}

fn describe(l: &LeaseInfo) -> String {
    format!(
        "lease {} held by {} (fencing token {}, {} left)",
        l.name,
        l.holder,
        l.token,
        format_duration(Duration::from_millis(l.remaining_ms))
    )
}

pub async fn claim(
    target: &Target,
    name: &str,
    holder: &str,
    ttl: Duration,
    key: Option<&str>,
    json: bool,
) -> Result<(), CliError> {
    let lease = claim_once(target, name, holder, ttl, key).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&lease)?);
        return Ok(());
    }
    outln!("{}", describe(&lease));
    if let Some(key) = &lease.key {
        outln!("lease key {key}");
        eprintln!(
            "the lease key is shown only this once: renew with `muster lease claim {name} \
             --holder {holder} --key KEY`, release with `muster lease release {name} --holder \
             {holder} --key KEY`"
        );
    }
    Ok(())
}

pub async fn release(
    target: &Target,
    name: &str,
    holder: &str,
    key: &str,
    json: bool,
) -> Result<(), CliError> {
    release_once(target, name, holder, key).await?;
    if json {
        outln!("{}", serde_json::json!({ "name": name, "holder": holder }));
    }
    Ok(())
}

pub async fn get(target: &Target, name: &str, json: bool) -> Result<(), CliError> {
    let lease: LeaseInfo = target.call("GET", &lease_path(name), None).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&lease)?);
    } else {
        outln!("{}", describe(&lease));
    }
    Ok(())
}

pub async fn list(target: &Target, json: bool) -> Result<(), CliError> {
    let leases: Vec<LeaseInfo> = target.call("GET", paths::LEASES, None).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&leases)?);
        return Ok(());
    }
    let rows = leases
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                l.holder.clone(),
                l.token.to_string(),
                format_duration(Duration::from_millis(l.remaining_ms)),
                format_duration(Duration::from_millis(l.held_for_ms)),
            ]
        })
        .collect();
    output::print_table(&["NAME", "HOLDER", "TOKEN", "LEFT", "HELD FOR"], rows, &[]);
    Ok(())
}
