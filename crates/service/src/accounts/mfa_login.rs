//! Login with the second factor on: the MFA challenge a right password gets instead of
//! tokens, and its completion with a code into a session made with `pwd` and `otp`.
//!
//! A challenge is a row of `mfa_challenges` found by its token's digest, so any node can
//! complete it. Every try first counts an attempt by a compare-and-set that also checks the
//! challenge is unused, unexpired and under [`MAX_CHALLENGE_ATTEMPTS`]; so a challenge is tried
//! at most five times in all, whatever runs concurrently, and the fifth wrong code says that it
//! is dead. The completion (challenge used, code's step or recovery code claimed, session
//! stored) is one transaction: of two concurrent completions at most one wins.

use crate::accounts::sessions::ClientInfo;
use crate::accounts::Accounts;
use crate::audit::Event;
use crate::error::ServiceError;
use crate::mfa::proof::Proof;
use crate::mfa::{MfaChallenge, SecondFactor};
use crate::views::TokenSet;
use aigw_domain::mfa::{
    MfaToken, SessionAmr, FAILED_CODES_WINDOW_SECS, MAX_CHALLENGE_ATTEMPTS,
    MAX_FAILED_CODES_PER_WINDOW,
};
use aigw_domain::UserId;
use aigw_domain::{time, AuditAction};
use aigw_persistence::mfa::{self, ChallengeRow, TotpRow};
use aigw_persistence::models::UserRow;
use aigw_persistence::{transaction, users};
use chrono::Duration;
use rand::rngs::OsRng;

/// The answer for a challenge token that is unknown, used, or not one of ours.
const INVALID_CHALLENGE: &str =
    "the MFA token is invalid or was already used; log in again with your password";
/// The answer for a challenge past its lifetime.
const EXPIRED_CHALLENGE: &str = "the MFA challenge has expired; log in again with your password";
/// The answer once a challenge has had its five attempts.
const DEAD_CHALLENGE: &str = "too many wrong codes: this MFA challenge is dead after 5 failed \
     attempts; log in again with your password";
/// The answer for a wrong (or already used) code while attempts are left.
const WRONG_CODE: &str = "the code is wrong, expired or was already used";

/// What a counted attempt found.
enum Attempt {
    /// The attempt was counted; the challenge, the user's factor and account.
    Open(Box<(ChallengeRow, Option<TotpRow>, Option<UserRow>)>),
    /// Not counted: why the challenge is closed (`None`: unknown).
    Closed(Option<ChallengeRow>),
}

impl Accounts {
    /// Starts an MFA challenge for `user_id` if their factor is on (`None`: it is not, and the
    /// login goes on without one). The user's challenges that ended before the failed-codes
    /// window are deleted on the way.
    ///
    /// # Errors
    /// [`ServiceError::RateLimited`] (`limit` [`MAX_FAILED_CODES_PER_WINDOW`], no scope) when
    /// the account got that many wrong codes within [`FAILED_CODES_WINDOW_SECS`];
    /// [`ServiceError::Unavailable`] when the database is down.
    pub(crate) async fn mfa_challenge_for(
        &self,
        user_id: &str,
    ) -> Result<Option<MfaChallenge>, ServiceError> {
        let token = MfaToken::generate(&mut OsRng);
        let now = self.clock.now();
        let ttl = i64::try_from(self.config.mfa_challenge_ttl_secs.max(1)).unwrap_or(300);
        let expires_at = now + Duration::try_seconds(ttl).unwrap_or(Duration::minutes(5));
        let row = ChallengeRow {
            id: aigw_domain::MfaChallengeId::generate(),
            token_hash: token.digest().into_string(),
            user_id: UserId::from(user_id),
            created_at: now.naive_utc(),
            expires_at: expires_at.naive_utc(),
            attempts: 0,
            used_at: None,
        };
        let window = Duration::seconds(FAILED_CODES_WINDOW_SECS);
        let since = (now - window).naive_utc();
        let started = self
            .db
            .run(move |conn| {
                let user_id = row.user_id.clone();
                if !mfa::totp_enabled(conn, &user_id)? {
                    return Ok(false);
                }
                let (failed, oldest) = mfa::failed_attempts_since(conn, &user_id, since)?;
                if failed >= MAX_FAILED_CODES_PER_WINDOW {
                    // Again once the oldest failing challenge leaves the window.
                    let reset = oldest.map_or(now + window, |t| t.and_utc() + window);
                    let wait = (reset - now).num_seconds().max(1);
                    return Err(ServiceError::RateLimited {
                        limit: u32::try_from(MAX_FAILED_CODES_PER_WINDOW).unwrap_or(u32::MAX),
                        remaining: 0,
                        reset: reset.timestamp(),
                        retry_after_secs: u64::try_from(wait).unwrap_or(1),
                        scope: None,
                    });
                }
                mfa::insert_challenge(conn, &row, since)?;
                Ok(true)
            })
            .await?;
        Ok(started.then(|| MfaChallenge {
            mfa_token: token.expose().to_owned(),
            expires_at,
            expires_in: u64::try_from(ttl).unwrap_or(0),
        }))
    }

    /// Completes a login with the MFA challenge `mfa_token` and a second factor: a new
    /// session (its access tokens carry `amr: ["pwd", "otp"]`, kept across refresh) and its
    /// token set, as a login without a second factor answers. The code's time step (or the
    /// recovery code) is used up; the challenge completes once.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the token is malformed, unknown, used or expired,
    /// when the code is wrong or already used (with the attempts left), and after the fifth
    /// wrong code (the challenge is dead: log in again); [`ServiceError::Unavailable`] when the
    /// database is down.
    pub async fn complete_mfa_login(
        &self,
        mfa_token: &str,
        factor: &SecondFactor,
        client: &ClientInfo,
    ) -> Result<TokenSet, ServiceError> {
        let token =
            MfaToken::parse(mfa_token).ok_or_else(|| ServiceError::rejected(INVALID_CHALLENGE))?;
        let digest = token.digest().into_string();
        let now = self.clock.now();
        let attempt = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // First statement: the attempt's compare-and-set.
                    let at = now.naive_utc();
                    if !mfa::reserve_attempt(conn, &digest, at, MAX_CHALLENGE_ATTEMPTS)? {
                        return Ok(Attempt::Closed(mfa::find_challenge(conn, &digest)?));
                    }
                    let challenge = mfa::find_challenge(conn, &digest)?.ok_or_else(|| {
                        ServiceError::Internal("a counted challenge vanished".to_owned())
                    })?;
                    let user_id = challenge.user_id.clone();
                    let totp = mfa::find_totp(conn, &user_id)?;
                    let user = users::find_by_id(conn, &user_id)?;
                    Ok::<_, ServiceError>(Attempt::Open(Box::new((challenge, totp, user))))
                })
            })
            .await?;
        let (challenge, totp, user) = match attempt {
            Attempt::Open(open) => *open,
            Attempt::Closed(None) => return Err(ServiceError::rejected(INVALID_CHALLENGE)),
            Attempt::Closed(Some(c)) => {
                let hint = if c.used_at.is_some() {
                    INVALID_CHALLENGE
                } else if c.attempts >= MAX_CHALLENGE_ATTEMPTS {
                    DEAD_CHALLENGE
                } else {
                    EXPIRED_CHALLENGE
                };
                return Err(ServiceError::rejected(hint));
            }
        };
        // The factor turned off or the account disabled since the password was checked.
        let (Some(totp), Some(user)) =
            (totp.filter(|t| t.enabled_at.is_some()), user.filter(|u| u.disabled_at.is_none()))
        else {
            return Err(ServiceError::rejected(INVALID_CHALLENGE));
        };
        let proof = self.mfa.proof_of(&totp, factor)?;
        let outcome = match proof {
            Some(proof) => self.open_session(&challenge, &user, proof, factor, client).await?,
            None => None,
        };
        match outcome {
            Some(set) => Ok(set),
            None => Err(self.failed_attempt(&challenge, factor, now).await),
        }
    }

    /// The completion's transaction: the challenge used, the proof claimed, the session
    /// stored. `None` when the proof was already used (nothing changes).
    async fn open_session(
        &self,
        challenge: &ChallengeRow,
        user: &UserRow,
        proof: Proof,
        factor: &SecondFactor,
        client: &ClientInfo,
    ) -> Result<Option<TokenSet>, ServiceError> {
        let now = self.clock.now();
        // The session and its tokens take the time their verification reads (the system's).
        let started = time::now();
        let (mut session, refresh_row, refresh) = self.new_session(&user.id, client, started);
        session.amr = Some(SessionAmr::PasswordAndOtp.as_storage().to_owned());
        let amr = SessionAmr::PasswordAndOtp.values();
        let event = Event::new(AuditAction::LoginSucceeded, Some(&user.id), Some(&user.id), now)
            .target(&session.id)
            .details(
                serde_json::json!({"email": user.email, "amr": amr, "method": factor.method()}),
            );
        let used = crate::mfa::recovery::used_event(&proof, &user.id, "login", now);
        let challenge_id = challenge.id.clone();
        let stored = session.clone();
        let opened = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !mfa::complete_challenge(conn, &challenge_id, now.naive_utc())? {
                        return Err(ServiceError::rejected(INVALID_CHALLENGE));
                    }
                    if !proof.claim(conn, &stored.user_id, now)? {
                        return Err(ServiceError::rejected(WRONG_CODE)); // rolls back
                    }
                    if !users::lock_if_enabled(conn, &stored.user_id)? {
                        return Err(ServiceError::rejected(INVALID_CHALLENGE));
                    }
                    Self::store_session(conn, &stored, &refresh_row)?;
                    event.insert(conn)?;
                    used.iter().try_for_each(|e| e.insert(conn))?;
                    Ok(())
                })
            })
            .await;
        match opened {
            Ok(()) => {}
            Err(ServiceError::Unauthorized { hint: WRONG_CODE, .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        tracing::info!(user_id = %user.id, session_id = %session.id, "login with a second factor");
        self.token_set(user, &session, &refresh, started).map(Some)
    }

    /// Records a failed attempt and builds its refusal: the fifth says the challenge is dead.
    async fn failed_attempt(
        &self,
        challenge: &ChallengeRow,
        factor: &SecondFactor,
        now: chrono::DateTime<chrono::Utc>,
    ) -> ServiceError {
        let dead = challenge.attempts >= MAX_CHALLENGE_ATTEMPTS;
        let event =
            Event::new(AuditAction::MfaChallengeFailed, Some(&challenge.user_id), None, now)
                .target(&challenge.id)
                .details(serde_json::json!({
                    "method": factor.method(),
                    "attempts": challenge.attempts,
                    "attempts_left": (MAX_CHALLENGE_ATTEMPTS - challenge.attempts).max(0),
                    "challenge_dead": dead,
                }));
        crate::audit::record_alone(&self.db, event).await;
        tracing::info!(event = "mfa_challenge_failed", user_id = %challenge.user_id, dead, "wrong second-factor code");
        ServiceError::rejected(if dead { DEAD_CHALLENGE } else { WRONG_CODE })
    }
}
