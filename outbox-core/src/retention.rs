//! Retention: how long every stored record is kept, and what a retention pass did.
//!
//! "Was this event emitted" must have an answer for as long as "was this posting
//! made" does, so the outbox keeps its records at least as long as the ledger keeps
//! its transactions. A [`RetentionPolicy`] says both durations and cannot be built
//! with a `keep` shorter than the ledger's; each store keeps one policy per database
//! (insert-only, the latest row wins) and its retention job removes whole UTC days
//! ("periods") of a [`RetentionFamily`] only when they are past `keep` and every
//! record in them is terminal. The report of a pass is a [`RetentionReport`].

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};

use crate::domain::Account;
use crate::error::{Error, Result};
use crate::fanout::{DeadLetterAccount, DeadLetterState};

/// Longest finite duration accepted: 100 years. Longer is `forever`.
pub const MAX_KEEP: Duration = Duration::from_secs(36_500 * 86_400);

/// How long something is kept: a whole number of seconds, or forever.
///
/// Ordered by length, `Forever` last: `Keep::For(1 day) < Keep::Forever`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Keep {
    /// At least this long (whole seconds, at least one, at most [`MAX_KEEP`]).
    For(Duration),
    /// Never removed. Formance keeps a ledger's data unless it is pruned, so this is
    /// what a ledger without a pruning policy keeps.
    Forever,
}

impl Keep {
    /// Parses `forever` or a whole number and a unit: `400d`, `36h`, `45m`, `30s`.
    ///
    /// # Errors
    /// `InvalidInput { field }` for any other text, zero, or more than [`MAX_KEEP`].
    pub fn parse_field(field: &str, text: &str) -> Result<Self> {
        if text == "forever" {
            return Ok(Self::Forever);
        }
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let bad = || {
            Error::invalid(
                field,
                format!("{text:?}: expected `forever` or a whole number then d, h, m or s (400d)"),
            )
        };
        let number: u64 = number.parse().map_err(|_| bad())?;
        let unit = match unit {
            "d" => 86_400,
            "h" => 3_600,
            "m" => 60,
            "s" => 1,
            _ => return Err(bad()),
        };
        let seconds = number.checked_mul(unit).ok_or_else(bad)?;
        Self::from_seconds(field, seconds)
    }

    /// `seconds` as a finite duration.
    ///
    /// # Errors
    /// `InvalidInput { field }` for zero or more than [`MAX_KEEP`].
    pub fn from_seconds(field: &str, seconds: u64) -> Result<Self> {
        if seconds == 0 {
            return Err(Error::invalid(
                field,
                "a retention of zero keeps nothing; give a duration such as 400d, or `forever`",
            ));
        }
        if seconds > MAX_KEEP.as_secs() {
            return Err(Error::invalid(
                field,
                format!("{seconds} s is more than 100 years: say `forever`"),
            ));
        }
        Ok(Self::For(Duration::from_secs(seconds)))
    }

    /// The duration in whole seconds; `None` for `Forever`. This is what stores keep
    /// (`keep_seconds`, `ledger_keeps_seconds`; NULL for forever).
    pub fn seconds(self) -> Option<u64> {
        match self {
            Self::For(duration) => Some(duration.as_secs()),
            Self::Forever => None,
        }
    }
}

/// `forever`, or the largest whole unit: `400d`, `36h`, `90m`, `45s`.
impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(seconds) = self.seconds() else {
            return f.write_str("forever");
        };
        for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if seconds % size == 0 {
                return write!(f, "{}{unit}", seconds / size);
            }
        }
        write!(f, "{seconds}s")
    }
}

/// The outbox's retention and the ledger's, with `keep >= ledger_keeps` guaranteed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    keep: Keep,
    ledger_keeps: Keep,
}

impl RetentionPolicy {
    /// A policy keeping the outbox's records for `keep`, given that the ledger keeps
    /// its transactions for `ledger_keeps` (the operator's statement about the ledger).
    ///
    /// # Errors
    /// `InvalidInput { field: "keep" }` when `keep` is shorter than `ledger_keeps`.
    pub fn new(keep: Keep, ledger_keeps: Keep) -> Result<Self> {
        if keep < ledger_keeps {
            return Err(Error::invalid(
                "keep",
                format!(
                    "keeping {keep} is shorter than the ledger's retention ({ledger_keeps}): \
                     \"was this event emitted\" must have an answer as long as \"was this posting made\" does; \
                     keep at least {ledger_keeps}"
                ),
            ));
        }
        Ok(Self { keep, ledger_keeps })
    }

    /// How long the outbox keeps its records.
    pub fn keep(&self) -> Keep {
        self.keep
    }

    /// How long the ledger keeps its transactions, as the operator stated it.
    pub fn ledger_keeps(&self) -> Keep {
        self.ledger_keeps
    }

    /// The newest instant a period may end at to be past retention at `now`:
    /// `now - keep`; `None` when the policy keeps everything forever.
    pub fn cutoff(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let seconds = i64::try_from(self.keep.seconds()?).ok()?;
        now.checked_sub_signed(chrono::Duration::seconds(seconds))
    }
}

/// A policy as a store keeps it: the latest row of its insert-only policy table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRetentionPolicy {
    /// The row's id; increasing, the highest is the policy in force.
    pub id: u64,
    /// What it says.
    pub policy: RetentionPolicy,
    /// Who set it (the operator's name as given to `outbox retention set`).
    pub set_by: String,
    /// When the store recorded it.
    pub set_at: DateTime<Utc>,
}

/// A group of tables whose records leave together, period by period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RetentionFamily {
    /// `outbox_events` and their `outbox_deliveries`, by the event's day.
    Outbox,
    /// `fanout_messages` and `fanout_deliveries` (webhook ids), by the day received.
    Fanout,
    /// `fanout_dead_letters` and `fanout_replay_requests` of one destination and
    /// account, together, by the day of the group's newest record.
    FanoutDeadLetters,
    /// `inbox_messages` (processed markers), by the day applied. The per-account
    /// high-water marks (`inbox_accounts`) always stay.
    Inbox,
    /// `exceptions`, by the day detected.
    Exceptions,
}

impl RetentionFamily {
    /// Every family, in the order a retention pass handles them.
    pub const ALL: [Self; 5] = [
        Self::Outbox,
        Self::Fanout,
        Self::FanoutDeadLetters,
        Self::Inbox,
        Self::Exceptions,
    ];

    /// The stable name stores keep in their permit tables (`family` column) and
    /// reports show: `outbox`, `fanout`, `fanout_dead_letters`, `inbox`, `exceptions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Outbox => "outbox",
            Self::Fanout => "fanout",
            Self::FanoutDeadLetters => "fanout_dead_letters",
            Self::Inbox => "inbox",
            Self::Exceptions => "exceptions",
        }
    }

    /// The family named `text` by [`as_str`](Self::as_str).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == text)
    }
}

/// Why an expired period stays: the one wording every store reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptBecause {
    /// Outbox events of the day have no terminal delivery record yet.
    PendingEvents {
        /// How many.
        count: u64,
    },
    /// The day holds the outbox's newest event, whose position the next one follows
    /// (a store whose positions are `max + 1` must not hand it out again).
    NewestEvent {
        /// Its position.
        position: u64,
    },
    /// No destination has a cursor: nothing has read the day's messages.
    NoDestination,
    /// A destination's cursor is before the day's (or the group's) last message.
    DestinationBehind {
        /// The destination (its cursor's name).
        destination: String,
        /// Where its cursor is.
        read_through: u64,
        /// The last position that must be passed.
        last: u64,
    },
    /// A destination still has to re-publish an account's dead letters.
    DeadLetters {
        /// The destination.
        destination: String,
        /// The account.
        account: String,
        /// Parked (no replay request covers the latest refusal) or replaying.
        state: DeadLetterState,
        /// How far the replay re-published.
        replayed_through: u64,
        /// The account's last dead-lettered position.
        last_position: u64,
    },
    /// A consumer holds messages of an account in its gap queue.
    Held {
        /// The consumer.
        consumer: String,
        /// The account.
        account: String,
        /// How many messages are held.
        count: u64,
    },
    /// Exceptions of the day have no resolution yet: a day's exceptions leave only
    /// once every one of them is resolved.
    OpenExceptions {
        /// How many are open.
        count: u64,
        /// The id of the oldest open one.
        oldest_id: i64,
    },
    /// An account an exception names still has something pending from before the day
    /// ended.
    AccountOpen {
        /// The account.
        account: String,
        /// A held message (true) or an outbox event without a terminal delivery.
        held: bool,
    },
}

impl KeptBecause {
    /// What holds back a destination's dead letters of `account`, by the rule of
    /// [`DeadLetterAccount::state`]: `None` once they are replayed.
    /// `latest_refusal` is the id of the account's latest `refused` letter (0: none),
    /// `covered` the highest refusal id a replay request covers.
    pub fn dead_letters(
        destination: &str,
        account: &Account,
        latest_refusal: u64,
        covered: Option<u64>,
        last_position: u64,
        replayed_through: u64,
    ) -> Option<Self> {
        let standing = DeadLetterAccount {
            account: account.clone(),
            refusal_id: latest_refusal,
            refused_sequence: 0,
            refused_position: 0,
            last_position,
            replayed_through,
            released: covered.is_some_and(|c| c >= latest_refusal),
            records: 0,
        };
        match standing.state() {
            DeadLetterState::Replayed => None,
            state => Some(Self::DeadLetters {
                destination: destination.to_owned(),
                account: account.as_str().to_owned(),
                state,
                replayed_through,
                last_position,
            }),
        }
    }
}

impl fmt::Display for KeptBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PendingEvents { count } => {
                write!(f, "{count} events without a terminal delivery record")
            }
            Self::NewestEvent { position } => write!(
                f,
                "holds the outbox's newest event (position {position}); the next event is numbered \
                 after it, so the day stays until a newer event exists"
            ),
            Self::NoDestination => {
                f.write_str("no destination has a cursor yet: nothing has read the day's messages")
            }
            Self::DestinationBehind {
                destination,
                read_through,
                last,
            } => write!(
                f,
                "destination {destination} has read through position {read_through}, before the \
                 last message that must leave with it (position {last})"
            ),
            Self::DeadLetters {
                destination,
                account,
                state: DeadLetterState::Parked,
                ..
            } => write!(
                f,
                "account {account} is parked at {destination} behind a dead letter: its messages \
                 stay until `outbox fanout replay` has re-published them"
            ),
            Self::DeadLetters {
                destination,
                account,
                replayed_through,
                last_position,
                ..
            } => write!(
                f,
                "account {account} is replaying at {destination} (re-published through position \
                 {replayed_through} of {last_position})"
            ),
            Self::Held {
                consumer,
                account,
                count,
            } => write!(
                f,
                "consumer {consumer} has {count} messages of account {account} held in its gap \
                 queue: the account's markers stay until the gap is filled"
            ),
            Self::OpenExceptions { count, oldest_id } => write!(
                f,
                "{count} exceptions of the day are open (the oldest is #{oldest_id}): the day's \
                 exceptions stay until every one is resolved (`outbox exceptions resolve`)"
            ),
            Self::AccountOpen { account, held } => write!(
                f,
                "account {account} still has {} from before the day ended: its exceptions stay until \
                 that is resolved",
                if *held {
                    "a message held in the gap queue"
                } else {
                    "an outbox event without a terminal delivery record"
                }
            ),
        }
    }
}

/// What a retention pass decided about one expired period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeriodOutcome {
    /// The period's records were removed: this many rows, across the family's tables.
    Dropped {
        /// Rows removed (events and their deliveries, messages and webhook ids, …).
        rows: u64,
    },
    /// The period is past retention but stays, for this reason (an event without a
    /// terminal delivery, a destination that has not read it, a held message, …).
    Kept {
        /// Why, naming what is still pending (account, destination, position).
        reason: String,
    },
}

/// One expired period and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodVerdict {
    /// The tables it belongs to.
    pub family: RetentionFamily,
    /// The UTC day.
    pub day: NaiveDate,
    /// For [`RetentionFamily::FanoutDeadLetters`]: the destination and account whose
    /// records these are (`<destination> account <account>`); `None` otherwise.
    pub group: Option<String>,
    /// Dropped or kept, and why.
    pub outcome: PeriodOutcome,
}

/// `outbox: dropped 2026-01-01 (6 rows)` or `outbox: kept 2026-01-02: 1 events without
/// a terminal delivery record`; a dead-letter group is named after the day.
impl fmt::Display for PeriodVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = self
            .group
            .as_deref()
            .map(|g| format!(" [{g}]"))
            .unwrap_or_default();
        match &self.outcome {
            PeriodOutcome::Dropped { rows } => write!(
                f,
                "{}: dropped {}{group} ({rows} rows)",
                self.family.as_str(),
                self.day
            ),
            PeriodOutcome::Kept { reason } => write!(
                f,
                "{}: kept {}{group}: {reason}",
                self.family.as_str(),
                self.day
            ),
        }
    }
}

/// What one retention pass did: every expired period it looked at, oldest first per
/// family. Periods not yet past retention are not listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// The expired periods, dropped or kept.
    pub periods: Vec<PeriodVerdict>,
}

impl RetentionReport {
    /// The periods that were removed.
    pub fn dropped(&self) -> impl Iterator<Item = &PeriodVerdict> {
        self.periods
            .iter()
            .filter(|p| matches!(p.outcome, PeriodOutcome::Dropped { .. }))
    }

    /// The expired periods that stay, each with its reason.
    pub fn kept(&self) -> impl Iterator<Item = &PeriodVerdict> {
        self.periods
            .iter()
            .filter(|p| matches!(p.outcome, PeriodOutcome::Kept { .. }))
    }

    /// Records one period's verdict.
    pub fn push(
        &mut self,
        family: RetentionFamily,
        day: NaiveDate,
        group: Option<String>,
        outcome: PeriodOutcome,
    ) {
        self.periods.push(PeriodVerdict {
            family,
            day,
            group,
            outcome,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn keep(text: &str) -> Keep {
        Keep::parse_field("keep", text).unwrap()
    }

    #[test]
    fn keeps_parse_print_and_order() {
        assert_eq!(keep("400d"), Keep::For(Duration::from_secs(400 * 86_400)));
        assert_eq!(keep("36h").to_string(), "36h");
        assert_eq!(keep("48h").to_string(), "2d");
        assert_eq!(keep("90s").to_string(), "90s");
        assert_eq!(keep("forever").to_string(), "forever");
        assert!(keep("1d") < keep("25h") && keep("25h") < Keep::Forever);
        for bad in ["", "0d", "400", "d", "1y", "-1d", "forever!", "36501d"] {
            let err = Keep::parse_field("ledger_keeps", bad).expect_err(bad);
            assert_eq!(err.field(), Some("ledger_keeps"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_keep_shorter_than_the_ledgers_is_refused_naming_keep() {
        for (ours, ledger) in [("30d", "400d"), ("399d", "400d"), ("400d", "forever")] {
            let err = RetentionPolicy::new(keep(ours), keep(ledger)).expect_err(ours);
            assert_eq!(
                err.kind(),
                &ErrorKind::InvalidInput {
                    field: "keep".into()
                }
            );
            assert!(err.message().contains("shorter than the ledger's"), "{err}");
            assert!(err.message().contains(ledger), "{err}");
        }
        for (ours, ledger) in [("400d", "400d"), ("401d", "400d"), ("forever", "forever")] {
            let policy = RetentionPolicy::new(keep(ours), keep(ledger)).unwrap();
            assert_eq!(
                (policy.keep(), policy.ledger_keeps()),
                (keep(ours), keep(ledger))
            );
        }
    }

    #[test]
    fn the_cutoff_is_now_minus_keep_and_none_forever() {
        let now = DateTime::parse_from_rfc3339("2027-01-10T12:00:00Z")
            .unwrap()
            .to_utc();
        let policy = RetentionPolicy::new(keep("9d"), keep("9d")).unwrap();
        assert_eq!(
            policy.cutoff(now).unwrap().to_rfc3339(),
            "2027-01-01T12:00:00+00:00"
        );
        let forever = RetentionPolicy::new(Keep::Forever, keep("9d")).unwrap();
        assert_eq!(forever.cutoff(now), None);
    }

    #[test]
    fn dead_letters_hold_back_retention_until_replayed() {
        let account = Account::parse("merchants:1").unwrap();
        let reason = |refusal, covered, last, replayed| {
            KeptBecause::dead_letters("d", &account, refusal, covered, last, replayed)
                .map(|k| k.to_string())
        };
        assert!(reason(3, None, 9, 0).unwrap().contains("parked"));
        assert!(
            reason(3, Some(2), 9, 9).unwrap().contains("parked"),
            "an older request"
        );
        assert!(reason(3, Some(3), 9, 4).unwrap().contains("replaying"));
        assert_eq!(reason(3, Some(3), 9, 9), None);
        // Only set-aside letters left: released by any request, parked without one.
        assert!(reason(0, None, 9, 9).unwrap().contains("parked"));
        assert_eq!(reason(0, Some(1), 9, 9), None);
    }

    #[test]
    fn verdicts_read_as_one_line() {
        let day = NaiveDate::from_ymd_opt(2026, 1, 2).unwrap();
        let mut report = RetentionReport::default();
        report.push(
            RetentionFamily::Outbox,
            day,
            None,
            PeriodOutcome::Dropped { rows: 6 },
        );
        report.push(
            RetentionFamily::FanoutDeadLetters,
            day,
            Some("kafka://b/t account merchants:1".into()),
            PeriodOutcome::Kept {
                reason: "parked".into(),
            },
        );
        let lines: Vec<String> = report.periods.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "outbox: dropped 2026-01-02 (6 rows)",
                "fanout_dead_letters: kept 2026-01-02 [kafka://b/t account merchants:1]: parked"
            ]
        );
        assert_eq!(report.dropped().count(), 1);
        assert_eq!(report.kept().count(), 1);
        assert_eq!(
            RetentionFamily::parse("fanout_dead_letters"),
            Some(RetentionFamily::FanoutDeadLetters)
        );
    }
}
