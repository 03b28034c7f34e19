//! A JSON request body parsed into its DTO, with errors that name the field.
//!
//! The field is named by its JSON path (`email`, `permissions[1]`, `metadata.team`). serde's
//! own messages are never sent as they are, because they can quote the input (a password);
//! only the expected type is kept. A string the DTO reads may not contain U+0000 (NUL), which
//! PostgreSQL `text` cannot hold; a number too large for JSON's double (`1e400`) is named
//! too.

use aigw_domain::validation::NUL_ISSUE;
use aigw_domain::FieldError;
use serde::de::DeserializeOwned;

/// Parses `bytes` as a JSON object into `T`, turning serde's error into a [`FieldError`] that
/// names the field. The body must be an object: serde would otherwise accept an array for a
/// struct (`["ann@example.com", "pw"]` as a login).
///
/// A string that `T` reads (a field's value, an item, a map's key or value) must not contain
/// U+0000: the first one is a [`FieldError`] naming it ([`NUL_ISSUE`]), whatever type `T`
/// gives the field. Fields that `T` ignores (unknown ones, where `T` allows them) reach
/// nothing and are not looked at.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FieldError> {
    let value = parse_value(bytes)?;
    if !value.is_object() {
        return Err(FieldError::new("body", "must be a JSON object"));
    }
    let nuls = nul_paths(&value);
    let mut ignored: Vec<Vec<Step>> = Vec::new();
    let typed = if nuls.is_empty() {
        serde_path_to_error::deserialize(value)
    } else {
        let mut note = |path: serde_ignored::Path<'_>| ignored.push(steps_of(&path));
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut note))
    };
    if let Some(nul) = nuls.iter().find(|n| !ignored.iter().any(|i| n.steps.starts_with(i))) {
        return Err(FieldError::new(nul.field(), NUL_ISSUE));
    }
    typed.map_err(|err| {
        let path = err.path().to_string();
        describe_json_error(&path, err.inner())
    })
}

/// Parses `bytes` as one JSON value. A number out of the range of a double (`1e400`) is named
/// by its path (serde_json reports it as a syntax error, without one); every other failure is
/// `body`.
fn parse_value(bytes: &[u8]) -> Result<serde_json::Value, FieldError> {
    let err = match serde_json::from_slice(bytes) {
        Ok(value) => return Ok(value),
        Err(err) => err,
    };
    // serde_json's fixed text for `ErrorCode::NumberOutOfRange` (pinned by a test below).
    if !err.to_string().starts_with("number out of range") {
        return Err(describe_json_error("", &err));
    }
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let path = match serde_path_to_error::deserialize::<_, serde_json::Value>(&mut reader) {
        Err(located) => located.path().to_string(),
        Ok(_) => String::new(),
    };
    let named =
        !path.is_empty() && path != "." && path.len() <= 256 && !path.chars().any(char::is_control);
    let field = if named { path } else { "body".to_owned() };
    Err(FieldError::new(field, "is a number out of range"))
}

/// One step of a JSON path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Where a string with U+0000 sits: the steps to it and whether it is the last step's key
/// (an object key) rather than a value.
#[derive(Debug)]
struct NulAt {
    steps: Vec<Step>,
    in_key: bool,
}

impl NulAt {
    /// The field to name: the JSON path (`metadata.team`, `permissions[1]`) of the value, or
    /// of the object whose key has the NUL (`body` at the top). A key that is not a plausible
    /// field name (64 characters of `A-Z a-z 0-9 _ -`) ends the path there, so no odd input is
    /// echoed.
    fn field(&self) -> String {
        let steps = if self.in_key { &self.steps[..self.steps.len() - 1] } else { &self.steps[..] };
        let mut path = String::new();
        for step in steps {
            match step {
                Step::Key(key) => {
                    let plausible = !key.is_empty()
                        && key.len() <= 64
                        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if !plausible {
                        break;
                    }
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Step::Index(i) => path.push_str(&format!("[{i}]")),
            }
        }
        if path.is_empty() {
            "body".to_owned()
        } else {
            path
        }
    }
}

/// Every string (value or object key) in `value` that contains U+0000, in document order.
fn nul_paths(value: &serde_json::Value) -> Vec<NulAt> {
    fn walk(value: &serde_json::Value, steps: &mut Vec<Step>, found: &mut Vec<NulAt>) {
        match value {
            serde_json::Value::String(s) if s.contains('\0') => {
                found.push(NulAt { steps: steps.clone(), in_key: false });
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    steps.push(Step::Index(i));
                    walk(item, steps, found);
                    steps.pop();
                }
            }
            serde_json::Value::Object(map) => {
                for (key, item) in map {
                    steps.push(Step::Key(key.clone()));
                    if key.contains('\0') {
                        found.push(NulAt { steps: steps.clone(), in_key: true });
                    }
                    walk(item, steps, found);
                    steps.pop();
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    if has_nul(value) {
        walk(value, &mut Vec::new(), &mut found);
    }
    found
}

/// Whether any string (value or object key) in `value` contains U+0000 (the common case, no,
/// allocates nothing).
fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// The steps of a path that serde ignored (`Some` and newtype wrappers are not steps).
fn steps_of(path: &serde_ignored::Path<'_>) -> Vec<Step> {
    use serde_ignored::Path;
    match path {
        Path::Root => Vec::new(),
        Path::Seq { parent, index } => {
            let mut steps = steps_of(parent);
            steps.push(Step::Index(*index));
            steps
        }
        Path::Map { parent, key } => {
            let mut steps = steps_of(parent);
            steps.push(Step::Key(key.clone()));
            steps
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => steps_of(parent),
    }
}

fn join_path(path: &str, field: &str) -> String {
    if path.is_empty() || path == "." {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// Builds the `field`/`issue` pair from a serde_json error without quoting the input.
fn describe_json_error(path: &str, err: &serde_json::Error) -> FieldError {
    use serde_json::error::Category;
    match err.classify() {
        Category::Syntax | Category::Eof | Category::Io => FieldError::new(
            "body",
            format!("is not valid JSON (line {}, column {})", err.line(), err.column()),
        ),
        Category::Data => {
            let message = err.to_string();
            // serde_json appends the position only when it parsed bytes; a typed value read
            // from a `Value` has none, and then a trailing " at line ..." is input text.
            let position = format!(" at line {} column {}", err.line(), err.column());
            let message = match message.strip_suffix(&position) {
                Some(stripped) if err.line() > 0 => stripped,
                _ => &message[..],
            };
            let field =
                if path.is_empty() || path == "." { "body".to_owned() } else { path.to_owned() };
            if let Some(rest) = message.strip_prefix("missing field `") {
                let name = rest.split('`').next().unwrap_or("");
                return FieldError::new(join_path(path, name), "is required");
            }
            // An unknown field (bodies that refuse them, e.g. PATCH) is named when it is a
            // plausible field name; anything else is not echoed.
            if let Some(rest) = message.strip_prefix("unknown field `") {
                let name = rest.split('`').next().unwrap_or("");
                let plausible = !name.is_empty()
                    && name.len() <= 64
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                // serde_path_to_error's path already ends with the unknown field's name.
                let field = if plausible { field } else { "body".to_owned() };
                return FieldError::new(field, "is not a known field");
            }
            // serde's messages read "<what was found>, expected <what the type wants>". The
            // first half quotes the input and may itself contain ", expected "; the second half
            // comes from our types and never does, so only the text after the last separator
            // is used, and only for serde's own shapes (a custom message is just "is invalid").
            const SHAPES: [&str; 5] = [
                "invalid type: ",
                "invalid value: ",
                "invalid length ",
                "unknown variant `",
                "unknown field `",
            ];
            let expected = if SHAPES.iter().any(|shape| message.starts_with(shape)) {
                message.rfind(", expected ").map(|i| &message[i + ", expected ".len()..])
            } else {
                None
            };
            let issue = match expected {
                Some(e) if e.starts_with("struct ") || e.starts_with("a map") => {
                    "must be a JSON object".to_owned()
                }
                Some(e) => format!("must be {}", e.replace('`', "")),
                None => "is invalid".to_owned(),
            };
            FieldError::new(field, issue)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Body {
        email: String,
        password: String,
        permissions: Option<Vec<String>>,
    }

    fn field_of(json: &str) -> (String, String) {
        match parse_json::<Body>(json.as_bytes()) {
            Ok(_) => (String::new(), String::new()),
            Err(e) => (e.field, e.issue),
        }
    }

    mod properties {
        use super::super::parse_json;
        use crate::dto::{CreateApiKeyRequest, LoginRequest, LogoutRequest, RegisterRequest};
        use proptest::prelude::*;

        fn json_value() -> impl Strategy<Value = serde_json::Value> {
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>().prop_map(serde_json::Value::from),
                "\\PC{0,20}".prop_map(serde_json::Value::from),
            ];
            leaf.prop_recursive(3, 24, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                    prop::collection::btree_map(
                        prop_oneof![
                            Just("email".to_owned()),
                            Just("password".to_owned()),
                            Just("name".to_owned()),
                            Just("permissions".to_owned()),
                            Just("expires_at".to_owned()),
                            Just("scope".to_owned()),
                            "[a-z_]{1,10}",
                        ],
                        inner,
                        0..6
                    )
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse_json::<RegisterRequest>(&bytes);
                let _ = parse_json::<LoginRequest>(&bytes);
                let _ = parse_json::<CreateApiKeyRequest>(&bytes);
                let _ = parse_json::<LogoutRequest>(&bytes);
                let _ = aigw_service::gateway::validate_chat_request(&bytes);
            }

            #[test]
            fn arbitrary_json_never_panics_or_echoes_the_password(
                value in json_value(),
                secret in "[A-Za-z0-9]{12,24}",
            ) {
                let mut value = value;
                if let Some(object) = value.as_object_mut() {
                    object.insert("password".to_owned(), serde_json::Value::from(secret.clone()));
                }
                let bytes = serde_json::to_vec(&value).unwrap_or_default();
                for err in [
                    parse_json::<RegisterRequest>(&bytes).err(),
                    parse_json::<LoginRequest>(&bytes).err(),
                ]
                .into_iter()
                .flatten()
                {
                    prop_assert!(!err.issue.contains(&secret) && !err.field.contains(&secret));
                }
                let _ = aigw_service::gateway::validate_chat_request(&bytes);
            }
        }
    }

    /// Found while writing the no-echo property of `fuzz/fuzz_targets/json_bodies.rs`: a string
    /// that looks like the tail of a serde message (", expected X at line") put X into the issue.
    #[test]
    fn string_values_shaped_like_serde_messages_are_not_echoed() {
        use crate::dto::{CreateApiKeyRequest, LogoutRequest};
        fn error_of<T: DeserializeOwned>(json: &str) -> (String, String) {
            match parse_json::<T>(json.as_bytes()) {
                Ok(_) => (String::new(), String::new()),
                Err(e) => (e.field, e.issue),
            }
        }
        let (field, issue) = error_of::<CreateApiKeyRequest>(
            r#"{"name":"ci","permissions":"pw, expected TOPSECRETVALUE at line 1"}"#,
        );
        assert_eq!((field.as_str(), issue.as_str()), ("permissions", "must be a sequence"));
        for body in [
            r#"{"scope":"x, expected TOPSECRETVALUE at line "}"#,
            r#"{"scope":"x`, expected TOPSECRETVALUE"}"#,
        ] {
            let (field, issue) = error_of::<LogoutRequest>(body);
            assert_eq!(field, "scope");
            assert!(issue.starts_with("must be one of") && !issue.contains("TOPSECRET"), "{issue}");
        }
    }

    #[test]
    fn nul_anywhere_is_named_by_its_path() {
        use crate::dto::CreateApiKeyRequest;
        fn error_of(json: &str) -> (String, String) {
            match parse_json::<CreateApiKeyRequest>(json.as_bytes()) {
                Ok(_) => (String::new(), String::new()),
                Err(e) => (e.field, e.issue),
            }
        }
        let cases = [
            (r#"{"name":"a\u0000b","permissions":["read"]}"#, "name"),
            (r#"{"name":"k","permissions":["read","x\u0000"]}"#, "permissions[1]"),
            (
                r#"{"name":"k","permissions":["read"],"metadata":{"team":"\u0000"}}"#,
                "metadata.team",
            ),
            (r#"{"name":"k","permissions":["read"],"metadata":{"a\u0000":"x"}}"#, "metadata"),
            (r#"{"name":"k","permissions":["read"],"metadata":{"a b":"\u0000"}}"#, "metadata"),
            // Refused whatever type the field has.
            (r#"{"name":"k","permissions":["read"],"rpm_limit":"\u0000"}"#, "rpm_limit"),
        ];
        for (json, field) in cases {
            assert_eq!(error_of(json), (field.to_owned(), NUL_ISSUE.to_owned()), "{json}");
        }
        assert_eq!(field_of(r#"{"email":"a\u0000@x.io","password":"p"}"#).0, "email");
        // A field the body ignores reaches nothing: it is not refused.
        for ignored in [
            r#"{"\u0000":1,"name":"k","permissions":["read"]}"#,
            r#"{"name":"k","permissions":["read"],"extra":{"a":["\u0000"]}}"#,
        ] {
            assert!(parse_json::<CreateApiKeyRequest>(ignored.as_bytes()).is_ok(), "{ignored}");
        }
        // A body that refuses unknown fields refuses such a key (for its NUL first).
        let patch = parse_json::<crate::dto::UpdateApiKeyRequest>(br#"{"x\u0000":1}"#).err();
        let expected = ("body".to_owned(), NUL_ISSUE.to_owned());
        assert_eq!(patch.map(|e| (e.field, e.issue)), Some(expected));
    }

    #[test]
    fn numbers_out_of_range_are_named() {
        use crate::dto::CreateApiKeyRequest;
        // serde_json's text for NumberOutOfRange, which `parse_value` relies on.
        let err = serde_json::from_str::<serde_json::Value>("[1e400]").err();
        assert!(err.is_some_and(|e| e.to_string().starts_with("number out of range")));
        let error = |json: &str| parse_json::<CreateApiKeyRequest>(json.as_bytes()).err();
        let e = error(r#"{"name":"k","permissions":["read"],"max_budget_usd":1e400}"#);
        assert_eq!(
            e.map(|e| (e.field, e.issue)),
            Some(("max_budget_usd".into(), "is a number out of range".into()))
        );
        let e = error(r#"{"name":"k","permissions":["read"],"metadata":{"a":-1e999}}"#);
        assert_eq!(e.map(|e| e.field), Some("metadata.a".into()));
        let e = error(r#"{"name":"k","permissions":["read"],"rpm_limit":99999999999999999999999}"#);
        assert_eq!(e.map(|e| e.field), Some("rpm_limit".into()));
        let e = error(r#"{"name":"k","permissions":["read"],"rpm_limit":1e400,"#);
        assert_eq!(e.map(|e| e.field), Some("rpm_limit".into()));
    }

    #[test]
    fn names_fields_without_echoing_input() {
        assert_eq!(field_of(r#"{"email": "a"}"#).0, "password");
        let (field, issue) = field_of(r#"{"email": "a", "password": 12345}"#);
        assert_eq!(field, "password");
        assert!(!issue.contains("12345"), "{issue}");
        let (field, issue) = field_of(r#"{"email": "a", "password": ["secret-pw"]}"#);
        assert_eq!(field, "password");
        assert!(!issue.contains("secret-pw"), "{issue}");
        let (field, _) = field_of(r#"{"email": "a", "password": "p", "permissions": ["read", 5]}"#);
        assert_eq!(field, "permissions[1]");
        assert_eq!(field_of(r#"{"email": "#).0, "body");
        assert_eq!(field_of(r#""just a string""#), ("body".into(), "must be a JSON object".into()));
    }
}
