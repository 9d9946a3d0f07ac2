//! Request framing: what Portico refuses on top of Pingora's HTTP/1 parser, so that a request
//! whose body boundaries could be read two ways never reaches `route`, `auth` or a backend
//! (docs/SECURITY.md, "Request framing"; the corpus is `gateway/tests/it/smuggling.rs`).
//!
//! Pingora 0.9 (with httparse) already refuses, with its own bare `400`: invalid or
//! conflicting `Content-Length`, a final transfer coding other than `chunked`, HTTP/1.0 with
//! `Transfer-Encoding`, obs-fold, whitespace before a colon, control bytes, bad request lines,
//! a `Host` differing from an absolute-form target, several `Host`s. What it accepts and
//! Portico refuses here, before routing:
//!
//! - `Transfer-Encoding` together with `Content-Length` (RFC 9112 §6.3: "ought to be handled
//!   as an error"; Pingora drops the `Content-Length` and lets the chunked reading win, so an
//!   intermediary in front of Portico that reads the other one would disagree);
//! - `Transfer-Encoding` other than exactly one field line `chunked` (`identity, chunked`,
//!   `gzip, chunked`, `chunked, chunked`, two field lines): Pingora decodes only the final
//!   `chunked`, so any other coding would reach the backend undecoded and unlabelled;
//! - a bare LF line end anywhere in the head (RFC 9112 §2.2 lets a recipient accept it;
//!   an intermediary that does not would see different fields, e.g. a hidden
//!   `Transfer-Encoding`);
//! - a request target with bytes outside visible ASCII (RFC 9112 §3: an invalid request
//!   line; httparse accepts bytes over 0x7E and a route without a rewrite would forward them
//!   raw to the backend);
//! - an HTTP/1.1 request without `Host` (RFC 9112 §3.2: MUST answer 400).
//!
//! Each refusal closes the connection: after a framing error nothing on it can be trusted.
//! The same holds for a body that fails to decode ([`read_body_chunk`]): Pingora marks such a
//! body done, so without this the connection would be kept alive after the `400`.
//!
//! [`continue_if_expected`] answers `Expect: 100-continue` (RFC 9110 §10.1.1): the gateway
//! reads the whole body before calling a backend (the signature covers it), so it is the
//! server the client waits on.

use crate::error::GatewayError;
use bytes::Bytes;
use http::header::{EXPECT, HOST, TRANSFER_ENCODING};
use pingora_proxy::Session;

/// Refuses a request whose framing is ambiguous (see the module doc), closing the connection
/// with the refusal. Runs first in the pipeline, on the head alone; a no-op for HTTP/2, whose
/// framing is the h2 codec's.
pub fn check(session: &mut Session) -> Result<(), GatewayError> {
    let verdict = check_head(session);
    if verdict.is_err() {
        session.set_keepalive(None);
    }
    verdict
}

fn check_head(session: &Session) -> Result<(), GatewayError> {
    let Some(h1) = session.as_http1() else {
        return Ok(());
    };
    let req = h1.req_header();
    let raw = h1.get_headers_raw_bytes();
    if let Some(at) = bare_lf(&raw) {
        return Err(GatewayError::bad_request(format!(
            "bare LF line end in the request head (byte {at}); lines end with CRLF"
        )));
    }
    let mut codings = req.headers.get_all(TRANSFER_ENCODING).iter();
    if let Some(first) = codings.next() {
        if codings.next().is_some() {
            return Err(GatewayError::bad_request(
                "Transfer-Encoding in more than one field line",
            ));
        }
        if !first
            .as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"chunked")
        {
            return Err(GatewayError::bad_request(
                "unsupported Transfer-Encoding (only `chunked` alone)",
            ));
        }
        // Pingora removes Content-Length from the parsed head when Transfer-Encoding is
        // present, so look at the head as received.
        if has_content_length(&raw) {
            return Err(GatewayError::bad_request(
                "both Transfer-Encoding and Content-Length",
            ));
        }
    }
    // httparse takes bytes over 0x7E in the target (Pingora percent-encodes only controls and
    // spaces), and a route without a rewrite forwards the path as received.
    if !req.raw_path().iter().all(u8::is_ascii_graphic) {
        return Err(GatewayError::bad_request(
            "request target with bytes outside visible ASCII; percent-encode them",
        ));
    }
    if req.version == http::Version::HTTP_11 && !req.headers.contains_key(HOST) {
        return Err(GatewayError::bad_request("HTTP/1.1 request without Host"));
    }
    Ok(())
}

/// The index of the first LF not preceded by CR, if any.
fn bare_lf(head: &[u8]) -> Option<usize> {
    // memchr skips the bytes between line ends in words, not one by one.
    memchr::memchr_iter(b'\n', head).find(|&at| at == 0 || head[at - 1] != b'\r')
}

/// Whether a field line of the raw head is named `Content-Length`. httparse has refused
/// whitespace before the colon and obs-fold, so a name starts its line and ends at `:`.
fn has_content_length(head: &[u8]) -> bool {
    const NAME: &[u8] = b"content-length:";
    head.split(|&b| b == b'\n')
        .skip(1)
        .any(|line| line.len() >= NAME.len() && line[..NAME.len()].eq_ignore_ascii_case(NAME))
}

/// Reads the next piece of the request body. A body that fails to decode (a bad chunk, an
/// early end) is refused with `400` and the connection closed: Pingora leaves the body
/// reader "done" after such an error, so the connection would otherwise be kept alive with
/// the rest of the bad body, or whatever an intermediary sends next, read as a new request.
pub async fn read_body_chunk(session: &mut Session) -> Result<Option<Bytes>, GatewayError> {
    match session.read_request_body().await {
        Ok(chunk) => Ok(chunk),
        Err(e) => {
            session.set_keepalive(None);
            Err(GatewayError::bad_request(format!(
                "reading request body: {}",
                e.etype().as_str()
            )))
        }
    }
}

/// Sends `100 Continue` to an HTTP/1.1 request with `Expect: 100-continue` whose body has not
/// arrived yet. Call it when the request has passed every check that needs only the head, just
/// before reading the body: a request refused earlier gets its final answer instead, and its
/// connection is closed (the body is never read), as RFC 9110 §10.1.1 allows.
pub async fn continue_if_expected(session: &mut Session) -> Result<(), GatewayError> {
    let req = session.req_header();
    let expects = req.version == http::Version::HTTP_11
        && req.headers.get(EXPECT).is_some_and(|v| {
            v.as_bytes()
                .trim_ascii()
                .eq_ignore_ascii_case(b"100-continue")
        });
    if !expects || session.is_body_done() {
        return Ok(());
    }
    // Pingora turns keepalive off for any response head written before the body is done, a
    // `100` included; that rule is for final answers (Pingora's default, restored at once).
    session.set_close_on_response_before_downstream_finish(false);
    let written = session.write_continue_response().await;
    session.set_close_on_response_before_downstream_finish(true);
    written.map_err(|e| {
        session.set_keepalive(None);
        GatewayError::bad_request(format!("writing 100 Continue: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_lf_is_found_anywhere_but_after_cr() {
        assert_eq!(bare_lf(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), None);
        assert_eq!(bare_lf(b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), None);
        assert_eq!(bare_lf(b"GET / HTTP/1.1\nHost: a\r\n\r\n"), Some(14));
        assert_eq!(bare_lf(b"GET / HTTP/1.1\r\nHost: a\r\n\n"), Some(25));
        assert_eq!(bare_lf(b"\nGET / HTTP/1.1\r\n\r\n"), Some(0));
    }

    #[test]
    fn content_length_is_found_by_field_name_only() {
        let head = b"POST / HTTP/1.1\r\nHost: a\r\nCONTENT-length: 5\r\n\r\n";
        assert!(has_content_length(head));
        // Not as a value, a longer name, or the request line.
        assert!(!has_content_length(
            b"POST /content-length: HTTP/1.1\r\nX-A: content-length: 5\r\n\r\n"
        ));
        assert!(!has_content_length(
            b"POST / HTTP/1.1\r\nContent-Lengthy: 5\r\n\r\n"
        ));
        assert!(!has_content_length(
            b"content-length: / HTTP/1.1\r\nHost: a\r\n\r\n"
        ));
    }
}
