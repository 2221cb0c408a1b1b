//! Maps sqlx and replication-protocol errors of the CDC relay to the core error, once:
//! connection loss, lock contention and a slot still held by a dying session are
//! transient; the rest is permanent.

use outbox_core::{Error, ErrorKind};
use pgwire_replication::PgWireError;

/// SQLSTATEs worth retrying: serialization failure, deadlock, lock not available,
/// object in use (a replication slot still held), admin/crash shutdown, cannot
/// connect now, too many connections.
const TRANSIENT_SQLSTATES: [&str; 8] = [
    "40001", "40P01", "55P03", "55006", "57P01", "57P02", "57P03", "53300",
];

fn is_transient_sqlstate(code: &str) -> bool {
    TRANSIENT_SQLSTATES.contains(&code) || code.starts_with("08")
}

/// Classifies a control-connection error; `doing` says what was being done.
pub(crate) fn sql(doing: &str, err: sqlx::Error) -> Error {
    let transient = match &err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| is_transient_sqlstate(&c)),
        _ => false,
    };
    let error = Error::new(ErrorKind::Storage, format!("{doing}: {err}"));
    let error = if transient {
        error.transient(None)
    } else {
        error
    };
    error.with_source(err)
}

/// Classifies a replication-connection error.
pub(crate) fn replication(doing: &str, err: &PgWireError) -> Error {
    let text = err.to_string();
    let sqlstate = text
        .rsplit_once("(SQLSTATE ")
        .and_then(|(_, rest)| rest.get(..5));
    let transient = err.is_transient() || sqlstate.is_some_and(is_transient_sqlstate);
    let error = Error::new(ErrorKind::Storage, format!("{doing}: {text}"));
    if transient {
        error.transient(None)
    } else {
        error
    }
}

/// Whether a replication error says the slot is held by another session (SQLSTATE 55006).
pub(crate) fn is_slot_in_use(err: &PgWireError) -> bool {
    err.to_string().contains("(SQLSTATE 55006)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_in_use_is_transient_and_auth_is_not() {
        let busy = PgWireError::Server(
            "replication slot \"s\" is active for PID 42 (SQLSTATE 55006)".into(),
        );
        assert!(is_slot_in_use(&busy));
        assert!(replication("starting", &busy).is_transient());
        let auth = PgWireError::Server("password authentication failed (SQLSTATE 28P01)".into());
        assert!(!replication("starting", &auth).is_transient());
        let io = PgWireError::Io(std::sync::Arc::new(std::io::Error::other("reset")));
        assert!(replication("reading", &io).is_transient());
    }
}
