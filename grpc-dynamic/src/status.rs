//! gRPC status codes by name, and the HTTP status each one answers with when a call is
//! answered over HTTP (docs/PROTOCOL.md, "The error envelope").

use tonic::Code;

/// The name (`NOT_FOUND`) and HTTP status of a gRPC status code, as grpc-gateway maps them.
pub fn code_name_and_status(code: Code) -> (&'static str, u16) {
    match code {
        Code::Ok => ("OK", 200),
        Code::Cancelled => ("CANCELLED", 500),
        Code::Unknown => ("UNKNOWN", 500),
        Code::InvalidArgument => ("INVALID_ARGUMENT", 400),
        Code::DeadlineExceeded => ("DEADLINE_EXCEEDED", 504),
        Code::NotFound => ("NOT_FOUND", 404),
        Code::AlreadyExists => ("ALREADY_EXISTS", 409),
        Code::PermissionDenied => ("PERMISSION_DENIED", 403),
        Code::ResourceExhausted => ("RESOURCE_EXHAUSTED", 429),
        Code::FailedPrecondition => ("FAILED_PRECONDITION", 500),
        Code::Aborted => ("ABORTED", 409),
        Code::OutOfRange => ("OUT_OF_RANGE", 500),
        Code::Unimplemented => ("UNIMPLEMENTED", 501),
        Code::Internal => ("INTERNAL", 500),
        Code::Unavailable => ("UNAVAILABLE", 503),
        Code::DataLoss => ("DATA_LOSS", 500),
        Code::Unauthenticated => ("UNAUTHENTICATED", 401),
    }
}

/// The code of a status name as [`code_name_and_status`] writes it (`NOT_FOUND`; exact).
pub fn code_by_name(name: &str) -> Option<Code> {
    (0..=16)
        .map(Code::from_i32)
        .find(|c| code_name_and_status(*c).0 == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_as_grpc_gateway_does() {
        use tonic::Code as C;
        let cases = [
            (C::NotFound, "NOT_FOUND", 404),
            (C::InvalidArgument, "INVALID_ARGUMENT", 400),
            (C::Unauthenticated, "UNAUTHENTICATED", 401),
            (C::PermissionDenied, "PERMISSION_DENIED", 403),
            (C::ResourceExhausted, "RESOURCE_EXHAUSTED", 429),
            (C::Unavailable, "UNAVAILABLE", 503),
            (C::DeadlineExceeded, "DEADLINE_EXCEEDED", 504),
            (C::Unimplemented, "UNIMPLEMENTED", 501),
            (C::AlreadyExists, "ALREADY_EXISTS", 409),
            (C::Aborted, "ABORTED", 409),
            (C::Internal, "INTERNAL", 500),
            (C::FailedPrecondition, "FAILED_PRECONDITION", 500),
            (C::DataLoss, "DATA_LOSS", 500),
        ];
        for (code, name, http) in cases {
            assert_eq!(code_name_and_status(code), (name, http));
        }
    }

    #[test]
    fn names_round_trip() {
        for n in 0..=16 {
            let code = Code::from_i32(n);
            assert_eq!(code_by_name(code_name_and_status(code).0), Some(code));
        }
        assert_eq!(code_by_name("not_found"), None);
        assert_eq!(code_by_name("NOPE"), None);
    }
}
