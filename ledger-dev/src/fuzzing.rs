//! The Numscript compiler and runner as the fuzz targets (`fuzz/`) and the corpus
//! replay test call them: not an API, hidden from the docs.

use std::collections::BTreeMap;

use outbox_core::{Metadata, Posting};

use crate::numscript::{Program, Runtime, ScriptError};

/// Compiles `source` for the machine (`interpreter == false`) or the
/// experimental interpreter, and runs it with `vars` against accounts that each
/// hold `balance` of every asset. The error is `"<kind>: <message>"`.
#[doc(hidden)]
pub fn run_numscript(
    source: &str,
    interpreter: bool,
    vars: &BTreeMap<String, String>,
    balance: i128,
) -> Result<(Vec<Posting>, Metadata), String> {
    let runtime = if interpreter {
        Runtime::Interpreter
    } else {
        Runtime::Machine
    };
    let describe = |e: ScriptError| match e {
        ScriptError::Parse(m) => format!("parse: {m}"),
        ScriptError::Vars(m) => format!("vars: {m}"),
        ScriptError::InsufficientFund(m) => format!("insufficient fund: {m}"),
    };
    let program = Program::compile(source, runtime).map_err(describe)?;
    let outcome = program.run(vars, |_, _| balance).map_err(describe)?;
    Ok((outcome.postings, outcome.tx_meta))
}
