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
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

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
