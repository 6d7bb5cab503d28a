//! Unit tests of `discovery`.

use super::*;

#[test]
fn redacted_urls_keep_the_service_and_a_token_prefix() {
    let cases = [
        (
            "https://d.example.com/0123456789abcdef",
            "https://d.example.com/0123…",
        ),
        ("http://10.0.0.1:8087/abcdef", "http://10.0.0.1:8087/abcd…"),
        ("http://10.0.0.1:8087/", "http://10.0.0.1:8087/"),
    ];
    for (url, shown) in cases {
        assert_eq!(redact(url), shown);
    }
}

#[test]
fn cohort_is_the_first_size_registrations() {
    let reg = |i: u64| Registration {
        id: format!("{i:x}"),
        name: format!("n{i}"),
        addr: "h:1".into(),
        created_index: i,
    };
    let listing = Listing {
        size: 3,
        members: (2..7).map(reg).collect(),
        index: 6,
    };
    let ids: Vec<&str> = listing.cohort().iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, vec!["2", "3", "4"]);
}
