//! Single sign-on's shared vocabulary: who an OpenID Connect provider says signed in.

/// Who signed in, as the provider's verified ID token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoIdentity {
    /// The provider's stable id of the person (`sub`).
    pub subject: String,
    /// The address it asserts (`email`).
    pub email: Option<String>,
    /// Whether it asserts the address is verified (`email_verified`; absent: false).
    pub email_verified: bool,
    /// The person's name (`name`).
    pub name: Option<String>,
    /// How the provider authenticated them (`amr`).
    pub amr: Vec<String>,
    /// The groups the provider lists (the configured groups claim; empty when absent).
    pub groups: Vec<String>,
}
