//! What a backend is told about a request, for HTTP backends (the request head, `http.rs`)
//! and gRPC backends (the metadata, `grpc.rs`) alike: one rule, so both kinds of backend see
//! the same identity and the same client address (docs/PROTOCOL.md, "What backends
//! receive"; docs/SECURITY.md, "Header hygiene towards backends").
//!
//! A client's headers are passed on, except:
//!
//! - hop-by-hop headers (`Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
//!   `Transfer-Encoding`, `Upgrade`, `Proxy-Authenticate`, `Proxy-Authorization`) and every
//!   header a `Connection` header names (RFC 9110 §7.6.1);
//! - `Host` (the HTTP relay names the cluster's host or the endpoint itself), and the headers
//!   some frameworks read as another method or target than the one the gateway routed and
//!   checked permissions for: `X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override`,
//!   `X-Original-URL`, `X-Rewrite-URL`;
//! - every `X-Portico-*` header: the gateway speaks for itself. The signature headers
//!   (`X-Portico-AppKey`, `-Timestamp`, `-Nonce`, `-Signature`) never leave the gateway (anyone
//!   who saw them could replay the call on another gateway node within the signature
//!   window); a client's `X-Portico-App` or `X-Portico-Request-Id` is replaced by the
//!   gateway's own. The same holds for `grpc-metadata-x-portico-*`, which would otherwise
//!   become `x-portico-*` metadata (dropped for HTTP backends too);
//! - headers about the client's connection that the gateway cannot vouch for: `Forwarded`
//!   (not read by the gateway) always; `X-Forwarded-For` always (rebuilt, below);
//!   `X-Forwarded-Proto`, `X-Forwarded-Host`, `X-Forwarded-Port`, `X-Real-IP` and the CDN
//!   client-address headers (`True-Client-IP`, `CF-Connecting-IP`, `X-Client-IP`,
//!   `X-Cluster-Client-IP`, `Fastly-Client-IP`) unless the peer is a trusted proxy
//!   (`ipacl.trusted_proxies`), whose word the gateway takes.
//!
//! And the gateway adds its own:
//!
//! - `X-Portico-Request-Id`: the request id (the client's, when well-formed);
//! - `X-Portico-App`: the app key auth verified, on signed calls only;
//! - `X-Forwarded-For`: the client address the gateway decided, then the trusted proxies
//!   between it and the gateway, ending with the peer (`192.0.2.7` from an untrusted peer;
//!   `192.0.2.7, 10.0.0.2` through the trusted proxy `10.0.0.2`): whatever a client wrote is
//!   never passed on, and the left-most address is always the client;
//! - `X-Forwarded-Proto`: `http` or `https`, the scheme the request reached the gateway on,
//!   or a trusted proxy's own `X-Forwarded-Proto` when it sent exactly one `http`/`https`.
//!
//! gRPC metadata is an allow-list, by grpc-gateway's convention (docs/PROTOCOL.md, "What
//! backends receive"): a client header
//! becomes metadata only when it is `grpc-metadata-<key>` (sent as `<key>`) or one of
//! [`ALLOWED_METADATA`] (credentials, trace context, `Accept-Language`), then filtered as
//! above; any other header (`X-Custom`, `Cookie`, `User-Agent`, ...) is not metadata. Reserved
//! `grpc-*` keys are left out (the gRPC client sets its own); so are values that are not
//! printable ASCII, except that `grpc-metadata-<key>-bin` carrying base64 is sent as binary
//! metadata `<key>-bin` (gRPC servers decode it); and the client's metadata is bounded in
//! total ([`METADATA_BUDGET`], 4 KiB: the allowed set first), so a backend with the common
//! 8 KiB limit never refuses a call for the gateway's metadata.

use crate::request_id;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

/// Backend response headers (and gRPC reply metadata) that tell what runs behind the gateway;
/// never passed back to the merchant (RFC 9110 §7.6.3 lets a gateway keep its hosts to
/// itself; docs/SECURITY.md, "Header hygiene towards backends").
pub const BACKEND_IDENTITY: &[&str] = &[
    "server",
    "x-powered-by",
    "x-aspnet-version",
    "x-aspnetmvc-version",
    "via",
];

/// The header carrying the app auth decided on.
pub use crate::model::APP_HEADER;

/// Headers that describe one hop: never forwarded.
// The names the gateway puts on every backend call, parsed at compile time.
const REQUEST_ID_NAME: HeaderName = HeaderName::from_static(request_id::HEADER);
const APP_NAME: HeaderName = HeaderName::from_static(APP_HEADER);
const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers the gateway frames itself (the body was read whole and is re-framed), and the
/// `Host` it names itself.
const FRAMING: &[&str] = &["content-length", "expect", "host"];

/// Headers that would let a client choose another method or target than the one the gateway
/// routed and checked permissions for, in frameworks that honour them.
const OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
];

/// Headers about the client's connection believed only from a trusted proxy.
const FROM_TRUSTED_PROXY: &[&str] = &[
    "x-forwarded-host",
    "x-forwarded-port",
    "x-real-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "fastly-client-ip",
];

/// Headers the gRPC client sets itself, or that mean nothing as metadata.
const NOT_METADATA: &[&str] = &[
    "host",
    "content-type",
    "content-encoding",
    "accept-encoding",
    "user-agent",
];

/// What the gateway decided about a request: who is calling, from where, and its id.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub request_id: &'a str,
    /// The app key auth verified (a signed call); `None` on an `auth: none` API.
    pub app_key: Option<&'a str>,
    /// The client's address after trusted-proxy resolution.
    pub client_ip: Option<IpAddr>,
    /// The trusted proxies between the client and the gateway, left to right, ending with
    /// the peer; empty when the peer is the client.
    pub proxies: &'a [IpAddr],
    /// Whether the peer is a trusted proxy.
    pub peer_trusted: bool,
    /// The scheme the request reached the gateway on: `http` or `https`.
    pub scheme: &'static str,
}

impl<'a> Caller<'a> {
    /// A caller known only by its request id (no app, no address, plain HTTP).
    pub fn new(request_id: &'a str) -> Self {
        Caller {
            request_id,
            app_key: None,
            client_ip: None,
            proxies: &[],
            peer_trusted: false,
            scheme: "http",
        }
    }
}

/// Which backend the headers are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// An HTTP backend: the request's headers (without framing ones; the caller adds
    /// `Content-Length` and, when missing, `Host`).
    Http,
    /// A gRPC backend: request metadata.
    Grpc,
}

/// The headers (HTTP) or metadata (gRPC) a backend receives for a request that arrived with
/// `headers`, by the rule of the module docs.
pub fn backend_headers(headers: &HeaderMap, caller: &Caller<'_>, target: Target) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len() + 4);
    each_backend_header(headers, caller, target, |name, value| {
        out.append(name, value);
    });
    out
}

/// Hands the headers (HTTP) or metadata (gRPC) a backend receives to `put`, one by one, by
/// the rule of the module docs: the client's that pass, then the gateway's own. Each name
/// comes once, except a client's repeated header, so `put` may append. The HTTP relay
/// writes them straight into the upstream request head (no intermediate map).
pub fn each_backend_header(
    headers: &HeaderMap,
    caller: &Caller<'_>,
    target: Target,
    mut put: impl FnMut(HeaderName, HeaderValue),
) {
    let named = named_by_connection(headers);
    match target {
        Target::Http => {
            for (name, value) in headers {
                if !dropped(name, caller, &named) {
                    put(name.clone(), value.clone());
                }
            }
        }
        Target::Grpc => client_metadata(headers, caller, &named, &mut put),
    }
    // The client's own versions of these were dropped above: each is put once.
    if let Ok(mut v) = HeaderValue::from_str(caller.request_id) {
        // Unique to each call: over HTTP/2 (gRPC) never indexed by HPACK, so the constant
        // metadata stays in the connection's header table (grpc_client.rs, `grpc_timeout`);
        // HTTP/1 ignores the mark.
        v.set_sensitive(true);
        put(REQUEST_ID_NAME, v);
    }
    if let Some(v) = caller.app_key.and_then(|k| HeaderValue::from_str(k).ok()) {
        put(APP_NAME, v);
    }
    if let Some(v) = forwarded_for(caller) {
        put(FORWARDED_FOR, v);
    }
    let proto = caller
        .peer_trusted
        .then(|| proxy_proto(headers))
        .flatten()
        .unwrap_or(caller.scheme);
    put(FORWARDED_PROTO, HeaderValue::from_static(proto));
}

/// The most client metadata a gRPC backend receives, in bytes as HPACK and gRPC servers
/// count a header list (name + value + 32 per entry): half of the 8 KiB that grpc-core
/// (grpcio), grpc-go and grpc-java accept by default, leaving room for the gateway's own
/// metadata (under 300 bytes) and the call's pseudo-headers. The gateway accepts 32 KiB of
/// request headers; without this bound a request with more than 8 KiB of them was refused at
/// random by the backend (`RESOURCE_EXHAUSTED`).
pub const METADATA_BUDGET: usize = 4096;

/// The client headers that become gRPC metadata under their own name, besides every
/// `grpc-metadata-*` (docs/PROTOCOL.md, "What backends receive"): credentials, trace context
/// (W3C, B3, the clouds') and the client's language. They go first, so the budget never
/// crowds them out.
pub const ALLOWED_METADATA: &[&str] = &[
    "accept-language",
    "authorization",
    "traceparent",
    "tracestate",
    "baggage",
    "b3",
    "x-b3-traceid",
    "x-b3-spanid",
    "x-b3-parentspanid",
    "x-b3-sampled",
    "x-b3-flags",
    "x-request-id",
    "x-cloud-trace-context",
    "x-amzn-trace-id",
];

/// The client's headers that become gRPC metadata (see the module docs): first those of
/// [`ALLOWED_METADATA`], then the `grpc-metadata-*` ones, in the request's order, each while
/// it fits in [`METADATA_BUDGET`] (one that does not is left out, a later smaller one may
/// still go). A value that is not printable ASCII (gRPC's ASCII-Value, 0x20-0x7E) is left
/// out (grpc-js drops such metadata silently, other stacks refuse it), and a `-bin` key's
/// value must be base64.
fn client_metadata(
    headers: &HeaderMap,
    caller: &Caller<'_>,
    named: &[HeaderName],
    put: &mut impl FnMut(HeaderName, HeaderValue),
) {
    let mut budget = METADATA_BUDGET;
    let mut prefixed_seen = false;
    for allowed_pass in [true, false] {
        if !allowed_pass && !prefixed_seen {
            break;
        }
        for (name, value) in headers {
            let prefixed = name.as_str().starts_with("grpc-metadata-");
            prefixed_seen |= prefixed;
            if prefixed == allowed_pass {
                continue;
            }
            let Some(key) = metadata_key(name) else {
                continue;
            };
            if !prefixed && !ALLOWED_METADATA.contains(&key.as_str()) {
                continue;
            }
            let valid = if key.as_str().ends_with("-bin") {
                is_base64(value.as_bytes())
            } else {
                value.as_bytes().iter().all(|b| (0x20..=0x7e).contains(b))
            };
            if !valid || dropped(&key, caller, named) || NOT_METADATA.contains(&key.as_str()) {
                continue;
            }
            let size = key.as_str().len() + value.len() + 32;
            if size > budget {
                continue;
            }
            budget -= size;
            put(key, value.clone());
        }
    }
}

/// Whether a client header `name` is never passed on (see the module docs).
fn dropped(name: &HeaderName, caller: &Caller<'_>, named: &[HeaderName]) -> bool {
    let n = name.as_str();
    // `grpc-metadata-x-portico-*` is refused on HTTP backends too: a backend behind both
    // kinds of API must not see it once as a header and once as metadata.
    let bare = n.strip_prefix("grpc-metadata-").unwrap_or(n);
    HOP_BY_HOP.contains(&n)
        || FRAMING.contains(&n)
        || OVERRIDES.contains(&n)
        || bare.starts_with("x-portico-")
        || matches!(n, "forwarded" | "x-forwarded-for" | "x-forwarded-proto")
        || (!caller.peer_trusted && FROM_TRUSTED_PROXY.contains(&n))
        || named.contains(name)
}

/// The metadata key a request header becomes: `grpc-metadata-<key>` → `<key>`; reserved
/// `grpc-*` keys → `None`, and so is a binary (`-bin`) key not sent as `grpc-metadata-*`.
fn metadata_key(name: &HeaderName) -> Option<HeaderName> {
    let n = name.as_str();
    let (key, prefixed) = match n.strip_prefix("grpc-metadata-") {
        Some(rest) => (HeaderName::from_bytes(rest.as_bytes()).ok()?, true),
        None if n.starts_with("grpc-") => return None,
        None => (name.clone(), false),
    };
    let k = key.as_str();
    if k.starts_with("grpc-") || (k.ends_with("-bin") && !prefixed) || k == "-bin" {
        return None;
    }
    Some(key)
}

/// Whether `v` is base64 (standard alphabet, padding optional), as gRPC's binary metadata
/// values are sent.
fn is_base64(v: &[u8]) -> bool {
    let body = v
        .strip_suffix(b"==")
        .or_else(|| v.strip_suffix(b"="))
        .unwrap_or(v);
    !v.is_empty()
        && (body.len() % 4) != 1
        && (v.len() == body.len() || v.len().is_multiple_of(4))
        && body
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/'))
}

/// The headers named by the request's `Connection` header(s) that it carries. Linear in the
/// `Connection` values: each token is looked up in `headers` once.
fn named_by_connection(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut named: Vec<HeaderName> = Vec::new();
    for value in headers.get_all(http::header::CONNECTION) {
        for token in value.as_bytes().split(|&b| b == b',') {
            let Ok(name) = HeaderName::from_bytes(token.trim_ascii()) else {
                continue;
            };
            if headers.contains_key(&name) && !named.contains(&name) {
                named.push(name);
            }
        }
    }
    named
}

/// `client, proxy, ..., peer`, or `None` when the client's address is unknown.
fn forwarded_for(caller: &Caller<'_>) -> Option<HeaderValue> {
    let client = caller.client_ip?;
    let mut s = client.to_string();
    for hop in caller.proxies {
        s.push_str(", ");
        s.push_str(&hop.to_string());
    }
    HeaderValue::from_str(&s).ok()
}

/// A trusted proxy's `X-Forwarded-Proto`, when it sent exactly one `http` or `https`.
fn proxy_proto(headers: &HeaderMap) -> Option<&'static str> {
    let mut values = headers.get_all("x-forwarded-proto").iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let v = value.as_bytes().trim_ascii();
    if v.eq_ignore_ascii_case(b"https") {
        Some("https")
    } else if v.eq_ignore_ascii_case(b"http") {
        Some("http")
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    fn all<'h>(h: &'h HeaderMap, name: &str) -> Vec<&'h str> {
        h.get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// What a forging client sends, besides its own business headers.
    fn forged() -> HeaderMap {
        headers(&[
            ("x-portico-app", b"admin"),
            ("x-portico-appkey", b"merchant-1"),
            ("x-portico-timestamp", b"1796000000000"),
            ("x-portico-nonce", b"n0nce-0001"),
            ("x-portico-signature", b"abc"),
            ("x-portico-request-id", b"spoofed"),
            ("x-portico-anything", b"x"),
            ("grpc-metadata-x-portico-app", b"admin"),
            ("grpc-metadata-x-portico-appkey", b"other"),
            ("grpc-metadata-x-forwarded-for", b"6.6.6.6"),
            ("x-forwarded-for", b"6.6.6.6"),
            ("x-forwarded-proto", b"https"),
            ("x-forwarded-host", b"evil.example"),
            ("x-real-ip", b"6.6.6.6"),
            ("true-client-ip", b"6.6.6.6"),
            ("forwarded", b"for=6.6.6.6;proto=https"),
            ("connection", b"keep-alive, X-Secret, x-gone"),
            ("x-secret", b"hop"),
            ("keep-alive", b"timeout=5"),
            ("te", b"trailers"),
            ("content-length", b"7"),
            ("accept", b"application/json"),
            ("host", b"api.example"),
            ("x-http-method-override", b"DELETE"),
            ("X-HTTP-Method", b"DELETE"),
            ("x-method-override", b"DELETE"),
            ("x-original-url", b"/admin/drop"),
            ("x-rewrite-url", b"/admin/drop"),
            ("x-tenant", b"t1"),
            ("grpc-metadata-tenant", b"t2"),
            ("grpc-timeout", b"1S"),
            ("trace-bin", b"AAAA"),
        ])
    }

    fn signed_caller<'a>(proxies: &'a [IpAddr], trusted: bool) -> Caller<'a> {
        Caller {
            request_id: "rid-1",
            app_key: Some("merchant-1"),
            client_ip: Some(ip("192.0.2.7")),
            proxies,
            peer_trusted: trusted,
            scheme: "http",
        }
    }

    #[test]
    fn an_http_backend_sees_only_what_the_gateway_decided() {
        let h = backend_headers(&forged(), &signed_caller(&[], false), Target::Http);
        for gone in [
            "x-portico-appkey",
            "x-portico-timestamp",
            "x-portico-nonce",
            "x-portico-signature",
            "x-portico-anything",
            "x-forwarded-host",
            "x-real-ip",
            "true-client-ip",
            "forwarded",
            "connection",
            "x-secret",
            "keep-alive",
            "te",
            "content-length",
            "host",
            "x-http-method-override",
            "x-http-method",
            "x-method-override",
            "x-original-url",
            "x-rewrite-url",
        ] {
            assert!(all(&h, gone).is_empty(), "{gone} was forwarded: {h:?}");
        }
        assert_eq!(all(&h, "x-portico-app"), ["merchant-1"]);
        assert_eq!(all(&h, "x-portico-request-id"), ["rid-1"]);
        assert_eq!(all(&h, "x-forwarded-for"), ["192.0.2.7"]);
        assert_eq!(all(&h, "x-forwarded-proto"), ["http"]);
        assert_eq!(all(&h, "accept"), ["application/json"]);
        assert_eq!(all(&h, "x-tenant"), ["t1"]);
        // Not a gRPC backend: grpc-metadata-* headers are just headers, but never ours.
        assert_eq!(all(&h, "grpc-metadata-tenant"), ["t2"]);
        assert!(all(&h, "grpc-metadata-x-portico-app").is_empty());
        // No app on an `auth: none` API: no X-Portico-App at all, whatever the client sent.
        let anonymous = Caller {
            app_key: None,
            ..signed_caller(&[], false)
        };
        let h = backend_headers(&forged(), &anonymous, Target::Http);
        assert!(all(&h, "x-portico-app").is_empty(), "{h:?}");
    }

    #[test]
    fn a_grpc_backend_gets_the_same_rule_as_metadata() {
        let h = backend_headers(&forged(), &signed_caller(&[], false), Target::Grpc);
        assert_eq!(all(&h, "x-portico-app"), ["merchant-1"]);
        assert!(all(&h, "x-portico-appkey").is_empty(), "{h:?}");
        assert!(all(&h, "x-portico-signature").is_empty());
        assert_eq!(all(&h, "x-portico-request-id"), ["rid-1"]);
        // Unique per call: never indexed by HPACK.
        assert!(h["x-portico-request-id"].is_sensitive());
        assert_eq!(all(&h, "x-forwarded-for"), ["192.0.2.7"]);
        // An allow-list: a plain header is not metadata, grpc-metadata-* is.
        assert!(all(&h, "x-tenant").is_empty(), "{h:?}");
        assert!(all(&h, "accept").is_empty(), "{h:?}");
        assert_eq!(all(&h, "tenant"), ["t2"]);
        for gone in [
            "host",
            "x-http-method-override",
            "x-original-url",
            "grpc-timeout",
            "trace-bin",
            "connection",
            "x-secret",
            "content-length",
            "grpc-metadata-tenant",
            "forwarded",
        ] {
            assert!(all(&h, gone).is_empty(), "{gone}: {h:?}");
        }
    }

    /// The size of `h` as HPACK and gRPC servers count a header list.
    fn list_size(h: &HeaderMap) -> usize {
        h.iter().map(|(k, v)| k.as_str().len() + v.len() + 32).sum()
    }

    #[test]
    fn grpc_metadata_is_bounded_with_credentials_and_trace_context_first() {
        let filler = vec![b'f'; 1000];
        let mut pairs: Vec<(String, Vec<u8>)> = (0..12)
            .map(|i| (format!("x-custom-{i}"), filler.clone()))
            .collect();
        // Preferred ones come last in the request, and still go.
        pairs.push(("authorization".into(), b"Bearer abc".to_vec()));
        pairs.push((
            "traceparent".into(),
            b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_vec(),
        ));
        pairs.push(("grpc-metadata-tenant".into(), b"t9".to_vec()));
        let refs: Vec<(&str, &[u8])> = pairs.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
        let request = headers(&refs);
        assert!(list_size(&request) > 12 * 1024);
        let h = backend_headers(&request, &signed_caller(&[], false), Target::Grpc);
        assert_eq!(all(&h, "authorization"), ["Bearer abc"]);
        assert_eq!(all(&h, "tenant"), ["t9"]);
        assert_eq!(all(&h, "traceparent").len(), 1);
        let custom = (0..12)
            .filter(|i| h.contains_key(format!("x-custom-{i}").as_str()))
            .count();
        assert_eq!(custom, 0, "not on the allow-list: {h:?}");
        // Sent as grpc-metadata-*, as many as fit.
        let prefixed: Vec<(String, Vec<u8>)> = pairs
            .iter()
            .map(|(k, v)| match k.strip_prefix("x-custom-") {
                Some(i) => (format!("grpc-metadata-x-custom-{i}"), v.clone()),
                None => (k.clone(), v.clone()),
            })
            .collect();
        let refs: Vec<(&str, &[u8])> = prefixed.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
        let h = backend_headers(&headers(&refs), &signed_caller(&[], false), Target::Grpc);
        assert_eq!(all(&h, "authorization"), ["Bearer abc"]);
        assert_eq!(all(&h, "traceparent").len(), 1);
        let custom = (0..12)
            .filter(|i| h.contains_key(format!("x-custom-{i}").as_str()))
            .count();
        assert_eq!(custom, 3, "as many as fit: {h:?}");
        let client: usize = h
            .iter()
            .filter(|(k, _)| {
                !k.as_str().starts_with("x-portico-") && !k.as_str().starts_with("x-forwarded-")
            })
            .map(|(k, v)| k.as_str().len() + v.len() + 32)
            .sum();
        assert!(client <= METADATA_BUDGET, "{client}");
        // The whole list, the gateway's own included, stays far under the common 8 KiB.
        assert!(list_size(&h) < 4096 + 512, "{}", list_size(&h));
        // HTTP backends get every header, as before.
        let h = backend_headers(&request, &signed_caller(&[], false), Target::Http);
        assert_eq!(
            (0..12)
                .filter(|i| h.contains_key(format!("x-custom-{i}").as_str()))
                .count(),
            12
        );
    }

    #[test]
    fn non_ascii_values_are_never_metadata_and_binary_goes_as_base64() {
        let request = headers(&[
            ("grpc-metadata-x-city", "Zürich".as_bytes()),
            ("grpc-metadata-x-tab", b"a\tb"),
            ("grpc-metadata-x-plain", b"ok value ~"),
            ("grpc-metadata-trace-bin", b"AAECAw=="),
            ("grpc-metadata-raw-bin", b"AAEC Aw"),
            ("grpc-metadata-unpadded-bin", b"AAECAw"),
            ("plain-bin", b"AAECAw=="),
            ("x-city", "Zürich".as_bytes()),
        ]);
        let h = backend_headers(&request, &signed_caller(&[], false), Target::Grpc);
        assert!(all(&h, "x-city").is_empty(), "{h:?}");
        assert!(all(&h, "x-tab").is_empty(), "{h:?}");
        assert_eq!(all(&h, "x-plain"), ["ok value ~"]);
        assert_eq!(all(&h, "trace-bin"), ["AAECAw=="]);
        assert_eq!(all(&h, "unpadded-bin"), ["AAECAw"]);
        assert!(all(&h, "raw-bin").is_empty(), "not base64: {h:?}");
        assert!(
            all(&h, "plain-bin").is_empty(),
            "not grpc-metadata-*: {h:?}"
        );
        for (v, ok) in [
            (&b"AAECAw=="[..], true),
            (b"AAECAw", true),
            (b"AAECAwQ", true),
            (b"AAECA", false),
            (b"A", false),
            (b"AAECAw=", false),
            (b"", false),
            (b"AA-_", false),
        ] {
            assert_eq!(is_base64(v), ok, "{}", String::from_utf8_lossy(v));
        }
        // An HTTP backend still gets them (header hygiene is not the metadata rule).
        let h = backend_headers(&request, &signed_caller(&[], false), Target::Http);
        assert_eq!(h["x-city"].as_bytes(), "Zürich".as_bytes());
    }

    #[test]
    fn a_trusted_proxy_is_believed_about_the_connection() {
        let proxies = [ip("10.0.0.2"), ip("10.0.0.1")];
        let h = backend_headers(&forged(), &signed_caller(&proxies, true), Target::Http);
        assert_eq!(
            all(&h, "x-forwarded-for"),
            ["192.0.2.7, 10.0.0.2, 10.0.0.1"]
        );
        assert_eq!(all(&h, "x-forwarded-proto"), ["https"]);
        assert_eq!(all(&h, "x-forwarded-host"), ["evil.example"]);
        assert_eq!(all(&h, "x-real-ip"), ["6.6.6.6"]);
        // Still never: Forwarded, or the gateway's own headers.
        assert!(all(&h, "forwarded").is_empty());
        assert_eq!(all(&h, "x-portico-app"), ["merchant-1"]);
        // A proxy's proto other than one http/https: the gateway's own.
        let odd = headers(&[
            ("x-forwarded-proto", b"https"),
            ("x-forwarded-proto", b"http"),
        ]);
        let h = backend_headers(&odd, &signed_caller(&proxies, true), Target::Http);
        assert_eq!(all(&h, "x-forwarded-proto"), ["http"]);
        let h = backend_headers(
            &headers(&[("x-forwarded-proto", b"gopher")]),
            &Caller {
                scheme: "https",
                ..signed_caller(&proxies, true)
            },
            Target::Http,
        );
        assert_eq!(all(&h, "x-forwarded-proto"), ["https"]);
    }

    #[test]
    fn connection_tokens_are_matched_case_insensitively_and_once() {
        let long = format!("{}x-a", "x-none, ".repeat(2000));
        let h = headers(&[
            ("connection", long.as_bytes()),
            ("Connection", b"X-B"),
            ("x-a", b"1"),
            ("x-b", b"2"),
            ("x-c", b"3"),
        ]);
        assert_eq!(named_by_connection(&h).len(), 2);
        let out = backend_headers(&h, &Caller::new("r"), Target::Http);
        assert!(all(&out, "x-a").is_empty() && all(&out, "x-b").is_empty());
        assert_eq!(all(&out, "x-c"), ["3"]);
        // No address known: no X-Forwarded-For at all.
        assert!(all(&out, "x-forwarded-for").is_empty());
    }
}
