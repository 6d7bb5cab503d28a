//! Reporting for `muster-bench asg`: from what the measuring collected ([`Measurements`]) to the
//! figures ([`report`], pure, tested without starting a group) and those to the text or the
//! `--json` object ([`print`]). Apart from the measuring so that the arithmetic and the printed
//! shape, which scripts and docs/benchmarks.md read, stand alone.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use crate::summary::upper_median;

/// Each member's role and whether it is reachable, by name, as the leader's status reports them.
pub(super) type Roles = BTreeMap<String, (String, bool)>;

/// Members of `roles` with the role `role`.
pub(super) fn count(roles: &Roles, role: &str) -> usize {
    roles.values().filter(|(r, _)| r == role).count()
}

/// What one run measured, unsummarised.
pub(super) struct Measurements {
    pub(super) machines: u64,
    /// MiB written into the KV before the memory was read.
    pub(super) kv_mib: u64,
    pub(super) replace_after: Duration,
    /// The roles once all N members had settled.
    pub(super) roles: Roles,
    pub(super) members_after_last_start_s: f64,
    pub(super) settled_after_last_start_s: f64,
    pub(super) leader_idle_cpu_at_10: f64,
    pub(super) leader_idle_cpu_at_n: f64,
    /// Resident memory (MiB) of every member that reported it, by role.
    pub(super) rss_mib: BTreeMap<String, Vec<f64>>,
    /// Its private part (`RssAnon`: heap and stacks, not the binary's pages), by role.
    pub(super) anon_mib: BTreeMap<String, Vec<f64>>,
    pub(super) replacement_s: f64,
}

// The name and the field order are part of the text output (`{:#?}`) and of `--json`.
#[derive(Debug, Serialize)]
pub(super) struct Report {
    machines: u64,
    kv_mib: u64,
    voters: usize,
    standbys: usize,
    spares: usize,
    /// Last machine started → the leader lists every machine as a member.
    members_after_last_start_s: f64,
    /// Last machine started → every role settled (voters, standbys, spares) and every member
    /// reachable, per the leader.
    settled_after_last_start_s: f64,
    /// The leader's CPU while idle, as a share of one core.
    leader_idle_cpu_at_10: f64,
    leader_idle_cpu_at_n: f64,
    leader_idle_cpu_ratio: f64,
    rss_median_mib: BTreeMap<String, f64>,
    /// The private part of it (`RssAnon`): what a process of the role holds beyond the
    /// binary's pages, which every agent maps alike.
    anon_median_mib: BTreeMap<String, f64>,
    replace_after_s: f64,
    /// kill -9 of a follower voter → the leader reports every voter reachable again.
    replacement_s: f64,
}

pub(super) fn report(m: &Measurements) -> Report {
    let (at_10, at_n) = (m.leader_idle_cpu_at_10, m.leader_idle_cpu_at_n);
    Report {
        machines: m.machines,
        kv_mib: m.kv_mib,
        voters: count(&m.roles, "voter"),
        standbys: count(&m.roles, "standby"),
        spares: count(&m.roles, "spare"),
        members_after_last_start_s: m.members_after_last_start_s,
        settled_after_last_start_s: m.settled_after_last_start_s,
        leader_idle_cpu_at_10: at_10,
        leader_idle_cpu_at_n: at_n,
        leader_idle_cpu_ratio: if at_10 > 0.0 { at_n / at_10 } else { 0.0 },
        rss_median_mib: medians(&m.rss_mib),
        anon_median_mib: medians(&m.anon_mib),
        replace_after_s: m.replace_after.as_secs_f64(),
        replacement_s: m.replacement_s,
    }
}

fn medians(by_role: &BTreeMap<String, Vec<f64>>) -> BTreeMap<String, f64> {
    by_role
        .iter()
        .map(|(role, v)| (role.clone(), upper_median(&mut v.clone())))
        .collect()
}

/// Prints the report on stdout: one JSON object with `--json`, else its pretty debug form.
pub(super) fn print(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        println!("{report:#?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(r: &str) -> (String, bool) {
        (r.to_string(), true)
    }

    #[test]
    fn counts_roles_medians_rss_and_the_cpu_ratio() {
        let roles: Roles = [
            ("a", "voter"),
            ("b", "voter"),
            ("c", "voter"),
            ("d", "standby"),
            ("e", "spare"),
        ]
        .into_iter()
        .map(|(n, r)| (n.to_string(), role(r)))
        .collect();
        let m = Measurements {
            machines: 5,
            kv_mib: 0,
            replace_after: Duration::from_secs(5),
            roles,
            members_after_last_start_s: 1.0,
            settled_after_last_start_s: 2.0,
            leader_idle_cpu_at_10: 0.02,
            leader_idle_cpu_at_n: 0.03,
            rss_mib: [("voter".to_string(), vec![30.0, 10.0, 20.0])].into(),
            anon_mib: [("spare".to_string(), vec![1.0, 3.0])].into(),
            replacement_s: 6.5,
        };
        let r = report(&m);
        assert_eq!((r.voters, r.standbys, r.spares), (3, 1, 1));
        assert!((r.leader_idle_cpu_ratio - 1.5).abs() < 1e-9);
        assert_eq!(r.rss_median_mib["voter"], 20.0);
        assert_eq!(r.anon_median_mib["spare"], 3.0);
        assert_eq!(r.replace_after_s, 5.0);
        let idle = Measurements {
            leader_idle_cpu_at_10: 0.0,
            ..m
        };
        assert_eq!(report(&idle).leader_idle_cpu_ratio, 0.0);
    }
}
