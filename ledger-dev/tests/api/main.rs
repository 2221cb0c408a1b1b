//! Black-box tests of the dev ledger over real HTTP on loopback. Every response
//! body is checked against the Formance v2 OpenAPI component schemas and every
//! webhook payload against the committed-transactions event schema.

mod bulk;
mod contract_checks;
mod faults;
mod listing;
mod log_corruption;
mod logs;
mod persistence;
mod pit;
mod queries;
mod revert_metadata;
mod support;
mod transactions;
mod webhooks;
