//! `aigw`: the account and credential service of an AI gateway.
//!
//! ```text
//! aigw [--config FILE]            serve (default)
//! aigw [--config FILE] migrate    apply database migrations and exit
//! aigw [--config FILE] admin create-user --email E [--name N] --role R [--password-stdin]
//! aigw [--config FILE] admin set-role --email E --role R
//! aigw [--config FILE] admin list-invitations
//! aigw [--config FILE] admin revoke-invitation --id ID
//! aigw [--config FILE] admin revoke-leaked [--file FILE] [--url URL] [--source SOURCE]
//! ```

use aigw_http::settings::Settings;
use aigw_http::startup::{self, Application};
use aigw_http::telemetry;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc returns the argon2 work areas (19 MiB each) to the OS after each hash: it is
/// compiled to map objects above 4 MiB for themselves (`MI_DEFAULT_ARENA_MAX_OBJECT_SIZE` in
/// `.cargo/config.toml`). glibc's malloc kept them cached per thread arena (374 MB resident
/// after a login burst with glibc, see `scripts/bench.sh` and docs/decisions.md "mimalloc as
/// the allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "aigw", version, about = "Account, token and API key service of an AI gateway")]
struct Cli {
    /// TOML configuration file (default: ./aigw.toml when it exists). Environment variables
    /// AIGW__SECTION__KEY override it.
    #[arg(long, short, global = true, env = "AIGW_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Operator commands on the configured database (no server needed): make the first admin.
    #[command(subcommand)]
    Admin(AdminCommand),
}

/// A role name on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum RoleArg {
    User,
    Admin,
}

impl From<RoleArg> for aigw_domain::Role {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::User => aigw_domain::Role::User,
            RoleArg::Admin => aigw_domain::Role::Admin,
        }
    }
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Create an account (password asked twice on the terminal, or read from stdin).
    CreateUser {
        /// E-mail address (the login name).
        #[arg(long)]
        email: String,
        /// Display name (default: the part of the e-mail before `@`).
        #[arg(long)]
        name: Option<String>,
        /// `user` or `admin`.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Read the password from standard input instead of asking.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set the role of an existing account.
    SetRole {
        /// E-mail address of the account.
        #[arg(long)]
        email: String,
        /// `user` or `admin`.
        #[arg(long, value_enum)]
        role: RoleArg,
    },
    /// Vouch for an account's e-mail address: it counts as verified, and the teams that invited
    /// it take it in (for a deployment without a mailer).
    VerifyEmail {
        /// E-mail address of the account.
        #[arg(long)]
        email: String,
    },
    /// List accounts, newest first (a table, or JSON with --json).
    ListUsers {
        /// Only addresses that start with this.
        #[arg(long)]
        email: Option<String>,
        /// At most this many (up to 10000).
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print one JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List API keys, newest first, never their secrets (a table, or JSON with --json).
    ListKeys {
        /// Only the keys of the account with this e-mail address.
        #[arg(long)]
        email: Option<String>,
        /// Only keys whose visible prefix starts with this (e.g. aigw_AbCd).
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many (up to 10000).
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print one JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List teams, newest first, with their members and budget (a table, or JSON with --json).
    ListTeams {
        /// Only teams whose name contains this.
        #[arg(long)]
        name: Option<String>,
        /// At most this many (up to 10000).
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print one JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the open invitations, to register and to join a team.
    ListInvitations,
    /// Revoke an open invitation (to register or to join a team).
    RevokeInvitation {
        /// The invitation's id.
        #[arg(long)]
        id: String,
    },
    /// Revoke the API keys among leaked secrets (one per line), on every node; prints one
    /// verdict per secret (never the secret).
    RevokeLeaked {
        /// File of secrets, one per line (default: standard input).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Where the secrets were found (kept in the audit trail).
        #[arg(long)]
        url: Option<String>,
        /// What kind of place that is (kept in the audit trail).
        #[arg(long)]
        source: Option<String>,
    },
}

async fn admin(settings: &Settings, command: AdminCommand) -> anyhow::Result<()> {
    use aigw_http::operator::{self, PasswordSource};
    match command {
        AdminCommand::CreateUser { email, name, role, password_stdin } => {
            let source =
                if password_stdin { PasswordSource::Stdin } else { PasswordSource::Prompt };
            let password = operator::read_password(source)?;
            operator::create_user(settings, &email, name.as_deref(), role.into(), password).await
        }
        AdminCommand::SetRole { email, role } => {
            operator::set_role(settings, &email, role.into()).await
        }
        AdminCommand::VerifyEmail { email } => operator::verify_email(settings, &email).await,
        AdminCommand::ListUsers { email, limit, json } => {
            operator::list_users(settings, email.as_deref(), limit, format(json)).await
        }
        AdminCommand::ListKeys { email, prefix, limit, json } => {
            let (email, prefix) = (email.as_deref(), prefix.as_deref());
            operator::list_keys(settings, email, prefix, limit, format(json)).await
        }
        AdminCommand::ListTeams { name, limit, json } => {
            operator::list_teams(settings, name.as_deref(), limit, format(json)).await
        }
        AdminCommand::ListInvitations => operator::list_invitations(settings).await,
        AdminCommand::RevokeInvitation { id } => operator::revoke_invitation(settings, &id).await,
        AdminCommand::RevokeLeaked { file, url, source } => {
            let secrets = operator::read_secrets(file.as_deref())?;
            operator::revoke_leaked(settings, secrets, url, source).await
        }
    }
}

/// The list format the `--json` flag asks for.
fn format(json: bool) -> aigw_http::operator::ListFormat {
    if json {
        aigw_http::operator::ListFormat::Json
    } else {
        aigw_http::operator::ListFormat::Table
    }
}

#[actix_web::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("aigw: {e:#}");
            return ExitCode::from(2);
        }
    };
    let command = cli.command.unwrap_or(Command::Serve);
    // An operator command's result alone goes to stdout; its log lines to stderr.
    let output = match command {
        Command::Serve => telemetry::LogOutput::Stdout,
        Command::Migrate | Command::Admin(_) => telemetry::LogOutput::Stderr,
    };
    let _log = match telemetry::init(&settings.log, &settings.telemetry, output) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("aigw: telemetry.otlp_endpoint: {e:#}");
            return ExitCode::from(2);
        }
    };
    let result = match command {
        Command::Migrate => startup::migrate(&settings).await.map(|_| ()),
        Command::Admin(command) => admin(&settings, command).await,
        Command::Serve => match Application::build(settings).await {
            Ok(app) => app.run_until_stopped().await.map_err(anyhow::Error::from),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("aigw: {e:#}");
            ExitCode::FAILURE
        }
    }
}
