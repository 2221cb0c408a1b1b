//! The exit codes every command documents (`outbox --help` lists them): a scheduler
//! or a script can tell "nothing was posted" from "a flag is wrong" from "the ledger
//! is down" without parsing messages.

use std::process::ExitCode;

use outbox_core::{Error, ErrorKind, Retry};

/// Everything asked was done.
pub const DONE: u8 = 0;
/// An unexpected failure (a bug, corrupted data, a refusal that is none of below).
pub const FAILED: u8 = 1;
/// Bad configuration, flags or input: fix the command, not the service.
pub const CONFIG: u8 = 2;
/// A database, the ledger or a broker could not be reached: retry later.
pub const UNREACHABLE: u8 = 3;
/// Events left undelivered or accounts stopped.
pub const INCOMPLETE: u8 = 4;
/// A control or reconciliation found something a person must look at.
pub const CONTROL_FAILED: u8 = 5;

/// The exit code of a command that ended with `error`.
pub fn code(error: &Error) -> u8 {
    match error.kind() {
        ErrorKind::Config | ErrorKind::InvalidInput { .. } => CONFIG,
        ErrorKind::Incomplete => INCOMPLETE,
        ErrorKind::ControlFailed => CONTROL_FAILED,
        ErrorKind::Storage | ErrorKind::Transport | ErrorKind::Ledger
            if matches!(error.retry(), Retry::Transient { .. } | Retry::Exhausted) =>
        {
            UNREACHABLE
        }
        _ => FAILED,
    }
}

/// The process's exit status for a command's result.
pub fn status(result: &outbox_core::Result<()>) -> ExitCode {
    ExitCode::from(match result {
        Ok(()) => DONE,
        Err(error) => code(error),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_of_failure_has_its_code() {
        let invalid = Error::invalid("database", "not a URL");
        assert_eq!(code(&invalid), CONFIG);
        assert_eq!(code(&Error::new(ErrorKind::Config, "x")), CONFIG);
        let down = Error::new(ErrorKind::Storage, "refused").transient(None);
        assert_eq!(code(&down), UNREACHABLE);
        let ledger_down = Error::new(ErrorKind::Transport, "reset").transient(None);
        assert_eq!(code(&ledger_down), UNREACHABLE);
        assert_eq!(code(&Error::new(ErrorKind::Storage, "constraint")), FAILED);
        assert_eq!(code(&Error::new(ErrorKind::Incomplete, "left")), INCOMPLETE);
        assert_eq!(
            code(&Error::new(ErrorKind::ControlFailed, "gap")),
            CONTROL_FAILED
        );
        assert_eq!(code(&Error::new(ErrorKind::Internal, "bug")), FAILED);
    }
}
