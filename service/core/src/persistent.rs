//! Reading the state's persistent collections from snapshot bytes without
//! trusting a length prefix.
//!
//! The state keeps its large collections in `imbl`'s persistent maps, so that a
//! snapshot's copy of the whole state shares them instead of copying a million
//! entries under the lock that applying waits for. imbl's own `Deserialize`
//! reserves room for as many entries as the input claims before reading one:
//! snapshot bytes claiming 2^60 entries aborted the process on allocation (the
//! snapshot fuzz property found it). These read entry by entry instead, as serde
//! does for the standard collections, so a false length ends in a decode error.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;

use imbl::shared_ptr::DefaultSharedPtr;
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A collection filled one item at a time.
trait Collection<T>: Default {
    fn add(&mut self, item: T);
}

impl<K: Ord + Clone, V: Clone> Collection<(K, V)> for imbl::OrdMap<K, V> {
    fn add(&mut self, (key, value): (K, V)) {
        self.insert(key, value);
    }
}

impl<K, V, S> Collection<(K, V)> for imbl::GenericHashMap<K, V, S, DefaultSharedPtr>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher + Default + Clone,
{
    fn add(&mut self, (key, value): (K, V)) {
        self.insert(key, value);
    }
}

impl<A: Ord + Clone> Collection<A> for imbl::OrdSet<A> {
    fn add(&mut self, item: A) {
        self.insert(item);
    }
}

impl<A: Clone> Collection<A> for imbl::Vector<A> {
    fn add(&mut self, item: A) {
        self.push_back(item);
    }
}

/// Fills a `C` from `next` until it has no more items.
fn filled<C: Collection<T>, T, E>(mut next: impl FnMut() -> Result<Option<T>, E>) -> Result<C, E> {
    let mut collection = C::default();
    while let Some(item) = next()? {
        collection.add(item);
    }
    Ok(collection)
}

/// Visits a map into `C`, entry by entry.
struct MapItems<C, T>(PhantomData<(C, T)>);

impl<'de, C, K, V> Visitor<'de> for MapItems<C, (K, V)>
where
    C: Collection<(K, V)>,
    K: Deserialize<'de>,
    V: Deserialize<'de>,
{
    type Value = C;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a map")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut access: M) -> Result<C, M::Error> {
        filled(|| access.next_entry())
    }
}

/// Visits a sequence into `C`, item by item.
struct SeqItems<C, T>(PhantomData<(C, T)>);

impl<'de, C, T> Visitor<'de> for SeqItems<C, T>
where
    C: Collection<T>,
    T: Deserialize<'de>,
{
    type Value = C;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<C, A::Error> {
        filled(|| access.next_element())
    }
}

/// `deserialize_with` for an [`imbl::OrdMap`] field.
pub(crate) fn ord_map<'de, D, K, V>(deserializer: D) -> Result<imbl::OrdMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord + Clone,
    V: Deserialize<'de> + Clone,
{
    deserializer.deserialize_map(MapItems(PhantomData))
}

/// `deserialize_with` for an [`imbl::GenericHashMap`] field.
pub(crate) fn hash_map<'de, D, K, V, S>(
    deserializer: D,
) -> Result<imbl::GenericHashMap<K, V, S, DefaultSharedPtr>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Hash + Eq + Clone,
    V: Deserialize<'de> + Clone,
    S: BuildHasher + Default + Clone,
{
    deserializer.deserialize_map(MapItems(PhantomData))
}

/// `deserialize_with` for an [`imbl::OrdSet`] field.
pub(crate) fn ord_set<'de, D, A>(deserializer: D) -> Result<imbl::OrdSet<A>, D::Error>
where
    D: Deserializer<'de>,
    A: Deserialize<'de> + Ord + Clone,
{
    deserializer.deserialize_seq(SeqItems(PhantomData))
}

/// `deserialize_with` for an [`imbl::Vector`] field.
pub(crate) fn vector<'de, D, A>(deserializer: D) -> Result<imbl::Vector<A>, D::Error>
where
    D: Deserializer<'de>,
    A: Deserialize<'de> + Clone,
{
    deserializer.deserialize_seq(SeqItems(PhantomData))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Fields {
        #[serde(deserialize_with = "ord_map")]
        map: imbl::OrdMap<u32, String>,
        #[serde(deserialize_with = "ord_set")]
        set: imbl::OrdSet<u32>,
        #[serde(deserialize_with = "vector")]
        list: imbl::Vector<u32>,
    }

    #[test]
    fn entries_are_read_as_written() {
        let bytes = postcard::to_allocvec(&(
            std::collections::BTreeMap::from([(2u32, "b".to_owned()), (1, "a".to_owned())]),
            std::collections::BTreeSet::from([3u32, 1]),
            vec![5u32, 4],
        ))
        .unwrap();
        let fields: Fields = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(
            fields.map.into_iter().collect::<Vec<_>>(),
            vec![(1, "a".to_owned()), (2, "b".to_owned())]
        );
        assert_eq!(fields.set.into_iter().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(fields.list.into_iter().collect::<Vec<_>>(), vec![5, 4]);
    }

    #[test]
    fn a_huge_claimed_length_is_a_decode_error_not_an_allocation() {
        // A map that claims u64::MAX / 2 entries and carries none.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]);
        let result: Result<Fields, _> = postcard::from_bytes(&bytes);
        assert!(result.is_err());
    }
}
