//! Maps sqlx errors to the core error, once: connection trouble, pool timeouts,
//! serialization failures, deadlocks and lock timeouts are transient; the append-only
//! trigger is `Immutable`; a second row for one event id is `InvalidInput(event_id)`;
//! the rest is permanent.

use outbox_core::{Error, ErrorKind};
use sqlx::migrate::MigrateError;

/// SQLSTATE raised by the append-only triggers (`outbox_refuse_change`); class `OB` is
/// not used by PostgreSQL, so no message parsing is needed.
pub const APPEND_ONLY_SQLSTATE: &str = "OB001";

/// Classifies a sqlx error, for callers that run their own statements beside the outbox.
pub fn map_error(err: sqlx::Error) -> Error {
    classify(&err).with_source(err)
}

fn classify(err: &sqlx::Error) -> Error {
    match err {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let message = db.message();
            if code == APPEND_ONLY_SQLSTATE {
                return Error::new(ErrorKind::Immutable, message).with("sqlstate", code);
            }
            // The primary key of every outbox_events partition is named
            // outbox_events_<partition>_pkey.
            if code == "23505"
                && db
                    .constraint()
                    .is_some_and(|c| c.starts_with("outbox_events") && c.ends_with("_pkey"))
            {
                return Error::invalid("event_id", format!("already enqueued: {message}"))
                    .with("sqlstate", code);
            }
            let error = Error::new(ErrorKind::Storage, format!("postgres: {message}"))
                .with("sqlstate", &code);
            if is_transient_sqlstate(&code) {
                error.transient(None)
            } else {
                error
            }
        }
        // The connection or the pool failed, not the statement: a new connection can
        // run the same transaction again.
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => {
            Error::new(ErrorKind::Storage, format!("postgres: {err}")).transient(None)
        }
        sqlx::Error::Configuration(_) | sqlx::Error::InvalidArgument(_) | sqlx::Error::Tls(_) => {
            Error::new(ErrorKind::Config, format!("postgres: {err}"))
        }
        sqlx::Error::Migrate(inner) => classify_migrate(inner),
        _ => Error::new(ErrorKind::Storage, format!("postgres: {err}")),
    }
}

/// SQLSTATEs after which the same transaction, retried from the start, can succeed.
fn is_transient_sqlstate(code: &str) -> bool {
    matches!(
        code,
        "40001" // serialization_failure
            | "40P01" // deadlock_detected
            | "55P03" // lock_not_available (lock_timeout, NOWAIT)
            | "57P01" // admin_shutdown
            | "57P02" // crash_shutdown
            | "57P03" // cannot_connect_now (starting up, in recovery)
            | "53300" // too_many_connections
    ) || code.starts_with("08") // connection_exception
}

/// Classifies a migration failure by the database error inside it.
pub(crate) fn map_migrate(err: MigrateError) -> Error {
    classify_migrate(&err)
}

fn classify_migrate(err: &MigrateError) -> Error {
    match err {
        MigrateError::Execute(inner) => classify(inner),
        MigrateError::ExecuteMigration(inner, version) => {
            classify(inner).with("migration", version)
        }
        other => Error::new(ErrorKind::Storage, format!("postgres migrations: {other}")),
    }
}

/// Shorthand for `.map_err(error::map_error)`.
pub(crate) trait PgResultExt<T> {
    fn storage(self) -> outbox_core::Result<T>;
}

impl<T> PgResultExt<T> for Result<T, sqlx::Error> {
    fn storage(self) -> outbox_core::Result<T> {
        self.map_err(map_error)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use outbox_core::Retry;

    use super::*;

    /// A server error as the driver would report it.
    #[derive(Debug)]
    struct ServerError {
        code: String,
        constraint: Option<String>,
    }

    impl std::fmt::Display for ServerError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "failed with {}", self.code)
        }
    }

    impl std::error::Error for ServerError {}

    impl sqlx::error::DatabaseError for ServerError {
        fn message(&self) -> &str {
            "failed on purpose"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(&self.code))
        }
        fn constraint(&self) -> Option<&str> {
            self.constraint.as_deref()
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn db_error(code: &str, constraint: Option<&str>) -> sqlx::Error {
        sqlx::Error::Database(Box::new(ServerError {
            code: code.to_owned(),
            constraint: constraint.map(str::to_owned),
        }))
    }

    #[test]
    fn contention_and_connection_trouble_are_transient() {
        for code in ["40001", "40P01", "55P03", "57P01", "08006", "53300"] {
            let e = map_error(db_error(code, None));
            assert_eq!(e.retry(), Retry::Transient { after: None }, "{code}: {e}");
            assert_eq!(e.kind(), &ErrorKind::Storage);
            assert_eq!(e.context("sqlstate"), Some(code));
        }
        assert!(map_error(sqlx::Error::PoolTimedOut).is_transient());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(map_error(sqlx::Error::Io(io)).is_transient());
    }

    #[test]
    fn trigger_duplicates_and_the_rest() {
        let e = map_error(db_error(APPEND_ONLY_SQLSTATE, None));
        assert_eq!(e.kind(), &ErrorKind::Immutable);
        assert_eq!(e.retry(), Retry::Permanent);
        let e = map_error(db_error("23505", Some("outbox_events_p20261007_pkey")));
        assert_eq!(e.field(), Some("event_id"));
        let e = map_error(db_error("23505", Some("inbox_messages_pkey")));
        assert_eq!(
            (e.kind(), e.retry()),
            (&ErrorKind::Storage, Retry::Permanent)
        );
        assert_eq!(map_error(db_error("42P01", None)).retry(), Retry::Permanent);
    }

    #[test]
    fn migration_errors_keep_their_class() {
        let e = map_migrate(MigrateError::ExecuteMigration(db_error("40P01", None), 1));
        assert!(e.is_transient(), "{e}");
        assert_eq!(e.context("migration"), Some("1"));
    }
}
