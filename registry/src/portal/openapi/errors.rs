//! The errors a merchant can meet (docs/PROTOCOL.md, "The error envelope"; the portal's
//! Errors page): the gateway's own codes with what to do about each, a gRPC backend's
//! statuses as the gateway answers them, and the document's shared error responses and
//! `Error` schema.

use serde_json::{json, Map, Value};

/// The gateway's own error codes (docs/PROTOCOL.md, "The error envelope"): status, code,
/// meaning.
pub const ERROR_CODES: [(u16, &str, &str); 22] = [
    (
        400,
        "BAD_REQUEST",
        "unparseable JSON, a wrong field type, a bad path variable, a . or .. path segment, a request over a limit",
    ),
    (
        401,
        "SIGNATURE_MISSING",
        "a signature header is missing",
    ),
    (
        401,
        "SIGNATURE_INVALID",
        "the signature does not match (or a header is malformed)",
    ),
    (
        401,
        "SIGNATURE_EXPIRED",
        "the timestamp is more than 300 s from the gateway's clock",
    ),
    (
        401,
        "NONCE_REPLAYED",
        "this nonce was already used by this app within the window",
    ),
    (
        401,
        "APP_UNKNOWN",
        "reserved; no longer sent (an unknown app key answers SIGNATURE_INVALID)",
    ),
    (
        403,
        "IP_BLOCKED",
        "the caller's address is denied (or not allowed)",
    ),
    (
        403,
        "APP_FORBIDDEN",
        "the app is not granted this API",
    ),
    (
        403,
        "APP_DISABLED",
        "the app is disabled",
    ),
    (
        404,
        "API_NOT_FOUND",
        "no API at this method and path (or no such method= in the router style)",
    ),
    (
        413,
        "BODY_TOO_LARGE",
        "the body is over the limit (1 MiB unless the API sets another)",
    ),
    (
        414,
        "URI_TOO_LONG",
        "the request target (path and query) is over 8 KiB",
    ),
    (
        429,
        "RATE_LIMITED",
        "a rate limit was hit; retry after Retry-After seconds",
    ),
    (
        503,
        "API_DEGRADED",
        "the API is switched off for now (some degraded APIs answer a fallback instead)",
    ),
    (
        503,
        "CIRCUIT_OPEN",
        "the backend is failing; calls are refused for a while (Retry-After)",
    ),
    (
        503,
        "BULKHEAD_FULL",
        "the API is at its concurrency limit",
    ),
    (
        503,
        "NO_HEALTHY_UPSTREAM",
        "no backend endpoint is available (all are down or taken out by health checks)",
    ),
    (
        503,
        "BACKEND_LOADING",
        "the backend was asleep and is starting; retry after Retry-After seconds",
    ),
    (
        503,
        "NOTIFY_UNAVAILABLE",
        "notifications cannot be served right now (their store is unreachable); retry",
    ),
    (
        503,
        "CONNECTION_LIMIT",
        "the gateway is at its connection limit; the connection is closed, retry after Retry-After",
    ),
    (
        502,
        "UPSTREAM_ERROR",
        "the backend failed",
    ),
    (
        504,
        "UPSTREAM_TIMEOUT",
        "the backend did not answer within the API's deadline",
    ),
];

/// What a merchant should do about an error `code` of [`ERROR_CODES`] (the portal's Errors
/// page; docs/PROTOCOL.md, "The error envelope"). `None` for a code it does not know.
pub fn what_to_do(code: &str) -> Option<&'static str> {
    Some(match code {
        "BAD_REQUEST" => "Fix the request: the message names what is wrong. Do not retry it unchanged.",
        "SIGNATURE_MISSING" => "Send all four X-Portico-* headers (see Signing).",
        "SIGNATURE_INVALID" => "Check the app key and secret, and rebuild the string-to-sign from exactly what you send: the path as sent, the canonical query, the body bytes (see Signing).",
        "SIGNATURE_EXPIRED" => "Sync your clock with NTP and sign with the current time in milliseconds; retry with a new timestamp and nonce.",
        "NONCE_REPLAYED" => "Use a fresh random nonce for every call, retries included.",
        "APP_UNKNOWN" => "Nothing: no longer sent. An unknown app key answers SIGNATURE_INVALID.",
        "IP_BLOCKED" => "Call from an allowed address; ask your operator which addresses are allowed.",
        "APP_FORBIDDEN" => "Your app is not granted this API (or topic): ask your operator for the grant.",
        "APP_DISABLED" => "Your app is disabled: contact your operator.",
        "API_NOT_FOUND" => "Check the method and path (or the router's method=) against the catalogue.",
        "BODY_TOO_LARGE" => "Send a smaller body (the API page gives its limit).",
        "URI_TOO_LONG" => "Shorten the path and query (at most 8 KiB); send large inputs in the body.",
        "RATE_LIMITED" => "Wait Retry-After seconds, then retry with a new nonce and timestamp; spread your calls.",
        "API_DEGRADED" => "The API is paused for now: retry later with backoff; the message says more.",
        "CIRCUIT_OPEN" => "Wait Retry-After seconds, then retry with a new nonce and timestamp.",
        "BULKHEAD_FULL" => "Retry shortly with backoff (a new nonce and timestamp).",
        "NO_HEALTHY_UPSTREAM" => "Retry with backoff; quote the request id if it lasts.",
        "BACKEND_LOADING" => "Wait Retry-After seconds, then retry with a new nonce and timestamp.",
        "NOTIFY_UNAVAILABLE" => "Reconnect or retry with backoff.",
        "CONNECTION_LIMIT" => "Reconnect after Retry-After seconds.",
        "UPSTREAM_ERROR" => "Retry with backoff if the call is safe to repeat; quote the request id if it lasts.",
        "UPSTREAM_TIMEOUT" => "Retry with backoff if the call is safe to repeat; quote the request id if it lasts.",
        _ => return None,
    })
}

/// A gRPC backend's non-OK statuses as the gateway answers them (docs/PROTOCOL.md): status
/// name, HTTP status, in code order. The gateway's own mapping
/// ([`portico_grpc_dynamic::code_name_and_status`]), so the document cannot drift from it.
pub fn grpc_codes() -> impl Iterator<Item = (&'static str, u16)> {
    (1..=16).map(|n| portico_grpc_dynamic::code_name_and_status(tonic::Code::from_i32(n)))
}

/// The gRPC status names and their HTTP statuses.
pub(super) fn grpc_codes_table() -> Value {
    grpc_codes()
        .map(|(name, status)| json!({"code": name, "status": status}))
        .collect()
}

/// The shared error responses: status, name.
const ERROR_RESPONSE_NAMES: [(u16, &str); 13] = [
    (400, "BadRequest"),
    (401, "Unauthorized"),
    (403, "Forbidden"),
    (404, "NotFound"),
    (409, "Conflict"),
    (413, "PayloadTooLarge"),
    (414, "UriTooLong"),
    (429, "TooManyRequests"),
    (500, "InternalError"),
    (501, "NotImplemented"),
    (502, "BadGateway"),
    (503, "ServiceUnavailable"),
    (504, "GatewayTimeout"),
];

/// The error statuses an operation may answer, with their shared response names: 401 when
/// it is signed or gRPC-backed (a gRPC backend may answer `UNAUTHENTICATED`), 409, 500 and
/// 501 only from a gRPC backend.
pub(super) fn error_statuses(signed: bool, grpc: bool) -> Vec<(u16, &'static str)> {
    ERROR_RESPONSE_NAMES
        .into_iter()
        .filter(|(status, _)| match status {
            401 => signed || grpc,
            409 | 500 | 501 => grpc,
            _ => true,
        })
        .collect()
}

/// The shared error responses: per status, the envelope with the codes it can carry.
pub(super) fn error_responses() -> Value {
    let mut out = Map::new();
    for (status, name) in ERROR_RESPONSE_NAMES {
        let gateway: Vec<(&str, &str)> = ERROR_CODES
            .iter()
            .filter(|(s, _, _)| *s == status)
            .map(|(_, c, m)| (*c, *m))
            .collect();
        let grpc: Vec<&str> = grpc_codes()
            .filter(|(_, s)| *s == status)
            .map(|(c, _)| c)
            .collect();
        let mut lines: Vec<String> = gateway
            .iter()
            .map(|(c, m)| format!("- `{c}`: {m}"))
            .collect();
        if !grpc.is_empty() {
            lines.push(format!(
                "- from a gRPC backend: {} (the backend's message as `message`)",
                grpc.iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut codes: Vec<&str> = gateway.iter().map(|(c, _)| *c).collect();
        codes.extend(grpc.iter().copied());
        let mut examples = Map::new();
        for (code, meaning) in &gateway {
            examples.insert(
                (*code).to_owned(),
                json!({"summary": meaning, "value": {"code": code, "message": meaning, "request_id": "9f3c2a7e5b1d4c08"}}),
            );
        }
        if let Some(code) = grpc.first() {
            examples.insert(
                (*code).to_owned(),
                json!({"summary": "a gRPC backend's status", "value": {"code": code, "message": "the backend's message", "request_id": "9f3c2a7e5b1d4c08"}}),
            );
        }
        let mut response = json!({
            "description": format!("{status}:\n{}", lines.join("\n")),
            "headers": {"X-Portico-Request-Id": {"description": "The request id; quote it when you report a problem.", "schema": {"type": "string"}}},
            "content": {"application/json": {
                "schema": {"allOf": [{"$ref": "#/components/schemas/Error"}, {"properties": {"code": {"enum": codes}}}]},
                "examples": examples,
            }},
        });
        if status == 429 || status == 503 {
            response["headers"]["Retry-After"] = json!({
                "description": "Seconds to wait before retrying (with a new nonce and timestamp).",
                "schema": {"type": "integer"},
            });
        }
        out.insert(name.to_owned(), response);
    }
    Value::Object(out)
}

/// The error envelope (docs/PROTOCOL.md, "The error envelope"; the portal's Errors page).
pub(super) fn error_schema() -> Value {
    json!({
        "title": "Error",
        "type": "object",
        "description": "Every answer the gateway makes itself (rather than the backend). Branch on the HTTP status and `code`; `message` is for people and may change.",
        "required": ["code", "message", "request_id"],
        "properties": {
            "code": {"type": "string", "description": "A code of the portal's Errors page, or a gRPC status name for a gRPC-backed API."},
            "message": {"type": "string"},
            "request_id": {"type": "string"},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows `| ... |` of the table under `heading` in docs/PROTOCOL.md, split in cells.
    fn protocol_table(heading: &str) -> Vec<Vec<String>> {
        let doc = include_str!("../../../../docs/PROTOCOL.md");
        let start = doc
            .find(heading)
            .expect("the heading is in docs/PROTOCOL.md");
        doc[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                l.trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().to_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn an_operation_names_the_error_statuses_it_can_answer() {
        let statuses = |signed, grpc| -> Vec<u16> {
            error_statuses(signed, grpc)
                .iter()
                .map(|(s, _)| *s)
                .collect()
        };
        assert_eq!(
            statuses(false, false),
            [400, 403, 404, 413, 414, 429, 502, 503, 504]
        );
        assert_eq!(
            statuses(true, false),
            [400, 401, 403, 404, 413, 414, 429, 502, 503, 504]
        );
        assert_eq!(
            statuses(false, true),
            [400, 401, 403, 404, 409, 413, 414, 429, 500, 501, 502, 503, 504]
        );
        assert_eq!(statuses(true, true), statuses(false, true));
    }

    #[test]
    fn every_error_code_says_what_to_do() {
        for (_, code, _) in ERROR_CODES {
            let advice = what_to_do(code).unwrap_or_else(|| panic!("{code}: no advice"));
            assert!(advice.ends_with('.'), "{code}: {advice}");
        }
    }

    #[test]
    fn error_codes_are_those_of_the_protocol() {
        let mut documented: Vec<(u16, String)> = protocol_table("### The error envelope")
            .iter()
            .map(|r| (r[0].parse().unwrap(), r[1].trim_matches('`').to_owned()))
            .collect();
        let mut ours: Vec<(u16, String)> = ERROR_CODES
            .iter()
            .map(|(s, c, _)| (*s, (*c).to_owned()))
            .collect();
        documented.sort();
        ours.sort();
        assert_eq!(
            ours, documented,
            "ERROR_CODES and docs/PROTOCOL.md's envelope table differ"
        );

        let table = protocol_table("| gRPC status | HTTP |");
        let mut listed = 0;
        for row in &table {
            let status: u16 = row[1].parse().unwrap();
            for code in row[0].split(", ").filter(|c| c.starts_with('`')) {
                let code = code.trim_matches('`');
                listed += 1;
                assert!(
                    grpc_codes().any(|c| c == (code, status)),
                    "{code} → {status} of docs/PROTOCOL.md is not what the gateway answers"
                );
            }
        }
        assert!(
            listed >= 9,
            "only {listed} gRPC codes read from docs/PROTOCOL.md"
        );
        // Every shared error response an operation can name exists.
        let responses = error_responses();
        for (status, name) in error_statuses(true, true) {
            assert!(responses.get(name).is_some(), "{status} {name}");
        }
    }
}
