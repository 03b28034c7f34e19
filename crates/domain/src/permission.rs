//! API key permissions and sets of them.

use crate::validation::FieldError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One permission an API key can carry. The five values are the contract's; `admin`
/// includes every other one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Access AI gateway endpoints (`POST /api/v1/ai/chat/completions`).
    AiGateway,
    /// Use proxy features.
    Proxy,
    /// Read access to resources (`GET /auth/me`, `GET /auth/api-keys`).
    Read,
    /// Write access to resources (revoke and delete API keys).
    Write,
    /// Full administrative access: includes every other permission.
    Admin,
}

impl Permission {
    /// Every permission, in the contract's order.
    pub const ALL: [Permission; 5] = [
        Permission::AiGateway,
        Permission::Proxy,
        Permission::Read,
        Permission::Write,
        Permission::Admin,
    ];

    /// The wire name, e.g. `"ai_gateway"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Permission::AiGateway => "ai_gateway",
            Permission::Proxy => "proxy",
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an unknown permission name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown permission; allowed values are ai_gateway, proxy, read, write, admin")]
pub struct UnknownPermission;

impl FromStr for Permission {
    type Err = UnknownPermission;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Permission::ALL.into_iter().find(|p| p.as_str() == s).ok_or(UnknownPermission)
    }
}

/// A non-empty, duplicate-free set of permissions, kept in the contract's order.
///
/// Stored as the comma-separated wire names (`"ai_gateway,read"`), see [`PermissionSet::to_storage`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PermissionSet(Vec<Permission>);

impl PermissionSet {
    /// Parses the `permissions` array of a create-key request.
    ///
    /// # Errors
    /// A [`FieldError`] on `permissions` when the array is empty, or on `permissions[i]` when
    /// element `i` is not one of the five names. Duplicates are merged, not refused.
    pub fn parse_request(names: &[String]) -> Result<Self, FieldError> {
        if names.is_empty() {
            return Err(FieldError::new(
                "permissions",
                "must name at least one of ai_gateway, proxy, read, write, admin",
            ));
        }
        let mut set = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let permission = name.parse::<Permission>().map_err(|_| {
                FieldError::new(
                    format!("permissions[{i}]"),
                    "is not a known permission; allowed values are ai_gateway, proxy, read, write, admin",
                )
            })?;
            set.push(permission);
        }
        Ok(Self::from_iter(set))
    }

    /// Reads back the stored form written by [`PermissionSet::to_storage`]; unknown names
    /// (written by a newer version) are skipped, so they grant nothing.
    pub fn from_storage(stored: &str) -> Self {
        Self::from_iter(stored.split(',').filter_map(|s| s.trim().parse().ok()))
    }

    /// The stored form: wire names joined by commas, in the contract's order.
    pub fn to_storage(&self) -> String {
        self.0.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(",")
    }

    /// Whether the set grants `needed`: it holds `needed` itself, or `admin`.
    pub fn allows(&self, needed: Permission) -> bool {
        self.0.contains(&needed) || self.0.contains(&Permission::Admin)
    }

    /// The permissions, in the contract's order.
    pub fn iter(&self) -> impl Iterator<Item = Permission> + '_ {
        self.0.iter().copied()
    }

    /// The wire names, in the contract's order (as rendered in `permissions` of a key object).
    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|p| p.as_str().to_owned()).collect()
    }
}

impl FromIterator<Permission> for PermissionSet {
    fn from_iter<T: IntoIterator<Item = Permission>>(iter: T) -> Self {
        let mut v: Vec<Permission> = iter.into_iter().collect();
        v.sort();
        v.dedup();
        Self(v)
    }
}

impl fmt::Display for PermissionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_storage())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn admin_includes_everything() {
        let set = PermissionSet::from_iter([Permission::Admin]);
        for p in Permission::ALL {
            assert!(set.allows(p));
        }
        let read = PermissionSet::from_iter([Permission::Read]);
        assert!(read.allows(Permission::Read));
        assert!(!read.allows(Permission::Write));
        assert!(!read.allows(Permission::AiGateway));
    }

    #[test]
    fn unknown_permission_names_its_index() {
        let err = PermissionSet::parse_request(&names(&["read", "root"])).err();
        assert_eq!(err.map(|e| e.field), Some("permissions[1]".to_owned()));
        let empty = PermissionSet::parse_request(&[]).err();
        assert_eq!(empty.map(|e| e.field), Some("permissions".to_owned()));
    }

    #[test]
    fn storage_round_trips_in_contract_order() {
        let set = PermissionSet::parse_request(&names(&["write", "ai_gateway", "write"]));
        let set = set.unwrap_or_else(|_| PermissionSet::from_iter([]));
        assert_eq!(set.to_storage(), "ai_gateway,write");
        assert_eq!(PermissionSet::from_storage("ai_gateway,write,future"), set);
    }
}
