//! What a "try it" call asks for ([`CallRequest`]) and what it sends: the method, path and
//! query (from the request, or the draft API it names), the body, the caller's headers, and
//! the signature over exactly what is sent (docs/PROTOCOL.md, "Signing a request").

use crate::error::{ApiError, ApiResult};
use portico_control::sign::sign_request;
use portico_control::v1;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// What the console asks to call.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// A draft API (`sandbox/apis/<id>`): gives the method, and the path if it has no variables.
    #[serde(default)]
    pub api_id: Option<String>,
    /// The HTTP method (default: the draft's).
    #[serde(default)]
    pub method: Option<String>,
    /// The path as sent, optionally with `?query`.
    #[serde(default)]
    pub path: Option<String>,
    /// The raw query (without `?`), if not in `path`.
    #[serde(default)]
    pub query: Option<String>,
    /// A string is sent as is; any other JSON value is sent as JSON.
    #[serde(default)]
    pub body: Option<Value>,
    /// Extra request headers (not the signature's, not hop-by-hop ones).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The sandbox app to sign with.
    #[serde(default)]
    pub app_key: Option<String>,
    /// The gateway node to call (default: the first live node with a sandbox listener).
    #[serde(default)]
    pub node_id: Option<String>,
}

/// Where the call goes on the gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The HTTP method, upper case.
    pub method: reqwest::Method,
    /// The path as sent (percent-encoded as given).
    pub path: String,
    /// The raw query, without `?`; `None` when empty.
    pub query: Option<String>,
}

impl Target {
    /// The method (the request's, else the draft's), the path (the request's, else the draft's
    /// when its template has no variables) and the query (in the path, or apart). 400 when one
    /// is missing or not valid.
    pub fn of(req: &CallRequest, draft: Option<&v1::ApiDefinition>) -> ApiResult<Target> {
        let method = req
            .method
            .clone()
            .or_else(|| draft.map(|d| d.http.method.clone()))
            .ok_or_else(|| ApiError::bad_request("method: required without api_id"))?
            .to_ascii_uppercase();
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| {
            ApiError::bad_request(format!("method: {method:?} is not an HTTP method"))
        })?;
        let raw_path = match (&req.path, draft) {
            (Some(p), _) if !p.trim().is_empty() => p.trim().to_owned(),
            (_, Some(d)) if !d.http.path.contains('{') => d.http.path.clone(),
            (_, Some(d)) => {
                return Err(ApiError::bad_request(format!(
                    "path: the API's path template {} has variables: give the path with them \
                     filled in",
                    d.http.path
                )))
            }
            (_, None) => return Err(ApiError::bad_request("path: required without api_id")),
        };
        let (path, query) = match raw_path.split_once('?') {
            Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
            None => (raw_path.clone(), None),
        };
        let query = query
            .or_else(|| req.query.clone())
            .map(|q| q.trim_start_matches('?').to_owned())
            .filter(|q| !q.is_empty());
        let target = Target {
            method,
            path,
            query,
        };
        target.check()?;
        Ok(target)
    }

    /// The path starts with `/`; neither path nor query has a space.
    fn check(&self) -> ApiResult<()> {
        if !self.path.starts_with('/') {
            return Err(ApiError::bad_request(format!(
                "path: {:?} must start with /",
                self.path
            )));
        }
        let spaced = |s: &str| s.contains(char::is_whitespace);
        if spaced(&self.path) || self.query.as_deref().is_some_and(spaced) {
            return Err(ApiError::bad_request(
                "path: spaces must be percent-encoded (%20)",
            ));
        }
        Ok(())
    }
}

/// Headers the caller may not set: the signature's own and hop-by-hop ones.
fn reserved_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("x-portico-")
        || matches!(
            n.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding" | "upgrade" | "te"
        )
}

/// 400 when the caller sets a header the registry sets.
pub fn check_headers(headers: &BTreeMap<String, String>) -> ApiResult<()> {
    match headers.keys().find(|name| reserved_header(name)) {
        Some(name) => Err(ApiError::bad_request(format!(
            "headers: {name} is set by the registry"
        ))),
        None => Ok(()),
    }
}

/// The body sent: none, a string as is, or any other JSON value as JSON.
pub fn body_bytes(body: Option<&Value>) -> ApiResult<Vec<u8>> {
    match body {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(s.clone().into_bytes()),
        Some(v) => serde_json::to_vec(v).map_err(|e| ApiError::internal(e.to_string())),
    }
}

/// A nonce (docs/PROTOCOL.md, "Signing a request"): `console-` and 16 random hex digits.
fn nonce() -> String {
    format!("console-{:016x}", fastrand::u64(..))
}

/// The request as it will be sent.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The method.
    pub method: reqwest::Method,
    /// `http://<sandbox_addr><path>[?query]`.
    pub url: String,
    /// Every header, in order: `Content-Type` (for a body, unless given), the caller's, the
    /// signature's, the request id.
    pub headers: Vec<(String, String)>,
    /// The app that signed, if any.
    pub app_key: Option<String>,
    /// What was signed, if anything.
    pub string_to_sign: Option<String>,
}

impl Outgoing {
    /// The request to `sandbox_addr`, signed now with `app` (`(key, secret)`) if given.
    pub fn new(
        target: &Target,
        sandbox_addr: &str,
        extra: &BTreeMap<String, String>,
        body: &[u8],
        app: Option<&(String, String)>,
        request_id: &str,
    ) -> Outgoing {
        let url = match &target.query {
            Some(q) => format!("http://{sandbox_addr}{}?{q}", target.path),
            None => format!("http://{sandbox_addr}{}", target.path),
        };
        let mut headers: Vec<(String, String)> = Vec::new();
        let has_content_type = extra.keys().any(|k| k.eq_ignore_ascii_case("content-type"));
        if !body.is_empty() && !has_content_type {
            headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        }
        headers.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut string_to_sign = None;
        if let Some((key, secret)) = app {
            let signed = sign_request(
                secret.as_bytes(),
                target.method.as_str(),
                &target.path,
                target.query.as_deref(),
                key,
                portico_control::clock::now_ms(),
                &nonce(),
                body,
            );
            for (name, value) in signed.pairs() {
                headers.push((name.to_owned(), value.to_owned()));
            }
            string_to_sign = Some(signed.string_to_sign.clone());
        }
        headers.push(("X-Portico-Request-Id".to_owned(), request_id.to_owned()));
        Outgoing {
            method: target.method.clone(),
            url,
            headers,
            app_key: app.map(|(k, _)| k.clone()),
            string_to_sign,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::parse_json;
    use serde_json::json;

    #[test]
    fn nonces_are_valid() {
        let n = nonce();
        assert!(portico_control::sign::valid_nonce(&n), "{n}");
    }

    #[test]
    fn reserved_headers() {
        assert!(reserved_header("X-Portico-Signature"));
        assert!(reserved_header("host"));
        assert!(!reserved_header("X-Demo-Delay-Ms"));
        assert!(!reserved_header("Content-Type"));
        let mut h = BTreeMap::new();
        h.insert("X-Demo".to_owned(), "1".to_owned());
        check_headers(&h).unwrap();
        h.insert("Connection".to_owned(), "close".to_owned());
        assert!(check_headers(&h).is_err());
    }

    #[test]
    fn call_requests_parse() {
        let (r, _) = parse_json::<CallRequest>(
            br#"{"api_id":"order.getorder","path":"/v1/orders/42?x=1","body":{"a":1},"headers":{"X-Demo":"1"}}"#,
            "call",
        )
        .unwrap();
        assert_eq!(r.api_id.as_deref(), Some("order.getorder"));
        assert_eq!(r.headers["X-Demo"], "1");
        let e = parse_json::<CallRequest>(br#"{"nope":1}"#, "call").unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
    }

    fn draft(method: &str, path: &str) -> v1::ApiDefinition {
        serde_json::from_value(json!({
            "id": "a", "http": {"method": method, "path": path},
            "backend": {"cluster": "c", "http": {}}
        }))
        .unwrap()
    }

    #[test]
    fn targets_come_from_the_request_then_the_draft() {
        let req = |v: Value| serde_json::from_value::<CallRequest>(v).unwrap();
        let d = draft("POST", "/v1/orders");
        let t = Target::of(&req(json!({})), Some(&d)).unwrap();
        assert_eq!(
            (t.method.as_str(), t.path.as_str(), t.query),
            ("POST", "/v1/orders", None)
        );
        let t = Target::of(&req(json!({"method": "get", "path": " /x?a=1 "})), Some(&d)).unwrap();
        assert_eq!((t.method.as_str(), t.path.as_str()), ("GET", "/x"));
        assert_eq!(t.query.as_deref(), Some("a=1"));
        let t = Target::of(
            &req(json!({"method": "GET", "path": "/x", "query": "?b=2"})),
            None,
        )
        .unwrap();
        assert_eq!(t.query.as_deref(), Some("b=2"));
        // A template with variables needs the path filled in.
        let templated = draft("GET", "/v1/orders/{id}");
        assert!(Target::of(&req(json!({})), Some(&templated)).is_err());
        assert!(
            Target::of(&req(json!({"path": "/x"})), None).is_err(),
            "no method"
        );
        assert!(
            Target::of(&req(json!({"method": "GET"})), None).is_err(),
            "no path"
        );
        assert!(Target::of(&req(json!({"method": "GET", "path": "x"})), None).is_err());
        assert!(Target::of(&req(json!({"method": "GET", "path": "/a b"})), None).is_err());
        assert!(Target::of(&req(json!({"method": "G ET", "path": "/a"})), None).is_err());
    }

    #[test]
    fn outgoing_requests_are_signed_over_what_is_sent() {
        let target = Target {
            method: reqwest::Method::POST,
            path: "/v1/orders".to_owned(),
            query: Some("b=2&a=1".to_owned()),
        };
        let body = body_bytes(Some(&json!({"qty": 2}))).unwrap();
        assert_eq!(body, br#"{"qty":2}"#);
        let app = ("merchant-1".to_owned(), "s3cr3t-value".to_owned());
        let out = Outgoing::new(
            &target,
            "127.0.0.1:9",
            &BTreeMap::new(),
            &body,
            Some(&app),
            "r-try",
        );
        assert_eq!(out.url, "http://127.0.0.1:9/v1/orders?b=2&a=1");
        let names: Vec<&str> = out.headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names.first(), Some(&"Content-Type"));
        assert_eq!(names.last(), Some(&"X-Portico-Request-Id"));
        let sts = out.string_to_sign.unwrap();
        assert!(
            sts.starts_with("POST\n/v1/orders\na=1&b=2\nmerchant-1\n"),
            "{sts}"
        );
        assert_eq!(out.app_key.as_deref(), Some("merchant-1"));
        // Unsigned: no signature headers.
        let out = Outgoing::new(&target, "h:1", &BTreeMap::new(), b"", None, "r");
        assert_eq!(out.headers.len(), 1);
        assert!(out.string_to_sign.is_none());
    }
}
