//! `cache`: the response cache and hot-key counting, the edge stage after `degrade`
//! (docs/ARCHITECTURE.md, "The response cache"; docs/operations/caching.md, "Caching and hot keys").
//!
//! It runs only for APIs with `policy.cache` or `policy.hot_keys`. Because it comes after
//! `auth`, `permit`, `rate_limit` and `degrade`, a cached answer is still signed for,
//! permitted and counted against limits, and a degraded API never answers from it.
//!
//! A request is cacheable when it is a `GET` (or a router-style call of an API with
//! `"read_only": true`) and the API caches its key: every key under a `policy.cache` with
//! `ttl_ms > 0`, or a key the hot-key detector finds hot on an API that opted in to automatic
//! caching (`read_only: true` and an explicit `hot_keys.auto_cache_ms`; validation leaves
//! `auto_cache_ms` at 0 otherwise). A fresh entry answers at once (`X-Portico-Cache: HIT`),
//! or 304 with an empty body when `If-None-Match` names its `ETag`. Otherwise the stage leaves
//! a [`CacheTicket`] in the context. For a cacheable request the invoke tier reads a 200
//! answer whole (up to `max_body_bytes`, with a `Content-Length`); [`CacheStage::finish`]
//! then stores it, unless it says `Cache-Control: no-store|private`, sets a cookie or says
//! `Vary: *`, and adds `ETag` and `X-Portico-Cache: MISS`. Anything else is streamed like any
//! proxied answer, marked `BYPASS`, with no `ETag` (an answer that is not cacheable carries
//! none), and only its byte count reaches the detector, at the end of the stream.
//!
//! For whom an entry is made (docs/SECURITY.md, "Trust between merchants"): the key
//! ([`cache_key`]) always holds the verified app, unless the API is `auth: none` or its
//! cache says `"shared": true`; the path as sent and the whole canonical query (or the
//! parameters `policy.cache.query` names); for a router-style call, the whole JSON body in
//! canonical form (or the fields named) in place of path and query; the values of the key
//! selectors; and a client's `Authorization` and `Cookie`. An answer with `Vary` is stored
//! under the base key plus the named request headers' values, with a marker under the base
//! key naming them; a header the gateway itself sets towards the backend is read as the
//! gateway set it (`X-Portico-App`: the verified app; `X-Forwarded-For`, `X-Real-IP`: the
//! client address), and one that is unique per call (`X-Portico-Request-Id`) makes the
//! answer not storable.
//!
//! The per-request work for a key that is not hot is kept small: the detector's key is a
//! hash of the selector values (no string is built), and the cache key is built only for a
//! cacheable request.
//!
//! Each API's cache is [`SHARDS`] mutex-guarded shards, each holding at most
//! `max_entries / SHARDS` (at least 1) entries and evicting the oldest first, so an API's
//! cache holds at most `max_entries` bodies of at most `max_body_bytes` each, plus keys of at
//! most [`hot_keys::MAX_KEY_BYTES`]. Caches and detectors are carried across reloads while
//! the API's definition is unchanged.

use crate::edge::cache_key::KeyWriter;
use crate::edge::hot_keys::Detector;
use crate::edge::{keys, Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::GatewayError;
use crate::model::{Response, Whole};
use bytes::Bytes;
use http::HeaderMap;
use portico_control::{v1, HotPolicy, Snapshot};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::hash::Hasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::cache_store::Entry;
pub use super::cache_store::{ApiCache, ApiHot, CacheTicket, HotState, SHARDS};
pub use crate::model::CACHE_HEADER;
/// Largest body read whole for an API with only a hot-key policy.
const HOT_ONLY_MAX_BODY: usize = portico_control::validate::DEFAULT_CACHE_BODY_BYTES as usize;

/// The response cache stage.
#[derive(Debug, Default)]
pub struct CacheStage {
    apis: HashMap<String, Arc<ApiHot>, foldhash::quality::RandomState>,
}

impl Stage for CacheStage {
    /// Reload phase: one cache (and detector) per API with a cache or hot-key policy, taken
    /// from `carried` when the API's definition is unchanged, new otherwise.
    fn build(snapshot: &Snapshot, carried: &Carried) -> Self {
        let now = portico_control::clock::now_ms();
        let Ok(mut kept) = carried.hot.apis.lock() else {
            return CacheStage::default();
        };
        let mut apis = HashMap::with_capacity_and_hasher(snapshot.hot.len(), Default::default());
        for (id, policy) in &snapshot.hot {
            let Some(api) = snapshot.apis.get(id) else {
                continue;
            };
            let reuse = kept
                .get(id)
                .filter(|(def, _)| *def == api.definition)
                .map(|(_, hot)| hot.clone());
            let hot = reuse.unwrap_or_else(|| {
                let max_entries = policy.cache.as_ref().map_or(
                    portico_control::validate::DEFAULT_CACHE_ENTRIES as usize,
                    |c| c.max_entries,
                );
                Arc::new(ApiHot {
                    id: id.clone(),
                    policy: policy.clone(),
                    cache: ApiCache::new(max_entries),
                    detector: policy.hot_keys.clone().map(|s| Detector::new(s, now)),
                    hits: AtomicU64::new(0),
                    misses: AtomicU64::new(0),
                    bypasses: AtomicU64::new(0),
                })
            });
            apis.insert(id.clone(), hot);
        }
        *kept = apis
            .iter()
            .filter_map(|(id, hot)| {
                let def = snapshot.apis.get(id)?.definition.clone();
                Some((id.clone(), (def, hot.clone())))
            })
            .collect();
        CacheStage { apis }
    }

    fn name(&self) -> &'static str {
        "cache"
    }

    /// Request phase, after `degrade`. `Continue`: no cache or hot-key policy, or no fresh
    /// entry (a [`CacheTicket`] is left in `ctx.cache`); `Respond`: the cached answer
    /// (`X-Portico-Cache: HIT`), or 304 when `If-None-Match` names its `ETag`.
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow {
        let Some(route) = ctx.route.as_ref() else {
            return Flow::Continue;
        };
        let Some(hot) = self.apis.get(&route.api.id) else {
            return Flow::Continue;
        };
        let policy = &hot.policy;
        let tally = match (&hot.detector, &policy.hot_keys) {
            (Some(d), Some(h)) => {
                let mut hasher = d.hasher();
                keys::hash_into(&h.key, req, ctx, &mut hasher);
                d.record(
                    hasher.finish(),
                    || keys::key_of(&h.key, req, ctx),
                    req.now_ms,
                )
            }
            _ => None,
        };
        let cacheable_method = req.method == "GET" || (route.router_style && policy.read_only);
        let ttl_ms = match (&policy.cache, &policy.hot_keys, &hot.detector, tally) {
            _ if !cacheable_method => 0,
            (Some(c), _, _, _) if c.ttl_ms > 0 => c.ttl_ms,
            (Some(_), _, _, _) => 0,
            (None, Some(h), Some(d), Some(t)) if d.is_hot(t.hash) => h.auto_cache_ms,
            _ => 0,
        };
        let mut key = String::new();
        let mut if_none_match = None;
        if ttl_ms > 0 {
            key = cache_key(policy, req, ctx);
            if_none_match = req
                .headers
                .get(http::header::IF_NONE_MATCH)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let found = hot.cache.get(&key, req.now_ms).and_then(|e| match &e.vary {
                None => Some(e),
                Some(names) => {
                    let varied = varied_key(
                        &key,
                        names,
                        req.headers,
                        ctx.app_key.as_deref(),
                        client(req, ctx),
                    )?;
                    hot.cache
                        .get(&varied, req.now_ms)
                        .filter(|e| e.vary.is_none())
                }
            });
            if let Some(entry) = found {
                hot.hits.fetch_add(1, Ordering::Relaxed);
                return Flow::Respond(Ok(Response::Whole(answer(
                    &entry,
                    "HIT",
                    if_none_match.as_deref(),
                    req.now_ms,
                ))));
            }
        }
        let max_body = policy
            .cache
            .as_ref()
            .map_or(HOT_ONLY_MAX_BODY, |c| c.max_body_bytes);
        ctx.cache = Some(CacheTicket {
            api: hot.clone(),
            key,
            tally,
            ttl_ms,
            max_body,
            if_none_match,
            app: if ttl_ms > 0 {
                ctx.app_key.clone()
            } else {
                None
            },
            client_ip: client(req, ctx),
        });
        Flow::Continue
    }
}

impl CacheStage {
    /// After the invoke tier, for a request [`CacheStage::apply`] let through: counts the
    /// answer's bytes for the hot-key detector (`streamed_bytes` for an answer streamed by the
    /// invoke tier, the body of a whole one), stores a cacheable 200 answer, and marks the
    /// answer `MISS` (stored, with its `ETag`; 304 when `If-None-Match` names it) or
    /// `BYPASS`. A streamed answer was marked `BYPASS` by the invoke tier.
    pub fn finish(
        &self,
        ticket: Option<CacheTicket>,
        result: Result<Response, GatewayError>,
        streamed_bytes: u64,
        now_ms: u64,
        request_headers: &HeaderMap,
    ) -> Result<Response, GatewayError> {
        let Some(ticket) = ticket else {
            return result;
        };
        let detector = ticket.api.detector.as_ref().zip(ticket.tally);
        let Ok(Response::Whole(mut whole)) = result else {
            // Streamed, whole or in part (a failure half-way still sent those bytes).
            if let Some((d, tally)) = detector.filter(|_| streamed_bytes > 0) {
                d.add_bytes(tally, streamed_bytes);
            }
            if matches!(result, Ok(Response::Streamed(_))) {
                ticket.api.bypasses.fetch_add(1, Ordering::Relaxed);
            }
            return result;
        };
        if let Some((d, tally)) = detector {
            d.add_bytes(tally, whole.body.len() as u64);
        }
        let ttl_ms = ticket.ttl_ms;
        let vary = vary_names(&whole.headers);
        // The key an answer that varies is stored under; `None`: it varies by something
        // unique to each call.
        let varied = match &vary {
            None => Some(None),
            Some(names) => varied_key(
                &ticket.key,
                names,
                request_headers,
                ticket.app.as_deref(),
                ticket.client_ip,
            )
            .map(Some),
        };
        if ttl_ms == 0
            || whole.status != 200
            || whole.body.len() > ticket.max_body
            || !storable(&whole.headers)
            || varied.is_none()
        {
            whole
                .headers
                .push((CACHE_HEADER.to_owned(), "BYPASS".to_owned()));
            ticket.api.bypasses.fetch_add(1, Ordering::Relaxed);
            return Ok(Response::Whole(whole));
        }
        let headers: Vec<(String, String)> = whole
            .headers
            .into_iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("etag"))
            .collect();
        let entry = Entry {
            headers,
            etag: etag_of(&whole.body),
            body: whole.body,
            stored_ms: now_ms,
            expires_ms: now_ms.saturating_add(ttl_ms),
            seq: 0,
            vary: None,
        };
        let out = answer(&entry, "MISS", ticket.if_none_match.as_deref(), now_ms);
        match (varied.flatten(), vary) {
            (Some(varied), Some(names)) => {
                let marker = Entry {
                    headers: Vec::new(),
                    body: Bytes::new(),
                    etag: String::new(),
                    stored_ms: now_ms,
                    expires_ms: entry.expires_ms,
                    seq: 0,
                    vary: Some(names),
                };
                ticket.api.cache.put(ticket.key, marker);
                ticket.api.cache.put(varied, entry);
            }
            _ => ticket.api.cache.put(ticket.key, entry),
        }
        ticket.api.misses.fetch_add(1, Ordering::Relaxed);
        Ok(Response::Whole(out))
    }

    /// The APIs with a cache or hot-key policy, for `/status` and `/metrics`.
    pub fn apis(&self) -> impl Iterator<Item = &Arc<ApiHot>> {
        self.apis.values()
    }
}

/// The stored headers a 304 repeats (RFC 9110 §15.4.5: those a 200 would have carried that
/// describe the representation's caching).
const NOT_MODIFIED_HEADERS: &[&str] = &[
    "cache-control",
    "content-location",
    "date",
    "expires",
    "vary",
];

/// A cached answer as sent at `now_ms`: its headers, `ETag`, `X-Portico-Cache` and, from the
/// cache (`how` = HIT), `Age` in seconds since it was stored (RFC 9111 §5.1); 304 with an
/// empty body and the caching headers when `if_none_match` names the entry's `ETag`.
fn answer(entry: &Entry, how: &str, if_none_match: Option<&str>, now_ms: u64) -> Whole {
    let mut headers = Vec::with_capacity(entry.headers.len() + 3);
    let not_modified = if_none_match.is_some_and(|inm| etag_matches(inm, &entry.etag));
    if not_modified {
        headers.extend(
            entry
                .headers
                .iter()
                .filter(|(k, _)| {
                    NOT_MODIFIED_HEADERS
                        .iter()
                        .any(|n| k.eq_ignore_ascii_case(n))
                })
                .cloned(),
        );
    } else {
        headers.extend(entry.headers.iter().cloned());
    }
    headers.push(("etag".to_owned(), entry.etag.clone()));
    if how == "HIT" {
        let age = now_ms.saturating_sub(entry.stored_ms) / 1000;
        headers.push(("age".to_owned(), age.to_string()));
    }
    headers.push((CACHE_HEADER.to_owned(), how.to_owned()));
    if not_modified {
        return Whole {
            status: 304,
            headers,
            body: Bytes::new(),
        };
    }
    Whole {
        status: 200,
        headers,
        body: entry.body.clone(),
    }
}

/// The client address the gateway decided (what `X-Forwarded-For` starts with).
fn client(req: &EdgeRequest<'_>, ctx: &EdgeCtx) -> Option<IpAddr> {
    ctx.client_ip.or(req.peer)
}

/// The cache key of a cacheable request (see the module docs for its parts and
/// docs/operations/caching.md, "Caching and hot keys"), encoded by [`KeyWriter`].
pub fn cache_key(policy: &HotPolicy, req: &EdgeRequest<'_>, ctx: &EdgeCtx) -> String {
    let mut k = KeyWriter::new();
    let Some(route) = ctx.route.as_ref() else {
        return k.finish();
    };
    let spec = policy.cache.as_ref();
    let names = spec.and_then(|c| c.query.as_deref());
    let binding = route.binding.map(|b| b.to_string());
    k.part(b'b', Some(binding.as_deref().unwrap_or("router")));
    let shared = spec.is_some_and(|c| c.shared) || route.api.auth == v1::AuthMode::None;
    k.part(b'a', if shared { None } else { ctx.app_key.as_deref() });
    if route.router_style {
        // The request is the body: the whole of it, or the fields named.
        let body = keys::router_body(req, ctx);
        match (names, body) {
            (None, Some(json)) => k.part(b'j', Some(&json.to_string())),
            (None, None) => k.part(b'r', Some(&hex::encode(Sha256::digest(req.body)))),
            (Some(names), _) => {
                for name in names {
                    k.part(b'n', Some(name));
                    let v = body.and_then(|b| keys::body_field(b, name));
                    k.part(b'f', v.as_deref());
                }
            }
        }
    } else {
        k.part(b'p', Some(req.path));
        let query = req.query.unwrap_or("");
        match names {
            None => k.part(b'q', Some(&portico_control::sign::canonical_query(query))),
            Some(names) => {
                for name in names {
                    k.part(b'n', Some(name));
                    let values = keys::query_values(query, name);
                    k.part(b'c', Some(&values.len().to_string()));
                    for v in &values {
                        k.part(b'v', Some(v));
                    }
                }
            }
        }
    }
    let selectors = match spec {
        Some(c) => &c.key[..],
        None => policy.hot_keys.as_ref().map_or(&[][..], |h| &h.key[..]),
    };
    for sel in selectors {
        k.part(b's', keys::value(sel, req, ctx).as_deref());
    }
    // Credentials of a client the gateway did not verify (an `auth: none` API, or one the
    // backend checks itself): an answer made for them is theirs.
    for name in [http::header::AUTHORIZATION, http::header::COOKIE] {
        let mut values = req.headers.get_all(&name).iter().peekable();
        if values.peek().is_some() {
            for v in values {
                k.part(b'h', Some(&String::from_utf8_lossy(v.as_bytes())));
            }
        }
    }
    k.finish()
}

/// The names an answer's `Vary` lists (lower-case, sorted, once each); `None` without
/// `Vary`. `*` is kept as a name: [`storable`] refuses such an answer.
fn vary_names(headers: &[(String, String)]) -> Option<Arc<[String]>> {
    let mut names: Vec<String> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("vary"))
        .flat_map(|(_, v)| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return None;
    }
    names.sort();
    names.dedup();
    Some(names.into())
}

/// The key of the answer under `base` that varies by `names`: the base key and each named
/// header's value as the backend received it. `None` when a name is one the gateway sets
/// anew for each call, so no two calls could share the answer.
fn varied_key(
    base: &str,
    names: &[String],
    headers: &HeaderMap,
    app: Option<&str>,
    client_ip: Option<IpAddr>,
) -> Option<String> {
    let mut k = KeyWriter::new();
    k.part(b'B', Some(base));
    for name in names {
        k.part(b'N', Some(name));
        match name.as_str() {
            "*" => return None,
            crate::model::APP_HEADER => k.part(b'V', app),
            "x-forwarded-for" | "x-real-ip" | "forwarded" => {
                k.part(b'V', client_ip.map(|ip| ip.to_string()).as_deref())
            }
            n if n.starts_with("x-portico-") => return None,
            n => {
                let mut values = headers.get_all(n).iter().peekable();
                if values.peek().is_none() {
                    k.part(b'V', None);
                }
                for v in values {
                    k.part(b'V', Some(&String::from_utf8_lossy(v.as_bytes())));
                }
            }
        }
    }
    Some(k.finish())
}

/// Whether an answer with these headers may be stored: no `Cache-Control: no-store` or
/// `private`, no `Set-Cookie`, no `Vary: *`.
pub fn storable(headers: &[(String, String)]) -> bool {
    headers.iter().all(|(k, v)| {
        if k.eq_ignore_ascii_case("set-cookie") {
            return false;
        }
        if k.eq_ignore_ascii_case("vary") {
            return !v.split(',').any(|n| n.trim() == "*");
        }
        if k.eq_ignore_ascii_case("cache-control") {
            return !v.split(',').any(|d| {
                let d = d.trim();
                d.eq_ignore_ascii_case("no-store") || d.eq_ignore_ascii_case("private")
            });
        }
        true
    })
}

/// `"<16 hex digits of the body's SHA-256>"`.
pub fn etag_of(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    format!("\"{}\"", hex::encode(&digest[..8]))
}

/// Whether an `If-None-Match` value names `etag` (`*`, a list, weak tags compared weakly).
fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').any(|t| {
        let t = t.trim();
        t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(body: &'static [u8], expires_ms: u64) -> Entry {
        Entry {
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("cache-control".into(), "max-age=2".into()),
            ],
            body: Bytes::from_static(body),
            etag: etag_of(body),
            stored_ms: 0,
            expires_ms,
            seq: 0,
            vary: None,
        }
    }

    #[test]
    fn entries_expire_and_answer_with_etag_or_304() {
        let c = ApiCache::new(10);
        c.put("k".into(), entry(b"{\"a\":1}", 100));
        assert!(c.get("k", 99).is_some());
        assert!(c.get("k", 100).is_none());
        assert!(c.get("other", 0).is_none());
        let e = c.get("k", 0).unwrap();
        let w = answer(&e, "HIT", None, 2_500);
        assert_eq!(w.status, 200);
        assert_eq!(&w.body[..], b"{\"a\":1}");
        assert!(w.headers.contains(&("etag".into(), e.etag.clone())));
        assert!(w.headers.contains(&(CACHE_HEADER.into(), "HIT".into())));
        assert!(w.headers.contains(&("age".into(), "2".into())));
        let not_modified = answer(&e, "HIT", Some(&format!("W/\"x\", {}", e.etag)), 0);
        assert_eq!((not_modified.status, not_modified.body.len()), (304, 0));
        // A 304 repeats the caching headers, not the content's.
        assert!(not_modified
            .headers
            .contains(&("cache-control".into(), "max-age=2".into())));
        assert!(!not_modified
            .headers
            .iter()
            .any(|(k, _)| k == "content-type"));
        assert!(not_modified.headers.contains(&("age".into(), "0".into())));
        assert_eq!(answer(&e, "HIT", Some("\"x\""), 0).status, 200);
        assert_eq!(answer(&e, "HIT", Some("*"), 0).status, 304);
        // A MISS is the backend's answer: no Age.
        assert!(!answer(&e, "MISS", None, 0)
            .headers
            .iter()
            .any(|(k, _)| k == "age"));
        assert_ne!(etag_of(b"a"), etag_of(b"b"));
    }

    #[test]
    fn a_million_distinct_keys_stay_within_the_bound() {
        let max_entries = 10_000;
        let c = ApiCache::new(max_entries);
        for i in 0..1_000_000u64 {
            c.put(format!("sku-{i}"), entry(b"0123456789", u64::MAX));
        }
        assert!(c.len() <= max_entries + SHARDS, "{}", c.len());
        assert!(c.len() >= max_entries / 2, "{}", c.len());
        assert!(c.body_bytes() <= (max_entries + SHARDS) * 10);
        for s in &c.shards {
            let s = s.lock().unwrap();
            assert!(s.order.len() <= 2 * c.per_shard + 16);
        }
        // The newest entries are kept.
        assert!(c.get("sku-999999", 0).is_some());
        assert!(c.get("sku-0", 0).is_none());
    }

    #[test]
    fn replacing_a_key_keeps_the_order_bounded() {
        let c = ApiCache::new(16);
        for _ in 0..10_000 {
            c.put("same".into(), entry(b"x", u64::MAX));
        }
        assert_eq!(c.len(), 1);
        for s in &c.shards {
            assert!(s.lock().unwrap().order.len() <= 2 * c.per_shard + 16);
        }
    }

    #[test]
    fn what_may_be_stored() {
        let h = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert!(storable(&h("cache-control", "max-age=60")));
        assert!(!storable(&h("Cache-Control", "public, no-store")));
        assert!(!storable(&h("cache-control", "private")));
        assert!(!storable(&h("Set-Cookie", "a=b")));
        assert!(!storable(&h("Vary", "Accept, *")));
        assert!(storable(&h("Vary", "Accept")));
        assert!(storable(&[]));
    }
}
