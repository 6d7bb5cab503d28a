use super::*;

/// Milliseconds since the epoch of `2026-11-28T02:00` (UTC; 2026-11-28 is a Saturday).
fn at(text: &str) -> u64 {
    let t = humantime::parse_rfc3339(&format!("{text}:00Z")).expect("test instant");
    t.duration_since(UNIX_EPOCH)
        .expect("after epoch")
        .as_millis() as u64
}

fn windows(texts: &[&str]) -> Vec<Window> {
    parse_all(texts).expect("valid windows")
}

#[test]
fn windows_parse_and_display_round_trips() {
    for (text, shown) in [
        ("Sat 02:00-06:00 UTC", "Sat 02:00-06:00 UTC"),
        ("sat 02:00-06:00 UTC", "Sat 02:00-06:00 UTC"),
        ("Mon-Fri 22:00-02:00 UTC", "Mon-Fri 22:00-02:00 UTC"),
        ("Fri-Mon 00:00-24:00 UTC", "Fri-Mon 00:00-24:00 UTC"),
        ("daily 02:00-04:00 UTC", "daily 02:00-04:00 UTC"),
        ("DAILY  02:00-04:00   UTC", "daily 02:00-04:00 UTC"),
        ("Sun 23:30-00:15 UTC", "Sun 23:30-00:15 UTC"),
    ] {
        let w: Window = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(w.to_string(), shown, "{text}");
        assert_eq!(shown.parse::<Window>(), Ok(w), "{shown} round-trips");
        let json = serde_json::to_string(&w).expect("serialize");
        assert_eq!(json, format!("{shown:?}"));
        assert_eq!(serde_json::from_str::<Window>(&json).expect("decode"), w);
    }
}

#[test]
fn bad_windows_are_refused_with_what_is_wrong() {
    let long = format!("Sat 02:00-06:00 UTC{}", " ".repeat(60));
    for (text, want) in [
        ("Sat 02:00-06:00", "UTC only"),
        ("Sat 02:00-06:00 CET", "UTC only"),
        ("Sat 02:00-06:00 utc", "UTC only"),
        ("Sat 02:00-06:00 +02:00", "UTC only"),
        ("", "expected DAYS"),
        ("Sat 02:00 - 06:00 UTC", "expected DAYS"),
        ("Sat 02:00/06:00 UTC", "expected DAYS"),
        ("Saturday 02:00-06:00 UTC", "not a weekday"),
        ("Mon-Funday 02:00-06:00 UTC", "not a weekday"),
        ("Sat 2:00-06:00 UTC", "not a time"),
        ("Sat 24:00-06:00 UTC", "not a time"),
        ("Sat 02:60-06:00 UTC", "not a time"),
        ("Sat 02:00-24:01 UTC", "not a time"),
        ("Sat 02:00-02:00 UTC", "same time"),
        (long.as_str(), "at most 64"),
    ] {
        let err = text.parse::<Window>().expect_err(text).to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
    let many = vec!["daily 02:00-04:00 UTC"; MAX_WINDOWS + 1];
    assert_eq!(parse_all(&many), Err(WindowError::TooMany));
    assert!(serde_json::from_str::<Window>("\"Sat 02:00-06:00 CET\"").is_err());
}

#[test]
fn open_and_next_opening_at_the_edges() {
    let sat = windows(&["Sat 02:00-06:00 UTC"]);
    let night = windows(&["Mon-Fri 22:00-02:00 UTC"]);
    let sunday_night = windows(&["Sun 23:00-01:30 UTC"]);
    let several = windows(&["Tue 10:00-11:00 UTC", "Sat 02:00-06:00 UTC"]);
    let daily = windows(&["daily 02:00-04:00 UTC"]);
    // (what, windows, now, next opening: None when open)
    let cases: Vec<(&str, &[Window], &str, Option<&str>)> = vec![
        ("no windows: always open", &[], "2026-11-26T18:00", None),
        ("at the start: open", &sat, "2026-11-28T02:00", None),
        ("inside", &sat, "2026-11-28T05:59", None),
        (
            "at the end: closed",
            &sat,
            "2026-11-28T06:00",
            Some("2026-12-05T02:00"),
        ),
        (
            "a minute before",
            &sat,
            "2026-11-28T01:59",
            Some("2026-11-28T02:00"),
        ),
        (
            "Thursday",
            &sat,
            "2026-11-26T18:00",
            Some("2026-11-28T02:00"),
        ),
        ("after midnight, Friday's", &night, "2026-11-28T01:00", None),
        (
            "Saturday night: closed",
            &night,
            "2026-11-28T22:00",
            Some("2026-11-30T22:00"),
        ),
        (
            "Sunday after midnight",
            &night,
            "2026-11-29T01:00",
            Some("2026-11-30T22:00"),
        ),
        (
            "Monday after midnight",
            &night,
            "2026-11-30T01:00",
            Some("2026-11-30T22:00"),
        ),
        (
            "Sunday into Monday",
            &sunday_night,
            "2026-11-30T01:00",
            None,
        ),
        (
            "Sunday, at the start",
            &sunday_night,
            "2026-11-29T23:00",
            None,
        ),
        (
            "Monday, at the end",
            &sunday_night,
            "2026-11-30T01:30",
            Some("2026-12-06T23:00"),
        ),
        (
            "the nearer of several",
            &several,
            "2026-11-30T12:00",
            Some("2026-12-01T10:00"),
        ),
        ("the other of several", &several, "2026-11-28T03:00", None),
        (
            "after the last of the week",
            &several,
            "2026-11-28T06:00",
            Some("2026-12-01T10:00"),
        ),
        (
            "daily, before",
            &daily,
            "2026-11-26T01:00",
            Some("2026-11-26T02:00"),
        ),
        (
            "daily, after",
            &daily,
            "2026-11-26T04:00",
            Some("2026-11-27T02:00"),
        ),
    ];
    for (what, ws, now, want) in cases {
        let got = next_open(ws, at(now));
        assert_eq!(got, want.map(at), "{what}");
        assert_eq!(is_open(ws, at(now)), want.is_none(), "{what}");
    }
}

#[test]
fn openings_are_on_the_minute_and_described_in_utc() {
    let sat = windows(&["Sat 02:00-06:00 UTC"]);
    let now = at("2026-11-27T22:47") + 30_000;
    assert_eq!(next_open(&sat, now), Some(at("2026-11-28T02:00")));
    assert_eq!(
        describe_opening(at("2026-11-28T02:00"), at("2026-11-27T22:48")),
        "2026-11-28T02:00:00Z (in 3h12m)"
    );
    assert_eq!(
        describe_opening(at("2026-11-28T02:00"), at("2026-11-26T18:00")),
        "2026-11-28T02:00:00Z (in 1d8h0m)"
    );
    assert_eq!(in_minutes(30_000), "1m");
}
