use clap::CommandFactory;

use super::*;
use crate::config;

/// Every subcommand, depth first, with its path (`muster node remove`).
fn commands() -> Vec<(String, clap::Command)> {
    fn walk(path: &str, command: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
        let path = format!("{path} {}", command.get_name()).trim().to_string();
        out.push((path.clone(), command.clone()));
        for sub in command.get_subcommands() {
            walk(&path, sub, out);
        }
    }
    let mut out = Vec::new();
    walk("", &Cli::command(), &mut out);
    out
}

#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn every_positional_argument_is_described() {
    let mut missing = Vec::new();
    for (path, command) in commands() {
        for arg in command.get_positionals() {
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} <{}>", arg.get_id()));
            }
        }
    }
    assert!(missing.is_empty(), "undescribed: {missing:?}");
}

#[test]
fn agent_flags_are_grouped_under_the_seven_headings_in_order() {
    let headings = [
        config::HELP_START,
        config::HELP_NETWORK,
        config::HELP_ROLES,
        config::HELP_TIMING,
        config::HELP_TLS,
        config::HELP_OBSERVABILITY,
        config::HELP_SNAPSHOTS,
    ];
    let mut agent = Cli::command()
        .find_subcommand("agent")
        .expect("agent")
        .clone();
    let ungrouped: Vec<String> = agent
        .get_arguments()
        .filter(|a| a.get_long().is_some() && !["help", "version"].contains(&a.get_id().as_str()))
        .filter(|a| a.get_help_heading().is_none())
        .map(|a| a.get_id().to_string())
        .collect();
    assert!(
        ungrouped.is_empty(),
        "flags without a heading: {ungrouped:?}"
    );
    let help = agent.render_help().to_string();
    let at: Vec<usize> = headings
        .iter()
        .map(|h| {
            help.find(&format!("{h}:"))
                .unwrap_or_else(|| panic!("{h:?} in agent --help:\n{help}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "in order: {help}");
}

#[test]
fn restore_help_lists_only_what_restore_reads() {
    let mut restore = Cli::command()
        .find_subcommand("restore")
        .expect("restore")
        .clone();
    let help = restore.render_long_help().to_string();
    for unread in [
        "--discovery",
        "--join ",
        "--token",
        "--init ",
        "--initial-cluster",
        "--join-secret-file",
        "--join-secret-ttl",
        "--ca-pin",
        "--allow-address-change",
    ] {
        assert!(
            !help.contains(unread),
            "{unread} in restore --help:\n{help}"
        );
    }
    for read in [
        "--name",
        "--advertise",
        "--data-dir",
        "--allow-retired-ca",
        "--metrics-listen",
    ] {
        assert!(help.contains(read), "{read} missing from restore --help");
    }
}

#[test]
fn no_rust_range_syntax_in_help() {
    for (path, mut command) in commands() {
        let help = command.render_long_help().to_string();
        assert!(!help.contains("..="), "{path} --help says `..=`:\n{help}");
    }
}
