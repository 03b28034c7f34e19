//! `Email::parse`, `UserName::parse`, the password policy, `is_common_password` and `PermissionSet::parse_request` never panic and keep their documented contracts.
#![no_main]

use aigw_domain::permission::{Permission, PermissionSet};
use aigw_domain::user::{
    is_common_password, Email, PasswordPolicy, UserName, NAME_MAX_CHARS, PASSWORD_HARD_MAX_CHARS,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };

    // E-mail: accepted addresses are the normalised input (trimmed, NFKC, lower case), with
    // an `@`; normalising again changes nothing, and the skeleton never panics.
    match Email::parse(s) {
        Ok(email) => {
            assert_eq!(email.as_str(), aigw_domain::normalize_email(s));
            assert_eq!(aigw_domain::normalize_email(email.as_str()), email.as_str());
            let _ = email.skeleton();
            assert!(email.as_str().contains('@'));
            assert!(email.as_str().starts_with(email.local_part()));
        }
        Err(err) => assert_eq!(err.field, "email"),
    }

    // Display name: at most 100 code points as sent (surrounding whitespace included, as the
    // OpenAPI `maxLength` says), kept trimmed: not empty, no control characters.
    match UserName::parse(s, "name") {
        Ok(name) => {
            assert_eq!(name.as_str(), s.trim());
            assert!(s.chars().count() <= NAME_MAX_CHARS);
            assert!(!name.as_str().is_empty());
            assert!(!name.as_str().chars().any(char::is_control));
        }
        Err(err) => {
            assert_eq!(err.field, "name");
            let t = s.trim();
            assert!(
                t.is_empty()
                    || s.chars().count() > NAME_MAX_CHARS
                    || t.chars().any(char::is_control)
            );
        }
    }

    // Passwords: lengths in code points; the issue is one of the policy's fixed texts, so it
    // never contains the password.
    let policy = PasswordPolicy::default();
    let n = s.chars().count();
    let common = is_common_password(s);
    let issues = [
        format!("must be at least {} characters", policy.min_chars),
        format!("must be at most {PASSWORD_HARD_MAX_CHARS} characters"),
        "is too common; choose a longer or less predictable password".to_owned(),
    ];
    match policy.check_new(s) {
        Ok(()) => assert!(n >= policy.min_chars && n <= PASSWORD_HARD_MAX_CHARS && !common),
        Err(err) => {
            assert_eq!(err.field, "password");
            assert!(issues.contains(&err.issue), "unexpected issue: {}", err.issue);
            assert!(n < policy.min_chars || n > PASSWORD_HARD_MAX_CHARS || common);
        }
    }
    assert_eq!(policy.check_length_bound(s).is_ok(), n <= PASSWORD_HARD_MAX_CHARS);
    let lenient = PasswordPolicy { blocklist: false, ..policy };
    assert_eq!(lenient.check_new(s).is_ok(), n >= policy.min_chars && n <= PASSWORD_HARD_MAX_CHARS);

    // Permissions: the input split on `\n` is the request's `permissions` array.
    let names: Vec<String> =
        if s.is_empty() { Vec::new() } else { s.split('\n').map(str::to_owned).collect() };
    let known = |name: &str| Permission::ALL.iter().any(|p| p.as_str() == name);
    match PermissionSet::parse_request(&names) {
        Ok(set) => {
            assert!(!names.is_empty() && names.iter().all(|n| known(n)));
            assert!(set.iter().count() >= 1);
            assert!(set.iter().all(|p| names.iter().any(|n| n == p.as_str())));
            assert!(names.iter().all(|n| set.iter().any(|p| p.as_str() == n)));
            assert_eq!(PermissionSet::from_storage(&set.to_storage()), set);
        }
        Err(err) => match names.iter().position(|n| !known(n)) {
            None => {
                assert!(names.is_empty());
                assert_eq!(err.field, "permissions");
            }
            Some(i) => {
                assert_eq!(err.field, format!("permissions[{i}]"));
                // The issue is a fixed text (the one any unknown name gets), never the name.
                let reference = PermissionSet::parse_request(&["?".to_owned()]).err();
                assert_eq!(Some(err.issue), reference.map(|e| e.issue));
            }
        },
    }
});
