//! How the service answers a failure: a client error names the field, a transient
//! failure asks for a retry, anything else is a 500 that names no internals.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use outbox_core::{Error, ErrorKind};
use serde_json::json;

/// A failed request, as the client sees it.
#[derive(Debug)]
pub enum Failure {
    /// 400: the body is not a payout request (not JSON, a field missing or of the
    /// wrong type, such as a float amount). The message names the field.
    Malformed(String),
    /// 422: a field has a value the service refuses.
    Invalid { field: String, message: String },
    /// 409: the payout id was used for another payout.
    Conflict(String),
    /// 503 with `Retry-After`: the database was busy or unreachable; the request
    /// wrote nothing and may be sent again as it is.
    Unavailable(String),
    /// 500: a failure a retry will not fix. Logged with its cause; the answer
    /// says only that it failed.
    Internal,
}

impl From<JsonRejection> for Failure {
    fn from(rejection: JsonRejection) -> Self {
        // serde's message names the field: "amount_minor: invalid type: floating point …".
        Self::Malformed(rejection.body_text())
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        match error.kind() {
            ErrorKind::InvalidInput { field } => Self::Invalid {
                field: field.clone(),
                message: error.to_string(),
            },
            _ if error.is_transient() => Self::Unavailable(error.to_string()),
            _ => {
                tracing::error!(%error, "payout failed");
                Self::Internal
            }
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            Self::Malformed(message) => (
                StatusCode::BAD_REQUEST,
                json!({"error": "MALFORMED", "message": message}),
            ),
            Self::Invalid { field, message } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"error": "INVALID", "field": field, "message": message}),
            ),
            Self::Conflict(message) => (
                StatusCode::CONFLICT,
                json!({"error": "CONFLICT", "field": "payout_id", "message": message}),
            ),
            Self::Unavailable(message) => {
                let mut response = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(json!({"error": "UNAVAILABLE", "message": message})),
                )
                    .into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return response;
            }
            Self::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": "INTERNAL", "message": "the payout could not be written"}),
            ),
        };
        (status, Json(body)).into_response()
    }
}
