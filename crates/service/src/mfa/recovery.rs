//! Recovery codes: ten single-use codes made when the factor is turned on, shown once, kept
//! as SHA-256 digests; a regeneration (password and a code) replaces them all.

use super::proof::Proof;
use super::{account_owner, RecoveryCodes, SecondFactor, WRONG_PASSWORD_OR_CODE};
use crate::audit::Event;
use crate::auth::Authorized;
use crate::error::ServiceError;
use crate::mfa::Mfa;
use aigw_domain::access::op;
use aigw_domain::mfa::{RecoveryCode, RECOVERY_CODE_COUNT};
use aigw_domain::{AuditAction, UserId};
use aigw_persistence::mfa::{self, RecoveryCodeRow};
use aigw_persistence::transaction;
use chrono::{DateTime, Utc};
use rand::rngs::OsRng;

/// [`RECOVERY_CODE_COUNT`] new codes of `user_id`: the rows to store and the codes to show.
pub(crate) fn new_codes(user_id: &str, now: DateTime<Utc>) -> (Vec<RecoveryCodeRow>, Vec<String>) {
    (0..RECOVERY_CODE_COUNT)
        .map(|_| {
            let code = RecoveryCode::generate(&mut OsRng);
            let row = RecoveryCodeRow {
                id: aigw_domain::RecoveryCodeId::generate(),
                user_id: UserId::from(user_id),
                code_hash: code.digest().into_string(),
                created_at: now.naive_utc(),
                used_at: None,
            };
            (row, code.display())
        })
        .unzip()
}

/// The `mfa_recovery_code_used` event for `proof` when it is a recovery code, used for
/// `purpose` (`login`, `disable`, `regenerate`).
pub(crate) fn used_event(
    proof: &Proof,
    user_id: &str,
    purpose: &str,
    now: DateTime<Utc>,
) -> Option<Event> {
    matches!(proof, Proof::RecoveryCode(_)).then(|| {
        Event::new(AuditAction::MfaRecoveryCodeUsed, Some(user_id), Some(user_id), now)
            .target(user_id)
            .details(serde_json::json!({"purpose": purpose}))
    })
}

impl Mfa {
    /// Replaces every recovery code of the caller with ten new ones, returned once; needs
    /// their password and a current code (or one of the old recovery codes).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `password` (longer than the policy's maximum) or `mfa`
    /// (not enabled); [`ServiceError::Unauthorized`] when the password or the code is wrong or
    /// the code was already used; [`ServiceError::Unavailable`] when the database is down.
    pub async fn mfa_regenerate_recovery_codes(
        &self,
        principal: &Authorized<op::ManageAccount>,
        password: String,
        factor: &SecondFactor,
    ) -> Result<RecoveryCodes, ServiceError> {
        let user_id = account_owner(principal)?;
        let proof = self.password_and_factor(&user_id, password, factor).await?;
        let now = self.clock.now();
        let (rows, codes) = new_codes(&user_id, now);
        let event = Event::new(
            AuditAction::MfaRecoveryCodesRegenerated,
            Some(&user_id),
            Some(&user_id),
            now,
        )
        .target(&user_id)
        .details(serde_json::json!({"method": factor.method(), "recovery_codes": rows.len()}));
        let used = used_event(&proof, &user_id, "regenerate", now);
        let enabled_at = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !proof.claim(conn, &user_id, now)? {
                        return Ok(None);
                    }
                    mfa::replace_recovery_codes(conn, &user_id, &rows)?;
                    event.insert(conn)?;
                    used.iter().try_for_each(|e| e.insert(conn))?;
                    let totp = mfa::find_totp(conn, &user_id)?;
                    Ok::<_, ServiceError>(totp.and_then(|t| t.enabled_at))
                })
            })
            .await?
            .ok_or_else(|| ServiceError::rejected(WRONG_PASSWORD_OR_CODE))?;
        Ok(RecoveryCodes { codes, enabled_at: enabled_at.and_utc() })
    }
}
