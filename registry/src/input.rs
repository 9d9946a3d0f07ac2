//! Checking what a client sent: document names, JSON bodies (400 `BAD_REQUEST` when they are
//! not JSON, 422 `VALIDATION_FAILED` naming the field when they do not fit their type) and
//! query-string flags. Used by the routes ([`crate::api`]) and by the logic below them
//! ([`crate::sandbox_call`]).

use crate::error::{ApiError, ApiResult, Detail};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;

/// A document name (API id, cluster, app key): 1–128 of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn check_name(what: &str, name: &str) -> ApiResult<()> {
    let ok = (1..=128).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "{what} {name:?}: must be 1-128 characters of A-Z a-z 0-9 . _ -"
        )))
    }
}

/// Parses a JSON body: 400 `BAD_REQUEST` if it is not JSON, 422 naming the field if it does
/// not fit `T`. Returns the typed value and the JSON as sent (unknown fields kept).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> ApiResult<(T, Value)> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("{what}: not valid JSON: {e}")))?;
    let typed = typed_from(&value, what)?;
    Ok((typed, value))
}

/// As [`parse_json`], and 400 unless the body is a JSON object (a document).
pub fn parse_object<T: DeserializeOwned>(bytes: &[u8], what: &str) -> ApiResult<(T, Value)> {
    let (typed, value) = parse_json::<T>(bytes, what)?;
    if !value.is_object() {
        return Err(ApiError::bad_request(format!(
            "{what}: must be a JSON object"
        )));
    }
    Ok((typed, value))
}

/// Checks that `value` fits `T` (422 naming the field otherwise).
pub fn typed_from<T: DeserializeOwned>(value: &Value, what: &str) -> ApiResult<T> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { None } else { Some(field) };
        let reason = e.inner().to_string();
        let message = match &field {
            Some(f) => format!("{what}: {f}: {reason}"),
            None => format!("{what}: {reason}"),
        };
        ApiError::invalid(
            message,
            vec![Detail {
                path: None,
                field,
                reason,
            }],
        )
    })
}

/// An error reading a request body (`what`: `body`, `multipart`, ...) with the status the
/// reader gave: 413 `BODY_TOO_LARGE` over the limit (`server::MAX_BODY_BYTES`), 400
/// `BAD_REQUEST` otherwise.
pub fn body_error(what: &str, status: StatusCode, e: impl std::fmt::Display) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(format!("{what}: the request body is too large: {e}"))
    } else {
        ApiError::bad_request(format!("{what}: {e}"))
    }
}

/// A query-string flag (`?force`, `?force=true`, `?force=1`).
pub fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query
        .get(name)
        .is_some_and(|v| v.is_empty() || v == "true" || v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn names() {
        assert!(check_name("id", "order.get").is_ok());
        assert!(check_name("id", "..").is_err());
        assert!(check_name("id", "a/b").is_err());
        assert!(check_name("id", "").is_err());
        assert!(check_name("id", &"a".repeat(128)).is_ok());
        assert!(check_name("id", &"a".repeat(129)).is_err());
    }

    #[derive(Debug, Deserialize)]
    struct Limit {
        limit: u32,
    }

    #[test]
    fn bodies_name_the_field_at_fault() {
        let e = parse_json::<Limit>(b"{not json", "thing").unwrap_err();
        assert_eq!(e.code, "BAD_REQUEST");
        let e = parse_json::<Limit>(br#"{"limit":"x"}"#, "thing").unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert_eq!(e.details[0].field.as_deref(), Some("limit"));
        assert!(e.message.starts_with("thing: limit: "), "{}", e.message);
        let (typed, raw) = parse_json::<Limit>(br#"{"limit":3,"extra":1}"#, "thing").unwrap();
        assert_eq!(typed.limit, 3);
        assert_eq!(raw["extra"], 1, "unknown fields are kept in the JSON");
        let e = parse_object::<Value>(b"[1]", "thing").unwrap_err();
        assert_eq!(e.code, "BAD_REQUEST");
    }

    #[test]
    fn flags() {
        let q: HashMap<String, String> = [("a", ""), ("b", "true"), ("c", "1"), ("d", "no")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert!(flag(&q, "a") && flag(&q, "b") && flag(&q, "c"));
        assert!(!flag(&q, "d") && !flag(&q, "e"));
    }
}
