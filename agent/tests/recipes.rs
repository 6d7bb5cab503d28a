//! docs/recipes.md must not rot. Every ```yaml block in it has to parse, and the Butane and
//! cloud-init recipes must have the shape their tools expect. Every systemd unit on the page
//! (the stand-alone ```ini block, and the units embedded in the YAML) must start `muster agent`
//! with flags that the agent's own flag parser and `config::resolve` accept, together with the
//! agent.toml that the same recipe writes.
//!
//! Why yaml-rust2: it is a maintained YAML 1.2 parser written in pure Rust. It loads a document
//! into a generic tree (`Yaml`), which is all that a shape check needs, so no serde types have to
//! be declared for Butane or cloud-init. serde_yaml_ng would also work, but it is built on
//! unsafe-libyaml (libyaml's C machine-translated to Rust), and its strength, typed
//! deserialization, is not needed here. The default `encoding` feature is off because the input
//! is always UTF-8.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use clap::{Args, FromArgMatches};
use muster_agent::config::{self, AgentFlags};
use yaml_rust2::{Yaml, YamlLoader};

/// A fenced code block: its info string (language), its text, and the line of its opening fence.
struct Block {
    lang: String,
    body: String,
    line: usize,
}

fn recipes_md() -> String {
    doc("recipes.md")
}

fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn fenced_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        let trimmed = line.trim();
        match open.take() {
            None => {
                if let Some(lang) = trimmed.strip_prefix("```") {
                    open = Some(Block {
                        lang: lang.trim().to_string(),
                        body: String::new(),
                        line: n + 1,
                    });
                }
            }
            Some(mut block) => {
                if trimmed == "```" {
                    blocks.push(block);
                } else {
                    block.body.push_str(line);
                    block.body.push('\n');
                    open = Some(block);
                }
            }
        }
    }
    if let Some(block) = open {
        panic!("docs/recipes.md:{}: code fence is never closed", block.line);
    }
    blocks
}

fn blocks(lang: &str) -> Vec<Block> {
    fenced_blocks(&recipes_md())
        .into_iter()
        .filter(|b| b.lang == lang)
        .collect()
}

fn parse_yaml(block: &Block) -> Yaml {
    let docs = YamlLoader::load_from_str(&block.body)
        .unwrap_or_else(|e| panic!("docs/recipes.md:{}: invalid YAML: {e}", block.line));
    assert_eq!(
        docs.len(),
        1,
        "docs/recipes.md:{}: expected exactly one YAML document",
        block.line
    );
    let doc = docs.into_iter().next().expect("one document");
    assert!(
        doc.as_hash().is_some(),
        "docs/recipes.md:{}: the top level must be a mapping",
        block.line
    );
    doc
}

/// The YAML blocks, parsed, with the one that `pick` selects. Exactly one must match.
fn the_yaml_recipe(what: &str, pick: impl Fn(&Block, &Yaml) -> bool) -> (Block, Yaml) {
    let mut found: Vec<(Block, Yaml)> = blocks("yaml")
        .into_iter()
        .map(|b| {
            let doc = parse_yaml(&b);
            (b, doc)
        })
        .filter(|(b, doc)| pick(b, doc))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "docs/recipes.md must hold exactly one {what}"
    );
    found.pop().expect("one recipe")
}

fn entry<'a>(at: &str, list: &'a Yaml, key: &str, value: &str) -> &'a Yaml {
    list.as_vec()
        .unwrap_or_else(|| panic!("{at}: expected a list"))
        .iter()
        .find(|item| item[key].as_str() == Some(value))
        .unwrap_or_else(|| panic!("{at}: no entry with {key}: {value}"))
}

fn text<'a>(at: &str, value: &'a Yaml, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{at}: {what} must be a string"))
}

/// The command line of the unit's single `ExecStart=`, with `\` continuations joined.
fn exec_start(at: &str, unit: &str) -> String {
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in unit.lines() {
        let line = line.trim_end();
        if let Some(continued) = line.strip_suffix('\\') {
            pending.push_str(continued);
            pending.push(' ');
        } else {
            pending.push_str(line);
            lines.push(std::mem::take(&mut pending));
        }
    }
    let starts: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix("ExecStart="))
        .collect();
    assert_eq!(starts.len(), 1, "{at}: expected exactly one ExecStart=");
    starts[0].to_string()
}

/// What systemd hands the process: `$$` becomes `$`, `%H` the host name, `%%` a `%`. A single
/// `$` would be expanded by systemd itself (an unset variable to ""), so it must not appear.
fn as_systemd_passes_it(at: &str, command: &str, hostname: &str) -> String {
    let mut out = String::new();
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            '$' => {
                assert_eq!(
                    chars.next(),
                    Some('$'),
                    "{at}: write `$$` in ExecStart= so that muster, not systemd, expands the variable"
                );
                out.push('$');
            }
            '%' => match chars.next() {
                Some('H') => out.push_str(hostname),
                Some('%') => out.push('%'),
                other => panic!("{at}: this test does not know the systemd specifier %{other:?}"),
            },
            c => out.push(c),
        }
    }
    out
}

/// Names referred to as `${NAME}` in `text`.
fn referenced_vars(text: &str) -> BTreeSet<String> {
    text.split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name.to_string()))
        .collect()
}

/// Checks that `unit` starts `muster agent` with flags that, together with `agent_toml`, resolve
/// to a working configuration. Returns the flags exactly as written in the unit.
fn check_agent_start(at: &str, unit: &str, agent_toml: &str) -> AgentFlags {
    let command = as_systemd_passes_it(at, &exec_start(at, unit), "node-1");
    let args: Vec<&str> = command.split_whitespace().collect();
    assert!(
        args.len() > 2 && args[0].starts_with('/') && args[0].ends_with("/muster"),
        "{at}: ExecStart= must run muster by absolute path: {command}"
    );
    assert_eq!(args[1], "agent", "{at}: ExecStart= must run `muster agent`");
    // clap takes the first argument as the program name; here that is "agent".
    let matches = AgentFlags::augment_args(clap::Command::new("agent"))
        .try_get_matches_from(&args[1..])
        .unwrap_or_else(|e| panic!("{at}: `muster agent` refuses these flags: {e}"));
    let written = AgentFlags::from_arg_matches(&matches)
        .unwrap_or_else(|e| panic!("{at}: `muster agent` refuses these flags: {e}"));

    // Stand-ins for the machine: an env file defining every variable the recipe uses (host name
    // variables as "node-1", the rest as an address), and the recipe's agent.toml. Flags win over
    // the file, so these override the paths in the recipe.
    let dir = tempfile::tempdir().expect("temp dir");
    let env_file = dir.path().join("metadata.env");
    let mut vars = referenced_vars(&command);
    vars.extend(referenced_vars(agent_toml));
    let env_text: String = vars
        .iter()
        .map(|v| {
            let value = if v.contains("NAME") {
                "node-1"
            } else {
                "10.0.0.1"
            };
            format!("{v}={value}\n")
        })
        .collect();
    std::fs::write(&env_file, env_text).expect("write env file");
    let toml_file = dir.path().join("agent.toml");
    std::fs::write(&toml_file, agent_toml).expect("write agent.toml");
    let mut flags = written.clone();
    flags.env_file = Some(env_file);
    flags.config = Some(toml_file);

    let resolved = config::resolve(&flags, &HashMap::new())
        .unwrap_or_else(|e| panic!("{at}: the agent refuses this configuration: {e}"));
    assert_eq!(resolved.name, "node-1", "{at}: --name");
    assert_eq!(resolved.advertise, "10.0.0.1:7000", "{at}: advertise");
    assert_eq!(resolved.listen.port(), 7000, "{at}: listen port");
    assert!(
        resolved
            .discovery
            .as_deref()
            .is_some_and(|url| url.starts_with("https://")),
        "{at}: agent.toml must carry an https:// discovery URL"
    );
    written
}

fn unit_line(at: &str, unit: &str, prefix: &str) -> String {
    unit.lines()
        .map(str::trim)
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("{at}: the unit has no {prefix} line"))
        .to_string()
}

#[test]
fn every_yaml_block_parses() {
    let yaml = blocks("yaml");
    assert!(
        yaml.len() >= 2,
        "docs/recipes.md should hold at least the Butane and the cloud-init recipe, found {} ```yaml blocks",
        yaml.len()
    );
    for block in &yaml {
        parse_yaml(block);
    }
}

#[test]
fn butane_recipe_is_a_flatcar_config_that_starts_the_agent() {
    let (block, doc) = the_yaml_recipe("Butane config (variant: flatcar)", |_, doc| {
        !doc["variant"].is_badvalue()
    });
    let at = format!("Butane config at docs/recipes.md:{}", block.line);
    assert_eq!(doc["variant"].as_str(), Some("flatcar"), "{at}: variant");
    let version = doc["version"].as_str();
    assert!(
        matches!(version, Some("1.0.0" | "1.1.0")),
        "{at}: version {version:?} is not a Flatcar Butane spec version"
    );

    let files = &doc["storage"]["files"];
    let binary = entry(&at, files, "path", "/opt/bin/muster");
    assert!(
        text(
            &at,
            &binary["contents"]["source"],
            "the binary's contents.source"
        )
        .starts_with("https://"),
        "{at}: fetch the binary over https"
    );
    let agent_toml = text(
        &at,
        &entry(&at, files, "path", "/etc/muster/agent.toml")["contents"]["inline"],
        "agent.toml contents.inline",
    );

    let unit_entry = entry(&at, &doc["systemd"]["units"], "name", "muster.service");
    assert_eq!(unit_entry["enabled"].as_bool(), Some(true), "{at}: enabled");
    let unit = text(&at, &unit_entry["contents"], "the unit's contents");
    assert_eq!(
        unit_line(&at, unit, "Requires="),
        "Requires=coreos-metadata.service",
        "{at}"
    );
    assert!(
        unit_line(&at, unit, "After=").contains("coreos-metadata.service"),
        "{at}: the unit must start after coreos-metadata.service"
    );
    let flags = check_agent_start(&at, unit, agent_toml);
    assert_eq!(
        flags.env_file.as_deref(),
        Some(Path::new("/run/metadata/flatcar")),
        "{at}: --env-file"
    );
}

#[test]
fn cloud_init_recipe_writes_the_config_and_starts_the_agent() {
    let (block, doc) = the_yaml_recipe("#cloud-config", |b, _| b.body.starts_with("#cloud-config"));
    let at = format!("cloud-config at docs/recipes.md:{}", block.line);
    assert!(
        block.body.starts_with("#cloud-config\n"),
        "{at}: cloud-init needs #cloud-config alone on the first line"
    );
    let files = &doc["write_files"];
    let agent_toml = text(
        &at,
        &entry(&at, files, "path", "/etc/muster/agent.toml")["content"],
        "agent.toml content",
    );
    let unit = text(
        &at,
        &entry(&at, files, "path", "/etc/systemd/system/muster.service")["content"],
        "the unit's content",
    );
    let runcmd: Vec<String> = doc["runcmd"]
        .as_vec()
        .unwrap_or_else(|| panic!("{at}: runcmd must be a list"))
        .iter()
        .map(|cmd| match cmd {
            Yaml::String(s) => s.clone(),
            Yaml::Array(words) => words
                .iter()
                .map(|w| w.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" "),
            other => panic!("{at}: unexpected runcmd entry {other:?}"),
        })
        .collect();
    assert!(
        runcmd
            .iter()
            .any(|c| c.trim() == "systemctl enable --now muster.service"),
        "{at}: runcmd must enable and start muster.service"
    );
    let flags = check_agent_start(&at, unit, agent_toml);
    let env_file = flags
        .env_file
        .unwrap_or_else(|| panic!("{at}: the unit must pass --env-file"));
    assert!(
        runcmd
            .iter()
            .any(|c| c.contains(&format!("> {}", env_file.display()))),
        "{at}: runcmd must write the env file {} that the unit reads",
        env_file.display()
    );
    for var in referenced_vars(&exec_start(&at, unit)) {
        assert!(
            runcmd.iter().any(|c| c.contains(&format!("{var}="))),
            "{at}: the unit uses ${{{var}}}, which runcmd never writes into the env file"
        );
    }
}

#[test]
fn standalone_unit_starts_the_agent_with_the_documented_agent_toml() {
    // The agent.toml of the discovery recipes (the static-bootstrap one has its own test).
    let tomls: Vec<Block> = blocks("toml")
        .into_iter()
        .filter(|b| b.body.contains("discovery"))
        .collect();
    assert_eq!(
        tomls.len(),
        1,
        "docs/recipes.md should hold exactly one ```toml block with the discovery URL (agent.toml)"
    );
    let units: Vec<Block> = blocks("ini")
        .into_iter()
        .filter(|b| b.body.contains("ExecStart="))
        .collect();
    assert!(
        !units.is_empty(),
        "docs/recipes.md should hold the systemd unit as an ```ini block"
    );
    for unit in &units {
        let at = format!("systemd unit at docs/recipes.md:{}", unit.line);
        check_agent_start(&at, &unit.body, &tomls[0].body);
        // The agent speaks systemd's notify protocol (READY=1 once it serves, WATCHDOG=1).
        assert_eq!(unit_line(&at, &unit.body, "Type="), "Type=notify", "{at}");
        assert!(unit_line(&at, &unit.body, "WatchdogSec=").len() > "WatchdogSec=".len());
        // Waiting for the cohort may take longer than systemd's default start timeout.
        assert_eq!(
            unit_line(&at, &unit.body, "TimeoutStartSec="),
            "TimeoutStartSec=infinity",
            "{at}"
        );
    }
}

#[test]
fn static_bootstrap_recipe_resolves_on_each_of_its_machines() {
    let toml = blocks("toml")
        .into_iter()
        .find(|b| b.body.contains("initial_cluster"))
        .expect("docs/recipes.md holds the static-bootstrap agent.toml");
    let list = toml
        .body
        .lines()
        .find_map(|l| l.strip_prefix("initial_cluster = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("initial_cluster = \"…\"")
        .to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = dir.path().join("join-secret");
    std::fs::write(
        &secret,
        muster_shared::token::JoinSecret::generate().reveal(),
    )
    .expect("secret");
    // As the recipe's `umask 077` makes it: the agent refuses a secret others can read.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    for entry in list.split(',') {
        let (name, addr) = entry.split_once('=').expect("NAME=HOST:PORT");
        let ip = addr.split(':').next().expect("host");
        // Each machine: its own env file, the same agent.toml (paths pointed at the temp dir).
        let env = dir.path().join(format!("{name}.env"));
        std::fs::write(&env, format!("MUSTER_NAME={name}\nMUSTER_IP={ip}\n")).expect("env");
        let body = toml
            .body
            .replace("/etc/muster/join-secret", &secret.display().to_string())
            .replace("/etc/muster/host.env", &env.display().to_string());
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, body).expect("toml");
        let flags = AgentFlags {
            config: Some(file),
            ..Default::default()
        };
        let resolved = config::resolve(&flags, &HashMap::new())
            .unwrap_or_else(|e| panic!("docs/recipes.md:{} on {name}: {e}", toml.line));
        assert_eq!(resolved.name, name);
        assert_eq!(resolved.initial_cluster.len(), 3, "{name}");
        assert!(resolved.join_secret.is_some(), "{name}");
    }
}

#[test]
fn the_test_catches_a_broken_recipe() {
    // The checks above must be able to fail: a unit whose `${…}` systemd would expand, and flags
    // the agent does not know.
    // Each must fail for its own reason, not for any reason.
    let toml = "discovery = \"https://discovery.example.com/x\"\n";
    for (unit, why) in [
        (
            "[Service]\nExecStart=/opt/bin/muster agent --name %H --advertise ${IP}:7000\n",
            "write `$$` in ExecStart=",
        ),
        (
            "[Service]\nExecStart=/opt/bin/muster agent --name %H --advertize 10.0.0.1:7000\n",
            "`muster agent` refuses these flags",
        ),
    ] {
        let unit = unit.to_string();
        let toml = toml.to_string();
        let outcome = std::panic::catch_unwind(move || check_agent_start("broken", &unit, &toml));
        let panic = outcome.expect_err("a broken unit passed the check");
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(not a text panic)");
        assert!(
            message.contains("broken: ") && message.contains(why),
            "refused for another reason than {why:?}: {message}"
        );
    }
    let e = YamlLoader::load_from_str("a: [1, 2\n").expect_err("an unclosed flow sequence");
    assert!(e.to_string().contains("expected ',' or ']'"), "{e}");
}

/// The autoscaling recipe in docs/membership.md is cloud-config too: it must parse, and write the
/// drop-in that hands the fetched token to the agent.
#[test]
fn membership_autoscaling_recipe_parses() {
    let yaml: Vec<Block> = fenced_blocks(&doc("membership.md"))
        .into_iter()
        .filter(|b| b.lang == "yaml")
        .collect();
    assert_eq!(yaml.len(), 1, "docs/membership.md holds one ```yaml block");
    let docs = YamlLoader::load_from_str(&yaml[0].body)
        .unwrap_or_else(|e| panic!("docs/membership.md:{}: invalid YAML: {e}", yaml[0].line));
    let files = docs[0]["write_files"]
        .as_vec()
        .expect("write_files is a list");
    let file = |path: &str| {
        files
            .iter()
            .find(|f| f["path"].as_str() == Some(path))
            .and_then(|f| f["content"].as_str())
            .unwrap_or_else(|| panic!("docs/membership.md writes {path}"))
            .to_string()
    };
    // The agent's config names the discovery URL and the secret file the fetch unit writes.
    let config: toml::Table = toml::from_str(&file("/etc/muster/agent.toml"))
        .unwrap_or_else(|e| panic!("agent.toml in docs/membership.md: {e}"));
    let secret_file = config["join_secret_file"]
        .as_str()
        .expect("join_secret_file");
    assert!(
        config["discovery"]
            .as_str()
            .is_some_and(|u| u.starts_with("https://"))
    );
    let fetch = file("/etc/systemd/system/muster-secret.service");
    assert!(
        fetch.contains(&format!("> {secret_file}")) && fetch.contains("umask 077"),
        "the fetch unit writes the secret file privately: {fetch}"
    );
    let dropin = file("/etc/systemd/system/muster.service.d/secret.conf");
    assert!(
        dropin.contains("Requires=muster-secret.service"),
        "{dropin}"
    );
}
