//! The one error type of the data plane. Every refusal or failure on the request path is a
//! [`GatewayError`]; the rescue point in `proxy.rs` turns it into the error envelope of
//! docs/PROTOCOL.md ("The error envelope"): `{"code", "message", "request_id"}`.
//!
//! The envelope's `message` is for the merchant; what only operators may see (a backend's
//! address, a cluster's name, a transport error's text) goes in [`GatewayError::detail`],
//! which the access log shows under the request id (docs/SECURITY.md, "No internals in
//! answers"). Failures of the backend ([`GatewayError::upstream`]) take a fixed message,
//! and an [`Code::Internal`] error always answers `internal error`, whatever was written
//! into its message.

use std::fmt;

/// Which side a failure came from (as Pingora's `ErrorSource`). The invoke tier records a
/// call's breaker outcome from it: only [`Side::Upstream`] counts as a backend failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The caller sent something the gateway refuses (4xx).
    Client,
    /// The gateway itself refused or could not serve (a limit, a switch, an open breaker).
    Gateway,
    /// The backend answered, with an error status of its own (a gRPC status such as
    /// `NOT_FOUND` or `FAILED_PRECONDITION`): the call itself worked.
    Backend,
    /// The backend failed: it timed out, could not be reached, had no usable endpoint, or
    /// answered a gRPC `UNAVAILABLE`, `INTERNAL`, `UNKNOWN` or `DEADLINE_EXCEEDED`.
    Upstream,
}

/// The error codes of the v1 contract (docs/PROTOCOL.md, "The error envelope"), plus gRPC
/// status names passed through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    BadRequest,
    SignatureMissing,
    SignatureInvalid,
    SignatureExpired,
    NonceReplayed,
    AppUnknown,
    IpBlocked,
    AppForbidden,
    AppDisabled,
    ApiNotFound,
    MethodNotAllowed,
    BodyTooLarge,
    /// The request target (path and query) is too long (docs/PROTOCOL.md, "Limits").
    UriTooLong,
    /// The merchant did not read the response in time (`--write-timeout-ms`); seen in the
    /// access log and metrics only, as the merchant is not reading.
    WriteTimeout,
    HeaderTooLarge,
    RateLimited,
    ApiDegraded,
    CircuitOpen,
    BulkheadFull,
    /// The listener is at its connection limit (`--max-connections`).
    ConnectionLimit,
    NoHealthyUpstream,
    /// A sleeping cluster is being woken and did not come up within `sleep.hold_ms`.
    BackendLoading,
    UpstreamError,
    UpstreamTimeout,
    Internal,
    /// The internal publishing API (docs/operations/notifications.md, "Notifications"): a missing or wrong
    /// publisher token.
    Unauthorized,
    /// A notification names a topic the configuration does not have.
    TopicNotFound,
    /// Notifications cannot be served: no publisher token configured, or the store (Redis)
    /// is unreachable.
    NotifyUnavailable,
    /// A gRPC backend's non-OK status, by name (`NOT_FOUND`), with its mapped HTTP status.
    Grpc {
        name: &'static str,
        http_status: u16,
    },
}

impl Code {
    /// The HTTP status this code answers with.
    pub fn status(&self) -> u16 {
        match self {
            Code::BadRequest => 400,
            Code::SignatureMissing
            | Code::SignatureInvalid
            | Code::SignatureExpired
            | Code::NonceReplayed
            | Code::AppUnknown => 401,
            Code::IpBlocked | Code::AppForbidden | Code::AppDisabled => 403,
            Code::ApiNotFound => 404,
            Code::MethodNotAllowed => 405,
            Code::BodyTooLarge => 413,
            Code::UriTooLong => 414,
            Code::WriteTimeout => 408,
            Code::HeaderTooLarge => 431,
            Code::RateLimited => 429,
            Code::ApiDegraded
            | Code::CircuitOpen
            | Code::BulkheadFull
            | Code::ConnectionLimit
            | Code::NoHealthyUpstream
            | Code::BackendLoading => 503,
            Code::UpstreamError => 502,
            Code::UpstreamTimeout => 504,
            Code::Internal => 500,
            Code::Unauthorized => 401,
            Code::TopicNotFound => 404,
            Code::NotifyUnavailable => 503,
            Code::Grpc { http_status, .. } => *http_status,
        }
    }

    /// The code string of the envelope.
    pub fn as_str(&self) -> &'static str {
        match self {
            Code::BadRequest => "BAD_REQUEST",
            Code::SignatureMissing => "SIGNATURE_MISSING",
            Code::SignatureInvalid => "SIGNATURE_INVALID",
            Code::SignatureExpired => "SIGNATURE_EXPIRED",
            Code::NonceReplayed => "NONCE_REPLAYED",
            Code::AppUnknown => "APP_UNKNOWN",
            Code::IpBlocked => "IP_BLOCKED",
            Code::AppForbidden => "APP_FORBIDDEN",
            Code::AppDisabled => "APP_DISABLED",
            Code::ApiNotFound => "API_NOT_FOUND",
            Code::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Code::BodyTooLarge => "BODY_TOO_LARGE",
            Code::UriTooLong => "URI_TOO_LONG",
            Code::WriteTimeout => "WRITE_TIMEOUT",
            Code::HeaderTooLarge => "HEADER_TOO_LARGE",
            Code::RateLimited => "RATE_LIMITED",
            Code::ApiDegraded => "API_DEGRADED",
            Code::CircuitOpen => "CIRCUIT_OPEN",
            Code::BulkheadFull => "BULKHEAD_FULL",
            Code::ConnectionLimit => "CONNECTION_LIMIT",
            Code::NoHealthyUpstream => "NO_HEALTHY_UPSTREAM",
            Code::BackendLoading => "BACKEND_LOADING",
            Code::UpstreamError => "UPSTREAM_ERROR",
            Code::UpstreamTimeout => "UPSTREAM_TIMEOUT",
            Code::Internal => "INTERNAL",
            Code::Unauthorized => "UNAUTHORIZED",
            Code::TopicNotFound => "TOPIC_NOT_FOUND",
            Code::NotifyUnavailable => "NOTIFY_UNAVAILABLE",
            Code::Grpc { name, .. } => name,
        }
    }

    /// The side a code is blamed on (see [`Side`]).
    pub fn side(&self) -> Side {
        match self {
            Code::UpstreamError | Code::UpstreamTimeout | Code::NoHealthyUpstream => Side::Upstream,
            Code::Grpc { name, .. } => match *name {
                "UNAVAILABLE" | "INTERNAL" | "UNKNOWN" | "DEADLINE_EXCEEDED" => Side::Upstream,
                _ => Side::Backend,
            },
            _ if (400..500).contains(&self.status()) => Side::Client,
            _ => Side::Gateway,
        }
    }
}

/// A refusal or failure on the request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub code: Code,
    /// For the merchant: the envelope's `message` (but see [`GatewayError::public_message`]).
    pub message: String,
    /// Seconds for `Retry-After` (rate limits, open breakers).
    pub retry_after: Option<u64>,
    /// For operators only: the access log's `detail` (addresses, cluster names, transport
    /// errors). Never written into an answer.
    pub detail: Option<String>,
}

/// The envelope message of an internal error.
const INTERNAL_MESSAGE: &str = "internal error";

impl GatewayError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        GatewayError {
            code,
            message: message.into(),
            retry_after: None,
            detail: None,
        }
    }

    /// A failure on the backend's side (or the gateway's own, for [`Code::Internal`]): the
    /// merchant is told `public`, a fixed text that names no address, cluster or transport
    /// error ("the backend did not answer in time"); `detail` is for the access log.
    pub fn upstream(code: Code, public: &'static str, detail: impl Into<String>) -> Self {
        GatewayError::new(code, public).with_detail(detail)
    }

    /// An internal error: the merchant is told `internal error`; `detail` is for the log.
    pub fn internal(detail: impl Into<String>) -> Self {
        GatewayError::upstream(Code::Internal, INTERNAL_MESSAGE, detail)
    }

    /// Sets the operators' detail (see [`GatewayError::detail`]).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The envelope's message: `message`, except that an internal error always says
    /// `internal error` (its message is an operator's business).
    pub fn public_message(&self) -> &str {
        match self.code {
            Code::Internal => INTERNAL_MESSAGE,
            _ => &self.message,
        }
    }

    /// What the access log's `detail` shows: the detail, or the message an internal error
    /// keeps from the merchant.
    pub fn log_detail(&self) -> Option<&str> {
        match (&self.detail, &self.code) {
            (Some(d), _) => Some(d),
            (None, Code::Internal) if self.message != INTERNAL_MESSAGE => Some(&self.message),
            _ => None,
        }
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Code::BadRequest, message)
    }

    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// The error envelope's body (docs/PROTOCOL.md, "The error envelope").
    pub fn envelope(&self, request_id: &str) -> Vec<u8> {
        let body = serde_json::json!({
            "code": self.code.as_str(),
            "message": self.public_message(),
            "request_id": request_id,
        });
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status(),
            self.code.as_str(),
            self.message
        )
    }
}

impl std::error::Error for GatewayError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_contract() {
        assert_eq!(Code::NonceReplayed.status(), 401);
        assert_eq!(Code::IpBlocked.status(), 403);
        assert_eq!(Code::RateLimited.status(), 429);
        assert_eq!(Code::BulkheadFull.status(), 503);
        assert_eq!(Code::UpstreamTimeout.status(), 504);
        assert_eq!(
            Code::Grpc {
                name: "NOT_FOUND",
                http_status: 404
            }
            .as_str(),
            "NOT_FOUND"
        );
    }

    #[test]
    fn sides_decide_what_the_breaker_counts() {
        let grpc = |name, http_status| Code::Grpc { name, http_status };
        for upstream in [
            Code::UpstreamError,
            Code::UpstreamTimeout,
            Code::NoHealthyUpstream,
            grpc("UNAVAILABLE", 503),
            grpc("INTERNAL", 500),
            grpc("UNKNOWN", 500),
            grpc("DEADLINE_EXCEEDED", 504),
        ] {
            assert_eq!(upstream.side(), Side::Upstream, "{upstream:?}");
        }
        for answered in [
            grpc("NOT_FOUND", 404),
            grpc("INVALID_ARGUMENT", 400),
            grpc("FAILED_PRECONDITION", 500),
            grpc("UNIMPLEMENTED", 501),
            grpc("RESOURCE_EXHAUSTED", 429),
        ] {
            assert_eq!(answered.side(), Side::Backend, "{answered:?}");
        }
        for client in [Code::BadRequest, Code::SignatureInvalid, Code::BodyTooLarge] {
            assert_eq!(client.side(), Side::Client, "{client:?}");
        }
        // The gateway's own refusals: a rate limit is the caller's doing, the rest are not.
        assert_eq!(Code::RateLimited.side(), Side::Client);
        for gateway in [
            Code::CircuitOpen,
            Code::BulkheadFull,
            Code::ApiDegraded,
            Code::Internal,
        ] {
            assert_eq!(gateway.side(), Side::Gateway, "{gateway:?}");
        }
    }

    #[test]
    fn details_stay_out_of_the_envelope() {
        let e = GatewayError::upstream(
            Code::UpstreamTimeout,
            "the backend did not answer in time",
            "upstream 127.0.0.1:18081 did not answer within 800 ms",
        );
        let body = String::from_utf8(e.envelope("r")).unwrap();
        assert!(
            body.contains("the backend did not answer in time"),
            "{body}"
        );
        assert!(
            !body.contains("127.0.0.1") && !body.contains("18081"),
            "{body}"
        );
        assert_eq!(
            e.log_detail(),
            Some("upstream 127.0.0.1:18081 did not answer within 800 ms")
        );
        // An internal error never tells its message, which goes to the log instead.
        let e = GatewayError::new(Code::Internal, "binding 3 of api x out of range");
        let v: serde_json::Value = serde_json::from_slice(&e.envelope("r")).unwrap();
        assert_eq!(v["message"], "internal error");
        assert_eq!(e.log_detail(), Some("binding 3 of api x out of range"));
        assert_eq!(
            GatewayError::internal("x").public_message(),
            "internal error"
        );
        // Other errors tell their message and log nothing more.
        let e = GatewayError::bad_request("bad path variable");
        assert_eq!(
            (e.public_message(), e.log_detail()),
            ("bad path variable", None)
        );
    }

    #[test]
    fn envelope_is_json() {
        let e = GatewayError::new(Code::ApiNotFound, "no API for GET /x");
        let v: serde_json::Value = serde_json::from_slice(&e.envelope("rid-1")).unwrap();
        assert_eq!(v["code"], "API_NOT_FOUND");
        assert_eq!(v["request_id"], "rid-1");
    }
}
