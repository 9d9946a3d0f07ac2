//! Request signing (docs/PROTOCOL.md, "Signing a request"): the one implementation shared by the gateway (which
//! verifies), the `portico` CLI (which signs) and the tests.
//!
//! A signed call carries four headers ([`HEADER_APP_KEY`], [`HEADER_TIMESTAMP`],
//! [`HEADER_NONCE`], [`HEADER_SIGNATURE`]). The signature is the lowercase hex
//! HMAC-SHA256, keyed with the app secret, of the seven-line [`string_to_sign`].
//!
//! Decoding choices the contract leaves open (kept here so every party agrees):
//! - an invalid percent escape in the query (`%zz`, a trailing `%` or `%4`) is kept
//!   literally, as the lenient decode of the `percent-encoding` crate does, and its `%` is
//!   then re-encoded: `a=%zz` canonicalises to `a=%25zz`;
//! - decoded bytes need not be UTF-8: canonicalisation works on bytes;
//! - [`verify`] accepts the signature hex in either case (the contract asks for lowercase;
//!   accepting upper case as well weakens nothing).

use hmac::{Hmac, Mac};
use percent_encoding::{percent_decode_str, percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The app key header.
pub const HEADER_APP_KEY: &str = "X-Portico-AppKey";
/// The timestamp header: Unix epoch milliseconds.
pub const HEADER_TIMESTAMP: &str = "X-Portico-Timestamp";
/// The nonce header: 8–64 of `[A-Za-z0-9_-]`.
pub const HEADER_NONCE: &str = "X-Portico-Nonce";
/// The signature header: lowercase hex HMAC-SHA256.
pub const HEADER_SIGNATURE: &str = "X-Portico-Signature";

/// How far a timestamp may be from the verifier's clock, in either direction (300 s).
pub const MAX_SKEW_MS: u64 = 300_000;

/// Shortest accepted nonce.
pub const NONCE_MIN_LEN: usize = 8;
/// Longest accepted nonce.
pub const NONCE_MAX_LEN: usize = 64;

type HmacSha256 = Hmac<Sha256>;

/// Bytes written as themselves in the canonical query: `A-Z a-z 0-9 - _ . ~`.
const UNRESERVED_KEPT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-decodes `s` (invalid escapes kept literally, `+` kept as `+`) and re-encodes it,
/// keeping only `A-Z a-z 0-9 - _ . ~` and writing every other byte as upper-case `%XX`.
fn reencode(s: &str, out: &mut String) {
    let decoded: Vec<u8> = percent_decode_str(s).collect();
    for chunk in percent_encode(&decoded, UNRESERVED_KEPT) {
        out.push_str(chunk);
    }
}

/// The canonical query of docs/PROTOCOL.md (line 3 of the string-to-sign) from a raw query string
/// (without the leading `?`).
///
/// Split on `&` (empty parts skipped), split each part at the first `=` (a part without `=`
/// has an empty value), percent-decode name and value (`+` stays `+`; invalid escapes are
/// kept literally), re-encode keeping only `A-Z a-z 0-9 - _ . ~`, sort by encoded name then
/// encoded value (byte order), join as `name=value` with `&`. Empty for an empty query.
pub fn canonical_query(raw: &str) -> String {
    let mut pairs: Vec<(String, String)> = raw
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let mut n = String::with_capacity(name.len());
            let mut v = String::with_capacity(value.len());
            reencode(name, &mut n);
            reencode(value, &mut v);
            (n, v)
        })
        .collect();
    pairs.sort_unstable();
    let mut out = String::with_capacity(raw.len() + 8);
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    out
}

/// Lowercase hex SHA-256 of `body` (line 7 of the string-to-sign; of the empty string when
/// there is no body).
pub fn body_digest(body: &[u8]) -> String {
    body_digest_str(body).into_owned()
}

/// Lowercase hex SHA-256 of the empty string: line 7 of every call without a body.
pub const EMPTY_BODY_DIGEST: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// [`body_digest`], borrowed for the common case of no body (no hashing, no allocation).
fn body_digest_str(body: &[u8]) -> std::borrow::Cow<'static, str> {
    if body.is_empty() {
        std::borrow::Cow::Borrowed(EMPTY_BODY_DIGEST)
    } else {
        std::borrow::Cow::Owned(hex::encode(Sha256::digest(body)))
    }
}

/// The seven-line string-to-sign of docs/PROTOCOL.md, joined by `\n` (no trailing newline).
///
/// `method` is upper-cased; `path` must be the path exactly as sent, without the query;
/// `raw_query` is the raw query after `?` (`None` or empty: no query); `timestamp` is the
/// header value exactly as sent.
pub fn string_to_sign(
    method: &str,
    path: &str,
    raw_query: Option<&str>,
    app_key: &str,
    timestamp: &str,
    nonce: &str,
    body: &[u8],
) -> String {
    let digest = body_digest_str(body);
    string_to_sign_with_digest(method, path, raw_query, app_key, timestamp, nonce, &digest)
}

/// [`string_to_sign`] with line 7 given: `body_digest` is the lowercase hex SHA-256 of the
/// body, for a body that was hashed as it streamed by rather than kept.
pub fn string_to_sign_with_digest(
    method: &str,
    path: &str,
    raw_query: Option<&str>,
    app_key: &str,
    timestamp: &str,
    nonce: &str,
    digest: &str,
) -> String {
    let query = raw_query.map(canonical_query).unwrap_or_default();
    let capacity = [method, path, &query, app_key, timestamp, nonce, digest]
        .iter()
        .fold(6usize, |n, part| n.saturating_add(part.len()));
    let mut s = String::with_capacity(capacity);
    s.push_str(&method.to_ascii_uppercase());
    s.push('\n');
    s.push_str(path);
    s.push('\n');
    s.push_str(&query);
    s.push('\n');
    s.push_str(app_key);
    s.push('\n');
    s.push_str(timestamp);
    s.push('\n');
    s.push_str(nonce);
    s.push('\n');
    s.push_str(digest);
    s
}

/// An app's secret made ready to sign and verify: the HMAC key schedule (the padded inner
/// and outer keys, two SHA-256 blocks) done once, so each call hashes only its
/// string-to-sign. The gateway keeps one per app in its snapshot.
#[derive(Clone)]
pub struct SigningKey(Option<HmacSha256>);

impl SigningKey {
    pub fn new(secret: &[u8]) -> SigningKey {
        // HMAC accepts keys of any length, so `new_from_slice` cannot fail; `None` keeps
        // this total without a panic path (and then nothing verifies).
        SigningKey(HmacSha256::new_from_slice(secret).ok())
    }

    /// The raw HMAC-SHA256 of `sts`.
    fn mac_bytes(&self, sts: &str) -> [u8; 32] {
        match self.0.clone() {
            Some(mut mac) => {
                mac.update(sts.as_bytes());
                mac.finalize().into_bytes().into()
            }
            None => [0u8; 32],
        }
    }

    /// The signature of docs/PROTOCOL.md: lowercase hex HMAC-SHA256(secret, `sts`).
    pub fn sign(&self, sts: &str) -> String {
        hex::encode(self.mac_bytes(sts))
    }

    /// Whether `signature_hex` is the signature of `sts` under this key. The MAC bytes are
    /// compared in constant time; hex of either case is accepted; anything that is not 64
    /// hex digits is simply wrong.
    pub fn verify(&self, sts: &str, signature_hex: &str) -> bool {
        let mut given = [0u8; 32];
        if hex::decode_to_slice(signature_hex.as_bytes(), &mut given).is_err() {
            return false;
        }
        let expected = self.mac_bytes(sts);
        self.0.is_some() && bool::from(expected.ct_eq(&given))
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// The signature of docs/PROTOCOL.md: lowercase hex HMAC-SHA256(`secret`, `sts`).
pub fn sign(secret: &[u8], sts: &str) -> String {
    SigningKey::new(secret).sign(sts)
}

/// Whether `signature_hex` is the signature of `sts` under `secret`. The MAC bytes are
/// compared in constant time; hex of either case is accepted; anything that is not 64 hex
/// digits is simply wrong.
pub fn verify(secret: &[u8], sts: &str, signature_hex: &str) -> bool {
    SigningKey::new(secret).verify(sts, signature_hex)
}

/// Whether `nonce` is 8–64 of `[A-Za-z0-9_-]`.
pub fn valid_nonce(nonce: &str) -> bool {
    (NONCE_MIN_LEN..=NONCE_MAX_LEN).contains(&nonce.len())
        && nonce
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The four headers of a signed call, as made by [`sign_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    pub app_key: String,
    pub timestamp: String,
    pub nonce: String,
    pub signature: String,
    /// The string-to-sign the signature covers (for `portico sign --verbose` and debugging).
    pub string_to_sign: String,
}

impl SignedHeaders {
    /// The four `(header name, value)` pairs, in the order of docs/PROTOCOL.md.
    pub fn pairs(&self) -> [(&'static str, &str); 4] {
        [
            (HEADER_APP_KEY, self.app_key.as_str()),
            (HEADER_TIMESTAMP, self.timestamp.as_str()),
            (HEADER_NONCE, self.nonce.as_str()),
            (HEADER_SIGNATURE, self.signature.as_str()),
        ]
    }
}

/// Signs a call: computes the string-to-sign and its signature and returns the four headers.
/// `path` is the path exactly as it will be sent, `raw_query` the raw query after `?`.
#[allow(clippy::too_many_arguments)]
pub fn sign_request(
    secret: &[u8],
    method: &str,
    path: &str,
    raw_query: Option<&str>,
    app_key: &str,
    timestamp_ms: u64,
    nonce: &str,
    body: &[u8],
) -> SignedHeaders {
    let timestamp = timestamp_ms.to_string();
    let sts = string_to_sign(method, path, raw_query, app_key, &timestamp, nonce, body);
    SignedHeaders {
        app_key: app_key.to_owned(),
        timestamp,
        nonce: nonce.to_owned(),
        signature: sign(secret, &sts),
        string_to_sign: sts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cr3t-value";
    const TS: &str = "1796000000000";

    #[test]
    fn vector_1_get_with_query() {
        let sts = string_to_sign(
            "GET",
            "/v1/orders/42",
            Some("b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93"),
            "merchant-1",
            TS,
            "n0nce-0001",
            b"",
        );
        assert_eq!(
            sts,
            "GET\n/v1/orders/42\na=%2F&a=hello%20world&b=2&c=x%2By&d=%E2%9C%93\nmerchant-1\n\
             1796000000000\nn0nce-0001\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let sig = sign(SECRET, &sts);
        assert_eq!(
            sig,
            "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73"
        );
        assert!(verify(SECRET, &sts, &sig));
        assert!(verify(SECRET, &sts, &sig.to_ascii_uppercase()));
    }

    #[test]
    fn vector_2_post_with_body() {
        let sts = string_to_sign(
            "POST",
            "/v1/orders",
            None,
            "merchant-1",
            TS,
            "n0nce-0002",
            br#"{"item":"book","qty":2}"#,
        );
        assert_eq!(
            sts,
            "POST\n/v1/orders\n\nmerchant-1\n1796000000000\nn0nce-0002\n\
             6383114cff22e5f82e81e96fbe30c7239424b9ed893e27fea7eb67532aa03fb9"
        );
        assert_eq!(
            sign(SECRET, &sts),
            "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107"
        );
    }

    #[test]
    fn the_empty_body_digest_is_sha256_of_nothing() {
        assert_eq!(EMPTY_BODY_DIGEST, hex::encode(Sha256::digest(b"")));
        assert_eq!(body_digest(b""), EMPTY_BODY_DIGEST);
        assert_eq!(body_digest(b"x"), hex::encode(Sha256::digest(b"x")));
    }

    #[test]
    fn a_signing_key_is_reused_call_after_call() {
        let key = SigningKey::new(SECRET);
        for sts in ["GET\n/a\n\nm\n1\nn\nx", "POST\n/b\n\nm\n2\nn\ny", ""] {
            let sig = sign(SECRET, sts);
            assert_eq!(key.sign(sts), sig);
            assert!(key.verify(sts, &sig));
            assert!(key.verify(sts, &sig.to_uppercase()));
            assert!(!key.verify(sts, &sign(b"other", sts)));
            assert!(!key.verify(sts, "not hex"));
        }
        assert_eq!(format!("{key:?}"), "SigningKey(..)");
    }

    #[test]
    fn sign_request_matches_the_vectors() {
        let h = sign_request(
            SECRET,
            "post",
            "/v1/orders",
            Some(""),
            "merchant-1",
            1_796_000_000_000,
            "n0nce-0002",
            br#"{"item":"book","qty":2}"#,
        );
        assert_eq!(
            h.signature,
            "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107"
        );
        let pairs = h.pairs();
        assert_eq!(pairs[0], ("X-Portico-AppKey", "merchant-1"));
        assert_eq!(pairs[1], ("X-Portico-Timestamp", "1796000000000"));
        assert_eq!(pairs[2], ("X-Portico-Nonce", "n0nce-0002"));
        assert_eq!(pairs[3].0, "X-Portico-Signature");
    }

    #[test]
    fn verify_refuses_wrong_or_malformed_signatures() {
        let sts = "GET\n/\n\nk\n1\nnnnnnnnn\nx";
        let sig = sign(SECRET, sts);
        assert!(!verify(b"other", sts, &sig));
        assert!(!verify(SECRET, "GET\n/x\n\nk\n1\nnnnnnnnn\nx", &sig));
        assert!(!verify(SECRET, sts, ""));
        assert!(!verify(SECRET, sts, &sig[..62]));
        assert!(!verify(SECRET, sts, &format!("{sig}00")));
        assert!(!verify(SECRET, sts, &format!("zz{}", &sig[2..])));
    }

    #[test]
    fn canonical_query_edge_cases() {
        assert_eq!(canonical_query(""), "");
        assert_eq!(canonical_query("&&"), "");
        // Missing `=` → empty value; empty name kept.
        assert_eq!(canonical_query("flag&=v"), "=v&flag=");
        // Split at the first `=` only.
        assert_eq!(canonical_query("a=b=c"), "a=b%3Dc");
        // `+` stays `+` and is then encoded; lower-case escapes come out upper case.
        assert_eq!(canonical_query("q=a+b%2fc"), "q=a%2Bb%2Fc");
        // Unreserved characters escaped by the client are decoded.
        assert_eq!(canonical_query("%41%7E=%2D%5F%2E"), "A~=-_.");
        // Invalid escapes are kept literally (their `%` re-encoded).
        assert_eq!(canonical_query("a=%zz&b=%&c=%4"), "a=%25zz&b=%25&c=%254");
        // Raw non-ASCII is encoded byte by byte.
        assert_eq!(canonical_query("n=✓"), "n=%E2%9C%93");
        // Sorted by encoded name, then encoded value, in byte order.
        assert_eq!(canonical_query("b=1&B=2&a=2&a=10"), "B=2&a=10&a=2&b=1");
        // Decoded bytes need not be UTF-8.
        assert_eq!(canonical_query("x=%FF"), "x=%FF");
    }

    #[test]
    fn nonce_syntax() {
        assert!(valid_nonce("n0nce-0001"));
        assert!(valid_nonce("abcdefgh"));
        assert!(valid_nonce(&"a_".repeat(32)));
        assert!(!valid_nonce("short"));
        assert!(!valid_nonce("abcdefg"));
        assert!(!valid_nonce(&"a".repeat(65)));
        assert!(!valid_nonce("has space"));
        assert!(!valid_nonce("nonce.0001"));
        assert!(!valid_nonce("nönce-0001"));
    }

    #[test]
    fn method_is_upper_cased_and_empty_query_is_no_query() {
        let a = string_to_sign("get", "/p", Some(""), "k", "1", "nnnnnnnn", b"");
        let b = string_to_sign("GET", "/p", None, "k", "1", "nnnnnnnn", b"");
        assert_eq!(a, b);
    }
}
