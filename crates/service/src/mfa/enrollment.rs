//! Enrolling the TOTP factor, confirming it, reading its status and disabling it; and the
//! password-and-code check that disabling and regenerating recovery codes share.

use super::proof::Proof;
use super::totp::{qr_svg, TotpSecret};
use super::{
    account_owner, Enrollment, MfaStatus, RecoveryCodes, SecondFactor, WRONG_PASSWORD_OR_CODE,
};
use crate::audit::Event;
use crate::auth::Authorized;
use crate::error::ServiceError;
use crate::mfa::Mfa;
use crate::password::Verification;
use aigw_domain::access::op;
use aigw_domain::mfa::TotpCode;
use aigw_domain::UserId;
use aigw_domain::{AuditAction, FieldError};
use aigw_persistence::mfa::{self, TotpRow};
use aigw_persistence::{transaction, users};

impl Mfa {
    /// Starts (or restarts) the caller's TOTP enrollment: a new secret, pending until
    /// [`Mfa::mfa_confirm`]. A pending enrollment started earlier is replaced.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `mfa` when the factor is already on;
    /// [`ServiceError::Unauthorized`] when the account no longer exists;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn mfa_enroll(
        &self,
        principal: &Authorized<op::ManageAccount>,
    ) -> Result<Enrollment, ServiceError> {
        let user_id = account_owner(principal)?;
        let email = self.account_email(&user_id).await?;
        let secret = TotpSecret::generate();
        let now = self.clock.now();
        let row = TotpRow {
            user_id: user_id.clone(),
            secret_sealed: secret.seal(&self.totp_sealer(), &user_id)?,
            created_at: now.naive_utc(),
            enabled_at: None,
            last_used_step: None,
        };
        let event =
            Event::new(AuditAction::MfaEnrollmentStarted, Some(&user_id), Some(&user_id), now)
                .target(&user_id);
        let started = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !mfa::start_enrollment(conn, &row)? {
                        return Ok(false);
                    }
                    event.insert(conn)?;
                    Ok::<_, ServiceError>(true)
                })
            })
            .await?;
        if !started {
            return Err(
                FieldError::new("mfa", "is already enabled; disable it to enroll again").into()
            );
        }
        self.shown(&secret, &email)
    }

    /// The e-mail address of account `user_id` (the label of its enrollment).
    async fn account_email(&self, user_id: &UserId) -> Result<String, ServiceError> {
        let user = self.cache.user(user_id).await?;
        user.map(|u| u.email)
            .ok_or_else(|| ServiceError::revoked_credential("the account no longer exists"))
    }

    /// The caller's enrollment that waits for its confirming code, shown again (the console
    /// shows it until it is confirmed or restarted, so a reload loses nothing); `None` when
    /// none waits (the factor is off, or on already).
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the account no longer exists, or no signing key
    /// opens the sealed secret; [`ServiceError::Unavailable`] when the database is down.
    pub async fn mfa_pending(
        &self,
        principal: &Authorized<op::ManageAccount>,
    ) -> Result<Option<Enrollment>, ServiceError> {
        let user_id = account_owner(principal)?;
        let wanted = user_id.clone();
        let totp = self.db.run(move |conn| Ok(mfa::find_totp(conn, &wanted)?)).await?;
        let Some(totp) = totp.filter(|t| t.enabled_at.is_none()) else {
            return Ok(None);
        };
        self.enrollment_of(&user_id, &totp).await.map(Some)
    }

    /// `secret` in the three forms an enrollment shows, labelled with `email`.
    fn shown(&self, secret: &TotpSecret, email: &str) -> Result<Enrollment, ServiceError> {
        let otpauth_uri = secret.otpauth_uri(&self.config.mfa_issuer, email);
        let qr_svg = qr_svg(&otpauth_uri)?;
        Ok(Enrollment { secret: secret.base32(), otpauth_uri, qr_svg })
    }

    /// Confirms the caller's pending enrollment with a current `code`: the factor is on from
    /// now (that code's step counts as used), and ten new recovery codes are returned, once.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `code` when it matches none of the steps around now, on
    /// `mfa` when no enrollment is pending or the factor is already on;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn mfa_confirm(
        &self,
        principal: &Authorized<op::ManageAccount>,
        code: &TotpCode,
    ) -> Result<RecoveryCodes, ServiceError> {
        let user_id = account_owner(principal)?;
        let wanted = user_id.clone();
        let totp = self.db.run(move |conn| Ok(mfa::find_totp(conn, &wanted)?)).await?;
        let totp = match totp {
            None => {
                return Err(FieldError::new(
                    "mfa",
                    "has no enrollment waiting for a code; start one with POST /api/v1/auth/mfa/totp/enroll",
                )
                .into())
            }
            Some(t) if t.enabled_at.is_some() => {
                return Err(FieldError::new("mfa", "is already enabled").into())
            }
            Some(t) => t,
        };
        let secret = TotpSecret::open(&self.totp_sealer(), &user_id, &totp.secret_sealed)?;
        let now = self.clock.now();
        let step = secret.matching_step(code, now).ok_or_else(|| {
            FieldError::new(
                "code",
                "does not match the authenticator app's current code (check the device's time)",
            )
        })?;
        let (rows, codes) = super::recovery::new_codes(&user_id, now);
        let event = Event::new(AuditAction::MfaEnabled, Some(&user_id), Some(&user_id), now)
            .target(&user_id)
            .details(serde_json::json!({"recovery_codes": rows.len()}));
        let sealed = totp.secret_sealed;
        let enabled = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // First statement: the compare-and-set (SQLite's write lock at once).
                    if !mfa::enable_totp(conn, &user_id, &sealed, step, now.naive_utc())? {
                        return Ok(false);
                    }
                    mfa::replace_recovery_codes(conn, &user_id, &rows)?;
                    event.insert(conn)?;
                    Ok::<_, ServiceError>(true)
                })
            })
            .await?;
        if !enabled {
            return Err(FieldError::new(
                "mfa",
                "is already enabled, or its enrollment was replaced meanwhile",
            )
            .into());
        }
        Ok(RecoveryCodes { codes, enabled_at: now })
    }

    /// The caller's second factor: on or not, since when, pending, recovery codes left.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn mfa_status(
        &self,
        principal: &Authorized<op::ReadAccount>,
    ) -> Result<MfaStatus, ServiceError> {
        let (totp, left) = self.totp_of(principal.user_id()).await?;
        Ok(status_of(totp.as_ref(), left))
    }

    /// The caller's second factor ([`Self::mfa_status`]) and, when one waits, its enrollment
    /// ([`Self::mfa_pending`]), from one read: what the console's factor page shows.
    ///
    /// # Errors
    /// Those of [`Self::mfa_pending`].
    pub async fn mfa_overview(
        &self,
        principal: &Authorized<op::ManageAccount>,
    ) -> Result<(MfaStatus, Option<Enrollment>), ServiceError> {
        let user_id = account_owner(principal)?;
        let (totp, left) = self.totp_of(&user_id).await?;
        let status = status_of(totp.as_ref(), left);
        let pending = match totp.filter(|t| t.enabled_at.is_none()) {
            Some(totp) => Some(self.enrollment_of(&user_id, &totp).await?),
            None => None,
        };
        Ok((status, pending))
    }

    /// `user_id`'s TOTP row and unused recovery codes.
    async fn totp_of(&self, user_id: &UserId) -> Result<(Option<mfa::TotpRow>, i64), ServiceError> {
        let user_id = user_id.to_owned();
        self.db
            .run(move |conn| {
                let totp = mfa::find_totp(conn, &user_id)?;
                let left = mfa::unused_recovery_codes(conn, &user_id)?;
                Ok((totp, left))
            })
            .await
    }

    /// The waiting enrollment `totp` of `user_id`, shown again.
    async fn enrollment_of(
        &self,
        user_id: &UserId,
        totp: &mfa::TotpRow,
    ) -> Result<Enrollment, ServiceError> {
        let email = self.account_email(user_id).await?;
        let secret = TotpSecret::open(&self.totp_sealer(), user_id, &totp.secret_sealed)?;
        self.shown(&secret, &email)
    }

    /// Turns the caller's factor off, with their password and a current code or a recovery
    /// code; the secret and the recovery codes are deleted.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `password` (longer than the policy's maximum) or `mfa`
    /// (not enabled); [`ServiceError::Unauthorized`] when the password or the code is wrong or
    /// the code was already used; [`ServiceError::Unavailable`] when the database is down.
    pub async fn mfa_disable(
        &self,
        principal: &Authorized<op::ManageAccount>,
        password: String,
        factor: &SecondFactor,
    ) -> Result<(), ServiceError> {
        let user_id = account_owner(principal)?;
        let proof = self.password_and_factor(&user_id, password, factor).await?;
        let now = self.clock.now();
        let event = Event::new(AuditAction::MfaDisabled, Some(&user_id), Some(&user_id), now)
            .target(&user_id)
            .details(serde_json::json!({"method": factor.method()}));
        let used = super::recovery::used_event(&proof, &user_id, "disable", now);
        let done = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !proof.claim(conn, &user_id, now)? {
                        return Ok(false);
                    }
                    mfa::delete_totp(conn, &user_id)?;
                    event.insert(conn)?;
                    used.iter().try_for_each(|e| e.insert(conn))?;
                    Ok::<_, ServiceError>(true)
                })
            })
            .await?;
        if !done {
            return Err(ServiceError::rejected(WRONG_PASSWORD_OR_CODE));
        }
        Ok(())
    }

    /// Checks the account owner's password (on the argon2 threads, the same work whether or
    /// not it is right) and that `factor` matches their enabled factor: the proof to claim in
    /// the change's transaction.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `password` (longer than the policy's maximum) or `mfa`
    /// (not enabled); [`ServiceError::Unauthorized`] ([`WRONG_PASSWORD_OR_CODE`]) when the
    /// password or the code is wrong.
    pub(crate) async fn password_and_factor(
        &self,
        user_id: &str,
        password: String,
        factor: &SecondFactor,
    ) -> Result<Proof, ServiceError> {
        self.password_policy
            .check_length_bound(&password)
            .map_err(|e| FieldError::new("password", e.issue))?;
        let wanted = UserId::from(user_id);
        let (user, totp) = self
            .db
            .run(move |conn| {
                Ok((users::find_by_id(conn, &wanted)?, mfa::find_totp(conn, &wanted)?))
            })
            .await?;
        let Some(totp) = totp.filter(|t| t.enabled_at.is_some()) else {
            return Err(FieldError::new("mfa", "is not enabled").into());
        };
        let stored_hash = user.as_ref().map(|u| u.password_hash.clone());
        let verification = self.passwords.verify(password, stored_hash).await?;
        if verification == Verification::Mismatch || user.is_none() {
            return Err(ServiceError::rejected(WRONG_PASSWORD_OR_CODE));
        }
        self.proof_of(&totp, factor)?.ok_or_else(|| ServiceError::rejected(WRONG_PASSWORD_OR_CODE))
    }

    /// What `factor` proves against `totp` now: the step its code matches, or the recovery
    /// code's digest (checked when claimed); `None` for a code that matches no step.
    pub(crate) fn proof_of(
        &self,
        totp: &TotpRow,
        factor: &SecondFactor,
    ) -> Result<Option<Proof>, ServiceError> {
        match factor {
            SecondFactor::Totp(code) => {
                let secret =
                    TotpSecret::open(&self.totp_sealer(), &totp.user_id, &totp.secret_sealed)?;
                Ok(secret.matching_step(code, self.clock.now()).map(Proof::Step))
            }
            SecondFactor::RecoveryCode(code) => {
                Ok(Some(Proof::RecoveryCode(code.digest().into_string())))
            }
        }
    }
}

/// The status a TOTP row (if any) and `left` unused recovery codes make.
fn status_of(totp: Option<&mfa::TotpRow>, left: i64) -> MfaStatus {
    let enabled_at = totp.and_then(|t| t.enabled_at).map(|t| t.and_utc());
    MfaStatus {
        enabled: enabled_at.is_some(),
        enabled_at,
        pending: totp.is_some() && enabled_at.is_none(),
        recovery_codes_left: if enabled_at.is_some() {
            u32::try_from(left).unwrap_or(0)
        } else {
            0
        },
    }
}
