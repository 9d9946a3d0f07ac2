//! Key selectors (docs/operations/degrading.md, "Key selectors"): each names one part of a request,
//! and a key is a list of them. The same grammar serves the response cache
//! (`policy.cache.key`), the hot-key detector (`policy.hot_keys.key`) and key-level switches
//! (`switches/<api_id>@<label>`, `match`):
//!
//! - `path:<var>`: a path template variable (a field path, `sku`, `shop.id`);
//! - `query:<name>`: a query parameter, as sent after percent-decoding;
//! - `header:<Name>`: a request header (the name is case-insensitive);
//! - `app`: the calling app's key (empty for an unsigned call);
//! - `ip`: the client's address after trusted-proxy resolution.
//!
//! Selectors are parsed once per snapshot, when the documents are validated; the gateway
//! reads the request parts they name without parsing anything per request.

use crate::template::is_field_path;
use std::fmt;

/// The most selectors one key (or one `match`) may list.
pub const MAX_SELECTORS: usize = 8;
/// The longest name after `path:`, `query:` or `header:`.
pub const MAX_SELECTOR_NAME: usize = 128;

/// One part of a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Selector {
    /// `path:<var>`: a path variable of the matched binding.
    Path(String),
    /// `query:<name>`: the first value of a query parameter.
    Query(String),
    /// `header:<Name>`: the first value of a header; kept lower-case.
    Header(String),
    /// `app`: the app key of a signed call.
    App,
    /// `ip`: the client's address.
    Ip,
}

impl Selector {
    /// Parses one selector, e.g. `path:sku`; `Err` says what is wrong.
    pub fn parse(s: &str) -> Result<Selector, String> {
        let named = |name: &str, ok: fn(&str) -> bool, what: &str| {
            if name.is_empty() || name.len() > MAX_SELECTOR_NAME || !ok(name) {
                Err(format!("{s:?}: {what}"))
            } else {
                Ok(name.to_owned())
            }
        };
        match s {
            "app" => Ok(Selector::App),
            "ip" => Ok(Selector::Ip),
            _ => match s.split_once(':') {
                Some(("path", var)) => named(
                    var,
                    is_field_path,
                    "a path variable is a field path (sku, shop.id)",
                )
                .map(Selector::Path),
                Some(("query", name)) => named(
                    name,
                    |n| n.chars().all(|c| !c.is_control() && c != '&' && c != '='),
                    "a query parameter name holds no control characters, '&' or '='",
                )
                .map(Selector::Query),
                Some(("header", name)) => named(name, is_header_name, "not a header name")
                    .map(|n| Selector::Header(n.to_ascii_lowercase())),
                _ => Err(format!(
                    "{:?} is not one of path:<var>, query:<name>, header:<Name>, app, ip",
                    s.chars().take(64).collect::<String>()
                )),
            },
        }
    }

    /// Parses a key: 1 to [`MAX_SELECTORS`] selectors, none twice.
    pub fn parse_key<S: AsRef<str>>(list: &[S]) -> Result<Vec<Selector>, String> {
        if list.is_empty() {
            return Err("must list at least one selector".to_owned());
        }
        if list.len() > MAX_SELECTORS {
            return Err(format!("must list at most {MAX_SELECTORS} selectors"));
        }
        let mut key: Vec<Selector> = Vec::with_capacity(list.len());
        for (i, s) in list.iter().enumerate() {
            let sel = Selector::parse(s.as_ref()).map_err(|e| format!("[{i}]: {e}"))?;
            if key.contains(&sel) {
                return Err(format!("[{i}]: {sel} appears twice"));
            }
            key.push(sel);
        }
        Ok(key)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Path(v) => write!(f, "path:{v}"),
            Selector::Query(q) => write!(f, "query:{q}"),
            Selector::Header(h) => write!(f, "header:{h}"),
            Selector::App => f.write_str("app"),
            Selector::Ip => f.write_str("ip"),
        }
    }
}

/// An HTTP header name: an RFC 9110 token.
pub fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// The separator between an API id and a switch label in `switches/<api_id>@<label>`.
pub const LABEL_SEPARATOR: char = '@';

/// Splits a switch name into the API id and, for a key-level switch, its label:
/// `order.get` → (`order.get`, None); `order.get@sku-BK-1` → (`order.get`, Some(`sku-BK-1`)).
pub fn split_switch_name(name: &str) -> (&str, Option<&str>) {
    match name.split_once(LABEL_SEPARATOR) {
        Some((api, label)) => (api, Some(label)),
        None => (name, None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_form() {
        assert_eq!(
            Selector::parse("path:sku").unwrap(),
            Selector::Path("sku".into())
        );
        assert_eq!(
            Selector::parse("path:shop.id").unwrap(),
            Selector::Path("shop.id".into())
        );
        assert_eq!(
            Selector::parse("query:region").unwrap(),
            Selector::Query("region".into())
        );
        assert_eq!(
            Selector::parse("header:X-Region").unwrap(),
            Selector::Header("x-region".into())
        );
        assert_eq!(Selector::parse("app").unwrap(), Selector::App);
        assert_eq!(Selector::parse("ip").unwrap(), Selector::Ip);
        assert_eq!(
            Selector::parse("header:X-Region").unwrap().to_string(),
            "header:x-region"
        );
    }

    #[test]
    fn refuses_bad_forms() {
        for bad in [
            "",
            "api",
            "path:",
            "path:1x",
            "path:a-b",
            "query:",
            "query:a&b",
            "header:",
            "header:a b",
            "cookie:x",
            "APP",
        ] {
            assert!(Selector::parse(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("query:{}", "q".repeat(MAX_SELECTOR_NAME + 1));
        assert!(Selector::parse(&long).is_err());
    }

    #[test]
    fn keys_are_bounded_and_unique() {
        assert!(Selector::parse_key::<&str>(&[]).is_err());
        let e = Selector::parse_key(&["header:X-A", "header:x-a"]).unwrap_err();
        assert!(e.contains("appears twice"), "{e}");
        let many: Vec<String> = (0..=MAX_SELECTORS).map(|i| format!("query:q{i}")).collect();
        assert!(Selector::parse_key(&many).is_err());
        let e = Selector::parse_key(&["app", "bogus"]).unwrap_err();
        assert!(e.starts_with("[1]: "), "{e}");
        assert_eq!(
            Selector::parse_key(&["path:sku", "app"]).unwrap(),
            vec![Selector::Path("sku".into()), Selector::App]
        );
    }

    #[test]
    fn switch_names_split_at_the_label() {
        assert_eq!(split_switch_name("order.get"), ("order.get", None));
        assert_eq!(
            split_switch_name("order.get@sku-BK-1"),
            ("order.get", Some("sku-BK-1"))
        );
    }
}
