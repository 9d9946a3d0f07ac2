//! Signing: the canonical query of any query is its own canonical query; the string-to-sign
//! of any request has its seven lines; a signature verifies, in either case, and nothing
//! else of its length does; arbitrary signatures never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portico_control::sign;

fuzz_target!(|data: &[u8]| {
    let f = portico_fuzz::fields(data, 8);
    let (query, method, path, key, ts, nonce, secret, rest) =
        (&f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7]);
    let canonical = sign::canonical_query(query);
    assert_eq!(sign::canonical_query(&canonical), canonical, "{query:?}");
    assert!(canonical
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"-._~%=&".contains(&c)));
    let sts = sign::string_to_sign(method, path, Some(query), key, ts, nonce, rest.as_bytes());
    if ![method, path, key, ts, nonce]
        .iter()
        .any(|s| s.contains('\n'))
    {
        assert_eq!(sts.split('\n').count(), 7);
    }
    let sig = sign::sign(secret.as_bytes(), &sts);
    assert!(sign::verify(secret.as_bytes(), &sts, &sig));
    assert!(sign::verify(
        secret.as_bytes(),
        &sts,
        &sig.to_ascii_uppercase()
    ));
    let mut other = sig.clone().into_bytes();
    other[0] = if other[0] == b'0' { b'1' } else { b'0' };
    let other = String::from_utf8_lossy(&other).into_owned();
    assert!(!sign::verify(secret.as_bytes(), &sts, &other));
    let _ = sign::verify(secret.as_bytes(), &sts, rest);
    let _ = sign::valid_nonce(nonce);
});
