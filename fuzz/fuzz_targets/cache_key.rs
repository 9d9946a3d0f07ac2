//! The response-cache key encoding (gateway/src/edge/cache_key.rs, included as it is: it
//! is standard library, `sha2` and `hex` only): two different lists of parts never give the
//! same key. The input is split into parts by `0x00` (first byte of a part: its tag; a part
//! of just a tag is a missing value; the tag byte is mapped to an ASCII letter or sign; the rest, lossily UTF-8, its value), twice over
//! (`0xff` separates the two lists), each list encoded as the cache stage encodes a key.
//! Checks: an encoding parses back to exactly its parts (so it is injective); two lists
//! give the same key only when they are the same list; a kept key starts with `=` and is at
//! most `MAX_KEY_BYTES + 1` bytes, a digest starts with `#` and is 65 bytes, so a short key
//! never equals a long key's digest.
#![no_main]

#[allow(dead_code)]
#[path = "../../gateway/src/edge/cache_key.rs"]
mod cache_key;

use cache_key::{parse, KeyWriter, MAX_KEY_BYTES};
use libfuzzer_sys::fuzz_target;

type Parts = Vec<(u8, Option<String>)>;

fn parts(bytes: &[u8]) -> Parts {
    bytes
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| {
            // Tags are ASCII letters (the cache stage's are), as `KeyWriter::part` requires.
            let tag = b'A' + p[0] % 58;
            let value = (p.len() > 1).then(|| String::from_utf8_lossy(&p[1..]).into_owned());
            (tag, value)
        })
        .collect()
}

fn encode(parts: &Parts) -> KeyWriter {
    let mut k = KeyWriter::new();
    for (tag, value) in parts {
        k.part(*tag, value.as_deref());
    }
    k
}

fn check_key(raw: &str, key: &str) {
    if raw.len() <= MAX_KEY_BYTES {
        assert!(key.starts_with('=') && &key[1..] == raw);
    } else {
        assert!(key.starts_with('#') && key.len() == 65, "{key}");
    }
}

fuzz_target!(|data: &[u8]| {
    let (left, right) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (a, b) = (parts(left), parts(right));
    let (ka, kb) = (encode(&a), encode(&b));
    for (list, k) in [(&a, &ka), (&b, &kb)] {
        let parsed = parse(k.raw()).expect("an encoding parses");
        let back: Parts = parsed
            .into_iter()
            .map(|(t, v)| (t, v.map(str::to_owned)))
            .collect();
        assert_eq!(&back, list, "{:?}", k.raw());
    }
    let (ra, rb) = (ka.raw().to_owned(), kb.raw().to_owned());
    let (fa, fb) = (ka.finish(), kb.finish());
    check_key(&ra, &fa);
    check_key(&rb, &fb);
    if a != b {
        assert_ne!(ra, rb);
        assert_ne!(fa, fb, "two lists, one key");
    }
});
