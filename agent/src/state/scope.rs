//! What an operator token may do: its scopes, and the pure rule that says whether they allow an
//! access. The leader applies the rule to every operation (see `leader::authorize`).
//!
//! | scope          | allows |
//! |----------------|--------|
//! | `admin`        | everything (every token made before scopes existed) |
//! | `kv:PREFIX`    | reading and writing keys that start with PREFIX (`kv:` = every key) |
//! | `kv:PREFIX:ro` | reading them only |
//! | `lease:NAME`   | claiming, renewing, releasing and reading lease NAME |
//! | `fleetlock`    | FleetLock status and settings, force-release |
//!
//! `status` is open to every token: it is what a client asks first, and holds no secret.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One scope of an operator token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Scope {
    Admin,
    Kv { prefix: String, read_only: bool },
    Lease { name: String },
    FleetLock,
}

/// What an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access<'a> {
    /// Open to every token (`status`).
    Any,
    Admin,
    /// Reading a key, or the keys under a prefix.
    KvRead(&'a str),
    KvWrite(&'a str),
    Lease(&'a str),
    FleetLock,
}

/// The scopes of a token made without any: full power, as every token had before scopes.
pub fn admin_only() -> Vec<Scope> {
    vec![Scope::Admin]
}

/// Whether a token with `scopes` may make `access`.
pub fn allows(scopes: &[Scope], access: Access<'_>) -> bool {
    if access == Access::Any {
        return true;
    }
    scopes.iter().any(|scope| match (scope, access) {
        (Scope::Admin, _) => true,
        (Scope::Kv { prefix, .. }, Access::KvRead(key)) => key.starts_with(prefix.as_str()),
        (Scope::Kv { prefix, read_only }, Access::KvWrite(key)) => {
            !read_only && key.starts_with(prefix.as_str())
        }
        (Scope::Lease { name }, Access::Lease(lease)) => name == lease,
        (Scope::FleetLock, Access::FleetLock) => true,
        _ => false,
    })
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Admin => write!(f, "admin"),
            Scope::Kv {
                prefix,
                read_only: false,
            } => write!(f, "kv:{prefix}"),
            Scope::Kv {
                prefix,
                read_only: true,
            } => write!(f, "kv:{prefix}:ro"),
            Scope::Lease { name } => write!(f, "lease:{name}"),
            Scope::FleetLock => write!(f, "fleetlock"),
        }
    }
}

/// A scope that does not parse; each names the scope as it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("scope {0:?}: the prefix is too long or has control characters")]
    BadPrefix(String),
    #[error("scope {scope:?}: {reason}")]
    BadLeaseName { scope: String, reason: String },
    #[error("unknown scope {0:?}: use admin, kv:PREFIX, kv:PREFIX:ro, lease:NAME or fleetlock")]
    Unknown(String),
}

impl FromStr for Scope {
    type Err = ScopeError;

    fn from_str(text: &str) -> Result<Self, ScopeError> {
        if text == "admin" {
            return Ok(Scope::Admin);
        }
        if text == "fleetlock" {
            return Ok(Scope::FleetLock);
        }
        if let Some(rest) = text.strip_prefix("kv:") {
            let (prefix, read_only) = match rest.strip_suffix(":ro") {
                Some(prefix) => (prefix, true),
                None => (rest, false),
            };
            if prefix.len() > crate::state::kv::MAX_KEY_BYTES
                || prefix.chars().any(char::is_control)
            {
                return Err(ScopeError::BadPrefix(text.to_string()));
            }
            return Ok(Scope::Kv {
                prefix: prefix.to_string(),
                read_only,
            });
        }
        if let Some(name) = text.strip_prefix("lease:") {
            crate::state::lease::check_name("lease", name).map_err(|r| {
                ScopeError::BadLeaseName {
                    scope: text.to_string(),
                    reason: r.message,
                }
            })?;
            return Ok(Scope::Lease {
                name: name.to_string(),
            });
        }
        Err(ScopeError::Unknown(text.to_string()))
    }
}

impl TryFrom<String> for Scope {
    type Error = ScopeError;
    fn try_from(text: String) -> Result<Self, ScopeError> {
        text.parse()
    }
}

impl From<Scope> for String {
    fn from(scope: Scope) -> String {
        scope.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes(list: &[&str]) -> Vec<Scope> {
        list.iter().map(|s| s.parse().expect("scope")).collect()
    }

    #[test]
    fn the_access_table() {
        use Access::*;
        let table: &[(&[&str], Access, bool)] = &[
            (&["admin"], Admin, true),
            (&["admin"], KvWrite("x"), true),
            (&["kv:app/"], KvRead("app/a"), true),
            (&["kv:app/"], KvWrite("app/a"), true),
            (&["kv:app/"], KvWrite("other"), false),
            (&["kv:app/"], KvRead("ap"), false),
            (&["kv:app/:ro"], KvRead("app/a"), true),
            (&["kv:app/:ro"], KvWrite("app/a"), false),
            (&["kv:"], KvWrite("anything"), true),
            (&["kv:"], Admin, false),
            (&["lease:job"], Lease("job"), true),
            (&["lease:job"], Lease("job2"), false),
            (&["lease:job"], KvRead("job"), false),
            (&["fleetlock"], FleetLock, true),
            (&["fleetlock"], Admin, false),
            (&["lease:job"], Any, true),
            (&["kv:a/", "lease:job"], KvWrite("a/1"), true),
            (&["kv:a/", "lease:job"], Lease("job"), true),
            (&["kv:a/", "lease:job"], FleetLock, false),
        ];
        for (list, access, want) in table {
            assert_eq!(allows(&scopes(list), *access), *want, "{list:?} {access:?}");
        }
    }

    #[test]
    fn scopes_read_back_as_written_and_bad_ones_are_named() {
        for text in [
            "admin",
            "kv:",
            "kv:a/b",
            "kv:a/b:ro",
            "lease:x.y",
            "fleetlock",
        ] {
            let scope: Scope = text.parse().expect(text);
            assert_eq!(scope.to_string(), text);
            let json = serde_json::to_string(&scope).expect("json");
            assert_eq!(serde_json::from_str::<Scope>(&json).expect("back"), scope);
        }
        for bad in ["", "root", "lease:", "lease:a b", "kv:\u{1}"] {
            assert!(bad.parse::<Scope>().is_err(), "{bad:?}");
        }
    }
}
