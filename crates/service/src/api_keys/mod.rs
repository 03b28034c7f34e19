//! API keys: creation, listing, rotation and revocation by their owner ([`manage`]), and the
//! policy a request sets on a key (budget, rpm/tpm, models, expiry: [`policy`]). Teams' keys are
//! `crate::teams`', leaked keys' revocation `crate::leaks`'.

pub mod manage;
pub mod policy;

pub use manage::NewApiKey;
pub use policy::{ApiKeyPatch, KeyPolicyRequest};
