//! A presented second factor that matched ([`Proof`]), claimed in the transaction of the
//! change it allows: what enrollment, recovery and login challenges share.

use aigw_domain::UserId;
use aigw_persistence::mfa;
use aigw_persistence::{DbConnection, PersistenceError};
use chrono::{DateTime, Utc};

/// A presented second factor that matched the stored state, still to be claimed (used up)
/// inside the transaction of the change it allows.
#[derive(Debug, Clone)]
pub(crate) enum Proof {
    /// A TOTP code of this time step.
    Step(i64),
    /// The recovery code with this digest.
    RecoveryCode(String),
}

impl Proof {
    /// Uses the proof up: a compare-and-set on the user's last step or on the recovery code.
    /// Returns false when the step (or a later one) or the code was already used.
    pub(crate) fn claim(
        &self,
        conn: &mut DbConnection,
        user_id: &UserId,
        now: DateTime<Utc>,
    ) -> Result<bool, PersistenceError> {
        match self {
            Self::Step(step) => mfa::claim_step(conn, user_id, *step),
            Self::RecoveryCode(digest) => {
                mfa::use_recovery_code(conn, user_id, digest, now.naive_utc())
            }
        }
    }
}
