//! Checks and limits shared by several document kinds: document names, JSON parsing that
//! names the field at fault, header names, email addresses, the quoting of values in
//! rejection reasons, and the longest deadline (docs/operations/config-tree.md, "The configuration
//! tree", "Validation").

/// The largest backend deadline, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// At most the first 64 characters of `s` (and `...` when cut), for a reason that quotes a
/// value: a document's value can be long, its rejection reason stays short.
pub(super) fn excerpt(s: &str) -> String {
    const MAX_CHARS: usize = 64;
    match s.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_owned(),
    }
}

/// An HTTP header name: an RFC 9110 token.
pub(super) fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// A document name (API id, cluster name, app key, switch id): 1–128 of `[A-Za-z0-9._-]`,
/// not starting with `.` (a dot-file is invisible in the directory layout).
pub(super) fn check_name(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 128 {
        return Err(format!("{:?} must be 1 to 128 characters", excerpt(s)));
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
    {
        return Err(format!("{:?} may only hold A-Z a-z 0-9 . _ -", excerpt(s)));
    }
    if s.starts_with('.') {
        return Err(format!("{:?} must not start with '.'", excerpt(s)));
    }
    Ok(())
}

/// Parses JSON into `T`, naming the field of the first error.
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    let v = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." || path == "?" || path.is_empty() {
            format!("invalid document: {}", e.inner())
        } else {
            format!("{path}: {}", e.inner())
        }
    })?;
    de.end().map_err(|e| format!("invalid document: {e}"))?;
    Ok(v)
}

/// A plain email address: `local@domain.tld`, at most 254 bytes, no spaces, quotes or angle
/// brackets.
pub fn check_email(addr: &str) -> Result<(), String> {
    let bad = || format!("{addr:?} is not an email address (local@domain)");
    if addr.is_empty() || addr.len() > 254 {
        return Err(bad());
    }
    let (local, domain) = addr.rsplit_once('@').ok_or_else(bad)?;
    let plain = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|c| {
                c.is_ascii_graphic()
                    && !matches!(
                        c,
                        b'@' | b'<'
                            | b'>'
                            | b'"'
                            | b'('
                            | b')'
                            | b','
                            | b';'
                            | b':'
                            | b'\\'
                            | b'['
                            | b']'
                    )
            })
    };
    if !plain(local)
        || !plain(domain)
        || !domain.contains('.')
        || domain.starts_with('.')
        || domain.ends_with('.')
    {
        return Err(bad());
    }
    Ok(())
}
