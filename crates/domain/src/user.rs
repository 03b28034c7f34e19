//! Users: e-mail addresses, display names, passwords and roles.

use crate::validation::FieldError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Longest accepted e-mail address, in characters (RFC 5321 §4.5.3.1.3 path limit less `<>`).
pub const EMAIL_MAX_CHARS: usize = 254;
/// Longest accepted display name, in Unicode code points.
pub const NAME_MAX_CHARS: usize = 100;
/// Longest accepted API key name, in Unicode code points.
pub const KEY_NAME_MAX_CHARS: usize = 100;
/// Hard maximum password length, in Unicode code points: bounds the hashing cost
/// (ASVS 4.0.3 V2.1.2). Never lowered by configuration.
pub const PASSWORD_HARD_MAX_CHARS: usize = 256;

/// An e-mail address in its comparison form: trimmed, NFKC-normalised (Unicode UAX 15:
/// full-width `ａ` is `a`, the ligature `ﬁ` is `fi`), lower-cased, NFKC again (lower-casing
/// can leave a compatibility form) and trimmed again. Two addresses are one login exactly
/// when their normalised forms are equal. Nothing is validated: a login looks up whatever it
/// is given.
pub fn normalize_email(raw: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let compatible: String = raw.trim().nfkc().collect();
    let lowered = compatible.trim().to_lowercase();
    let normalized: String = lowered.nfkc().collect();
    normalized.trim().to_owned()
}

/// The UTS 39 skeleton (Unicode Technical Standard 39 §4, `unicode-security`) of a
/// normalised address ([`normalize_email`]): every character replaced by the prototype it is
/// confusable with (Cyrillic `а` by Latin `a`, `1` by `l`, `m` by `rn`) between two NFD
/// passes, default-ignorable characters dropped. Two addresses with equal skeletons look
/// alike, and aigw keeps one account per skeleton.
pub fn email_skeleton(normalized: &str) -> String {
    unicode_security::skeleton(normalized).collect()
}

/// A syntactically valid e-mail address in its comparison form ([`normalize_email`]): the
/// login name.
///
/// Addresses are compared case-insensitively and by compatibility form, as users expect
/// (`Ann@Example.com` and `ａnn@example.com` are `ann@example.com`), so the stored form is
/// the normalised one; [`Email::skeleton`] is what look-alike addresses share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Email(String);

impl Email {
    /// Validates and normalises an address from request field `email`.
    ///
    /// # Errors
    /// [`FieldError`] on `email` when it is empty, longer than [`EMAIL_MAX_CHARS`] (as sent,
    /// surrounding whitespace included: the OpenAPI `maxLength`; and once normalised), not an
    /// address of the form `local@domain.tld` (no display text, no IP literal), or when its
    /// local part or its domain mixes letters of scripts that UTS 39 does not accept together
    /// (`аnn` with a Cyrillic `а` among Latin letters; digits and punctuation go with any
    /// script, and Han with Hiragana and Katakana is one script).
    pub fn parse(raw: &str) -> Result<Self, FieldError> {
        use unicode_security::MixedScript;
        if raw.trim().is_empty() {
            return Err(FieldError::new("email", "must not be empty"));
        }
        if raw.chars().count() > EMAIL_MAX_CHARS {
            return Err(FieldError::new("email", "must be at most 254 characters"));
        }
        let normalized = normalize_email(raw);
        if normalized.chars().count() > EMAIL_MAX_CHARS {
            return Err(FieldError::new("email", "must be at most 254 characters"));
        }
        let options = email_address::Options::default()
            .with_required_tld()
            .without_display_text()
            .without_domain_literal();
        if email_address::EmailAddress::parse_with_options(&normalized, options).is_err() {
            return Err(FieldError::new("email", "is not a valid e-mail address"));
        }
        let (local, domain) = normalized.rsplit_once('@').unwrap_or((&normalized, ""));
        if !local.is_single_script() || !domain.is_single_script() {
            return Err(FieldError::new(
                "email",
                "mixes letters of different scripts in its local part or domain",
            ));
        }
        Ok(Self(normalized))
    }

    /// The normalised address.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before `@`, used as the default display name.
    pub fn local_part(&self) -> &str {
        self.0.split('@').next().unwrap_or(&self.0)
    }

    /// The address's UTS 39 skeleton ([`email_skeleton`]): equal for look-alike addresses.
    pub fn skeleton(&self) -> String {
        email_skeleton(&self.0)
    }
}

/// Whether the domain of `email` (what follows its last `@`) is one of `domains`: whole
/// domains, compared without case after trimming (`sub.example.com` is not `example.com`).
/// The one rule of every domain list in the configuration (registration, single sign-on).
pub fn domain_in(email: &str, domains: &[String]) -> bool {
    let domain = email.rsplit('@').next().unwrap_or_default();
    domains.iter().any(|d| d.trim().eq_ignore_ascii_case(domain))
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A display name (of a user, field `name`) or label (of an API key, field `name`):
/// trimmed, 1 to 100 code points, no control characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserName(String);

impl UserName {
    /// Validates `raw` as request field `field` (`"name"`).
    ///
    /// # Errors
    /// [`FieldError`] on `field` when it is empty after trimming, longer than 100 code points
    /// as sent (surrounding whitespace included: the OpenAPI `maxLength`), or contains
    /// control characters.
    pub fn parse(raw: &str, field: &str) -> Result<Self, FieldError> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(FieldError::new(field, "must not be empty"));
        }
        if raw.chars().count() > NAME_MAX_CHARS {
            return Err(FieldError::new(field, "must be at most 100 characters"));
        }
        if trimmed.chars().any(char::is_control) {
            return Err(FieldError::new(field, "must not contain control characters"));
        }
        Ok(Self(trimmed.to_owned()))
    }

    /// The name as given (trimmed).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name, by value.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// Common passwords refused when [`PasswordPolicy::blocklist`] is on: `data/common-passwords.txt`
/// (one per line, lower case; `#` starts a comment), compiled into the crate.
const COMMON_PASSWORDS: &str = include_str!("../data/common-passwords.txt");

/// Whether `password` (compared case-insensitively) is on the shipped list of common passwords.
pub fn is_common_password(password: &str) -> bool {
    let lowered = password.to_lowercase();
    COMMON_PASSWORDS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .any(|l| l == lowered)
}

/// The password rules (NIST SP 800-63B-4 §3.1.1.2): a configurable minimum length, a hard
/// maximum, lengths in Unicode code points, no composition rules, no truncation, and
/// optionally a blocklist of common passwords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasswordPolicy {
    /// Minimum length in code points (`auth.password_min_chars`, default 8).
    pub min_chars: usize,
    /// Maximum length in code points (at most [`PASSWORD_HARD_MAX_CHARS`]).
    pub max_chars: usize,
    /// Refuse passwords on the shipped common-password list (`auth.password_blocklist`,
    /// default true).
    pub blocklist: bool,
}

impl Default for PasswordPolicy {
    fn default() -> Self {
        Self { min_chars: 8, max_chars: PASSWORD_HARD_MAX_CHARS, blocklist: true }
    }
}

impl PasswordPolicy {
    /// Checks a new password (at registration).
    ///
    /// # Errors
    /// [`FieldError`] on `password` when it is shorter than `min_chars` or longer than
    /// `max_chars` code points, or (with the blocklist on) a commonly used password. The
    /// issue text never contains the password.
    pub fn check_new(&self, password: &str) -> Result<(), FieldError> {
        let n = password.chars().count();
        if n < self.min_chars {
            return Err(FieldError::new(
                "password",
                format!("must be at least {} characters", self.min_chars),
            ));
        }
        self.check_length_bound(password)?;
        if self.blocklist && is_common_password(password) {
            return Err(FieldError::new(
                "password",
                "is too common; choose a longer or less predictable password",
            ));
        }
        Ok(())
    }

    /// Checks only the upper bound (at login, so an oversized password is refused before it
    /// is hashed).
    ///
    /// # Errors
    /// [`FieldError`] on `password` when it is longer than `max_chars` code points.
    pub fn check_length_bound(&self, password: &str) -> Result<(), FieldError> {
        let max = self.max_chars.min(PASSWORD_HARD_MAX_CHARS);
        if password.chars().count() > max {
            return Err(FieldError::new("password", format!("must be at most {max} characters")));
        }
        Ok(())
    }
}

/// A user's role (the value `user` occurs). New accounts are `user`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An ordinary account.
    User,
    /// An operator account (granted out of band; the API never grants it).
    Admin,
}

impl Role {
    /// The wire and storage name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
        }
    }
}

impl FromStr for Role {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Role::User),
            "admin" => Ok(Role::Admin),
            _ => Err(()),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        assert_eq!(Email::parse(" Ann@Example.COM ").map(|e| e.0), Ok("ann@example.com".into()));
        for bad in ["", "ann", "ann@", "@example.com", "ann@localhost", "Ann <ann@example.com>"] {
            assert!(Email::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn compatibility_forms_are_the_plain_address() {
        let plain = Ok("ann@example.com".to_owned());
        // Full-width letters and at sign, a black-letter capital (NFKC gives `H`, then lower
        // case), the `ﬁ` ligature.
        assert_eq!(Email::parse("ａｎｎ＠ｅｘａｍｐｌｅ．ｃｏｍ").map(|e| e.0), plain);
        assert_eq!(Email::parse("ａnn@example.com").map(|e| e.0), plain);
        assert_eq!(normalize_email("\u{210C}ANS@EXAMPLE.COM"), "hans@example.com");
        assert_eq!(
            Email::parse("\u{FB01}n@example.com").map(|e| e.0),
            Ok("fin@example.com".into())
        );
        assert_eq!(normalize_email("\u{3000}Ann@Example.com\u{3000}"), "ann@example.com");
    }

    #[test]
    fn look_alikes_share_a_skeleton() {
        let skeleton = |raw: &str| Email::parse(raw).map(|e| e.skeleton());
        let ace = skeleton("ace@example.com");
        assert!(ace.is_ok());
        // All-Cyrillic `асе`, and Cyrillic `о` in an all-Cyrillic domain of the same shape.
        assert_eq!(skeleton("\u{0430}\u{0441}\u{0435}@example.com"), ace);
        assert_eq!(email_skeleton("ann@example.com"), email_skeleton("\u{0430}nn@example.com"));
        assert_ne!(skeleton("bob@example.com"), ace);
        // UTS 39 also counts `rn` and `m`, `l` and `1` as confusable.
        assert_eq!(email_skeleton("modern@example.com"), email_skeleton("modem@example.com"));
        assert_eq!(email_skeleton("bill1@example.com"), email_skeleton("billl@example.com"));
    }

    #[test]
    fn mixed_scripts_are_refused_per_part() {
        for mixed in
            ["\u{0430}nn@example.com", "ann@ex\u{0430}mple.com", "p\u{0430}ypal@example.com"]
        {
            let err = Email::parse(mixed).err().map(|e| e.field);
            assert_eq!(err, Some("email".into()), "{mixed} accepted");
        }
        for fine in [
            "\u{0430}\u{0441}\u{0435}@example.com",
            "\u{0438}\u{0432}\u{0430}\u{043D}@\u{043F}\u{0440}\u{0438}\u{043C}\u{0435}\u{0440}.\u{0440}\u{0444}",
            "ann.smith+tag-2@sub.example.co.uk",
            "\u{5C71}\u{7530}\u{305F}\u{308D}\u{3046}@example.jp",
            "j\u{00FC}rgen@b\u{00FC}cher.de",
        ] {
            assert!(Email::parse(fine).is_ok(), "{fine} refused");
        }
    }

    #[test]
    fn passwords_count_code_points() {
        let policy = PasswordPolicy::default();
        assert!(policy.check_new("ééééééé").is_err()); // 7 code points, 14 bytes
        assert!(policy.check_new("éééééééé").is_ok());
        assert!(policy.check_new(&"x".repeat(256)).is_ok());
        assert!(policy.check_new(&"x".repeat(257)).is_err());
        let err = policy.check_new("hunter2").err().map(|e| e.issue).unwrap_or_default();
        assert!(!err.contains("hunter2"));
    }

    #[test]
    fn common_passwords_are_refused_case_insensitively() {
        let policy = PasswordPolicy::default();
        assert!(policy.check_new("Password123").is_err());
        assert!(policy.check_new("QWERTYUIOP").is_err());
        assert!(policy.check_new("correct horse battery staple").is_ok());
        let off = PasswordPolicy { blocklist: false, ..PasswordPolicy::default() };
        assert!(off.check_new("password123").is_ok());
    }

    #[test]
    fn names() {
        assert!(UserName::parse("  ", "name").is_err());
        assert!(UserName::parse("a\u{0}b", "name").is_err());
        assert_eq!(UserName::parse(" Ann ", "name").map(|n| n.0), Ok("Ann".into()));
        // The length is the value's as sent, as the OpenAPI description's `maxLength` says.
        let hundred = "a".repeat(100);
        assert!(UserName::parse(&hundred, "name").is_ok());
        assert!(UserName::parse(&format!("\t{hundred}"), "name").is_err());
        assert!(UserName::parse(&format!("{}\t", &hundred[1..]), "name").is_ok());
    }
}
