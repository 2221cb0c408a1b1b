//! One payload as the probe sends it: the stored bytes of an outbox event, what they
//! ask of the ledger, and the same body with the amount changed by one minor unit.

use std::sync::LazyLock;

use outbox_core::{
    Error, ErrorKind, EventId, LedgerCommand, OutboxEvent, PayloadKind, PostBody, PostCommand,
    Result,
};
use regex::Regex;
use serde_json::json;

/// What a payload asks of the ledger, with the exact body the relay sends for it.
#[derive(Debug, Clone)]
pub enum Request {
    /// `POST /transactions` with the stored bytes.
    Post {
        body: Vec<u8>,
        reference: Option<String>,
    },
    /// `POST /transactions/{id}/revert` of the transaction `target` posted, with the
    /// body the relay builds from the stored metadata.
    Revert { target: EventId, body: Vec<u8> },
}

/// A stored outbox event under probe.
#[derive(Debug, Clone)]
pub struct ProbePayload {
    /// Where it came from, for the report: `line 3`, `position 812`.
    pub label: String,
    /// The input line, for a payload read from a file.
    pub line: Option<usize>,
    pub event: OutboxEvent,
    pub command: LedgerCommand,
    pub request: Request,
}

impl ProbePayload {
    /// # Errors
    /// `Internal` when the stored bytes are not a ledger command.
    pub fn new(label: String, line: Option<usize>, event: OutboxEvent) -> Result<Self> {
        let command = event.payload.command()?;
        let request = match (event.payload.split()?, &command) {
            ((PayloadKind::Post, body), LedgerCommand::Post(post)) => Request::Post {
                body: body.to_vec(),
                reference: post.reference.clone(),
            },
            ((PayloadKind::Revert { target }, _), LedgerCommand::Revert(revert)) => {
                Request::Revert {
                    target,
                    body: revert_body(&revert.metadata)?,
                }
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "the stored payload's envelope and command disagree",
                ));
            }
        };
        Ok(Self {
            label,
            line,
            event,
            command,
            request,
        })
    }

    pub fn reference(&self) -> Option<&str> {
        match &self.request {
            Request::Post { reference, .. } => reference.as_deref(),
            Request::Revert { .. } => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self.request {
            Request::Post { .. } => "post",
            Request::Revert { .. } => "revert",
        }
    }

    /// The body under probe.
    pub fn body(&self) -> &[u8] {
        match &self.request {
            Request::Post { body, .. } | Request::Revert { body, .. } => body,
        }
    }

    /// The same request with its amount one minor unit higher (a revert has no
    /// amount: its metadata gets one more key), and what changed, for the report.
    ///
    /// # Errors
    /// `Internal` when the body cannot be re-encoded.
    pub fn changed_body(&self) -> Result<(Vec<u8>, String)> {
        match &self.command {
            LedgerCommand::Post(post) => {
                let mut post = post.clone();
                let what = bump_amount(&mut post);
                let body = serde_json::to_vec(&post).map_err(encode_error)?;
                Ok((body, what))
            }
            LedgerCommand::Revert(revert) => {
                let mut metadata = revert.metadata.clone();
                metadata.insert("outbox_probe".into(), "changed body".into());
                Ok((
                    revert_body(&metadata)?,
                    "metadata outbox_probe=\"changed body\" added (a revert has no amount)".into(),
                ))
            }
        }
    }
}

/// The relay's revert body: `{"metadata": …}` (see the Formance adapter).
fn revert_body(metadata: &outbox_core::Metadata) -> Result<Vec<u8>> {
    serde_json::to_vec(&json!({ "metadata": metadata })).map_err(encode_error)
}

fn encode_error(e: serde_json::Error) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("cannot encode a probe body: {e}"),
    )
}

static BRACKET_AMOUNT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\[\s*([A-Z][A-Z0-9_]*(?:/[0-9]+)?)\s+([0-9]+)\s*\]").expect("static regex")
});

/// `amount + 1` on the first posting, else on the first monetary variable, else on
/// the first `[ASSET N]` of the script; a script without any gets a comment line.
fn bump_amount(post: &mut PostCommand) -> String {
    let plus_one = |n: u64| n.checked_add(1).unwrap_or(n - 1);
    match &mut post.body {
        PostBody::Postings(postings) => {
            let first = &mut postings[0];
            let before = first.amount.minor_units();
            first.amount = outbox_core::Amount::new(plus_one(before));
            format!(
                "postings[0].amount {before} → {}",
                first.amount.minor_units()
            )
        }
        PostBody::Script(script) => {
            for (name, value) in &mut script.vars {
                if let Some((asset, amount)) = value.split_once(' ')
                    && let Ok(n) = amount.trim().parse::<u64>()
                {
                    let changed = format!("{asset} {}", plus_one(n));
                    let what = format!("vars.{name} {value:?} → {changed:?}");
                    *value = changed;
                    return what;
                }
            }
            if let Some(found) = BRACKET_AMOUNT.captures(&script.plain)
                && let Ok(n) = found[2].parse::<u64>()
            {
                let range = found.get(0).expect("group 0").range();
                let before = found[0].to_owned();
                let after = format!("[{} {}]", &found[1], plus_one(n));
                script.plain.replace_range(range, &after);
                return format!("script {before} → {after}");
            }
            script.plain.push_str("\n// outbox probe: changed body");
            "script: a comment line added (no amount found to change)".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{NewEvent, RawNewEvent};

    fn stored(line: &str) -> ProbePayload {
        let raw: RawNewEvent = serde_json::from_str(line).unwrap();
        let event: NewEvent = raw.into_new_event().unwrap();
        let (event_id, payload) = event.encode(1).unwrap();
        let event = OutboxEvent {
            position: outbox_core::Position::from_bytes(&[1]).unwrap(),
            event_id,
            account: event.account,
            sequence: 1,
            payload,
            created_at: chrono::Utc::now(),
        };
        ProbePayload::new("line 1".into(), Some(1), event).unwrap()
    }

    #[test]
    fn the_changed_body_differs_by_one_minor_unit_only() {
        let p = stored(
            r#"{"account":"merchants:4471","postings":[{"source":"merchants:4471:available","destination":"merchants:4471:payouts:pending","amount":48500000,"asset":"USD/2"}],"reference":"payout:1"}"#,
        );
        let (changed, what) = p.changed_body().unwrap();
        assert_eq!(what, "postings[0].amount 48500000 → 48500001");
        let original = String::from_utf8(p.body().to_vec()).unwrap();
        assert_eq!(
            String::from_utf8(changed).unwrap(),
            original.replace("48500000", "48500001"),
            "only the amount changes"
        );
        assert_eq!(p.reference(), Some("payout:1"));
    }

    #[test]
    fn a_script_changes_its_monetary_variable_or_its_bracket() {
        let with_var = stored(
            r#"{"account":"m","script":"send $amount (\n source = @world\n destination = @m\n)","vars":{"amount":"USD/2 100"}}"#,
        );
        assert_eq!(
            with_var.changed_body().unwrap().1,
            r#"vars.amount "USD/2 100" → "USD/2 101""#
        );
        let inline = stored(
            r#"{"account":"m","script":"send [USD/2 100] (\n source = @world\n destination = @m\n)"}"#,
        );
        let (body, what) = inline.changed_body().unwrap();
        assert_eq!(what, "script [USD/2 100] → [USD/2 101]");
        assert!(String::from_utf8(body).unwrap().contains("[USD/2 101]"));
    }
}
