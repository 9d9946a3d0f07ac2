//! The per-request context a handler extracts ([`Ctx`]): the request id, the operator, and the
//! write precondition the request carries (`If-Match` / `If-None-Match`).

use crate::error::{ApiError, ApiResult};
use crate::state::RequestId;
use crate::zk_store::Precondition;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};

/// Who made a change, for the audit log and switches (`X-Portico-Operator: sre-alice`).
pub const OPERATOR_HEADER: &str = "x-portico-operator";

/// Per-request context: request id, operator and headers.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The request id (from the server's middleware).
    pub request_id: String,
    /// `X-Portico-Operator`, or `None`.
    pub operator: Option<String>,
    /// The request's headers.
    pub headers: HeaderMap,
}

impl Ctx {
    /// Who is acting: the operator header, else `fallback` (e.g. a body's `updated_by`), else
    /// `admin`.
    pub fn actor(&self, fallback: Option<&str>) -> String {
        self.operator
            .clone()
            .or_else(|| fallback.filter(|s| !s.is_empty()).map(str::to_owned))
            .unwrap_or_else(|| "admin".to_owned())
    }

    /// The write precondition from `If-Match` / `If-None-Match`, or `expected` from a body.
    pub fn precondition(&self, expected: Option<i64>) -> ApiResult<Precondition> {
        if let Some(v) = self.headers.get(header::IF_NONE_MATCH) {
            if v.to_str().map(str::trim).ok() == Some("*") {
                return Ok(Precondition::Absent);
            }
            return Err(ApiError::bad_request(
                "If-None-Match: only `*` is supported",
            ));
        }
        if let Some(v) = self.headers.get(header::IF_MATCH) {
            let raw = v
                .to_str()
                .map_err(|_| ApiError::bad_request("If-Match: not ASCII"))?
                .trim();
            if raw == "*" {
                return Ok(Precondition::Any);
            }
            let unquoted = raw.trim_start_matches("W/").trim_matches('"');
            return unquoted
                .parse::<i32>()
                .map(Precondition::Version)
                .map_err(|_| {
                    ApiError::bad_request(format!(
                        "If-Match: {raw:?} is not a version (send the ETag you read, e.g. \"3\")"
                    ))
                });
        }
        match expected {
            Some(v) => i32::try_from(v)
                .map(Precondition::Version)
                .map_err(|_| ApiError::bad_request("expected_version: out of range")),
            None => Ok(Precondition::Any),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Ctx {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let request_id = parts
            .extensions
            .get::<RequestId>()
            .map(|r| r.0.clone())
            .unwrap_or_default();
        let operator = parts
            .headers
            .get(OPERATOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 128)
            .map(str::to_owned);
        Ok(Ctx {
            request_id,
            operator,
            headers: parts.headers.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(headers: &[(&'static str, &str)]) -> Ctx {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        Ctx {
            request_id: "r".into(),
            operator: None,
            headers: map,
        }
    }

    #[test]
    fn preconditions_from_headers_then_body() {
        assert_eq!(ctx(&[]).precondition(None).unwrap(), Precondition::Any);
        assert_eq!(
            ctx(&[]).precondition(Some(4)).unwrap(),
            Precondition::Version(4)
        );
        assert_eq!(
            ctx(&[("if-match", "\"3\"")]).precondition(Some(4)).unwrap(),
            Precondition::Version(3),
            "the header wins over the body"
        );
        assert_eq!(
            ctx(&[("if-match", "W/\"7\"")]).precondition(None).unwrap(),
            Precondition::Version(7)
        );
        assert_eq!(
            ctx(&[("if-match", "*")]).precondition(None).unwrap(),
            Precondition::Any
        );
        assert_eq!(
            ctx(&[("if-none-match", "*")]).precondition(None).unwrap(),
            Precondition::Absent
        );
        assert!(ctx(&[("if-none-match", "\"3\"")])
            .precondition(None)
            .is_err());
        assert!(ctx(&[("if-match", "\"x\"")]).precondition(None).is_err());
        assert!(ctx(&[]).precondition(Some(i64::MAX)).is_err());
    }

    #[test]
    fn actor_prefers_the_operator_header() {
        let mut c = ctx(&[]);
        assert_eq!(c.actor(None), "admin");
        assert_eq!(c.actor(Some("")), "admin");
        assert_eq!(c.actor(Some("bob")), "bob");
        c.operator = Some("alice".into());
        assert_eq!(c.actor(Some("bob")), "alice");
    }
}
