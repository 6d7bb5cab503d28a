//! FleetLock maintenance windows: when a group's machines may take a reboot slot. A window is
//! a set of weekdays (one, a range, or every day) with a start and end time of day, in UTC
//! only (`Sat 02:00-06:00 UTC`, `Mon-Fri 22:00-02:00 UTC`, `daily 02:00-04:00 UTC`). An end
//! before the start crosses midnight into the next day. Pure functions of the clock they are
//! given, so that every node decides the same from the time the leader stamped.

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Most windows one group may have: a bound on replicated state.
pub const MAX_WINDOWS: usize = 16;
/// Longest text of one window.
pub const MAX_WINDOW_LEN: usize = 64;

const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const MINUTES_PER_DAY: u32 = 1_440;
const MINUTES_PER_WEEK: u32 = 7 * MINUTES_PER_DAY;
const MS_PER_MINUTE: u64 = 60_000;

/// Why a window's text is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("a window is at most {MAX_WINDOW_LEN} characters")]
    TooLong,
    #[error(
        "window {0:?}: times are UTC only; write it in UTC with the literal suffix, \
         e.g. \"Sat 02:00-06:00 UTC\""
    )]
    NotUtc(String),
    #[error(
        "window {0:?}: expected DAYS HH:MM-HH:MM UTC, where DAYS is Mon..Sun, a range such \
         as Mon-Fri, or daily"
    )]
    Shape(String),
    #[error("window {0:?}: {1:?} is not a weekday (Mon, Tue, Wed, Thu, Fri, Sat, Sun) or daily")]
    Day(String, String),
    #[error("window {0:?}: {1:?} is not a time HH:MM (00:00 to 23:59, or 24:00 as an end)")]
    Time(String, String),
    #[error("window {0:?}: it starts and ends at the same time")]
    Empty(String),
    #[error("at most {MAX_WINDOWS} windows per group")]
    TooMany,
}

/// The weekdays a window starts on, Monday = 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Days {
    Daily,
    /// From the first to the second, both included; wraps past Sunday (`Fri-Mon`).
    Range(u8, u8),
}

/// One maintenance window. Serialized as its text (the Display), so that state and commands
/// read the way an operator writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Window {
    days: Days,
    /// Minutes after midnight (UTC) it opens.
    start: u32,
    /// Minutes after midnight it closes: at or before `start`, the next day.
    end: u32,
}

impl Window {
    /// The starting weekdays, Monday = 0.
    fn start_days(&self) -> impl Iterator<Item = u32> {
        let (from, to) = match self.days {
            Days::Daily => (0, 6),
            Days::Range(a, b) => (u32::from(a), u32::from(b)),
        };
        let count = (to + 7 - from) % 7 + 1;
        (0..count).map(move |i| (from + i) % 7)
    }

    /// How long it stays open, in minutes.
    fn length(&self) -> u32 {
        if self.end > self.start {
            self.end - self.start
        } else {
            MINUTES_PER_DAY - self.start + self.end
        }
    }

    /// Minutes from `minute` (of the week) until this window next opens: 0 when it opens at
    /// that minute, `None` when it is open then (started before and not ended).
    fn wait_from(&self, minute: u32) -> Option<u32> {
        let mut wait = u32::MAX;
        for day in self.start_days() {
            let start = day * MINUTES_PER_DAY + self.start;
            let since = (minute + MINUTES_PER_WEEK - start) % MINUTES_PER_WEEK;
            if since < self.length() {
                return None;
            }
            wait = wait.min((start + MINUTES_PER_WEEK - minute) % MINUTES_PER_WEEK);
        }
        Some(wait)
    }
}

/// The minute of the week (Monday 00:00 UTC = 0) that `ms` falls in.
fn minute_of_week(ms: u64) -> u32 {
    let minutes = ms / MS_PER_MINUTE;
    // 1970-01-01 was a Thursday: three days after a Monday.
    ((minutes + 3 * u64::from(MINUTES_PER_DAY)) % u64::from(MINUTES_PER_WEEK)) as u32
}

/// True when a group with `windows` may take a slot at `now_ms`: no windows means always.
pub fn is_open(windows: &[Window], now_ms: u64) -> bool {
    next_open(windows, now_ms).is_none()
}

/// When the next of `windows` opens after `now_ms` (ms since the epoch, on a minute), or
/// `None` when one is open at `now_ms` or there are none (always open).
pub fn next_open(windows: &[Window], now_ms: u64) -> Option<u64> {
    let minute = minute_of_week(now_ms);
    let mut wait: Option<u32> = None;
    for w in windows {
        let this = w.wait_from(minute)?;
        wait = Some(wait.map_or(this, |m| m.min(this)));
    }
    let on_minute = now_ms - now_ms % MS_PER_MINUTE;
    wait.map(|m| on_minute.saturating_add(u64::from(m) * MS_PER_MINUTE))
}

/// `2026-11-28T02:00:00Z (in 1d7h3m)`: when, and how long from `now_ms`.
pub fn describe_opening(at_ms: u64, now_ms: u64) -> String {
    let when = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(at_ms));
    format!("{when} (in {})", in_minutes(at_ms.saturating_sub(now_ms)))
}

/// `3h12m`, rounded up to the minute (a window opens on a minute).
fn in_minutes(ms: u64) -> String {
    let minutes = ms.div_ceil(MS_PER_MINUTE);
    let (d, h, m) = (minutes / 1_440, minutes % 1_440 / 60, minutes % 60);
    match (d, h) {
        (0, 0) => format!("{m}m"),
        (0, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h{m}m"),
    }
}

/// Parses a group's windows, at most [`MAX_WINDOWS`].
pub fn parse_all<S: AsRef<str>>(texts: &[S]) -> Result<Vec<Window>, WindowError> {
    if texts.len() > MAX_WINDOWS {
        return Err(WindowError::TooMany);
    }
    texts.iter().map(|t| t.as_ref().parse()).collect()
}

fn parse_day(text: &str, whole: &str) -> Result<u8, WindowError> {
    DAY_NAMES
        .iter()
        .position(|d| d.eq_ignore_ascii_case(text))
        .map(|i| i as u8)
        .ok_or_else(|| WindowError::Day(whole.into(), text.into()))
}

fn parse_days(text: &str, whole: &str) -> Result<Days, WindowError> {
    if text.eq_ignore_ascii_case("daily") {
        return Ok(Days::Daily);
    }
    match text.split_once('-') {
        Some((a, b)) => Ok(Days::Range(parse_day(a, whole)?, parse_day(b, whole)?)),
        None => {
            let d = parse_day(text, whole)?;
            Ok(Days::Range(d, d))
        }
    }
}

/// `HH:MM` as minutes after midnight; `24:00` only where `end` allows it.
fn parse_time(text: &str, whole: &str, end: bool) -> Result<u32, WindowError> {
    let bad = || WindowError::Time(whole.into(), text.into());
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    let two_digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !two_digits(h) || !two_digits(m) {
        return Err(bad());
    }
    let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    match (h, m) {
        (24, 0) if end => Ok(MINUTES_PER_DAY),
        (0..=23, 0..=59) => Ok(h * 60 + m),
        _ => Err(bad()),
    }
}

impl std::str::FromStr for Window {
    type Err = WindowError;

    fn from_str(text: &str) -> Result<Self, WindowError> {
        if text.len() > MAX_WINDOW_LEN {
            return Err(WindowError::TooLong);
        }
        let parts: Vec<&str> = text.split_whitespace().collect();
        // The zone first: a window in local time must never be read as UTC. Two or three
        // words without `UTC` last are a window in some other zone (or none said).
        if parts.last() != Some(&"UTC") {
            return Err(match parts.len() {
                2 | 3 => WindowError::NotUtc(text.into()),
                _ => WindowError::Shape(text.into()),
            });
        }
        let [days, span, _utc] = parts[..] else {
            return Err(WindowError::Shape(text.into()));
        };
        let (from, to) = span
            .split_once('-')
            .ok_or_else(|| WindowError::Shape(text.into()))?;
        let window = Window {
            days: parse_days(days, text)?,
            start: parse_time(from, text, false)?,
            end: parse_time(to, text, true)?,
        };
        if window.start == window.end {
            return Err(WindowError::Empty(text.into()));
        }
        Ok(window)
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.days {
            Days::Daily => f.write_str("daily")?,
            Days::Range(a, b) if a == b => f.write_str(DAY_NAMES[usize::from(a)])?,
            Days::Range(a, b) => write!(
                f,
                "{}-{}",
                DAY_NAMES[usize::from(a)],
                DAY_NAMES[usize::from(b)]
            )?,
        }
        let hm = |m: u32| format!("{:02}:{:02}", m / 60, m % 60);
        write!(f, " {}-{} UTC", hm(self.start), hm(self.end))
    }
}

impl TryFrom<String> for Window {
    type Error = WindowError;

    fn try_from(text: String) -> Result<Self, WindowError> {
        text.parse()
    }
}

impl From<Window> for String {
    fn from(w: Window) -> String {
        w.to_string()
    }
}

#[cfg(test)]
mod tests;
