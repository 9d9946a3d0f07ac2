//! The signature headers as security schemes (docs/PROTOCOL.md, "Signing a request"; the
//! portal's Signing page), and the requirement a signed operation names.

use portico_control::sign::{HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use serde_json::{json, Value};

/// The four signature headers, each a scheme; a signed operation needs them all.
pub(super) fn security_schemes() -> Value {
    let algorithm = "The signature is lowercase hex HMAC-SHA256 (key: the app's secret) of the \
        string-to-sign: seven lines joined by \\n, no \\n at the end — (1) the method, upper \
        case; (2) the path exactly as sent, without the query; (3) the canonical query: split \
        the raw query on &, skip empty parts, split each at the first = (none: empty value), \
        percent-decode name and value to bytes (+ stays +), re-encode keeping only A-Z a-z \
        0-9 - _ . ~ (every other byte as %XX, upper-case hex), sort by name then value, join \
        as name=value with & (an empty line without a query); (4) the app key; (5) the \
        timestamp as sent; (6) the nonce; (7) lowercase hex SHA-256 of the body bytes as \
        sent (of the empty string without a body). The signing guide has two worked examples.";
    json!({
        "AppKey": {"type": "apiKey", "in": "header", "name": HEADER_APP_KEY,
            "description": "Your app key, e.g. merchant-1."},
        "Timestamp": {"type": "apiKey", "in": "header", "name": HEADER_TIMESTAMP,
            "description": "The current time in Unix epoch milliseconds; at most 300 s from the gateway's clock (SIGNATURE_EXPIRED)."},
        "Nonce": {"type": "apiKey", "in": "header", "name": HEADER_NONCE,
            "description": "A fresh random string of 8–64 of A-Z a-z 0-9 _ -, never reused within 300 s (NONCE_REPLAYED)."},
        "Signature": {"type": "apiKey", "in": "header", "name": HEADER_SIGNATURE,
            "description": algorithm},
    })
}

pub(super) fn security_requirement() -> Value {
    json!([{"AppKey": [], "Timestamp": [], "Nonce": [], "Signature": []}])
}
