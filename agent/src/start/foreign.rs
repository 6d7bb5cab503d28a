//! A discovery URL that something other than Muster formed: etcd members (or another tool)
//! registered under the token, and no Muster bootstrap record exists. Muster's registrants
//! publish their node key right after registering and the first one writes the record, so a
//! first registrant without a key, a grace period later, is not a Muster agent: it will never
//! write a record, and its address is another program's port. Without this check a node would
//! advise `--join <etcd peer port>` or wait for that record forever.

use std::time::Duration;

use muster_shared::retry::{RetryPolicy, poll_until};

use crate::discovery::{DiscoveryClient, Listing, Registration};

/// How long a first registrant may go without a published key before it counts as foreign: a
/// Muster agent publishes it within one request after registering.
const KEY_GRACE: Duration = Duration::from_secs(2);
/// How often the key is looked for during [`KEY_GRACE`].
const KEY_POLL: Duration = Duration::from_millis(100);

/// What a node learns about the URL's first registrant, at a first look and at the end of
/// [`KEY_GRACE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstRegistrant {
    /// It is this node.
    pub is_me: bool,
    /// A Muster bootstrap record exists.
    pub record: bool,
    /// Its Muster node key was published at the first look, and at the second.
    pub key_then: bool,
    pub key_now: bool,
}

/// True when the URL's first registrant is not a Muster agent: no key at either look and no
/// record (a record means a Muster cluster formed, whoever registered first).
pub fn is_foreign(first: FirstRegistrant) -> bool {
    !first.is_me && !first.record && !first.key_then && !first.key_now
}

/// Confirms, by looking for the first registrant's key for up to [`KEY_GRACE`], that the URL of `listing` was formed by
/// something else; returns its registrations then. `None`: a Muster formation (or cannot tell:
/// a read failed, and the caller's own retries will say so).
pub async fn confirm(
    discovery: &DiscoveryClient,
    listing: &Listing,
    me: &str,
) -> Option<Vec<Registration>> {
    let first = listing.cohort().first()?;
    if first.id == me {
        return None;
    }
    let has_key = || async { discovery.meta(&first.id).await.ok().map(|m| m.is_some()) };
    let key_then = has_key().await?;
    if key_then {
        return None;
    }
    // A Muster registrant publishes its key within one request of registering: stop waiting
    // as soon as it does, so a formation whose first node is a moment behind loses no time.
    let grace = RetryPolicy::constant(KEY_POLL).within(KEY_GRACE);
    let published = poll_until(&grace, || async { has_key().await.filter(|k| *k) }).await;
    if published.is_ok() {
        return None;
    }
    let record = discovery.record().await.ok()?.is_some();
    let key_now = has_key().await?;
    is_foreign(FirstRegistrant {
        is_me: false,
        record,
        key_then,
        key_now,
    })
    .then(|| listing.members.clone())
}

/// The refusal: what registered there, why Muster cannot use it, and the way forward.
pub fn refusal(shown_url: &str, size: usize, registrations: &[Registration]) -> String {
    let found: Vec<String> = registrations
        .iter()
        .map(|r| format!("{} ({})", r.name, r.addr))
        .collect();
    let service = shown_url
        .rsplit_once('/')
        .map(|(service, _)| service)
        .unwrap_or(shown_url);
    format!(
        "discovery URL {shown_url} was formed by something other than Muster: its registrants \
         ({}) published no Muster node key, and there is no Muster bootstrap record. An etcd \
         cluster bootstrapping with the same URL does this; their addresses are its peer \
         ports, not Muster members. Muster cannot join it.\n\
         Mint a URL for Muster alone and start every agent with it:\n  \
         curl -s '{service}/new?size={size}'\n\
         (to add this machine to a running Muster cluster instead: muster agent --join MEMBER \
         --token TOKEN)",
        found.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_registrant_without_a_key_or_record_is_foreign() {
        let first = |is_me, record, key_then, key_now| FirstRegistrant {
            is_me,
            record,
            key_then,
            key_now,
        };
        // (is me, record, key at the first look, key at the second) → foreign
        let table = [
            (first(false, false, false, false), true),
            // A Muster registrant that had not published its key yet at the first look.
            (first(false, false, false, true), false),
            (first(false, false, true, true), false),
            // A record: a Muster cluster formed here.
            (first(false, true, false, false), false),
            (first(true, false, false, false), false),
        ];
        for (case, foreign) in table {
            assert_eq!(is_foreign(case), foreign, "{case:?}");
        }
    }

    #[test]
    fn the_refusal_names_what_registered_and_the_way_forward() {
        let reg = |name: &str, addr: &str| Registration {
            id: format!("{name}-id"),
            name: name.into(),
            addr: addr.into(),
            created_index: 1,
        };
        let text = refusal(
            "http://127.0.0.1:8087/ab12…",
            2,
            &[
                reg("etcd1", "127.0.0.1:2380"),
                reg("etcd2", "127.0.0.1:2382"),
            ],
        );
        for part in [
            "formed by something other than Muster",
            "etcd1 (127.0.0.1:2380), etcd2 (127.0.0.1:2382)",
            "curl -s 'http://127.0.0.1:8087/new?size=2'",
            "--join MEMBER --token TOKEN",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        assert!(!text.contains("--join 127.0.0.1:2382"), "{text}");
    }
}
