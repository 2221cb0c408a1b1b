//! The validators themselves: they must reject what the contracts reject, or the
//! schema checks in the other tests prove nothing.

use serde_json::json;

use crate::support::contracts;

#[track_caller]
fn rejects(name: &str, instance: serde_json::Value) {
    let c = contracts().expect("checked by the caller");
    assert!(
        !c.check(name, &instance).is_empty(),
        "{name} accepted {instance}"
    );
}

#[test]
fn openapi_validators_reject_bad_documents() {
    let Some(c) = contracts() else { return };
    c.validate(
        "V2ErrorResponse",
        &json!({"errorCode": "VALIDATION", "errorMessage": "x"}),
    );
    rejects(
        "V2ErrorResponse",
        json!({"errorCode": "NOPE", "errorMessage": "x"}),
    );
    rejects("V2ErrorResponse", json!({"errorCode": "VALIDATION"}));
    let tx = json!({"postings": [{"source": "world", "destination": "a", "amount": 1, "asset": "USD"}],
                    "metadata": {}, "timestamp": "2025-01-15T10:00:00Z", "id": 1, "reverted": false});
    c.validate("V2CreateTransactionResponse", &json!({"data": tx}));
    let mut quoted = tx.clone();
    quoted["postings"][0]["amount"] = json!("1");
    rejects("V2CreateTransactionResponse", json!({"data": quoted}));
    let mut bad_date = tx.clone();
    bad_date["timestamp"] = json!("yesterday");
    rejects("V2CreateTransactionResponse", json!({"data": bad_date}));
    // The discriminator picks the branch: an ERROR needs its code and description.
    c.validate(
        "V2BulkResponse",
        &json!({"data": [{"responseType": "ADD_METADATA", "logID": 1}]}),
    );
    rejects(
        "V2BulkResponse",
        json!({"data": [{"responseType": "ERROR", "logID": 0}]}),
    );
    rejects(
        "V2BulkResponse",
        json!({"data": [{"responseType": "CREATE_TRANSACTION", "logID": 1}]}),
    );
    rejects("V2AggregateBalancesResponse", json!({"data": {"USD": "1"}}));
}

#[test]
fn event_validator_rejects_bad_payloads() {
    let Some(c) = contracts() else { return };
    let payload = json!({"ledger": "default", "accountMetadata": {}, "transactions": [
        {"postings": [{"source": "world", "destination": "a", "amount": 1, "asset": "USD"}],
         "metadata": {}, "timestamp": "2025-01-15T10:00:00Z", "id": 1}]});
    c.validate_committed_transactions(&payload);
    for bad in [
        json!({"ledger": "default", "transactions": []}),
        json!({"ledger": "default", "accountMetadata": {}, "transactions": [], "extra": 1}),
        json!({"ledger": "default", "accountMetadata": {}, "transactions": [{"id": 1}]}),
    ] {
        assert!(
            !c.check_committed_transactions(&bad).is_empty(),
            "accepted {bad}"
        );
    }
}
