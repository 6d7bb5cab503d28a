//! An autoscaling group replacing machines, with real `muster agent` processes on loopback:
//! failed voters replaced by healthy nonvoters after `--replace-after`, dead members cleaned up
//! after `--cleanup-dead-after`, a cleaned-up machine refused when it comes back, writes going
//! on throughout, and no cleanup that would break quorum or go below `--min-voters`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_tests::{
    AgentProc, Discovery, OperatorApi, leader_view, refs, voter_target, wait_for, wait_formed,
};

const FORM: Duration = Duration::from_secs(60);
/// Short repair timings, so the test sees every step within seconds.
const REPLACE_AFTER: Duration = Duration::from_secs(4);
const CLEANUP_AFTER: Duration = Duration::from_secs(14);

/// Starts `name` from the group's launch template with short repair timings.
fn start_from_template(
    root: &std::path::Path,
    name: &str,
    url: &str,
    (replace, cleanup): (&str, &str),
    token: Option<&str>,
) -> AgentProc {
    let flags = ["--replace-after", replace, "--cleanup-dead-after", cleanup];
    AgentProc::start_group_machine(root, name, url, &flags, token).expect("start")
}

/// One member as a leader reports it.
struct Seen {
    name: String,
    /// `voter`, `standby` or `spare`.
    role: String,
    voter: bool,
    reachable: bool,
}

fn seen(status: &serde_json::Value) -> Vec<Seen> {
    status["members"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|m| Seen {
                    name: m["name"].as_str().unwrap_or_default().to_string(),
                    role: m["role"].as_str().unwrap_or_default().to_string(),
                    voter: m["suffrage"] == "voter",
                    reachable: m["reachable"] == true,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The members the leader reports, as (name, voter, reachable).
fn members(status: &serde_json::Value) -> Vec<(String, bool, bool)> {
    seen(status)
        .into_iter()
        .map(|m| (m.name, m.voter, m.reachable))
        .collect()
}

/// Writes a key every 100 ms through any live member; remembers the longest stretch without an
/// acknowledged write.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u64, Duration)>,
}

impl Writer {
    fn start(api: OperatorApi, addrs: Arc<std::sync::Mutex<Vec<String>>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let (mut acked, mut last_ack, mut longest) = (0u64, Instant::now(), Duration::ZERO);
            let mut i = 0usize;
            while !flag.load(Ordering::Relaxed) {
                let list = addrs.lock().map(|l| l.clone()).unwrap_or_default();
                if !list.is_empty() {
                    let addr = &list[i % list.len()];
                    i += 1;
                    if let Ok(r) = api.put(addr, &format!("w/{i}"), "v").await
                        && r.ok()
                    {
                        acked += 1;
                        longest = longest.max(last_ack.elapsed());
                        last_ack = Instant::now();
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (acked, longest.max(last_ack.elapsed()))
        });
        Self { stop, task }
    }

    async fn finish(self) -> (u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("writer")
    }
}

#[tokio::test]
async fn failed_voters_are_replaced_and_dead_members_cleaned_up_while_writes_go_on() {
    let _alone = muster_tests::exclusive::heavy().await;
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let replace = format!("{}s", REPLACE_AFTER.as_secs());
    let cleanup = format!("{}s", CLEANUP_AFTER.as_secs());
    // The launch template: the same flags on every machine.
    let start = |name: &str, token: Option<&str>| {
        start_from_template(tmp.path(), name, &url, (&replace, &cleanup), token)
    };
    let mut agents: Vec<AgentProc> = (1..=3).map(|i| start(&format!("asg{i}"), None)).collect();
    wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    let operator = AgentProc::operator_token_of(&agents)
        .await
        .expect("operator token");
    let group = agents[0]
        .create_token(&["--uses", "20", "--ttl", "1h", "--description", "asg"])
        .await
        .expect("group token");
    for i in 4..=6 {
        agents.push(start(&format!("asg{i}"), Some(&group)));
    }
    wait_formed(&refs(&agents), 6, FORM)
        .await
        .expect("6 members");
    // 6 members: 5 voters and one nonvoter, all reachable.
    let settled = wait_for("5 voters of 6 members", FORM, || async {
        let s = leader_view(&refs(&agents)).await?;
        let m = members(&s);
        (m.len() == 6 && m.iter().filter(|x| x.1).count() == voter_target(6)).then_some(s)
    })
    .await
    .expect("settled");
    let leader = settled["leader"].as_str().expect("leader").to_string();

    let addrs = Arc::new(std::sync::Mutex::new(
        agents.iter().map(|a| a.addr.clone()).collect::<Vec<_>>(),
    ));
    let api = OperatorApi::new(&operator, Duration::from_secs(5)).expect("client");
    let writer = Writer::start(api, addrs.clone());

    // Kill -9 the leader and one other voter.
    let voters: Vec<String> = members(&settled)
        .into_iter()
        .filter(|m| m.1)
        .map(|m| m.0)
        .collect();
    let other = voters
        .iter()
        .find(|n| **n != leader)
        .expect("another voter")
        .clone();
    let dead = [leader.clone(), other.clone()];
    for a in agents.iter_mut().filter(|a| dead.contains(&a.name)) {
        a.kill9().await.expect("kill");
    }
    if let Ok(mut list) = addrs.lock() {
        let gone: Vec<String> = agents
            .iter()
            .filter(|a| dead.contains(&a.name))
            .map(|a| a.addr.clone())
            .collect();
        list.retain(|a| !gone.contains(a));
    }
    let killed_at = Instant::now();
    let alive = |agents: &[AgentProc]| -> Vec<String> {
        agents
            .iter()
            .filter(|a| !dead.contains(&a.name))
            .map(|a| a.name.clone())
            .collect()
    };
    // The autoscaling group starts two replacements with the same template.
    for i in 7..=8 {
        let a = start(&format!("asg{i}"), Some(&group));
        if let Ok(mut list) = addrs.lock() {
            list.push(a.addr.clone());
        }
        agents.push(a);
    }
    let live_names = alive(&agents);
    let live: Vec<&AgentProc> = agents
        .iter()
        .filter(|a| live_names.contains(&a.name))
        .collect();

    // Within --replace-after + 10 s: no dead voter left, and a full complement of reachable
    // voters for the members that are alive.
    let replaced = settle(
        &live,
        "every voter reachable again",
        REPLACE_AFTER + Duration::from_secs(10),
        |s, _| {
            let m = members(s);
            let voters: Vec<_> = m.iter().filter(|x| x.1).collect();
            voters.iter().all(|v| v.2) && voters.len() >= voter_target(live_names.len())
        },
    )
    .await;
    assert!(
        killed_at.elapsed() >= REPLACE_AFTER,
        "a voter was replaced before --replace-after: {replaced}"
    );
    let events = replaced["membership_events"].to_string();
    assert!(
        events.contains("--replace-after"),
        "the replacement is an event with its cause: {replaced}"
    );

    // After --cleanup-dead-after: the dead are gone, every member is reachable, and the voter
    // table holds for the members left.
    let cleaned = settle(
        &live,
        "the dead members removed",
        CLEANUP_AFTER + Duration::from_secs(20),
        |s, _| {
            let m = members(s);
            let names: Vec<&String> = m.iter().map(|x| &x.0).collect();
            m.len() == live_names.len()
                && !dead.iter().any(|d| names.contains(&d))
                && m.iter().all(|x| x.2)
                && m.iter().filter(|x| x.1).count() == voter_target(m.len())
        },
    )
    .await;
    assert!(
        killed_at.elapsed() >= CLEANUP_AFTER,
        "a member was cleaned up before --cleanup-dead-after: {cleaned}"
    );
    let events = cleaned["membership_events"].to_string();
    for name in &dead {
        assert!(
            events.contains(&format!("removed {name}")) && events.contains("--cleanup-dead-after"),
            "{name}'s cleanup is an event with its cause: {cleaned}"
        );
    }

    let (acked, longest_gap) = writer.finish().await;
    assert!(acked > 50, "only {acked} writes were acknowledged");
    // One election (200–400 ms here, plus the pacemaker's quorum window) and a retry: writes
    // must never stop for long while voters are replaced and members removed.
    assert!(
        longest_gap < Duration::from_secs(5),
        "writes stopped for {longest_gap:?}"
    );

    // A cleaned-up machine that comes back is refused and stops.
    let back = agents
        .iter_mut()
        .find(|a| a.name == other)
        .expect("the dead follower");
    back.restart().expect("restart");
    let code = back
        .wait_exit(FORM)
        .await
        .expect("the removed member stops");
    assert!(
        back.log().contains("removed from cluster"),
        "exit {code:?}: {}",
        back.last_log()
    );
}

#[tokio::test]
async fn cleanup_never_breaks_quorum_or_goes_below_min_voters_and_status_says_why() {
    let _alone = muster_tests::exclusive::heavy().await;
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let mut agents: Vec<AgentProc> = (1..=3)
        .map(|i| {
            AgentProc::start(
                tmp.path(),
                &format!("q{i}"),
                &[
                    "--discovery",
                    &url,
                    "--replace-after",
                    "2s",
                    "--cleanup-dead-after",
                    "3s",
                ],
            )
            .expect("start")
        })
        .collect();
    let cluster = wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    let s = leader_view(&refs(&agents)).await.expect("status");
    let leader = s["leader"].as_str().expect("leader").to_string();
    let followers: Vec<usize> = (0..3).filter(|i| agents[*i].name != leader).collect();
    let li = (0..3)
        .find(|i| agents[*i].name == leader)
        .expect("leader index");

    // One follower dead: removing it would leave 2 members, fewer than --min-voters 3.
    agents[followers[0]].kill9().await.expect("kill");
    let said = wait_for("status to say why cleanup waits", FORM, || async {
        let s = agents[li].status().await?;
        let waiting = s["membership_waiting"].to_string();
        waiting.contains("--min-voters 3").then_some(s)
    })
    .await
    .expect("min-voters wait");
    assert_eq!(members(&said).len(), 3, "{said}");
    let (code, out, _) = agents[li].cli(&["status"]).await.expect("status");
    assert_eq!(code, 0);
    assert!(
        out.contains("waiting:") && out.contains("fewer than --min-voters 3"),
        "{out}"
    );

    // Two dead: the leader has no quorum, so nothing is repaired, and status says so.
    agents[followers[1]].kill9().await.expect("kill");
    wait_for("status to say repairs are paused", FORM, || async {
        let s = agents[li].status().await?;
        let paused = s["membership_waiting"]
            .to_string()
            .contains("does not hear from a majority");
        (paused && s["quorum_lost"] == true).then_some(())
    })
    .await
    .expect("paused");

    // Both come back: the same three members, nothing was removed.
    for i in &followers {
        agents[*i].restart().expect("restart");
    }
    let after = wait_formed(&refs(&agents), 3, FORM).await.expect("back");
    assert_eq!(after, cluster, "the same cluster");
    let s = wait_for("all three reachable", FORM, || async {
        let s = leader_view(&refs(&agents)).await?;
        let m = members(&s);
        (m.len() == 3 && m.iter().all(|x| x.1 && x.2)).then_some(s)
    })
    .await
    .expect("healthy");
    assert!(
        !s["membership_events"].to_string().contains("removed"),
        "{s}"
    );
}

/// Every member's role (`voter`, `standby`, `spare`) in a leader's view, by name.
fn roles(status: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    seen(status).into_iter().map(|m| (m.name, m.role)).collect()
}

/// Waits (`within` at most) until a leader's view among `live` satisfies `done`; returns that
/// status. On a timeout it fails with the last view: roles, waits, events and the logs.
async fn settle(
    live: &[&AgentProc],
    what: &str,
    within: Duration,
    done: impl Fn(&serde_json::Value, &std::collections::BTreeMap<String, String>) -> bool,
) -> serde_json::Value {
    let last_seen = std::sync::Mutex::new(serde_json::Value::Null);
    let result = wait_for(what, within, || async {
        let s = leader_view(live).await?;
        if let Ok(mut last) = last_seen.lock() {
            *last = s.clone();
        }
        done(&s, &roles(&s)).then_some(s)
    })
    .await;
    result.unwrap_or_else(|e| {
        let last = last_seen.lock().map(|l| l.clone()).unwrap_or_default();
        let leader_now = last["leader"].as_str().unwrap_or_default().to_string();
        let log = live
            .iter()
            .find(|a| a.name == leader_now)
            .map(|a| muster_tests::tail(&a.last_log(), 40))
            .unwrap_or_default();
        let unreachable: Vec<String> = members(&last)
            .into_iter()
            .filter(|m| !m.2)
            .map(|m| m.0)
            .collect();
        let r = roles(&last);
        let missing: String = live
            .iter()
            .filter(|a| !r.contains_key(&a.name) || unreachable.contains(&a.name))
            .map(|a| format!("--- {}\n{}", a.name, muster_tests::tail(&a.log(), 30)))
            .collect();
        panic!(
            "{e:#}\nroles {:?}\nunreachable {unreachable:?}\nwaiting {}\nevents {}\n{log}\n{missing}",
            roles(&last),
            last["membership_waiting"],
            last["membership_events"]
        )
    })
}

fn count(roles: &std::collections::BTreeMap<String, String>, role: &str) -> usize {
    roles.values().filter(|r| *r == role).count()
}

#[tokio::test]
async fn thirty_machines_through_one_template_are_7_voters_2_standbys_and_21_spares() {
    let _alone = muster_tests::exclusive::heavy().await;
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let start = |name: &str, token: Option<&str>| {
        start_from_template(tmp.path(), name, &url, ("3s", "12s"), token)
    };
    let mut agents: Vec<AgentProc> = (1..=3).map(|i| start(&format!("m{i:02}"), None)).collect();
    wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    let group = agents[0]
        .create_token(&["--uses", "40", "--ttl", "1h", "--description", "asg"])
        .await
        .expect("group token");
    for i in 4..=30 {
        agents.push(start(&format!("m{i:02}"), Some(&group)));
    }
    let settled = |n: usize, spares: usize| {
        let agents = &agents;
        async move {
            let s = leader_view(&refs(agents)).await?;
            let r = roles(&s);
            let all_reachable = members(&s).iter().all(|m| m.2);
            (r.len() == n
                && count(&r, "voter") == 7
                && count(&r, "standby") == 2
                && count(&r, "spare") == spares
                && all_reachable)
                .then_some(s)
        }
    };
    let first = wait_for(
        "30 members: 7 voters, 2 standbys, 21 spares",
        FORM * 2,
        || settled(30, 21),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", agents[0].last_log()));
    let before = roles(&first);
    // Who is what is the same rule everywhere: lexicographically first for the voters after the
    // formation's three, then the next two as standbys.
    assert_eq!(before["m01"], "voter");
    assert_eq!(before["m30"], "spare");

    // Every node, spares included, reports the same roles.
    // (A member made a spare a moment ago may answer once from its own view before it asks
    // the leader: give each a few seconds.)
    for a in &agents {
        let seen = std::sync::Mutex::new(None);
        let same = wait_for(&format!("status of {}", a.name), FORM, || async {
            let r = roles(&a.status().await?);
            let same = r == before;
            *seen.lock().ok()? = Some(r);
            same.then_some(())
        })
        .await;
        assert!(
            same.is_ok(),
            "as {} sees it: {:?}",
            a.name,
            seen.lock().map(|s| s.clone())
        );
    }
    // Joiners beyond the voters and standbys start as spares: they never enter the raft
    // configuration, and say so when they join. (A joiner admitted before one with an earlier
    // name may enter and make way again, so not every spare need have started as one.)
    let direct: Vec<String> = agents
        .iter()
        .filter(|a| {
            a.log()
                .contains("as a spare (the voters and standbys are complete)")
        })
        .map(|a| a.name.clone())
        .collect();
    assert!(
        direct.len() >= 10,
        "only {direct:?} of 21 spares started as spares\n{}",
        muster_tests::tail(&agents[29].log(), 30)
    );
    assert!(direct.iter().all(|n| before[n] == "spare"), "{direct:?}");
    // One that never replicated restarts from its data dir alone: `peers.json` says where to
    // check in, and the leader hears from it again.
    let restarted = agents
        .iter_mut()
        .find(|a| a.name == direct[0])
        .expect("a direct spare");
    restarted.kill9().await.expect("kill");
    let name = restarted.name.clone();
    settle(
        &refs(&agents),
        &format!("the leader finds {name} unreachable"),
        FORM,
        |s, _| members(s).iter().any(|m| m.0 == name && !m.2),
    )
    .await;
    agents
        .iter_mut()
        .find(|a| a.name == name)
        .expect("again")
        .restart()
        .expect("restart");
    settle(
        &refs(&agents),
        &format!("{name} reachable again, as a spare"),
        FORM,
        |s, r| r == &before && members(s).iter().all(|m| m.2),
    )
    .await;

    // A spare serves the operator API by forwarding to the leader.
    let spare = agents
        .iter()
        .find(|a| before[&a.name] == "spare")
        .expect("a spare");
    let (code, out, err) = spare
        .cli(&["kv", "put", "from-spare", "1"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{out}{err}");
    let voter = agents
        .iter()
        .find(|a| before[&a.name] == "voter")
        .expect("a voter");
    let (code, out, _) = voter.cli(&["kv", "get", "from-spare"]).await.expect("get");
    assert_eq!((code, out.trim()), (0, "1"));

    // Kill -9 the leader: a standby takes its vote, a spare becomes a standby, and once the
    // dead leader is cleaned up the roles settle again with no other reshuffle.
    let leader = first["leader"].as_str().expect("leader").to_string();
    agents
        .iter_mut()
        .find(|a| a.name == leader)
        .expect("leader")
        .kill9()
        .await
        .expect("kill");
    let live: Vec<&AgentProc> = agents.iter().filter(|a| a.name != leader).collect();
    let after = settle(
        &live,
        "29 members: 7 voters, 2 standbys, 20 spares",
        FORM * 2,
        |s, r| {
            r.len() == 29
                && count(r, "voter") == 7
                && count(r, "standby") == 2
                && count(r, "spare") == 20
                && members(s).iter().all(|m| m.2)
        },
    )
    .await;
    let after = roles(&after);
    let changed: Vec<&String> = after
        .iter()
        .filter(|(name, role)| before.get(*name) != Some(role))
        .map(|(name, _)| name)
        .collect();
    // One standby became a voter, one spare a standby: nothing else moved.
    assert_eq!(changed.len(), 2, "{before:?} → {after:?}");

    // Churn, as an autoscaling group sees it: kill -9 a voter, a standby and two spares (with
    // the leader before, two voters in all), and start five replacements with the same
    // template, while a client keeps writing.
    let pick = |role: &str, n: usize| -> Vec<String> {
        after
            .iter()
            .filter(|(_, r)| *r == role)
            .map(|(name, _)| name.clone())
            .take(n)
            .collect()
    };
    let leader_now = leader_view(&live)
        .await
        .and_then(|s| s["leader"].as_str().map(String::from))
        .expect("a leader");
    let victims: Vec<String> = after
        .iter()
        .filter(|(name, r)| *r == "voter" && **name != leader_now)
        .map(|(name, _)| name.clone())
        .take(1)
        .chain(pick("standby", 1))
        .chain(pick("spare", 2))
        .collect();
    let operator = AgentProc::operator_token_of(&agents)
        .await
        .expect("operator token");
    let addrs = Arc::new(std::sync::Mutex::new(
        agents
            .iter()
            .filter(|a| a.name != leader && !victims.contains(&a.name))
            .map(|a| a.addr.clone())
            .collect::<Vec<_>>(),
    ));
    let api = OperatorApi::new(&operator, Duration::from_secs(5)).expect("client");
    let writer = Writer::start(api, addrs.clone());
    for a in agents.iter_mut().filter(|a| victims.contains(&a.name)) {
        a.kill9().await.expect("kill");
    }
    for i in 31..=35 {
        agents.push(start(&format!("m{i:02}"), Some(&group)));
    }
    let gone: Vec<String> = victims.iter().cloned().chain([leader.clone()]).collect();
    let live: Vec<&AgentProc> = agents.iter().filter(|a| !gone.contains(&a.name)).collect();
    wait_for(
        "7 reachable voters again",
        Duration::from_secs(3 + 10),
        || async {
            let s = leader_view(&live).await?;
            let voters: Vec<_> = members(&s).into_iter().filter(|m| m.1).collect();
            (voters.len() == 7 && voters.iter().all(|v| v.2)).then_some(())
        },
    )
    .await
    .expect("replaced");
    let last = settle(
        &live,
        "30 members again, no dead one: 7 voters, 2 standbys, 21 spares",
        FORM * 2,
        |s, r| {
            r.len() == 30
                && !gone.iter().any(|g| r.contains_key(g))
                && count(r, "voter") == 7
                && count(r, "standby") == 2
                && count(r, "spare") == 21
                && members(s).iter().all(|m| m.2)
        },
    )
    .await;
    let last = roles(&last);
    let (acked, longest_gap) = writer.finish().await;
    assert!(acked > 20, "only {acked} writes were acknowledged");
    assert!(
        longest_gap < Duration::from_secs(5),
        "writes stopped for {longest_gap:?}"
    );
    // Healthy voters were not reshuffled.
    for (name, role) in &after {
        if role == "voter" && !gone.contains(name) {
            assert_eq!(last.get(name).map(String::as_str), Some("voter"), "{name}");
        }
    }

    // A spare that has been one since before the leader changed still serves operators: a
    // write through its socket, and over TCP with an operator token created after it stopped
    // replicating (the leader checks the token), and a watch held on it sees a change.
    let spare = live
        .iter()
        .find(|a| {
            last[&a.name] == "spare" && before.get(&a.name).map(String::as_str) == Some("spare")
        })
        .expect("an old spare");
    let (code, out, err) = spare
        .cli(&["kv", "put", "after-churn", "2"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = live[0]
        .cli(&["operator-token", "create", "--json"])
        .await
        .expect("operator token");
    assert_eq!(code, 0, "{err}");
    let fresh: serde_json::Value = serde_json::from_str(&out).expect("json");
    let fresh = fresh["token"].as_str().expect("token").to_string();
    let api = OperatorApi::new(&fresh, Duration::from_secs(10)).expect("client");
    let put = api.put(&spare.addr, "fresh-token", "3").await.expect("put");
    assert!(put.ok(), "{put:?}");
    // The same token with its last secret digit changed (to another digit, whatever it was).
    let last = if fresh.ends_with('0') { '1' } else { '0' };
    let bad = OperatorApi::new(
        &format!("{}{last}", &fresh[..fresh.len() - 1]),
        Duration::from_secs(10),
    )
    .expect("client");
    let refused = bad.put(&spare.addr, "bad-token", "x").await.expect("put");
    assert_eq!(refused.status, 401, "{refused:?}");
    // The watch starts after the revision of a first write, so the second write is one it must
    // wait for, whenever the watch reaches the leader.
    let first = api.put(&spare.addr, "watched/a", "1").await.expect("put");
    let from = first.body["revision"].as_u64().expect("revision") + 1;
    let watch = {
        let api = api.clone();
        let addr = spare.addr.clone();
        tokio::spawn(async move {
            let path = format!("/v1/kv/watch?prefix=watched/&from_revision={from}&wait_ms=20000");
            api.call(&addr, "GET", &path, None).await
        })
    };
    let (code, _, err) = live[0]
        .cli(&["kv", "put", "watched/k", "4"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    let seen = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .expect("the watch answers within 10 s, long before its 20 s wait")
        .expect("task")
        .expect("answer");
    assert!(seen.body.to_string().contains("watched/k"), "{seen:?}");
}
