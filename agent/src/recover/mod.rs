//! `muster recover`: when a majority of the voters is lost for good, a survivor (its agent
//! stopped) becomes the cluster's only voter, keeping every entry its log holds; the other
//! survivors follow it when their agents start, and the lost members are removed for good
//! (refused, and told so, if they ever come back). Like etcd's `--force-new-cluster` or
//! Consul's `peers.json`, but the lost are named, the plan is printed before anything is
//! written, and the cluster keeps its id, CA, tokens and data.
//!
//! Read ([`raft::recover::read`]), decide ([`plan::decide`], pure), print, and only with
//! `--yes` write ([`raft::recover::rewrite`]).

pub mod plan;

use std::path::PathBuf;

use serde::Serialize;

use crate::clock::now_ms;
use crate::datadir::{self, ClusterFile, DataDirError, DataDirLock, Identity};
use crate::error::{AgentError, Context};
use crate::raft::recover::{self as surgery, OnDisk};
use crate::state::{LostMember, RecoveryRecord, Request};
use plan::{RecoverPlan, Role, Survey};

/// What the operator asked.
#[derive(Debug, Clone)]
pub struct RecoverArgs {
    pub data_dir: PathBuf,
    pub lost: Vec<String>,
    /// Carry the plan out (without it, only print it).
    pub yes: bool,
    /// Carry it out even though a lost member's address accepts connections.
    pub force: bool,
    pub json: bool,
}

/// What was found, decided and (with `--yes`) done, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Report {
    cluster_id: String,
    /// The highest term this member has seen.
    term: u64,
    /// This member's last log entry, `[term, index]`.
    last_log: Option<(u64, u64)>,
    /// The last index it knows to be committed: run recover on the survivor where this is
    /// highest (then on the one whose log ends last).
    committed_index: Option<u64>,
    /// Lost members whose address accepts connections (something answers there).
    answering: Vec<String>,
    keys: usize,
    plan: RecoverPlan,
    /// False: nothing was written (no `--yes`).
    carried_out: bool,
    epoch: u64,
    /// With `--yes`: the term and the last index of what was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    written: Option<(u64, u64)>,
}

pub async fn run(args: RecoverArgs) -> Result<(), AgentError> {
    let dir = &args.data_dir;
    let cluster = ClusterFile::read(dir)?.ok_or_else(|| {
        AgentError::Usage(format!(
            "{} holds no cluster (no cluster.json): give the --data-dir of a member that survived",
            dir.display()
        ))
    })?;
    if cluster.was_removed() {
        return Err(AgentError::Refused(format!(
            "{} belongs to a member that was removed from its cluster; it cannot recover it",
            dir.display()
        )));
    }
    let _lock = DataDirLock::acquire(dir).map_err(|e| match e {
        DataDirError::Locked { .. } => AgentError::Refused(format!(
            "an agent is running on {}: stop it first (systemctl stop muster), then run muster recover",
            dir.display()
        )),
        other => other.into(),
    })?;
    let (me, _) = Identity::recorded(dir)?.ok_or_else(|| {
        AgentError::Failed(format!(
            "{} has cluster.json but no identity.json: the data dir is damaged",
            dir.display()
        ))
    })?;
    let raft_dir = datadir::raft_dir(dir);
    let found = surgery::read(&raft_dir)
        .await
        .context("reading this member's raft store")?;
    if let Some(done) = already_recovered(me, &found) {
        return Err(AgentError::Refused(format!(
            "this member was already recovered (epoch {}, after losing {}): start its agent \
             (systemctl start muster); it leads at once",
            done.epoch,
            done.lost
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let plan = plan::decide(&survey(me, &found), &args.lost)
        .map_err(|refusal| AgentError::Refused(refusal.to_string()))?;
    let answering = answering(&plan.lost).await;
    let mut report = Report {
        cluster_id: cluster.cluster_id().to_string(),
        term: found.term,
        answering,
        last_log: found.last_log,
        committed_index: found.committed,
        keys: found.state.kv.len(),
        plan,
        carried_out: false,
        epoch: found.state.recoveries.len() as u64 + 1,
        written: None,
    };
    if !args.json {
        print_plan(&report);
    }
    if args.yes && !args.force && !report.answering.is_empty() {
        return Err(AgentError::Refused(format!(
            "{} accept connections at their addresses, so they may not be lost: recovering now \
             would split the cluster (if they are up, the cluster has its majority: start this \
             agent instead). Power them off or wipe them first; if the address now belongs to \
             another machine, pass --force. Nothing was written",
            report.answering.join(", ")
        )));
    }
    if args.yes {
        let record = RecoveryRecord {
            epoch: report.epoch,
            at_ms: now_ms(),
            by: report.plan.me.name.clone(),
            lost: report
                .plan
                .lost
                .iter()
                .map(|m| LostMember {
                    id: m.node_id,
                    name: m.name.clone(),
                })
                .collect(),
            kept_through_index: found.last_log.map(|(_, i)| i).unwrap_or(0),
        };
        let node = |m: &plan::Member| crate::state::Node {
            name: m.name.clone(),
            addr: m.addr.clone(),
        };
        let learners = report
            .plan
            .keep
            .iter()
            .map(|m| (m.node_id, node(m)))
            .collect();
        let rewritten = surgery::rewrite(
            &raft_dir,
            &found,
            (me, node(&report.plan.me)),
            learners,
            Request::Recovered { record },
        )
        .await
        .context("writing the new configuration")?;
        report.carried_out = true;
        report.written = Some((rewritten.term, rewritten.last_index));
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    } else if report.carried_out {
        print_done(&report, dir);
    } else {
        println!(
            "\nNothing was written. Check that the lost members are gone for good, and that no \
             other survivor knows more entries committed (run this same command there and \
             compare \"known committed through index\"; on a tie, the later \"log through\"), \
             then run it again with --yes, there only."
        );
    }
    Ok(())
}

/// The recovery this member already went through and has not started on yet: it is the only
/// voter of its configuration, and the last recovery in its log is its own.
fn already_recovered(me: u64, found: &OnDisk) -> Option<&RecoveryRecord> {
    let record = found.state.recoveries.last()?;
    let alone = found.voters.len() == 1 && found.voters.contains_key(&me);
    let kept_through = found.last_log.map(|(_, i)| i).unwrap_or(0);
    // The surgery's two entries are the last in the log until the agent starts and commits
    // them; anything after them means the recovered cluster has run since.
    (alone && kept_through == record.kept_through_index + 2).then_some(record)
}

/// How long a lost member's address may take to accept a connection.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The lost members whose address accepts a TCP connection, all asked at once.
async fn answering(lost: &[plan::Member]) -> Vec<String> {
    let mut probes = tokio::task::JoinSet::new();
    for m in lost {
        let (name, addr) = (m.name.clone(), m.addr.clone());
        probes.spawn(async move {
            let connect = tokio::net::TcpStream::connect(addr.as_str());
            let open = matches!(
                tokio::time::timeout(PROBE_TIMEOUT, connect).await,
                Ok(Ok(_))
            );
            open.then(|| format!("{name} ({addr})"))
        });
    }
    let mut found: Vec<String> = probes.join_all().await.into_iter().flatten().collect();
    found.sort();
    found
}

fn survey(me: u64, found: &OnDisk) -> Survey {
    let configured = |nodes: &std::collections::BTreeMap<u64, crate::state::Node>, role| {
        nodes
            .iter()
            .map(move |(id, n)| plan::member(*id, &n.name, &n.addr, role))
            .collect::<Vec<_>>()
    };
    let mut members = configured(&found.voters, Role::Voter);
    members.extend(configured(&found.learners, Role::Nonvoter));
    for (id, record) in &found.state.nodes {
        if !members.iter().any(|m| m.node_id == *id) {
            members.push(plan::member(*id, &record.name, &record.addr, Role::Spare));
        }
    }
    Survey {
        me,
        members,
        configs: found.configs.clone(),
    }
}

fn print_plan(report: &Report) {
    let plan = &report.plan;
    let log = match report.last_log {
        Some((term, index)) => format!("term {term} index {index}"),
        None => "empty".into(),
    };
    println!(
        "cluster {}: {} of {} voters survive; the quorum is lost.",
        report.cluster_id, plan.voters_left, plan.voters_before
    );
    println!(
        "this member ({}) holds the log through {log} (known committed through index {}), {} keys.",
        plan.me.name,
        report
            .committed_index
            .map(|i| i.to_string())
            .unwrap_or_else(|| "none".into()),
        report.keys
    );
    println!("\nmuster recover will:");
    println!(
        "  keep   every entry of this member's log, committed or not; it becomes the only voter"
    );
    for m in &plan.keep {
        println!(
            "  keep   {} ({}) as a non-voter: it follows this member once its agent starts, and is promoted again when caught up",
            m.name, m.addr
        );
    }
    for m in &plan.spares {
        println!("  keep   {} ({}) as a spare", m.name, m.addr);
    }
    for m in &plan.lost {
        println!(
            "  remove {} ({}, {}) for good: if it comes back it is refused and stops",
            m.name,
            m.addr,
            role_name(m.role)
        );
    }
    println!("  drop   whatever the lost members committed that this member never received");
    println!(
        "  record recovery epoch {} in the cluster's status",
        report.epoch
    );
    for m in &report.answering {
        println!(
            "\nWARNING: {m} accepts connections: it may not be lost. --yes is refused until it is \
             powered off or wiped (or --force, if that address is another machine now)."
        );
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Voter => "voter",
        Role::Nonvoter => "non-voter",
        Role::Spare => "spare",
    }
}

fn print_done(report: &Report, dir: &std::path::Path) {
    let plan = &report.plan;
    let (term, index) = report.written.unwrap_or_default();
    println!(
        "\nrecovered: {} is the only voter of cluster {} (epoch {}; the new configuration is \
         entry {index} at term {term}).",
        plan.me.name, report.cluster_id, report.epoch
    );
    println!("next:");
    println!(
        "  1. start the agent here (systemctl start muster, or muster agent … --data-dir {}); it leads at once",
        dir.display()
    );
    if !plan.keep.is_empty() {
        let names: Vec<&str> = plan.keep.iter().map(|m| m.name.as_str()).collect();
        println!(
            "  2. start the agents of {} unchanged: they follow this member (do NOT run muster recover there)",
            names.join(", ")
        );
    }
    println!(
        "  {}. wipe the lost machines' data dirs before they boot again, and join new machines with \
         `muster token create` (a lost member that boots is refused and stops)",
        if plan.keep.is_empty() { 2 } else { 3 }
    );
}
