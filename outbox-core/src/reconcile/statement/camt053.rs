//! ISO 20022 camt.053 bank-to-customer statements: the closing booked balance
//! (`CLBD`) of every `Stmt`, mapped to a ledger account.
//!
//! Versions .001.02 to .001.08 (and the later ones, which keep it) share the part
//! read here:
//!
//! ```text
//! Document/BkToCstmrStmt/Stmt/
//!     Acct/Id/IBAN | Acct/Id/Othr/Id, Acct/Ccy
//!     Bal/Tp/CdOrPrtry/Cd, Bal/Amt@Ccy, Bal/CdtDbtInd, Bal/Dt/Dt | Bal/Dt/DtTm
//! ```
//!
//! The file is read as a stream of XML events with each element's path kept, so a
//! value is taken only at its exact path (an entry's `Amt` or a counterparty's `IBAN`
//! is never mistaken for the statement's) and every error names the element
//! (`Stmt[2]/Bal[3]/Amt`) and its line. Nothing is expanded from a DTD.

use chrono::{DateTime, Utc};
use quick_xml::XmlVersion;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;
use quick_xml::reader::NsReader;

use super::line_counter::LineCounter;
use super::{AccountMapping, StatementLine, as_of, currency, iban, minor_units};
use crate::domain::Asset;
use crate::error::{Error, Result};

/// Every camt.053 namespace is this followed by a two-digit version.
const NAMESPACE: &str = "urn:iso:std:iso:20022:tech:xsd:camt.053.001.";

/// Elements that repeat among their siblings: paths show their 1-based index.
const REPEATED: &[&str] = &["Stmt", "Bal", "Ntry", "NtryDtls", "TxDtls"];

/// Reads every `Stmt` of `xml` as one statement line, in file order.
pub(super) fn parse(xml: &str, mapping: &AccountMapping) -> Result<Vec<StatementLine>> {
    let mut reader = NsReader::from_str(xml);
    let mut walk = Walk::new(xml, mapping);
    loop {
        let event = match reader.read_event() {
            Ok(event) => event,
            Err(e) => return Err(walk.malformed(reader.error_position(), &e.to_string())),
        };
        let position = reader.buffer_position();
        match event {
            Event::Start(e) => walk.open(&e, &reader, position)?,
            Event::Empty(e) => {
                walk.open(&e, &reader, position)?;
                walk.close()?;
            }
            Event::End(_) => walk.close()?,
            Event::Text(t) => walk.text(&t.xml10_content()),
            Event::CData(c) => walk.text(&c.xml10_content()),
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => Some(c.to_string()),
                    Ok(None) => resolve_predefined_entity(&r).map(str::to_owned),
                    Err(_) => None,
                };
                match resolved {
                    Some(text) => walk.text(&text),
                    None => {
                        return Err(walk.at(
                            Error::invalid(
                                walk.path(),
                                format!("unknown entity reference &{};", &*r),
                            ),
                            position,
                        ));
                    }
                }
            }
            Event::Eof => return walk.finish(),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
        }
    }
}

/// Where a value was read from.
#[derive(Debug, Clone)]
struct Value {
    text: String,
    /// Its element path (`Stmt[1]/Bal[2]/Amt`).
    path: String,
    line: u64,
}

/// The values of a `Stmt` that are read, by their path below the `Stmt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Iban,
    OtherId,
    AccountCurrency,
    BalanceType,
    Amount,
    CreditDebit,
    Date,
    DateTime,
}

impl Field {
    fn at(below_stmt: &[&str]) -> Option<Self> {
        Some(match below_stmt {
            ["Acct", "Id", "IBAN"] => Self::Iban,
            ["Acct", "Id", "Othr", "Id"] => Self::OtherId,
            ["Acct", "Ccy"] => Self::AccountCurrency,
            ["Bal", "Tp", "CdOrPrtry", "Cd"] => Self::BalanceType,
            ["Bal", "Amt"] => Self::Amount,
            ["Bal", "CdtDbtInd"] => Self::CreditDebit,
            ["Bal", "Dt", "Dt"] => Self::Date,
            ["Bal", "Dt", "DtTm"] => Self::DateTime,
            _ => return None,
        })
    }
}

/// One `Bal` as read so far.
#[derive(Debug, Default)]
struct Balance {
    path: String,
    line: u64,
    code: Option<Value>,
    amount: Option<Value>,
    /// `Amt@Ccy`.
    currency: Option<Value>,
    credit_debit: Option<Value>,
    date: Option<Value>,
    date_time: Option<Value>,
}

/// One `Stmt` as read so far.
#[derive(Debug, Default)]
struct Stmt {
    label: String,
    line: u64,
    iban: Option<Value>,
    other_id: Option<Value>,
    currency: Option<Value>,
    closing: Option<Balance>,
}

/// An open element.
#[derive(Debug)]
struct Frame {
    name: String,
    /// `Stmt[2]` for a repeated element, the name otherwise.
    label: String,
    /// How many children of each name it has had, to label the next one.
    children: Vec<(String, usize)>,
}

/// A value being read: the field, the depth of its element, the text so far.
#[derive(Debug)]
struct Capture {
    field: Field,
    depth: usize,
    value: Value,
}

#[derive(Debug)]
struct Walk<'a> {
    xml: &'a str,
    mapping: &'a AccountMapping,
    frames: Vec<Frame>,
    seen_root: bool,
    seen_body: bool,
    statements: usize,
    stmt: Option<Stmt>,
    balance: Option<Balance>,
    capture: Option<Capture>,
    lines: Vec<StatementLine>,
    line_counter: LineCounter<'a>,
}

impl<'a> Walk<'a> {
    fn new(xml: &'a str, mapping: &'a AccountMapping) -> Self {
        Self {
            xml,
            mapping,
            frames: Vec::new(),
            seen_root: false,
            seen_body: false,
            statements: 0,
            stmt: None,
            balance: None,
            capture: None,
            lines: Vec::new(),
            line_counter: LineCounter::new(xml),
        }
    }

    /// The line of byte `position`.
    fn line_at(&mut self, position: u64) -> u64 {
        self.line_counter.line_at(position)
    }

    /// Adds the line of `position` to an error.
    fn at(&mut self, error: Error, position: u64) -> Error {
        let line = self.line_at(position);
        error.with("line", line)
    }

    /// The names of the open elements below `Document/BkToCstmrStmt/Stmt`, when
    /// inside one.
    fn below_stmt(&self) -> Option<Vec<&str>> {
        let names: Vec<&str> = self.frames.iter().map(|f| f.name.as_str()).collect();
        match names.as_slice() {
            ["Document", "BkToCstmrStmt", "Stmt", rest @ ..] => Some(rest.to_vec()),
            _ => None,
        }
    }

    /// The path of the innermost open element, from its `Stmt` when inside one
    /// (`Stmt[2]/Bal[1]/Amt`), from the root otherwise.
    fn path(&self) -> String {
        let from = if self.below_stmt().is_some() { 2 } else { 0 };
        let labels: Vec<&str> = self.frames[from.min(self.frames.len())..]
            .iter()
            .map(|f| f.label.as_str())
            .collect();
        if labels.is_empty() {
            "XML prolog".to_owned()
        } else {
            labels.join("/")
        }
    }

    fn malformed(&self, position: u64, error: &str) -> Error {
        let end = usize::try_from(position)
            .unwrap_or(usize::MAX)
            .min(self.xml.len());
        let before = &self.xml.as_bytes()[..end];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        Error::invalid(
            self.path(),
            format!("malformed XML at line {line}, column {column}: {error}"),
        )
    }

    fn open(&mut self, e: &BytesStart<'_>, reader: &NsReader<&[u8]>, position: u64) -> Result<()> {
        let name = e.local_name().as_ref().to_owned();
        // quick-xml reads `< x` as a start tag named "": not XML, and no name to give.
        if name.is_empty() {
            return Err(self.malformed(position, "a tag without an element name"));
        }
        match self.frames.len() {
            0 => {
                if self.seen_root {
                    let error = Error::invalid(
                        &name,
                        "a second root element after the Document: one statement file holds one Document",
                    );
                    return Err(self.at(error, position));
                }
                self.seen_root = true;
                let (namespace, _) = reader.resolver().resolve_element(e.name());
                let namespace = match namespace {
                    ResolveResult::Bound(ns) => Some(ns.0.to_owned()),
                    ResolveResult::Unbound | ResolveResult::Unknown(_) => None,
                };
                let camt053 = namespace.as_deref().is_some_and(is_camt053);
                if name != "Document" || !camt053 {
                    let found =
                        namespace.map_or("no namespace".to_owned(), |ns| format!("namespace {ns}"));
                    let error = Error::invalid(
                        &name,
                        format!(
                            "the root element is {name} in {found}: a camt.053 statement is a Document in namespace {NAMESPACE}NN"
                        ),
                    );
                    return Err(self.at(error, position));
                }
            }
            1 if name != "BkToCstmrStmt" => {
                let error = Error::invalid(
                    format!("Document/{name}"),
                    format!(
                        "a camt.053 Document holds BkToCstmrStmt, not {name}: is it another camt message?"
                    ),
                );
                return Err(self.at(error, position));
            }
            1 => self.seen_body = true,
            _ => {}
        }

        let label = match self.frames.last_mut() {
            None => name.clone(),
            Some(parent) => {
                let index = match parent.children.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, count)) => {
                        *count += 1;
                        *count
                    }
                    None => {
                        parent.children.push((name.clone(), 1));
                        1
                    }
                };
                if REPEATED.contains(&name.as_str()) {
                    format!("{name}[{index}]")
                } else {
                    name.clone()
                }
            }
        };
        self.frames.push(Frame {
            name,
            label,
            children: Vec::new(),
        });

        let Some(below) = self.below_stmt() else {
            return Ok(());
        };
        let field = Field::at(&below);
        let (is_stmt, is_balance, is_amount) = (
            below.is_empty(),
            below == ["Bal"],
            field == Some(Field::Amount),
        );
        let path = self.path();
        let line = self.line_at(position);
        if is_stmt {
            self.statements += 1;
            self.stmt = Some(Stmt {
                label: path.clone(),
                line,
                ..Stmt::default()
            });
        }
        if is_balance {
            self.balance = Some(Balance {
                path: path.clone(),
                line,
                ..Balance::default()
            });
        }
        if is_amount {
            // Read for every balance but required only of the closing one, which is
            // the only one compared (statement_line says so when it is missing).
            let ccy_path = format!("{path}@Ccy");
            let unreadable = |err: &dyn std::fmt::Display| {
                Error::invalid(&ccy_path, format!("unreadable: {err}")).with("line", line)
            };
            let currency = match e.try_get_attribute("Ccy") {
                Ok(Some(attribute)) => Some(
                    attribute
                        .normalized_value(XmlVersion::Implicit1_0)
                        .map_err(|err| unreadable(&err))?
                        .trim()
                        .to_owned(),
                ),
                Ok(None) => None,
                Err(err) => return Err(unreadable(&err)),
            };
            if let (Some(balance), Some(text)) = (self.balance.as_mut(), currency) {
                balance.currency = Some(Value {
                    text,
                    path: ccy_path,
                    line,
                });
            }
        }
        if let Some(field) = field {
            self.capture = Some(Capture {
                field,
                depth: self.frames.len(),
                value: Value {
                    text: String::new(),
                    path,
                    line,
                },
            });
        }
        Ok(())
    }

    fn text(&mut self, text: &str) {
        if let Some(capture) = self.capture.as_mut() {
            capture.value.text.push_str(text);
        }
    }

    fn close(&mut self) -> Result<()> {
        if self
            .capture
            .as_ref()
            .is_some_and(|c| c.depth == self.frames.len())
            && let Some(capture) = self.capture.take()
        {
            self.store(capture.field, capture.value)?;
        }
        let (is_stmt, is_balance) = match self.below_stmt() {
            Some(below) => (below.is_empty(), below == ["Bal"]),
            None => (false, false),
        };
        if is_balance && let Some(balance) = self.balance.take() {
            self.end_balance(balance)?;
        }
        if is_stmt && let Some(stmt) = self.stmt.take() {
            let line = self.statement_line(stmt)?;
            self.lines.push(line);
        }
        self.frames.pop();
        Ok(())
    }

    fn store(&mut self, field: Field, mut value: Value) -> Result<()> {
        value.text = value.text.trim().to_owned();
        let slot = match field {
            Field::Iban => self.stmt.as_mut().map(|s| &mut s.iban),
            Field::OtherId => self.stmt.as_mut().map(|s| &mut s.other_id),
            Field::AccountCurrency => self.stmt.as_mut().map(|s| &mut s.currency),
            Field::BalanceType => self.balance.as_mut().map(|b| &mut b.code),
            Field::Amount => self.balance.as_mut().map(|b| &mut b.amount),
            Field::CreditDebit => self.balance.as_mut().map(|b| &mut b.credit_debit),
            Field::Date => self.balance.as_mut().map(|b| &mut b.date),
            Field::DateTime => self.balance.as_mut().map(|b| &mut b.date_time),
        };
        // A field's element always sits inside its Stmt (and Bal), which are open.
        let Some(slot) = slot else { return Ok(()) };
        if slot.is_some() {
            return Err(Error::invalid(&value.path, "appears twice").with("line", value.line));
        }
        *slot = Some(value);
        Ok(())
    }

    fn end_balance(&mut self, balance: Balance) -> Result<()> {
        let closing = balance.code.as_ref().is_some_and(|c| c.text == "CLBD");
        let Some(stmt) = self.stmt.as_mut() else {
            return Ok(());
        };
        if !closing {
            return Ok(());
        }
        if let Some(earlier) = &stmt.closing {
            return Err(Error::invalid(
                &stmt.label,
                format!(
                    "has two closing booked balances (CLBD): {} and {}",
                    earlier.path, balance.path
                ),
            )
            .with("line", balance.line));
        }
        stmt.closing = Some(balance);
        Ok(())
    }

    /// The statement line of a complete `Stmt`: its mapped account and closing
    /// booked balance.
    fn statement_line(&self, stmt: Stmt) -> Result<StatementLine> {
        let Some(closing) = stmt.closing else {
            return Err(Error::invalid(
                &stmt.label,
                "has no closing booked balance (a Bal whose Tp/CdOrPrtry/Cd is CLBD)",
            )
            .with("line", stmt.line));
        };
        let (id, id_value, kind) = match (&stmt.iban, &stmt.other_id) {
            (Some(v), _) => (
                iban::normalize(&v.path, &v.text).map_err(|e| e.with("line", v.line))?,
                v,
                "IBAN",
            ),
            (None, Some(v)) if !v.text.is_empty() => (v.text.clone(), v, "account id"),
            (None, Some(v)) => {
                return Err(Error::invalid(&v.path, "is empty").with("line", v.line));
            }
            (None, None) => {
                return Err(Error::invalid(
                    format!("{}/Acct/Id", stmt.label),
                    "is missing: the statement names no account (neither Acct/Id/IBAN nor Acct/Id/Othr/Id)",
                )
                .with("line", stmt.line));
            }
        };
        let Some(mapped) = self.mapping.get(&id) else {
            return Err(Error::invalid(
                &id_value.path,
                format!(
                    "{kind} {id} of {} has no entry in the account mapping",
                    stmt.label
                ),
            )
            .with("line", id_value.line));
        };

        let missing = |element: &str, why: &str| {
            Error::invalid(
                format!("{}/{element}", closing.path),
                format!("is missing: {why}"),
            )
            .with("line", closing.line)
        };
        let amount = closing
            .amount
            .as_ref()
            .ok_or_else(|| missing("Amt", "the closing booked balance has no amount"))?;
        let ccy = closing
            .currency
            .as_ref()
            .ok_or_else(|| missing("Amt@Ccy", "the amount has no currency"))?;
        if ccy.text.len() != 3 || !ccy.text.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(Error::invalid(
                &ccy.path,
                format!("{:?} is not an ISO 4217 currency code", ccy.text),
            )
            .with("line", ccy.line));
        }
        if let Some(account_ccy) = &stmt.currency
            && account_ccy.text != ccy.text
        {
            return Err(Error::invalid(
                &ccy.path,
                format!(
                    "the closing balance is in {} but the account ({}) is in {}",
                    ccy.text, account_ccy.path, account_ccy.text
                ),
            )
            .with("line", ccy.line));
        }
        let asset = match &mapped.asset {
            Some(asset) => asset.clone(),
            None => {
                let Some(exponent) = currency::exponent(&ccy.text) else {
                    return Err(Error::invalid(
                        &ccy.path,
                        format!(
                            "currency {} is not in the ISO 4217 table: give its asset in the account mapping (line {}, column asset)",
                            ccy.text, mapped.line
                        ),
                    )
                    .with("line", ccy.line));
                };
                Asset::parse_field(&ccy.path, &format!("{}/{exponent}", ccy.text))?
            }
        };
        let magnitude = minor_units::parse_decimal(&amount.path, &amount.text, asset.scale())
            .map_err(|e| e.with("line", amount.line))?;

        let sign = match closing.credit_debit.as_ref() {
            None => return Err(missing("CdtDbtInd", "a balance is either CRDT or DBIT")),
            Some(v) if v.text == "CRDT" => 1,
            Some(v) if v.text == "DBIT" => -1,
            Some(v) => {
                return Err(Error::invalid(
                    &v.path,
                    format!("{:?} is neither CRDT nor DBIT", v.text),
                )
                .with("line", v.line));
            }
        };
        let as_of: DateTime<Utc> = match (&closing.date, &closing.date_time) {
            (Some(d), None) => {
                as_of::parse_end_of_day(&d.path, &d.text).map_err(|e| e.with("line", d.line))?
            }
            (None, Some(t)) => {
                as_of::parse_instant(&t.path, &t.text).map_err(|e| e.with("line", t.line))?
            }
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    format!("{}/Dt", closing.path),
                    "holds both Dt and DtTm: one of them",
                )
                .with("line", closing.line));
            }
            (None, None) => {
                return Err(missing(
                    "Dt",
                    "the closing balance has no date (Dt/Dt or Dt/DtTm)",
                ));
            }
        };

        Ok(StatementLine {
            account: mapped.account.as_str().to_owned(),
            asset,
            balance: sign * magnitude,
            as_of,
            origin: stmt.label,
        })
    }

    fn finish(self) -> Result<Vec<StatementLine>> {
        if let Some(open) = self.frames.last() {
            return Err(Error::invalid(
                self.path(),
                format!(
                    "the file ends inside {}: the element is never closed",
                    open.name
                ),
            ));
        }
        if !self.seen_root {
            return Err(Error::invalid(
                "Document",
                "is missing: the file holds no XML element",
            ));
        }
        if !self.seen_body {
            return Err(Error::invalid(
                "Document/BkToCstmrStmt",
                "is missing: the Document holds no bank-to-customer statement",
            ));
        }
        if self.statements == 0 {
            return Err(Error::invalid(
                "Document/BkToCstmrStmt",
                "holds no Stmt: the statement reports no account",
            ));
        }
        Ok(self.lines)
    }
}

/// `urn:iso:std:iso:20022:tech:xsd:camt.053.001.NN` for any two-digit `NN`.
fn is_camt053(namespace: &str) -> bool {
    namespace
        .strip_prefix(NAMESPACE)
        .is_some_and(|v| v.len() == 2 && v.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `camt053` fuzz target: quick-xml reads `< -- …` as a start tag
    /// with an empty name, and the refusal then named an empty field.
    #[test]
    fn a_tag_without_a_name_is_malformed_xml_named_by_where_it_is() {
        let mapping = AccountMapping::default();
        let err = parse(
            "<?xml version=\"1.0\"?>\n< -- a comment gone wrong -->\n",
            &mapping,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("XML prolog"), "{err}");
        assert!(err.message().contains("line 2"), "{err}");
        let nested =
            "<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.02\">< x/></Document>";
        let err = parse(nested, &mapping).unwrap_err();
        assert_eq!(err.field(), Some("Document"), "{err}");
    }

    #[test]
    fn every_two_digit_camt053_version_is_accepted() {
        assert!(is_camt053("urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"));
        assert!(is_camt053("urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"));
        assert!(!is_camt053(
            "urn:iso:std:iso:20022:tech:xsd:camt.052.001.08"
        ));
        assert!(!is_camt053("urn:iso:std:iso:20022:tech:xsd:camt.053.001.8"));
        assert!(!is_camt053(
            "urn:iso:std:iso:20022:tech:xsd:camt.053.001.08x"
        ));
    }
}
