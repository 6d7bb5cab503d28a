//! docs/recipes.md's etcd 3.6/3.7 recipes (```yaml etcd-v3 blocks: one Butane config, one
//! cloud-config) must not rot: each parses, has the shape its tool expects, starts etcd with the
//! v3 discovery flags (and never the v2 `--discovery`/`ETCD_DISCOVERY`, which etcd 3.7 ignores),
//! defines every variable its unit uses, and the member it describes joins through a real
//! `muster-discovery` with those values.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use muster_tests::Discovery;
use muster_tests::v3_client::Joiner;
use yaml_rust2::{Yaml, YamlLoader};

/// etcd 3.6/3.7 flags these recipes may use (server/embed/config.go).
const KNOWN_FLAGS: &[&str] = &[
    "--name",
    "--data-dir",
    "--listen-peer-urls",
    "--initial-advertise-peer-urls",
    "--listen-client-urls",
    "--advertise-client-urls",
    "--discovery-token",
    "--discovery-endpoints",
    "--discovery-cacert",
];

/// A recipe: where it starts, its YAML, and its text.
struct Recipe {
    line: usize,
    body: String,
    doc: Yaml,
}

fn recipes() -> Vec<Recipe> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/recipes.md");
    let md = std::fs::read_to_string(&path).expect("docs/recipes.md");
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in md.lines().enumerate() {
        match open.take() {
            None if line.trim() == "```yaml etcd-v3" => open = Some((n + 1, String::new())),
            None => {}
            Some((start, body)) if line.trim() == "```" => {
                let docs = YamlLoader::load_from_str(&body)
                    .unwrap_or_else(|e| panic!("docs/recipes.md:{start}: invalid YAML: {e}"));
                assert_eq!(docs.len(), 1, "docs/recipes.md:{start}: one document");
                let doc = docs.into_iter().next().expect("one");
                out.push(Recipe {
                    line: start,
                    body,
                    doc,
                });
            }
            Some((start, mut body)) => {
                body.push_str(line);
                body.push('\n');
                open = Some((start, body));
            }
        }
    }
    assert!(open.is_none(), "docs/recipes.md: unclosed etcd-v3 block");
    out
}

/// `KEY=value` lines.
fn env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.trim().split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn by<'a>(list: &'a Yaml, key: &str, value: &str, at: &str) -> &'a Yaml {
    list.as_vec()
        .unwrap_or_else(|| panic!("{at}: expected a list"))
        .iter()
        .find(|i| i[key].as_str() == Some(value))
        .unwrap_or_else(|| panic!("{at}: no entry with {key}: {value}"))
}

/// The etcd flags of the unit's `ExecStart=`, after systemd substituted `${VAR}` from `env`.
fn etcd_flags(at: &str, unit: &str, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let exec = unit
        .lines()
        .find_map(|l| l.trim().strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("{at}: no ExecStart="));
    let mut expanded = String::new();
    let mut rest = exec;
    while let Some(i) = rest.find("${") {
        expanded.push_str(&rest[..i]);
        let (name, after) = rest[i + 2..]
            .split_once('}')
            .unwrap_or_else(|| panic!("{at}: unclosed ${{"));
        let value = env
            .get(name)
            .unwrap_or_else(|| panic!("{at}: ${{{name}}} is set by no EnvironmentFile"));
        expanded.push_str(value);
        rest = after;
    }
    expanded.push_str(rest);
    let words: Vec<&str> = expanded.split_whitespace().collect();
    let etcd = words
        .iter()
        .rposition(|w| w.ends_with("bin/etcd"))
        .unwrap_or_else(|| panic!("{at}: ExecStart= runs no etcd binary: {expanded}"));
    let mut flags = BTreeMap::new();
    for pair in words[etcd + 1..].chunks(2) {
        let [flag, value] = pair else {
            panic!("{at}: flag without a value: {pair:?}");
        };
        assert!(
            KNOWN_FLAGS.contains(flag),
            "{at}: {flag} is not an etcd 3.6/3.7 flag here"
        );
        flags.insert(flag.to_string(), value.to_string());
    }
    flags
}

/// Checks the v3 discovery flags and returns the member the recipe describes.
fn member(at: &str, body: &str, flags: &BTreeMap<String, String>) -> Joiner {
    assert!(
        !body.contains("ETCD_DISCOVERY="),
        "{at}: etcd 3.7 ignores ETCD_DISCOVERY"
    );
    let token = &flags["--discovery-token"];
    assert!(
        muster_shared::token::is_discovery_token(token),
        "{at}: {token} is not a muster-discovery token"
    );
    let endpoint = &flags["--discovery-endpoints"];
    let (scheme, authority) = endpoint.split_once("://").expect("scheme");
    assert!(
        matches!(scheme, "http" | "https") && !authority.contains('/'),
        "{at}: {endpoint}"
    );
    assert_eq!(
        flags["--listen-peer-urls"], flags["--initial-advertise-peer-urls"],
        "{at}: the member listens where it advertises"
    );
    Joiner {
        endpoints: vec![endpoint.clone()],
        tls: None,
        token: token.clone(),
        name: flags["--name"].clone(),
        peer_url: flags["--initial-advertise-peer-urls"].clone(),
        user: None,
    }
}

fn butane(r: &Recipe) -> Joiner {
    let at = format!("Butane config at docs/recipes.md:{}", r.line);
    assert_eq!(r.doc["variant"].as_str(), Some("flatcar"), "{at}");
    assert!(
        matches!(r.doc["version"].as_str(), Some("1.0.0" | "1.1.0")),
        "{at}: version"
    );
    let files = &r.doc["storage"]["files"];
    let discovery_env = by(files, "path", "/etc/etcd/discovery.env", &at)["contents"]["inline"]
        .as_str()
        .expect("inline");
    let unit = by(
        &r.doc["systemd"]["units"],
        "name",
        "etcd-member.service",
        &at,
    );
    assert_eq!(unit["enabled"].as_bool(), Some(true), "{at}");
    let unit = unit["contents"].as_str().expect("contents");
    assert!(
        unit.contains("EnvironmentFile=/run/metadata/flatcar"),
        "{at}"
    );
    assert!(
        unit.contains("EnvironmentFile=/etc/etcd/discovery.env"),
        "{at}"
    );
    assert!(
        unit.contains("Requires=docker.service coreos-metadata.service"),
        "{at}"
    );
    // What coreos-metadata writes on AWS, and the file the recipe writes.
    let mut env = env_lines("COREOS_EC2_HOSTNAME=ip-10-0-1-23\nCOREOS_EC2_IPV4_LOCAL=10.0.1.23");
    env.extend(env_lines(discovery_env));
    member(&at, &r.body, &etcd_flags(&at, unit, &env))
}

fn cloud_init(r: &Recipe) -> Joiner {
    let at = format!("cloud-config at docs/recipes.md:{}", r.line);
    let files = &r.doc["write_files"];
    let discovery_env = by(files, "path", "/etc/etcd/discovery.env", &at)["content"]
        .as_str()
        .expect("content");
    let unit = by(
        files,
        "path",
        "/etc/systemd/system/etcd-member.service",
        &at,
    )["content"]
        .as_str()
        .expect("unit");
    assert!(unit.contains("EnvironmentFile=/etc/etcd/host.env"), "{at}");
    let runcmd = r.doc["runcmd"].as_vec().expect("runcmd");
    let writes_host_env = runcmd.iter().filter_map(Yaml::as_str).any(|c| {
        c.contains("> /etc/etcd/host.env") && c.contains("HOST_NAME=") && c.contains("HOST_IPV4=")
    });
    assert!(
        writes_host_env,
        "{at}: runcmd must write HOST_NAME and HOST_IPV4"
    );
    assert!(
        runcmd
            .iter()
            .filter_map(Yaml::as_str)
            .any(|c| c.contains("enable --now etcd-member.service")),
        "{at}: runcmd must start the unit"
    );
    let mut env = env_lines("HOST_NAME=node-2\nHOST_IPV4=10.0.1.24");
    env.extend(env_lines(discovery_env));
    member(&at, &r.body, &etcd_flags(&at, unit, &env))
}

#[tokio::test]
async fn etcd_v3_recipes_parse_and_their_members_join_through_muster_discovery() {
    let all = recipes();
    assert_eq!(
        all.len(),
        2,
        "docs/recipes.md: one Butane and one cloud-config etcd-v3 recipe"
    );
    let flatcar = all
        .iter()
        .find(|r| !r.doc["variant"].is_badvalue())
        .expect("the Butane recipe");
    let cloud = all
        .iter()
        .find(|r| r.body.starts_with("#cloud-config\n"))
        .expect("the cloud-config recipe");
    let members = [butane(flatcar), cloud_init(cloud)];
    assert_eq!(
        members[0].token, members[1].token,
        "one token in both recipes"
    );

    // The recipes' token, names and peer URLs, against a real service standing in for
    // discovery.example.com: both members of a size-2 token join one cluster.
    let d = Discovery::start(&[]).await.expect("discovery");
    let endpoint = format!("http://{}", d.addr);
    let mut c = etcd_client::Client::connect([endpoint.as_str()], None)
        .await
        .expect("connect");
    c.put(
        format!("/_etcd/registry/{}/_config/size", members[0].token),
        "2",
        None,
    )
    .await
    .expect("size");
    let tasks: Vec<_> = members
        .into_iter()
        .map(|m| {
            let m = Joiner {
                endpoints: vec![endpoint.clone()],
                ..m
            };
            tokio::spawn(async move { m.join(Duration::from_secs(60)).await })
        })
        .collect();
    let mut clusters = Vec::new();
    for t in tasks {
        clusters.push(t.await.expect("task").expect("deadline").expect("joined"));
    }
    assert_eq!(clusters[0], clusters[1]);
    assert_eq!(
        clusters[0].split(',').count(),
        2,
        "the cluster holds both recipe members: {}",
        clusters[0]
    );
}
