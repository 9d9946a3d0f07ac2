//! The encoding of response-cache keys (docs/ARCHITECTURE.md, "The response cache"): the
//! parts of a key written so that two different lists of parts never give the same key.
//!
//! Each part is a tag byte (which part it is) followed by `-` when the request has no such
//! part, or by its length in decimal, `:`, and its bytes (a netstring). Reading from the
//! start, a key splits into its parts in exactly one way, whatever bytes the values hold:
//! a value cannot forge the boundary between two parts (a separator-joined key could, with
//! a `%1F` in a query value). A key longer than [`MAX_KEY_BYTES`] is kept as `#` and the
//! hex SHA-256 of its encoding; a shorter one as `=` and the encoding itself, so a short key
//! can never equal a digest.
//!
//! Standard library and `sha2`/`hex` only: the `cache_key` fuzz target includes this file as
//! it is.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// The longest encoding kept as it is; longer ones are kept as their digest.
pub const MAX_KEY_BYTES: usize = 256;

/// A cache key being written, part by part.
#[derive(Debug, Default, Clone)]
pub struct KeyWriter {
    raw: String,
}

impl KeyWriter {
    pub fn new() -> KeyWriter {
        KeyWriter {
            raw: String::with_capacity(96),
        }
    }

    /// Appends part `tag` (an ASCII letter naming what the part is: one byte of the
    /// encoding) with `value`, or marked missing for `None` (which differs from an empty
    /// value).
    pub fn part(&mut self, tag: u8, value: Option<&str>) {
        debug_assert!(tag.is_ascii_graphic(), "a tag is one ASCII byte");
        self.raw.push(char::from(tag));
        match value {
            None => self.raw.push('-'),
            Some(v) => {
                let _ = write!(self.raw, "{}:", v.len());
                self.raw.push_str(v);
            }
        }
    }

    /// The encoding so far (unbounded), for tests and the fuzz target.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The key: `=` and the encoding, or `#` and the hex SHA-256 of a long encoding.
    pub fn finish(self) -> String {
        bounded(self.raw)
    }
}

/// `=raw` for an encoding of at most [`MAX_KEY_BYTES`], `#<sha256 hex>` above.
pub fn bounded(raw: String) -> String {
    if raw.len() <= MAX_KEY_BYTES {
        let mut out = String::with_capacity(raw.len() + 1);
        out.push('=');
        out.push_str(&raw);
        return out;
    }
    let digest = Sha256::digest(raw.as_bytes());
    let mut out = String::with_capacity(65);
    out.push('#');
    out.push_str(&hex::encode(digest));
    out
}

/// The parts of an encoding, for tests and the fuzz target: `None` when `raw` is not a
/// well-formed encoding.
pub fn parse(raw: &str) -> Option<Vec<(u8, Option<&str>)>> {
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(&tag) = rest.as_bytes().first() {
        rest = rest.get(1..)?;
        if let Some(r) = rest.strip_prefix('-') {
            out.push((tag, None));
            rest = r;
            continue;
        }
        let colon = rest.find(':')?;
        let digits = &rest[..colon];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let len: usize = digits.parse().ok()?;
        let value = rest.get(colon + 1..colon + 1 + len)?;
        out.push((tag, Some(value)));
        rest = &rest[colon + 1 + len..];
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(parts: &[(u8, Option<&str>)]) -> KeyWriter {
        let mut k = KeyWriter::new();
        for (t, v) in parts {
            k.part(*t, *v);
        }
        k
    }

    #[test]
    fn a_value_cannot_forge_a_boundary() {
        // What a separator-joined key could not tell apart.
        let a = key(&[(b'q', Some("a\x1fb")), (b's', Some("c"))]);
        let b = key(&[(b'q', Some("a")), (b's', Some("b\x1fc"))]);
        assert_ne!(a.raw(), b.raw());
        let c = key(&[(b'q', Some("1:x")), (b's', None)]);
        let d = key(&[(b'q', Some("")), (b's', Some(""))]);
        assert_ne!(c.raw(), d.raw());
        // Missing and empty differ.
        assert_ne!(key(&[(b'a', None)]).raw(), key(&[(b'a', Some(""))]).raw());
        // The encoding parses back to its parts.
        let parts = [(b'p', Some("/v1/x")), (b'a', None), (b'q', Some("s=1:2"))];
        assert_eq!(parse(key(&parts).raw()).unwrap(), parts.to_vec());
        assert_eq!(parse("q3:ab"), None);
    }

    #[test]
    fn a_short_key_never_equals_a_digest() {
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        let digest = key(&[(b'q', Some(&long))]).finish();
        assert!(digest.starts_with('#') && digest.len() == 65, "{digest}");
        // A short key spelling that very digest is still another key.
        let spelled = key(&[(b'q', Some(&digest[1..]))]).finish();
        assert!(spelled.starts_with('='));
        assert_ne!(spelled, digest);
        let raw_digest = bounded(digest.clone());
        assert_ne!(raw_digest, digest);
        assert!(key(&[(b'q', Some("short"))]).finish().starts_with('='));
    }
}
