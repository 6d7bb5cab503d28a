//! Two membership rules at their edges, with real agents: a joiner may not claim another
//! member's address (its token is not used up by the refusal), and a graceful removal keeps
//! the voter table of the members that stay at every moment: the excess voter is demoted
//! before the leaver leaves the configuration, never after (sampled every 10 ms).

use std::time::Duration;

use muster_shared::policy::voter_target;
use muster_tests::{AgentProc, OperatorApi, free_port, init_and_join, tail, wait_for};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_joiner_may_not_claim_a_member_s_address() {
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = init_and_join(tmp.path(), &["d1"])
        .await
        .expect("one member");
    let token = agents[0].create_token(&[]).await.expect("token");
    let taken = agents[0].addr.clone();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut joiner = AgentProc::start_bare(
        tmp.path(),
        "d2",
        &taken,
        &[
            "--advertise",
            &taken,
            "--listen",
            &listen,
            "--metrics-listen",
            "off",
            "--join",
            &taken,
            "--token",
            &token,
        ],
        None,
    )
    .expect("start d2");
    let code = joiner.wait_exit(WAIT).await.expect("d2 stops");
    let log = joiner.log();
    assert_eq!(code, Some(2), "{}", tail(&log, 10));
    assert!(
        log.contains("address_taken") && log.contains("d1"),
        "the refusal names the kind and the member: {}",
        tail(&log, 10)
    );
    let (code, out, err) = agents[0]
        .cli(&["token", "list", "--json"])
        .await
        .expect("token list");
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("json");
    let used = list
        .as_array()
        .expect("a list")
        .iter()
        .find(|t| token.contains(t["id"].as_str().unwrap_or("-")))
        .expect("the token is listed");
    assert_eq!(used["uses_left"], 1, "the refusal took no use: {used}");
    let members = agents[0].status().await.expect("status")["members"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(members, 1, "nobody was admitted");
}

/// (members in the raft configuration, voters) as a member's status shows them.
fn shape(status: &serde_json::Value) -> Option<(usize, usize)> {
    let members = status["members"].as_array()?;
    let in_config: Vec<&serde_json::Value> = members
        .iter()
        .filter(|m| m["role"] == "voter" || m["role"] == "standby")
        .collect();
    let voters = in_config
        .iter()
        .filter(|m| m["suffrage"] == "voter")
        .count();
    Some((in_config.len(), voters))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_removal_never_leaves_more_voters_than_the_table_allows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = init_and_join(tmp.path(), &["v1", "v2", "v3", "v4", "v5"])
        .await
        .expect("five members");
    let token = agents[0].operator_token().await.expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(5)).expect("api");
    let leader = agents[0].status().await.expect("status")["leader"]
        .as_str()
        .expect("leader")
        .to_string();
    let watched = agents
        .iter()
        .find(|a| a.name != leader)
        .expect("a follower");
    let leaving = agents
        .iter()
        .rev()
        .find(|a| a.name != leader && a.name != watched.name)
        .expect("a voter to remove");
    wait_for("the token to reach the watched member", WAIT, || async {
        api.status(&watched.addr).await.ok()?.ok().then_some(())
    })
    .await
    .expect("token applied");

    let sampler = tokio::spawn({
        let (api, addr) = (api.clone(), watched.addr.clone());
        async move {
            let mut samples = Vec::new();
            let deadline = tokio::time::Instant::now() + WAIT;
            while tokio::time::Instant::now() < deadline {
                if let Ok(reply) = api.status(&addr).await
                    && let Some(s) = shape(&reply.body)
                {
                    samples.push(s);
                    if s == (4, 3) && samples.iter().rev().take(20).all(|x| *x == s) {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            samples
        }
    });
    let (code, out, err) = agents[0]
        .cli(&["node", "remove", &leaving.name])
        .await
        .expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    let samples = sampler.await.expect("sampler");
    assert_eq!(
        samples.last(),
        Some(&(4, 3)),
        "the removal ends with 4 members, 3 voters: {samples:?}"
    );
    let over: Vec<&(usize, usize)> = samples
        .iter()
        .filter(|(members, voters)| *voters > voter_target(*members))
        .collect();
    assert!(
        over.is_empty(),
        "more voters than the table allows at some moment (members, voters): {over:?} of {} samples",
        samples.len()
    );
    assert!(
        samples.len() > 20,
        "sampled through the removal: {samples:?}"
    );
}
