//! `muster cert status`: every member's certificate and CA expiry, as the members report them
//! (the probes `muster plan` uses); `muster ca rotate` and `muster ca status`.

use super::{CliError, Target, output};
use crate::api::paths;
use crate::api::probe::ProbeReport;
use crate::api::types::CaStatus;
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

/// `muster ca rotate [--finish [--force]]`.
pub async fn ca_rotate(
    target: &Target,
    finish: bool,
    force: bool,
    json: bool,
) -> Result<(), CliError> {
    let body = serde_json::json!({ "finish": finish, "force": force }).to_string();
    let status: CaStatus = target.call("POST", paths::CA_ROTATE, Some(body)).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    if finish {
        print_finish(&status);
    } else {
        outln!(
            "CA rotation started: new CA {}. Members trust it next to the old one, then renew \
             their certificates from it. Watch `muster ca status`; when it says ready, run \
             `muster ca rotate --finish`",
            short(status.next_pin.as_deref().unwrap_or("?"))
        );
    }
    Ok(())
}

/// What `ca rotate --finish` did: the new CA, the tokens it revoked and the join secret that
/// replaces a live one (printed once: it is stored nowhere).
fn print_finish(status: &CaStatus) {
    outln!(
        "CA rotation finished: the cluster's CA is now {} and the old one is no longer trusted.",
        short(&status.pin)
    );
    for (kind, ids) in [
        ("join", &status.retired_join_tokens),
        ("operator", &status.retired_operator_tokens),
    ] {
        if !ids.is_empty() {
            outln!(
                "Revoked {} {kind} token(s) made under the old CA: {}",
                ids.len(),
                ids.join(", ")
            );
        }
    }
    outln!(
        "Tokens made under the old CA no longer work: make new ones on a member (muster token \
         create, muster operator-token create)."
    );
    match (&status.retired_join_secret, &status.join_secret) {
        (Some(old), Some(new)) => outln!(
            "The join secret {old} is revoked. Its replacement, shown only now:\n\n  {new}\n\n\
             Write it to the --join-secret-file of your machines' user-data (launch template, \
             Butane) before new machines start: machines still holding the old secret cannot join."
        ),
        (Some(old), None) => outln!(
            "The join secret {old} is revoked; make a new one with `muster secret generate` and \
             start a member with it, or use join tokens."
        ),
        _ => {}
    }
}

/// `muster ca status`.
pub async fn ca_status(target: &Target, json: bool) -> Result<(), CliError> {
    let status: CaStatus = target.call("GET", paths::CA, None).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    outln!("CA        {}", status.pin);
    match &status.next_pin {
        None => outln!("rotation  none"),
        Some(next) => {
            outln!("next CA   {next}");
            let what = match status.phase.as_str() {
                "trusting" => "members are adding the new CA to what they trust",
                "reissuing" => "members are renewing their certificates from the new CA",
                "ready" => "every member has moved: run `muster ca rotate --finish`",
                other => other,
            };
            outln!("phase     {} ({what})", status.phase);
            if !status.waiting_for.is_empty() {
                outln!("waiting   {}", status.waiting_for.join(", "));
            }
        }
    }
    Ok(())
}

fn short(pin: &str) -> &str {
    pin.get(..16).unwrap_or(pin)
}
