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
    /// What is wrong.
    pub reason: String,
}

/// A failed request.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The envelope's `code` (`CONFLICT`, `VALIDATION_FAILED`, ...).
    pub code: &'static str,
    /// Text for a person.
    pub message: String,
    /// The problems found in a document, if any.
    pub details: Vec<Detail>,
}

/// The rendered error, carried as a response extension until the middleware adds the request id.
#[derive(Debug, Clone)]
pub struct ErrorBody {
    /// As [`ApiError::code`].
    pub code: &'static str,
    /// As [`ApiError::message`].
    pub message: String,
    /// As [`ApiError::details`].
    pub details: Vec<Detail>,
}

impl ApiError {
    /// An error with its status, envelope code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// The same error with `details`.
    pub fn with_details(mut self, details: Vec<Detail>) -> ApiError {
        self.details = details;
        self
    }

    /// 400 `BAD_REQUEST`: unparseable JSON or a bad parameter.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }

    /// 401 `UNAUTHENTICATED`: a missing or wrong admin token.
    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// 409 `CONFLICT`: a version mismatch, or the document already exists.
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

    /// 413 `BODY_TOO_LARGE`.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_LARGE", message)
    }

    /// 503 `ZOOKEEPER_UNAVAILABLE`.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ZOOKEEPER_UNAVAILABLE",
            message,
        )
    }

    /// 502 `UPSTREAM_ERROR`: a gateway or backend the registry called failed.
    pub fn bad_gateway(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_GATEWAY, "UPSTREAM_ERROR", message)
    }

    /// 500 `INTERNAL`.
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
            // The registry's credentials are missing or not those the tree's ACLs name
            // (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs").
            zk::Error::NoAuth | zk::Error::AuthFailed => ApiError::unavailable(format!(
                "ZooKeeper refused the registry access to {what} ({err}): check its credentials \
                 (--zk-auth-file or PORTICO_ZK_AUTH, user portico-registry)"
            )),
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
    /// The error code.
    pub code: &'a str,
    /// The message.
    pub message: &'a str,
    /// The request's id.
    pub request_id: &'a str,
    /// The details (left out when empty).
    #[serde(skip_serializing_if = "<[Detail]>::is_empty")]
    pub details: &'a [Detail],
}

/// The result of everything that can fail a request.
pub type ApiResult<T> = Result<T, ApiError>;
