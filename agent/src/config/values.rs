//! Parsers for the shapes settings share (a bounded duration, one that `0` turns off, a count
//! in a range, a listen address or `off`), each naming its setting in the error so the
//! operator knows which flag to fix.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use muster_shared::duration::parse_duration;

use super::ConfigError;
use super::sources::Setting;

pub(super) fn invalid(setting: Setting, message: String) -> ConfigError {
    ConfigError::Invalid {
        setting: setting.flag(),
        message,
    }
}

/// A duration of `parse_duration`'s syntax, the error naming the setting.
pub(super) fn duration(setting: Setting, raw: &str) -> Result<Duration, ConfigError> {
    parse_duration(raw).map_err(|e| invalid(setting, e.to_string()))
}

/// A raft timing (heartbeat, election timeout): between 10 ms and 60 s.
pub(super) fn raft_timing(
    setting: Setting,
    raw: Option<String>,
    default: &str,
) -> Result<Duration, ConfigError> {
    let raw = raw.unwrap_or_else(|| default.to_string());
    let d = duration(setting, &raw)?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(60) {
        return Err(invalid(
            setting,
            format!("{raw} is not between 10ms and 60s"),
        ));
    }
    Ok(d)
}

/// A duration between 1 s and 30 days that `0` turns off (`None`); unset gives `default`.
pub(super) fn optional_duration(
    setting: Setting,
    raw: Option<String>,
    default: Duration,
) -> Result<Option<Duration>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Some(default));
    };
    let d = parse_duration(&raw).map_err(|e| invalid(setting, format!("{e}; `0` turns it off")))?;
    if d.is_zero() {
        return Ok(None);
    }
    if d < Duration::from_secs(1) || d > Duration::from_secs(30 * 24 * 3600) {
        return Err(invalid(
            setting,
            format!("{raw} is not between 1s and 30d (or 0 for off)"),
        ));
    }
    Ok(Some(d))
}

/// A whole number within `range`; unset gives `default`.
pub(super) fn count(
    setting: Setting,
    raw: Option<String>,
    default: usize,
    range: RangeInclusive<usize>,
) -> Result<usize, ConfigError> {
    let Some(raw) = raw else {
        return Ok(default);
    };
    match raw.trim().parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(invalid(
            setting,
            format!(
                "{raw:?} is not a whole number from {} to {}",
                range.start(),
                range.end()
            ),
        )),
    }
}

/// A loopback-side listener: an IP:port, `off` (`None`), or unset (`default`).
pub(super) fn listen_or_off(
    setting: Setting,
    raw: Option<&str>,
    default: SocketAddr,
) -> Result<Option<SocketAddr>, ConfigError> {
    match raw.map(str::trim) {
        Some("off") => Ok(None),
        Some(addr) => addr.parse::<SocketAddr>().map(Some).map_err(|_| {
            invalid(
                setting,
                format!(
                    "{addr:?} is not an IP:port such as 127.0.0.1:{}, or `off`",
                    default.port()
                ),
            )
        }),
        None => Ok(Some(default)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_durations_keep_to_their_ranges() {
        assert_eq!(count(Setting::MinVoters, None, 3, 1..=7).ok(), Some(3));
        assert_eq!(
            count(Setting::MinVoters, Some(" 7 ".into()), 3, 1..=7).ok(),
            Some(7)
        );
        assert!(count(Setting::MinVoters, Some("8".into()), 3, 1..=7).is_err());
        assert!(count(Setting::MinVoters, Some("-1".into()), 3, 1..=7).is_err());
        let day = Duration::from_secs(86_400);
        assert_eq!(
            optional_duration(Setting::ReplaceAfter, Some("0".into()), day).ok(),
            Some(None)
        );
        assert_eq!(
            optional_duration(Setting::ReplaceAfter, None, day).ok(),
            Some(Some(day))
        );
        assert!(optional_duration(Setting::ReplaceAfter, Some("500ms".into()), day).is_err());
        assert!(optional_duration(Setting::ReplaceAfter, Some("31d".into()), day).is_err());
        assert!(raft_timing(Setting::Heartbeat, Some("5ms".into()), "50ms").is_err());
        assert_eq!(
            raft_timing(Setting::Heartbeat, None, "50ms").ok(),
            Some(Duration::from_millis(50))
        );
    }

    #[test]
    fn a_listener_is_an_address_off_or_the_default() {
        let default = SocketAddr::from(([127, 0, 0, 1], 7902));
        assert_eq!(
            listen_or_off(Setting::FleetlockListen, None, default).ok(),
            Some(Some(default))
        );
        assert_eq!(
            listen_or_off(Setting::FleetlockListen, Some(" off "), default).ok(),
            Some(None)
        );
        let e = listen_or_off(Setting::FleetlockListen, Some("7902"), default)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("127.0.0.1:7902, or `off`"), "{e}");
    }
}
