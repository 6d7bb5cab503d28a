//! README command blocks turned into scripts a test can run: the block's lines as written,
//! with the README's fixed paths and ports swapped for the test's own, and every command that
//! needs the cluster to be ready retried until it succeeds or a deadline passes (the README's
//! reader waits by eye; a script must poll).

use std::path::{Path, PathBuf};

/// The workspace's root directory (where README.md is).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The text of the first ```sh block after the line `heading` in `markdown`, or why not.
pub fn sh_block(markdown: &str, heading: &str) -> Result<String, String> {
    let after = markdown
        .split_once(&format!("\n{heading}\n"))
        .ok_or_else(|| format!("no {heading:?} section"))?
        .1;
    after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block.to_string())
        .ok_or_else(|| format!("no ```sh block under {heading:?}"))
}

/// The block's commands: continuation lines joined, comments and blank lines dropped.
pub fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        // The README's comments follow two or more spaces and a `#`; no command here has one.
        let line = match line.find(" #") {
            Some(at) => &line[..at],
            None => line,
        };
        let line = line.trim_end();
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending).trim().to_string();
        if !command.is_empty() && !command.starts_with('#') {
            out.push(command);
        }
    }
    out
}

/// A bash script running `commands` in order: a command ending in `&` (or `& done`) starts in
/// the background as written; any other is retried until it succeeds, for at most
/// `deadline_secs` each, and the script fails naming the command that never did. Background
/// jobs are killed when the script ends.
pub fn polling_script(commands: &[String], deadline_secs: u64) -> String {
    let mut script = String::from(
        "set -u\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n\
         step() { echo \"+ $1\" >&2; }\n",
    );
    for command in commands {
        let background = command.ends_with('&') || command.ends_with("& done");
        if background {
            script.push_str(&format!("step {}\n{command}\n", shell_quote(command)));
        } else {
            script.push_str(&format!(
                "step {q}\nend=$((SECONDS+{deadline_secs}))\nuntil {command}; do\n  \
                 if [ $SECONDS -ge $end ]; then echo \"never succeeded in {deadline_secs}s: \"{q} >&2; exit 1; fi\n  \
                 sleep 0.3\ndone\n",
                q = shell_quote(command)
            ));
        }
    }
    script
}

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_join_and_comments_go() {
        let block =
            "A=$(x)   # mint\nfor i in 1 2; do y \\\n  --z $i & done\n\n# note\nw &   # bg\n";
        assert_eq!(
            commands(block),
            vec!["A=$(x)", "for i in 1 2; do y   --z $i & done", "w &"]
        );
    }

    #[test]
    fn a_command_that_never_succeeds_fails_the_script_by_name() {
        let script = polling_script(&["false".to_string()], 1);
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("bash");
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("never succeeded in 1s: false"));
    }
}
