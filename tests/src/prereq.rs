//! Prerequisites (etcd, Docker, network namespaces): a test whose prerequisite is missing
//! fails, never skips, unless the environment says a skip is fine.

/// Whether `MUSTER_ALLOW_SKIP` names `what` (`etcd`, `docker`, `netns`): a comma-separated list,
/// case-insensitive, spaces ignored. Only then may a test whose prerequisite is missing pass
/// without running.
pub fn skip_allowed(what: &str) -> bool {
    std::env::var("MUSTER_ALLOW_SKIP").is_ok_and(|list| list_names(&list, what))
}

fn list_names(list: &str, what: &str) -> bool {
    list.split(',')
        .any(|name| name.trim().eq_ignore_ascii_case(what))
}

/// Whether the variable is set to a truthy value: `1`, `true`, `yes` or `on`, in any case.
pub fn env_truthy(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| is_truthy(&v))
}

fn is_truthy(value: &str) -> bool {
    ["1", "true", "yes", "on"]
        .iter()
        .any(|t| value.trim().eq_ignore_ascii_case(t))
}

/// Whether a test may skip because `what` is missing: only if `allow_skip` (the value of
/// `MUSTER_ALLOW_SKIP`) names it and `require` (the value of the old `MUSTER_REQUIRE_*`
/// variable) is not truthy. Everything else, including no variable at all, means "fail".
fn may_skip(what: &str, allow_skip: Option<&str>, require: Option<&str>) -> bool {
    allow_skip.is_some_and(|list| list_names(list, what)) && !require.is_some_and(is_truthy)
}

/// For a test whose prerequisite `what` is missing (`why`; `fix` says how to get it): fails the
/// test (panics) unless `MUSTER_ALLOW_SKIP` names `what` and `require_var` (`MUSTER_REQUIRE_ETCD`,
/// `MUSTER_REQUIRE_DOCKER`) is not truthy. If the skip is allowed it prints a loud notice and
/// returns; the test then returns early.
pub fn missing_prerequisite(test: &str, what: &str, require_var: &str, why: &str, fix: &str) {
    let allow = std::env::var("MUSTER_ALLOW_SKIP").ok();
    let require = std::env::var(require_var).ok();
    if !may_skip(what, allow.as_deref(), require.as_deref()) {
        let because = if require.as_deref().is_some_and(is_truthy) {
            format!("{require_var} requires it")
        } else {
            format!("set MUSTER_ALLOW_SKIP={what} to skip instead")
        };
        panic!("{test} needs {what}: {why}; {fix} ({because})");
    }
    eprintln!("\n*** {test}: SKIPPED — {why} (MUSTER_ALLOW_SKIP contains {what}); {fix} ***\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_prerequisite_fails_unless_allow_skip_names_it() {
        // Nothing set: fail.
        assert!(!may_skip("etcd", None, None));
        // Named in the comma list (any case, spaces ignored): skip.
        assert!(may_skip("etcd", Some("etcd"), None));
        assert!(may_skip("docker", Some("etcd, Docker ,netns"), None));
        // Not named, or only as part of another name: fail.
        assert!(!may_skip("docker", Some("etcd,netns"), None));
        assert!(!may_skip("etcd", Some("etcd-server"), None));
        assert!(!may_skip("etcd", Some(""), None));
        // The old MUSTER_REQUIRE_* with any truthy value still means required.
        for truthy in ["1", "true", "TRUE", "yes", "Yes", "on", " ON "] {
            assert!(!may_skip("etcd", Some("etcd"), Some(truthy)), "{truthy:?}");
        }
        for falsy in ["0", "false", "no", "off", ""] {
            assert!(may_skip("etcd", Some("etcd"), Some(falsy)), "{falsy:?}");
        }
    }
}
