//! Provider statements read from files written for these tests
//! (`tests/fixtures/statements/`): CSV and ISO 20022 camt.053, into exact integer
//! minor units, with every refusal naming its line or element.

use chrono::{DateTime, Utc};
use outbox_core::reconcile::statement::{AccountMapping, Statement, StatementLine};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/statements/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn mapping() -> AccountMapping {
    AccountMapping::from_csv(&fixture("mapping.csv")).expect("the mapping fixture reads")
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("a test time")
        .with_timezone(&Utc)
}

/// (account, asset, balance, as_of, origin) of each line, for whole-statement asserts.
fn summary(statement: &Statement) -> Vec<(String, String, i128, DateTime<Utc>, String)> {
    statement
        .lines
        .iter()
        .map(|l: &StatementLine| {
            (
                l.account.clone(),
                l.asset.to_string(),
                l.balance,
                l.as_of,
                l.origin.clone(),
            )
        })
        .collect()
}

fn line(
    account: &str,
    asset: &str,
    balance: i128,
    as_of: &str,
    origin: &str,
) -> (String, String, i128, DateTime<Utc>, String) {
    (
        account.to_owned(),
        asset.to_owned(),
        balance,
        at(as_of),
        origin.to_owned(),
    )
}

/// The error of `result`, with its field and message, for asserts.
fn refusal<T: std::fmt::Debug>(result: outbox_core::Result<T>) -> (String, String) {
    let err = result.expect_err("refused");
    (
        err.field()
            .expect("an invalid-input error names its field")
            .to_owned(),
        err.to_string(),
    )
}

// ---------------------------------------------------------------------------------
// CSV

#[test]
fn csv_reads_quoted_fields_negative_balances_and_columns_in_any_order() {
    let statement = Statement::from_csv(&fixture("statement.csv")).unwrap();
    assert_eq!(
        summary(&statement),
        [
            // The reference case: merchant 4471's pending payouts, $485,000.00.
            line(
                "merchants:4471:payouts:pending",
                "USD/2",
                48_500_000,
                "2026-11-30T23:59:59Z",
                "line 2",
            ),
            line(
                "treasury:eu:operating",
                "EUR/2",
                -1250,
                "2026-11-30T22:59:59Z",
                "line 4",
            ),
            line(
                "treasury:jp:operating",
                "JPY",
                1_500_000,
                "2026-11-30T23:59:59Z",
                "line 5",
            ),
            line(
                "merchants:4471:available",
                "USD/2",
                0,
                "2026-11-30T23:59:59.999999Z",
                "line 7",
            ),
        ]
    );
}

#[test]
fn csv_refuses_a_decimal_point_or_an_exponent_naming_line_and_column() {
    let text = "account,asset,balance,as_of\n\
                merchants:4471:available,USD/2,100,2026-11-30T23:59:59Z\n\
                merchants:4471:payouts:pending,USD/2,485000.00,2026-11-30T23:59:59Z\n";
    let (field, message) = refusal(Statement::from_csv(text));
    assert_eq!(field, "line 3: balance");
    assert!(
        message.contains("\"485000.00\" has a decimal point"),
        "{message}"
    );
    assert!(message.contains("minor units of USD/2"), "{message}");

    let text = "account,asset,balance,as_of\n\
                merchants:4471:payouts:pending,USD/2,4.85e7,2026-11-30T23:59:59Z\n";
    assert_eq!(refusal(Statement::from_csv(text)).0, "line 2: balance");
    let text = "account,asset,balance,as_of\n\
                merchants:4471:payouts:pending,USD/2,485e5,2026-11-30T23:59:59Z\n";
    let (field, message) = refusal(Statement::from_csv(text));
    assert_eq!(field, "line 2: balance");
    assert!(message.contains("exponent"), "{message}");
}

#[test]
fn csv_refuses_an_unknown_column_by_name() {
    let text = "account,asset,balanse,as_of\n\
                merchants:4471:payouts:pending,USD/2,48500000,2026-11-30T23:59:59Z\n";
    let (field, message) = refusal(Statement::from_csv(text));
    assert_eq!(field, "line 1: header");
    assert!(message.contains("unknown column \"balanse\""), "{message}");

    let text = "account,asset,balance,as_of,note\n\
                merchants:4471:payouts:pending,USD/2,48500000,2026-11-30T23:59:59Z,hi\n";
    let (_, message) = refusal(Statement::from_csv(text));
    assert!(message.contains("unknown column \"note\""), "{message}");

    let text = "account,asset,balance\nmerchants:4471:payouts:pending,USD/2,48500000\n";
    let (_, message) = refusal(Statement::from_csv(text));
    assert!(message.contains("missing column \"as_of\""), "{message}");
}

#[test]
fn csv_refuses_bad_values_naming_line_and_column() {
    let header = "account,asset,balance,as_of\n";
    for (row, field, says) in [
        (
            "merchants:4471:payouts:pending,USD/2,48500000,2026-11-30T23:59:59",
            "line 2: as_of",
            "no UTC offset",
        ),
        (
            "merchants:4471:payouts:pending,USD/2,48500000,2026-11-30",
            "line 2: as_of",
            "no UTC offset",
        ),
        (
            "merchants 4471,USD/2,48500000,2026-11-30T23:59:59Z",
            "line 2: account",
            "not a ledger account address",
        ),
        (
            "merchants:4471:payouts:pending,usd,48500000,2026-11-30T23:59:59Z",
            "line 2: asset",
            "not an asset code",
        ),
        (
            "merchants:4471:payouts:pending,USD/2,,2026-11-30T23:59:59Z",
            "line 2: balance",
            "empty",
        ),
        (
            "merchants:4471:payouts:pending,USD/2,48500000",
            "line 2",
            "has 3 fields but the header has 4",
        ),
    ] {
        let (got, message) = refusal(Statement::from_csv(&format!("{header}{row}\n")));
        assert_eq!(got, field, "{row}");
        assert!(message.contains(says), "{row}: {message}");
    }
}

#[test]
fn csv_refuses_an_empty_statement_and_a_repeated_balance() {
    let (field, message) = refusal(Statement::from_csv("account,asset,balance,as_of\n\n"));
    assert_eq!(field, "line 1: header");
    assert!(message.contains("no rows"), "{message}");
    assert!(Statement::from_csv("").is_err());

    // The same account and asset at the same instant, written in two offsets.
    let text = "account,asset,balance,as_of\n\
                merchants:4471:payouts:pending,USD/2,48500000,2026-11-30T23:59:59Z\n\
                merchants:4471:payouts:pending,USD/2,0,2026-12-01T00:59:59+01:00\n";
    let (field, message) = refusal(Statement::from_csv(text));
    assert_eq!(field, "line 3");
    assert!(message.contains("repeats line 2"), "{message}");

    // The same account at another time is another balance.
    let text = "account,asset,balance,as_of\n\
                merchants:4471:payouts:pending,USD/2,48500000,2026-11-30T23:59:59Z\n\
                merchants:4471:payouts:pending,USD/2,0,2026-12-01T23:59:59Z\n";
    assert_eq!(Statement::from_csv(text).unwrap().lines.len(), 2);
}

// ---------------------------------------------------------------------------------
// camt.053

#[test]
fn camt053_v02_reads_the_closing_booked_balance_of_every_account() {
    let statement =
        Statement::from_camt053(&fixture("camt053.001.02-three-accounts.xml"), &mapping()).unwrap();
    assert_eq!(
        summary(&statement),
        [
            // The reference case: a credit CLBD of USD 485000.00 on a date.
            line(
                "merchants:4471:payouts:pending",
                "USD/2",
                48_500_000,
                "2026-11-30T23:59:59.999999Z",
                "Stmt[1]",
            ),
            // A debit CLBD with a date-time; one fraction digit is padded.
            line(
                "treasury:gb:operating",
                "GBP/2",
                -125_050,
                "2026-11-30T17:00:00Z",
                "Stmt[2]",
            ),
            // JPY has no minor unit: scale 0; the account is an Othr/Id.
            line(
                "treasury:jp:operating",
                "JPY/0",
                1_500_000,
                "2026-11-30T23:59:59.999999Z",
                "Stmt[3]",
            ),
        ]
    );
}

#[test]
fn camt053_v08_with_a_prefix_reads_three_decimal_currencies_and_mapped_assets() {
    let statement = Statement::from_camt053(
        &fixture("camt053.001.08-three-decimal-currencies.xml"),
        &mapping(),
    )
    .unwrap();
    assert_eq!(
        summary(&statement),
        [
            line(
                "treasury:bh:operating",
                "BHD/3",
                1_234_567,
                "2026-11-30T20:59:59.5Z",
                "Stmt[1]",
            ),
            // The CLBD is the second Bal; a debit of 0.5 KWD is -500 fils.
            line(
                "treasury:kw:operating",
                "KWD/3",
                -500,
                "2026-11-30T23:59:59.999999Z",
                "Stmt[2]",
            ),
            // XTS is not in the ISO 4217 table; the mapping gives XTS/2.
            line(
                "treasury:test:settlement",
                "XTS/2",
                7710,
                "2026-11-30T23:59:59.999999Z",
                "Stmt[3]",
            ),
        ]
    );
}

#[test]
fn camt053_a_currency_outside_the_table_needs_its_asset_in_the_mapping() {
    let mapping = fixture("mapping.csv").replace(",XTS/2", ",");
    let mapping = AccountMapping::from_csv(&mapping).unwrap();
    let (field, message) = refusal(Statement::from_camt053(
        &fixture("camt053.001.08-three-decimal-currencies.xml"),
        &mapping,
    ));
    assert_eq!(field, "Stmt[3]/Bal[1]/Amt@Ccy");
    assert!(
        message.contains("currency XTS is not in the ISO 4217 table"),
        "{message}"
    );
    assert!(message.contains("line 7, column asset"), "{message}");
}

#[test]
fn camt053_refuses_more_fraction_digits_than_the_currency_has() {
    let xml = fixture("camt053.001.02-three-accounts.xml");
    let (field, message) = refusal(Statement::from_camt053(
        &xml.replacen(">485000.00<", ">485000.001<", 1),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[1]/Bal[2]/Amt");
    assert!(
        message.contains("3 fraction digits but the asset has 2"),
        "{message}"
    );
    assert!(message.contains("not rounded") || message.contains("rather than rounded"));

    let (field, message) = refusal(Statement::from_camt053(
        &xml.replace(">1500000<", ">1500000.00<"),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[3]/Bal[1]/Amt", "JPY has no fraction digits");
    assert!(message.contains("but the asset has 0"), "{message}");
}

#[test]
fn camt053_refuses_a_bad_or_missing_amount_naming_the_element() {
    let xml = fixture("camt053.001.02-three-accounts.xml");
    let (field, message) = refusal(Statement::from_camt053(
        &xml.replacen(">485000.00<", ">12,50<", 1),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[1]/Bal[2]/Amt");
    assert!(message.contains("\"12,50\" is not an amount"), "{message}");

    let without_amount = xml.replacen("<Amt Ccy=\"USD\">485000.00</Amt>", "", 1);
    assert_ne!(without_amount, xml);
    let (field, message) = refusal(Statement::from_camt053(&without_amount, &mapping()));
    assert_eq!(field, "Stmt[1]/Bal[2]/Amt");
    assert!(message.contains("is missing"), "{message}");

    let (field, _) = refusal(Statement::from_camt053(
        &xml.replacen("<Amt Ccy=\"USD\">485000.00", "<Amt>485000.00", 1),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[1]/Bal[2]/Amt@Ccy");

    // Only the closing booked balance is compared, so only it must be complete.
    let loose_opening = xml.replacen("<Amt Ccy=\"USD\">0.00</Amt>", "<Amt>n/a</Amt>", 1);
    assert_ne!(loose_opening, xml);
    let statement = Statement::from_camt053(&loose_opening, &mapping()).unwrap();
    assert_eq!(statement.lines[0].balance, 48_500_000);

    let (field, message) = refusal(Statement::from_camt053(
        &xml.replacen(
            "<Amt Ccy=\"USD\">485000.00",
            "<Amt Ccy=\"EUR\">485000.00",
            1,
        ),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[1]/Bal[2]/Amt@Ccy");
    assert!(message.contains("Stmt[1]/Acct/Ccy) is in USD"), "{message}");
}

#[test]
fn camt053_refuses_an_unmapped_iban_naming_it_and_its_stmt() {
    let mapping =
        fixture("mapping.csv").replace("GB29NWBK60161331926819,treasury:gb:operating,\n", "");
    let mapping = AccountMapping::from_csv(&mapping).unwrap();
    let (field, message) = refusal(Statement::from_camt053(
        &fixture("camt053.001.02-three-accounts.xml"),
        &mapping,
    ));
    assert_eq!(field, "Stmt[2]/Acct/Id/IBAN");
    assert!(
        message
            .contains("IBAN GB29NWBK60161331926819 of Stmt[2] has no entry in the account mapping"),
        "{message}"
    );
}

#[test]
fn camt053_refuses_a_statement_iban_with_wrong_check_digits() {
    let xml = fixture("camt053.001.02-three-accounts.xml").replace(
        "<IBAN>GB29NWBK60161331926819</IBAN>\n        </Id>\n        <Ccy>GBP",
        "<IBAN>GB28NWBK60161331926819</IBAN>\n        </Id>\n        <Ccy>GBP",
    );
    let (field, message) = refusal(Statement::from_camt053(&xml, &mapping()));
    assert_eq!(field, "Stmt[2]/Acct/Id/IBAN");
    assert!(message.contains("wrong check digits"), "{message}");
}

#[test]
fn camt053_malformed_xml_names_the_element_and_the_position() {
    let xml = fixture("camt053-malformed.xml");
    let broken_line = xml
        .lines()
        .position(|l| l.contains("</Amnt>"))
        .expect("the fixture's broken tag")
        + 1;
    let (field, message) = refusal(Statement::from_camt053(&xml, &mapping()));
    assert_eq!(field, "Stmt[1]/Bal[2]/Amt");
    assert!(
        message.contains(&format!("malformed XML at line {broken_line}, column ")),
        "{message}"
    );
    assert!(message.contains("Amnt"), "{message}");
}

#[test]
fn camt053_a_truncated_file_names_the_unclosed_element() {
    let xml = fixture("camt053.001.02-three-accounts.xml");
    let cut = xml.find("<Cd>CLBD</Cd>").expect("a CLBD");
    let (field, message) = refusal(Statement::from_camt053(&xml[..cut], &mapping()));
    assert_eq!(field, "Stmt[1]/Bal[2]/Tp/CdOrPrtry");
    assert!(message.contains("never closed"), "{message}");
}

#[test]
fn camt053_a_stmt_without_closing_booked_balance_is_named() {
    let (field, message) = refusal(Statement::from_camt053(
        &fixture("camt053-stmt-without-closing.xml"),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[2]");
    assert!(message.contains("no closing booked balance"), "{message}");
}

#[test]
fn camt053_refuses_a_document_that_is_not_a_camt053_statement() {
    let (field, message) = refusal(Statement::from_camt053(
        &fixture("camt052-account-report.xml"),
        &mapping(),
    ));
    assert_eq!(field, "Document");
    assert!(
        message.contains("namespace urn:iso:std:iso:20022:tech:xsd:camt.052.001.08"),
        "{message}"
    );

    let (field, message) = refusal(Statement::from_camt053(
        "<?xml version=\"1.0\"?>\n<html><body/></html>",
        &mapping(),
    ));
    assert_eq!(field, "html");
    assert!(
        message.contains("the root element is html in no namespace"),
        "{message}"
    );

    // A camt.053 namespace whose Document holds something else.
    let (field, _) = refusal(Statement::from_camt053(
        "<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.02\"><BkToCstmrAcctRpt/></Document>",
        &mapping(),
    ));
    assert_eq!(field, "Document/BkToCstmrAcctRpt");

    let (field, message) = refusal(Statement::from_camt053(
        "<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.02\"><BkToCstmrStmt><GrpHdr/></BkToCstmrStmt></Document>",
        &mapping(),
    ));
    assert_eq!(field, "Document/BkToCstmrStmt");
    assert!(message.contains("holds no Stmt"), "{message}");

    assert_eq!(
        refusal(Statement::from_camt053("", &mapping())).0,
        "Document"
    );
}

#[test]
fn camt053_refuses_dates_it_would_have_to_guess() {
    let xml = fixture("camt053.001.02-three-accounts.xml");
    let (field, message) = refusal(Statement::from_camt053(
        &xml.replace(
            "<DtTm>2026-11-30T17:00:00+00:00</DtTm>",
            "<DtTm>2026-11-30T17:00:00</DtTm>",
        ),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[2]/Bal[1]/Dt/DtTm");
    assert!(message.contains("no UTC offset"), "{message}");

    let (field, _) = refusal(Statement::from_camt053(
        &xml.replacen("<Dt>2026-11-30</Dt>\n        </Dt>", "</Dt>", 1),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[1]/Bal[2]/Dt");
}

#[test]
fn camt053_refuses_ambiguous_balances() {
    let xml = fixture("camt053.001.02-three-accounts.xml");
    // The GBP statement's second balance made a CLBD too.
    let (field, message) = refusal(Statement::from_camt053(
        &xml.replace("<Cd>CLAV</Cd>", "<Cd>CLBD</Cd>"),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[2]");
    assert!(
        message.contains("two closing booked balances (CLBD): Stmt[2]/Bal[1] and Stmt[2]/Bal[2]"),
        "{message}"
    );

    // CdtDbtInd must be CRDT or DBIT.
    let (field, _) = refusal(Statement::from_camt053(
        &xml.replace("<CdtDbtInd>DBIT</CdtDbtInd>", "<CdtDbtInd>DR</CdtDbtInd>"),
        &mapping(),
    ));
    assert_eq!(field, "Stmt[2]/Bal[1]/CdtDbtInd");

    // Two statements of one account on one date: which one is compared?
    let stmt_start = xml.find("    <Stmt>").unwrap();
    let stmt_end = xml.find("</Stmt>").unwrap() + "</Stmt>\n".len();
    let mut twice = xml.clone();
    twice.insert_str(stmt_end, &xml[stmt_start..stmt_end]);
    let (field, message) = refusal(Statement::from_camt053(&twice, &mapping()));
    assert_eq!(field, "Stmt[2]");
    assert!(message.contains("repeats Stmt[1]"), "{message}");
}
