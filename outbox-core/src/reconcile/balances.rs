//! Balances per account and asset against the provider's statement (the
//! reconciliation function's check).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{Account, EventId};
use crate::error::Result;

/// An outbox event the relay posted, for naming what came last before a drift.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedEvent {
    /// The event's account.
    pub account: Account,
    /// Its sequence.
    pub sequence: u64,
    /// Its id.
    pub event_id: EventId,
    /// The ledger transaction its delivery recorded.
    pub ledger_tx: Option<u64>,
}

/// What the balance check reads from the outbox database.
#[async_trait]
pub trait PostedHistory: Send + Sync {
    /// Up to `limit` events of any of `accounts` that were enqueued at or before
    /// `before` and have an accepted or replayed delivery, highest sequence first per
    /// account, newest first overall.
    async fn last_posted(
        &self,
        accounts: &[Account],
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<PostedEvent>>;
}

/// Who the balance check raises its exceptions as.
pub const SOURCE: &str = "reconcile:balances";

/// How the balance check runs.
#[derive(Debug, Clone)]
pub struct BalanceCheck {
    /// Only statement lines whose account matches (see [`account_matches`]); all when
    /// `None`.
    pub accounts: Option<String>,
    /// Compare at this time instead of each line's own `as_of`.
    pub at: Option<DateTime<Utc>>,
    /// The largest difference, in minor units, that is not a drift (0 by default).
    pub tolerance: u128,
    /// How many of the last posted outbox events a drift names.
    pub last_posted: usize,
}

impl Default for BalanceCheck {
    fn default() -> Self {
        Self {
            accounts: None,
            at: None,
            tolerance: 0,
            last_posted: 3,
        }
    }
}

/// One statement line as compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// The statement line.
    pub line: super::statement::StatementLine,
    /// The time compared at.
    pub at: DateTime<Utc>,
    /// The ledger's balance by effective date.
    pub ledger: i128,
    /// The ledger's balance by insertion date, when the ledger answers it.
    pub ledger_by_insertion: Option<i128>,
    /// `provider - ledger`: positive when the provider holds more.
    pub difference: i128,
}

/// What one balance check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BalanceReport {
    /// Lines compared, the drifts and the notes.
    pub check: super::CheckReport,
    /// Every compared line.
    pub compared: Vec<Comparison>,
    /// Lines the ledger gave no answer for (no balance at all for the account by then):
    /// an error, never read as zero.
    pub unanswered: Vec<String>,
}

/// Whether `account` matches `pattern`: segments separated by `:`, where a `*`
/// segment matches any one segment and a trailing `**` any number of them
/// (`merchants:*:payouts:pending`, `merchants:4471:**`).
pub fn account_matches(pattern: &str, account: &str) -> bool {
    let pattern: Vec<&str> = pattern.split(':').collect();
    let account: Vec<&str> = account.split(':').collect();
    if let Some((&"**", head)) = pattern.split_last() {
        return account.len() >= head.len()
            && head.iter().zip(&account).all(|(p, a)| *p == "*" || p == a);
    }
    pattern.len() == account.len()
        && pattern
            .iter()
            .zip(&account)
            .all(|(p, a)| *p == "*" || p == a)
}

/// The outbox accounts a ledger address may belong to: itself and each of its
/// `:`-prefixes (`merchants:4471:payouts:pending` is moved by events of
/// `merchants:4471`).
fn owning_accounts(address: &str) -> Vec<Account> {
    let segments: Vec<&str> = address.split(':').collect();
    (1..=segments.len())
        .rev()
        .filter_map(|n| Account::parse(&segments[..n].join(":")).ok())
        .collect()
}

impl BalanceCheck {
    /// Compares every selected statement line with the ledger at the statement's
    /// time, by effective date and (where the ledger answers it) by insertion date.
    ///
    /// A line is a [`BalanceMismatch`](crate::ExceptionKind::BalanceMismatch) when
    /// the provider differs from either ledger figure by more than the tolerance,
    /// either way. A difference between the two figures alone means a transaction was
    /// backdated before the statement time after that time passed; the drift's detail
    /// gives both. Each drift names the last outbox events posted on the account
    /// before the statement time.
    pub async fn run(
        &self,
        statement: &super::statement::Statement,
        ledger: &dyn crate::Ledger,
        history: &dyn PostedHistory,
    ) -> Result<BalanceReport> {
        let mut report = BalanceReport::default();
        let mut insertion_supported = true;
        for line in &statement.lines {
            if let Some(pattern) = &self.accounts
                && !account_matches(pattern, &line.account)
            {
                continue;
            }
            report.check.checked += 1;
            let at = self.at.unwrap_or(line.as_of);
            let effective = ledger
                .aggregate_balances_at(&line.account, at, crate::BalanceDate::Effective)
                .await
                .map_err(|e| e.with("account", &line.account))?;
            if effective.is_empty() {
                report.unanswered.push(format!(
                    "{} ({}): the ledger has no balance at all for {} at {}; an empty answer is not zero",
                    line.origin,
                    line.asset,
                    line.account,
                    at.to_rfc3339()
                ));
                continue;
            }
            let by_insertion = if insertion_supported {
                match ledger
                    .aggregate_balances_at(&line.account, at, crate::BalanceDate::Insertion)
                    .await
                {
                    Ok(balances) => Some(balances),
                    Err(e) if matches!(e.kind(), crate::ErrorKind::Unsupported) => {
                        insertion_supported = false;
                        report.check.notes.push(format!(
                            "the ledger cannot answer balances by insertion date ({e}): backdated transactions are not told apart"
                        ));
                        None
                    }
                    Err(e) => return Err(e.with("account", &line.account)),
                }
            } else {
                None
            };
            let of = |balances: &crate::Balances| balances.get(&line.asset).copied().unwrap_or(0);
            let comparison = Comparison {
                line: line.clone(),
                at,
                ledger: of(&effective),
                ledger_by_insertion: by_insertion.as_ref().map(of),
                difference: line.balance - of(&effective),
            };
            let off = |ledger: i128| (line.balance - ledger).unsigned_abs() > self.tolerance;
            if off(comparison.ledger) || comparison.ledger_by_insertion.is_some_and(off) {
                let posted = history
                    .last_posted(&owning_accounts(&line.account), at, self.last_posted)
                    .await?;
                report.check.findings.push(drift(&comparison, &posted)?);
            }
            report.compared.push(comparison);
        }
        Ok(report)
    }
}

fn drift(comparison: &Comparison, posted: &[PostedEvent]) -> Result<crate::NewException> {
    let line = &comparison.line;
    let mut detail = format!(
        "{}: at {} the provider has {} {} and the ledger {} (provider - ledger = {:+})",
        line.origin,
        comparison.at.to_rfc3339(),
        line.asset,
        line.balance,
        comparison.ledger,
        comparison.difference
    );
    if let Some(inserted) = comparison.ledger_by_insertion {
        detail.push_str(&format!("; by insertion date the ledger had {inserted}"));
        if inserted != comparison.ledger {
            detail.push_str(&format!(
                " ({:+} from transactions dated before {} but inserted after it: backdated)",
                comparison.ledger - inserted,
                comparison.at.to_rfc3339()
            ));
        }
    }
    if posted.is_empty() {
        detail.push_str("; no outbox event was posted on this account before then");
    } else {
        let named: Vec<String> = posted
            .iter()
            .map(|p| {
                let tx = p
                    .ledger_tx
                    .map_or_else(String::new, |tx| format!(", tx {tx}"));
                format!("{} #{} ({}{tx})", p.account, p.sequence, p.event_id)
            })
            .collect();
        detail.push_str(&format!("; last posted before then: {}", named.join(", ")));
    }
    let account = Account::parse_field("statement account", &line.account)?;
    let mut finding = crate::NewException::new(
        SOURCE,
        crate::ExceptionKind::BalanceMismatch,
        account,
        posted.first().map_or(0, |p| p.sequence),
        detail,
    )
    .with_asset(line.asset.as_str())
    .with_amounts(Some(comparison.ledger), Some(line.balance));
    if let Some(last) = posted.first() {
        finding = finding.with_event_id(last.event_id.to_string());
        if let Some(tx) = last.ledger_tx {
            finding = finding.with_ledger_tx(tx);
        }
    }
    Ok(finding)
}

#[cfg(test)]
mod tests;
