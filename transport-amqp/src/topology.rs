//! The RabbitMQ topology (one direct exchange, `N` single-active-consumer queues)
//! and the routing of an account to its queue.
//!
//! ```text
//!                      ┌─ key "0" ─▶ <exchange>.0  (x-single-active-consumer)
//! publisher ─▶ <exchange> (direct) ─ key "1" ─▶ <exchange>.1
//!                      └─ key "N-1" ▶ <exchange>.<N-1>
//! ```
//!
//! An account always hashes to the same queue, and a queue delivers to one active
//! consumer at a time, in order: that is the per-account order guarantee.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};
use outbox_core::Account;

/// FNV-1a, 64 bit (<http://www.isthe.com/chongo/tech/comp/fnv/>), over the UTF-8
/// bytes of `text`.
///
/// Chosen because it is fixed forever and trivial to re-implement in any consumer
/// language: routing must not change between releases or processes, which rules
/// out std's randomly seeded `DefaultHasher`.
pub const fn stable_hash(text: &str) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = text.as_bytes();
    let mut hash = OFFSET_BASIS;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(PRIME);
        i += 1;
    }
    hash
}

/// The names and routing of one exchange and its `queue_count` queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    exchange: String,
    queue_count: u16,
}

impl Topology {
    /// # Panics
    /// If `queue_count` is zero ([`AmqpConfig::validate`](crate::AmqpConfig::validate)
    /// rejects that first).
    pub fn new(exchange: impl Into<String>, queue_count: u16) -> Self {
        assert!(queue_count > 0, "queue_count must be at least 1");
        Self {
            exchange: exchange.into(),
            queue_count,
        }
    }

    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    pub fn queue_count(&self) -> u16 {
        self.queue_count
    }

    /// `stable_hash(account) % N`.
    pub fn queue_index(&self, account: &Account) -> u16 {
        // The remainder is < queue_count, a u16.
        (stable_hash(account.as_str()) % u64::from(self.queue_count)) as u16
    }

    /// The routing key of `account`: its queue index in decimal.
    pub fn routing_key(&self, account: &Account) -> String {
        self.queue_index(account).to_string()
    }

    /// `<exchange>.<index>`.
    pub fn queue_name(&self, index: u16) -> String {
        format!("{}.{index}", self.exchange)
    }

    /// Every queue name, in index order.
    pub fn queue_names(&self) -> Vec<String> {
        (0..self.queue_count).map(|i| self.queue_name(i)).collect()
    }

    /// Declares (idempotently) the exchange, the queues and their bindings.
    ///
    /// A queue that already exists with other arguments makes the broker close the
    /// channel with `PRECONDITION_FAILED`; that is a configuration conflict an
    /// operator must resolve, so it surfaces as a permanent error.
    pub(crate) async fn declare(&self, channel: &Channel) -> lapin::Result<()> {
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        for index in 0..self.queue_count {
            let queue = self.queue_name(index);
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    queue_arguments(),
                )
                .await?;
            channel
                .queue_bind(
                    queue.as_str().into(),
                    self.exchange.as_str().into(),
                    index.to_string().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        Ok(())
    }
}

/// `x-single-active-consumer: true`: the broker delivers a queue to one consumer
/// at a time and fails over to the next in line when it goes away.
fn queue_arguments() -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
    arguments
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_64_reference_vectors() {
        // From the FNV reference test suite.
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(stable_hash("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn routing_is_stable_and_in_range() {
        let t = Topology::new("ledger-events", 8);
        let account = Account::parse("merchants:4471").unwrap();
        let index = t.queue_index(&account);
        assert_eq!(u64::from(index), stable_hash("merchants:4471") % 8);
        assert_eq!(t.routing_key(&account), index.to_string());
        assert_eq!(t.queue_name(index), format!("ledger-events.{index}"));
        let mut used = [false; 8];
        for i in 0..200 {
            let a = Account::parse(&format!("merchants:{i}")).unwrap();
            let q = t.queue_index(&a);
            assert!(q < 8);
            assert_eq!(q, t.queue_index(&a));
            used[usize::from(q)] = true;
        }
        assert!(
            used.iter().all(|u| *u),
            "200 accounts should touch all 8 queues"
        );
        assert_eq!(t.queue_names().len(), 8);
        assert_eq!(t.queue_names()[7], "ledger-events.7");
    }

    #[test]
    fn one_queue_takes_everything() {
        let t = Topology::new("x", 1);
        assert_eq!(t.queue_index(&Account::parse("merchants:1").unwrap()), 0);
    }
}
