//! Where the console sends a browser that a request names: the `next` of the login page and
//! its forms, and the page a signed-out visitor asked for (`/login?next=…`).
//!
//! A target taken from a request is accepted only as a path of this origin, checked the way a
//! browser reads a `Location` (the WHATWG URL Standard, which browsers follow): a browser
//! strips tabs and newlines anywhere in it and reads a backslash as a slash, so `/\t/evil` and
//! `/\evil` would take it to `//evil`, another host. A candidate is refused when it
//!
//! - does not start with `/`, or holds anything but printable ASCII (no control character,
//!   no whitespace, no raw non-ASCII character, which a browser would encode or map);
//! - once percent-decoded (repeatedly, as a server or a proxy behind it may decode again)
//!   holds a control character (C0, DEL, C1), whitespace (Unicode `White_Space`), an
//!   invisible formatting character, a backslash, `//`, or a look-alike of `/` or `\` (its
//!   UTS #39 confusable skeleton holds one: U+2215, U+FF0F, U+29F8, U+FF3C…), or is not UTF-8;
//! - resolved with the `url` crate against an origin of its own does not stay on that
//!   origin, or comes out as another path than it went in (dot segments, encodings the parser
//!   changes).
//!
//! Anything refused becomes the default page. What is accepted is printable ASCII, so the
//! `Location` header built from it can always be built.

use percent_encoding::percent_decode_str;

/// Where a browser goes when a request names no acceptable target.
pub(crate) const DEFAULT_PAGE: &str = "/keys";

/// The origin candidates are resolved against: any origin would do, none is ever contacted.
const PROBE_ORIGIN: &str = "http://aigw.test/";

/// Percent-decoding rounds after which a candidate that still changes is refused.
const DECODING_ROUNDS: usize = 4;

/// A path of this origin, checked as this module says: safe to send as a `Location`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalPath(String);

impl LocalPath {
    /// `candidate` when it is a path of this origin, as a browser would read it; `None`
    /// otherwise.
    pub(crate) fn parse(candidate: &str) -> Option<Self> {
        let printable = candidate.bytes().all(|b| b.is_ascii_graphic());
        if !candidate.starts_with('/') || !printable {
            return None;
        }
        if !decoded_is_plain(candidate) {
            return None;
        }
        let origin = url::Url::parse(PROBE_ORIGIN).ok()?;
        let resolved = origin.join(candidate).ok()?;
        let same_origin = resolved.origin() == origin.origin()
            && resolved.username().is_empty()
            && resolved.password().is_none();
        let unchanged = &resolved[url::Position::BeforePath..] == candidate;
        (same_origin && unchanged).then(|| Self(candidate.to_owned()))
    }

    /// `candidate` when [`LocalPath::parse`] accepts it, else [`DEFAULT_PAGE`].
    pub(crate) fn or_default(candidate: Option<&str>) -> Self {
        candidate.and_then(Self::parse).unwrap_or_else(|| Self(DEFAULT_PAGE.to_owned()))
    }

    /// The path (with its query and fragment, if any).
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `candidate`, percent-decoded until nothing changes, is free of what a browser or
/// an intermediary could read as a way off this origin (see the module docs).
fn decoded_is_plain(candidate: &str) -> bool {
    let mut text = candidate.to_owned();
    for _ in 0..DECODING_ROUNDS {
        let Ok(decoded) = percent_decode_str(&text).decode_utf8() else {
            return false;
        };
        if decoded.contains("//") || decoded.chars().any(is_suspicious) {
            return false;
        }
        if decoded == text {
            return true;
        }
        text = decoded.into_owned();
    }
    false
}

/// A character no acceptable target holds, even encoded: control characters, whitespace, the
/// backslash, and (from its UTS 39 skeleton, `unicode-security`) the invisible characters that
/// show nothing (`Default_Ignorable_Code_Point`: soft hyphen, zero-width and directional marks,
/// word joiners, byte-order mark, variation selectors, tags, which the skeleton drops) and the
/// look-alikes of `/` and `\`.
fn is_suspicious(c: char) -> bool {
    if c == '\\' || c.is_control() || c.is_whitespace() {
        return true;
    }
    if c.is_ascii() {
        return false;
    }
    let mut utf8 = [0; 4];
    let mut skeleton = unicode_security::skeleton(c.encode_utf8(&mut utf8)).peekable();
    skeleton.peek().is_none() || skeleton.any(|s| s == '/' || s == '\\')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;
    use proptest::prelude::*;

    /// Where a browser that got `Location: target` on a page of `http://aigw.test/` goes.
    fn browser_goes(target: &str) -> url::Url {
        let page = url::Url::parse("http://aigw.test/login").unwrap_or_else(|e| panic!("{e}"));
        page.join(target).unwrap_or_else(|e| panic!("{target:?}: {e}"))
    }

    /// Every kind of invisible character is refused: one of each range of
    /// `Default_Ignorable_Code_Point`, as the skeleton drops them.
    #[test]
    fn invisible_characters_are_suspicious() {
        let invisible = [
            '\u{AD}',
            '\u{34F}',
            '\u{61C}',
            '\u{115F}',
            '\u{1160}',
            '\u{17B4}',
            '\u{180B}',
            '\u{180F}',
            '\u{200B}',
            '\u{200F}',
            '\u{202A}',
            '\u{202E}',
            '\u{2060}',
            '\u{206F}',
            '\u{3164}',
            '\u{FE00}',
            '\u{FE0F}',
            '\u{FEFF}',
            '\u{FFA0}',
            '\u{FFF0}',
            '\u{1BCA0}',
            '\u{1D173}',
            '\u{E0001}',
            '\u{E0FFF}',
        ];
        for c in invisible {
            assert!(is_suspicious(c), "U+{:04X}", u32::from(c));
        }
        for c in ['a', 'é', 'ß', '東', '-', '_'] {
            assert!(!is_suspicious(c), "{c}");
        }
    }

    fn accepted(candidate: &str) -> Option<String> {
        LocalPath::parse(candidate).map(|p| p.0)
    }

    #[test]
    fn the_console_s_own_paths_are_kept() {
        for path in [
            "/keys",
            "/usage",
            "/teams/0193d0a4-7e3c-7c52-9a8b-3f2e1d0c9b8a#members",
            "/admin/users?q=ann%40example.com",
            "/admin/keys?prefix=aigw_ab&owner=Jos%C3%A9",
            "/keys?cursor=eyJpZCI6IjEifQ%3D%3D",
        ] {
            assert_eq!(accepted(path).as_deref(), Some(path));
        }
    }

    #[test]
    fn ways_off_the_origin_are_refused() {
        for candidate in [
            "",
            "keys",
            "//evil.example",
            "/\\evil.example",
            "\\\\evil.example",
            "/\t/evil.example",
            "/\n/x",
            "/\r/x",
            "/\u{0}/x",
            "/\u{7f}/x",
            "/\u{85}/x",
            "/ /evil.example",
            "/\u{a0}/x",
            "/\u{3000}/x",
            "/\u{200b}/x",
            "/\u{feff}/x",
            "https://evil.example/",
            "http:evil.example",
            "javascript:alert(1)",
            "/%2F/evil.example",
            "/%2f%2fevil.example",
            "/%5Cevil.example",
            "/%09/evil.example",
            "/%0A/x",
            "/%0d/x",
            "/%00",
            "/%7F",
            "/%C2%85",
            "/%E2%80%8B",
            "/%E3%80%80",
            "/%252F/evil.example",
            "/%25252F%25252Fevil.example",
            "/%FF",
            "/\u{2215}evil.example",
            "/\u{ff0f}evil.example",
            "/\u{29f8}x",
            "/\u{ff3c}x",
            "/%E2%88%95evil.example",
            "/%EF%BC%8Fevil.example",
            "/%E2%A7%B8x",
            "/%EF%BC%BCx",
            "/%E2%88%96x",
            "/%E2%81%84x",
            "/keys/../admin",
            "/%2e%2e/admin",
            "/./x",
        ] {
            assert_eq!(accepted(candidate), None, "{candidate:?} was accepted");
        }
    }

    #[test]
    fn anything_refused_goes_to_the_default_page() {
        assert_eq!(LocalPath::or_default(None).as_str(), DEFAULT_PAGE);
        assert_eq!(LocalPath::or_default(Some("/\t/evil.example")).as_str(), DEFAULT_PAGE);
        assert_eq!(LocalPath::or_default(Some("/usage")).as_str(), "/usage");
    }

    /// Pieces hostile `next` values are made of: every control character, whitespace, slash
    /// and backslash look-alikes, percent-encodings of them, and ordinary path characters.
    fn piece() -> impl Strategy<Value = String> {
        let special: Vec<String> = (0u32..=0x9f)
            .filter_map(char::from_u32)
            .filter(|c| c.is_control() || c.is_ascii_punctuation() || *c == ' ')
            .chain([
                '\u{a0}', '\u{1680}', '\u{2000}', '\u{2007}', '\u{200a}', '\u{2028}', '\u{2029}',
                '\u{202f}', '\u{205f}', '\u{3000}', '\u{200b}', '\u{200d}', '\u{2060}', '\u{feff}',
                '\u{2044}', '\u{2215}', '\u{2571}', '\u{29f8}', '\u{ff0f}', '\u{30ce}', '\u{2216}',
                '\u{29f5}', '\u{29f9}', '\u{fe68}', '\u{ff3c}', '\u{ff0e}', '\u{3002}', '\u{ff1a}',
                'é', '東',
            ])
            .map(String::from)
            .collect();
        let encoded: Vec<String> = [
            "%2F",
            "%2f",
            "%5C",
            "%5c",
            "%09",
            "%0A",
            "%0D",
            "%00",
            "%20",
            "%7F",
            "%C2%85",
            "%C2%A0",
            "%E2%80%8B",
            "%E2%88%95",
            "%EF%BC%8F",
            "%E2%A7%B8",
            "%EF%BC%BC",
            "%2e",
            "%2E%2E",
            "%25",
            "%252F",
            "%255C",
            "%2509",
            "%3A",
            "%40",
            "%3F",
            "%23",
            "%FF",
            "%C3%A9",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        prop_oneof![
            4 => proptest::sample::select(special),
            4 => proptest::sample::select(encoded),
            3 => "[a-z0-9._~-]{1,8}",
            2 => proptest::sample::select(vec![
                "/".to_owned(), "//".to_owned(), "\\".to_owned(), "http:".to_owned(),
                "https://".to_owned(), "evil.example".to_owned(), "@".to_owned(), "..".to_owned(),
                "?next=".to_owned(), "#".to_owned(),
            ]),
        ]
    }

    fn candidate() -> impl Strategy<Value = String> {
        (
            proptest::sample::select(vec!["/", "//", "/\\", "\\", "", "/%2F", "http://"]),
            proptest::collection::vec(piece(), 0..8),
        )
            .prop_map(|(start, pieces)| format!("{start}{}", pieces.concat()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Whatever `next` says, the browser lands on this origin, on a path without
        /// anything a later decoding could turn into a way off it, and the `Location` can
        /// be built.
        #[test]
        fn every_accepted_target_stays_on_the_origin(candidate in candidate()) {
            let target = LocalPath::or_default(Some(&candidate));
            let target = target.as_str();
            prop_assert!(actix_web::http::header::HeaderValue::from_str(target).is_ok());
            let landed = browser_goes(target);
            prop_assert_eq!(landed.origin(), url::Url::parse("http://aigw.test/")
                .unwrap_or_else(|e| panic!("{e}")).origin(), "{:?} -> {}", candidate, landed);
            prop_assert!(landed.username().is_empty() && landed.password().is_none());
            prop_assert_eq!(&landed[url::Position::BeforePath..], target);
            prop_assert!(target == DEFAULT_PAGE || target == candidate);
            prop_assert!(decoded_is_plain(target), "{:?}", target);
        }
    }
}
