//! `muster token` and `muster operator-token`: create, list and revoke the cluster's join and
//! operator tokens. Kept apart from the other commands: both kinds share how a new token is
//! printed (alone on stdout, what it is on stderr).

use std::time::Duration;

use muster_shared::duration::{format_duration, parse_duration};
use muster_shared::form::urlencode;

use super::{CliError, Target, output, print_json};
use crate::api::paths;
use crate::api::types::{
    JOIN_TOKEN_MAX_TTL, JOIN_TOKEN_MAX_USES, JOIN_TOKEN_MIN_TTL, JoinTokenInfo, OperatorTokenInfo,
    TokenCreated,
};
use crate::outln;

/// `--ttl` of `muster token create`, checked here so a mistake is named before any call.
pub fn join_token_ttl(text: &str) -> Result<Duration, CliError> {
    let ttl = parse_duration(text).map_err(|e| CliError::Usage(format!("--ttl: {e}")))?;
    if !(JOIN_TOKEN_MIN_TTL..=JOIN_TOKEN_MAX_TTL).contains(&ttl) {
        return Err(CliError::Usage(format!(
            "--ttl {text}: a join token lives between {} and {}",
            format_duration(JOIN_TOKEN_MIN_TTL),
            format_duration(JOIN_TOKEN_MAX_TTL)
        )));
    }
    Ok(ttl)
}

/// `--uses` of `muster token create`.
pub fn check_join_token_uses(uses: u32) -> Result<(), CliError> {
    if !(1..=JOIN_TOKEN_MAX_USES).contains(&uses) {
        return Err(CliError::Usage(format!(
            "--uses {uses}: a join token admits between 1 and {JOIN_TOKEN_MAX_USES} nodes"
        )));
    }
    Ok(())
}

/// `muster token create`: the token alone on stdout (so `$(muster token create)` captures just
/// it), what it is on stderr.
pub async fn token_create(
    target: &Target,
    ttl: Duration,
    uses: u32,
    description: String,
    json: bool,
) -> Result<(), CliError> {
    let body = serde_json::json!({
        "ttl_ms": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        "uses": uses,
        "description": description,
    });
    let Some(created) = create_token(target, paths::TOKENS, body, json).await? else {
        return Ok(());
    };
    eprintln!(
        "join token {}: admits {} node(s), expires in {}. It is shown only this once. \
         Use it as: muster agent --join <member> --token <TOKEN> …",
        created.id,
        created.uses.unwrap_or(1),
        format_duration(ttl)
    );
    Ok(())
}

/// Creates a token and prints it: the token alone on stdout (or everything as JSON). Returns
/// what was created when the caller should add its note on stderr.
async fn create_token(
    target: &Target,
    path: &str,
    body: serde_json::Value,
    json: bool,
) -> Result<Option<TokenCreated>, CliError> {
    let created: TokenCreated = target.call("POST", path, Some(body.to_string())).await?;
    if json {
        print_json(&created)?;
        return Ok(None);
    }
    outln!("{}", created.token);
    Ok(Some(created))
}

pub async fn token_list(target: &Target, json: bool) -> Result<(), CliError> {
    let list: Vec<JoinTokenInfo> = target.call("GET", paths::TOKENS, None).await?;
    if json {
        return print_json(&list);
    }
    output::print_join_tokens(&list);
    Ok(())
}

pub async fn token_revoke(target: &Target, id: &str, json: bool) -> Result<(), CliError> {
    let path = format!("{}/{}", paths::TOKENS, urlencode(id));
    let info: JoinTokenInfo = target.call("DELETE", &path, None).await?;
    if json {
        return print_json(&info);
    }
    outln!("join token {} revoked", info.id);
    Ok(())
}

pub async fn operator_token_create(
    target: &Target,
    description: String,
    scopes: Vec<String>,
    json: bool,
) -> Result<(), CliError> {
    let scopes = if scopes.is_empty() {
        vec!["admin".to_string()]
    } else {
        scopes
    };
    for scope in &scopes {
        scope
            .parse::<crate::state::scope::Scope>()
            .map_err(|e| CliError::Usage(format!("--scope: {e}")))?;
    }
    let power = scopes.join(",");
    let body = serde_json::json!({ "description": description, "scopes": scopes });
    let Some(created) = create_token(target, paths::OPERATOR_TOKENS, body, json).await? else {
        return Ok(());
    };
    eprintln!(
        "operator token {} (scopes {power}). It is shown only this once. \
         Use it as: MUSTER_OPERATOR_TOKEN=<TOKEN> muster status --server <member>:<port>",
        created.id
    );
    Ok(())
}

pub async fn operator_token_list(target: &Target, json: bool) -> Result<(), CliError> {
    let list: Vec<OperatorTokenInfo> = target.call("GET", paths::OPERATOR_TOKENS, None).await?;
    if json {
        return print_json(&list);
    }
    output::print_operator_tokens(&list);
    Ok(())
}

pub async fn operator_token_revoke(target: &Target, id: &str, json: bool) -> Result<(), CliError> {
    let path = format!("{}/{}", paths::OPERATOR_TOKENS, urlencode(id));
    let info: OperatorTokenInfo = target.call("DELETE", &path, None).await?;
    if json {
        return print_json(&info);
    }
    outln!("operator token {} revoked", info.id);
    Ok(())
}
