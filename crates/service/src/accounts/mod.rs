//! Accounts: registration, login and the current user ([`registration`]), sessions and the
//! rotation of their refresh tokens ([`sessions`]), and what a user does with their own account
//! ([`self_service`]: password, sessions, audit trail). Account e-mail lives in
//! `crate::account_email`, the second factor in `crate::mfa`; the credentials they are built on
//! (`crate::password`, `crate::tokens`) belong to the crate's kernel, as `crate::auth` holds them.

pub mod registration;
pub mod self_service;
pub mod sessions;
