//! How a node's value is written when the store is carried across hv's
//! upgrade in place or kept by its guardian: as text when it is UTF-8
//! (nearly every value: xenbus states, paths, numbers), as a list of bytes
//! otherwise. Either form is read, so a store carried in the older
//! all-bytes form still loads. And the store's shape: what of it a record
//! of hv's state must keep.

use super::{Node, Store};
use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

pub fn serialize<S: Serializer>(value: &[u8], s: S) -> Result<S::Ok, S::Error> {
    match std::str::from_utf8(value) {
        Ok(text) => s.serialize_str(text),
        Err(_) => s.collect_seq(value),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_any(ValueForm)
}

struct ValueForm;

impl<'de> Visitor<'de> for ValueForm {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a node's value, as text or as a list of bytes")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
        Ok(text.as_bytes().to_vec())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(b) = seq.next_element::<u8>()? {
            bytes.push(b);
        }
        Ok(bytes)
    }
}

/// The store without what moves with traffic ([`Store::shape`]).
pub(super) struct Shape<'a>(pub(super) &'a Store);

impl Serialize for Shape<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let store = self.0;
        let mut shape = s.serialize_struct("Store", 8)?;
        shape.serialize_field("nodes", &NodesButStatistics(&store.nodes))?;
        shape.serialize_field("watches", &store.watches)?;
        shape.serialize_field("special_perms", &store.special_perms)?;
        shape.serialize_field("owned_nodes", &store.owned_nodes)?;
        shape.serialize_field("watch_use", &store.watch_use)?;
        shape.serialize_field("introduced", &store.introduced)?;
        shape.serialize_field("limits", &store.limits)?;
        shape.serialize_field("quotas", &store.quotas)?;
        shape.end()
    }
}

/// The store's nodes but the statistics the domains publish (`…/stats`).
struct NodesButStatistics<'a>(&'a BTreeMap<String, Node>);

impl Serialize for NodesButStatistics<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map((self.0.iter()).filter(|(path, _)| !path.ends_with("/stats")))
    }
}
