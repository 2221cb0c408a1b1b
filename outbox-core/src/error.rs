//! The one error type of ledger-outbox: a kind (what went wrong) and a retry class
//! (what the caller should do about it).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What went wrong, coarse enough to branch on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Input failed validation; `field` names the offending field or header.
    InvalidInput {
        /// The offending field's path (`postings[2].amount`, `metadata.outbox_sequence`)
        /// or header (`header outbox-sequence`).
        field: String,
    },
    /// The storage backend failed (I/O, constraint, lock contention, …).
    Storage,
    /// The database refused to change an immutable record (append-only trigger).
    Immutable,
    /// The ledger answered with an error that is not a business rejection.
    Ledger,
    /// The same idempotency key was sent with a different body. Never retried.
    IdempotencyMismatch,
    /// A message transport (HTTP, Kafka, AMQP) failed.
    Transport,
    /// Configuration is missing or contradictory.
    Config,
    /// Something that should exist does not.
    NotFound,
    /// The consumer-supplied handler failed while applying an impact.
    Handler,
    /// An invariant of ledger-outbox itself was broken (a bug or tampered data).
    Internal,
    /// A control or a reconciliation check found something a person must look at; its
    /// report (printed beside the error) says what. Permanent.
    ControlFailed,
    /// The adapter does not offer this operation (a trait method it left at its
    /// default); permanent.
    Unsupported,
    /// The command ran to its end but did not do everything it was asked: events left
    /// undelivered, accounts stopped. What is left is named beside the error.
    Incomplete,
}

/// What a caller may do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Try again, after `after` when the other side said so (`Retry-After`).
    Transient {
        /// The least wait the other side asked for; `None`: the caller's own backoff.
        after: Option<Duration>,
    },
    /// Retrying the same request cannot succeed.
    Permanent,
    /// It was transient, but the retry budget is spent.
    Exhausted,
}

/// The error of every ledger-outbox operation.
///
/// Errors are permanent unless the adapter that raised them says otherwise; the
/// relay retries only [`Retry::Transient`] ones. Decisions branch on typed parts
/// only — [`kind`](Self::kind), [`retry`](Self::retry), [`field`](Self::field) and the
/// other side's [`code`](Self::code); the context entries are for people reading the
/// error. The error that caused it (a driver's, a client's) stays reachable through
/// [`std::error::Error::source`].
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    retry: Retry,
    message: String,
    context: Vec<(&'static str, String)>,
    /// Boxed: most errors have neither, and `Result<T, Error>` stays small.
    origin: Option<Box<Origin>>,
}

/// What the other side said, and the error that caused this one.
#[derive(Debug, Clone, Default)]
struct Origin {
    /// The other side's own error code: a ledger's `errorCode`.
    code: Option<String>,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Equal when everything but the cause is (a cause is rarely comparable).
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.kind,
            self.retry,
            &self.message,
            self.code(),
            &self.context,
        ) == (
            &other.kind,
            other.retry,
            &other.message,
            other.code(),
            &other.context,
        )
    }
}

impl Eq for Error {}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A permanent error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            retry: Retry::Permanent,
            message: message.into(),
            context: Vec::new(),
            origin: None,
        }
    }

    /// A permanent validation error naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::InvalidInput {
                field: field.into(),
            },
            message,
        )
    }

    /// Marks the error as transient, optionally with the delay the other side asked for.
    #[must_use]
    pub fn transient(mut self, after: Option<Duration>) -> Self {
        self.retry = Retry::Transient { after };
        self
    }

    /// Marks a transient error whose retry budget is spent.
    #[must_use]
    pub fn exhausted(mut self) -> Self {
        self.retry = Retry::Exhausted;
        self
    }

    /// The other side's own error code (a ledger's `errorCode` such as
    /// `INSUFFICIENT_FUND`), which decisions may branch on. Also shown as the
    /// `error_code` context entry.
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        let code = code.into();
        self.context.retain(|(k, _)| *k != "error_code");
        self.context.push(("error_code", code.clone()));
        self.origin.get_or_insert_default().code = Some(code);
        self
    }

    /// The error that caused this one, kept for [`std::error::Error::source`].
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.origin.get_or_insert_default().source = Some(Arc::new(source));
        self
    }

    /// The other side's error code, when it sent one (see [`with_code`](Self::with_code)).
    pub fn code(&self) -> Option<&str> {
        self.origin.as_ref()?.code.as_deref()
    }

    /// Adds a piece of context (which event, account, endpoint). Never a secret.
    #[must_use]
    pub fn with(mut self, key: &'static str, value: impl fmt::Display) -> Self {
        self.context.push((key, value.to_string()));
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// What the caller may do about it: [`Retry::Permanent`] unless the adapter that
    /// raised it said otherwise.
    pub fn retry(&self) -> Retry {
        self.retry
    }

    /// Whether a retry may succeed ([`Retry::Transient`]); an exhausted error is not.
    pub fn is_transient(&self) -> bool {
        matches!(self.retry, Retry::Transient { .. })
    }

    /// The message alone, without the field, context or retry class that
    /// [`Display`](std::fmt::Display) adds.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The field named by an [`ErrorKind::InvalidInput`] error.
    pub fn field(&self) -> Option<&str> {
        match &self.kind {
            ErrorKind::InvalidInput { field } => Some(field),
            _ => None,
        }
    }

    /// The value of a context entry, if present.
    pub fn context(&self, key: &str) -> Option<&str> {
        self.context
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::InvalidInput { field } => write!(f, "invalid {field}: {}", self.message)?,
            kind => write!(f, "{kind:?}: {}", self.message)?,
        }
        for (key, value) in &self.context {
            write!(f, " [{key}={value}]")?;
        }
        match self.retry {
            Retry::Transient { after: Some(after) } => {
                write!(f, " (transient, retry after {after:?})")
            }
            Retry::Transient { after: None } => write!(f, " (transient)"),
            Retry::Exhausted => write!(f, " (retries exhausted)"),
            Retry::Permanent => Ok(()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.origin
            .as_ref()?
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_permanent_unless_marked() {
        let e = Error::new(ErrorKind::Storage, "disk full");
        assert_eq!(e.retry(), Retry::Permanent);
        assert!(!e.is_transient());
        let t = e.transient(Some(Duration::from_secs(2)));
        assert_eq!(
            t.retry(),
            Retry::Transient {
                after: Some(Duration::from_secs(2))
            }
        );
        assert!(t.to_string().contains("retry after 2s"), "{t}");
        assert_eq!(t.exhausted().retry(), Retry::Exhausted);
    }

    #[test]
    fn the_cause_and_the_code_are_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let e = Error::new(ErrorKind::Storage, "writing the cursor")
            .with_source(io)
            .with_code("57P01");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "reset by peer");
        assert_eq!(e.code(), Some("57P01"));
        assert!(e.to_string().contains("[error_code=57P01]"), "{e}");
        assert_eq!(e.clone(), e, "clones are equal, cause included");
    }

    #[test]
    fn display_names_field_and_context() {
        let e = Error::invalid("account", "must not be empty").with("line", 7);
        assert_eq!(e.field(), Some("account"));
        assert_eq!(e.context("line"), Some("7"));
        assert_eq!(e.to_string(), "invalid account: must not be empty [line=7]");
    }
}
