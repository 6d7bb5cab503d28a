//! `muster cert status`: every member's certificate and CA expiry, as the members report them
//! (the probes `muster plan` uses).

use super::{CliError, Target, output};
use crate::api::paths;
use crate::api::probe::ProbeReport;
use crate::clock::now_ms;
use crate::outln;

/// Expiry within this many days is flagged.
const SOON_DAYS: u64 = 30;

pub async fn status(target: &Target, json: bool) -> Result<(), CliError> {
    let report: ProbeReport = target.call("GET", paths::PROBE, None).await?;
    if json {
        let rows: Vec<serde_json::Value> = report
            .probes
            .iter()
            .map(|p| {
                serde_json::json!({
                    "name": p.name,
                    "address": p.address,
                    "cert_expires_ms": p.report.as_ref().and_then(|r| r.cert_expires_ms),
                    "ca_expires_ms": p.report.as_ref().and_then(|r| r.ca_expires_ms),
                    "error": p.error,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let now = now_ms();
    let when = |at: Option<u64>| match at {
        None => "-".to_string(),
        Some(at) if at <= now => "EXPIRED".to_string(),
        Some(at) => {
            let days = (at - now) / 86_400_000;
            if days < SOON_DAYS {
                format!("in {days}d (SOON)")
            } else {
                format!("in {days}d")
            }
        }
    };
    let rows = report
        .probes
        .iter()
        .map(|p| {
            let r = p.report.as_ref();
            vec![
                p.name.clone(),
                p.address.clone(),
                when(r.and_then(|r| r.cert_expires_ms)),
                when(r.and_then(|r| r.ca_expires_ms)),
                p.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    output::print_table(
        &["NAME", "ADDRESS", "CERTIFICATE", "CA", "PROBLEM"],
        rows,
        &[],
    );
    Ok(())
}
