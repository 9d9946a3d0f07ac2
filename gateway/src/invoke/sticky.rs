//! Sticky sessions by cookie (docs/PROTOCOL.md, "Sticky sessions"; docs/SECURITY.md).
//!
//! The cookie's value is an opaque token naming an endpoint: the first 128 bits of
//! `HMAC-SHA256(key, "portico-sticky-v1\0" cluster "\0" addr)`, hex. It does not reveal the
//! address, and a token the gateway did not make matches no endpoint and is ignored.
//!
//! The key is what every gateway must share for a cookie set by one node to be honoured by
//! another: `PORTICO_STICKY_KEY` in the gateway's environment (any string; operators give
//! every gateway the same, as they do the ZooKeeper credentials). It is deliberately not
//! taken from the configuration tree (readable by every registry and gateway operator) nor
//! from app secrets. Without it each gateway process draws a random key at start: cookies
//! then stick only on the node that set them (and across its reloads, not its restarts).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// The environment variable holding the sticky key shared by all gateways.
pub const KEY_ENV: &str = "PORTICO_STICKY_KEY";

/// The process's sticky key (see the module docs).
fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| match std::env::var(KEY_ENV) {
        Ok(k) if !k.is_empty() => Sha256::digest(k.as_bytes()).into(),
        _ => {
            tracing::info!("{KEY_ENV} is not set: sticky cookies stick to this gateway only");
            // RandomState is seeded from the operating system's random source.
            let mut seed = Sha256::new();
            for i in 0..4u64 {
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u64(i);
                h.write_u128(std::process::id() as u128);
                seed.update(h.finish().to_le_bytes());
            }
            seed.update(portico_control::clock::now_ms().to_le_bytes());
            seed.finalize().into()
        }
    })
}

/// The token naming the endpoint `addr` of `cluster`.
pub fn token(cluster: &str, addr: &str) -> String {
    // HMAC accepts any key length: new_from_slice cannot fail here.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key()) else {
        return String::new();
    };
    mac.update(b"portico-sticky-v1\0");
    mac.update(cluster.as_bytes());
    mac.update(b"\0");
    mac.update(addr.as_bytes());
    hex::encode(&mac.finalize().into_bytes()[..16])
}

/// The value of cookie `name` in the request's `Cookie` headers, if any.
pub fn from_request<'h>(headers: &'h http::HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then(|| v.trim().trim_matches('"'))
        })
}

/// The `Set-Cookie` value naming `token`.
pub fn set_cookie(name: &str, token: &str, ttl_s: u64) -> String {
    format!("{name}={token}; HttpOnly; Path=/; Max-Age={ttl_s}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_opaque_stable_and_distinct() {
        let a = token("c", "127.0.0.1:80");
        assert_eq!(a, token("c", "127.0.0.1:80"));
        assert_ne!(a, token("c", "127.0.0.1:81"));
        assert_ne!(a, token("d", "127.0.0.1:80"));
        assert_eq!(a.len(), 32);
        assert!(!a.contains("127"));
    }

    #[test]
    fn cookie_is_found_among_others() {
        let mut h = http::HeaderMap::new();
        h.append("cookie", "a=1; PORTICO_STICKY=abc; b=2".parse().unwrap());
        assert_eq!(from_request(&h, "PORTICO_STICKY"), Some("abc"));
        assert_eq!(from_request(&h, "X"), None);
        assert_eq!(
            set_cookie("S", "t", 60),
            "S=t; HttpOnly; Path=/; Max-Age=60"
        );
    }
}
