//! A transaction's four volume maps as the ledger keeps them in memory: one small
//! boxed slice of numbers, from which the maps render back unchanged.
//!
//! A transaction answers with `preCommitVolumes`, `preCommitEffectiveVolumes`,
//! `postCommitVolumes` and `postCommitEffectiveVolumes`, each
//! `{account: {asset: {input, output, balance}}}`. As four nested `BTreeMap`s those
//! took several kilobytes per transaction (a map node is hundreds of bytes even
//! for one entry). Only the pre-commit inputs and outputs are kept, one row per
//! account and asset the postings touch, in the maps' order; everything else is
//! recomputed when rendering:
//! - which accounts and assets the maps hold: those of the postings;
//! - the post-commit volumes: the pre-commit ones plus what the transaction's own
//!   postings moved, exactly how `LedgerState::commit_volumes` made them;
//! - a balance: input minus output.
//!
//! Volumes that do not follow those rules — a data file written some other way —
//! are kept as they were written, so an answer never changes. Rows are `u64`
//! unless a volume needs more (a ledger that moved over 2^64 minor units).

use std::collections::BTreeMap;

use crate::model::{AccountVolumes, Volumes};
use crate::stored_transaction::StoredPosting;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredVolumes(Form);

/// A row is `[pre input, pre output, pre effective input, pre effective output]`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    Narrow(Box<[[u64; 4]]>),
    Wide(Box<[[u128; 4]]>),
    /// `[pre, pre effective, post, post effective]` as written, when rows would
    /// not render them back exactly.
    AsWritten(Box<[AccountVolumes; 4]>),
}

/// The accounts and assets `postings` touch, sorted by account then asset: the
/// volume maps' keys, in their order.
fn touched(postings: &[StoredPosting]) -> Vec<(&str, &str)> {
    let mut keys: Vec<(&str, &str)> = postings
        .iter()
        .flat_map(|p| [(&*p.source, &*p.asset), (&*p.destination, &*p.asset)])
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// What `postings` moved into (`.0`) and out of (`.1`) `account` in `asset`.
fn moved(postings: &[StoredPosting], account: &str, asset: &str) -> (u128, u128) {
    let (mut input, mut output) = (0u128, 0u128);
    for p in postings.iter().filter(|p| &*p.asset == asset) {
        if &*p.destination == account {
            input = input.wrapping_add(u128::from(p.amount));
        }
        if &*p.source == account {
            output = output.wrapping_add(u128::from(p.amount));
        }
    }
    (input, output)
}

fn volumes(input: u128, output: u128) -> Volumes {
    // Exact for every row kept (`StoredVolumes::new` checks the round trip).
    #[allow(clippy::cast_possible_wrap)]
    let balance = (input as i128).wrapping_sub(output as i128);
    Volumes {
        input,
        output,
        balance,
    }
}

fn volumes_of<'a>(map: &'a AccountVolumes, account: &str, asset: &str) -> Option<&'a Volumes> {
    map.get(account).and_then(|assets| assets.get(asset))
}

impl StoredVolumes {
    /// The compact form of `[pre, pre effective, post, post effective]` of a
    /// transaction with `postings`.
    pub(crate) fn new(volumes: [&AccountVolumes; 4], postings: &[StoredPosting]) -> Self {
        let [pre, pre_effective, _, _] = volumes;
        let rows: Vec<[u128; 4]> = touched(postings)
            .into_iter()
            .map(|(account, asset)| {
                let plain = volumes_of(pre, account, asset).copied().unwrap_or_default();
                let effective = volumes_of(pre_effective, account, asset)
                    .copied()
                    .unwrap_or_default();
                [plain.input, plain.output, effective.input, effective.output]
            })
            .collect();
        let narrow: Option<Box<[[u64; 4]]>> = rows
            .iter()
            .map(|row| {
                let mut out = [0u64; 4];
                for (narrow, wide) in out.iter_mut().zip(row) {
                    *narrow = u64::try_from(*wide).ok()?;
                }
                Some(out)
            })
            .collect();
        let stored = Self(match narrow {
            Some(narrow) => Form::Narrow(narrow),
            None => Form::Wide(rows.into_boxed_slice()),
        });
        let exact = stored
            .to_model(postings)
            .iter()
            .zip(volumes)
            .all(|(rendered, written)| rendered == written);
        if exact {
            stored
        } else {
            Self(Form::AsWritten(Box::new(volumes.map(Clone::clone))))
        }
    }

    /// `[pre, pre effective, post, post effective]` as the API renders them, for
    /// the `postings` given to [`Self::new`].
    pub(crate) fn to_model(&self, postings: &[StoredPosting]) -> [AccountVolumes; 4] {
        let rows: Vec<[u128; 4]> = match &self.0 {
            Form::Narrow(rows) => rows.iter().map(|row| row.map(u128::from)).collect(),
            Form::Wide(rows) => rows.to_vec(),
            Form::AsWritten(volumes) => return (**volumes).clone(),
        };
        let mut maps: [AccountVolumes; 4] = Default::default();
        for ((account, asset), [input, output, effective_input, effective_output]) in
            touched(postings).into_iter().zip(rows)
        {
            let (moved_in, moved_out) = moved(postings, account, asset);
            let rendered = [
                volumes(input, output),
                volumes(effective_input, effective_output),
                volumes(input.wrapping_add(moved_in), output.wrapping_add(moved_out)),
                volumes(
                    effective_input.wrapping_add(moved_in),
                    effective_output.wrapping_add(moved_out),
                ),
            ];
            for (map, v) in maps.iter_mut().zip(rendered) {
                map.entry(account.to_owned())
                    .or_insert_with(BTreeMap::new)
                    .insert(asset.to_owned(), v);
            }
        }
        maps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::Names;

    fn posting(source: &str, destination: &str, amount: u64, names: &mut Names) -> StoredPosting {
        StoredPosting {
            source: names.intern(source),
            destination: names.intern(destination),
            asset: names.intern("USD/2"),
            amount,
        }
    }

    fn volumes(input: u128, output: u128) -> Volumes {
        Volumes {
            input,
            output,
            balance: i128::try_from(input).unwrap() - i128::try_from(output).unwrap(),
        }
    }

    fn map(entries: &[(&str, Volumes)]) -> AccountVolumes {
        let mut map = AccountVolumes::new();
        for (account, v) in entries {
            map.entry((*account).to_owned())
                .or_default()
                .insert("USD/2".to_owned(), *v);
        }
        map
    }

    #[test]
    fn post_commit_volumes_are_derived_from_the_postings() {
        let mut names = Names::default();
        // `a` pays itself as well: both sides of one posting on the same account.
        let postings = [
            posting("world", "a", 100, &mut names),
            posting("a", "a", 7, &mut names),
        ];
        let pre = map(&[("a", volumes(5, 2)), ("world", volumes(0, 5))]);
        let pre_effective = map(&[("a", volumes(1, 0)), ("world", volumes(0, 1))]);
        let post = map(&[("a", volumes(112, 9)), ("world", volumes(0, 105))]);
        let post_effective = map(&[("a", volumes(108, 7)), ("world", volumes(0, 101))]);
        let written = [&pre, &pre_effective, &post, &post_effective];
        let stored = StoredVolumes::new(written, &postings);
        assert!(matches!(stored.0, Form::Narrow(_)), "{stored:?}");
        assert_eq!(
            stored.to_model(&postings),
            [pre, pre_effective, post, post_effective]
        );
    }

    #[test]
    fn volumes_the_rows_cannot_reproduce_are_kept_as_written() {
        let mut names = Names::default();
        let postings = [posting("world", "a", 100, &mut names)];
        let pre = map(&[("a", volumes(0, 0)), ("world", volumes(0, 0))]);
        // Not pre + postings: a file written by some other program.
        let post = map(&[("a", volumes(99, 0)), ("world", volumes(0, 100))]);
        let mut odd_balance = volumes(0, 0);
        odd_balance.balance = 3;
        let pre_effective = map(&[("a", odd_balance), ("world", volumes(0, 0))]);
        // An account the postings do not touch.
        let mut extra = pre.clone();
        extra.extend(map(&[("b", volumes(0, 0))]));
        for written in [
            [&pre, &pre, &post, &post],
            [&pre, &pre_effective, &post, &post],
            [&extra, &pre, &post, &post],
        ] {
            let stored = StoredVolumes::new(written, &postings);
            assert!(matches!(stored.0, Form::AsWritten(_)), "{stored:?}");
            assert_eq!(stored.to_model(&postings), written.map(Clone::clone));
        }
    }

    #[test]
    fn volumes_beyond_u64_round_trip() {
        let mut names = Names::default();
        let postings = [posting("world", "a", u64::MAX, &mut names)];
        let big = u128::from(u64::MAX) * 5;
        let pre = map(&[("a", volumes(big, 0)), ("world", volumes(0, big))]);
        let post = map(&[
            ("a", volumes(big + u128::from(u64::MAX), 0)),
            ("world", volumes(0, big + u128::from(u64::MAX))),
        ]);
        let written = [&pre, &pre, &post, &post];
        let stored = StoredVolumes::new(written, &postings);
        assert!(matches!(stored.0, Form::Wide(_)), "{stored:?}");
        assert_eq!(stored.to_model(&postings), written.map(Clone::clone));
    }
}
