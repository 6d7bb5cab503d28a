//! Tests of the `serve` flags: the embedded defaults match the parsed ones, and the default
//! data directory follows the platform convention.

use super::data_dir::data_dir_for;
use super::*;

#[test]
fn embedded_defaults_are_the_flag_defaults() {
    let parsed = Cli::try_parse_from([
        "muster-discovery",
        "serve",
        "--listen",
        "127.0.0.1:9",
        "--data-dir",
        "/tmp/x",
    ])
    .expect("defaults parse");
    let Command::Serve(parsed) = parsed.command;
    let embedded = ServeConfig::embedded("127.0.0.1:9".parse().expect("addr"), "/tmp/x".into());
    // Debug covers every field, so a new flag whose default differs fails here.
    assert_eq!(format!("{parsed:?}"), format!("{embedded:?}"));
}

#[test]
fn default_data_dir_follows_the_platform_convention() {
    let os = |s: &str| Some(std::ffi::OsString::from(s));
    let cases = [
        (
            true,
            os("/x/state"),
            os("/home/u"),
            "/var/lib/muster-discovery",
        ),
        (
            false,
            os("/x/state"),
            os("/home/u"),
            "/x/state/muster-discovery",
        ),
        (
            false,
            None,
            os("/home/u"),
            "/home/u/.local/state/muster-discovery",
        ),
        (
            false,
            os("relative"),
            os("/home/u"),
            "/home/u/.local/state/muster-discovery",
        ),
        (false, None, None, "/var/lib/muster-discovery"),
    ];
    for (root, xdg, home, want) in cases {
        assert_eq!(data_dir_for(root, xdg, home), PathBuf::from(want));
    }
}
