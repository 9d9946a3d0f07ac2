//! HTTP/JSON ⇄ gRPC transcoding lives in `portico-grpc-dynamic` (`transcode.rs`, with
//! [`MethodPlan`]); this is the gateway's side of it: its errors as the gateway's, with the
//! codes of docs/PROTOCOL.md ("The error envelope").

use crate::error::{Code, GatewayError};
use portico_grpc_dynamic::{TranscodeError, TranscodeErrorKind};

pub use portico_grpc_dynamic::MethodPlan;

impl From<TranscodeError> for GatewayError {
    fn from(e: TranscodeError) -> Self {
        let code = match e.kind {
            TranscodeErrorKind::BadRequest => Code::BadRequest,
            TranscodeErrorKind::BadReply => Code::UpstreamError,
            TranscodeErrorKind::BadBinding => Code::Internal,
        };
        GatewayError::new(code, e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcode_errors_keep_their_message_and_blame() {
        let cases = [
            (TranscodeErrorKind::BadRequest, 400, "BAD_REQUEST"),
            (TranscodeErrorKind::BadReply, 502, "UPSTREAM_ERROR"),
            (TranscodeErrorKind::BadBinding, 500, "INTERNAL"),
        ];
        for (kind, status, code) in cases {
            let e = GatewayError::from(TranscodeError::new(kind, "why"));
            assert_eq!((e.status(), e.code.as_str()), (status, code));
            assert_eq!(e.message, "why");
        }
    }
}
