//! The actions the audit trail records ([`AuditAction`]), by their stable `snake_case`
//! names: rows written by one version are read and filtered by every other, so a name is never
//! renamed or reused. What the trail holds is read back as a [`RecordedAction`], which keeps
//! a name this version does not know (written by a newer one) rather than failing the read.

use std::fmt;

macro_rules! actions {
    ($($variant:ident => $name:literal,)*) => {
        /// What an audit event records.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum AuditAction {
            $(
                #[doc = concat!("`", $name, "`.")]
                $variant,
            )*
        }

        impl AuditAction {
            /// Every action, in declaration order.
            pub const ALL: &'static [AuditAction] = &[$(AuditAction::$variant,)*];

            /// The stable storage and API name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(AuditAction::$variant => $name,)*
                }
            }
        }
    };
}

actions! {
    UserRegistered => "user_registered",
    LoginSucceeded => "login_succeeded",
    LoginFailed => "login_failed",
    RefreshReuseDetected => "refresh_reuse_detected",
    LoggedOut => "logged_out",
    SessionEnded => "session_ended",
    PasswordChanged => "password_changed",
    ApiKeyCreated => "api_key_created",
    ApiKeyUpdated => "api_key_updated",
    ApiKeyRotated => "api_key_rotated",
    ApiKeyRevoked => "api_key_revoked",
    ApiKeyDeleted => "api_key_deleted",
    UserDisabled => "user_disabled",
    UserEnabled => "user_enabled",
    RoleChanged => "role_changed",
    UserBudgetChanged => "user_budget_changed",
    InvitationCreated => "invitation_created",
    InvitationRevoked => "invitation_revoked",
    InvitationResent => "invitation_resent",
    SsoSignIn => "sso_sign_in",
    SsoSignInRefused => "sso_sign_in_refused",
    TeamCreated => "team_created",
    TeamUpdated => "team_updated",
    TeamDeleted => "team_deleted",
    MemberAdded => "member_added",
    MemberRoleChanged => "member_role_changed",
    MemberBudgetChanged => "member_budget_changed",
    MemberRemoved => "member_removed",
    MemberLeft => "member_left",
    TeamApiKeyCreated => "team_api_key_created",
    TeamInvitationCreated => "team_invitation_created",
    TeamInvitationRevoked => "team_invitation_revoked",
    TeamInvitationResent => "team_invitation_resent",
    TeamWebhookSet => "team_webhook_set",
    TeamWebhookRemoved => "team_webhook_removed",
    EmailVerified => "email_verified",
    EmailChangeRequested => "email_change_requested",
    EmailChanged => "email_changed",
    PasswordResetRequested => "password_reset_requested",
    PasswordReset => "password_reset",
    ApiKeyLeakReported => "api_key_leak_reported",
    MfaEnrollmentStarted => "mfa_enrollment_started",
    MfaEnabled => "mfa_enabled",
    MfaDisabled => "mfa_disabled",
    MfaRecoveryCodesRegenerated => "mfa_recovery_codes_regenerated",
    MfaChallengeFailed => "mfa_challenge_failed",
    MfaRecoveryCodeUsed => "mfa_recovery_code_used",
}

impl AuditAction {
    /// The action named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| a.as_str() == name)
    }

    /// The names of every action as one regular expression (`^(a|b|…)$`), as the OpenAPI
    /// description of the audit filters states it.
    pub fn pattern() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|a| a.as_str()).collect();
        format!("^({})$", names.join("|"))
    }
}

/// An action as the trail holds it: one this version knows, or the name another version wrote
/// (a newer version's action, read during a rolling upgrade or after a rollback), kept as
/// written so that one such row never makes the trail unreadable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordedAction {
    /// An action this version knows.
    Known(AuditAction),
    /// The stored name of an action this version does not know.
    Unknown(String),
}

impl RecordedAction {
    /// The stable storage and API name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Known(action) => action.as_str(),
            Self::Unknown(name) => name,
        }
    }
}

impl From<AuditAction> for RecordedAction {
    fn from(action: AuditAction) -> Self {
        Self::Known(action)
    }
}

impl From<String> for RecordedAction {
    fn from(name: String) -> Self {
        AuditAction::parse(&name).map_or(Self::Unknown(name), Self::Known)
    }
}

impl From<RecordedAction> for String {
    fn from(action: RecordedAction) -> Self {
        match action {
            RecordedAction::Known(action) => action.as_str().to_owned(),
            RecordedAction::Unknown(name) => name,
        }
    }
}

impl fmt::Display for RecordedAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.as_str()), Some(*action));
            let stored = String::from(RecordedAction::from(*action));
            assert_eq!(RecordedAction::from(stored), RecordedAction::Known(*action));
        }
        let mut names: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), AuditAction::ALL.len());
        assert_eq!(AuditAction::parse("root_granted"), None);
    }
}
