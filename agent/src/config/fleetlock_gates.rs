//! FleetLock health gates this agent runs when it leads (`--fleetlock-gate NAME=prometheus:URL`,
//! `NAME=command:PATH`, `--fleetlock-gate-timeout`). They are local settings, never replicated
//! state: a command gate runs as the agent's user (root) on whichever member leads, and an
//! operator token scoped to FleetLock must never be able to make every machine run a command.
//! The replicated state only says which group uses which gate names.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::ConfigError;
use super::sources::{Setting, Sources};
use super::values::duration;
use crate::state::fleetlock::valid_gate_name;

/// `--fleetlock-gate-timeout` when not given.
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most gates one agent defines: each may run on every lock, and a long list is a mistake.
pub const MAX_GATE_DEFINITIONS: usize = 32;
/// Longest URL or path of a gate (it is quoted in refusals and status).
const MAX_TARGET: usize = 2048;
const FORM: &str = "write NAME=prometheus:URL (an http or https Prometheus query or alerts \
                    API URL) or NAME=command:PATH (an absolute path, run without a shell)";

/// One gate: its name (what groups refer to) and what it checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSpec {
    pub name: String,
    pub check: GateCheck,
}

/// What a gate checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateCheck {
    /// GET this URL; passes only when the answer lists no firing alert.
    Prometheus(String),
    /// Run this program (no arguments, no shell); passes when it exits 0.
    Command(PathBuf),
}

impl fmt::Display for GateCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Shown in refusals (Zincati logs them) and status: never a password in the URL.
            GateCheck::Prometheus(url) => match reqwest::Url::parse(url) {
                Ok(mut shown) if shown.password().is_some() => {
                    let _ = shown.set_password(Some("***"));
                    write!(f, "prometheus {shown}")
                }
                _ => write!(f, "prometheus {url}"),
            },
            GateCheck::Command(path) => write!(f, "command {}", path.display()),
        }
    }
}

/// The gates and how long each may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetLockGates {
    pub gates: Vec<GateSpec>,
    pub timeout: Duration,
}

impl Default for FleetLockGates {
    fn default() -> Self {
        Self {
            gates: Vec::new(),
            timeout: DEFAULT_GATE_TIMEOUT,
        }
    }
}

/// One `NAME=prometheus:URL` or `NAME=command:PATH`, checked.
pub fn parse_gate(text: &str) -> Result<GateSpec, String> {
    let text = text.trim();
    let Some((name, rest)) = text.split_once('=') else {
        return Err(format!("{text:?}: {FORM}"));
    };
    if !valid_gate_name(name) {
        return Err(format!(
            "gate name {name:?}: use 1 to 63 characters of [a-zA-Z0-9.-], as a group name"
        ));
    }
    let Some((kind, target)) = rest.split_once(':') else {
        return Err(format!("{text:?}: {FORM}"));
    };
    if target.is_empty() || target.len() > MAX_TARGET || target.chars().any(char::is_control) {
        return Err(format!(
            "gate {name}: the {kind} target is empty, longer than {MAX_TARGET} characters or \
             has control characters; {FORM}"
        ));
    }
    let check = match kind {
        "prometheus" => {
            let url = reqwest::Url::parse(target)
                .map_err(|e| format!("gate {name}: {target:?} is not a URL ({e}); {FORM}"))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(format!(
                    "gate {name}: {target:?} is not an http:// or https:// URL with a host; {FORM}"
                ));
            }
            GateCheck::Prometheus(url.to_string())
        }
        "command" => {
            let path = PathBuf::from(target);
            if !path.is_absolute() {
                return Err(format!(
                    "gate {name}: {target:?} is not an absolute path (no PATH lookup, no shell); \
                     {FORM}"
                ));
            }
            GateCheck::Command(path)
        }
        other => return Err(format!("gate {name}: unknown kind {other:?}; {FORM}")),
    };
    Ok(GateSpec {
        name: name.to_string(),
        check,
    })
}

/// The entries of a list given as one text (the variable, or the config file's string): one a
/// line, or comma-separated. A comma starts a new entry only where `NAME=prometheus:` or
/// `NAME=command:` follows it, so a comma inside a Prometheus query
/// (`ALERTS{alertstate="firing",severity="page"}`) stays in its URL.
pub fn split_gate_list(text: &str) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut current: Option<String> = None;
        for piece in line.split(',') {
            match current.as_mut() {
                Some(entry) if !starts_a_gate(piece) => {
                    entry.push(',');
                    entry.push_str(piece);
                }
                _ => {
                    if let Some(done) = current.replace(piece.to_string()) {
                        entries.push(done);
                    }
                }
            }
        }
        entries.extend(current);
    }
    entries
        .into_iter()
        // A trailing comma (`a=command:/x,`) ends the list; it is not part of the path.
        .map(|e| e.trim().trim_end_matches(',').trim_end().to_string())
        .filter(|e| !e.is_empty())
        .collect()
}

/// True when `piece` reads `NAME=prometheus:…` or `NAME=command:…`.
fn starts_a_gate(piece: &str) -> bool {
    piece
        .trim_start()
        .split_once('=')
        .is_some_and(|(name, rest)| {
            valid_gate_name(name)
                && (rest.starts_with("prometheus:") || rest.starts_with("command:"))
        })
}

/// The gates from the flags (repeated), else the variable, else the config file, and the timeout.
pub(super) fn resolve(src: &Sources) -> Result<FleetLockGates, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: Setting::FleetlockGate.flag(),
        message,
    };
    let entries = src
        .unexpanded(Setting::FleetlockGate)?
        .map(|text| split_gate_list(&text))
        .unwrap_or_default();
    if entries.len() > MAX_GATE_DEFINITIONS {
        return Err(invalid(format!(
            "{} gates given; at most {MAX_GATE_DEFINITIONS}",
            entries.len()
        )));
    }
    let mut gates: Vec<GateSpec> = Vec::new();
    for entry in &entries {
        let gate = parse_gate(entry).map_err(invalid)?;
        if gates.iter().any(|g| g.name == gate.name) {
            return Err(invalid(format!("gate {} is defined twice", gate.name)));
        }
        gates.push(gate);
    }
    let timeout = match src.text(Setting::FleetlockGateTimeout)? {
        None => DEFAULT_GATE_TIMEOUT,
        Some(raw) => {
            let d = duration(Setting::FleetlockGateTimeout, &raw)?;
            // A follower waits this much on top of its 2 s for a forwarded lock, and a forward
            // gives up after 25 s.
            if d < Duration::from_millis(100) || d > Duration::from_secs(20) {
                return Err(ConfigError::Invalid {
                    setting: Setting::FleetlockGateTimeout.flag(),
                    message: format!("{raw} is not between 100ms and 20s"),
                });
            }
            d
        }
    };
    Ok(FleetLockGates { gates, timeout })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_is_a_name_a_kind_and_a_checked_target() {
        let ok = [
            (
                "alerts=prometheus:http://prom:9090/api/v1/query?query=ALERTS",
                "alerts",
                "prometheus http://prom:9090/api/v1/query?query=ALERTS",
            ),
            (
                " drained=command:/usr/local/bin/drained ",
                "drained",
                "command /usr/local/bin/drained",
            ),
            (
                "secret=prometheus:https://u:pw@p.example/api/v1/alerts",
                "secret",
                "prometheus https://u:***@p.example/api/v1/alerts",
            ),
            (
                "a.b-1=prometheus:https://p.example/api/v1/alerts",
                "a.b-1",
                "prometheus https://p.example/api/v1/alerts",
            ),
        ];
        for (text, name, shown) in ok {
            let g = parse_gate(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((g.name.as_str(), g.check.to_string()), (name, shown.into()));
        }
        let bad = [
            ("alerts", "NAME=prometheus:URL"),
            ("alerts=http://prom:9090", "unknown kind"),
            ("al erts=command:/bin/true", "gate name"),
            ("=command:/bin/true", "gate name"),
            ("x=prometheus:ftp://prom/", "http:// or https://"),
            ("x=prometheus:not a url", "not a URL"),
            ("x=command:drained", "absolute path"),
            ("x=command:", "empty"),
            ("x=shell:/bin/true", "unknown kind"),
        ];
        for (text, says) in bad {
            let e = parse_gate(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_list_splits_at_lines_and_at_commas_that_start_a_gate() {
        let cases: &[(&str, &[&str])] = &[
            ("", &[]),
            (
                "a=command:/x,b=prometheus:http://p/q",
                &["a=command:/x", "b=prometheus:http://p/q"],
            ),
            (
                "a=prometheus:http://p/q?query=ALERTS{x=\"1\",y=\"2\"},b=command:/y",
                &[
                    "a=prometheus:http://p/q?query=ALERTS{x=\"1\",y=\"2\"}",
                    "b=command:/y",
                ],
            ),
            (
                "a=command:/x\n b=command:/y\n\n",
                &["a=command:/x", "b=command:/y"],
            ),
            ("junk,a=command:/x,", &["junk", "a=command:/x"]),
        ];
        for (text, want) in cases {
            assert_eq!(split_gate_list(text), *want, "{text:?}");
        }
    }
}
