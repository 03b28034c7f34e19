//! The invitation token format (`auth.registration = "invite"`): `aigwi_` + 44
//! random base62 characters (~262 bits). Shown once to the admin who creates it; only its
//! SHA-256 digest is stored. The prefix differs from API keys (`aigw_`) and refresh tokens
//! (`aigwr_`).

use crate::base62_random::{is_base62, random_base62};
use crate::digest::TokenDigest;
use rand_core::{CryptoRng, RngCore};
use std::fmt;

/// The prefix every invitation starts with.
pub const INVITATION_PREFIX: &str = "aigwi_";
/// Length of the random part, in base62 characters.
pub const INVITATION_RANDOM_LEN: usize = 44;

/// Where an invitation (to register, or to join a team) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvitationStatus {
    /// Open, never e-mailed (no mailer): the address learns of it otherwise.
    Pending,
    /// Open and e-mailed.
    Sent,
    /// Used: the account was registered, or the address joined the team.
    Accepted,
    /// Past its end of validity without being used: re-send it to open it again.
    Expired,
    /// Revoked.
    Revoked,
}

impl InvitationStatus {
    /// The state of an invitation revoked or not, accepted or not, past its end or not, and
    /// e-mailed or not, in that order of precedence.
    pub fn of(revoked: bool, accepted: bool, expired: bool, sent: bool) -> Self {
        if revoked {
            Self::Revoked
        } else if accepted {
            Self::Accepted
        } else if expired {
            Self::Expired
        } else if sent {
            Self::Sent
        } else {
            Self::Pending
        }
    }

    /// The state's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sent => "sent",
            Self::Accepted => "accepted",
            Self::Expired => "expired",
            Self::Revoked => "revoked",
        }
    }
}

/// An invitation token in clear text. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct InvitationSecret(String);

impl InvitationSecret {
    /// Generates a new invitation from `rng`, which must be a CSPRNG.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        Self(format!("{INVITATION_PREFIX}{}", random_base62(rng, INVITATION_RANDOM_LEN)))
    }

    /// Parses a presented invitation (prefix, length and alphabet). No I/O.
    pub fn parse(s: &str) -> Option<Self> {
        let rest = s.trim().strip_prefix(INVITATION_PREFIX)?;
        (rest.len() == INVITATION_RANDOM_LEN && is_base62(rest))
            .then(|| Self(format!("{INVITATION_PREFIX}{rest}")))
    }

    /// The token in clear, to be shown once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 digest under which the invitation is stored.
    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }
}

impl fmt::Debug for InvitationSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InvitationSecret(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_invitations_parse_and_others_do_not() {
        let secret = InvitationSecret::generate(&mut rand_core::OsRng);
        assert_eq!(InvitationSecret::parse(secret.expose()), Some(secret.clone()));
        assert!(!format!("{secret:?}").contains(secret.expose()));
        for bad in ["", "aigwi_", "aigwr_x", &secret.expose().replace("aigwi_", "aigw_")] {
            assert!(InvitationSecret::parse(bad).is_none(), "{bad}");
        }
    }
}
