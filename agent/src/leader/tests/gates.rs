//! FleetLock health gates on the leader, against the in-memory replica with command gates of
//! this test: a lock that would take a slot waits for them (refused with `failed_lock_gate`
//! naming the gate, no write), a holder's re-lock and an unlock never run them, a gate the
//! leader does not define refuses naming the leader, and the fallback write (leadership not
//! confirmed by the read) is gated as well. Status shows each gate and its last result.

use super::*;
use crate::config::{FleetLockGates, parse_gate};
use crate::leading::{LeaderLocal, LeaderSettings};

fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    format!("{name}=command:{}", path.display())
}

fn in_db(id: &str, lock: bool) -> Command {
    let (group, id) = ("db".to_string(), id.to_string());
    if lock {
        Command::Lock {
            group,
            id,
            via: LEADER,
            now_ms: 0,
            own: false,
            quorum: None,
        }
    } else {
        Command::Unlock {
            group,
            id,
            via: LEADER,
            now_ms: 0,
            forced: false,
            own: false,
        }
    }
}

fn gated(gates: &[&str]) -> Command {
    Command::SetGroup {
        name: "db".into(),
        slots: 2,
        windows: Vec::new(),
        gates: gates.iter().map(|g| g.to_string()).collect(),
    }
}

#[test]
fn a_lock_that_takes_a_slot_waits_for_the_group_s_gates() {
    let tmp = tempfile::tempdir().expect("tmp");
    let yes = script(tmp.path(), "yes", "exit 0");
    let no = script(tmp.path(), "no", "echo 'not today' >&2; exit 1");
    let mut fx = Fixture::new(T0);
    fx.local = LeaderLocal::new(LeaderSettings {
        fleetlock_gates: FleetLockGates {
            gates: vec![parse_gate(&yes).expect("yes"), parse_gate(&no).expect("no")],
            timeout: std::time::Duration::from_secs(5),
        },
        ..fx.local.settings.clone()
    });
    let l = fx.leader();
    block_on(async {
        fleetlock::command(l, gated(&["yes", "no"]))
            .await
            .expect("set");
        let writes = fx.replica.writes();
        let refused = fleetlock::command(l, in_db("m1", true))
            .await
            .expect_err("gated");
        assert_eq!(refused.kind, ErrorKind::LockGate);
        assert!(
            refused.message.starts_with("gate no (command ")
                && refused.message.ends_with("exited 1: not today"),
            "{}",
            refused.message
        );
        assert_eq!(fx.replica.writes(), writes, "a refusal writes nothing");
        assert_eq!(
            fleetlock::command(l, in_db("m1", false))
                .await
                .expect("unlock"),
            Outcome::NotHeld
        );

        fleetlock::command(l, gated(&["yes"])).await.expect("set");
        assert_eq!(
            fleetlock::command(l, in_db("m1", true))
                .await
                .expect("lock"),
            Outcome::Locked
        );
        // The holder keeps its slot whatever the gates say now, and gives it back.
        fleetlock::command(l, gated(&["no"])).await.expect("set");
        assert_eq!(
            fleetlock::command(l, in_db("m1", true))
                .await
                .expect("again"),
            Outcome::AlreadyHeld
        );
        // The fallback write is gated too, and a holder's is not.
        fx.replica.fail_reads(true);
        assert_eq!(
            fleetlock::command(l, in_db("m1", true))
                .await
                .expect("again"),
            Outcome::AlreadyHeld
        );
        assert_eq!(
            kind(fleetlock::command(l, in_db("m2", true)).await),
            ErrorKind::LockGate
        );
        fx.replica.fail_reads(false);
        assert_eq!(
            fleetlock::command(l, in_db("m1", false))
                .await
                .expect("unlock"),
            Outcome::Unlocked
        );

        fleetlock::command(l, gated(&["nosuch", "yes"]))
            .await
            .expect("set");
        let refused = fleetlock::command(l, in_db("m2", true))
            .await
            .expect_err("undefined");
        assert_eq!(
            refused.message,
            "gate nosuch is not defined on the leader (node leader): give every member the \
             same --fleetlock-gate"
        );

        let status = fleetlock::status(l).await.expect("status");
        let db = status.groups.iter().find(|g| g.name == "db").expect("db");
        let gates: Vec<(&str, bool, Option<bool>)> = db
            .gates
            .iter()
            .map(|g| {
                (
                    g.name.as_str(),
                    g.check.is_some(),
                    g.last.as_ref().map(|r| r.passed),
                )
            })
            .collect();
        assert_eq!(gates, [("nosuch", false, None), ("yes", true, Some(true))]);
    });
}
