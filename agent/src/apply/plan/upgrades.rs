//! The upgrade steps of the plan: which agents run behind the newest one, and the order to
//! upgrade them in. Separate because apply only prints these (it does not log in to machines)
//! and the version ordering is a small pure job of its own.

use super::{Action, Observed, ObservedMember, Step};

/// Agents older than the newest one, in the order to upgrade them: standbys and spares, then
/// the follower voters one at a time, the leader last.
pub(super) fn upgrades(observed: &Observed) -> Vec<Step> {
    // An agent too old to answer the probe is older than every agent that does.
    let versioned: Vec<(&ObservedMember, &str)> = observed
        .members
        .iter()
        .filter_map(|m| match &m.report {
            Some(r) => Some((m, r.version.as_str())),
            None if m.older() => Some((m, "0-older")),
            None => None,
        })
        .collect();
    let Some(newest) = versioned
        .iter()
        .map(|(_, v)| *v)
        .max_by_key(|v| version_key(v))
    else {
        return Vec::new();
    };
    let mut behind: Vec<(&ObservedMember, &str)> = versioned
        .into_iter()
        .filter(|(_, v)| version_key(v) < version_key(newest))
        .collect();
    behind.sort_by_key(|(m, _)| (m.voter(), observed.leads(m), m.name.clone()));
    behind
        .into_iter()
        .map(|(m, v)| Step {
            action: Action::Upgrade {
                name: m.name.clone(),
                from_version: v.to_string(),
                to_version: newest.to_string(),
            },
            reason: if observed.leads(m) {
                "older than the newest agent; the leader goes last".into()
            } else if m.voter() {
                "older than the newest agent; one voter at a time, each back before the next".into()
            } else {
                "older than the newest agent; nonvoters first".into()
            },
            tolerance_before: 0,
            tolerance_after: 0,
        })
        .collect()
}

/// `1.10.0` sorts after `1.9.3` (numeric parts compared as numbers), and a release after its
/// pre-releases (`0.2.0` after `0.2.0-rc.1`), as semver orders them (build metadata ignored).
fn version_key(v: &str) -> (Vec<u64>, bool, Vec<u64>) {
    let v = v.split('+').next().unwrap_or(v);
    let (core, pre) = match v.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (v, None),
    };
    let numbers = |s: &str| -> Vec<u64> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    (
        numbers(core),
        pre.is_none(),
        pre.map(numbers).unwrap_or_default(),
    )
}
