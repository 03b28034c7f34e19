//! Administration and the audit trail: what an administrator does with every user, invitation
//! and API key ([`manage`]; [`Admin`], in [`caller`], is the proof that a caller may), and the audit trail that
//! every use case writes to and administrators and users read ([`audit`]).

pub mod audit;
pub mod caller;
pub mod manage;

pub use caller::Admin;
pub use manage::{CreatedInvitation, OpenInvitation, UserUpdate};
