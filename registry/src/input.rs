//! Checking what a client sent: document names, JSON bodies (400 `BAD_REQUEST` when they are
//! not JSON, 422 `VALIDATION_FAILED` naming the field when they do not fit their type) and
//! query-string flags. Used by the routes ([`crate::api`]) and by the logic below them
//! ([`crate::sandbox_call`]).

use crate::error::{ApiError, ApiResult, Detail};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
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

/// As [`parse_object`] for a v1 document: also 422 where the body has an array and the
/// document an object (serde would read `"fallback": []` as a fallback of defaults; the
/// registry stores what was sent, so it must be what the document says).
pub fn parse_document<T: DeserializeOwned + Serialize>(
    bytes: &[u8],
    what: &str,
) -> ApiResult<(T, Value)> {
    let (typed, value) = parse_object::<T>(bytes, what)?;
    check_shape(&value, &typed, what)?;
    Ok((typed, value))
}

/// As [`typed_from`] for a v1 document, with the check of [`parse_document`].
pub fn typed_document<T: DeserializeOwned + Serialize>(value: &Value, what: &str) -> ApiResult<T> {
    let typed = typed_from::<T>(value, what)?;
    check_shape(value, &typed, what)?;
    Ok(typed)
}

/// 422 naming the field where `raw` has an array and `typed` (read from it) an object.
fn check_shape<T: Serialize>(raw: &Value, typed: &T, what: &str) -> ApiResult<()> {
    fn walk(raw: &Value, typed: &Value, field: &str) -> Option<String> {
        match (raw, typed) {
            (Value::Array(_), Value::Object(_)) => Some(field.to_owned()),
            (Value::Object(r), Value::Object(t)) => t.iter().find_map(|(k, tv)| {
                let sub = if field.is_empty() {
                    k.clone()
                } else {
                    format!("{field}.{k}")
                };
                r.get(k).and_then(|rv| walk(rv, tv, &sub))
            }),
            (Value::Array(r), Value::Array(t)) if r.len() == t.len() => r
                .iter()
                .zip(t)
                .enumerate()
                .find_map(|(i, (rv, tv))| walk(rv, tv, &format!("{field}[{i}]"))),
            _ => None,
        }
    }
    let typed = serde_json::to_value(typed).map_err(|e| ApiError::internal(e.to_string()))?;
    match walk(raw, &typed, "") {
        None => Ok(()),
        Some(field) => {
            let reason = "must be an object, not an array".to_owned();
            Err(ApiError::invalid(
                format!("{what}: {field}: {reason}"),
                vec![Detail {
                    path: None,
                    field: Some(field),
                    reason,
                }],
            ))
        }
    }
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

/// A `?limit`-like count: `default` when absent, clamped to `1..=max`; `BAD_REQUEST` naming
/// it when it is not a number.
pub fn count(
    query: &HashMap<String, String>,
    name: &str,
    default: usize,
    max: usize,
) -> ApiResult<usize> {
    match query.get(name) {
        Some(v) => Ok(v
            .parse::<usize>()
            .map_err(|_| ApiError::bad_request(format!("{name}: {v:?} is not a number")))?
            .clamp(1, max)),
        None => Ok(default),
    }
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

    /// Found by schemathesis: `PUT /switches/{id}` stored `"fallback": []` (serde reads a
    /// struct from an array) and served it back against its own schema.
    #[test]
    fn documents_take_objects_where_they_have_objects() {
        use portico_control::v1;
        let e = parse_document::<v1::Switch>(br#"{"degraded": true, "fallback": []}"#, "switch")
            .unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert_eq!(
            e.details[0].field.as_deref(),
            Some("fallback"),
            "{}",
            e.message
        );
        let e = parse_document::<v1::Cluster>(
            br#"{"protocol": "http", "endpoints": [{"addr": "a:1"}, ["b:1", 1]]}"#,
            "cluster",
        )
        .unwrap_err();
        assert_eq!(e.details[0].field.as_deref(), Some("endpoints[1]"));
        let ok = parse_document::<v1::Switch>(
            br#"{"degraded": true, "fallback": {"status": 503}}"#,
            "switch",
        );
        assert!(ok.is_ok());
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

    #[test]
    fn counts() {
        let q: HashMap<String, String> = [("big", "9999"), ("zero", "0"), ("x", "ten")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(count(&q, "none", 50, 500).unwrap(), 50);
        assert_eq!(count(&q, "big", 50, 500).unwrap(), 500);
        assert_eq!(count(&q, "zero", 50, 500).unwrap(), 1);
        let e = count(&q, "x", 50, 500).unwrap_err();
        assert_eq!(e.message, "x: \"ten\" is not a number");
    }
}
