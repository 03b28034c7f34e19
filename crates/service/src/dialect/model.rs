//! A request body sent to another model than the caller named: a deployment whose upstream
//! knows the model by another name (`upstream_models`), or a fallback model. Every dialect
//! names its model in a top-level `model` member, so one rewrite serves them all.

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// A JSON object's members in their order, each value left as its text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Ordered)
    }
}

/// `body` (a JSON object, validated by its dialect) with its top-level `model` set to
/// `model`; every other member kept as it was, in its place. `None` when `body` is not a JSON
/// object (a validated body always is).
pub fn with_model(body: &[u8], model: &str) -> Option<Bytes> {
    let Members(members) = serde_json::from_slice(body).ok()?;
    let name = serde_json::to_string(model).ok()?;
    let mut out = Vec::with_capacity(body.len() + model.len());
    out.push(b'{');
    let mut named = false;
    for (at, (key, value)) in members.iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        out.extend_from_slice(serde_json::to_string(key).ok()?.as_bytes());
        out.push(b':');
        if key == "model" {
            out.extend_from_slice(name.as_bytes());
            named = true;
        } else {
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    if !named {
        if !members.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(b"\"model\":");
        out.extend_from_slice(name.as_bytes());
    }
    out.push(b'}');
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::with_model;

    #[test]
    fn only_the_model_changes_and_the_order_stays() {
        let body = br#"{"stream":true, "model":"gpt-4o","messages":[{"role":"user","content":"a \"q\""}]}"#;
        let out = with_model(body, "gpt-4o-2024-08-06").unwrap_or_default();
        assert_eq!(
            std::str::from_utf8(&out).unwrap_or_default(),
            r#"{"stream":true,"model":"gpt-4o-2024-08-06","messages":[{"role":"user","content":"a \"q\""}]}"#
        );
    }

    #[test]
    fn a_name_is_escaped_and_a_non_object_is_refused() {
        let out = with_model(br#"{"model":"a"}"#, "b\"c").unwrap_or_default();
        assert_eq!(&out[..], br#"{"model":"b\"c"}"#);
        assert!(with_model(b"[1]", "m").is_none());
    }
}
