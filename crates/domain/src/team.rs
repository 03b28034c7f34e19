//! Teams: a group of users (members, each with a [`TeamRole`]) that shares a budget, rate
//! limits and models, and the levels a call's limits are checked at ([`LimitScope`]) with the
//! names of their counters ([`CounterSubject`]).

use crate::validation::FieldError;
use std::fmt;

/// A member's role in a team.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TeamRole {
    /// Calls with the team's keys and its own team-scoped keys.
    Member,
    /// Also manages members (but owners), the policy and team keys.
    Admin,
    /// Also manages owners and deletes the team. A team always keeps at least one.
    Owner,
}

impl TeamRole {
    /// The wire and storage name: `owner`, `admin` or `member`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TeamRole::Owner => "owner",
            TeamRole::Admin => "admin",
            TeamRole::Member => "member",
        }
    }

    /// Parses a wire name.
    ///
    /// # Errors
    /// [`FieldError`] on `field` for any other text.
    pub fn parse(raw: &str, field: &str) -> Result<Self, FieldError> {
        match raw {
            "owner" => Ok(TeamRole::Owner),
            "admin" => Ok(TeamRole::Admin),
            "member" => Ok(TeamRole::Member),
            _ => Err(FieldError::new(field, "must be one of owner, admin, member")),
        }
    }

    /// A stored name; an unknown one reads as the least privileged role.
    pub fn from_stored(raw: &str) -> Self {
        Self::parse(raw, "role").unwrap_or(TeamRole::Member)
    }

    /// Whether the role manages the team (its policy, members and team keys).
    pub const fn manages(self) -> bool {
        matches!(self, TeamRole::Owner | TeamRole::Admin)
    }
}

impl fmt::Display for TeamRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The level whose limit (budget, `rpm_limit`, `tpm_limit`, `allowed_models`) a call is
/// checked against: every level a key belongs to must admit the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitScope {
    /// The API key's own limits.
    Key,
    /// The member's budget in the key's team (a member's own team-scoped key).
    Member,
    /// The team's limits.
    Team,
    /// The budget of the key's owner across all their keys (personal and scoped to a team;
    /// not team keys).
    User,
}

impl LimitScope {
    /// The wire name (`details.scope` of a refusal): `key`, `member`, `team` or `user`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitScope::Key => "key",
            LimitScope::Member => "member",
            LimitScope::Team => "team",
            LimitScope::User => "user",
        }
    }
}

/// Whose counter a budget or rate-limit counter row is: its name in the counter tables
/// (`key_budget_periods`, `key_rate_windows`) and in Redis.
///
/// A key's counter is named by the key id (a UUID), a team's `team:<team id>`, a member's
/// `member:<team id>:<user id>`, a user's `user:<user id>`; ids hold no `:`, so the names
/// never collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterSubject<'a> {
    /// An API key, by id.
    Key(&'a str),
    /// A team, by id.
    Team(&'a str),
    /// A member of a team.
    Member {
        /// The team's id.
        team_id: &'a str,
        /// The member's user id.
        user_id: &'a str,
    },
    /// A user, across every key of theirs that is not a team key.
    User(&'a str),
}

impl<'a> CounterSubject<'a> {
    /// The counter name.
    pub fn name(self) -> String {
        match self {
            CounterSubject::Key(id) => id.to_owned(),
            CounterSubject::Team(id) => format!("team:{id}"),
            CounterSubject::Member { team_id, user_id } => format!("member:{team_id}:{user_id}"),
            CounterSubject::User(id) => format!("user:{id}"),
        }
    }

    /// Reads a counter name written by [`Self::name`].
    pub fn parse(name: &'a str) -> Self {
        if let Some(team_id) = name.strip_prefix("team:") {
            return CounterSubject::Team(team_id);
        }
        if let Some(user_id) = name.strip_prefix("user:") {
            return CounterSubject::User(user_id);
        }
        if let Some((team_id, user_id)) =
            name.strip_prefix("member:").and_then(|rest| rest.split_once(':'))
        {
            return CounterSubject::Member { team_id, user_id };
        }
        CounterSubject::Key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_names_read_back() {
        for subject in [
            CounterSubject::Key("0190-a"),
            CounterSubject::Team("t1"),
            CounterSubject::Member { team_id: "t1", user_id: "u1" },
            CounterSubject::User("u1"),
        ] {
            let name = subject.name();
            assert_eq!(CounterSubject::parse(&name), subject);
        }
    }

    #[test]
    fn roles_parse_and_order() {
        assert_eq!(TeamRole::parse("owner", "role"), Ok(TeamRole::Owner));
        assert!(TeamRole::parse("boss", "role").is_err());
        assert!(TeamRole::Owner > TeamRole::Admin && TeamRole::Admin > TeamRole::Member);
        assert!(TeamRole::Admin.manages() && !TeamRole::Member.manages());
    }
}
