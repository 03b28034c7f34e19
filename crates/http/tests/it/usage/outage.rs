//! The database away under load: no record lost.
