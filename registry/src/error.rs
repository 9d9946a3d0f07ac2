//! The registry's one error type and its JSON envelope
//! `{"code", "message", "request_id"[, "details"]}` (the gateway's: docs/PROTOCOL.md, "The
//! error envelope").
//!
//! Handlers return [`ApiError`]; it becomes a response carrying an [`ErrorBody`] extension,
//! which the request middleware ([`crate::server`]) renders with the request id.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use zookeeper_client as zk;

/// One problem found in a document: where (a tree path and/or a field path) and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detail {
    /// The tree path of the document, e.g. `apis/order.get` (absent for request bodies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The field, e.g. `backend.timeout_ms` (absent when the whole document is at fault).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub reason: String,
}

/// A failed request.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Vec<Detail>,
}

/// The rendered error, carried as a response extension until the middleware adds the request id.
#[derive(Debug, Clone)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
    pub details: Vec<Detail>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    pub fn with_details(mut self, details: Vec<Detail>) -> ApiError {
        self.details = details;
        self
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "CONFLICT", message)
    }

    /// 422 `VALIDATION_FAILED`: the document is well-formed JSON but not acceptable.
    pub fn invalid(message: impl Into<String>, details: Vec<Detail>) -> ApiError {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_FAILED",
            message,
        )
        .with_details(details)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_LARGE", message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ZOOKEEPER_UNAVAILABLE",
            message,
        )
    }

    pub fn bad_gateway(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_GATEWAY, "UPSTREAM_ERROR", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
    }

    /// Maps a ZooKeeper failure on `what` (a tree path) to the response a client should see.
    pub fn from_zk(err: zk::Error, what: &str) -> ApiError {
        match err {
            zk::Error::NoNode => ApiError::not_found(format!("{what} does not exist")),
            zk::Error::NodeExists => ApiError::conflict(format!("{what} already exists")),
            zk::Error::BadVersion => ApiError::conflict(format!(
                "{what} was changed by someone else (version mismatch): read it again and retry"
            )),
            zk::Error::NotEmpty => ApiError::conflict(format!("{what} has children")),
            zk::Error::ConnectionLoss
            | zk::Error::SessionExpired
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::ClientClosed
            | zk::Error::SessionMoved
            | zk::Error::Throttled => {
                ApiError::unavailable(format!("ZooKeeper is unavailable ({err}); retry later"))
            }
            other => ApiError::internal(format!("ZooKeeper error on {what}: {other}")),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        response.extensions_mut().insert(ErrorBody {
            code: self.code,
            message: self.message,
            details: self.details,
        });
        response
    }
}

/// The JSON envelope as sent.
#[derive(Debug, Serialize)]
pub struct Envelope<'a> {
    pub code: &'a str,
    pub message: &'a str,
    pub request_id: &'a str,
    #[serde(skip_serializing_if = "<[Detail]>::is_empty")]
    pub details: &'a [Detail],
}

pub type ApiResult<T> = Result<T, ApiError>;
