//! Maps rusqlite errors to the core error, once: BUSY/LOCKED are transient,
//! append-only trigger aborts are `Immutable`, the rest is permanent.

use outbox_core::{Error, ErrorKind};
use rusqlite::ErrorCode;

/// Classifies a rusqlite error, for callers that run their own statements beside the outbox.
pub fn map(err: rusqlite::Error) -> Error {
    classify(&err).with_source(err)
}

fn classify(err: &rusqlite::Error) -> Error {
    if let rusqlite::Error::SqliteFailure(failure, message) = err {
        let text = message.clone().unwrap_or_else(|| failure.to_string());
        return match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                Error::new(ErrorKind::Storage, format!("sqlite is busy: {text}")).transient(None)
            }
            ErrorCode::ConstraintViolation if text.contains("append-only") => {
                Error::new(ErrorKind::Immutable, text)
            }
            _ => Error::new(ErrorKind::Storage, format!("sqlite: {text}")),
        };
    }
    Error::new(ErrorKind::Storage, format!("sqlite: {err}"))
}

/// Shorthand for `.map_err(error::map)`.
pub(crate) trait SqliteResultExt<T> {
    fn storage(self) -> outbox_core::Result<T>;
}

impl<T> SqliteResultExt<T> for rusqlite::Result<T> {
    fn storage(self) -> outbox_core::Result<T> {
        self.map_err(map)
    }
}
