//! Transaction metadata as the ledger keeps it in memory: a shared sorted list of
//! interned keys and a boxed slice of interned values, instead of a
//! `BTreeMap<String, String>`.
//!
//! A `BTreeMap` allocates a whole node (about 550 bytes) even for one entry, plus a
//! string per key and value; a transaction carrying the outbox's four keys held
//! about a kilobyte of metadata that way. Here its own part is one pointer per
//! value: the key list is shared by every transaction with the same keys. Keys are
//! sorted like the map's (byte order), so the metadata renders back into the
//! identical `Metadata` and a key is found by binary search.

use std::sync::Arc;

use outbox_core::Metadata;

use crate::names::Names;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredMetadata {
    /// Sorted; `values[i]` belongs to `keys[i]`.
    keys: Arc<[Arc<str>]>,
    values: Box<[Arc<str>]>,
}

impl StoredMetadata {
    /// `metadata` with its keys, key list and values interned in `names`.
    pub(crate) fn new(metadata: &Metadata, names: &mut Names) -> Self {
        // A `BTreeMap` iterates in key order: the lists are sorted as built.
        let keys = metadata.keys().map(|key| names.intern(key)).collect();
        Self {
            keys: names.intern_keys(keys),
            values: metadata.values().map(|value| names.intern(value)).collect(),
        }
    }

    /// The metadata as the API renders it.
    pub(crate) fn to_model(&self) -> Metadata {
        self.keys
            .iter()
            .zip(&self.values)
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.keys
            .binary_search_by(|k| (**k).cmp(key))
            .ok()
            .map(|i| &*self.values[i])
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_back_what_it_was_built_from() {
        let metadata = Metadata::from([
            ("outbox_sequence".into(), "2".into()),
            ("Z".into(), "upper case sorts first".into()),
            ("outbox_event_id".into(), "0190f2a0".into()),
            ("é".into(), "".into()),
        ]);
        let stored = StoredMetadata::new(&metadata, &mut Names::default());
        assert_eq!(stored.to_model(), metadata);
        assert_eq!(stored.get("outbox_event_id"), Some("0190f2a0"));
        assert_eq!(stored.get("é"), Some(""));
        assert!(stored.contains_key("Z"));
        assert!(!stored.contains_key("outbox_account"));
        let empty = StoredMetadata::new(&Metadata::new(), &mut Names::default());
        assert_eq!(empty.to_model(), Metadata::new());
        assert_eq!(empty.get(""), None);
    }
}
