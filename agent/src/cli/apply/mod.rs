//! `muster config export`, `muster plan` and `muster apply`: gather the probes from a member,
//! ask `apply::plan` what to change, print it, and (apply) carry the steps out one at a time,
//! probing again before each. Only steps the operator saw are carried out.
//!
//! Here: the two commands, each a sequence of named steps. Reading the cluster is `gather.rs`,
//! the decision between steps `decide.rs`, the calls that change the cluster `carry_out.rs`,
//! what is printed `print.rs` and `describe.rs`, `config export` `export.rs`.

mod carry_out;
mod decide;
mod describe;
mod export;
mod gather;
mod print;

pub use export::export;

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use serde::Serialize;

use self::carry_out::{JoinCommand, carry_out};
use self::decide::{Recheck, recheck};
use self::describe::describe;
use self::gather::gather;
use self::print::print_plan;
use super::{CliError, Target};
use crate::apply::{Manifest, Plan, Step, plan};
use crate::outln;

/// Where `plan` and `apply` read the desired cluster and what they may use.
pub struct ApplyArgs<'a> {
    pub file: &'a Path,
    /// A directory of `muster backup` files: the newest of this cluster is named in the
    /// recovery steps.
    pub backups: Option<&'a Path>,
    pub json: bool,
}

/// `muster plan`: prints the probes and the plan; changes nothing. With `exit_code`, a plan
/// with changes ends with exit code 2.
pub async fn plan_command(
    target: &Target,
    args: &ApplyArgs<'_>,
    exit_code: bool,
) -> Result<(), CliError> {
    let manifest = read_manifest(args.file)?;
    let observed = gather(target).await?;
    let plan = plan(&manifest, &observed);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print_plan(&plan, args)?;
    }
    if exit_code && plan.has_changes() {
        return Err(CliError::CommandExit(2));
    }
    Ok(())
}

/// What `apply --json` prints at the end.
#[derive(Serialize)]
struct ApplyReport {
    plan: Plan,
    carried_out: Vec<Step>,
    skipped: Vec<Step>,
    /// The command to start each new machine with.
    join_commands: Vec<JoinCommand>,
}

/// What every step of one `apply` run works with.
struct Run<'a> {
    target: &'a Target,
    manifest: &'a Manifest,
    tokens_out: Option<&'a Path>,
    json: bool,
}

/// `muster apply`: shows the plan, asks, then carries it out step by step.
pub async fn apply_command(
    target: &Target,
    args: &ApplyArgs<'_>,
    yes: bool,
    tokens_out: Option<&Path>,
) -> Result<(), CliError> {
    let manifest = read_manifest(args.file)?;
    if let Some(dir) = tokens_out {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Failed(format!("--tokens-out {}: {e}", dir.display())))?;
    }
    let observed = gather(target).await?;
    let shown = plan(&manifest, &observed);
    if !args.json {
        print_plan(&shown, args)?;
    }
    if shown.quorum_lost.is_some() {
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&shown)?);
        }
        return Err(CliError::Failed(
            "the quorum is lost; nothing was changed (the steps above rebuild the cluster)".into(),
        ));
    }
    let confirmed: Vec<Step> = shown
        .steps
        .iter()
        .filter(|s| s.action.automatic())
        .cloned()
        .collect();
    let mut report = ApplyReport {
        plan: shown.clone(),
        carried_out: Vec::new(),
        skipped: Vec::new(),
        join_commands: Vec::new(),
    };
    if !confirmed.is_empty() && !yes && !confirm(confirmed.len())? {
        return Err(CliError::Failed("nothing was changed".into()));
    }
    let run = Run {
        target,
        manifest: &manifest,
        tokens_out,
        json: args.json,
    };
    for (n, step) in confirmed.iter().enumerate() {
        apply_step(&run, &shown, step, (n, confirmed.len()), &mut report).await?;
    }
    print_outcome(&shown, &report, args.json, confirmed.is_empty())
}

/// One confirmed step: probe again, then carry it out only if the cluster as it is now still
/// needs it (`decide.rs`). `at` is (steps done, steps confirmed).
async fn apply_step(
    run: &Run<'_>,
    shown: &Plan,
    step: &Step,
    at: (usize, usize),
    report: &mut ApplyReport,
) -> Result<(), CliError> {
    let (n, total) = at;
    let observed = gather(run.target).await?;
    let now = plan(run.manifest, &observed);
    match recheck(step, shown, &now, n, total)? {
        Recheck::Skip => {
            if !run.json {
                outln!(
                    "[{}/{total}] skipped: {} (no longer needed)",
                    n + 1,
                    describe(&step.action)
                );
            }
            report.skipped.push(step.clone());
        }
        Recheck::Carry(current) => {
            let done =
                carry_out(run.target, current, &observed, run.manifest, run.tokens_out).await?;
            if !run.json {
                outln!("[{}/{total}] {}", n + 1, done.summary);
            }
            if let Some(join) = done.join {
                report.join_commands.push(join);
            }
            report.carried_out.push(current.clone());
        }
    }
    Ok(())
}

/// After the last step: the report (`--json`), or what is left to do by hand; an error when a
/// part of the file was not applied.
fn print_outcome(
    shown: &Plan,
    report: &ApplyReport,
    json: bool,
    none_confirmed: bool,
) -> Result<(), CliError> {
    let manual: Vec<&Step> = shown
        .steps
        .iter()
        .filter(|s| !s.action.automatic())
        .collect();
    if json {
        outln!("{}", serde_json::to_string_pretty(report)?);
    } else if none_confirmed && manual.is_empty() && shown.blocked.is_empty() {
        outln!("no changes");
    } else if !manual.is_empty() {
        outln!("upgrade by hand, in this order (apply does not log in to machines):");
        for s in manual {
            outln!("  {}: {}", describe(&s.action), s.reason);
        }
    }
    if !shown.blocked.is_empty() {
        return Err(CliError::Failed(format!(
            "{} part(s) of the file were not applied: {}",
            shown.blocked.len(),
            shown.blocked.join("; ")
        )));
    }
    Ok(())
}

fn read_manifest(file: &Path) -> Result<Manifest, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", file.display())))?;
    Manifest::parse(&text)
        .map_err(|e| CliError::Usage(format!("{}:{}: {}", file.display(), e.line, e.message)))
}

/// Asks on the terminal; refuses to guess when there is none.
fn confirm(steps: usize) -> Result<bool, CliError> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::Usage(
            "apply changes the cluster and asks first; run it from a terminal, or pass --yes \
             after reading `muster plan`"
                .into(),
        ));
    }
    eprint!("carry out these {steps} step(s)? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
