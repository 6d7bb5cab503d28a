//! Command blocks of README.md and docs/ turned into scripts a test can run: the block's lines as written,
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

/// One command of a block, as a script runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The command: continuation lines joined; a compound command (`while … done`, `if … fi`)
    /// keeps its lines.
    pub text: String,
    /// The exit status the block's comment promises, as in `# … (exit 1)`; 0 when none.
    pub expect_exit: i32,
    /// The error kind that comment shows (`{"kind":"not_found",…}`), which the output must
    /// carry too: another failure with the same exit status is not the promised one.
    pub expect_kind: Option<String>,
}

impl Step {
    /// Started in the background as written (`… &`, `for … & done`), not waited for.
    pub fn is_background(&self) -> bool {
        let text = self.text.trim_end();
        let text = text.strip_suffix("done").map(str::trim_end).unwrap_or(text);
        text.ends_with('&') && !text.ends_with("&&")
    }

    /// A `while`/`until`/`for`/`if`/`case` spanning lines: run in a subshell, so that an
    /// `exit` in it ends the step, not the script.
    pub fn is_compound(&self) -> bool {
        self.text.contains('\n')
    }
}

/// The `(exit N)` a comment promises, if any.
fn promised_exit(comment: &str) -> Option<i32> {
    let (_, after) = comment.split_once("(exit ")?;
    after.split_once(')')?.0.trim().parse().ok()
}

/// The `"kind":"…"` a comment shows, if any.
fn promised_kind(comment: &str) -> Option<String> {
    let (_, after) = comment.split_once("\"kind\":\"")?;
    Some(after.split_once('"')?.0.to_string())
}

/// How far a line opens (+) or closes (−) compound commands.
fn nesting(line: &str) -> i32 {
    line.split(|c: char| c.is_whitespace() || c == ';')
        .map(|w| match w {
            "while" | "until" | "for" | "if" | "case" => 1,
            "done" | "fi" | "esac" => -1,
            _ => 0,
        })
        .sum()
}

/// The block's steps: continuation lines joined, compound commands kept whole, comments and
/// blank lines dropped.
pub fn steps(block: &str) -> Vec<Step> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut depth = 0;
    let mut expect_exit = 0;
    let mut expect_kind = None;
    for line in block.lines() {
        // The docs' comments follow two or more spaces and a `#`; no command here has one.
        let (line, comment) = match line.find(" #") {
            Some(at) => (&line[..at], &line[at..]),
            None => (line, ""),
        };
        if let Some(code) = promised_exit(comment) {
            expect_exit = code;
            expect_kind = promised_kind(comment);
        }
        let line = line.trim_end();
        if line.trim_start().starts_with('#') || (line.trim().is_empty() && depth == 0) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        depth += nesting(line);
        pending.push_str(line);
        if depth > 0 {
            pending.push('\n');
            continue;
        }
        depth = 0;
        let text = std::mem::take(&mut pending).trim().to_string();
        if !text.is_empty() {
            out.push(Step {
                text,
                expect_exit: std::mem::take(&mut expect_exit),
                expect_kind: expect_kind.take(),
            });
        }
    }
    // An unbalanced block (a keyword counted that was not one) keeps its last command.
    let text = pending.trim().to_string();
    if !text.is_empty() {
        out.push(Step {
            text,
            expect_exit,
            expect_kind,
        });
    }
    out
}

/// The block's commands as text (see [`steps`]).
pub fn commands(block: &str) -> Vec<String> {
    steps(block).into_iter().map(|s| s.text).collect()
}

/// A bash script running `steps` in order: a step started in the background (`… &`) starts as
/// written; any other is retried until it exits as its comment promises (0 unless `(exit N)`),
/// for at most `deadline_secs` each, and the script fails naming the step that never did.
/// Background jobs are killed when the script ends.
pub fn polling_script(steps: &[Step], deadline_secs: u64) -> String {
    let mut script = String::from(
        "set -u\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n\
         step() { echo \"+ $1\" >&2; }\n",
    );
    for step in steps {
        let command = &step.text;
        let q = shell_quote(command);
        if step.is_background() {
            script.push_str(&format!("step {q}\n{command}\n"));
            continue;
        }
        let run = if step.is_compound() {
            format!("( {command}\n)")
        } else {
            command.clone()
        };
        let test = match (step.expect_exit, &step.expect_kind) {
            (0, _) => run,
            (code, None) => format!("{run}\n[ $? -eq {code} ]"),
            (code, Some(kind)) => format!(
                "out=$({run})\nrc=$?\nprintf '%s\\n' \"$out\"\n[ $rc -eq {code} ] && printf '%s' \"$out\" | grep -qF {}",
                shell_quote(&format!("\"kind\":\"{kind}\""))
            ),
        };
        script.push_str(&format!(
            "step {q}\nend=$((SECONDS+{deadline_secs}))\nuntil {test}\ndo\n  \
             if [ $SECONDS -ge $end ]; then echo \"never succeeded in {deadline_secs}s: \"{q} >&2; exit 1; fi\n  \
             sleep 0.3\ndone\n"
        ));
    }
    script
}

/// Runs `script` with bash in `dir`, with `PATH` = `bin_dir` then the system's and no
/// `MUSTER_*` or `RUST_LOG` from this environment (plus `env`), in its own process group, for at
/// most `limit`. Whatever it started is sent SIGTERM afterwards, so nothing outlives the test.
/// `None` if it did not finish in time.
pub async fn run_script(
    script: &str,
    dir: &Path,
    bin_dir: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    limit: std::time::Duration,
) -> Option<std::process::Output> {
    let mut shell = tokio::process::Command::new("/bin/bash");
    shell
        .args(["--noprofile", "--norc", "-c", script])
        .current_dir(dir);
    crate::clear_muster_env(&mut shell);
    shell
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display()),
        )
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = shell.spawn().expect("bash");
    let pgid = child.id().expect("pid");
    let out = tokio::time::timeout(limit, child.wait_with_output()).await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status();
    out.ok().map(|r| r.expect("bash ran"))
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
    fn compound_commands_stay_whole_and_promised_exits_are_kept() {
        let block = "muster kv get nope   # {\"kind\":\"not_found\"}  (exit 1)\nwhile :; do\n  a || exit\n\n  b && break\ndone\nfor i in 1 2; do\n  x &\ndone\nif y; then z; fi\n";
        let s = steps(block);
        assert_eq!(s.len(), 4, "{s:?}");
        assert_eq!(
            (s[0].text.as_str(), s[0].expect_exit),
            ("muster kv get nope", 1)
        );
        assert_eq!(s[1].text, "while :; do\n  a || exit\n\n  b && break\ndone");
        assert!(s[1].is_compound() && !s[1].is_background());
        assert!(s[2].is_background());
        assert_eq!(
            (s[3].text.as_str(), s[3].expect_exit),
            ("if y; then z; fi", 0)
        );
        assert!(!s[3].is_compound());
    }

    #[test]
    fn a_promised_failure_is_awaited_and_an_exit_in_a_loop_ends_only_the_loop() {
        let script = polling_script(
            &steps("false   # (exit 1)\nwhile :; do\n  exit 0\ndone\necho after\n"),
            5,
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "after\n");
    }

    #[test]
    fn a_promised_kind_must_show_in_the_output_not_just_the_exit_status() {
        let shows = |kind: &str| {
            format!(
                "printf '%s\\n' '{{\"kind\":\"{kind}\"}}'; (exit 1)   # {{\"kind\":\"not_found\"}} (exit 1)\n"
            )
        };
        let right = steps(&shows("not_found"));
        assert_eq!(right[0].expect_kind.as_deref(), Some("not_found"));
        let wrong = steps(&shows("unreachable"));
        let run = |s: &[Step]| {
            std::process::Command::new("bash")
                .args(["-c", &polling_script(s, 2)])
                .output()
                .expect("bash")
                .status
                .success()
        };
        assert!(run(&right));
        assert!(
            !run(&wrong),
            "another failure with the same exit status passed"
        );
    }

    #[test]
    fn a_command_that_never_succeeds_fails_the_script_by_name() {
        let script = polling_script(&steps("false\n"), 1);
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("bash");
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("never succeeded in 1s: false"));
    }
}
