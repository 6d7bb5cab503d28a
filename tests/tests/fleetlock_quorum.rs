//! FleetLock's quorum gate against a real five-voter cluster: each machine's Zincati asks its
//! own agent (which knows the machine's FleetLock id from `--fleetlock-id`); a voter's
//! Zincati-shaped `pre-reboot` is refused with `failed_lock_quorum` while another voter is
//! stopped (SIGSTOP) and one holds a slot, granted once the stopped voter answers again, and a
//! machine that runs no agent is never gated. `muster fleetlock status --json` shows how the
//! gate counts each voter.

use std::time::Duration;

use muster_tests::*;

const FORM: Duration = Duration::from_secs(60);
const VOTERS: usize = 5;

fn machine(i: usize) -> String {
    format!("machine-{}", i + 1)
}

/// The quorum gate's voters as `agent`'s leader reports them: name → (state, machine id).
async fn gate(agent: &AgentProc) -> Option<Vec<(String, String, Option<String>)>> {
    let (code, out, _) = agent.cli(&["fleetlock", "status", "--json"]).await.ok()?;
    if code != 0 {
        return None;
    }
    let status: serde_json::Value = serde_json::from_str(&out).ok()?;
    let voters = status["quorum_gate"]["voters"].as_array()?;
    Some(
        voters
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap_or_default().to_string(),
                    v["state"].as_str().unwrap_or_default().to_string(),
                    v["machine_id"].as_str().map(String::from),
                )
            })
            .collect(),
    )
}

#[tokio::test]
async fn a_voter_s_reboot_waits_while_another_voter_is_down_and_goes_once_it_is_back() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(VOTERS as u32).await.expect("token");
    let fl: Vec<String> = (0..VOTERS)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let agents: Vec<AgentProc> = (0..VOTERS)
        .map(|i| {
            let id = machine(i);
            AgentProc::start(
                tmp.path(),
                &format!("q{}", i + 1),
                &[
                    "--discovery",
                    &url,
                    "--fleetlock-listen",
                    &fl[i],
                    "--fleetlock-id",
                    &id,
                    // A voter stopped for a few seconds stays a voter.
                    "--replace-after",
                    "0",
                    "--cleanup-dead-after",
                    "0",
                ],
            )
        })
        .collect::<Result<_, _>>()
        .expect("start");
    wait_formed(&refs(&agents), VOTERS, FORM)
        .await
        .expect("formed");

    // Each machine's Zincati starts with an unlock through its own agent: that teaches the
    // cluster whose machine each id is.
    for (i, at) in fl.iter().enumerate() {
        let (status, _, body) = zincati(at, STEADY_STATE, &machine(i), "default").await;
        assert_eq!(status, 200, "{body}");
    }
    let learned = wait_for("five voters, every machine id learned", FORM, || async {
        gate(&agents[0]).await.filter(|voters| {
            voters.len() == VOTERS
                && voters
                    .iter()
                    .all(|(_, state, id)| state == "up" && id.is_some())
        })
    })
    .await
    .expect("the gate knows every voter's machine");
    for (name, _, id) in &learned {
        let i: usize = name[1..].parse().expect("q<n>");
        assert_eq!(id.as_deref(), Some(machine(i - 1).as_str()), "{learned:?}");
    }
    let (code, _, err) = agents[0]
        .cli(&["fleetlock", "group", "set", "default", "--slots", "3"])
        .await
        .expect("group set");
    assert_eq!(code, 0, "{err}");

    // q1's machine reboots: four voters stay up, a majority with one to spare.
    let (status, kind, body) = zincati(&fl[0], PRE_REBOOT, &machine(0), "default").await;
    assert_eq!((status, kind.as_str()), (200, "lock_acquired"), "{body}");

    // Another voter, not the leader and not q1 or q2, stops answering.
    let leader = agents[0].status().await.expect("status")["leader"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let victim = (2..VOTERS)
        .find(|i| agents[*i].name != leader)
        .expect("a follower");
    let victim_name = agents[victim].name.clone();
    let pid = agents[victim].pid().expect("pid");
    signal(pid, "STOP").expect("SIGSTOP");
    let asker = if agents[0].name == leader { 0 } else { 1 };
    wait_for(
        "the leader to count the stopped voter as unreachable",
        FORM,
        || async {
            gate(&agents[asker]).await.filter(|v| {
                v.iter()
                    .any(|(n, s, _)| *n == victim_name && s == "unreachable")
            })
        },
    )
    .await
    .expect("unreachable");

    // q2's machine must wait: granting it would leave 2 of 5 voters up.
    let (status, kind, body) = zincati(&fl[1], PRE_REBOOT, &machine(1), "default").await;
    let refusal = (status, kind.clone(), body.clone());
    assert_eq!(
        (status, kind.as_str()),
        (409, "failed_lock_quorum"),
        "{body}"
    );
    assert!(
        body.contains(&format!("{victim_name} unreachable"))
            && body.contains("q1 holds a reboot slot")
            && body.contains("2 of 5 voters up"),
        "{body}"
    );
    // A machine that runs no agent takes a free slot as before (it holds no vote).
    let (status, kind, body) = zincati(&fl[1], PRE_REBOOT, "worker-1", "default").await;
    assert_eq!((status, kind.as_str()), (200, "lock_acquired"), "{body}");
    let (status, _, body) = zincati(&fl[1], STEADY_STATE, "worker-1", "default").await;
    assert_eq!(status, 200, "{body}");

    // The stopped voter answers again: q2's machine gets its slot on a later try, as
    // Zincati's own retries would.
    signal(pid, "CONT").expect("SIGCONT");
    let granted = wait_for("q2's machine to get its slot", FORM, || async {
        let (status, kind, _) = zincati(&fl[1], PRE_REBOOT, &machine(1), "default").await;
        (status == 200 && kind == "lock_acquired").then_some(())
    })
    .await;
    assert!(granted.is_ok(), "refused before: {refusal:?}; {granted:?}");

    // With q1 and q2 rebooting, no third voter may go, though a slot is free.
    let third = (2..VOTERS).find(|i| *i != victim).expect("another voter");
    let (status, kind, body) = zincati(&fl[third], PRE_REBOOT, &machine(third), "default").await;
    assert_eq!(
        (status, kind.as_str()),
        (409, "failed_lock_quorum"),
        "{body}"
    );
    assert!(
        body.contains("q1 holds a reboot slot") && body.contains("q2 holds a reboot slot"),
        "{body}"
    );
    let voters = gate(&agents[0]).await.expect("status");
    let state_of = |name: &str| {
        voters
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, s, _)| s.clone())
    };
    assert_eq!(
        state_of("q1").as_deref(),
        Some("holds a reboot slot"),
        "{voters:?}"
    );
    assert_eq!(
        state_of("q2").as_deref(),
        Some("holds a reboot slot"),
        "{voters:?}"
    );

    // Both come back: the third goes.
    for i in [0, 1] {
        let (status, kind, body) = zincati(&fl[i], STEADY_STATE, &machine(i), "default").await;
        assert_eq!((status, kind.as_str()), (200, "unlocked"), "{body}");
    }
    let (status, kind, body) = zincati(&fl[third], PRE_REBOOT, &machine(third), "default").await;
    assert_eq!((status, kind.as_str()), (200, "lock_acquired"), "{body}");
}
