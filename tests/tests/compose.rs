//! compose/: the FROM-scratch image, one discovery service and three agents that share one
//! configuration form a single cluster through a discovery URL minted on the published port.
//!
//! Runs the steps of compose/README.md under a unique compose project name and a random host
//! port, and always runs `down -v` for that project (drop guard), pass or fail.
//!
//! Without Docker (a daemon that answers `docker info`, and a compose CLI) this test fails,
//! unless `MUSTER_ALLOW_SKIP` names `docker` (e.g. `MUSTER_ALLOW_SKIP=docker,etcd`): then it prints
//! a loud SKIPPED notice and passes. A truthy `MUSTER_REQUIRE_DOCKER` (`1`, `true`, `yes`, `on`)
//! makes it a failure even then. The image is built by compose/build.sh with the debug profile (incremental,
//! much faster than release on small machines); `MUSTER_COMPOSE_PROFILE=release` tests the
//! release build operators get.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::{free_port, get, missing_prerequisite, poll_until, tail};
use serde_json::Value;
use tokio::process::Command;

const AGENTS: [&str; 3] = ["agent1", "agent2", "agent3"];
const FORMATION_DEADLINE: Duration = Duration::from_secs(180);
/// How long compose/build.sh may take (a cold debug build of the agent in a builder image).
const BUILD_TIMEOUT: Duration = Duration::from_secs(40 * 60);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// How long a quick Docker command (`docker info`, `compose version`, `inspect`, `logs`, `rmi`)
/// may take: a wedged daemon fails the test instead of hanging it.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `compose down -v` may take (it stops containers with `-t 5`).
const DOWN_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `command` to its end, or kills it after `timeout`; its output, or why there is none.
fn output_within(
    mut command: std::process::Command,
    timeout: Duration,
) -> Result<std::process::Output> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {command:?}"))?;
    // Drain both pipes on threads, so that a chatty command never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{command:?} did not finish within {timeout:?}");
        }
        // The poll interval of this deadline loop.
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// `docker compose` (v2 plugin) or `docker-compose` (v1), whichever works here.
fn compose_cli() -> Option<Vec<String>> {
    let works = |program: &str, args: &[&str]| {
        let mut command = std::process::Command::new(program);
        command.args(args);
        output_within(command, DOCKER_TIMEOUT).is_ok_and(|o| o.status.success())
    };
    if works("docker", &["compose", "version"]) {
        Some(vec!["docker".into(), "compose".into()])
    } else if works("docker-compose", &["version"]) {
        Some(vec!["docker-compose".into()])
    } else {
        None
    }
}

/// Docker and a compose CLI. Without them the test fails (panics), unless `MUSTER_ALLOW_SKIP`
/// names `docker` (and `MUSTER_REQUIRE_DOCKER` is not truthy): then a loud skip, `None`.
fn docker_or_skip(test: &str) -> Option<Vec<String>> {
    let mut info = std::process::Command::new("docker");
    info.arg("info");
    let daemon = output_within(info, DOCKER_TIMEOUT);
    let daemon_works = daemon.as_ref().is_ok_and(|o| o.status.success());
    let cli = if daemon_works { compose_cli() } else { None };
    if cli.is_none() {
        let why = match &daemon {
            Ok(o) if o.status.success() => {
                "neither `docker compose` nor `docker-compose` works".to_string()
            }
            Ok(o) => format!(
                "`docker info` fails (no access to a Docker daemon?): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("`docker info` cannot run (no Docker?): {e:#}"),
        };
        missing_prerequisite(
            test,
            "docker",
            "MUSTER_REQUIRE_DOCKER",
            &why,
            "install Docker with the compose plugin and start its daemon",
        );
    }
    cli
}

/// One compose project of this test run. Dropping it removes its containers, network, volumes
/// and image tag — and nothing else.
struct Project {
    cli: Vec<String>,
    name: String,
    file: PathBuf,
    image: String,
    port: u16,
    discovery_url: Option<String>,
    /// More images the file names: (its variable, this run's tag).
    extra_images: Vec<(&'static str, String)>,
}

impl Project {
    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = self.cli[1..].to_vec();
        args.extend([
            "-p".into(),
            self.name.clone(),
            "-f".into(),
            self.file.display().to_string(),
        ]);
        args
    }

    fn envs(&self) -> Vec<(&'static str, String)> {
        let mut envs = self.extra_images.clone();
        envs.extend([
            ("MUSTER_IMAGE", self.image.clone()),
            ("MUSTER_DISCOVERY_PORT", self.port.to_string()),
            (
                "MUSTER_DISCOVERY_URL",
                self.discovery_url.clone().unwrap_or_default(),
            ),
        ]);
        envs
    }

    /// Runs `compose -p NAME -f FILE <args>`; returns stdout, or fails with stderr.
    async fn run(&self, args: &[&str], timeout: Duration) -> Result<String> {
        let mut cmd = Command::new(&self.cli[0]);
        cmd.args(self.args())
            .args(args)
            .envs(self.envs())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(timeout, cmd.output())
            .await
            .with_context(|| format!("compose {args:?} did not finish within {timeout:?}"))?
            .with_context(|| format!("running compose {args:?}"))?;
        if !out.status.success() {
            bail!(
                "compose {args:?} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `muster status --json` inside `service`, parsed.
    async fn status(&self, service: &str) -> Result<Value> {
        let out = self
            .run(
                &[
                    "exec",
                    "-T",
                    service,
                    "/muster",
                    "status",
                    "--data-dir",
                    "/data",
                    "--json",
                ],
                Duration::from_secs(30),
            )
            .await?;
        serde_json::from_str(&out).with_context(|| format!("{service}: status is not JSON: {out}"))
    }

    /// How often Docker restarted `service`'s container (a crash under `restart: on-failure`).
    async fn restarts(&self, service: &str) -> Result<(u64, String)> {
        let id = self
            .run(&["ps", "-q", service], Duration::from_secs(30))
            .await?
            .trim()
            .to_string();
        if id.is_empty() {
            bail!("{service} has no container");
        }
        let inspect = Command::new("docker")
            .args([
                "inspect",
                "-f",
                "{{.RestartCount}} {{.State.Status}}",
                id.as_str(),
            ])
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(DOCKER_TIMEOUT, inspect)
            .await
            .with_context(|| {
                format!("docker inspect {id} did not finish within {DOCKER_TIMEOUT:?}")
            })??;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let (count, state) = text
            .split_once(' ')
            .with_context(|| format!("docker inspect {id}: {text:?}"))?;
        Ok((count.parse()?, state.to_string()))
    }

    fn logs_blocking(&self) -> String {
        let mut logs = std::process::Command::new(&self.cli[0]);
        logs.args(self.args())
            .args(["logs", "--no-color", "--tail", "80"])
            .envs(self.envs());
        output_within(logs, DOCKER_TIMEOUT)
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_else(|e| format!("(compose logs failed: {e:#})"))
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "\n--- compose logs of project {} ---\n{}\n--- end of logs ---\n",
                self.name,
                self.logs_blocking()
            );
        }
        let mut down = std::process::Command::new(&self.cli[0]);
        down.args(self.args())
            .args(["down", "-v", "--remove-orphans", "-t", "5"])
            .envs(self.envs());
        match output_within(down, DOWN_TIMEOUT) {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "compose down -v for project {} failed: {}",
                self.name,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("compose down -v for project {}: {e:#}", self.name),
        }
        // Only this run's tags; layers shared with other tags stay.
        let images = std::iter::once(&self.image).chain(self.extra_images.iter().map(|(_, t)| t));
        for image in images {
            let mut rmi = std::process::Command::new("docker");
            rmi.args(["rmi", image.as_str()]);
            let _ = output_within(rmi, DOCKER_TIMEOUT);
        }
    }
}

/// Runs compose/build.sh (output streamed) with this run's image tag.
async fn build_image(image: &str) -> Result<()> {
    build_with("compose/build.sh", image, &[]).await
}

/// Runs `script` (output streamed) with this run's image tags.
async fn build_with(script: &str, image: &str, extra: &[(&str, String)]) -> Result<()> {
    let script = workspace_root().join(script);
    let profile = std::env::var("MUSTER_COMPOSE_PROFILE").unwrap_or_else(|_| "dev".into());
    eprintln!(
        "compose test: {} (profile {profile}, image {image})",
        script.display()
    );
    let build = Command::new("bash")
        .arg(&script)
        .env("MUSTER_PROFILE", &profile)
        .env("MUSTER_IMAGE", image)
        .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .status();
    let status = tokio::time::timeout(BUILD_TIMEOUT, build)
        .await
        .with_context(|| {
            format!(
                "{} did not finish within {BUILD_TIMEOUT:?}",
                script.display()
            )
        })?
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(())
}

/// `Some(summary)` once `status` shows 3 members, all voters, and a leader among them.
fn formed(status: &Value) -> Option<String> {
    let members = status["members"].as_array()?;
    let leader = status["leader"].as_str()?;
    let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
    let leader_is_member = members.iter().any(|m| m["name"] == leader);
    (members.len() == 3 && voters == 3 && leader_is_member).then(|| leader.to_string())
}

fn summary(status: &Value) -> String {
    let members: Vec<String> = status["members"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| format!("{}={}", m["name"], m["suffrage"]))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "leader {} term {} members [{}]",
        status["leader"],
        status["term"],
        members.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_discovery_and_three_agents_form_one_cluster() {
    let test = "compose_discovery_and_three_agents_form_one_cluster";
    let Some(cli) = docker_or_skip(test) else {
        return;
    };
    let started = Instant::now();
    let pid = std::process::id();
    let image = format!("muster-test:{pid}");
    build_image(&image).await.expect("building the image");
    let built = started.elapsed();

    let mut project = Project {
        cli,
        name: format!("muster-test-{pid}"),
        file: workspace_root().join("compose/docker-compose.yml"),
        image,
        port: free_port(),
        discovery_url: None,
        extra_images: Vec::new(),
    };

    // 1. The discovery service alone.
    project
        .run(&["up", "-d", "discovery"], Duration::from_secs(120))
        .await
        .expect("compose up -d discovery");

    // 2. Mint a size-3 URL on the published loopback port.
    let new = format!("http://127.0.0.1:{}/new?size=3", project.port);
    // Polled every 200 ms until the deadline.
    let url = poll_until(
        "the published discovery port to mint a URL",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let new = new.clone();
            async move {
                get(&new)
                    .await
                    .ok()
                    .filter(|r| r.status == 200)
                    .map(|r| r.body)
            }
        },
    )
    .await
    .expect("minting a discovery URL");
    let token = url
        .strip_prefix("http://discovery:8087/")
        .unwrap_or_else(|| panic!("URL {url:?} does not use MUSTER_DISCOVERY_PUBLIC_URL"));
    assert!(
        token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "token {token:?} is not 32 hex chars"
    );
    eprintln!("compose test: minted {url}");
    project.discovery_url = Some(url);

    // 3. The agents, all with that URL.
    project
        .run(&["up", "-d"], Duration::from_secs(120))
        .await
        .expect("compose up -d (agents)");

    // 4. agent1 sees 3 members, 3 voters and a leader.
    let last = Arc::new(Mutex::new(String::from("no answer yet")));
    // Polled every 500 ms (each check is a `compose exec`) until the deadline.
    let formation = poll_until(
        "3 members, 3 voters and a leader in agent1's status",
        FORMATION_DEADLINE,
        Duration::from_millis(500),
        || {
            let project = &project;
            let last = last.clone();
            async move {
                let seen = project.status("agent1").await;
                let done = seen.as_ref().ok().and_then(formed);
                if let Ok(mut l) = last.lock() {
                    *l = match &seen {
                        Ok(s) => summary(s),
                        Err(e) => format!("{e:#}"),
                    };
                }
                done
            }
        },
    )
    .await;
    let last_seen = last.lock().map(|l| l.clone()).unwrap_or_default();
    let leader = formation.unwrap_or_else(|e| panic!("{e:#}; agent1 last said: {last_seen}"));
    let formed_after = started.elapsed() - built;
    eprintln!("compose test: formed, leader {leader} ({formed_after:?} after the build)");

    // 5. Every agent reports the same cluster, the same leader and the same members, named and
    //    addressed after its hostname (the shared config's ${HOSTNAME}).
    let mut cluster_ids = BTreeSet::new();
    let p = &project;
    for service in AGENTS {
        // Followers learn the leader and the final configuration a moment later.
        // Polled every 300 ms until the deadline.
        let status = poll_until(
            &format!("{service} to report the formed cluster"),
            Duration::from_secs(30),
            Duration::from_millis(300),
            || async move { p.status(service).await.ok().filter(|s| formed(s).is_some()) },
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(status["self"], service, "{service}: wrong node name");
        assert_eq!(
            status["leader"],
            leader,
            "{service} names another leader: {}",
            summary(&status)
        );
        let cluster_id = status["cluster_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            !cluster_id.is_empty(),
            "{service}: no cluster_id in {status}"
        );
        cluster_ids.insert(cluster_id);
        let members: BTreeSet<(String, String)> = status["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m["name"].as_str().unwrap_or_default().to_string(),
                    m["address"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let expected: BTreeSet<(String, String)> = AGENTS
            .iter()
            .map(|a| (a.to_string(), format!("{a}:7000")))
            .collect();
        assert_eq!(members, expected, "{service}: members");
    }
    assert_eq!(
        cluster_ids.len(),
        1,
        "the agents report different clusters: {cluster_ids:?}"
    );

    // 6. Nobody got there by crashing and being restarted by Docker.
    for service in AGENTS {
        let (restarts, state) = project.restarts(service).await.expect("docker inspect");
        assert_eq!(state, "running", "{service} is {state}");
        assert_eq!(restarts, 0, "{service} was restarted {restarts} times");
    }

    eprintln!(
        "compose test: passed in {:?} (build {built:?}); logs of agent1:\n{}",
        started.elapsed(),
        tail(
            &project
                .run(&["logs", "--no-color", "agent1"], Duration::from_secs(30))
                .await
                .unwrap_or_default(),
            12
        )
    );
    drop(project);
}

/// compose/ha: three muster-discovery replicas on a 3-member etcd behind haproxy (all FROM
/// scratch, nothing pulled). A URL minted through the balancer forms three agents while one
/// replica and one etcd member are killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_replicas_on_etcd_behind_haproxy_form_one_cluster() {
    let test = "compose_replicas_on_etcd_behind_haproxy_form_one_cluster";
    let Some(cli) = docker_or_skip(test) else {
        return;
    };
    let pid = std::process::id();
    let image = format!("muster-test-ha:{pid}");
    let extra = vec![
        ("MUSTER_ETCD_IMAGE", format!("muster-etcd-test:{pid}")),
        ("MUSTER_HAPROXY_IMAGE", format!("muster-haproxy-test:{pid}")),
    ];
    build_with("compose/ha/build.sh", &image, &extra)
        .await
        .expect("building the images");
    let mut project = Project {
        cli,
        name: format!("muster-test-ha-{pid}"),
        file: workspace_root().join("compose/ha/docker-compose.yml"),
        image,
        port: free_port(),
        discovery_url: None,
        extra_images: extra,
    };
    project
        .run(&["up", "-d", "lb"], Duration::from_secs(180))
        .await
        .expect("compose up -d lb");
    let new = format!("http://127.0.0.1:{}/new?size=3", project.port);
    // Polled every 300 ms: etcd forms, the replicas connect, the balancer sees them healthy.
    let url = poll_until(
        "the balancer to mint a URL",
        Duration::from_secs(120),
        Duration::from_millis(300),
        || {
            let new = new.clone();
            async move {
                get(&new)
                    .await
                    .ok()
                    .filter(|r| r.status == 200)
                    .map(|r| r.body)
            }
        },
    )
    .await
    .expect("minting a discovery URL");
    assert!(url.starts_with("http://lb:8087/"), "{url}");
    project.discovery_url = Some(url);
    // One replica and one etcd member go away before the agents register.
    project
        .run(&["kill", "discovery2", "etcd3"], Duration::from_secs(60))
        .await
        .expect("kill a replica and an etcd member");
    project
        .run(
            &["up", "-d", "--no-deps", "agent1", "agent2", "agent3"],
            Duration::from_secs(120),
        )
        .await
        .expect("compose up -d agents");
    let p = &project;
    let mut cluster_ids = BTreeSet::new();
    for service in AGENTS {
        // Polled every 500 ms (each check is a `compose exec`).
        let status = poll_until(
            &format!("{service} to report 3 members, 3 voters and a leader"),
            FORMATION_DEADLINE,
            Duration::from_millis(500),
            || async move { p.status(service).await.ok().filter(|s| formed(s).is_some()) },
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
        cluster_ids.insert(
            status["cluster_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    assert_eq!(cluster_ids.len(), 1, "one cluster: {cluster_ids:?}");
}
