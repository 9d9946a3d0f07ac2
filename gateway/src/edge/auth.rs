//! `auth`: verifies the §3.1 signature of a call to an API whose `auth` is `signature`, and
//! records who is calling ([`EdgeCtx::app_key`], [`EdgeCtx::app`]).
//!
//! Checks, in order (the first failure answers):
//! 1. all four headers present and non-empty, else 401 `SIGNATURE_MISSING`; a header sent
//!    more than once, or not visible ASCII, is 401 `SIGNATURE_INVALID` (no guessing which
//!    copy a proxy in between would have used);
//! 2. the timestamp is decimal digits (Unix epoch ms) no more than 300 s from the gateway's
//!    clock in either direction, else 401 `SIGNATURE_EXPIRED` (a non-number is "expired"
//!    too: it can never be inside the window);
//! 3. the nonce is 8–64 of `[A-Za-z0-9_-]`, else 401 `SIGNATURE_INVALID` (it is part of the
//!    signed material, so a malformed one is an invalid signature, not a bad request);
//! 4. the app key names an app of the snapshot, else 401 `APP_UNKNOWN` (disabled apps still
//!    authenticate; `permit` refuses them, so only a secret holder learns the app is off);
//! 5. the signature matches (constant-time compare), else 401 `SIGNATURE_INVALID`; the
//!    message shows the string-to-sign the gateway computed, escaped, to help merchants;
//! 6. the nonce was not seen for this app in the window, else 401 `NONCE_REPLAYED`. The
//!    nonce is recorded only now, after the signature verified, so nobody without the
//!    secret can fill the cache or burn a merchant's nonces.
//!
//! For `auth: none` APIs the stage does nothing (it does not even read an
//! `X-Portico-AppKey`): such calls are anonymous, `ctx.app` stays `None`.
//!
//! The [`ReplayCache`] is runtime state kept across snapshot reloads. It is per gateway
//! node: a replay sent to another node is not seen (a shared store would be needed for that).

use crate::edge::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
// Signing is `portico_control::sign`, the one implementation shared with the `portico` CLI
// and the tests, so the gateway can never drift from what merchants' tools compute.
use portico_control::sign::{
    string_to_sign, valid_nonce, verify, HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE,
    HEADER_TIMESTAMP, MAX_SKEW_MS,
};
use portico_control::{v1, Snapshot};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// What [`ReplayCache::check_and_record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceCheck {
    /// Not seen in the window; now recorded.
    Fresh,
    /// Seen for this app within the window.
    Replayed,
    /// The app's cache is full of unexpired nonces: the call is refused (not recorded).
    Full,
}

/// One app's nonces: keyed SipHash of the nonce → the last instant (epoch ms) it must be
/// remembered, i.e. its timestamp + 300 s (after that the timestamp check refuses a replay).
#[derive(Debug, Default)]
struct AppNonces {
    seen: DashMap<u64, u64>,
    /// Entries in `seen` (kept alongside: `DashMap::len` locks every shard).
    len: AtomicUsize,
    /// When an inline sweep last ran (epoch ms), so a full cache is swept at most once a second.
    last_sweep_ms: AtomicU64,
}

impl AppNonces {
    /// Removes entries that expired before `now_ms`.
    fn sweep(&self, now_ms: u64) {
        let mut removed = 0usize;
        self.seen.retain(|_, expires| {
            let keep = *expires >= now_ms;
            if !keep {
                removed += 1;
            }
            keep
        });
        // `retain` and concurrent inserts only race on this counter, never on the map.
        let _ = self
            .len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(removed))
            });
    }
}

/// Nonces seen per app within the signature window, shared by every [`AuthStage`] built
/// across snapshot reloads (create one at start-up, pass clones of the `Arc`).
///
/// - Sharded: a `DashMap` of apps, each a `DashMap` of nonces; no global lock.
/// - Compact: a nonce is stored as a 64-bit SipHash with keys random per process (so
///   collisions cannot be engineered; an accidental one among a million nonces has odds of
///   about 1 in 10^13) plus its expiry: ~32 bytes an entry.
/// - Bounded per app ([`ReplayCache::DEFAULT_CAPACITY_PER_APP`]). When an app's cache is full
///   its expired entries are swept inline (at most once a second); if it is still full the
///   call is refused with 429 `RATE_LIMITED` (`Retry-After: 1`). Evicting unexpired nonces
///   instead would reopen a replay window; refusing only affects an app that sends more than
///   capacity / 300 s signed calls to one node (over 3,000 a second by default), and only
///   the app's own secret holder can fill it.
/// - [`ReplayCache::housekeeping`] (every few seconds) drops expired entries.
#[derive(Debug)]
pub struct ReplayCache {
    apps: DashMap<Box<str>, Arc<AppNonces>>,
    hasher: RandomState,
    capacity_per_app: usize,
}

impl Default for ReplayCache {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayCache {
    /// Nonces remembered per app before new calls are refused.
    pub const DEFAULT_CAPACITY_PER_APP: usize = 1_000_000;

    pub fn new() -> Self {
        Self::with_capacity_per_app(Self::DEFAULT_CAPACITY_PER_APP)
    }

    pub fn with_capacity_per_app(capacity_per_app: usize) -> Self {
        ReplayCache {
            apps: DashMap::new(),
            hasher: RandomState::new(),
            capacity_per_app: capacity_per_app.max(1),
        }
    }

    fn app(&self, app_key: &str) -> Arc<AppNonces> {
        if let Some(a) = self.apps.get(app_key) {
            return Arc::clone(a.value());
        }
        Arc::clone(self.apps.entry(Box::from(app_key)).or_default().value())
    }

    /// Records `nonce` for `app_key` until `remember_until_ms` (the call's timestamp + 300 s)
    /// unless it is already remembered at `now_ms`. Atomic: of two concurrent calls with the
    /// same nonce exactly one is `Fresh`.
    pub fn check_and_record(
        &self,
        app_key: &str,
        nonce: &str,
        remember_until_ms: u64,
        now_ms: u64,
    ) -> NonceCheck {
        let app = self.app(app_key);
        let key = self.hasher.hash_one(nonce);
        if app.len.load(Ordering::Relaxed) >= self.capacity_per_app {
            let last = app.last_sweep_ms.load(Ordering::Relaxed);
            if now_ms.saturating_sub(last) >= 1000
                && app
                    .last_sweep_ms
                    .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                app.sweep(now_ms);
            }
            if app.len.load(Ordering::Relaxed) >= self.capacity_per_app {
                // Still tell a replay apart from a full cache: a replay is the caller's fault.
                return match app.seen.get(&key) {
                    Some(e) if *e.value() >= now_ms => NonceCheck::Replayed,
                    _ => NonceCheck::Full,
                };
            }
        }
        let outcome = match app.seen.entry(key) {
            Entry::Occupied(mut e) => {
                if *e.get() >= now_ms {
                    NonceCheck::Replayed
                } else {
                    // An expired leftover: its timestamp is out of the window, so this is a
                    // new call that happens to reuse the nonce.
                    e.insert(remember_until_ms);
                    NonceCheck::Fresh
                }
            }
            Entry::Vacant(v) => {
                v.insert(remember_until_ms);
                app.len.fetch_add(1, Ordering::Relaxed);
                NonceCheck::Fresh
            }
        };
        outcome
    }

    /// Drops nonces expired at `now_ms` (the gateway's clock, epoch ms), and apps left with
    /// none. Call every few seconds.
    pub fn housekeeping(&self, now_ms: u64) {
        for app in self.apps.iter() {
            app.value().sweep(now_ms);
        }
        // An app's entry is removed only when nobody holds it: clones are taken under the
        // shard's read lock and `retain` holds its write lock, so no insert can be lost.
        self.apps
            .retain(|_, a| Arc::strong_count(a) > 1 || a.len.load(Ordering::Relaxed) > 0);
    }

    /// Nonces remembered, over all apps.
    pub fn len(&self) -> usize {
        self.apps
            .iter()
            .map(|a| a.value().len.load(Ordering::Relaxed))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Verifies signed calls (docs/PROTOCOL.md, "Signing a request") and sets `ctx.app_key` /
/// `ctx.app`.
#[derive(Debug)]
pub struct AuthStage {
    apps: HashMap<String, Arc<v1::App>>,
    replay: Arc<ReplayCache>,
}

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::new(Code::SignatureInvalid, message)
}

/// One signing header: `Ok(None)` when absent or empty.
fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> Result<Option<&'a str>, GatewayError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(invalid(format!("{name} is sent more than once")));
    }
    let value = first
        .to_str()
        .map_err(|_| invalid(format!("{name} is not visible ASCII")))?;
    Ok(if value.is_empty() { None } else { Some(value) })
}

/// The four signing headers of a call, all present and non-empty.
struct Signed<'a> {
    app_key: &'a str,
    timestamp: &'a str,
    nonce: &'a str,
    signature: &'a str,
}

impl<'a> Signed<'a> {
    /// Check 1: all four headers present and non-empty (401 `SIGNATURE_MISSING` naming the
    /// missing ones), none repeated or non-ASCII (401 `SIGNATURE_INVALID`).
    fn read(headers: &'a http::HeaderMap) -> Result<Self, GatewayError> {
        let app_key = header(headers, HEADER_APP_KEY)?;
        let timestamp = header(headers, HEADER_TIMESTAMP)?;
        let nonce = header(headers, HEADER_NONCE)?;
        let signature = header(headers, HEADER_SIGNATURE)?;
        if let (Some(app_key), Some(timestamp), Some(nonce), Some(signature)) =
            (app_key, timestamp, nonce, signature)
        {
            return Ok(Signed {
                app_key,
                timestamp,
                nonce,
                signature,
            });
        }
        let missing: Vec<&str> = [
            (HEADER_APP_KEY, app_key.is_none()),
            (HEADER_TIMESTAMP, timestamp.is_none()),
            (HEADER_NONCE, nonce.is_none()),
            (HEADER_SIGNATURE, signature.is_none()),
        ]
        .into_iter()
        .filter_map(|(name, missing)| missing.then_some(name))
        .collect();
        Err(GatewayError::new(
            Code::SignatureMissing,
            format!(
                "this API needs a signed call; missing {}",
                missing.join(", ")
            ),
        ))
    }
}

/// Check 2: the timestamp is decimal Unix epoch milliseconds within [`MAX_SKEW_MS`] of
/// `now_ms`, else 401 `SIGNATURE_EXPIRED`. Returns it parsed.
fn check_timestamp(timestamp: &str, now_ms: u64) -> Result<u64, GatewayError> {
    let ts = (timestamp.len() <= 20 && timestamp.bytes().all(|b| b.is_ascii_digit()))
        .then(|| timestamp.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| {
            GatewayError::new(
                Code::SignatureExpired,
                format!("{HEADER_TIMESTAMP} must be Unix epoch milliseconds"),
            )
        })?;
    let skew = now_ms.abs_diff(ts);
    if skew > MAX_SKEW_MS {
        return Err(GatewayError::new(
            Code::SignatureExpired,
            format!(
                "{HEADER_TIMESTAMP} is {} s {} the gateway's clock (at most {} s allowed)",
                skew / 1000,
                if ts < now_ms { "behind" } else { "ahead of" },
                MAX_SKEW_MS / 1000
            ),
        ));
    }
    Ok(ts)
}

impl AuthStage {
    /// The checks of the module documentation, in order; on success records who is calling.
    fn check(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Result<(), GatewayError> {
        let signed = Signed::read(req.headers)?;
        let ts = check_timestamp(signed.timestamp, req.now_ms)?;
        if !valid_nonce(signed.nonce) {
            return Err(invalid(format!(
                "{HEADER_NONCE} must be 8-64 of [A-Za-z0-9_-]"
            )));
        }
        let Some(app) = self.apps.get(signed.app_key) else {
            return Err(GatewayError::new(Code::AppUnknown, "unknown app key"));
        };
        let sts = string_to_sign(
            req.method,
            req.path,
            req.query,
            signed.app_key,
            signed.timestamp,
            signed.nonce,
            req.body,
        );
        if !verify(app.secret.as_bytes(), &sts, signed.signature) {
            return Err(invalid(format!(
                "signature does not match; the gateway's string-to-sign is {sts:?}"
            )));
        }
        self.record_nonce(&signed, ts, req.now_ms)?;
        ctx.app_key = Some(signed.app_key.to_owned());
        ctx.app = Some(Arc::clone(app));
        Ok(())
    }

    /// Check 6, only once the signature verified: the nonce is new for this app within the
    /// window (401 `NONCE_REPLAYED`), and the app's cache has room (429 `RATE_LIMITED`).
    fn record_nonce(&self, signed: &Signed<'_>, ts: u64, now_ms: u64) -> Result<(), GatewayError> {
        let until = ts.saturating_add(MAX_SKEW_MS);
        match self
            .replay
            .check_and_record(signed.app_key, signed.nonce, until, now_ms)
        {
            NonceCheck::Fresh => Ok(()),
            NonceCheck::Replayed => Err(GatewayError::new(
                Code::NonceReplayed,
                "this nonce was already used by this app within the last 300 s",
            )),
            NonceCheck::Full => Err(GatewayError::new(
                Code::RateLimited,
                "too many signed calls by this app within the replay window",
            )
            .with_retry_after(1)),
        }
    }
}

impl Stage for AuthStage {
    /// Reload phase: indexes the snapshot's apps; the replay cache is the plane's, carried
    /// across reloads (a reload must not forget the nonces already seen).
    fn build(snapshot: &Snapshot, carried: &Carried) -> Self {
        let apps = snapshot
            .apps
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        AuthStage {
            apps,
            replay: Arc::clone(&carried.replay),
        }
    }

    fn name(&self) -> &'static str {
        "auth"
    }

    /// Request phase, after `route` and after the body is read (the body is signed).
    /// `Continue`: an `auth: none` API, or a verified call (`ctx.app_key`/`ctx.app` set);
    /// `Respond`: a 401 of §3.2 (or 429 when the app's replay cache is full). Without a
    /// route (a pipeline bug) it fails closed with 500.
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow {
        let Some(api) = ctx.api() else {
            return GatewayError::new(Code::Internal, "auth ran before route").into();
        };
        if api.auth == v1::AuthMode::None {
            return Flow::Continue;
        }
        match self.check(req, ctx) {
            Ok(()) => Flow::Continue,
            Err(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{api, app, routed, NOW_MS};
    use http::HeaderMap;
    use portico_control::sign::{sign_request, SignedHeaders};
    use portico_control::v1::{AppStatus, AuthMode};

    const SECRET: &str = "s3cr3t-value";
    const QUERY: &str = "b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93";

    fn snapshot() -> Snapshot {
        let mut s = Snapshot::default();
        s.apps.insert(
            "merchant-1".into(),
            app(SECRET, AppStatus::Active, &["*"], vec![]),
        );
        s.apps
            .insert("off".into(), app("x", AppStatus::Disabled, &["*"], vec![]));
        s
    }

    fn headers_of(h: &SignedHeaders) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in h.pairs() {
            map.insert(name, value.parse().unwrap());
        }
        map
    }

    /// The headers of docs/PROTOCOL.md's worked example 1.
    fn vector_1() -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(HEADER_APP_KEY, "merchant-1".parse().unwrap());
        map.insert(HEADER_TIMESTAMP, "1796000000000".parse().unwrap());
        map.insert(HEADER_NONCE, "n0nce-0001".parse().unwrap());
        map.insert(
            HEADER_SIGNATURE,
            "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73"
                .parse()
                .unwrap(),
        );
        map
    }

    fn get_req<'a>(headers: &'a HeaderMap, now_ms: u64) -> EdgeRequest<'a> {
        EdgeRequest {
            method: "GET",
            path: "/v1/orders/42",
            query: Some(QUERY),
            headers,
            peer: None,
            body: b"",
            now_ms,
        }
    }

    /// Runs auth on a signature API; `Ok(ctx)` or `Err(code)`.
    fn run(
        stage: &AuthStage,
        req: &EdgeRequest<'_>,
    ) -> Result<EdgeCtx, (&'static str, GatewayError)> {
        let mut ctx = routed(&api("order.get", AuthMode::Signature, vec![]));
        match stage.apply(req, &mut ctx) {
            Flow::Continue => Ok(ctx),
            Flow::Respond(Err(e)) => Err((e.code.as_str(), e)),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn code(r: Result<EdgeCtx, (&'static str, GatewayError)>) -> &'static str {
        match r {
            Ok(_) => "OK",
            Err((c, _)) => c,
        }
    }

    fn stage() -> AuthStage {
        with_cache(&Arc::new(ReplayCache::new()))
    }

    /// The stage over [`snapshot`] sharing `cache`, as a plane's stages do across reloads.
    fn with_cache(cache: &Arc<ReplayCache>) -> AuthStage {
        let carried = Carried {
            replay: Arc::clone(cache),
            ..Carried::default()
        };
        AuthStage::build(&snapshot(), &carried)
    }

    #[test]
    fn protocol_example_1_is_accepted_and_sets_the_app() {
        let s = stage();
        let headers = vector_1();
        let ctx = run(&s, &get_req(&headers, NOW_MS))
            .map_err(|e| e.1)
            .unwrap();
        assert_eq!(ctx.app_key.as_deref(), Some("merchant-1"));
        assert_eq!(ctx.app.as_ref().map(|a| a.secret.as_str()), Some(SECRET));
    }

    #[test]
    fn protocol_example_2_is_accepted() {
        let s = stage();
        let mut headers = HeaderMap::new();
        headers.insert(HEADER_APP_KEY, "merchant-1".parse().unwrap());
        headers.insert(HEADER_TIMESTAMP, "1796000000000".parse().unwrap());
        headers.insert(HEADER_NONCE, "n0nce-0002".parse().unwrap());
        headers.insert(
            HEADER_SIGNATURE,
            "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107"
                .parse()
                .unwrap(),
        );
        let req = EdgeRequest {
            method: "POST",
            path: "/v1/orders",
            query: None,
            headers: &headers,
            peer: None,
            body: br#"{"item":"book","qty":2}"#,
            now_ms: NOW_MS,
        };
        assert_eq!(code(run(&s, &req)), "OK");
        // The same headers over another body do not verify.
        let tampered = EdgeRequest {
            body: br#"{"item":"book","qty":3}"#,
            ..req
        };
        assert_eq!(code(run(&s, &tampered)), "SIGNATURE_INVALID");
    }

    #[test]
    fn replay_is_refused_within_the_window_and_cache_survives_rebuilds() {
        let cache = Arc::new(ReplayCache::new());
        let s = with_cache(&cache);
        let headers = vector_1();
        assert_eq!(code(run(&s, &get_req(&headers, NOW_MS))), "OK");
        assert_eq!(
            code(run(&s, &get_req(&headers, NOW_MS + 1000))),
            "NONCE_REPLAYED"
        );
        // A stage built from a reloaded snapshot shares the cache.
        let reloaded = with_cache(&cache);
        assert_eq!(
            code(run(&reloaded, &get_req(&headers, NOW_MS + 300_000))),
            "NONCE_REPLAYED"
        );
        // After the window the timestamp itself is refused.
        assert_eq!(
            code(run(&reloaded, &get_req(&headers, NOW_MS + 300_001))),
            "SIGNATURE_EXPIRED"
        );
        // Housekeeping forgets it then.
        assert_eq!(cache.len(), 1);
        cache.housekeeping(NOW_MS + 300_001);
        assert!(cache.is_empty());
    }

    #[test]
    fn same_nonce_for_another_app_or_new_timestamp_after_window() {
        let cache = ReplayCache::new();
        let until = NOW_MS + MAX_SKEW_MS;
        assert_eq!(
            cache.check_and_record("a", "nonce-xyz", until, NOW_MS),
            NonceCheck::Fresh
        );
        assert_eq!(
            cache.check_and_record("b", "nonce-xyz", until, NOW_MS),
            NonceCheck::Fresh
        );
        assert_eq!(
            cache.check_and_record("a", "nonce-xyz", until, until),
            NonceCheck::Replayed
        );
        assert_eq!(
            cache.check_and_record("a", "nonce-xyz", until + 400_000, until + 1),
            NonceCheck::Fresh
        );
    }

    #[test]
    fn a_bad_signature_does_not_burn_the_nonce() {
        let s = stage();
        let mut bad = vector_1();
        bad.insert(HEADER_SIGNATURE, "00".repeat(32).parse().unwrap());
        assert_eq!(code(run(&s, &get_req(&bad, NOW_MS))), "SIGNATURE_INVALID");
        assert_eq!(code(run(&s, &get_req(&vector_1(), NOW_MS))), "OK");
    }

    #[test]
    fn expiry_both_directions() {
        let s = stage();
        let h = vector_1();
        assert_eq!(code(run(&s, &get_req(&h, NOW_MS - 300_000))), "OK");
        let h = vector_1();
        assert_eq!(
            code(run(&s, &get_req(&h, NOW_MS - 300_001))),
            "SIGNATURE_EXPIRED"
        );
        assert_eq!(
            code(run(&s, &get_req(&h, NOW_MS + 300_001))),
            "SIGNATURE_EXPIRED"
        );
        let (_, e) = run(&s, &get_req(&h, NOW_MS + 3_600_000)).unwrap_err();
        assert!(
            e.message.contains("3600 s ahead of") || e.message.contains("behind"),
            "{e}"
        );
        for bad in [
            "abc",
            "-1796000000000",
            "+1796000000000",
            "1796000000000.0",
            "99999999999999999999999",
        ] {
            let mut h = vector_1();
            h.insert(HEADER_TIMESTAMP, bad.parse().unwrap());
            assert_eq!(
                code(run(&s, &get_req(&h, NOW_MS))),
                "SIGNATURE_EXPIRED",
                "{bad}"
            );
        }
    }

    #[test]
    fn missing_headers() {
        let s = stage();
        for name in [
            HEADER_APP_KEY,
            HEADER_TIMESTAMP,
            HEADER_NONCE,
            HEADER_SIGNATURE,
        ] {
            let mut h = vector_1();
            h.remove(name);
            let (c, e) = run(&s, &get_req(&h, NOW_MS)).unwrap_err();
            assert_eq!(c, "SIGNATURE_MISSING");
            assert!(e.message.contains(name), "{e}");
            let mut h = vector_1();
            h.insert(name, "".parse().unwrap());
            assert_eq!(code(run(&s, &get_req(&h, NOW_MS))), "SIGNATURE_MISSING");
        }
        let (_, e) = run(&s, &get_req(&HeaderMap::new(), NOW_MS)).unwrap_err();
        assert_eq!(e.status(), 401);
    }

    #[test]
    fn duplicate_header_is_invalid() {
        let s = stage();
        let mut h = vector_1();
        h.append(HEADER_NONCE, "n0nce-0001".parse().unwrap());
        assert_eq!(code(run(&s, &get_req(&h, NOW_MS))), "SIGNATURE_INVALID");
    }

    #[test]
    fn bad_nonce_and_unknown_app() {
        let s = stage();
        let mut h = vector_1();
        h.insert(HEADER_NONCE, "short".parse().unwrap());
        assert_eq!(code(run(&s, &get_req(&h, NOW_MS))), "SIGNATURE_INVALID");
        let mut h = vector_1();
        h.insert(HEADER_APP_KEY, "merchant-2".parse().unwrap());
        assert_eq!(code(run(&s, &get_req(&h, NOW_MS))), "APP_UNKNOWN");
    }

    #[test]
    fn wrong_signature_shows_the_string_to_sign() {
        let s = stage();
        let signed = sign_request(
            b"wrong",
            "GET",
            "/v1/orders/42",
            Some(QUERY),
            "merchant-1",
            NOW_MS,
            "n0nce-0009",
            b"",
        );
        let h = headers_of(&signed);
        let (c, e) = run(&s, &get_req(&h, NOW_MS)).unwrap_err();
        assert_eq!(c, "SIGNATURE_INVALID");
        assert!(e.message.contains("a=%2F&a=hello%20world"), "{e}");
        // Path as sent: an encoded variant of the path is a different string-to-sign.
        let signed = sign_request(
            SECRET.as_bytes(),
            "GET",
            "/v1/orders/%34%32",
            Some(QUERY),
            "merchant-1",
            NOW_MS,
            "n0nce-0010",
            b"",
        );
        let h = headers_of(&signed);
        assert_eq!(code(run(&s, &get_req(&h, NOW_MS))), "SIGNATURE_INVALID");
    }

    #[test]
    fn disabled_apps_still_authenticate() {
        let s = stage();
        let signed = sign_request(
            b"x",
            "GET",
            "/v1/orders/42",
            Some(QUERY),
            "off",
            NOW_MS,
            "n0nce-0011",
            b"",
        );
        let ctx = run(&s, &get_req(&headers_of(&signed), NOW_MS))
            .map_err(|e| e.1)
            .unwrap();
        assert_eq!(ctx.app_key.as_deref(), Some("off"));
    }

    #[test]
    fn auth_none_apis_are_skipped() {
        let s = stage();
        let headers = HeaderMap::new();
        let req = get_req(&headers, NOW_MS);
        let mut ctx = routed(&api("public", AuthMode::None, vec![]));
        assert!(matches!(s.apply(&req, &mut ctx), Flow::Continue));
        assert!(ctx.app.is_none());
        // Without a route it fails closed.
        let mut ctx = EdgeCtx::default();
        assert!(matches!(s.apply(&req, &mut ctx), Flow::Respond(_)));
    }

    #[test]
    fn full_cache_refuses_instead_of_forgetting() {
        let cache = ReplayCache::with_capacity_per_app(2);
        let until = NOW_MS + MAX_SKEW_MS;
        assert_eq!(
            cache.check_and_record("a", "nonce-001", until, NOW_MS),
            NonceCheck::Fresh
        );
        assert_eq!(
            cache.check_and_record("a", "nonce-002", until, NOW_MS),
            NonceCheck::Fresh
        );
        assert_eq!(
            cache.check_and_record("a", "nonce-003", until, NOW_MS),
            NonceCheck::Full
        );
        assert_eq!(
            cache.check_and_record("a", "nonce-001", until, NOW_MS),
            NonceCheck::Replayed
        );
        // Another app is unaffected.
        assert_eq!(
            cache.check_and_record("b", "nonce-003", until, NOW_MS),
            NonceCheck::Fresh
        );
        // Once entries expire an inline sweep makes room.
        assert_eq!(
            cache.check_and_record("a", "nonce-003", until + 400_000, until + 1),
            NonceCheck::Fresh
        );
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn concurrent_duplicates_admit_exactly_one() {
        let cache = Arc::new(ReplayCache::new());
        let fresh = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for i in 0..200 {
                        let nonce = format!("nonce-{i:04}");
                        if cache.check_and_record("a", &nonce, NOW_MS + 1, NOW_MS)
                            == NonceCheck::Fresh
                        {
                            fresh.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(fresh.load(Ordering::Relaxed), 200);
    }
}
