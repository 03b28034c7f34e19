//! `auth.require_mfa_for_admins`: an admin is refused on the administrative endpoints until
//! their second factor is on, and with an access token unless its session was made with it.
//! Checked in [`crate::admin::Administration::authorize_admin`], the one place every administrative request
//! is authorized, after the role.

use crate::auth::Principal;
use crate::error::ServiceError;
use crate::mfa::Mfa;
use aigw_persistence::mfa;

/// The hint of an admin who has no second factor yet.
const ENROLL_HINT: &str = "this server requires administrators to use a second factor: enroll \
     with POST /api/v1/auth/mfa/totp/enroll and /confirm, then log in again with a code";

/// The hint of an admin whose session was made with the password alone.
const RELOGIN_HINT: &str = "this server requires administrators to use a second factor: log \
     in again and complete the login with a code (POST /api/v1/auth/login/mfa)";

impl Mfa {
    /// Refuses an admin without the second factor when `auth.require_mfa_for_admins` is on:
    /// the factor must be on (for an API key: its owner's), and an access token's session
    /// must have been made with it (`amr` has `otp`).
    ///
    /// # Errors
    /// [`ServiceError::SecondFactorRequired`] (403, `required: mfa`, `current: none` or
    /// `pwd`, with a hint); [`ServiceError::Unavailable`] when the database is down.
    pub(crate) async fn require_admin_second_factor(
        &self,
        principal: &Principal,
    ) -> Result<(), ServiceError> {
        if !self.config.require_mfa_for_admins {
            return Ok(());
        }
        let user_id = principal.user_id().to_owned();
        let enabled = self.db.run(move |conn| Ok(mfa::totp_enabled(conn, &user_id)?)).await?;
        if !enabled {
            return Err(ServiceError::SecondFactorRequired { current: "none", hint: ENROLL_HINT });
        }
        if let Principal::User { second_factor: false, .. } = principal {
            return Err(ServiceError::SecondFactorRequired { current: "pwd", hint: RELOGIN_HINT });
        }
        Ok(())
    }
}
