//! Webhook verification: a valid delivery passes; each way a delivery can be wrong is
//! refused with the header at fault named.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use chrono::{DateTime, TimeZone, Utc};
use outbox_core::ErrorKind;
use outbox_ledger_formance::{
    WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, WebhookConfig,
    WebhookHeaders, WebhookVerifier, sign,
};

const SECRET: &str = "b2gK9V9mF1h2cE1lRkJ2W0c9dXJ3RkZ6";
const OTHER_SECRET: &str = "Zm9yZ2VkLXNlY3JldC0yNC1ieXRlcy0x";
const ID: &str = "0192f0a4-7c2e-7d41-9a6e-1f2b3c4d5e6f";
const BODY: &[u8] = br#"{"idempotency_key":"","date":"2026-10-07T12:00:00.123456Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{"accountMetadata":{},"ledger":"main","transactions":[]}}"#;

fn signed_at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 10, 7, 12, 0, 0).unwrap()
}

fn headers(id: &str, timestamp: i64, signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(WEBHOOK_ID_HEADER, HeaderValue::from_str(id).unwrap());
    headers.insert(WEBHOOK_TIMESTAMP_HEADER, HeaderValue::from(timestamp));
    headers.insert(
        WEBHOOK_SIGNATURE_HEADER,
        HeaderValue::from_str(signature).unwrap(),
    );
    headers
}

fn delivery(secret: &str) -> HeaderMap {
    let ts = signed_at().timestamp();
    headers(ID, ts, &sign(secret, ID, ts, BODY))
}

fn verifier() -> WebhookVerifier {
    WebhookVerifier::new(SECRET).unwrap()
}

fn refused_header(headers: &HeaderMap, body: &[u8], now: DateTime<Utc>) -> String {
    let err = verifier().verify(headers, body, now).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::InvalidInput { .. }),
        "{err}"
    );
    err.field().unwrap().to_owned()
}

#[test]
fn a_valid_delivery_passes() {
    let verified = verifier()
        .verify(&delivery(SECRET), BODY, signed_at())
        .unwrap();
    assert_eq!(verified.id, ID);
    assert_eq!(verified.timestamp, signed_at());
}

#[test]
fn a_tampered_body_is_refused() {
    let mut tampered = BODY.to_vec();
    tampered[BODY.len() - 4] = b'1';
    assert_eq!(
        refused_header(&delivery(SECRET), &tampered, signed_at()),
        WEBHOOK_SIGNATURE_HEADER
    );
}

#[test]
fn a_wrong_secret_is_refused() {
    assert_eq!(
        refused_header(&delivery(OTHER_SECRET), BODY, signed_at()),
        WEBHOOK_SIGNATURE_HEADER
    );
}

#[test]
fn a_tampered_id_or_timestamp_breaks_the_signature() {
    let ts = signed_at().timestamp();
    let signature = sign(SECRET, ID, ts, BODY);
    let other_id = headers("another-delivery", ts, &signature);
    assert_eq!(
        refused_header(&other_id, BODY, signed_at()),
        WEBHOOK_SIGNATURE_HEADER
    );
    let other_ts = headers(ID, ts + 1, &signature);
    assert_eq!(
        refused_header(&other_ts, BODY, signed_at()),
        WEBHOOK_SIGNATURE_HEADER
    );
}

#[test]
fn each_missing_header_is_named() {
    for name in [
        WEBHOOK_ID_HEADER,
        WEBHOOK_TIMESTAMP_HEADER,
        WEBHOOK_SIGNATURE_HEADER,
    ] {
        let mut headers = delivery(SECRET);
        headers.remove(name);
        assert_eq!(refused_header(&headers, BODY, signed_at()), name);
        let mut empty = delivery(SECRET);
        empty.insert(name, HeaderValue::from_static(""));
        assert_eq!(refused_header(&empty, BODY, signed_at()), name);
    }
}

#[test]
fn a_timestamp_outside_the_tolerance_is_refused_both_ways() {
    let five_minutes = chrono::Duration::minutes(5);
    let second = chrono::Duration::seconds(1);
    let headers = delivery(SECRET);
    // At the edge, either way, it still passes.
    verifier()
        .verify(&headers, BODY, signed_at() + five_minutes)
        .unwrap();
    verifier()
        .verify(&headers, BODY, signed_at() - five_minutes)
        .unwrap();
    // Replayed later, or signed in the future.
    assert_eq!(
        refused_header(&headers, BODY, signed_at() + five_minutes + second),
        WEBHOOK_TIMESTAMP_HEADER
    );
    assert_eq!(
        refused_header(&headers, BODY, signed_at() - five_minutes - second),
        WEBHOOK_TIMESTAMP_HEADER
    );

    let mut garbled = headers.clone();
    garbled.insert(
        WEBHOOK_TIMESTAMP_HEADER,
        HeaderValue::from_static("2026-10-07T12:00:00Z"),
    );
    assert_eq!(
        refused_header(&garbled, BODY, signed_at()),
        WEBHOOK_TIMESTAMP_HEADER
    );

    let strict = verifier().with_tolerance(Duration::from_secs(10));
    let err = strict
        .verify(&headers, BODY, signed_at() + chrono::Duration::seconds(11))
        .unwrap_err();
    assert_eq!(err.field(), Some(WEBHOOK_TIMESTAMP_HEADER));
}

#[test]
fn several_signatures_in_one_header_any_v1_match_passes() {
    let ts = signed_at().timestamp();
    let good = sign(SECRET, ID, ts, BODY);
    let stale = sign(OTHER_SECRET, ID, ts, BODY);
    // Secret rotation: the old and the new secret's signatures side by side.
    let rotated = headers(ID, ts, &format!("{stale} {good}"));
    verifier().verify(&rotated, BODY, signed_at()).unwrap();
    // Garbage and other schemes are skipped, not fatal.
    let noisy = headers(
        ID,
        ts,
        &format!("v1,@@not-base64@@  v2,{} {good}", &good[3..]),
    );
    verifier().verify(&noisy, BODY, signed_at()).unwrap();
    // The right bytes under another scheme do not count.
    let only_v2 = headers(ID, ts, &format!("v2,{}", &good[3..]));
    assert_eq!(
        refused_header(&only_v2, BODY, signed_at()),
        WEBHOOK_SIGNATURE_HEADER
    );
    let all_wrong = headers(ID, ts, &format!("{stale} v1,AAAA"));
    assert_eq!(
        refused_header(&all_wrong, BODY, signed_at()),
        WEBHOOK_SIGNATURE_HEADER
    );
}

#[test]
fn several_signature_header_lines_are_one_list() {
    let ts = signed_at().timestamp();
    let mut headers = headers(ID, ts, &sign(OTHER_SECRET, ID, ts, BODY));
    headers.append(
        WEBHOOK_SIGNATURE_HEADER,
        HeaderValue::from_str(&sign(SECRET, ID, ts, BODY)).unwrap(),
    );
    verifier().verify(&headers, BODY, signed_at()).unwrap();
}

#[test]
fn parts_api_and_config_behave_like_the_header_map() {
    let config: WebhookConfig =
        serde_json::from_str(&format!(r#"{{"secret":"{SECRET}","tolerance_secs":60}}"#)).unwrap();
    let verifier = WebhookVerifier::from_config(&config).unwrap();
    assert_eq!(verifier.tolerance(), Duration::from_secs(60));
    let ts = signed_at().timestamp().to_string();
    let signature = sign(SECRET, ID, signed_at().timestamp(), BODY);
    let parts = WebhookHeaders {
        id: Some(ID),
        timestamp: Some(&ts),
        signature: Some(&signature),
    };
    assert_eq!(
        verifier.verify_parts(parts, BODY, signed_at()).unwrap().id,
        ID
    );
    let late = signed_at() + chrono::Duration::seconds(61);
    let err = verifier.verify_parts(parts, BODY, late).unwrap_err();
    assert_eq!(err.field(), Some(WEBHOOK_TIMESTAMP_HEADER));
}

/// During a secret rotation the receiver knows two secrets: a delivery signed with
/// either passes, as does one whose header carries signatures by both; any other
/// secret is refused, and an empty previous secret is a configuration error.
#[test]
fn either_of_two_secrets_passes_during_a_rotation() {
    let rotating = WebhookVerifier::new(SECRET)
        .unwrap()
        .with_previous_secret(OTHER_SECRET)
        .unwrap();
    rotating
        .verify(&delivery(SECRET), BODY, signed_at())
        .unwrap();
    rotating
        .verify(&delivery(OTHER_SECRET), BODY, signed_at())
        .unwrap();
    let ts = signed_at().timestamp();
    let both = format!(
        "{} {}",
        sign(OTHER_SECRET, ID, ts, BODY),
        sign(SECRET, ID, ts, BODY)
    );
    rotating
        .verify(&headers(ID, ts, &both), BODY, signed_at())
        .unwrap();

    let unknown = "dW5rbm93bi1zZWNyZXQtMjQtYnl0ZXMtMQ==";
    let err = rotating
        .verify(&delivery(unknown), BODY, signed_at())
        .unwrap_err();
    assert_eq!(err.field(), Some(WEBHOOK_SIGNATURE_HEADER), "{err}");
    // The old secret alone no longer passes once the rotation is over.
    let err = verifier()
        .verify(&delivery(OTHER_SECRET), BODY, signed_at())
        .unwrap_err();
    assert_eq!(err.field(), Some(WEBHOOK_SIGNATURE_HEADER), "{err}");
    // The tolerance applies whichever secret signed.
    let late = signed_at() + chrono::Duration::seconds(301);
    let err = rotating
        .verify(&delivery(OTHER_SECRET), BODY, late)
        .unwrap_err();
    assert_eq!(err.field(), Some(WEBHOOK_TIMESTAMP_HEADER), "{err}");

    let err = WebhookVerifier::new(SECRET)
        .unwrap()
        .with_previous_secret("")
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Config);
    assert_eq!(err.context("field"), Some("previous_secret"));

    let config: WebhookConfig = serde_json::from_str(&format!(
        r#"{{"secret":"{SECRET}","previous_secret":"{OTHER_SECRET}"}}"#
    ))
    .unwrap();
    assert!(!format!("{config:?}").contains(OTHER_SECRET));
    WebhookVerifier::from_config(&config)
        .unwrap()
        .verify(&delivery(OTHER_SECRET), BODY, signed_at())
        .unwrap();
}
