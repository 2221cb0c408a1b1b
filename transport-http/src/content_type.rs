//! Both receivers take one media type: the intake the one its `WebhookDecoder` names
//! (JSON for Formance), the Hop 2 subscriber JSON (what our publisher sends). A body
//! sent as anything else (a form, plain text, no type at all) is refused with 415
//! naming the header rather than parsed on a guess.

use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
use outbox_core::{Error, Result};

/// `Ok` for `expected` (`application/json`), with or without parameters
/// (`; charset=utf-8`), in any case.
pub(crate) fn require(headers: &HeaderMap, expected: &str) -> Result<()> {
    let value = headers
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not text)"));
    let media_type = value
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .unwrap_or_default();
    if media_type.eq_ignore_ascii_case(expected) {
        return Ok(());
    }
    Err(Error::invalid(
        "header content-type",
        match value {
            Some(value) => format!("{value:?} is not {expected}"),
            None => format!("missing: the body must be sent as {expected}"),
        },
    ))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const JSON: &str = "application/json";

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn json_with_or_without_parameters_passes_anything_else_is_named() {
        assert!(require(&with("application/json"), JSON).is_ok());
        assert!(require(&with("Application/JSON ; charset=utf-8"), JSON).is_ok());
        for refused in [
            "text/plain",
            "application/jsonp",
            "application/x-www-form-urlencoded",
        ] {
            let err = require(&with(refused), JSON).unwrap_err();
            assert_eq!(err.field(), Some("header content-type"), "{refused}");
        }
        let missing = require(&HeaderMap::new(), JSON).unwrap_err();
        assert!(missing.to_string().contains("missing"), "{missing}");
    }
}
