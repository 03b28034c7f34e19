//! `[sso]`: the OpenID Connect providers people may sign in with (docs/sso.md). Shared
//! ground: the sign-in ([`crate::sso`]) and the accounts it makes ([`crate::accounts`]) read it.

use serde::Deserialize;

/// `[sso]`: single sign-on through OpenID Connect providers.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SsoConfig {
    /// `[[sso.providers]]`: the providers, each a button on the console's login page.
    pub providers: Vec<SsoProviderConfig>,
    /// How long a sign-in may take between leaving for the provider and coming back, in
    /// seconds (default 600; 60 to 3600).
    pub sign_in_ttl_secs: u64,
    /// The exact URLs single-page applications may have their sign-ins end at (with a
    /// one-time code to exchange at `POST /api/v1/auth/sso/exchange`); none by default.
    pub app_redirect_uris: Vec<String>,
}

impl Default for SsoConfig {
    fn default() -> Self {
        Self { providers: Vec::new(), sign_in_ttl_secs: 600, app_redirect_uris: Vec::new() }
    }
}

/// One OpenID Connect provider (`[[sso.providers]]`).
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SsoProviderConfig {
    /// Its id in URLs and in the accounts it signs in (`/sso/<id>/start`): 1 to 32 lower-case
    /// letters, digits, `-` or `_`.
    pub id: String,
    /// What the login page's button says (`Sign in with <name>`).
    pub name: String,
    /// The issuer URL: its `/.well-known/openid-configuration` is read, and every ID token
    /// must name exactly this issuer.
    pub issuer: String,
    /// The client id registered at the provider (the ID tokens' audience).
    pub client_id: String,
    /// The client secret, for a confidential client (`None`: a public client, PKCE only).
    pub client_secret: Option<String>,
    /// Scopes asked for besides `openid` (default `email`, `profile`).
    pub scopes: Vec<String>,
    /// The e-mail domains whose people may sign in (and get an account on their first
    /// sign-in); empty: any domain.
    pub allowed_domains: Vec<String>,
    /// Whether a sign-in with the address of an existing account that has no identity at
    /// this provider signs in to that account: only when the provider asserts
    /// `email_verified`. Off by default: the sign-in is refused instead, so that a provider
    /// that lets people choose their address cannot take an account over.
    pub link_existing_accounts: bool,
    /// The claim that lists the person's groups, in the ID token and in the userinfo answer
    /// (default `groups`).
    pub groups_claim: String,
    /// Whether each sign-in reads the provider's userinfo endpoint (when its discovery
    /// document lists one) for more groups (default true); the ID token's are read anyway.
    pub read_userinfo: Option<bool>,
    /// `[[sso.providers.team_rules]]`: team memberships granted by group, applied on every
    /// sign-in (added, changed, and removed once the group no longer grants them).
    pub team_rules: Vec<SsoTeamRule>,
    /// Groups whose members are platform admins (role `admin`), checked on every sign-in:
    /// the role is taken back once none of them lists the account, when these groups gave
    /// it (a role given by hand stays).
    pub admin_groups: Vec<String>,
    /// Whether a rule naming a team by `team` that no team has makes that team on the first
    /// sign-in it applies to (off: the rule grants nothing, with a warning in the log).
    pub create_missing_teams: bool,
}

/// A group rule (`[[sso.providers.team_rules]]`): members of `group` at the provider are
/// members of a team, named by id (`team_id`) or by name (`team`), with `role`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SsoTeamRule {
    /// The group, as the groups claim lists it.
    pub group: String,
    /// The team's id (or `team`).
    pub team_id: String,
    /// The team's name (or `team_id`): the one team of that name when the rule first
    /// applies (several: the rule grants nothing), made then when none has it and the
    /// provider's `create_missing_teams` is on; that team from then on, renamed or not.
    pub team: String,
    /// `member` (default), `admin` or `owner`.
    pub role: String,
}

impl SsoTeamRule {
    /// The rule's role (`member` when unset).
    pub fn role(&self) -> aigw_domain::TeamRole {
        aigw_domain::TeamRole::parse(&self.role, "role").unwrap_or(aigw_domain::TeamRole::Member)
    }
}

impl std::fmt::Debug for SsoProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoProviderConfig")
            .field("id", &self.id)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl SsoProviderConfig {
    /// The scopes asked for besides `openid`.
    pub fn scopes(&self) -> Vec<String> {
        if self.scopes.is_empty() {
            vec!["email".to_owned(), "profile".to_owned()]
        } else {
            self.scopes.clone()
        }
    }

    /// The claim that lists groups.
    pub fn groups_claim(&self) -> &str {
        if self.groups_claim.is_empty() {
            "groups"
        } else {
            &self.groups_claim
        }
    }

    /// Whether sign-ins read the userinfo endpoint for groups.
    pub fn reads_userinfo(&self) -> bool {
        self.read_userinfo.unwrap_or(true)
    }

    /// Whether `email`'s domain may sign in.
    pub fn allows(&self, email: &str) -> bool {
        self.allowed_domains.is_empty() || aigw_domain::domain_in(email, &self.allowed_domains)
    }
}

impl SsoConfig {
    /// How long a sign-in may take, in seconds.
    pub fn sign_in_ttl_secs(&self) -> u64 {
        self.sign_in_ttl_secs.clamp(60, 3600)
    }

    /// Checks what the types alone do not: ids well-formed and unique, issuers http(s) URLs,
    /// client ids present.
    ///
    /// # Errors
    /// A sentence naming the provider and the setting.
    pub fn validate(&self) -> Result<(), String> {
        for uri in &self.app_redirect_uris {
            let parsed = url::Url::parse(uri)
                .map_err(|e| format!("sso.app_redirect_uris: {uri:?} is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "https" | "http") || parsed.fragment().is_some() {
                return Err(format!(
                    "sso.app_redirect_uris: {uri:?} must be an http(s) URL without a fragment"
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for p in &self.providers {
            let id_ok = (1..=32).contains(&p.id.len())
                && p.id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !id_ok {
                return Err(format!(
                    "sso.providers: id {:?} must be 1 to 32 lower-case letters, digits, - or _",
                    p.id
                ));
            }
            if !seen.insert(p.id.as_str()) {
                return Err(format!("sso.providers: id {:?} is used twice", p.id));
            }
            let issuer = url::Url::parse(&p.issuer).map_err(|e| {
                format!("sso.providers[{}].issuer {:?} is not a URL: {e}", p.id, p.issuer)
            })?;
            if !matches!(issuer.scheme(), "https" | "http") {
                return Err(format!("sso.providers[{}].issuer must be an http(s) URL", p.id));
            }
            if p.client_id.trim().is_empty() {
                return Err(format!("sso.providers[{}].client_id is empty", p.id));
            }
            for rule in &p.team_rules {
                let role_ok = rule.role.is_empty()
                    || aigw_domain::TeamRole::parse(&rule.role, "role").is_ok();
                let one_team = rule.team_id.is_empty() != rule.team.trim().is_empty();
                if rule.group.is_empty() || !one_team || !role_ok {
                    return Err(format!(
                        "sso.providers[{}].team_rules: each rule needs group, one of team_id \
                         and team, and a role of member, admin or owner",
                        p.id
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(id: &str) -> SsoProviderConfig {
        SsoProviderConfig {
            id: id.to_owned(),
            issuer: "https://login.example.com".to_owned(),
            client_id: "aigw".to_owned(),
            ..SsoProviderConfig::default()
        }
    }

    fn rule(group: &str, team_id: &str, role: &str) -> SsoTeamRule {
        SsoTeamRule {
            group: group.into(),
            team_id: team_id.into(),
            role: role.into(),
            ..SsoTeamRule::default()
        }
    }

    #[test]
    fn providers_are_checked_at_start() {
        let by_name = SsoTeamRule { team: "Platform".into(), ..rule("ops", "", "owner") };
        let rules = vec![rule("eng", "t1", ""), rule("leads", "t1", "admin"), by_name];
        let ok = SsoConfig {
            providers: vec![SsoProviderConfig { team_rules: rules, ..provider("corp") }],
            ..SsoConfig::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        for (bad, why) in [
            (vec![provider("Corp")], "lower-case"),
            (vec![provider("")], "lower-case"),
            (vec![provider("corp"), provider("corp")], "used twice"),
            (vec![SsoProviderConfig { issuer: "ftp://x".into(), ..provider("a") }], "http(s)"),
            (vec![SsoProviderConfig { issuer: "not a url".into(), ..provider("a") }], "not a URL"),
            (vec![SsoProviderConfig { client_id: " ".into(), ..provider("a") }], "client_id"),
            (
                vec![SsoProviderConfig {
                    team_rules: vec![rule("g", "t", "boss")],
                    ..provider("a")
                }],
                "team_rules",
            ),
            (
                vec![SsoProviderConfig { team_rules: vec![rule("", "t", "")], ..provider("a") }],
                "team_rules",
            ),
            (
                vec![SsoProviderConfig {
                    team_rules: vec![SsoTeamRule { team: "eng".into(), ..rule("g", "t", "") }],
                    ..provider("a")
                }],
                "one of team_id and team",
            ),
            (
                vec![SsoProviderConfig { team_rules: vec![rule("g", "", "")], ..provider("a") }],
                "one of team_id and team",
            ),
        ] {
            let config = SsoConfig { providers: bad, ..SsoConfig::default() };
            let error = config.validate().err().unwrap_or_default();
            assert!(error.contains(why), "{why}: {error}");
        }
        for uri in ["not a url", "ftp://app.test/cb", "https://app.test/cb#x"] {
            let config = SsoConfig { app_redirect_uris: vec![uri.into()], ..SsoConfig::default() };
            let error = config.validate().err().unwrap_or_default();
            assert!(error.contains("app_redirect_uris"), "{uri}: {error}");
        }
        let app = SsoConfig {
            app_redirect_uris: vec!["https://app.test/callback?x=1".into()],
            ..SsoConfig::default()
        };
        assert_eq!(app.validate(), Ok(()));
    }

    #[test]
    fn domains_are_matched_whole_and_case_blind() {
        let open = provider("a");
        assert!(open.allows("x@anything.test"));
        let closed = SsoProviderConfig { allowed_domains: vec!["Example.com".into()], ..open };
        assert!(closed.allows("x@example.COM"));
        assert!(!closed.allows("x@sub.example.com") && !closed.allows("x@evilexample.com"));
        assert_eq!(closed.scopes(), ["email", "profile"]);
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let with_secret =
            SsoProviderConfig { client_secret: Some("hunter2".into()), ..provider("a") };
        assert!(!format!("{with_secret:?}").contains("hunter2"));
    }
}
