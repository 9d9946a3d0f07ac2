//! The request parts key selectors name (docs/OPERATIONS.md, "Key selectors"), read for
//! key-level switches (`degrade`), the response cache and the hot-key detector (`cache`).
//! Not a stage: a helper the stages share. Selectors were parsed when the snapshot was
//! validated; reading one borrows from the request except for a percent-decoded query
//! value and the client address.

use crate::edge::hot_keys::KEY_SEPARATOR;
use crate::edge::{EdgeCtx, EdgeRequest};
use portico_control::selector::Selector;
use std::borrow::Cow;
use std::hash::Hasher;

/// The value `sel` names in this request; `None` when the request has no such part (no such
/// path variable, query parameter or header, an unsigned call for `app`).
pub fn value<'a>(sel: &Selector, req: &EdgeRequest<'a>, ctx: &'a EdgeCtx) -> Option<Cow<'a, str>> {
    match sel {
        Selector::Path(var) => ctx
            .route
            .as_ref()?
            .vars
            .iter()
            .find(|(name, _)| name == var)
            .map(|(_, v)| Cow::Borrowed(v.as_str())),
        Selector::Query(name) => query_value(req.query?, name),
        Selector::Header(name) => req
            .headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .map(Cow::Borrowed),
        Selector::App => ctx.app_key.as_deref().map(Cow::Borrowed),
        Selector::Ip => ctx
            .client_ip
            .or(req.peer)
            .map(|ip| Cow::Owned(ip.to_string())),
    }
}

/// The first value of parameter `name` in a raw query, percent-decoded (`+` is a space).
fn query_value<'a>(query: &'a str, name: &str) -> Option<Cow<'a, str>> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

fn decode(s: &str) -> Cow<'_, str> {
    if !s.bytes().any(|b| b == b'%' || b == b'+') {
        return Cow::Borrowed(s);
    }
    let spaced = s.replace('+', " ");
    let decoded = percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy();
    Cow::Owned(decoded.into_owned())
}

/// The cache or hot-key key of a request: the selectors' values joined by a byte that no
/// header value holds (`\x1f`), a missing part as empty. Empty `key`: the API's one entry.
pub fn key_of(key: &[Selector], req: &EdgeRequest<'_>, ctx: &EdgeCtx) -> String {
    let mut out = String::new();
    for (i, sel) in key.iter().enumerate() {
        if i > 0 {
            out.push('\x1f');
        }
        if let Some(v) = value(sel, req, ctx) {
            out.push_str(&v);
        }
    }
    out
}

/// Feeds [`key_of`]'s key to `hasher` without building it: each value's bytes (a missing
/// part as empty), `write_u8(`[`KEY_SEPARATOR`]`)` between them, as
/// [`crate::edge::hot_keys::Detector::hash_key`] hashes a joined key (the hot-key
/// detector's per-request key, docs/ARCHITECTURE.md, "The response cache").
pub fn hash_into(key: &[Selector], req: &EdgeRequest<'_>, ctx: &EdgeCtx, hasher: &mut impl Hasher) {
    for (i, sel) in key.iter().enumerate() {
        if i > 0 {
            hasher.write_u8(KEY_SEPARATOR);
        }
        match value(sel, req, ctx) {
            Some(v) => hasher.write(v.as_bytes()),
            None => hasher.write(b""),
        }
    }
}

/// The key as shown to operators (`/status`, the registry): `\x1f` shown as `|`.
pub fn display_key(key: &str) -> String {
    key.replace('\x1f', "|")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::{api, get, routed};
    use http::HeaderMap;
    use portico_control::v1::AuthMode;

    #[test]
    fn reads_each_part() {
        let mut headers = HeaderMap::new();
        headers.insert("x-region", "north".parse().unwrap());
        let mut req = get("/x", &headers, None);
        req.query = Some("a=1&region=s%C3%BCd+ost&region=second&flag");
        let mut ctx = routed(&api("a", AuthMode::None, vec![]));
        if let Some(route) = ctx.route.as_mut() {
            route.vars = vec![("sku".to_owned(), "BK-1".to_owned())];
        }
        ctx.app_key = Some("m1".to_owned());
        ctx.client_ip = Some("10.1.2.3".parse().unwrap());
        let v = |s: &str| value(&Selector::parse(s).unwrap(), &req, &ctx).map(Cow::into_owned);
        assert_eq!(v("path:sku").as_deref(), Some("BK-1"));
        assert_eq!(v("path:other"), None);
        assert_eq!(v("query:region").as_deref(), Some("süd ost"));
        assert_eq!(v("query:flag").as_deref(), Some(""));
        assert_eq!(v("query:none"), None);
        assert_eq!(v("header:X-Region").as_deref(), Some("north"));
        assert_eq!(v("app").as_deref(), Some("m1"));
        assert_eq!(v("ip").as_deref(), Some("10.1.2.3"));
        let key = Selector::parse_key(&["path:sku", "query:none", "app"]).unwrap();
        assert_eq!(key_of(&key, &req, &ctx), "BK-1\x1f\x1fm1");
        assert_eq!(display_key(&key_of(&key, &req, &ctx)), "BK-1||m1");
        assert_eq!(key_of(&[], &req, &ctx), "");
        // Hashing the parts is the detector's hash of the joined key.
        let d = crate::edge::hot_keys::Detector::new(
            portico_control::HotKeysSpec {
                key: key.clone(),
                rate_above: 1.0,
                bandwidth_share_above: 0.7,
                link_bytes_per_s: None,
                auto_cache_ms: 1000,
                top: 20,
            },
            0,
        );
        let mut parts = d.hasher();
        hash_into(&key, &req, &ctx, &mut parts);
        assert_eq!(parts.finish(), d.hash_key(&key_of(&key, &req, &ctx)));
        let mut other = d.hasher();
        hash_into(&key[..2], &req, &ctx, &mut other);
        assert_ne!(other.finish(), d.hash_key(&key_of(&key, &req, &ctx)));
    }
}
