//! Every template of the console (`templates/console/`), compiled into the binary.

/// `(name, source)` of each template.
pub(crate) const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("../../templates/console/base.html")),
    ("macros.html", include_str!("../../templates/console/macros.html")),
    ("message.html", include_str!("../../templates/console/message.html")),
    // Before and around a session.
    ("login.html", include_str!("../../templates/console/login.html")),
    ("login_mfa.html", include_str!("../../templates/console/login_mfa.html")),
    ("sso_done.html", include_str!("../../templates/console/sso_done.html")),
    ("register.html", include_str!("../../templates/console/register.html")),
    ("password_reset.html", include_str!("../../templates/console/password_reset.html")),
    // API keys.
    ("keys.html", include_str!("../../templates/console/keys.html")),
    ("key_new.html", include_str!("../../templates/console/key_new.html")),
    ("key_secret.html", include_str!("../../templates/console/key_secret.html")),
    ("key_show.html", include_str!("../../templates/console/key_show.html")),
    // Platform administration.
    ("admin_users.html", include_str!("../../templates/console/admin_users.html")),
    ("admin_keys.html", include_str!("../../templates/console/admin_keys.html")),
    ("admin_invitations.html", include_str!("../../templates/console/admin_invitations.html")),
    (
        "admin_invitation_secret.html",
        include_str!("../../templates/console/admin_invitation_secret.html"),
    ),
    ("admin_audit.html", include_str!("../../templates/console/admin_audit.html")),
    // Teams (a team-key form and secret reuse `key_new.html` and `key_secret.html`).
    ("teams.html", include_str!("../../templates/console/teams.html")),
    ("team.html", include_str!("../../templates/console/team.html")),
    ("team_usage.html", include_str!("../../templates/console/team_usage.html")),
    ("team_webhook_secret.html", include_str!("../../templates/console/team_webhook_secret.html")),
    // Usage charts, sessions and the account.
    ("chart.html", include_str!("../../templates/console/chart.html")),
    ("usage.html", include_str!("../../templates/console/usage.html")),
    ("sessions.html", include_str!("../../templates/console/sessions.html")),
    ("account.html", include_str!("../../templates/console/account.html")),
    ("mfa.html", include_str!("../../templates/console/mfa.html")),
    ("mfa_codes.html", include_str!("../../templates/console/mfa_codes.html")),
];
