//! The request parts key selectors name (docs/operations/degrading.md, "Key selectors"), read for
//! key-level switches (`degrade`), the response cache and the hot-key detector (`cache`).
//! Not a stage: a helper the stages share. Selectors were parsed when the snapshot was
//! validated; reading one borrows from the request except for a percent-decoded query
//! value and the client address.
//!
//! A router-style call (`POST /router?method=<id>`) carries its path variables and query
//! parameters as fields of its JSON body, which is what the transcoder reads for them: so
//! `path:<var>` and `query:<name>` read the body's field of that name (a dotted path for a
//! nested field; the proto name or its lowerCamelCase JSON name), never the router's own
//! query. A key-level switch or a hot-key count therefore sees the same value for a call
//! whichever form it takes (docs/SECURITY.md, "Trust between merchants").

use crate::edge::{EdgeCtx, EdgeRequest};
use portico_control::selector::Selector;
use std::borrow::Cow;
use std::hash::Hasher;

pub use super::key_text::KEY_SEPARATOR;

/// The value `sel` names in this request; `None` when the request has no such part (no such
/// path variable, query parameter or header, an unsigned call for `app`).
pub fn value<'a>(sel: &Selector, req: &EdgeRequest<'a>, ctx: &'a EdgeCtx) -> Option<Cow<'a, str>> {
    match sel {
        Selector::Path(field) | Selector::Query(field) if is_router_style(ctx) => {
            body_field(router_body(req, ctx)?, field)
        }
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

fn is_router_style(ctx: &EdgeCtx) -> bool {
    ctx.route.as_ref().is_some_and(|r| r.router_style)
}

/// A router-style call's body as JSON, parsed once per request (`None`: not a JSON value).
pub fn router_body<'a>(req: &EdgeRequest<'_>, ctx: &'a EdgeCtx) -> Option<&'a serde_json::Value> {
    ctx.router_body
        .get_or_init(|| serde_json::from_slice(req.body).ok())
        .as_ref()
}

/// The value of the field at the dotted path `field` in a JSON body, as the transcoder reads
/// it: each step by its proto name or its lowerCamelCase JSON name; a string as it is, a
/// number or boolean as written, an object or list as compact JSON, `null` as missing.
pub fn body_field<'a>(body: &'a serde_json::Value, field: &str) -> Option<Cow<'a, str>> {
    let mut v = body;
    for step in field.split('.') {
        let obj = v.as_object()?;
        v = match obj.get(step) {
            Some(found) => found,
            None => obj.get(&lower_camel(step))?,
        };
    }
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(Cow::Borrowed(s.as_str())),
        other => Some(Cow::Owned(other.to_string())),
    }
}

/// protoc's JSON name of a field: `order_id` → `orderId`.
fn lower_camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The first value of parameter `name` in a raw query, percent-decoded (`+` is a space).
fn query_value<'a>(query: &'a str, name: &str) -> Option<Cow<'a, str>> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

/// Every value of parameter `name` in a raw query, in order, percent-decoded.
pub fn query_values<'a>(query: &'a str, name: &str) -> Vec<Cow<'a, str>> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k) == name).then(|| decode(v))
        })
        .collect()
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::edge::key_text::display_key;
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

    #[test]
    fn a_router_style_call_is_read_from_its_body() {
        let headers = HeaderMap::new();
        let body = br#"{"order_id":"2002","shop":{"regionCode":7},"flag":true,"none":null}"#;
        let mut req = get("/router", &headers, None);
        req.method = "POST";
        // The router's own query never stands in for a field.
        req.query = Some("method=a&order_id=1001");
        req.body = body;
        let mut ctx = routed(&api("a", AuthMode::None, vec![]));
        if let Some(route) = ctx.route.as_mut() {
            route.router_style = true;
        }
        let v = |s: &str| value(&Selector::parse(s).unwrap(), &req, &ctx).map(Cow::into_owned);
        assert_eq!(v("path:order_id").as_deref(), Some("2002"));
        assert_eq!(v("query:order_id").as_deref(), Some("2002"));
        assert_eq!(v("path:shop.region_code").as_deref(), Some("7"));
        assert_eq!(v("query:flag").as_deref(), Some("true"));
        assert_eq!(v("path:none"), None);
        assert_eq!(v("path:method"), None);
        assert_eq!(v("path:shop").as_deref(), Some(r#"{"regionCode":7}"#));
        // Not JSON: no field at all.
        req.body = b"order_id=2002";
        let ctx2 = {
            let mut c = routed(&api("a", AuthMode::None, vec![]));
            if let Some(route) = c.route.as_mut() {
                route.router_style = true;
            }
            c
        };
        assert_eq!(
            value(&Selector::parse("path:order_id").unwrap(), &req, &ctx2),
            None
        );
    }

    #[test]
    fn every_value_of_a_query_parameter() {
        assert_eq!(
            query_values("a=1&b=2&a=x%20y&&a", "a"),
            vec![Cow::Borrowed("1"), Cow::Borrowed("x y"), Cow::Borrowed("")]
        );
        assert!(query_values("b=2", "a").is_empty());
    }
}
