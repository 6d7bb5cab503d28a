//! docs/architecture.md stays true to the code: every source path it names exists, every
//! `module::item` it names is defined in that module, and the start plan's variants and the
//! node's tasks it lists are the ones in the code. A rename that forgets the page fails here.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn page() -> String {
    read(&repo().join("docs/architecture.md"))
}

/// The text between backticks, in order.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// The crate a section of the page is about: the discovery service's section names paths in
/// discovery/src, the rest in agent/src.
fn sections(page: &str) -> Vec<(&'static str, String)> {
    let split = page.find("## The discovery service").unwrap_or(page.len());
    vec![
        ("agent/src", page[..split].to_string()),
        ("discovery/src", page[split..].to_string()),
    ]
}

fn is_source_path(span: &str) -> bool {
    !span.contains(' ')
        && !span.starts_with("..")
        && !span.starts_with('<')
        && (span.ends_with(".rs") || (span.ends_with('/') && span.len() > 1))
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/' || c == '.')
}

#[test]
fn every_source_path_the_page_names_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for (root, text) in sections(&page()) {
        // Code blocks list modules too (the layer diagram): their first words.
        let block_words = text
            .split("```")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .flat_map(|(_, block)| {
                block
                    .lines()
                    .flat_map(|l| l.split("  ").next().map(str::split_whitespace))
                    .flatten()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>();
        for span in code_spans(&text).into_iter().chain(block_words) {
            if !is_source_path(&span) {
                continue;
            }
            checked += 1;
            let candidates = [
                repo().join(root).join(&span),
                repo().join(&span),
                repo()
                    .join(root)
                    .join(span.trim_end_matches('/'))
                    .with_extension("rs"),
            ];
            if !candidates.iter().any(|p| p.exists()) {
                missing.push(format!("{root}: {span}"));
            }
        }
    }
    assert!(
        checked > 20,
        "the page names only {checked} paths: the parser is broken"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
}

/// The files of module `path` (`a::b` → agent/src/a/b.rs, agent/src/a/b/*.rs, …).
fn module_files(root: &Path, path: &[&str]) -> Vec<PathBuf> {
    let base = path.iter().fold(root.to_path_buf(), |p, s| p.join(s));
    let mut files = vec![base.with_extension("rs"), base.join("mod.rs")];
    if let Ok(dir) = std::fs::read_dir(&base) {
        files.extend(dir.flatten().map(|e| e.path()));
    }
    files.into_iter().filter(|p| p.is_file()).collect()
}

#[test]
fn every_module_item_the_page_names_is_defined_there() {
    let root = repo().join("agent/src");
    let shared_root = repo().join("shared/src");
    let mut missing = Vec::new();
    let mut checked = 0;
    let (_, agent_text) = sections(&page()).remove(0);
    for span in code_spans(&agent_text) {
        let span = span.trim_end_matches("()");
        let parts: Vec<&str> = span.split("::").collect();
        if parts.len() < 2
            || !parts
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            continue;
        }
        let (item, module) = parts.split_last().expect("two parts");
        // An item of the shared crate is named with its crate (`muster_shared::serve::Gate`).
        let (root, module) = match module.split_first() {
            Some((&"muster_shared", rest)) if !rest.is_empty() => (shared_root.clone(), rest),
            _ => (root.clone(), module),
        };
        // `Type::method` or `module::Type::method`: find the longest module prefix that exists.
        let found = (1..=module.len()).rev().find_map(|n| {
            let files = module_files(&root, &module[..n]);
            (!files.is_empty()).then_some(files)
        });
        let Some(files) = found else {
            missing.push(format!("{span} (no module {})", module.join("::")));
            continue;
        };
        checked += 1;
        let defined = files.iter().any(|f| {
            let text = read(f);
            [
                format!("fn {item}"),
                format!("struct {item}"),
                format!("enum {item}"),
                format!("trait {item}"),
                format!("const {item}"),
                format!("type {item}"),
                format!("    {item}"),
                format!("mod {item}"),
                format!("use {item}"),
            ]
            .iter()
            .any(|needle| text.contains(needle.as_str()))
                || text.contains(&format!("{item},")) && text.contains("pub use")
        });
        if !defined {
            missing.push(span.to_string());
        }
    }
    assert!(
        checked > 10,
        "the page names only {checked} items: the parser is broken"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names items not defined where it says: {missing:?}"
    );
}

/// The variants of `pub enum <name>` in `file`.
fn variants(file: &Path, name: &str) -> Vec<String> {
    let text = read(file);
    let start = text
        .find(&format!("pub enum {name} {{"))
        .unwrap_or_else(|| panic!("no enum {name} in {}", file.display()));
    let body = &text[start..];
    let body = &body[body.find('{').expect("a body") + 1..];
    let mut depth = 0usize;
    let mut names = Vec::new();
    for line in body.lines() {
        let trimmed = line.trim();
        if depth == 0 && trimmed.starts_with('}') {
            break;
        }
        if depth == 0 && !trimmed.starts_with("//") && !trimmed.starts_with('#') {
            let name: String = trimmed
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
        depth += trimmed.matches('{').count() + trimmed.matches('(').count();
        depth = depth.saturating_sub(trimmed.matches('}').count() + trimmed.matches(')').count());
    }
    names
}

#[test]
fn the_start_plans_the_page_lists_are_the_code_s() {
    let code = variants(&repo().join("agent/src/start/mod.rs"), "Plan");
    assert!(code.len() >= 4, "parsed {code:?}");
    let page = page();
    let line = page
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with('`') && l.contains(" | ") && l.contains("Restart"))
        .expect("the page lists the plans as `A | B | …`");
    let listed: Vec<String> = code_spans(line)[0]
        .split('|')
        .map(|s| s.trim().to_string())
        .collect();
    assert_eq!(
        listed, code,
        "docs/architecture.md lists other plans than start::Plan"
    );
}

#[test]
fn the_node_tasks_the_page_lists_are_the_ones_node_rs_spawns() {
    let node = read(&repo().join("agent/src/node.rs"));
    let page = page();
    let run = page
        .split(". **Run** (`node.rs`)")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .expect("the page's Run step");
    let listed: Vec<String> = code_spans(run)
        .into_iter()
        .filter(|s| s.contains("::") && !s.starts_with("raft::"))
        .collect();
    assert!(listed.len() >= 4, "the Run step lists {listed:?}");
    for task in &listed {
        let path = task.trim_end_matches("()");
        assert!(
            node.contains(&format!("crate::{path}")),
            "docs/architecture.md says node.rs runs {task}; node.rs does not"
        );
    }
    // And the other way: every `crate::module::function(` node.rs starts as a task is listed.
    let tasks = node
        .split("fn spawn_tasks(")
        .nth(1)
        .and_then(|s| s.split("impl RunningNode").next())
        .expect("node.rs's spawn_tasks and the functions after it");
    let mut started = 0;
    for call in tasks.split("crate::").skip(1) {
        let path: String = call
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let rest = &call[path.len()..];
        // A task is started with the agent or a part of it: `crate::serve::serve_socket(agent,
        // …)`, `crate::watch::removal_watch(&agent.group, …)`. Anything else called while
        // building one (a constructor, a path) is not a task.
        let takes_agent = rest
            .strip_prefix('(')
            .and_then(|args| args.split(')').next())
            .is_some_and(|first| first.contains("agent"));
        if path.matches("::").count() != 1 || !takes_agent {
            continue;
        }
        started += 1;
        assert!(
            listed.iter().any(|t| t.trim_end_matches("()") == path),
            "node.rs starts {path}, which docs/architecture.md does not list"
        );
    }
    assert!(
        started >= 4,
        "found {started} tasks in node.rs: the parser is broken"
    );
}

/// The start path as the page tells it: every path ends with an `Admitted`, `start::run` starts
/// the node in its one call of `node::start`, and a task a path leaves running belongs to the
/// node (`RunningNode::spawn`), never to a bare `tokio::spawn` in start/.
#[test]
fn the_start_path_starts_the_node_in_one_place_and_spawns_nothing_of_its_own() {
    let dir = repo().join("agent/src/start");
    let mut starts = Vec::new();
    let mut spawns = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("agent/src/start") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = read(&path);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        starts.extend(std::iter::repeat_n(
            name.clone(),
            text.matches("node::start(").count(),
        ));
        spawns.extend(std::iter::repeat_n(
            name,
            text.matches("tokio::spawn").count(),
        ));
    }
    assert_eq!(
        starts,
        vec!["mod.rs".to_string()],
        "node::start is called once, in start/mod.rs"
    );
    assert!(
        spawns.is_empty(),
        "start/ spawns tasks the node does not own: {spawns:?}"
    );
}
