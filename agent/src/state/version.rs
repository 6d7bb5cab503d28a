//! Which agent versions read which log entries: a leader writes an entry kind only while every
//! member's agent (as it last reported its version) decodes it, so that a rolling upgrade never
//! hands an older agent an entry it would fail on.

/// The first agent version that reads `Request::Batch`.
const BATCH_SINCE: (u64, u64) = (0, 2);

/// Whether an agent that reported `version` reads batch entries (`None`: it has not reported,
/// or runs a version from before the report: it does not).
pub fn reads_batches(version: Option<&str>) -> bool {
    version
        .and_then(major_minor)
        .is_some_and(|v| v >= BATCH_SINCE)
}

/// `1.2` of `1.2.3`, `v1.2.3` or `1.2.3-rc.1` (a pre-release of a version is built from its
/// code); `None` for text that is no version.
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let mut numbers = version.split(['.', '-', '+']);
    let major = numbers.next()?.parse().ok()?;
    let minor = numbers.next()?.parse().ok()?;
    Some((major, minor))
}

impl super::ClusterState {
    /// Every member's agent reads batch entries (spares too: they rejoin the configuration and
    /// replicate the log), and so does every node of the raft configuration `in_raft` (a
    /// removed member leaves its record before it leaves the configuration). False while any
    /// of them has not reported its version.
    pub fn members_read_batches(&self, in_raft: &[super::NodeId]) -> bool {
        let reads = |id: &super::NodeId| {
            self.nodes
                .get(id)
                .is_some_and(|n| reads_batches(n.version.as_deref()))
        };
        !self.nodes.is_empty() && self.nodes.keys().all(reads) && in_raft.iter().all(reads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_read_from_0_2_on() {
        let table: &[(Option<&str>, bool)] = &[
            (None, false),
            (Some("0.1.0"), false),
            (Some("0.1.99"), false),
            (Some("0.2.0"), true),
            (Some("v0.2.0"), true),
            (Some("0.2.0-rc.1"), true),
            (Some("0.10.3"), true),
            (Some("1.0.0"), true),
            (Some("1"), false),
            (Some("banana"), false),
            (Some(""), false),
        ];
        for (version, reads) in table {
            assert_eq!(reads_batches(*version), *reads, "{version:?}");
        }
    }
}
