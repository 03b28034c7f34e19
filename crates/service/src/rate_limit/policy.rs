//! The named policies ([`Policy`]) and what a check counts against ([`LimitKey`]): what the
//! limiters and their configuration share.

use crate::auth::Principal;
use sha2::{Digest, Sha256};
use std::net::IpAddr;

/// A named rate-limit policy; its quota comes from [`Policies`](super::Policies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Registration, per client IP.
    Register,
    /// Login, per client IP and normalised e-mail.
    Login,
    /// Refresh-token rotation, per client IP.
    Refresh,
    /// The other account endpoints, per credential.
    Account,
    /// Chat completions and the model list, per API key.
    Ai,
    /// Failed authentication (a presented credential refused, a failed login or refresh), per
    /// client IP. Checked *before* any database or hashing work: an address that failed too
    /// often is refused at once, whatever it presents; successes are not counted.
    AuthFailure,
    /// Login attempts per client IP across all e-mail addresses (bounds the hashing one
    /// address can buy by rotating e-mails).
    LoginIp,
    /// Password reset requests, per client IP.
    PasswordReset,
    /// Password reset requests, per normalised e-mail address.
    PasswordResetEmail,
    /// Verification and e-mail change messages a user asks for, per user.
    EmailSend,
}

/// How many policies there are.
pub const POLICY_COUNT: usize = 10;

impl Policy {
    /// Every policy.
    pub const ALL: [Policy; POLICY_COUNT] = [
        Policy::Register,
        Policy::Login,
        Policy::Refresh,
        Policy::Account,
        Policy::Ai,
        Policy::AuthFailure,
        Policy::LoginIp,
        Policy::PasswordReset,
        Policy::PasswordResetEmail,
        Policy::EmailSend,
    ];

    /// The policy's name, as in the configuration and the `RateLimit` header fields.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Register => "register",
            Policy::Login => "login",
            Policy::Refresh => "refresh",
            Policy::Account => "account",
            Policy::Ai => "ai",
            Policy::AuthFailure => "auth_failure",
            Policy::LoginIp => "login_ip",
            Policy::PasswordReset => "password_reset",
            Policy::PasswordResetEmail => "password_reset_email",
            Policy::EmailSend => "email_send",
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Policy::Register => 0,
            Policy::Login => 1,
            Policy::Refresh => 2,
            Policy::Account => 3,
            Policy::Ai => 4,
            Policy::AuthFailure => 5,
            Policy::LoginIp => 6,
            Policy::PasswordReset => 7,
            Policy::PasswordResetEmail => 8,
            Policy::EmailSend => 9,
        }
    }
}

/// Whose requests are counted together: a 128-bit digest of the identifying parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitKey([u8; 16]);

impl LimitKey {
    fn digest(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        let full = hasher.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&full[..16]);
        Self(key)
    }

    /// The bytes that identify a client address: IPv4 as is, an IPv4-mapped IPv6 address as
    /// its IPv4 address, and other IPv6 addresses by their /64 prefix (one subscriber usually
    /// holds a whole /64, so counting single addresses would let them rotate freely).
    fn ip_bytes(ip: IpAddr) -> Vec<u8> {
        match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4.octets().to_vec(),
                None => v6.octets()[..8].to_vec(),
            },
        }
    }

    /// Key of a client address (`register`, `refresh`).
    pub fn client_ip(ip: IpAddr) -> Self {
        Self::digest(&[b"ip", &Self::ip_bytes(ip)])
    }

    /// Key of a login attempt: client address and e-mail, normalised as the login itself
    /// does (`aigw_domain::normalize_email`), so `A@x.io`, ` a@x.io` and `ａ@x.io` count
    /// together.
    pub fn login(ip: IpAddr, email: &str) -> Self {
        let email = aigw_domain::normalize_email(email);
        Self::digest(&[b"login", &Self::ip_bytes(ip), email.as_bytes()])
    }

    /// Key of a normalised e-mail address (`password_reset_email`), normalised as login does.
    pub fn email(email: &str) -> Self {
        let email = aigw_domain::normalize_email(email);
        Self::digest(&[b"email", email.as_bytes()])
    }

    /// Key of a user, whatever credential they present (`email_send`).
    pub fn user(user_id: &str) -> Self {
        Self::digest(&[b"user", user_id.as_bytes()])
    }

    /// Key of an authenticated caller: the user's session for an access token (so one
    /// session cannot starve the user's others), the key for an API key.
    pub fn principal(principal: &Principal) -> Self {
        match principal {
            Principal::User { user_id, session_id, .. } => {
                Self::digest(&[b"session", user_id.as_bytes(), session_id.as_bytes()])
            }
            Principal::ApiKey { key_id, .. } => Self::digest(&[b"api_key", key_id.as_bytes()]),
        }
    }

    /// The digest in lower-case hex (Redis key suffix).
    pub fn to_hex(&self) -> String {
        base16ct::lower::encode_string(&self.0)
    }

    pub(crate) fn bytes(&self) -> [u8; 16] {
        self.0
    }
}
