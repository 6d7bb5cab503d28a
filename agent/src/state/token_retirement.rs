//! What the end of a CA rotation takes with it: every join and operator token not pinned to the
//! new CA, and the pre-shared join secret (replaced, when the operator's node sent a new one).
//!
//! A token's text names the CA it was made under, and a holder can rewrite that field (the new
//! CA's pin is in every member's TLS chain). So the record keeps the pin too, and finishing a
//! rotation revokes the records themselves: an old token then fails on its record, whatever
//! its text claims.

use serde::{Deserialize, Serialize};

use super::{ClusterState, JoinTokenRecord, SecretReplacement};

/// The tokens a finished rotation revoked, by id, and whether a new join secret replaced the
/// old one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retired {
    #[serde(default)]
    pub join_tokens: Vec<String>,
    #[serde(default)]
    pub operator_tokens: Vec<String>,
    /// The id of the join secret that stopped working, if one was live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_secret: Option<String>,
    /// True if `new_join_secret` was recorded in its place.
    #[serde(default)]
    pub join_secret_replaced: bool,
}

impl ClusterState {
    /// Revokes, at `now_ms`, every live token whose record is not pinned to `new_pin`, and
    /// puts `replacement` in the place of a live join secret (same lifetime, pinned to the new
    /// CA). Deterministic: it runs inside the state machine.
    pub(super) fn retire_tokens(
        &mut self,
        new_pin: &str,
        now_ms: u64,
        replacement: Option<&SecretReplacement>,
    ) -> Retired {
        let old = |pin: &Option<String>| pin.as_deref() != Some(new_pin);
        let mut retired = Retired::default();
        let mut secret_expiry = None;
        for (id, token) in &mut self.join_tokens {
            if !old(&token.ca_pin) || token.state(now_ms) != "active" {
                continue;
            }
            token.revoked_ms = Some(now_ms);
            if token.unlimited() {
                secret_expiry = Some(token.expires_ms);
                retired.join_secret = Some(id.clone());
            } else {
                retired.join_tokens.push(id.clone());
            }
        }
        for (id, token) in &mut self.operator_tokens {
            if old(&token.ca_pin) && token.revoked_ms.is_none() {
                token.revoked_ms = Some(now_ms);
                retired.operator_tokens.push(id.clone());
            }
        }
        if let (Some(expires_ms), Some(new)) = (secret_expiry, replacement)
            && !self.join_tokens.contains_key(&new.id)
        {
            self.join_tokens.insert(
                new.id.clone(),
                JoinTokenRecord::join_secret(
                    new.secret_sha256.clone(),
                    "pre-shared join secret (replaced at a CA rotation)",
                    now_ms,
                    expires_ms,
                    Some(new_pin.to_string()),
                    new.verify_key.clone(),
                ),
            );
            retired.join_secret_replaced = true;
        }
        retired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::OperatorTokenRecord;

    fn join(uses: u32, pin: Option<&str>, revoked: bool) -> JoinTokenRecord {
        JoinTokenRecord {
            secret_sha256: "h".into(),
            description: String::new(),
            created_ms: 0,
            expires_ms: 1_000,
            uses_total: uses,
            uses_left: uses,
            consumed_ms: None,
            revoked_ms: revoked.then_some(1),
            last_used_by: None,
            ca_pin: pin.map(str::to_string),
            verify_key: None,
        }
    }

    fn operator(pin: Option<&str>) -> OperatorTokenRecord {
        OperatorTokenRecord {
            secret_sha256: "h".into(),
            description: String::new(),
            created_ms: 0,
            revoked_ms: None,
            scopes: crate::state::scope::admin_only(),
            ca_pin: pin.map(str::to_string),
        }
    }

    fn replacement() -> SecretReplacement {
        SecretReplacement {
            id: "new-secret".into(),
            secret_sha256: "hh".into(),
            verify_key: "vk".into(),
        }
    }

    /// (case, join token, retired?) for each kind of record a cluster can hold.
    #[test]
    fn only_live_tokens_of_other_cas_are_retired() {
        let cases = [
            ("old pin", join(1, Some("old"), false), true),
            (
                "no pin (made before pins were kept)",
                join(1, None, false),
                true,
            ),
            ("new pin", join(1, Some("new"), false), false),
            (
                "old pin, already revoked",
                join(1, Some("old"), true),
                false,
            ),
            ("old pin, used up", join(0, Some("old"), false), false),
        ];
        for (case, token, expect) in cases {
            let mut s = ClusterState::default();
            s.join_tokens.insert("t".into(), token);
            let retired = s.retire_tokens("new", 10, None);
            assert_eq!(retired.join_tokens == ["t"], expect, "{case}");
            assert_eq!(s.join_tokens["t"].revoked_ms == Some(10), expect, "{case}");
        }
        for (pin, expect) in [(Some("old"), true), (None, true), (Some("new"), false)] {
            let mut s = ClusterState::default();
            s.operator_tokens.insert("o".into(), operator(pin));
            let retired = s.retire_tokens("new", 10, None);
            assert_eq!(retired.operator_tokens == ["o"], expect, "{pin:?}");
            assert_eq!(s.operator_tokens["o"].revoked_ms.is_some(), expect);
        }
    }

    #[test]
    fn a_live_join_secret_is_replaced_with_the_same_lifetime_and_the_new_pin() {
        let mut s = ClusterState::default();
        s.join_tokens
            .insert("secret".into(), join(u32::MAX, None, false));
        let retired = s.retire_tokens("new", 10, Some(&replacement()));
        assert_eq!(retired.join_secret.as_deref(), Some("secret"));
        assert!(retired.join_secret_replaced);
        assert!(retired.join_tokens.is_empty(), "the secret is not a token");
        assert_eq!(s.join_tokens["secret"].state(10), "revoked");
        let new = &s.join_tokens["new-secret"];
        assert_eq!(new.state(10), "active");
        assert!(new.unlimited());
        assert_eq!(new.expires_ms, 1_000);
        assert_eq!(new.ca_pin.as_deref(), Some("new"));
        assert_eq!(
            new.verify_key.as_deref(),
            Some("vk"),
            "joins sign with the new secret"
        );
    }

    #[test]
    fn no_secret_is_made_up_where_none_was_live() {
        let mut s = ClusterState::default();
        s.join_tokens
            .insert("secret".into(), join(u32::MAX, None, true));
        let retired = s.retire_tokens("new", 10, Some(&replacement()));
        assert_eq!(retired.join_secret, None);
        assert!(!retired.join_secret_replaced);
        assert!(!s.join_tokens.contains_key("new-secret"));
    }
}
