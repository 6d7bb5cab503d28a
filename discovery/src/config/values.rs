//! What each `serve` flag's value may be: clap calls these while parsing, and their messages
//! are what an operator sees for a wrong value, so they name the allowed range and why.

use std::time::Duration;

use muster_shared::duration::parse_duration;

/// `--max-size`: a whole number from 1 to 1000 (clap's own range check would print `1..=1000`).
pub(super) fn parse_max_size(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a whole number between 1 and 1000")),
    }
}

pub(super) fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err(
            "a token must live at least 1s (etcd members need minutes; the default is 7d)".into(),
        );
    }
    Ok(d)
}

pub(super) fn parse_hold(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(600) {
        return Err(
            "use 1s to 10m; keep it below your reverse proxy's idle timeout (30s suits nginx's 60s)"
                .into(),
        );
    }
    Ok(d)
}

pub(super) fn parse_request_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(300) {
        return Err("use 1s to 5m (etcd gives every non-watch request 5s in all)".into());
    }
    Ok(d)
}

pub(super) fn parse_public_url(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or(
            "the public URL starts with http:// or https://, e.g. https://discovery.example.com",
        )?;
    if rest.is_empty() || rest.contains(['?', '#', ' ']) {
        return Err("expected scheme://host[:port][/path] without query or fragment".into());
    }
    Ok(s.trim_end_matches('/').to_string())
}
