//! `muster config export`, `muster plan` and `muster apply`: gather the probes from a member,
//! ask `apply::plan` what to change, print it, and (apply) carry the steps out one at a time,
//! probing again before each. Only steps the operator saw are carried out.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use muster_shared::duration::format_duration;
use muster_shared::form::urlencode;
use serde::Serialize;

use super::{CliError, Target, output};
use crate::api::fleetlock::FleetLockStatus;
use crate::api::probe::{ProbeReport, SettingsInfo, SettingsUpdate};
use crate::api::types::{NodeRemoved, TokenCreated};
use crate::api::{ErrorKind, paths};
use crate::apply::plan::ProbeRow;
use crate::apply::{
    Action, DesiredFleetLock, DesiredMember, DesiredSettings, Manifest, Observed, ObservedMember,
    Plan, Step, plan, recovery_steps,
};
use crate::backup_file;
use crate::clock::now_ms;
use crate::{datadir, outln};

/// How long a join token `apply` issues stays valid: long enough to boot a machine.
const APPLY_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Most bytes read from a file in `--backups DIR` to find its header line.
const HEADER_LIMIT: u64 = 64 * 1024;
/// How long plan waits for an election to end before it reports "no leader".
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// Where `plan` and `apply` read the desired cluster and what they may use.
pub struct ApplyArgs<'a> {
    pub file: &'a Path,
    /// A directory of `muster backup` files: the newest of this cluster is named in the
    /// recovery steps.
    pub backups: Option<&'a Path>,
    pub json: bool,
}

/// `muster config export`: today's cluster as a `cluster.toml` (with `json`, the same as JSON),
/// saying where the `[cluster]` values come from.
pub async fn export(target: &Target, json: bool) -> Result<(), CliError> {
    let observed = gather(target).await?;
    let Some(settings) = observed.settings else {
        return Err(CliError::Failed(
            "no leader answers, so the cluster's settings cannot be read; `muster status` \
             shows why"
                .into(),
        ));
    };
    let manifest = Manifest {
        members: observed
            .members
            .iter()
            .map(|m| {
                // The member's own report of its --data-dir; the default for one that did not
                // answer (or an older agent): edit the file where that is wrong.
                let reported = m
                    .report
                    .as_ref()
                    .and_then(|r| r.data_dir_path.clone())
                    .filter(|dir| crate::apply::manifest::is_plain_dir(dir));
                DesiredMember {
                    name: m.name.clone(),
                    address: m.address.clone(),
                    data_dir_given: reported.is_some(),
                    data_dir: reported
                        .unwrap_or_else(|| crate::apply::manifest::DEFAULT_DATA_DIR.into()),
                }
            })
            .collect(),
        settings: DesiredSettings {
            replace_after_ms: Some(settings.replace_after_ms),
            cleanup_dead_after_ms: Some(settings.cleanup_dead_after_ms),
            min_voters: Some(settings.min_voters),
            standbys: Some(settings.standbys),
        },
        fleetlock: observed.fleetlock.as_ref().map(|f| DesiredFleetLock {
            unknown_groups: Some(f.unknown_groups.clone()),
            groups: f
                .groups
                .iter()
                .filter(|g| g.configured)
                .map(|g| (g.name.clone(), g.slots))
                .collect(),
        }),
    };
    let leader = observed.leader.as_deref().unwrap_or("the leader");
    if json {
        let mut file = manifest.to_json();
        file["cluster_source"] = settings_source(observed.settings_pinned).into();
        outln!("{}", serde_json::to_string_pretty(&file)?);
        return Ok(());
    }
    let notes = if observed.settings_pinned {
        vec!["written by `muster apply`: every leader uses these, whatever its flags say".into()]
    } else {
        vec![
            format!(
                "{leader}'s flags (--replace-after, --cleanup-dead-after, --min-voters, \
                 --standbys): nothing was written yet;"
            ),
            "`muster apply` writes a value you change here for every leader".into(),
        ]
    };
    output::out(format_args!("{}", manifest.to_toml(&notes)));
    Ok(())
}

/// Where the settings in force come from, as `config export --json` and `GET /v1/settings`
/// name it.
fn settings_source(pinned: bool) -> &'static str {
    if pinned { "cluster" } else { "leader_flags" }
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

#[derive(Serialize)]
struct JoinCommand {
    name: String,
    command: String,
    /// Where `--tokens-out` wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<PathBuf>,
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
    for (n, step) in confirmed.iter().enumerate() {
        // Probe again: the step is carried out only if the cluster as it is now still needs it.
        let observed = gather(target).await?;
        let now = plan(&manifest, &observed);
        if now.quorum_lost.is_some() {
            return Err(CliError::Failed(format!(
                "the quorum was lost while applying (after {n} of {} steps); run `muster plan` \
                 to see the recovery steps",
                confirmed.len()
            )));
        }
        if now.leader.is_none() {
            return Err(CliError::Failed(format!(
                "no leader after {n} of {} steps; nothing more was changed: run `muster plan` \
                 again in a few seconds",
                confirmed.len()
            )));
        }
        let current = now.steps.iter().find(|s| s.action == step.action);
        // A removal is carried out only if it is no riskier now than what was shown.
        if let Some(current) = current
            && current.tolerance_after < step.tolerance_after
        {
            return Err(CliError::Failed(format!(
                "the cluster changed while applying: {} would now leave a failure tolerance of \
                 {}, not the {} shown; stopped after {n} of {} steps: run `muster plan` again",
                describe(&step.action),
                current.tolerance_after,
                step.tolerance_after,
                confirmed.len()
            )));
        }
        let Some(current) = current else {
            let new_blocks: Vec<&String> = now
                .blocked
                .iter()
                .filter(|b| !shown.blocked.contains(b))
                .collect();
            if !new_blocks.is_empty() {
                return Err(CliError::Failed(format!(
                    "the cluster changed while applying (after {n} of {} steps); stopped: {}",
                    confirmed.len(),
                    new_blocks
                        .iter()
                        .map(|b| b.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                )));
            }
            if !args.json {
                outln!(
                    "[{}/{}] skipped: {} (no longer needed)",
                    n + 1,
                    confirmed.len(),
                    describe(&step.action)
                );
            }
            report.skipped.push(step.clone());
            continue;
        };
        let done = carry_out(target, current, &observed, &manifest, tokens_out).await?;
        if !args.json {
            outln!("[{}/{}] {}", n + 1, confirmed.len(), done.summary);
        }
        if let Some(join) = done.join {
            report.join_commands.push(join);
        }
        report.carried_out.push(current.clone());
    }
    let manual: Vec<&Step> = shown
        .steps
        .iter()
        .filter(|s| !s.action.automatic())
        .collect();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else if confirmed.is_empty() && manual.is_empty() && shown.blocked.is_empty() {
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

/// The probes, the settings and FleetLock, as one observation. Waits up to [`LEADER_WAIT`]
/// for an election to end while a majority of the voters answers.
async fn gather(target: &Target) -> Result<Observed, CliError> {
    let started = Instant::now();
    loop {
        let report: ProbeReport = target.call("GET", paths::PROBE, None).await?;
        let mut observed = observe(report);
        if observed.leader.is_some() {
            // Reads through the leader: one that has just lost its quorum answers
            // `quorum_lost`/`no_leader`, which is the same as no leader.
            let read = async {
                let settings: SettingsInfo = target.call("GET", paths::SETTINGS, None).await?;
                let fleetlock: FleetLockStatus = target.call("GET", paths::FLEETLOCK, None).await?;
                Ok::<_, CliError>((settings, fleetlock))
            };
            match read.await {
                Ok((settings, fleetlock)) => {
                    observed.settings = Some(settings.settings);
                    observed.settings_pinned = settings.source == "cluster";
                    observed.fleetlock = Some(fleetlock);
                    return Ok(observed);
                }
                Err(CliError::Api(e))
                    if matches!(e.kind, ErrorKind::QuorumLost | ErrorKind::NoLeader) =>
                {
                    observed.leader = None;
                }
                Err(e) => return Err(e),
            }
        }
        // A lost quorum and an election look alike for a moment: wait for a leader either way.
        if started.elapsed() >= LEADER_WAIT {
            return Ok(observed);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The probe report as the plan reads it. A member is reachable when it answered the probe
/// and, when the status carries reachability (the leader's, or with no leader the asked
/// member's own check of each member), that says it answers too. The leader counts only while
/// it has a quorum and, judged by the probes alone, answers.
fn observe(report: ProbeReport) -> Observed {
    let status = report.status;
    let checked = status.members.iter().any(|m| m.reachable.is_some());
    let members: Vec<ObservedMember> = status
        .members
        .iter()
        .map(|m| {
            let probe = report.probes.iter().find(|p| p.name == m.name);
            let answered = probe.is_some_and(|p| p.answered);
            ObservedMember {
                name: m.name.clone(),
                address: m.address.clone(),
                role: m.role.clone(),
                // Both must hold: the leader's word lags a kill -9 by seconds, and a probe alone
                // cannot see a one-way cut.
                reachable: answered && (!checked || m.reachable == Some(true)),
                answered,
                match_index: m.match_index,
                error: probe.and_then(|p| p.error.clone()),
                report: probe.and_then(|p| p.report.clone()),
            }
        })
        .collect();
    let leader = status
        .leader
        .filter(|_| !status.quorum_lost)
        .filter(|l| checked || members.iter().any(|m| m.name == *l && m.answered));
    Observed {
        cluster_id: status.cluster_id,
        asked: status.self_name,
        leader,
        commit_index: status.commit_index,
        members,
        settings: None,
        settings_pinned: false,
        fleetlock: None,
    }
}

struct Done {
    summary: String,
    join: Option<JoinCommand>,
}

async fn carry_out(
    target: &Target,
    step: &Step,
    observed: &Observed,
    manifest: &Manifest,
    tokens_out: Option<&Path>,
) -> Result<Done, CliError> {
    let done = |summary: String| Done {
        summary,
        join: None,
    };
    match &step.action {
        Action::RemoveMember { name, .. } => {
            let path = format!("{}/{}", paths::MEMBERS, urlencode(name));
            let removed: NodeRemoved = target.call("DELETE", &path, None).await?;
            Ok(done(format!(
                "removed {name} ({}; failure tolerance {} → {}): {}",
                step.reason, step.tolerance_before, step.tolerance_after, removed.message
            )))
        }
        Action::IssueToken {
            name,
            address,
            data_dir,
        } => {
            let body = serde_json::json!({
                "ttl_ms": u64::try_from(APPLY_TOKEN_TTL.as_millis()).unwrap_or(u64::MAX),
                "uses": 1,
                "description": format!("muster apply: {name}"),
            });
            let created: TokenCreated = target
                .call("POST", paths::TOKENS, Some(body.to_string()))
                .await?;
            // Members that answer and stay (apply may remove the others a step later).
            let join: Vec<&str> = observed
                .members
                .iter()
                .filter(|m| m.reachable && manifest.members.iter().any(|d| d.name == m.name))
                .map(|m| m.address.as_str())
                .collect();
            let join = join.join(",");
            let command = format!(
                "muster agent --name {name} --advertise {address} --data-dir {data_dir} --join {join} --token {}",
                created.token
            );
            let expires = format_duration(APPLY_TOKEN_TTL);
            let Some(dir) = tokens_out else {
                return Ok(Done {
                    summary: format!(
                        "join token {} for {name} (single use, expires in {expires}); start \
                         {name} with an empty data dir:\n    {command}",
                        created.id
                    ),
                    join: Some(JoinCommand {
                        name: name.clone(),
                        command,
                        file: None,
                    }),
                });
            };
            let file = dir.join(format!("{name}.env"));
            let text = format!(
                "# muster apply: join token {id} for {name}, single use, expires in {expires}.\n\
                 # A systemd EnvironmentFile for `muster agent`, or run:\n\
                 # {command}\n\
                 MUSTER_NAME={name}\nMUSTER_ADVERTISE={address}\nMUSTER_DATA_DIR={data_dir}\n\
                 MUSTER_JOIN={join}\nMUSTER_JOIN_TOKEN={token}\n",
                id = created.id,
                token = created.token,
            );
            datadir::write_private(&file, text.as_bytes())
                .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", file.display())))?;
            Ok(Done {
                summary: format!(
                    "join token {} for {name} written to {} (mode 0600)",
                    created.id,
                    file.display()
                ),
                // The token is in the file only, never on stdout (not even with --json).
                join: Some(JoinCommand {
                    name: name.clone(),
                    command: command.replace(&created.token, "$MUSTER_JOIN_TOKEN"),
                    file: Some(file),
                }),
            })
        }
        Action::SetSettings { to, .. } => {
            let body = serde_json::to_string(to)?;
            let _: SettingsInfo = target.call("PUT", paths::SETTINGS, Some(body)).await?;
            Ok(done(format!("settings: {}", settings_text(to))))
        }
        Action::SetFleetlockGroup { group, slots, .. } => {
            let path = format!("{}/{}", paths::FLEETLOCK_GROUPS, urlencode(group));
            let body = serde_json::json!({ "slots": slots }).to_string();
            let _: serde_json::Value = target.call("PUT", &path, Some(body)).await?;
            Ok(done(format!("FleetLock group {group}: {slots} slot(s)")))
        }
        Action::DeleteFleetlockGroup { group } => {
            let path = format!("{}/{}", paths::FLEETLOCK_GROUPS, urlencode(group));
            let _: serde_json::Value = target.call("DELETE", &path, None).await?;
            Ok(done(format!("FleetLock group {group} deleted")))
        }
        Action::SetUnknownGroups { to, .. } => {
            let body = serde_json::json!({ "unknown_groups": to }).to_string();
            let _: serde_json::Value = target
                .call("PUT", paths::FLEETLOCK_SETTINGS, Some(body))
                .await?;
            Ok(done(format!("FleetLock unknown groups: {to}")))
        }
        Action::Upgrade { name, .. } => Ok(done(format!("{name}: upgrade by hand"))),
    }
}

fn delay_text(ms: u64) -> String {
    if ms == 0 {
        "off".into()
    } else {
        format_duration(Duration::from_millis(ms))
    }
}

fn settings_text(s: &SettingsUpdate) -> String {
    format!(
        "replace_after {}, cleanup_dead_after {}, min_voters {}, standbys {}",
        delay_text(s.replace_after_ms),
        delay_text(s.cleanup_dead_after_ms),
        s.min_voters,
        s.standbys
    )
}

/// One line per action, for the plan and apply's progress.
pub fn describe(action: &Action) -> String {
    match action {
        Action::RemoveMember { name, address } => format!("remove {name} ({address})"),
        Action::IssueToken { name, address, .. } => {
            format!("issue a join token for {name} ({address})")
        }
        Action::SetSettings { from, to } => format!(
            "set the cluster settings: {} (now {})",
            settings_text(to),
            settings_text(from)
        ),
        Action::SetFleetlockGroup { group, from, slots } => match from {
            Some(n) => format!("set FleetLock group {group} to {slots} slot(s) (now {n})"),
            None => format!("configure FleetLock group {group} with {slots} slot(s)"),
        },
        Action::DeleteFleetlockGroup { group } => format!("delete FleetLock group {group}"),
        Action::SetUnknownGroups { from, to } => {
            format!("FleetLock unknown groups: {to} (now {from})")
        }
        Action::Upgrade {
            name,
            from_version,
            to_version,
        } => format!("upgrade {name} from {from_version} to {to_version}"),
    }
}

fn print_plan(plan: &Plan, args: &ApplyArgs<'_>) -> Result<(), CliError> {
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
    if let Some(recovery) = &plan.quorum_lost {
        let backup = match args.backups {
            Some(dir) => newest_backup(dir, &plan.cluster_id),
            None => None,
        };
        let file = args.file.display().to_string();
        for (n, step) in recovery_steps(recovery, &plan.cluster_id, backup.as_deref(), &file)
            .iter()
            .enumerate()
        {
            if n == 0 {
                outln!("{step}");
            } else {
                outln!("{n}. {step}");
            }
        }
        return Ok(());
    }
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
    Ok(())
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
fn newest_backup(dir: &Path, cluster_id: &str) -> Option<String> {
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
            (header.cluster_id == cluster_id).then_some((header.created_ms, path))
        })
        .max_by_key(|(created, _)| *created)
        .map(|(_, path)| path.display().to_string())
}
