//! The Formance error envelope: `{"errorCode", "errorMessage"}` with the status the
//! real ledger uses for each code (docs/LEDGER.md#error-codes).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The `V2ErrorsEnum` values this ledger emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorCode {
    Internal,
    InsufficientFund,
    Validation,
    Conflict,
    CompilationFailed,
    MetadataOverride,
    NotFound,
    AlreadyRevert,
    NoPostings,
    LedgerNotFound,
    BulkSizeExceeded,
    InterpreterParse,
    InterpreterRuntime,
    LedgerAlreadyExists,
}

impl ErrorCode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Internal => "INTERNAL",
            Self::InsufficientFund => "INSUFFICIENT_FUND",
            Self::Validation => "VALIDATION",
            Self::Conflict => "CONFLICT",
            Self::CompilationFailed => "COMPILATION_FAILED",
            Self::MetadataOverride => "METADATA_OVERRIDE",
            Self::NotFound => "NOT_FOUND",
            Self::AlreadyRevert => "ALREADY_REVERT",
            Self::NoPostings => "NO_POSTINGS",
            Self::LedgerNotFound => "LEDGER_NOT_FOUND",
            Self::BulkSizeExceeded => "BULK_SIZE_EXCEEDED",
            Self::InterpreterParse => "INTERPRETER_PARSE",
            Self::InterpreterRuntime => "INTERPRETER_RUNTIME",
            Self::LedgerAlreadyExists => "LEDGER_ALREADY_EXISTS",
        }
    }

    /// The status the real ledger answers with for this code.
    fn default_status(self) -> StatusCode {
        match self {
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Conflict => StatusCode::CONFLICT,
            Self::NotFound | Self::LedgerNotFound => StatusCode::NOT_FOUND,
            Self::BulkSizeExceeded => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// An error answer of the ledger API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: code.default_status(),
            code,
            message: message.into(),
        }
    }

    pub(crate) fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub(crate) fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Validation, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub(crate) fn ledger_not_found(ledger: &str) -> Self {
        Self::new(
            ErrorCode::LedgerNotFound,
            format!("ledger {ledger:?} not found"),
        )
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
}

impl From<outbox_core::Error> for ApiError {
    /// Core validation errors (addresses, assets, amounts) are the ledger's VALIDATION.
    fn from(e: outbox_core::Error) -> Self {
        Self::validation(e.to_string())
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    #[serde(rename = "errorCode")]
    error_code: &'static str,
    #[serde(rename = "errorMessage")]
    error_message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Envelope {
            error_code: self.code.as_str(),
            error_message: &self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code.as_str(),
            self.message
        )
    }
}
