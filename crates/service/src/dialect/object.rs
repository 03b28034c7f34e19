//! [`Object`]: a JSON object read into a typed view, and nothing else. serde's derived
//! `Deserialize` also reads a struct from a JSON array, by position; a view of a provider's
//! event must not, because the event's JSON tree finds no member in an array.

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

/// `T` read from a JSON object only: any other JSON value is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Object<T>(pub T);

impl<T> Deref for Object<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Accepts a map only, and reads it as `T`.
        struct MapOnly<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for MapOnly<T> {
            type Value = T;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }

        deserializer.deserialize_map(MapOnly(PhantomData)).map(Object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Pair {
        a: Option<u64>,
        b: Option<u64>,
    }

    #[test]
    fn only_an_object_reads() {
        let read = |s: &str| serde_json::from_str::<Object<Pair>>(s).ok().map(|o| o.0);
        assert_eq!(read(r#"{"b":2,"c":[1]}"#), Some(Pair { a: None, b: Some(2) }));
        assert_eq!(
            serde_json::from_str::<Pair>("[1,2]").ok(),
            Some(Pair { a: Some(1), b: Some(2) })
        );
        assert_eq!(read("[1,2]"), None);
        assert_eq!(read("null"), None);
        assert_eq!(read("7"), None);
    }
}
