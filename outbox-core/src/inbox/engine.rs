//! The inbox engine: duplicate, stale, apply-next, hold-on-gap, release, alarm.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::{Claim, HoldResult, Inbox, InboxMessage, MessageKind};
use crate::domain::Account;
use crate::error::Result;
use crate::exception::{ExceptionKind, NewException};

/// Applies one message's impact inside the consumer's transaction.
#[allow(async_fn_in_trait)]
pub trait Handler<I> {
    /// Writes the impact through `inbox`'s transaction. An error rolls everything back.
    async fn apply(&mut self, inbox: &mut I, message: &InboxMessage) -> Result<()>;
}

impl<I, F> Handler<I> for F
where
    F: FnMut(&mut I, &InboxMessage) -> Result<()>,
{
    async fn apply(&mut self, inbox: &mut I, message: &InboxMessage) -> Result<()> {
        self(inbox, message)
    }
}

/// What [`InboxEngine::accept`] did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Applied (or, for a rejection notice, consumed); `released` lists held sequences applied after it.
    Applied {
        /// The held sequences released and applied behind this message, ascending;
        /// empty when nothing was waiting.
        released: Vec<u64>,
    },
    /// Already processed, or already waiting in the gap queue: no effect.
    Duplicate,
    /// A new instruction id at an already-applied sequence: no effect, exception recorded.
    Stale {
        /// The account's high-water mark, at or above the message's sequence.
        last_applied: u64,
    },
    /// Sequence skips a number: held until the gap fills.
    Held {
        /// The sequence that must arrive first (`last_applied + 1`).
        waiting_for: u64,
    },
    /// Another instruction already holds this sequence: not held, exception recorded.
    Conflict {
        /// The instruction id held at that sequence.
        holder: String,
    },
    /// The instruction was already processed (or is held) as `recorded` and now
    /// arrives as `received`, e.g. committed after it was reported rejected: nothing
    /// applied, a `ConflictingOutcome` exception recorded.
    ConflictingOutcome {
        /// The outcome the inbox already has for the instruction.
        recorded: MessageKind,
        /// The outcome this message reports.
        received: MessageKind,
    },
}

/// A gap that has been open longer than the alarm age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapAlarm {
    /// The consumer whose inbox has the gap (the exception's source).
    pub consumer: String,
    /// The account whose sequence has the gap.
    pub account: Account,
    /// The sequence that has not arrived.
    pub missing: u64,
    /// The held sequence waiting behind it.
    pub held: u64,
    /// How long the lowest held message has waited, at the check.
    pub age: Duration,
}

type AlarmHook = Arc<dyn Fn(&GapAlarm) + Send + Sync>;

/// Per-account ordering and dedup for one consumer.
#[derive(Clone)]
pub struct InboxEngine {
    consumer: String,
    gap_alarm_after: Duration,
    on_alarm: Option<AlarmHook>,
}

impl fmt::Debug for InboxEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxEngine")
            .field("consumer", &self.consumer)
            .field("gap_alarm_after", &self.gap_alarm_after)
            .field("on_alarm", &self.on_alarm.is_some())
            .finish()
    }
}

impl InboxEngine {
    /// Default age after which an open gap raises an alarm.
    pub const DEFAULT_GAP_ALARM_AFTER: Duration = Duration::from_secs(60);

    /// The engine of consumer `consumer`: the name that keys its inbox rows and
    /// sources its exceptions, so two consumers sharing a database keep apart. Gaps
    /// alarm after [`DEFAULT_GAP_ALARM_AFTER`](Self::DEFAULT_GAP_ALARM_AFTER), with
    /// no metric hook.
    pub fn new(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            gap_alarm_after: Self::DEFAULT_GAP_ALARM_AFTER,
            on_alarm: None,
        }
    }

    /// How long a gap may stay open before [`check_gaps`](Self::check_gaps) raises an
    /// alarm for it. The gap is never skipped, whatever its age.
    #[must_use]
    pub fn gap_alarm_after(mut self, age: Duration) -> Self {
        self.gap_alarm_after = age;
        self
    }

    /// A metric hook called once per new alarm.
    #[must_use]
    pub fn on_alarm(mut self, hook: impl Fn(&GapAlarm) + Send + Sync + 'static) -> Self {
        self.on_alarm = Some(Arc::new(hook));
        self
    }

    /// The consumer's name, as given to [`new`](Self::new).
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Takes one message inside the caller's transaction.
    ///
    /// On error nothing must be committed: the caller rolls back, so no marker, no
    /// impact and no release survives.
    pub async fn accept<I: Inbox, H: Handler<I>>(
        &self,
        inbox: &mut I,
        message: InboxMessage,
        handler: &mut H,
    ) -> Result<Accepted> {
        let consumer = self.consumer.as_str();
        // Marked before the impact is written: both commit or roll back together.
        let mut next = match inbox.claim_next(consumer, &message).await? {
            Claim::Duplicate { recorded } if recorded == message.kind => {
                return Ok(Accepted::Duplicate);
            }
            Claim::Duplicate { recorded } => {
                return self
                    .conflicting_outcome(inbox, &message, recorded, "processed")
                    .await;
            }
            Claim::Claimed { next_held } => next_held,
            Claim::NotNext { last_applied } if message.sequence > last_applied => {
                return self.hold(inbox, message, last_applied + 1).await;
            }
            Claim::NotNext { last_applied } => {
                let detail = format!(
                    "instruction {} at sequence {} arrived after sequence {last_applied} was applied",
                    message.instruction_id, message.sequence
                );
                tracing::warn!(consumer, account = %message.account, sequence = message.sequence, "{detail}");
                inbox
                    .record_exception(&self.exception(
                        ExceptionKind::StaleSequence,
                        &message.account,
                        message.sequence,
                        detail,
                    ))
                    .await?;
                return Ok(Accepted::Stale { last_applied });
            }
        };
        self.impact(inbox, &message, handler).await?;
        let mut released = Vec::new();
        while let Some(held) = next {
            // Released, not claimed: it was new when it was held, and taking its
            // instruction's claim lock here, under the account's row lock, could
            // deadlock with a worker holding that claim and waiting for the row.
            inbox.mark_applied(consumer, &held).await?;
            next = inbox
                .take_held(consumer, &held.account, held.sequence + 1)
                .await?;
            self.impact(inbox, &held, handler).await?;
            released.push(held.sequence);
        }
        Ok(Accepted::Applied { released })
    }

    /// Writes a message's impact; a rejection notice only consumes its sequence (the
    /// ledger moved no money).
    async fn impact<I: Inbox, H: Handler<I>>(
        &self,
        inbox: &mut I,
        message: &InboxMessage,
        handler: &mut H,
    ) -> Result<()> {
        if message.kind == MessageKind::Rejected {
            return Ok(());
        }
        handler.apply(inbox, message).await
    }

    async fn hold<I: Inbox>(
        &self,
        inbox: &mut I,
        message: InboxMessage,
        waiting_for: u64,
    ) -> Result<Accepted> {
        match inbox.hold(&self.consumer, &message).await? {
            HoldResult::Held => Ok(Accepted::Held { waiting_for }),
            HoldResult::Occupied {
                instruction_id,
                kind,
            } if instruction_id == message.instruction_id => {
                if kind == message.kind {
                    Ok(Accepted::Duplicate)
                } else {
                    self.conflicting_outcome(inbox, &message, kind, "held")
                        .await
                }
            }
            HoldResult::Occupied { instruction_id, .. } => {
                let detail = format!(
                    "instructions {instruction_id} and {} both claim sequence {}",
                    message.instruction_id, message.sequence
                );
                tracing::error!(consumer = %self.consumer, account = %message.account, sequence = message.sequence, "{detail}");
                inbox
                    .record_exception(&self.exception(
                        ExceptionKind::ConflictingSequence,
                        &message.account,
                        message.sequence,
                        detail,
                    ))
                    .await?;
                Ok(Accepted::Conflict {
                    holder: instruction_id,
                })
            }
        }
    }

    /// One instruction with two outcomes: the ledger committed a payout Hop 2 had
    /// already reported as refused, or the reverse. Money may sit on the wrong side,
    /// so a person must look: nothing is applied, and the exception names the account,
    /// the sequence and both outcomes. `state` says where the first outcome sits
    /// (`processed` or `held`).
    async fn conflicting_outcome<I: Inbox>(
        &self,
        inbox: &mut I,
        message: &InboxMessage,
        recorded: MessageKind,
        state: &str,
    ) -> Result<Accepted> {
        let detail = format!(
            "instruction {} at sequence {} arrived as {} but is already {state} as {}; nothing applied",
            message.instruction_id,
            message.sequence,
            message.kind.as_str(),
            recorded.as_str()
        );
        tracing::error!(consumer = %self.consumer, account = %message.account, sequence = message.sequence, "{detail}");
        inbox
            .record_exception(&self.exception(
                ExceptionKind::ConflictingOutcome,
                &message.account,
                message.sequence,
                detail,
            ))
            .await?;
        Ok(Accepted::ConflictingOutcome {
            recorded,
            received: message.kind,
        })
    }

    /// Raises an alarm for every gap open longer than the alarm age: an exception row
    /// naming the account and the missing sequence, a log line and the metric hook.
    /// Gaps are never skipped: the held messages stay held. Returns the new alarms.
    pub async fn check_gaps<I: Inbox>(&self, inbox: &mut I) -> Result<Vec<GapAlarm>> {
        let now = Utc::now();
        let mut alarms = Vec::new();
        for gap in inbox.held_gaps(&self.consumer).await? {
            let age = (now - gap.held_at).to_std().unwrap_or_default();
            if age < self.gap_alarm_after {
                continue;
            }
            let alarm = GapAlarm {
                consumer: self.consumer.clone(),
                account: gap.account.clone(),
                missing: gap.last_applied + 1,
                held: gap.lowest_held,
                age,
            };
            let detail = format!(
                "sequence {} missing for {:?}; sequence {} held behind it",
                alarm.missing, alarm.age, alarm.held
            );
            let new = inbox
                .record_exception(&self.exception(
                    ExceptionKind::Gap,
                    &gap.account,
                    alarm.missing,
                    detail,
                ))
                .await?;
            if new {
                tracing::error!(consumer = %self.consumer, account = %alarm.account, missing = alarm.missing, held = alarm.held, "inbox gap alarm");
                if let Some(hook) = &self.on_alarm {
                    hook(&alarm);
                }
                alarms.push(alarm);
            }
        }
        Ok(alarms)
    }

    fn exception(
        &self,
        kind: ExceptionKind,
        account: &Account,
        sequence: u64,
        detail: String,
    ) -> NewException {
        NewException::new(&*self.consumer, kind, account.clone(), sequence, detail)
    }
}
