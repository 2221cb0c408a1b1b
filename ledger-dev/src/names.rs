//! The names a ledger repeats — account addresses, asset codes, metadata keys and
//! values, idempotency keys — each kept once per ledger and shared.
//!
//! A relay-shaped transaction names `world` or a merchant's accounts, `USD/2` and
//! the same three or four metadata keys, and most of its metadata values
//! (`outbox_account`, `outbox_sequence`, `event_type`) recur across transactions;
//! its idempotency key is its event id, which is also its `outbox_event_id`.
//! Held as separate strings, those names were most of a transaction's memory; as
//! shared `Arc<str>` each occurrence is one pointer. A name that does not recur
//! costs one entry in the set beside its string.

use std::collections::HashSet;
use std::sync::Arc;

/// One ledger's interned names. Nothing is ever removed: the ledger only grows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    names: HashSet<Arc<str>>,
    /// Sorted lists of metadata keys: transactions of one kind carry the same keys
    /// (the outbox's three and the caller's), so each list is kept once as well.
    key_lists: HashSet<Arc<[Arc<str>]>>,
}

impl Names {
    /// The shared copy of `text`, made on first use.
    pub(crate) fn intern(&mut self, text: &str) -> Arc<str> {
        if let Some(name) = self.names.get(text) {
            return Arc::clone(name);
        }
        let name: Arc<str> = Arc::from(text);
        self.names.insert(Arc::clone(&name));
        name
    }

    /// The shared copy of a list of (interned) keys, made on first use.
    pub(crate) fn intern_keys(&mut self, keys: Vec<Arc<str>>) -> Arc<[Arc<str>]> {
        if let Some(list) = self.key_lists.get(keys.as_slice()) {
            return Arc::clone(list);
        }
        let list: Arc<[Arc<str>]> = Arc::from(keys);
        self.key_lists.insert(Arc::clone(&list));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_kept_once() {
        let mut names = Names::default();
        let first = names.intern("merchants:1:available");
        let again = names.intern("merchants:1:available");
        assert!(Arc::ptr_eq(&first, &again));
        assert!(!Arc::ptr_eq(&first, &names.intern("merchants:2:available")));
        assert_eq!(&*again, "merchants:1:available");
    }

    #[test]
    fn a_list_of_keys_is_kept_once() {
        let mut names = Names::default();
        let keys = |names: &mut Names, list: &[&str]| {
            let interned = list.iter().map(|k| names.intern(k)).collect();
            names.intern_keys(interned)
        };
        let first = keys(&mut names, &["outbox_account", "outbox_event_id"]);
        let again = keys(&mut names, &["outbox_account", "outbox_event_id"]);
        assert!(Arc::ptr_eq(&first, &again));
        assert!(!Arc::ptr_eq(&first, &keys(&mut names, &["outbox_account"])));
    }
}
