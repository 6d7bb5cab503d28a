//! Human durations for flags and config files: `30s`, `24h`, `7d`, `1h30m`.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (examples: 30s, 24h, 7d, 1h30m)")]
pub struct DurationError {
    input: String,
    reason: String,
}

/// Parses a human duration. A bare number is refused rather than guessed at: `30` could mean
/// seconds or minutes, and a wrong guess in a TTL is a security problem.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let trimmed = input.trim();
    humantime::parse_duration(trimmed).map_err(|e| DurationError {
        input: input.to_string(),
        reason: e.to_string(),
    })
}

/// Formats a duration the way `parse_duration` reads it back.
/// A duration the way operators write them, in the units `parse_duration` reads back: `365d`,
/// `1d 2h`, `30s`, `250ms`. Whole seconds only from one second up (humantime's own format
/// would print 365 days as "11months 30days 3h 50m 24s").
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.subsec_millis());
    }
    let parts = [
        (secs / 86_400, "d"),
        (secs % 86_400 / 3_600, "h"),
        (secs % 3_600 / 60, "m"),
        (secs % 60, "s"),
    ];
    parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_in_units_that_parse_back() {
        let cases = [
            (Duration::from_secs(365 * 86_400), "365d"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(93_784), "1d 2h 3m 4s"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1_500), "1s"),
            (Duration::from_millis(250), "250ms"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(d), want);
            let back = parse_duration(want).expect("parses back");
            assert_eq!(back.as_secs(), d.as_secs(), "{want}");
        }
    }

    #[test]
    fn parses_common_operator_spellings() {
        assert_eq!(parse_duration("30s").ok(), Some(Duration::from_secs(30)));
        assert_eq!(
            parse_duration("7d").ok(),
            Some(Duration::from_secs(7 * 86_400))
        );
        assert_eq!(
            parse_duration("1h30m").ok(),
            Some(Duration::from_secs(5_400))
        );
        assert_eq!(
            parse_duration(" 250ms ").ok(),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn refuses_bare_numbers_and_garbage() {
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("soon").is_err());
        let msg = parse_duration("x")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("examples"), "{msg}");
    }

    #[test]
    fn format_round_trips() {
        let d = Duration::from_secs(7 * 86_400 + 3);
        assert_eq!(parse_duration(&format_duration(d)).ok(), Some(d));
    }
}
