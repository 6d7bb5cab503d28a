//! Replication never wedges on size: a follower paused while large values are written catches
//! up once it resumes, and is then a working voter (the cluster keeps writing with the other
//! follower paused).

use std::time::Duration;

use muster_tests::*;

const FORM: Duration = Duration::from_secs(30);
/// 300 values of 60 KiB of control characters: JSON escapes each as `\u00XX`, so every value is
/// about 360 KiB on the wire and the whole backlog about 100 MiB.
const VALUES: usize = 300;
const VALUE_BYTES: usize = 60 * 1024;

#[tokio::test]
async fn a_paused_follower_catches_up_after_large_writes() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let agents: Vec<AgentProc> = (1..=3)
        .map(|i| AgentProc::start(tmp.path(), &format!("lv{i}"), &["--discovery", &url]))
        .collect::<Result<_, _>>()
        .expect("start");
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, 3, FORM).await.expect("formed");
    let token = AgentProc::operator_token_of(&agents)
        .await
        .expect("the initiator printed an operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(10)).expect("client");
    let status = agents[0].status().await.expect("status");
    let leader_name = status["leader"].as_str().expect("a leader").to_string();
    let leader = agents
        .iter()
        .find(|a| a.name == leader_name)
        .expect("leader");
    let followers: Vec<&AgentProc> = agents.iter().filter(|a| a.name != leader_name).collect();
    let (paused, other) = (followers[0], followers[1]);

    signal(paused.pid().expect("pid"), "STOP").expect("SIGSTOP");
    let value: String = (0..VALUE_BYTES)
        .map(|i| char::from(1 + (i % 31) as u8))
        .collect();
    for i in 0..VALUES {
        let reply = api
            .put(&leader.addr, &format!("big/{i:03}"), &value)
            .await
            .unwrap_or_else(|e| panic!("write {i}: no answer: {e}"));
        assert!(reply.ok(), "write {i} with one follower paused: {reply:?}");
    }
    let leader_index = leader.status().await.expect("leader status")["commit_index"]
        .as_u64()
        .expect("commit index");
    signal(paused.pid().expect("pid"), "CONT").expect("SIGCONT");
    // The leader's replication progress: how far the follower's log matches its own.
    wait_for(
        "the paused follower to catch up",
        Duration::from_secs(90),
        || async {
            let s = leader.status().await?;
            let m = s["members"]
                .as_array()?
                .iter()
                .find(|m| m["name"] == paused.name.as_str())?;
            (m["match_index"].as_u64()? >= leader_index).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", tail(&leader.log(), 30)));

    // With the other follower paused, the caught-up one must carry the majority.
    signal(other.pid().expect("pid"), "STOP").expect("SIGSTOP other");
    let reply = api.put(&leader.addr, "after", "ok").await;
    signal(other.pid().expect("pid"), "CONT").expect("SIGCONT other");
    let reply = reply.expect("an answer");
    assert!(
        reply.ok(),
        "a write with the caught-up follower as the majority: {reply:?}\n{}",
        agents
            .iter()
            .map(|a| format!("--- {}\n{}", a.name, tail(&a.log(), 15)))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // And it holds the values: read one through it (forwarded to the leader) and check the
    // whole value came back.
    let back = api
        .get(&paused.addr, &format!("big/{:03}", VALUES - 1))
        .await
        .expect("read");
    assert_eq!(back.body["value"].as_str().map(str::len), Some(VALUE_BYTES));

    // That read was answered by the leader. The follower's own copy: with the leader and the
    // other follower killed, its status cannot ask anyone (`status` reports the leader's view
    // only when the leader answers), so the index it reports is the one it applied itself,
    // and it must reach every large write.
    signal(leader.pid().expect("pid"), "KILL").expect("kill the leader");
    signal(other.pid().expect("pid"), "KILL").expect("kill the other follower");
    for gone in [leader, other] {
        wait_for(
            &format!("{} to stop answering", gone.name),
            Duration::from_secs(20),
            || async {
                tokio::net::TcpStream::connect(&gone.addr)
                    .await
                    .is_err()
                    .then_some(())
            },
        )
        .await
        .expect("killed");
    }
    wait_for(
        "the caught-up follower to have applied every large write itself",
        Duration::from_secs(60),
        || async {
            let s = paused.status().await?;
            (s["self"] == paused.name.as_str() && s["commit_index"].as_u64()? >= leader_index)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", tail(&paused.log(), 30)));
}
