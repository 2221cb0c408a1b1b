//! The pgoutput decoder as the fuzz target (`fuzz/`) and the corpus replay test call
//! it: not an API, hidden from the docs.

use std::collections::HashMap;

use outbox_core::{OutboxEvent, Result};

use super::decode::{self, Message, OutboxLayout};

/// Decodes `messages` (XLogData payloads, in stream order) the way the CDC relay
/// does: Relation messages of `schema.table` teach the outbox layout, each Insert
/// into that table becomes the event it carries (committed at `commit_lsn`). One
/// result per message: `Ok(None)` for a message that carries no outbox event.
#[doc(hidden)]
pub fn decode_pgoutput<'a>(
    messages: impl IntoIterator<Item = &'a [u8]>,
    schema: &str,
    table: &str,
    commit_lsn: u64,
) -> Vec<Result<Option<OutboxEvent>>> {
    let mut layouts: HashMap<u32, Option<OutboxLayout>> = HashMap::new();
    messages
        .into_iter()
        .map(|data| match decode::parse(data)? {
            Message::Relation(relation) => {
                let layout = (relation.namespace == schema && relation.name == table)
                    .then(|| OutboxLayout::of(&relation))
                    .transpose()?;
                layouts.insert(relation.id, layout);
                Ok(None)
            }
            Message::Insert { relation, tuple } => match layouts.get(&relation) {
                Some(Some(layout)) => layout.event(&tuple, commit_lsn).map(Some),
                _ => Ok(None),
            },
            _ => Ok(None),
        })
        .collect()
}
