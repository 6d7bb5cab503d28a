//! What `plan` and `apply` print before anything changes: the summary line, the probe table, and
//! the steps (or, with the quorum lost, the recovery steps, naming the newest backup). Only
//! words and tables: kept apart from deciding and carrying out so that the output can change
//! without touching either.

use std::path::Path;

use super::ApplyArgs;
use super::describe::describe;
use crate::apply::plan::{ProbeRow, Recovery};
use crate::apply::{FoundBackup, Plan, Step, recovery_steps};
use crate::backup_file;
use crate::cli::{CliError, output};
use crate::clock::now_ms;
use crate::outln;

/// Most bytes read from a file in `--backups DIR` to find its header line.
const HEADER_LIMIT: u64 = 64 * 1024;

/// The plan as `plan` prints it, and `apply` before it asks.
pub fn print_plan(plan: &Plan, args: &ApplyArgs<'_>) -> Result<(), CliError> {
    print_summary(plan);
    print_probes(plan);
    if let Some(recovery) = &plan.quorum_lost {
        print_recovery(plan, recovery, args);
        return Ok(());
    }
    print_steps(plan);
    Ok(())
}

/// One line: who leads, how many voters, and the failures they survive.
fn print_summary(plan: &Plan) {
    let tolerance = if plan.failure_tolerance < 0 {
        "none: the quorum is lost".to_string()
    } else {
        plan.failure_tolerance.to_string()
    };
    outln!(
        "cluster {}: leader {}, {} voter(s), {} healthy, quorum {}, failure tolerance {tolerance}",
        plan.cluster_id,
        plan.leader.as_deref().unwrap_or("none"),
        plan.voters,
        plan.healthy_voters,
        plan.quorum,
    );
    outln!("");
}

/// The probe table, then each member's problem on a line of its own.
fn print_probes(plan: &Plan) {
    let now = now_ms();
    let rows = plan.probes.iter().map(|r| probe_row(r, now)).collect();
    output::print_table(
        &[
            "NAME",
            "ADDRESS",
            "IN FILE",
            "ROLE",
            "REACHABLE",
            "LAG",
            "VERSION",
            "CERT EXPIRES",
            "DATA DIR",
            "JOINED",
        ],
        rows,
        &[5],
    );
    for r in plan.probes.iter().filter(|r| r.problem.is_some()) {
        outln!("  {}: {}", r.name, r.problem.as_deref().unwrap_or_default());
    }
    outln!("");
}

/// With the quorum lost: the numbered steps that rebuild the cluster, naming the newest
/// backup in `--backups` when there is one.
fn print_recovery(plan: &Plan, recovery: &Recovery, args: &ApplyArgs<'_>) {
    let backup = match args.backups {
        Some(dir) => newest_backup(dir, &plan.cluster_id),
        None => None,
    };
    let file = args.file.display().to_string();
    let found = backup.as_ref().map(|(file, applied_index)| FoundBackup {
        file,
        applied_index: *applied_index,
    });
    for (n, step) in recovery_steps(recovery, &plan.cluster_id, found, &file)
        .iter()
        .enumerate()
    {
        if n == 0 {
            outln!("{step}");
        } else {
            outln!("{n}. {step}");
        }
    }
}

/// The steps apply carries out, in order, then those left to the operator and what it will
/// not apply.
fn print_steps(plan: &Plan) {
    let automatic: Vec<&Step> = plan.steps.iter().filter(|s| s.action.automatic()).collect();
    if automatic.is_empty() {
        outln!("no changes");
    } else {
        outln!("plan, in this order ({} step(s)):", automatic.len());
        for (n, s) in automatic.iter().enumerate() {
            outln!(
                "  {}. {} — {} [failure tolerance {} → {}]",
                n + 1,
                describe(&s.action),
                s.reason,
                s.tolerance_before.max(0),
                s.tolerance_after.max(0)
            );
        }
    }
    let manual: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| !s.action.automatic())
        .collect();
    if !manual.is_empty() {
        outln!("by hand, in this order:");
        for s in manual {
            outln!("  - {} — {}", describe(&s.action), s.reason);
        }
    }
    for b in &plan.blocked {
        outln!("not applied: {b}");
    }
}

fn probe_row(r: &ProbeRow, now: u64) -> Vec<String> {
    let dash = || "-".to_string();
    vec![
        r.name.clone(),
        r.address.clone(),
        if r.in_file { "yes" } else { "no" }.into(),
        r.role.clone(),
        if r.role == "absent" {
            dash()
        } else if r.reachable {
            "yes".into()
        } else {
            "NO".into()
        },
        r.lag.map_or_else(dash, |l| l.to_string()),
        r.version.clone().unwrap_or_else(dash),
        r.cert_expires_ms.map_or_else(dash, |at| {
            if at <= now {
                "EXPIRED".into()
            } else {
                format!("in {}d", (at - now) / 86_400_000)
            }
        }),
        match (r.data_dir_ok, r.data_dir_bytes) {
            (Some(true), Some(bytes)) => format!("ok {}", size(bytes)),
            (Some(false), _) => "FAILING".into(),
            _ => dash(),
        },
        match r.joined {
            Some(true) => "yes",
            Some(false) => "never",
            None => "-",
        }
        .into(),
    ]
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1}GiB", b as f64 / f64::from(1u32 << 30)),
        b if b >= 1 << 20 => format!("{:.1}MiB", b as f64 / f64::from(1u32 << 20)),
        b => format!("{}KiB", b.div_ceil(1024)),
    }
}

/// The newest backup of `cluster_id` in `dir` (by the time it was taken), judged by each
/// file's header line alone (`muster restore` verifies the whole file before it writes).
fn newest_backup(dir: &Path, cluster_id: &str) -> Option<(String, u64)> {
    use std::io::Read;
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let mut first = Vec::new();
            std::fs::File::open(&path)
                .ok()?
                .take(HEADER_LIMIT)
                .read_to_end(&mut first)
                .ok()?;
            let line = first.split(|b| *b == b'\n').next()?;
            let header: backup_file::BackupHeader = serde_json::from_slice(line).ok()?;
            (header.cluster_id == cluster_id).then_some((
                header.created_ms,
                header.applied_index,
                path,
            ))
        })
        .max_by_key(|(created, _, _)| *created)
        .map(|(_, index, path)| (path.display().to_string(), index))
}
