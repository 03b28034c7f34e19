//! The operator commands `aigw admin create-user` and `aigw admin set-role`: they
//! work on the configured database without a running server, and are how the first admin is
//! made. Running nodes see a role change through the change feed. `aigw admin revoke-leaked`
//! revokes the keys among leaked secrets the same way.

use crate::settings::Settings;
use aigw_domain::Role;
use aigw_service::{ServiceError, UserView};
use anyhow::Context;
use std::io::{IsTerminal, Read};

/// Where the new account's password comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordSource {
    /// All of standard input (one trailing newline removed): for scripts.
    Stdin,
    /// Asked twice on the terminal, not echoed.
    Prompt,
}

/// Reads the password from `source`.
///
/// # Errors
/// When standard input cannot be read, the terminal is not one, or the two entries differ.
pub fn read_password(source: PasswordSource) -> anyhow::Result<String> {
    match source {
        PasswordSource::Stdin => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the password from stdin")?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            Ok(text.strip_suffix('\r').unwrap_or(text).to_owned())
        }
        PasswordSource::Prompt => {
            if !std::io::stdin().is_terminal() {
                anyhow::bail!("no terminal to ask the password on: pass --password-stdin");
            }
            let first = rpassword::prompt_password("Password: ").context("reading the password")?;
            let second = rpassword::prompt_password("Repeat: ").context("reading the password")?;
            if first != second {
                anyhow::bail!("the two passwords differ");
            }
            Ok(first)
        }
    }
}

/// A one-line cause of a refusal, naming the field as the API would.
fn explain(e: ServiceError) -> anyhow::Error {
    match e {
        ServiceError::Invalid(f) => anyhow::anyhow!("{}: {}", f.field, f.issue),
        ServiceError::NotFound { resource, id } => anyhow::anyhow!("no {resource} {id}"),
        other => anyhow::Error::from(other),
    }
}

fn describe(user: &UserView) -> String {
    format!("{} {} role={} id={}", user.email, user.name, user.role, user.id)
}

/// `aigw admin create-user`: creates an account with `role`; prints it.
///
/// # Errors
/// A bad field (e-mail taken, password policy), or the database.
pub async fn create_user(
    settings: &Settings,
    email: &str,
    name: Option<&str>,
    role: Role,
    password: String,
) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    let user = aigw_service::Services::new(context, None)
        .admin
        .create_user(email, password, name, role)
        .await
        .map_err(explain)?;
    println!("created {}", describe(&user));
    Ok(())
}

/// `aigw admin set-role`: sets the role of the account with e-mail `email`; prints it.
///
/// # Errors
/// No such account, or the database.
pub async fn set_role(settings: &Settings, email: &str, role: Role) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    let user = aigw_service::Services::new(context, None)
        .admin
        .set_role(email, role)
        .await
        .map_err(explain)?;
    println!("updated {}", describe(&user));
    Ok(())
}

/// `aigw admin verify-email`: the operator vouches for the address of the account with e-mail
/// `email` (verified, and its team invitations accepted); prints the account.
///
/// # Errors
/// No such account, or the database.
pub async fn verify_email(settings: &Settings, email: &str) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    let user = aigw_service::Services::new(context, None)
        .admin
        .verify_email(email)
        .await
        .map_err(explain)?;
    println!("verified {}", describe(&user));
    Ok(())
}

/// `aigw admin list-invitations`: every open invitation, to register and to join a team, one
/// per line, newest first (at most 1 000 of each kind).
///
/// # Errors
/// The database.
pub async fn list_invitations(settings: &Settings) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    for i in aigw_service::Services::new(context, None)
        .admin
        .list_open_invitations(1000)
        .await
        .map_err(explain)?
    {
        let kind = match &i.team_id {
            Some(team) => format!("team={team}"),
            None => "register".to_owned(),
        };
        let expires = i.expires_at.map(aigw_domain::time::format_timestamp);
        println!(
            "{} {} {kind} by={} created={} expires={}",
            i.id,
            i.email,
            i.created_by,
            aigw_domain::time::format_timestamp(i.created_at),
            expires.as_deref().unwrap_or("never"),
        );
    }
    Ok(())
}

/// `aigw admin revoke-invitation`: revokes open invitation `id` (to register or to join a
/// team).
///
/// # Errors
/// No such open invitation, or the database.
pub async fn revoke_invitation(settings: &Settings, id: &str) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    aigw_service::Services::new(context, None)
        .admin
        .revoke_invitation(id)
        .await
        .map_err(explain)?;
    println!("revoked invitation {id}");
    Ok(())
}

/// Reads leaked secrets one per line from `file`, or from standard input when `None`; blank
/// lines are skipped, white space around each line removed.
///
/// # Errors
/// When the file or standard input cannot be read (or is not UTF-8).
pub fn read_secrets(file: Option<&std::path::Path>) -> anyhow::Result<Vec<String>> {
    let text = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading secrets from {}", path.display()))?,
        None => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading secrets from stdin")?;
            text
        }
    };
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect())
}

/// `aigw admin revoke-leaked`: revokes every valid aigw key among `secrets` (as GitHub's
/// secret-scanning report would, on every node through the change feed) and prints, on
/// standard output alone, one line per secret in order:
/// `<label> <finding> <token SHA-256> [key_id=<id>] [key_prefix=<prefix>]`, then
/// `revoked <n> key(s), report <id>`. Never a secret.
///
/// # Errors
/// A bad secret (`secrets[i]`: empty, too long, NUL), `url` or `source`, or the database.
pub async fn revoke_leaked(
    settings: &Settings,
    secrets: Vec<String>,
    url: Option<String>,
    source: Option<String>,
) -> anyhow::Result<()> {
    let tokens =
        aigw_service::leaks::pasted_list(secrets, url, source).map_err(|e| explain(e.into()))?;
    let (context, _) = crate::startup::service_context(settings).await?;
    // The owners are e-mailed before the command exits (at most a minute of waiting).
    let mail = crate::startup::account_mail(settings, aigw_service::Metrics::default())?;
    let leaks = aigw_service::Services::new(context, Some(mail.clone())).leaks;
    let outcome = leaks.operator_revoke_leaked_keys(tokens).await.map_err(explain)?;
    if !mail.drain(std::time::Duration::from_secs(60)).await {
        eprintln!("some owners' notices were not sent within a minute (see the log)");
    }
    for verdict in &outcome.verdicts {
        let mut line = format!(
            "{} {} {}",
            verdict.label().as_str(),
            verdict.finding.as_str(),
            verdict.token_hash
        );
        if let Some(id) = &verdict.key_id {
            line.push_str(&format!(" key_id={id}"));
        }
        if let Some(prefix) = &verdict.key_prefix {
            line.push_str(&format!(" key_prefix={prefix}"));
        }
        println!("{line}");
    }
    println!("revoked {} key(s), report {}", outcome.leaked.len(), outcome.report_id);
    Ok(())
}
