//! systemd EnvironmentFiles (such as Flatcar's `/run/metadata/flatcar`) and `${VAR}`
//! expansion of setting values.

use std::collections::HashMap;
use std::path::Path;

use super::ConfigError;

/// A line of an EnvironmentFile, or a `$VAR` in a setting, that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvFileError {
    #[error("line {line}: expected KEY=VALUE, found {found:?}")]
    NotAssignment { line: usize, found: String },
    #[error("line {line}: {key:?} is not a variable name")]
    BadName { line: usize, key: String },
    #[error("{0:?}: unclosed ${{")]
    Unclosed(String),
    #[error(
        "{value:?} refers to ${{{name}}}, which is not set (is --env-file right, e.g. /run/metadata/flatcar?)"
    )]
    Unset { value: String, name: String },
}

/// Parses a systemd EnvironmentFile: `KEY=VALUE` lines, `#`/`;` comments, optional `export `,
/// values optionally in single or double quotes.
pub fn read_env_file(path: &Path) -> Result<HashMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    parse_env_file(&text).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

pub(super) fn parse_env_file(text: &str) -> Result<HashMap<String, String>, EnvFileError> {
    let mut vars = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(EnvFileError::NotAssignment {
                line: n + 1,
                found: raw.to_string(),
            });
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(EnvFileError::BadName {
                line: n + 1,
                key: key.to_string(),
            });
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        vars.insert(key.to_string(), value.to_string());
    }
    Ok(vars)
}

/// Expands `${NAME}` and `$NAME` from `env`. An unset variable is an error, never an empty
/// string: an advertise address of ":7000" would be worse than refusing to start.
pub fn expand(value: &str, env: &HashMap<String, String>) -> Result<String, EnvFileError> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        // `$$` is a literal dollar, as in systemd unit files.
        if value[i + 1..].starts_with('$') {
            chars.next();
            out.push('$');
            continue;
        }
        let name = if value[i + 1..].starts_with('{') {
            let Some(close) = value[i + 2..].find('}') else {
                return Err(EnvFileError::Unclosed(value.to_string()));
            };
            let name = &value[i + 2..i + 2 + close];
            for _ in 0..close + 2 {
                chars.next();
            }
            name
        } else {
            let rest = &value[i + 1..];
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if len == 0 {
                out.push('$');
                continue;
            }
            for _ in 0..len {
                chars.next();
            }
            &rest[..len]
        };
        match env.get(name) {
            Some(v) => out.push_str(v),
            None => {
                return Err(EnvFileError::Unset {
                    value: value.to_string(),
                    name: name.to_string(),
                });
            }
        }
    }
    Ok(out)
}
