//! Failure zones with real `muster agent` processes on loopback: six members in three zones
//! (`--zone`), joined one by one, end with their voters spread over the zones (the names alone
//! would put three in zone a and none in c); status and `muster status` show the zones. Then a
//! whole zone is killed: the cluster keeps its quorum, replaces and cleans up the dead, and the
//! voter table demotes from the fullest zone, so the last zone with one machine keeps its vote.

use std::collections::BTreeMap;
use std::time::Duration;

use muster_tests::{AgentProc, leader_view, refs, voter_target, wait_for, wait_formed};

const FORM: Duration = Duration::from_secs(60);
/// The zone of each member, by name: names alone would vote in m1…m5 (a:3 b:2 c:0).
const ZONES: [(&str, &str); 6] = [
    ("m1", "a"),
    ("m2", "a"),
    ("m3", "a"),
    ("m4", "b"),
    ("m5", "b"),
    ("m6", "c"),
];
/// Repairs on, with short timings, on every member.
const REPAIRS: [&str; 8] = [
    "--replace-after",
    "4s",
    "--cleanup-dead-after",
    "12s",
    "--min-voters",
    "3",
    "--promote-after",
    "500ms",
];

/// Voters per zone in a leader's status, and whether every member in it has its zone recorded.
fn voters_per_zone(status: &serde_json::Value) -> BTreeMap<String, usize> {
    let mut zones = BTreeMap::new();
    for m in status["members"].as_array().into_iter().flatten() {
        let zone = m["zone"].as_str().unwrap_or("-").to_string();
        let n = zones.entry(zone).or_insert(0);
        if m["suffrage"] == "voter" {
            *n += 1;
        }
    }
    zones
}

#[tokio::test]
async fn voters_spread_over_zones_and_respread_when_a_zone_dies() {
    let _alone = muster_tests::exclusive::heavy().await;
    let tmp = tempfile::tempdir().expect("tmp");
    let mut first = vec!["--init", "--zone", ZONES[0].1];
    first.extend(REPAIRS);
    let mut agents = vec![AgentProc::start(tmp.path(), ZONES[0].0, &first).expect("start m1")];
    wait_formed(&refs(&agents), 1, FORM).await.expect("formed");
    for (name, zone) in &ZONES[1..] {
        let token = agents[0].create_token(&[]).await.expect("token");
        let via = agents[0].addr.clone();
        let mut args = vec!["--join", &via, "--token", &token, "--zone", zone];
        args.extend(REPAIRS);
        agents.push(AgentProc::start(tmp.path(), name, &args).expect("start"));
    }
    wait_formed(&refs(&agents), 6, FORM)
        .await
        .expect("6 members");

    // Every zone holds a voter and none more than two: a:2 b:2 c:1.
    let spread = wait_for("the 5 voters spread a:2 b:2 c:1", FORM, || async {
        let s = leader_view(&refs(&agents)).await?;
        let zones = voters_per_zone(&s);
        let want = BTreeMap::from([("a".into(), 2), ("b".into(), 2), ("c".into(), 1)]);
        (zones == want).then_some(s)
    })
    .await
    .expect("spread");
    // Joiners send their zone with the join, so the voter table promotes by zone from the
    // start; a promotion made before a zone was known is corrected by a spread. Either way each
    // is an event with its cause.
    let events = spread["membership_events"].to_string();
    assert!(
        events.contains("promoted")
            && (events.contains("the voter table wants")
                || events.contains("voters spread over the zones")),
        "the promotions are events with their causes: {spread}"
    );
    // Every member reported its zone and version; status sums the zones up.
    for m in spread["members"].as_array().expect("members") {
        assert_eq!(m["version"], env!("CARGO_PKG_VERSION"), "{m}");
    }
    let coverage = &spread["zones"];
    assert_eq!(coverage.as_array().map(Vec::len), Some(3), "{spread}");
    assert_eq!(coverage[2]["zone"], "c", "{spread}");
    assert_eq!(coverage[2]["voters"], 1, "{spread}");
    let (code, out, err) = agents[0].cli(&["status"]).await.expect("status");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ZONE") && out.contains("zones:") && out.contains("c: 1 voter(s)"),
        "{out}"
    );

    // Kill zone b: both its machines were voters, and 3 of 5 voters remain.
    let doomed: Vec<String> = ZONES
        .iter()
        .filter(|(_, z)| *z == "b")
        .map(|(n, _)| n.to_string())
        .collect();
    for a in agents.iter_mut().filter(|a| doomed.contains(&a.name)) {
        a.kill9().await.expect("kill");
    }
    let live: Vec<&AgentProc> = agents
        .iter()
        .filter(|a| !doomed.contains(&a.name))
        .collect();
    // The dead are replaced, then cleaned up; 4 members keep 3 voters, and the one demoted is
    // from zone a (the fullest), never zone c's only machine.
    let respread = wait_for(
        "zone b cleaned up and the voters respread",
        Duration::from_secs(90),
        || async {
            let s = leader_view(&live).await?;
            let members = s["members"].as_array()?;
            let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
            (members.len() == 4
                && voters == voter_target(4)
                && members.iter().all(|m| m["reachable"] == true))
            .then_some(s)
        },
    )
    .await
    .expect("respread");
    let zones = voters_per_zone(&respread);
    assert_eq!(
        zones,
        BTreeMap::from([("a".into(), 2), ("c".into(), 1)]),
        "{respread}"
    );
    assert!(
        !respread["quorum_lost"].as_bool().unwrap_or(true),
        "{respread}"
    );
}
