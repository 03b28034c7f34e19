//! `aigw`: the account and credential service of an AI gateway.
//!
//! ```text
//! aigw [--config FILE]            serve (default)
//! aigw [--config FILE] migrate    apply database migrations and exit
//! aigw [--config FILE] admin create-user --email E [--name N] --role R [--password-stdin]
//! aigw [--config FILE] admin set-role --email E --role R
//! aigw [--config FILE] admin list-invitations
//! aigw [--config FILE] admin revoke-invitation --id ID
//! ```

use aigw_http::settings::Settings;
use aigw_http::startup::{self, Application};
use aigw_http::telemetry;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc returns the 19 MiB argon2 work areas to the OS after each hash (with the
/// [`ALLOCATOR_SETTINGS`] that [`reexec_with_allocator_settings`] makes); glibc's malloc
/// kept them cached per thread arena (374 MB resident after a login burst with glibc, see
/// `scripts/bench.sh` and docs/decisions.md "Performance").
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
    /// List the open invitations, to register and to join a team.
    ListInvitations,
    /// Revoke an open invitation (to register or to join a team).
    RevokeInvitation {
        /// The invitation's id.
        #[arg(long)]
        id: String,
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
        AdminCommand::ListInvitations => operator::list_invitations(settings).await,
        AdminCommand::RevokeInvitation { id } => operator::revoke_invitation(settings, &id).await,
    }
}

/// mimalloc settings that aigw sets for itself: (variable, value). mimalloc reads them from
/// the environment when the process starts (before `main`).
///
/// - `MIMALLOC_ARENA_MAX_OBJECT_SIZE` (KiB): objects above 4 MiB, in practice only the 19 MiB
///   work area of each argon2id hash, are mapped from the OS for themselves and unmapped when
///   freed, at once and whatever the purge delay. Kept in an arena, that area stayed resident
///   on the idle hashing thread (44 MiB after one login against 23 MiB before it).
/// - `MIMALLOC_PURGE_DELAY` (ms): how long freed pages stay committed before mimalloc gives
///   them back. At 0 each small page a request's objects had emptied was given back and
///   faulted in again on the next one: ~2 300 `madvise` calls a second under chat load, each a
///   TLB shoot-down on the other core, 12-15 % of the chat call's CPU (docs/performance.md).
const ALLOCATOR_SETTINGS: [(&str, &str); 2] =
    [("MIMALLOC_ARENA_MAX_OBJECT_SIZE", "4096"), ("MIMALLOC_PURGE_DELAY", "10")];

/// Runs this binary again with the [`ALLOCATOR_SETTINGS`] it lacks (same process id), unless
/// every one of them is set (an operator's own values are kept) or the binary cannot be found
/// again (then nothing happens). mimalloc has no safe call to change its options at run time,
/// and this workspace has no `unsafe`, so they are set where mimalloc reads them: the
/// environment of a new process image (`exec`).
#[cfg(unix)]
fn reexec_with_allocator_settings() {
    use std::os::unix::process::CommandExt;
    let missing: Vec<(&str, &str)> = ALLOCATOR_SETTINGS
        .into_iter()
        .filter(|(name, _)| std::env::var_os(name).is_none())
        .collect();
    if missing.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let error =
        std::process::Command::new(exe).args(std::env::args_os().skip(1)).envs(missing).exec();
    // Only returns on failure: carry on with the allocator's defaults.
    eprintln!(
        "aigw: could not restart with its allocator settings ({error}); memory use stays higher"
    );
}

fn main() -> ExitCode {
    #[cfg(unix)]
    reexec_with_allocator_settings();
    run()
}

#[actix_web::main]
async fn run() -> ExitCode {
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
