//! The one error type of this crate: what went wrong transcoding a call, and whose fault it
//! is, so the gateway can answer it (docs/PROTOCOL.md, "The error envelope").

use std::fmt;

/// Whose fault a [`TranscodeError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TranscodeErrorKind {
    /// The caller's request does not fit the method's input message (the gateway answers
    /// `400 BAD_REQUEST`).
    BadRequest,
    /// The backend's reply cannot be written as JSON (`502 UPSTREAM_ERROR`).
    BadReply,
    /// The API's bindings do not fit its method: a `body` or `response_body` naming no field
    /// when the plan is made, or a binding or path variable the plan does not know at call
    /// time (`500 INTERNAL`).
    BadBinding,
}

/// A transcoding failure: its kind and a message for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscodeError {
    pub kind: TranscodeErrorKind,
    pub message: String,
}

impl TranscodeError {
    pub fn new(kind: TranscodeErrorKind, message: impl Into<String>) -> Self {
        TranscodeError {
            kind,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(TranscodeErrorKind::BadRequest, message)
    }

    pub fn bad_binding(message: impl Into<String>) -> Self {
        Self::new(TranscodeErrorKind::BadBinding, message)
    }
}

impl fmt::Display for TranscodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TranscodeError {}
