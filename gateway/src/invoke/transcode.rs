//! HTTP/JSON ⇄ gRPC transcoding lives in `portico-grpc-dynamic` (`transcode.rs`, with
//! [`MethodPlan`]); this is the gateway's side of it: its errors as the gateway's, with the
//! codes of docs/PROTOCOL.md ("The error envelope").

use crate::error::{Code, GatewayError};
use portico_grpc_dynamic::{TranscodeError, TranscodeErrorKind};

pub use portico_grpc_dynamic::MethodPlan;

impl From<TranscodeError> for GatewayError {
    /// A caller's mistake keeps its message (it names the field); a reply that cannot be
    /// written as JSON, or a binding that does not fit the method, is the operators' business
    /// (the message goes to the detail).
    fn from(e: TranscodeError) -> Self {
        match e.kind {
            TranscodeErrorKind::BadRequest => GatewayError::new(Code::BadRequest, e.message),
            TranscodeErrorKind::BadReply => GatewayError::upstream(
                Code::UpstreamError,
                "the backend's answer could not be read",
                e.message,
            ),
            TranscodeErrorKind::BadBinding => GatewayError::internal(e.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcode_errors_keep_their_blame_and_only_the_callers_message() {
        let cases = [
            (TranscodeErrorKind::BadRequest, 400, "BAD_REQUEST"),
            (TranscodeErrorKind::BadReply, 502, "UPSTREAM_ERROR"),
            (TranscodeErrorKind::BadBinding, 500, "INTERNAL"),
        ];
        for (kind, status, code) in cases {
            let e = GatewayError::from(TranscodeError::new(kind, "why"));
            assert_eq!((e.status(), e.code.as_str()), (status, code));
            if status == 400 {
                assert_eq!((e.message.as_str(), e.detail), ("why", None));
            } else {
                assert_eq!(e.log_detail(), Some("why"));
                assert!(!e.public_message().contains("why"));
            }
        }
    }
}
