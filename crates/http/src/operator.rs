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

/// How a list is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFormat {
    /// Aligned columns under a header line; a sentence when the list is empty.
    Table,
    /// One JSON array (`[]` when empty).
    Json,
}

/// Prints `rows` under `header` as `format` says; `what` names the rows for an empty list
/// ("no users").
fn print_list(format: ListFormat, what: &str, header: &[&str], rows: Vec<Vec<String>>) {
    if format == ListFormat::Json {
        let objects: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                let fields =
                    header.iter().zip(row).map(|(k, v)| ((*k).to_owned(), v.clone().into()));
                serde_json::Value::Object(fields.collect())
            })
            .collect();
        println!("{}", serde_json::Value::Array(objects));
        return;
    }
    if rows.is_empty() {
        println!("no {what}");
        return;
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// `aigw admin list-users`: accounts, newest first, whose e-mail starts with `email` when
/// given, at most `limit`.
///
/// # Errors
/// The database.
pub async fn list_users(
    settings: &Settings,
    email: Option<&str>,
    limit: i64,
    format: ListFormat,
) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    let users = aigw_service::Services::new(context, None)
        .admin
        .list_users(email, limit)
        .await
        .map_err(explain)?;
    let rows = users
        .iter()
        .map(|u| {
            vec![
                u.id.to_string(),
                u.email.clone(),
                u.name.clone(),
                u.role.to_string(),
                if u.disabled { "disabled" } else { "active" }.to_owned(),
                u.email_verified_at.map_or_else(|| "no".to_owned(), |_| "yes".to_owned()),
                aigw_domain::time::format_timestamp(u.created_at),
            ]
        })
        .collect();
    let header = ["id", "email", "name", "role", "status", "verified", "created_at"];
    print_list(format, "users", &header, rows);
    Ok(())
}

/// `aigw admin list-keys`: API keys, newest first (of the account with e-mail `email`, whose
/// prefix starts with `prefix`, when given), at most `limit`; never a secret.
///
/// # Errors
/// No account has `email`, or the database.
pub async fn list_keys(
    settings: &Settings,
    email: Option<&str>,
    prefix: Option<&str>,
    limit: i64,
    format: ListFormat,
) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    let keys = aigw_service::Services::new(context, None)
        .admin
        .list_keys(email, prefix, limit)
        .await
        .map_err(explain)?;
    let rows = keys
        .iter()
        .map(|(k, owner)| {
            let state = if k.revoked_at.is_some() { "revoked" } else { "active" };
            vec![
                k.id.to_string(),
                k.key_prefix.clone(),
                k.name.clone(),
                owner.clone(),
                k.team_id.as_ref().map_or_else(String::new, ToString::to_string),
                state.to_owned(),
                aigw_domain::time::format_timestamp(k.created_at),
            ]
        })
        .collect();
    let header = ["id", "prefix", "name", "owner", "team_id", "status", "created_at"];
    print_list(format, "keys", &header, rows);
    Ok(())
}

/// `aigw admin list-teams`: teams, newest first, whose name contains `name` when given, at
/// most `limit`.
///
/// # Errors
/// The database.
pub async fn list_teams(
    settings: &Settings,
    name: Option<&str>,
    limit: i64,
    format: ListFormat,
) -> anyhow::Result<()> {
    let (context, _) = crate::startup::service_context(settings).await?;
    let teams = aigw_service::Services::new(context, None)
        .admin
        .list_teams(name, limit)
        .await
        .map_err(explain)?;
    let rows = teams
        .iter()
        .map(|t| {
            let budget = t.max_budget_micros.map_or_else(String::new, |m| {
                format!("{:.2}", aigw_domain::usage::micros_to_usd(u64::try_from(m).unwrap_or(0)))
            });
            vec![
                t.id.clone(),
                t.name.clone(),
                t.members.to_string(),
                budget,
                aigw_domain::time::format_timestamp(t.created_at),
            ]
        })
        .collect();
    print_list(format, "teams", &["id", "name", "members", "budget_usd", "created_at"], rows);
    Ok(())
}

/// `aigw admin list-invitations`: every open invitation, to register and to join a team, one
/// per line with its state (`pending`, `sent`; a team's `expired` ones too, which can be sent
/// again), newest first (at most 1 000 of each kind).
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
            "{} {} {kind} by={} created={} expires={} state={}",
            i.id,
            i.email,
            i.created_by,
            aigw_domain::time::format_timestamp(i.created_at),
            expires.as_deref().unwrap_or("never"),
            i.status.as_str(),
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
