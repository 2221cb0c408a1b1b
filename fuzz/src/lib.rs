//! The bodies of the fuzz targets, one function per target (`fuzz_targets/NAME.rs`
//! calls `NAME`). Each feeds its input to one parser of the project through that
//! crate's public API and checks more than "no panic": that an error is an
//! `InvalidInput` naming a field, and that what is accepted survives a round trip.
//! A violated property panics, which libFuzzer reports as a crash.
//!
//! `tests/tests/fuzz_corpus.rs` compiles this same file on stable (`#[path]`) and
//! replays `fuzz/corpus/*` through it, so the targets cannot rot without nightly.
//! Therefore this file uses only crates the `outbox-tests` crate also has.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use outbox_core::fanout::headers;
use outbox_core::fanout::{RequestHeaders, WebhookDecoder, WebhookDelivery, WebhookRefusal};
use outbox_core::reconcile::statement::{AccountMapping, Statement};
use outbox_core::{Account, Error, ErrorKind, EventId, LedgerCommand, Payload, RawNewEvent};
use outbox_ledger_formance::{
    FormanceWebhookDecoder, TraceContext, WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER, WebhookVerifier, messages_from_webhook, sign,
};

/// The secret every webhook target signs and verifies with.
const SECRET: &str = "fuzz-webhook-secret";
/// "Now" for the verifier, fixed so a run is reproducible: 2026-12-01T00:00:00Z.
const NOW_SECS: i64 = 1_796_083_200;
/// The verifier's tolerance (its default), in seconds.
const TOLERANCE_SECS: i64 = 300;
/// The account mapping the camt.053 target reads statements with (a test fixture).
const MAPPING_CSV: &str = include_str!("../../outbox-core/tests/fixtures/statements/mapping.csv");

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(NOW_SECS, 0).expect("a valid time")
}

/// An error of bad input must say which field is bad.
fn assert_names_a_field(error: &Error, what: &str) {
    assert!(
        matches!(error.kind(), ErrorKind::InvalidInput { .. }),
        "{what}: bad input must be InvalidInput: {error}"
    );
    assert!(
        error.field().is_some_and(|f| !f.is_empty()),
        "{what}: the error names no field: {error}"
    );
}

/// Splits off the first `n` lines (without their `\n`); the rest is the last item.
fn split_lines(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut parts = Vec::with_capacity(n + 1);
    let mut rest = data;
    for _ in 0..n {
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = &rest[i + 1..];
            }
            None => {
                parts.push(rest);
                rest = &[];
            }
        }
    }
    parts.push(rest);
    parts
}

/// Input: the `formance-webhook-id` line, the `formance-webhook-timestamp` line, the
/// `formance-webhook-signature` line, then the body. Checks that a refusal names one
/// of the three headers, that a delivery signed with the secret for the input's id,
/// timestamp and body verifies exactly when the timestamp is within the tolerance,
/// and that the same delivery with its body changed does not.
pub fn webhook_verifier(data: &[u8]) {
    let parts = split_lines(data, 3);
    let (id, timestamp, signature, body) = (parts[0], parts[1], parts[2], parts[3]);
    let verifier = WebhookVerifier::new(SECRET).expect("a non-empty secret");
    let headers_of = |id: &[u8], timestamp: &[u8], signature: &[u8]| {
        let mut headers = RequestHeaders::new();
        headers.push(WEBHOOK_ID_HEADER, id);
        headers.push(WEBHOOK_TIMESTAMP_HEADER, timestamp);
        headers.push(WEBHOOK_SIGNATURE_HEADER, signature);
        headers
    };
    let signed_headers = [
        WEBHOOK_ID_HEADER,
        WEBHOOK_TIMESTAMP_HEADER,
        WEBHOOK_SIGNATURE_HEADER,
    ];

    match verifier.verify_request(&headers_of(id, timestamp, signature), body, now()) {
        Ok(verified) => assert_eq!(verified.id.as_bytes(), id.trim_ascii()),
        Err(e) => {
            assert_names_a_field(&e, "webhook verifier");
            assert!(
                signed_headers.contains(&e.field().unwrap_or_default()),
                "{e}"
            );
        }
    }

    // Sign it properly: the HTTP layer hands over header values without surrounding
    // whitespace, and an id is visible ASCII.
    let Ok(id) = std::str::from_utf8(id.trim_ascii()) else {
        return;
    };
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return;
    }
    let Some(secs) = std::str::from_utf8(timestamp)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
    else {
        return;
    };
    let signature = sign(SECRET, id, secs, body);
    let timestamp = secs.to_string();
    let result = verifier.verify_request(
        &headers_of(id.as_bytes(), timestamp.as_bytes(), signature.as_bytes()),
        body,
        now(),
    );
    let in_tolerance = secs.abs_diff(NOW_SECS) <= TOLERANCE_SECS.unsigned_abs();
    match result {
        Ok(verified) => {
            assert!(in_tolerance, "a delivery signed at {secs} passed");
            assert_eq!(verified.id, id);
            assert_eq!(verified.timestamp.timestamp(), secs);
        }
        Err(e) => {
            assert!(!in_tolerance, "a signed, fresh delivery was refused: {e}");
            assert_eq!(e.field(), Some(WEBHOOK_TIMESTAMP_HEADER), "{e}");
        }
    }
    if in_tolerance {
        let mut tampered = body.to_vec();
        tampered.push(b' ');
        let e = verifier
            .verify_request(
                &headers_of(id.as_bytes(), timestamp.as_bytes(), signature.as_bytes()),
                &tampered,
                now(),
            )
            .expect_err("a changed body must not verify");
        assert_eq!(e.field(), Some(WEBHOOK_SIGNATURE_HEADER), "{e}");
    }
}

/// Input: a webhook body. Checks that a refused body names its JSON path, that every
/// message it yields survives the Hop 2 headers (what a consumer would read back),
/// and that the intake's decoder gives the same answer for the body properly signed.
pub fn webhook_body(data: &[u8]) {
    let parsed = messages_from_webhook(data, &TraceContext::default());
    match &parsed {
        Ok(messages) => {
            for message in messages {
                assert!(!message.dedup_key().is_empty());
                let encoded = headers::encode(message);
                let decoded = headers::decode(
                    |name| {
                        encoded
                            .iter()
                            .find(|(n, _)| *n == name)
                            .map(|(_, v)| v.as_str())
                    },
                    message.payload.clone(),
                )
                .unwrap_or_else(|e| {
                    panic!("a message the webhook gave cannot be read back: {e}: {message:?}")
                });
                assert_eq!(&decoded, message);
            }
        }
        Err(e) => assert_names_a_field(e, "webhook body"),
    }

    let decoder = FormanceWebhookDecoder::new(WebhookVerifier::new(SECRET).expect("a secret"));
    let mut signed = RequestHeaders::new();
    signed.push(WEBHOOK_ID_HEADER, "fuzz-delivery");
    signed.push(WEBHOOK_TIMESTAMP_HEADER, NOW_SECS.to_string());
    signed.push(
        WEBHOOK_SIGNATURE_HEADER,
        sign(SECRET, "fuzz-delivery", NOW_SECS, data),
    );
    match (decoder.decode(&signed, data, now()), parsed) {
        (Ok(WebhookDelivery::Events { id, messages }), Ok(expected)) => {
            assert_eq!(id, "fuzz-delivery");
            assert_eq!(messages, expected);
        }
        (Err(WebhookRefusal::Malformed(got)), Err(expected)) => {
            assert_eq!(got.field(), expected.field());
        }
        (got, expected) => panic!("decoder and parser disagree: {got:?} vs {expected:?}"),
    }
}

/// Input: header lines `name: value`, a blank line, then the payload. Checks that a
/// refusal names the header (`header outbox-…`) and that an accepted message encodes
/// back to headers that decode to the same message.
pub fn hop2_headers(data: &[u8]) {
    let (head, payload) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let Ok(head) = std::str::from_utf8(head) else {
        return;
    };
    let lines: Vec<(&str, &str)> = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim(), value.trim()))
        .collect();
    fn lookup<'a>(pairs: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
        pairs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
    match headers::decode(|name| lookup(&lines, name), payload.to_vec()) {
        Ok(message) => {
            let encoded = headers::encode(&message);
            let pairs: Vec<(&str, &str)> = encoded.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let again = headers::decode(|name| lookup(&pairs, name), message.payload.clone())
                .unwrap_or_else(|e| panic!("an accepted message does not round-trip: {e}"));
            assert_eq!(again, message);
        }
        Err(e) => {
            assert_names_a_field(&e, "hop 2 headers");
            assert!(e.field().unwrap_or_default().starts_with("header "), "{e}");
        }
    }
}

/// Input: `outbox enqueue` JSON lines. Each line that is a `RawNewEvent` is
/// validated; a refusal must name a field, an accepted event must encode into an
/// outbox payload that decodes to the same command (plus the outbox keys).
pub fn enqueue_jsonl(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(raw) = serde_json::from_str::<RawNewEvent>(line) else {
            continue;
        };
        let event = match raw.into_new_event() {
            Ok(event) => event,
            Err(e) => {
                assert_names_a_field(&e, "enqueue input");
                continue;
            }
        };
        event.validate().expect("an accepted event validates again");
        let id = event.event_id.unwrap_or_else(EventId::new);
        let payload = Payload::encode(id, &event.account, 1, &event.command)
            .unwrap_or_else(|e| panic!("an accepted event cannot be encoded: {e}"));
        payload.split().expect("an encoded payload splits");
        let decoded = payload.command().expect("an encoded payload decodes");
        let mut metadata = event.command.metadata().clone();
        metadata.extend(decoded.metadata().clone().into_iter().filter(|(k, _)| {
            ["outbox_event_id", "outbox_account", "outbox_sequence"].contains(&k.as_str())
        }));
        assert_eq!(decoded.metadata(), &metadata);
        match (&decoded, &event.command) {
            (LedgerCommand::Post(got), LedgerCommand::Post(sent)) => {
                assert_eq!((&got.body, &got.reference), (&sent.body, &sent.reference));
            }
            (LedgerCommand::Revert(got), LedgerCommand::Revert(sent)) => {
                assert_eq!(got.event_id, sent.event_id);
            }
            (got, sent) => panic!("encoded {sent:?}, decoded {got:?}"),
        }
    }
}

/// Input: a Numscript program, then optionally a NUL byte and `name=value` variable
/// lines. Compiles and runs it on both runtimes; checks that a run is deterministic,
/// that every error has a message, that whatever the machine compiles the
/// whitespace-insensitive interpreter compiles too, and that a script that runs
/// with empty accounts also runs when they hold plenty.
pub fn numscript(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (source, vars_text) = text.split_once('\0').unwrap_or((text, ""));
    let vars: BTreeMap<String, String> = vars_text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    const PLENTY: i128 = 1 << 100;
    let run = |interpreter, balance| {
        let result = outbox_ledger_dev::fuzzing::run_numscript(source, interpreter, &vars, balance);
        assert_eq!(
            result,
            outbox_ledger_dev::fuzzing::run_numscript(source, interpreter, &vars, balance),
            "two runs differ"
        );
        if let Err(e) = &result {
            assert!(
                e.split_once(": ").is_some_and(|(_, m)| !m.is_empty()),
                "{e:?}"
            );
        }
        result
    };
    for interpreter in [false, true] {
        let empty = run(interpreter, 0);
        let full = run(interpreter, PLENTY);
        if empty.is_ok() {
            assert_eq!(empty, full, "more funds changed the outcome");
        }
    }
    let compiled = |r: &Result<_, String>| !matches!(r, Err(e) if e.starts_with("parse: "));
    if compiled(&run(false, PLENTY)) {
        assert!(
            compiled(&run(true, PLENTY)),
            "the machine compiles what the interpreter does not: {:?}",
            run(true, PLENTY)
        );
    }
}

/// Input: a camt.053 XML file, read with the fixture's account mapping. Checks that a
/// refusal names the element, and that an accepted statement's lines are valid.
pub fn camt053(data: &[u8]) {
    let Ok(xml) = std::str::from_utf8(data) else {
        return;
    };
    let mapping = AccountMapping::from_csv(MAPPING_CSV).expect("the fixture mapping");
    match Statement::from_camt053(xml, &mapping) {
        Ok(statement) => check_statement(&statement),
        Err(e) => assert_names_a_field(&e, "camt.053"),
    }
}

/// Input: a CSV statement. Checks that a refusal names the line and column, and that
/// an accepted statement written back as CSV reads the same.
pub fn csv_statement(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let statement = match Statement::from_csv(text) {
        Ok(statement) => statement,
        Err(e) => return assert_names_a_field(&e, "CSV statement"),
    };
    check_statement(&statement);
    let mut csv = String::from("account,asset,balance,as_of\n");
    for line in &statement.lines {
        csv.push_str(&format!(
            "\"{}\",{},{},{}\n",
            line.account.replace('"', "\"\""),
            line.asset.as_str(),
            line.balance,
            line.as_of.to_rfc3339_opts(SecondsFormat::AutoSi, true)
        ));
    }
    let again = Statement::from_csv(&csv)
        .unwrap_or_else(|e| panic!("a statement written back does not read: {e}\n{csv}"));
    let strip = |s: &Statement| {
        s.lines
            .iter()
            .map(|l| (l.account.clone(), l.asset.clone(), l.balance, l.as_of))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&again), strip(&statement));
}

fn check_statement(statement: &Statement) {
    assert!(
        !statement.lines.is_empty(),
        "an accepted statement is empty"
    );
    for line in &statement.lines {
        Account::parse(&line.account)
            .unwrap_or_else(|e| panic!("accepted account {:?}: {e}", line.account));
        assert!(!line.origin.is_empty());
    }
}

/// Input: pgoutput messages, each as a 2-byte big-endian length and its bytes,
/// decoded in order as the CDC relay does for `public.outbox_events`. Checks that an
/// error has a message and that a decoded event is a valid outbox row.
pub fn cdc_pgoutput(data: &[u8]) {
    let mut messages = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let end = (2 + len).min(rest.len());
        messages.push(&rest[2..end]);
        rest = &rest[end..];
    }
    let results = outbox_store_postgres::cdc::fuzzing::decode_pgoutput(
        messages,
        outbox_store_postgres::cdc::DEFAULT_SCHEMA,
        outbox_store_postgres::cdc::DEFAULT_TABLE,
        0x16_B374_D848,
    );
    for result in results {
        match result {
            Ok(Some(event)) => {
                assert!(event.sequence >= 1);
                Account::parse(event.account.as_str()).expect("a decoded account is valid");
            }
            Ok(None) => {}
            Err(e) => assert!(!e.message().is_empty(), "{e:?}"),
        }
    }
}
