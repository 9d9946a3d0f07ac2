//! The request id (docs/PROTOCOL.md, "Request ids"): one per request, on every response the
//! gateway writes or streams, on every backend call, and in the access log. A caller's own
//! well-formed id is kept; otherwise the gateway makes one.
//!
//! The lowest layer of the gateway: it imports nothing from the crate, so the listener, the
//! rescue point and the invoke tier all read the same header name and rule.

/// The request id header.
pub const HEADER: &str = "x-portico-request-id";

/// The longest request id kept from a caller.
pub const MAX_LEN: usize = 64;

/// The caller's `X-Portico-Request-Id` when it is well-formed (1–64 of `[A-Za-z0-9._-]`, first
/// value if repeated), else a fresh one ([`make`]).
pub fn keep_or_make(headers: &http::HeaderMap) -> String {
    match headers.get(HEADER).map(http::HeaderValue::as_bytes) {
        Some(id) if well_formed(id) => String::from_utf8_lossy(id).into_owned(),
        _ => make(),
    }
}

/// A fresh request id: 32 lower-case hex digits (128 random bits).
pub fn make() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = fastrand::u128(..);
    let id: String = (0..32)
        .rev()
        .map(|i| char::from(HEX[((bits >> (4 * i)) & 0xf) as usize]))
        .collect();
    id
}

/// Whether `id` may be kept as a request id: 1–64 of `[A-Za-z0-9._-]`.
fn well_formed(id: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&id.len())
        && id
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn with(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn is_made(id: &str) -> bool {
        id.len() == 32
            && id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    }

    #[test]
    fn a_well_formed_id_is_kept() {
        assert_eq!(
            keep_or_make(&with(&["order-42_retry.1"])),
            "order-42_retry.1"
        );
        let longest = "a".repeat(MAX_LEN);
        assert_eq!(keep_or_make(&with(&[&longest])), longest);
        // The first value of a repeated header.
        assert_eq!(keep_or_make(&with(&["first", "second"])), "first");
    }

    #[test]
    fn a_missing_or_malformed_id_is_replaced() {
        assert!(is_made(&keep_or_make(&HeaderMap::new())));
        let too_long = "a".repeat(MAX_LEN + 1);
        for bad in [
            "",
            "has space",
            "semi;colon",
            "slash/",
            "ünï",
            too_long.as_str(),
        ] {
            let mut h = HeaderMap::new();
            h.insert(HEADER, HeaderValue::from_bytes(bad.as_bytes()).unwrap());
            let id = keep_or_make(&h);
            assert!(is_made(&id), "{bad:?} gave {id:?}");
        }
    }

    #[test]
    fn made_ids_are_the_random_bits_in_hex() {
        for seed in [0, 7, u64::MAX] {
            fastrand::seed(seed);
            let id = make();
            fastrand::seed(seed);
            assert_eq!(id, format!("{:032x}", fastrand::u128(..)));
        }
    }

    #[test]
    fn made_ids_differ() {
        let (a, b) = (make(), make());
        assert!(is_made(&a) && is_made(&b));
        assert_ne!(a, b);
    }
}
