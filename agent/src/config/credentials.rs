//! The credentials `muster agent` may start with: a join token, a pre-shared join secret, and a
//! CA pin, each from its flag, variable or config file key.

use muster_shared::token::JoinSecret;

use super::sources::Sources;
use super::{ConfigError, JOIN_TOKEN_ENV, JoinSecretSetting, LEGACY_TOKEN_ENV, empty_flag_hint};

/// The variable that may hold the join secret itself (a file is the better place).
pub const JOIN_SECRET_ENV: &str = "MUSTER_JOIN_SECRET";

/// The join secret: `--join-secret-file`, `MUSTER_JOIN_SECRET_FILE` or `join_secret_file` name
/// a file holding it; `MUSTER_JOIN_SECRET` holds it directly.
pub(super) fn join_secret(src: &Sources) -> Result<Option<JoinSecretSetting>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: "join-secret-file",
        message,
    };
    let (flags, env, file) = (src.flags, &src.env, &src.file);
    let path = flags
        .join_secret_file
        .clone()
        .or_else(|| {
            env.get("MUSTER_JOIN_SECRET_FILE")
                .filter(|v| !v.trim().is_empty())
                .map(std::path::PathBuf::from)
        })
        .or_else(|| file.join_secret_file.clone());
    let (source, text) = match path {
        Some(path) => {
            refuse_readable_by_others(&path)?;
            let text = std::fs::read_to_string(&path).map_err(|e| {
                invalid(format!(
                    "cannot read {}: {e} (create it with `muster secret generate > FILE`, mode 0600)",
                    path.display()
                ))
            })?;
            (path.display().to_string(), text)
        }
        None => match env.get(JOIN_SECRET_ENV).filter(|v| !v.trim().is_empty()) {
            Some(text) => (JOIN_SECRET_ENV.to_string(), text.clone()),
            None => return Ok(None),
        },
    };
    let secret = JoinSecret::parse(&text).map_err(|e| invalid(format!("{source}: {e}")))?;
    Ok(Some(JoinSecretSetting { source, secret }))
}

/// Refuses a join-secret file that users other than its owner may read or write, as ssh
/// refuses such a private key: the secret admits machines to the cluster and hands them its CA
/// key, so a world-readable copy on any machine gives the cluster away. Only regular files are
/// checked (a pipe or a systemd credential is private by construction).
fn refuse_readable_by_others(path: &std::path::Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        // Reading it reports what is wrong.
        return Ok(());
    };
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_file() && mode & 0o077 != 0 {
        return Err(ConfigError::Invalid {
            setting: "join-secret-file",
            message: format!(
                "{} has mode {mode:04o}: others on this machine can read the join secret (which \
             admits machines and hands them the cluster's CA key). Run `chmod 600 {}` (and \
             create such files with `(umask 077; muster secret generate > FILE)`)",
                path.display(),
                path.display()
            ),
        });
    }
    Ok(())
}

/// `--ca-pin`: 64 lowercase hex, the SHA-256 of the CA's public key.
pub(super) fn ca_pin(value: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(pin) = value else {
        return Ok(None);
    };
    let pin = pin.trim().to_ascii_lowercase();
    if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ConfigError::Invalid {
            setting: "ca-pin",
            message: "expected 64 hex characters: the second field of a join token \
                      (K1.<pin>.…), or `ca_pin` in the discovery record"
                .into(),
        });
    }
    Ok(Some(pin))
}

/// The join token: `--token`, then `MUSTER_JOIN_TOKEN`, then the old `MUSTER_TOKEN` (read for
/// one more release, with a warning, and ignored when it holds an operator token: operators
/// export that one for the CLI), then the config file.
pub(super) fn join_token(
    src: &Sources,
    warnings: &mut Vec<String>,
) -> Result<Option<(&'static str, String)>, ConfigError> {
    let (flags, env, file) = (src.flags, &src.env, &src.file);
    let set = |v: Option<&String>| v.filter(|s| !s.trim().is_empty()).cloned();
    if let Some(v) = &flags.token {
        if v.trim().is_empty() {
            return Err(ConfigError::Invalid {
                setting: "token",
                message: empty_flag_hint("token"),
            });
        }
        return Ok(Some(("--token", v.clone())));
    }
    if let Some(v) = set(env.get(JOIN_TOKEN_ENV)) {
        return Ok(Some((JOIN_TOKEN_ENV, v)));
    }
    if let Some(v) = set(env.get(LEGACY_TOKEN_ENV)) {
        if v.trim_start().starts_with("OP1.") {
            warnings.push(format!(
                "{LEGACY_TOKEN_ENV} holds an operator token; `muster agent` ignores it (the agent \
                 takes its join token from --token or {JOIN_TOKEN_ENV}; operator commands read \
                 MUSTER_OPERATOR_TOKEN)"
            ));
        } else {
            warnings.push(format!(
                "{LEGACY_TOKEN_ENV} is read as the join token for one more release; rename it \
                 {JOIN_TOKEN_ENV}"
            ));
            return Ok(Some((LEGACY_TOKEN_ENV, v)));
        }
    }
    Ok(set(file.token.as_ref()).map(|v| ("`token` in the config file", v)))
}
