//! What admitting one call at one level holds ([`Admission`]), whether the call was admitted
//! by the counters or taken from a lease, and how close to a limit a call may be admitted at
//! an upper bound of its worst case ([`BOUND_HEADROOM`]). Shared by the leases and the key
//! limits above them.

use crate::governance::key_rates::{RateStatus, TokenReservation};
use crate::governance::reservation::Reservation;

/// How many more calls of the same upper bound a key must have room for, in its budget and
/// its `tpm_limit`, for a call to be admitted at the bound. Closer to a limit
/// the prompt is counted exactly, so that the bound's over-reservation never refuses a call
/// the exact count would admit but when more than this many calls run at once.
pub const BOUND_HEADROOM: i64 = 32;

/// What an admitted call holds at one level: where the level stands for the
/// `x-ratelimit-*` headers (`None`: no rpm/tpm limit), and its reservations.
#[derive(Debug, Default)]
pub struct Admission {
    /// The key's window after this call, when it has an `rpm_limit` or a `tpm_limit`.
    pub status: Option<RateStatus>,
    /// The budget's reservation (in Redis: also the call's tokens).
    pub reservation: Option<Reservation>,
    /// The tokens reserved in the database or memory window (with a `tpm_limit`).
    pub tokens: Option<TokenReservation>,
}

impl Admission {
    /// Gives back what this admission holds (a call refused by a later level): its budget
    /// reservation and its reserved tokens. Its request stays counted in its window: a
    /// refusal elsewhere may cost a level one request of its `rpm_limit`, never more room.
    pub(super) async fn release(self) {
        if let Some(reservation) = self.reservation {
            reservation.release().await;
        }
        if let Some(tokens) = self.tokens {
            tokens.settle(0);
        }
    }
}
