//! The exception queue, shared by the outbox (`Store::raise_exception`) and the
//! consumer's inbox (`Inbox::record_exception`): append-only findings, each closed by
//! an append-only resolution.

use std::collections::BTreeMap;

use chrono::Utc;
use outbox_core::{Error, Exception, NewException, Resolution, Result};

#[derive(Debug, Clone, Default)]
pub(crate) struct ExceptionQueue {
    /// Findings in the order they were recorded; the id of `rows[i]` is `i + 1`.
    rows: Vec<Exception>,
    /// Resolutions by exception id, kept apart like the SQL stores'
    /// `exception_resolutions`: one per exception, never replaced.
    resolutions: BTreeMap<i64, Resolution>,
}

impl ExceptionQueue {
    /// Records `finding` unless an open exception with the same identity exists (also
    /// the inbox's rule: its findings carry no event id or asset, so the identity is
    /// source, kind, account and sequence); returns whether it was recorded.
    pub(crate) fn raise(&mut self, finding: &NewException) -> bool {
        let identity = finding.identity();
        let open_twin = self.rows.iter().any(|row| {
            !self.resolutions.contains_key(&row.id) && row.finding().identity() == identity
        });
        if open_twin {
            return false;
        }
        let id = self.rows.len() as i64 + 1;
        self.rows.push(Exception {
            id,
            source: finding.source.clone(),
            kind: finding.kind,
            severity: finding.severity,
            account: finding.account.clone(),
            sequence: finding.sequence,
            event_id: finding.event_id.clone(),
            ledger_tx: finding.ledger_tx,
            asset: finding.asset.clone(),
            ledger_amount: finding.ledger_amount,
            provider_amount: finding.provider_amount,
            detail: finding.detail.clone(),
            detected_at: Utc::now(),
            resolution: None,
        });
        true
    }

    /// Appends the resolution of exception `id`.
    ///
    /// # Errors
    /// `InvalidInput` naming `note` or `resolved_by` when blank, `id` when there is
    /// no such exception or it is already resolved.
    pub(crate) fn resolve(&mut self, id: i64, resolved_by: &str, note: &str) -> Result<Resolution> {
        Resolution::validate(resolved_by, note)?;
        let known = usize::try_from(id).is_ok_and(|i| (1..=self.rows.len()).contains(&i));
        if !known {
            return Err(Error::invalid("id", format!("no exception {id}")));
        }
        if let Some(earlier) = self.resolutions.get(&id) {
            return Err(Error::invalid(
                "id",
                format!(
                    "exception {id} is already resolved (by {} at {}): a resolution is never replaced",
                    earlier.resolved_by, earlier.resolved_at
                ),
            ));
        }
        let resolution = Resolution {
            resolved_by: resolved_by.to_owned(),
            note: note.to_owned(),
            resolved_at: Utc::now(),
        };
        self.resolutions.insert(id, resolution.clone());
        Ok(resolution)
    }

    /// Every exception, oldest first, each with its resolution if it has one.
    pub(crate) fn all(&self) -> Vec<Exception> {
        self.rows
            .iter()
            .map(|row| Exception {
                resolution: self.resolutions.get(&row.id).cloned(),
                ..row.clone()
            })
            .collect()
    }
}
