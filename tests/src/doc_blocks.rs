//! The fenced shell blocks of README.md and docs/*.md, and what each is marked to be.
//!
//! Every ```` ```sh ```` block carries a mark after the language (GitHub shows only the first
//! word, so readers see a plain shell block):
//! - `sh run`: a test runs it (tests/tests/doc_blocks.rs), with the page's other `run` blocks in
//!   order, in one shell, as a reader at one terminal would;
//! - `sh test=FILE::NAME`: a dedicated test runs it (tests/tests/FILE.rs, `fn NAME`), where the
//!   block needs more than a shell (the README's demo and install lines, its cluster);
//! - `sh example`: it cannot run here (real machines' addresses, systemd, a cloud, a benchmark
//!   of minutes); a test still parses it with `bash -n` and checks each `muster` and
//!   `muster-discovery` command in it against the binary's own `--help`.
//!
//! A block with no mark, or an unknown one, fails the test that lists them, so a new example is
//! either run or knowingly left as an illustration.

use std::path::{Path, PathBuf};

/// One fenced block of a markdown file.
#[derive(Debug, Clone)]
pub struct Block {
    /// The file, relative to the workspace root (`README.md`, `docs/lifecycle.md`).
    pub file: String,
    /// The line of the opening fence (1-based).
    pub line: usize,
    /// The first word of the info string (`sh`, `toml`, …; empty for a bare fence).
    pub lang: String,
    /// The rest of the info string, trimmed.
    pub info: String,
    /// The lines between the fences.
    pub text: String,
}

impl Block {
    /// Where the block is, as an editor takes it: `docs/lifecycle.md:33`.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// What the block is marked to be (meaningful for `sh` blocks).
    pub fn mark(&self) -> Mark {
        let info = self.info.as_str();
        if info.is_empty() {
            return Mark::Unmarked;
        }
        if info == "run" {
            return Mark::Run;
        }
        if info == "example" {
            return Mark::Example;
        }
        if let Some(target) = info.strip_prefix("test=")
            && let Some((file, name)) = target.split_once("::")
            && !file.is_empty()
            && !name.is_empty()
        {
            return Mark::Test {
                file: file.to_string(),
                name: name.to_string(),
            };
        }
        Mark::Unknown(info.to_string())
    }
}

/// What a shell block is marked to be (see the module's comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    Run,
    Example,
    Test { file: String, name: String },
    Unmarked,
    Unknown(String),
}

/// Every fenced block of `markdown` (from the file `file`), in order.
pub fn blocks(file: &str, markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, String, Vec<&str>)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                let info = info.trim();
                let (lang, rest) = info.split_once(' ').unwrap_or((info, ""));
                open = Some((i + 1, lang.to_string(), rest.trim().to_string(), Vec::new()));
            }
            (Some(_), Some(rest)) if rest.trim().is_empty() => {
                if let Some((line, lang, info, lines)) = open.take() {
                    out.push(Block {
                        file: file.to_string(),
                        line,
                        lang,
                        info,
                        text: lines.iter().map(|l| format!("{l}\n")).collect(),
                    });
                }
            }
            (Some((_, _, _, lines)), _) => lines.push(line),
            (None, None) => {}
        }
    }
    out
}

/// The text of the first ```sh block after the line `heading` in `markdown` (whatever its
/// mark, see `doc_blocks`), or why not.
pub fn sh_block(markdown: &str, heading: &str) -> Result<String, String> {
    let (before, _) = markdown
        .split_once(&format!("\n{heading}\n"))
        .ok_or_else(|| format!("no {heading:?} section"))?;
    let heading_line = before.lines().count() + 1;
    blocks("", markdown)
        .into_iter()
        .find(|b| b.lang == "sh" && b.line > heading_line)
        .map(|b| b.text)
        .ok_or_else(|| format!("no ```sh block under {heading:?}"))
}

/// README.md and every docs/*.md under `root`, relative to it, in a stable order.
pub fn doc_files(root: &Path) -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".md"))
                .map(|n| format!("docs/{n}"))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    let mut files = vec!["README.md".to_string()];
    files.extend(docs);
    files
}

/// Every shell block of README.md and docs/*.md under `root`.
pub fn shell_blocks(root: &Path) -> Vec<Block> {
    doc_files(root)
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            blocks(file, &text)
        })
        .filter(|b| b.lang == "sh")
        .collect()
}

/// A `muster` or `muster-discovery` command found in a shell block: the program and the words
/// that follow it up to the end of its simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: String,
    pub words: Vec<String>,
}

/// The programs whose commands the docs are checked against.
pub const PROGRAMS: [&str; 2] = ["muster", "muster-discovery"];

/// Every `muster` / `muster-discovery` command in `block`, wherever it stands as a command:
/// at the start of a line, after `;`, `&&`, `||`, `|`, `&`, inside `$(…)`, after `do`/`then`,
/// after `sudo` or `VAR=value` prefixes, and as a path ending in `/muster`.
pub fn invocations(block: &str) -> Vec<Invocation> {
    let mut out = Vec::new();
    for command in crate::readme_script::steps(block) {
        let mut text = command.text.clone();
        for separator in ["&&", "||", "$(", ";", "|", "&", "(", ")", "`", "\n"] {
            text = text.replace(separator, "\u{0}");
        }
        for simple in text.split('\u{0}') {
            let words: Vec<&str> = simple.split_whitespace().collect();
            // `ExecStart=/opt/bin/muster agent …` (a unit file's line) starts with its program.
            let words: Vec<&str> = words
                .iter()
                .map(|w| w.strip_prefix("ExecStart=").unwrap_or(w))
                .collect();
            let start = words.iter().position(|w| {
                !(w.contains('=') && !w.starts_with('-')
                    || matches!(
                        *w,
                        "sudo"
                            | "exec"
                            | "do"
                            | "then"
                            | "else"
                            | "elif"
                            | "if"
                            | "while"
                            | "until"
                            | "time"
                            | "!"
                    ))
            });
            let Some(start) = start else { continue };
            let program = words[start].rsplit('/').next().unwrap_or(words[start]);
            if PROGRAMS.contains(&program) {
                out.push(Invocation {
                    program: program.to_string(),
                    words: words[start + 1..].iter().map(|w| w.to_string()).collect(),
                });
            }
        }
    }
    out
}

/// The shell commands a block of another kind shows: a `console` block's `$ ` lines, a unit
/// file's (`ini`, or YAML holding one) `ExecStart=` lines. Empty for anything else.
pub fn shown_commands(block: &Block) -> String {
    block
        .text
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            if block.lang == "console" {
                return line.strip_prefix("$ ").map(str::to_string);
            }
            line.find("ExecStart=").map(|at| line[at..].to_string())
        })
        .map(|l| l + "\n")
        .collect()
}

/// Every block of README.md and docs/*.md under `root`, of any kind.
pub fn all_blocks(root: &Path) -> Vec<Block> {
    doc_files(root)
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            blocks(file, &text)
        })
        .collect()
}

/// The subcommands a clap `--help` text lists under `Commands:` (without `help`).
pub fn subcommands(help: &str) -> Vec<String> {
    let Some((_, after)) = help.split_once("\nCommands:\n") else {
        return Vec::new();
    };
    after
        .lines()
        .take_while(|l| l.starts_with("  ") || l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

/// Whether a clap `--help` text says a subcommand must follow (every usage line ends in
/// `<COMMAND>`), rather than allowing positional arguments instead (`muster backup FILE`).
pub fn subcommand_required(help: &str) -> bool {
    let Some((_, usage)) = help.split_once("Usage: ") else {
        return false;
    };
    let lines: Vec<&str> = usage.lines().take_while(|l| !l.trim().is_empty()).collect();
    !lines.is_empty() && lines.iter().all(|l| l.trim_end().ends_with("<COMMAND>"))
}

/// Whether a `--help` text offers the long flag `flag` (`--data-dir`): as a whole word on one
/// of its option lines (`      --data-dir <DATA_DIR>  …`), not merely named in a description.
pub fn documents_flag(help: &str, flag: &str) -> bool {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .any(|line| {
            let head = line.split("  ").next().unwrap_or(line);
            head.match_indices(flag).any(|(at, _)| {
                let before = head[..at].chars().next_back();
                let after = head[at + flag.len()..].chars().next();
                !matches!(before, Some(c) if c.is_ascii_alphanumeric() || c == '-')
                    && !matches!(after, Some(c) if c.is_ascii_alphanumeric() || c == '-')
            })
        })
}

/// The long flags an invocation passes after its subcommand path (`--name=value` as `--name`),
/// up to a bare `--` (what follows belongs to another program, as in `lease run -- CMD`).
pub fn long_flags(words: &[String]) -> Vec<String> {
    words
        .iter()
        .take_while(|w| w.as_str() != "--")
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            let w = w.trim_matches(|c| c == '"' || c == '\'');
            w.split('=').next().unwrap_or(w).to_string()
        })
        .collect()
}

/// The workspace root, for a test binary of this crate.
pub fn workspace_root() -> PathBuf {
    crate::readme_script::workspace_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_give_language_mark_line_and_text() {
        let md = "# T\n\n```sh run\na\nb\n```\n\ntext\n```toml\nx = 1\n```\n```sh\nc\n```\n";
        let b = blocks("docs/x.md", md);
        assert_eq!(b.len(), 3);
        assert_eq!(
            (b[0].line, b[0].lang.as_str(), b[0].mark()),
            (3, "sh", Mark::Run)
        );
        assert_eq!(b[0].text, "a\nb\n");
        assert_eq!(b[1].lang, "toml");
        assert_eq!(b[2].mark(), Mark::Unmarked);
        assert_eq!(b[2].at(), "docs/x.md:12");
    }

    #[test]
    fn marks_parse_and_unknown_ones_are_named() {
        let mark = |info: &str| {
            Block {
                file: String::new(),
                line: 1,
                lang: "sh".into(),
                info: info.into(),
                text: String::new(),
            }
            .mark()
        };
        assert_eq!(mark("example"), Mark::Example);
        assert_eq!(
            mark("test=readme::a_test"),
            Mark::Test {
                file: "readme".into(),
                name: "a_test".into()
            }
        );
        assert_eq!(mark("test=readme"), Mark::Unknown("test=readme".into()));
        assert_eq!(mark("runnable"), Mark::Unknown("runnable".into()));
    }

    #[test]
    fn invocations_are_found_where_they_stand_as_commands() {
        let block = "URL=$(curl -s x); echo\n\
                     for i in 1 2; do muster agent --name n$i \\\n  --data-dir /tmp/n$i & done\n\
                     T=$(muster token create --data-dir /tmp/n1)\n\
                     MUSTER_OPERATOR_TOKEN=… muster backup f --server a:1   # over TCP\n\
                     sudo /opt/bin/muster status && muster-discovery serve --listen x\n\
                     muster-discovery serve --data-dir /var/lib/muster-discovery\n\
                     journalctl -u muster | grep -v muster\n\
                     if muster status --json; then :; fi\n\
                     ExecStart=/opt/bin/muster agent --name %H\n";
        let found: Vec<String> = invocations(block)
            .iter()
            .map(|i| format!("{} {}", i.program, i.words.join(" ")))
            .collect();
        assert_eq!(
            found,
            vec![
                "muster agent --name n$i --data-dir /tmp/n$i",
                "muster token create --data-dir /tmp/n1",
                "muster backup f --server a:1",
                "muster status",
                "muster-discovery serve --listen x",
                "muster-discovery serve --data-dir /var/lib/muster-discovery",
                "muster status --json",
                "muster agent --name %H",
            ]
        );
    }

    #[test]
    fn flags_stop_at_a_bare_double_dash_and_lose_their_values() {
        let words: Vec<String> = ["run", "x", "--ttl=3s", "--grace", "1s", "--", "cmd", "--v"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(long_flags(&words), vec!["--ttl", "--grace"]);
    }

    #[test]
    fn help_texts_give_subcommands_and_whole_word_flags() {
        let help = "Usage: x\n\nCommands:\n  get    Read a key\n          more text\n  put    Write\n  help   Print\n\nOptions:\n      --data-dir <D>  where\n      --json-lines  x\n";
        assert_eq!(subcommands(help), vec!["get", "put"]);
        assert!(documents_flag(help, "--data-dir"));
        // Named in a description only: not offered.
        assert!(!documents_flag(
            "Usage: x\n\nOptions:\n      --json  like --data-dir\n",
            "--data-dir"
        ));
        assert!(!documents_flag(help, "--data"));
        assert!(!documents_flag(help, "--json"));
        assert!(subcommand_required(
            help.replace("Usage: x", "Usage: x <COMMAND>").as_str()
        ));
        assert!(!subcommand_required(
            "Usage: m backup [OPTIONS] <FILE>\n       m backup <COMMAND>\n\nCommands:\n"
        ));
    }
}
