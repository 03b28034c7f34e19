//! URLs as they may be shown in logs, `Debug` output and error messages: without secrets.

use url::Url;

/// What stands in for a removed secret.
const MASK: &str = "***";

/// `url` with its secrets replaced by `***`: the password of its userinfo
/// (`postgres://app:***@db/aigw`, `redis://:***@cache:6379/0`) and the value of any query
/// parameter whose name contains `password` (libpq's `?password=…`, `?sslpassword=…`).
/// The user name, host, path and the rest of the query stay as they are.
///
/// The URL is parsed by the `url` crate (WHATWG URL), so an `@` in the path, the query or the
/// fragment is not taken for the end of a userinfo, and one inside an unescaped password is.
/// Text that does not parse as a URL may hold a secret anywhere, so all of it after its
/// `scheme://` is replaced (`postgres://***`), or all of it when it has no `://`.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = Url::parse(url.trim()) else {
        return match url.split_once("://") {
            Some((scheme, _)) if is_scheme(scheme) => format!("{scheme}://{MASK}"),
            _ => MASK.to_owned(),
        };
    };
    if parsed.password().is_some() && parsed.set_password(Some(MASK)).is_err() {
        return format!("{}://{MASK}", parsed.scheme());
    }
    let secret_in_query =
        parsed.query_pairs().any(|(name, _)| name.to_ascii_lowercase().contains("password"));
    if secret_in_query {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let value = if name.to_ascii_lowercase().contains("password") {
                    MASK.to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.into()
}

/// Whether `text` is a URL scheme (RFC 3986 §3.1: a letter, then letters, digits, `+-.`).
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn the_password_of_the_userinfo_is_masked_and_the_user_kept() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db.example:5432/aigw?sslmode=require"),
            "postgres://app:***@db.example:5432/aigw?sslmode=require"
        );
        assert_eq!(redact_url("redis://:hunter2@cache:6379/0"), "redis://:***@cache:6379/0");
        assert_eq!(redact_url("redis://default:s3cret@cache/0"), "redis://default:***@cache/0");
        assert_eq!(redact_url("https://user:pw@example.com/x"), "https://user:***@example.com/x");
    }

    #[test]
    fn urls_without_a_secret_are_unchanged() {
        for url in [
            "redis://127.0.0.1:6379",
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgresql://db/aigw?sslmode=disable",
            "redis://cache:6379/0",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn an_at_sign_in_the_password_path_or_query_is_read_as_the_url_means_it() {
        // An unescaped `@` inside the password: the userinfo ends at the last `@`.
        assert_eq!(redact_url("postgres://app:p@ss@db/aigw"), "postgres://app:***@db/aigw");
        // An escaped one.
        assert_eq!(redact_url("postgres://app:p%40ss@db/aigw"), "postgres://app:***@db/aigw");
        // `@` after the authority is no userinfo: nothing to hide.
        assert_eq!(redact_url("postgres://db/aigw@2026"), "postgres://db/aigw@2026");
        assert_eq!(
            redact_url("postgres://db/aigw?application_name=a@b"),
            "postgres://db/aigw?application_name=a@b"
        );
        assert_eq!(redact_url("redis://cache:6379/0#a:b@c"), "redis://cache:6379/0#a:b@c");
    }

    #[test]
    fn password_parameters_of_the_query_are_masked() {
        assert_eq!(
            redact_url("postgres://db/aigw?user=app&password=hunter2&sslmode=require"),
            "postgres://db/aigw?user=app&password=***&sslmode=require"
        );
        let both = redact_url("postgres://app:one@db/aigw?sslpassword=two");
        assert!(!both.contains("one") && !both.contains("two"), "{both}");
    }

    #[test]
    fn text_that_is_no_url_is_masked_after_its_scheme() {
        assert_eq!(redact_url("postgres://app:hunter2@db:99999/aigw"), "postgres://***");
        assert_eq!(redact_url("redis://:hunter2@[::1/0"), "redis://***");
        assert_eq!(redact_url("hunter2"), "***");
        assert_eq!(redact_url("not a scheme://x:y@z"), "***");
        assert_eq!(redact_url(""), "***");
    }
}
