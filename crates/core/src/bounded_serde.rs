//! Deserializing the `imbl` collections without trusting the announced length. `imbl`'s own
//! `Deserialize` pre-allocates a vector of the announced size, and postcard announces exactly
//! what the bytes say: a damaged snapshot announcing 2^40 entries aborted the process on the
//! allocation before a single entry was read (found by `crates/runtime/tests/fuzz_inputs.rs`).
//! These build the collection entry by entry, so memory follows the bytes that are there.
//! Used with `#[serde(deserialize_with = ...)]`; serialization is `imbl`'s own.

use imbl::{OrdMap, OrdSet};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

pub fn ord_map<'de, D, K, V>(d: D) -> Result<OrdMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord + Clone,
    V: Deserialize<'de> + Clone,
{
    struct MapV<K, V>(PhantomData<(K, V)>);
    impl<'de, K: Deserialize<'de> + Ord + Clone, V: Deserialize<'de> + Clone> Visitor<'de> for MapV<K, V> {
        type Value = OrdMap<K, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            let mut map = OrdMap::new();
            while let Some((k, v)) = access.next_entry()? {
                map.insert(k, v);
            }
            Ok(map)
        }
    }
    d.deserialize_map(MapV(PhantomData))
}

pub fn ord_set<'de, D, T>(d: D) -> Result<OrdSet<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Ord + Clone,
{
    struct SetV<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de> + Ord + Clone> Visitor<'de> for SetV<T> {
        type Value = OrdSet<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            let mut set = OrdSet::new();
            while let Some(x) = access.next_element()? {
                set.insert(x);
            }
            Ok(set)
        }
    }
    d.deserialize_seq(SetV(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct S {
        #[serde(deserialize_with = "ord_map")]
        m: OrdMap<u64, String>,
        #[serde(deserialize_with = "ord_set")]
        s: OrdSet<(u64, u8)>,
    }

    #[test]
    fn round_trips_and_a_huge_announced_length_is_an_error_not_an_allocation() {
        let v = S {
            m: [(1u64, "a".to_string()), (2, "b".to_string())].into_iter().collect(),
            s: [(3u64, 4u8)].into_iter().collect(),
        };
        let bytes = postcard::to_allocvec(&v).unwrap();
        assert_eq!(postcard::from_bytes::<S>(&bytes).unwrap(), v);
        // A map announcing 2^62 entries followed by nothing.
        let huge = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f];
        assert!(postcard::from_bytes::<S>(&huge).is_err());
    }
}
