//! `auth`: verifies the signature (docs/PROTOCOL.md, "Signing a request") of a call to an API whose
//! `auth` is `signature`, and records who is calling ([`EdgeCtx::app_key`], [`EdgeCtx::app`]).
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
//! 4. the app key names an app of the snapshot, and
//! 5. the signature matches (constant-time compare), else 401 `SIGNATURE_INVALID`; the
//!    message shows the string-to-sign the gateway computed, escaped, to help merchants. An
//!    unknown app key gets exactly the same answer, after an HMAC of the same cost, so app
//!    keys cannot be enumerated (the access log's `detail` says which it was; docs/SECURITY.md,
//!    "Trust between merchants"). Disabled apps still authenticate; `permit` refuses them, so
//!    only a secret holder learns the app is off;
//! 6. the nonce was not seen for this app in the window, else 401 `NONCE_REPLAYED`. The
//!    nonce is recorded only now, after the signature verified, so nobody without the
//!    secret can fill the cache or burn a merchant's nonces.
//!
//! For `auth: none` APIs the stage does nothing (it does not even read an
//! `X-Portico-AppKey`): such calls are anonymous, `ctx.app` stays `None`.
//!
//! The [`ReplayCache`] (`edge/replay.rs`) is runtime state kept across snapshot reloads. It
//! is per gateway node; with Redis (`--redis`) a fresh nonce is also recorded cluster-wide:
//! the stage leaves a `NonceClaim` in the context and the pipeline claims it in Redis right
//! after this stage (`fleet.rs`; docs/SECURITY.md, "Replays").

use crate::edge::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
// Signing is `portico_control::sign`, the one implementation shared with the `portico` CLI
// and the tests, so the gateway can never drift from what merchants' tools compute.
use crate::edge::replay::{NonceCheck, ReplayCache};
use portico_control::sign::{
    string_to_sign, string_to_sign_with_digest, valid_nonce, SigningKey, HEADER_APP_KEY,
    HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP, MAX_SKEW_MS,
};
use portico_control::{v1, Api, Snapshot};
use std::collections::HashMap;
use std::sync::Arc;

/// Verifies signed calls (docs/PROTOCOL.md, "Signing a request") and sets `ctx.app_key` /
/// `ctx.app`.
#[derive(Debug)]
pub struct AuthStage {
    /// Each app with its secret's HMAC key schedule done once per snapshot.
    apps: HashMap<String, (Arc<v1::App>, SigningKey)>,
    /// What an unknown app key's call is checked against, so it costs what a known one does.
    unknown: SigningKey,
    replay: Arc<ReplayCache>,
}

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::new(Code::SignatureInvalid, message)
}

/// The signing headers' names, parsed at compile time: a look-up by `&str` parses the name
/// each time, and the head is read twice (`check_head`, then `apply`).
const APP_KEY_NAME: http::HeaderName = http::HeaderName::from_static("x-portico-appkey");
const TIMESTAMP_NAME: http::HeaderName = http::HeaderName::from_static("x-portico-timestamp");
const NONCE_NAME: http::HeaderName = http::HeaderName::from_static("x-portico-nonce");
const SIGNATURE_NAME: http::HeaderName = http::HeaderName::from_static("x-portico-signature");

/// One signing header (`name` as documented, `key` its parsed name): `Ok(None)` when absent
/// or empty.
fn header<'a>(
    headers: &'a http::HeaderMap,
    name: &str,
    key: &http::HeaderName,
) -> Result<Option<&'a str>, GatewayError> {
    let mut values = headers.get_all(key).iter();
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
        let app_key = header(headers, HEADER_APP_KEY, &APP_KEY_NAME)?;
        let timestamp = header(headers, HEADER_TIMESTAMP, &TIMESTAMP_NAME)?;
        let nonce = header(headers, HEADER_NONCE, &NONCE_NAME)?;
        let signature = header(headers, HEADER_SIGNATURE, &SIGNATURE_NAME)?;
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
        self.check_remembered(ts)?;
        if !valid_nonce(signed.nonce) {
            return Err(invalid(format!(
                "{HEADER_NONCE} must be 8-64 of [A-Za-z0-9_-]"
            )));
        }
        let found = self.apps.get(signed.app_key);
        let sts = string_to_sign(
            req.method,
            req.path,
            req.query,
            signed.app_key,
            signed.timestamp,
            signed.nonce,
            req.body,
        );
        let Some((app, key)) = found else {
            // The same work and the same answer as a wrong signature.
            let _ = self.unknown.verify(&sts, signed.signature);
            return Err(mismatch(&sts).with_detail("unknown app key"));
        };
        if !key.verify(&sts, signed.signature) {
            return Err(mismatch(&sts));
        }
        self.record_nonce(&signed, ts, req.now_ms)?;
        if self.replay.is_shared_across_nodes() {
            let until = ts.saturating_add(MAX_SKEW_MS);
            ctx.nonce_claim = Some(crate::fleet::NonceClaim::new(
                signed.app_key,
                signed.nonce,
                until,
                req.now_ms,
            ));
        }
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

/// What the head of a call says, before any byte of its body is read
/// ([`AuthStage::check_head`]; docs/SECURITY.md, "Bounded work before authentication").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// An `auth: none` API, or a well-formed, fresh call by an active app: the body is read
    /// (bounded) and checked by [`AuthStage`]'s `apply`.
    Read,
    /// A well-formed, fresh call naming no app, or a disabled one: nothing of the body is
    /// kept. It is hashed as it streams by and the call answered by
    /// [`AuthStage::refuse_unread`], as a wrong signature would be (or `APP_DISABLED` when the
    /// signature verifies, as `permit` would say).
    HashOnly,
}

impl AuthStage {
    /// Request phase, after `route`, before the body: checks 1–3 of the module docs on the
    /// head alone and whether the app key names an active app. `Err`: the 401 of the first
    /// check that fails, answered without reading the body.
    pub fn check_head(&self, req: &EdgeRequest<'_>, api: &Api) -> Result<Head, GatewayError> {
        if api.auth == v1::AuthMode::None {
            return Ok(Head::Read);
        }
        let signed = Signed::read(req.headers)?;
        let ts = check_timestamp(signed.timestamp, req.now_ms)?;
        self.check_remembered(ts)?;
        if !valid_nonce(signed.nonce) {
            return Err(invalid(format!(
                "{HEADER_NONCE} must be 8-64 of [A-Za-z0-9_-]"
            )));
        }
        Ok(match self.apps.get(signed.app_key) {
            Some((app, _)) if app.status != v1::AppStatus::Disabled => Head::Read,
            _ => Head::HashOnly,
        })
    }

    /// The answer to a [`Head::HashOnly`] call whose body (never kept) hashed to
    /// `body_digest`: what a wrong signature gets, with the same work; `APP_DISABLED` for a
    /// disabled app whose signature verifies.
    pub fn refuse_unread(&self, req: &EdgeRequest<'_>, body_digest: &str) -> GatewayError {
        let signed = match Signed::read(req.headers) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let sts = string_to_sign_with_digest(
            req.method,
            req.path,
            req.query,
            signed.app_key,
            signed.timestamp,
            signed.nonce,
            body_digest,
        );
        let (key, detail) = match self.apps.get(signed.app_key) {
            Some((_, key)) => (key, "disabled app"),
            None => (&self.unknown, "unknown app key"),
        };
        if key.verify(&sts, signed.signature) && detail == "disabled app" {
            return GatewayError::new(Code::AppDisabled, "this app is disabled");
        }
        mismatch(&sts).with_detail(detail)
    }
}

impl AuthStage {
    /// Check 2, continued: a call signed before the replay cache's memory begins (a gateway
    /// without Redis, before its process started) could have been accepted by the process
    /// before it, whose nonces are gone: 401 `SIGNATURE_EXPIRED`, sign it again.
    fn check_remembered(&self, ts: u64) -> Result<(), GatewayError> {
        if ts < self.replay.signed_since_ms() {
            return Err(GatewayError::new(
                Code::SignatureExpired,
                format!(
                    "{HEADER_TIMESTAMP} is older than this gateway's memory of nonces (it \
                     restarted); sign the call again"
                ),
            ));
        }
        Ok(())
    }
}

/// The answer to a signature that does not match `sts` (and to an unknown app key).
fn mismatch(sts: &str) -> GatewayError {
    invalid(format!(
        "signature does not match; the gateway's string-to-sign is {sts:?}"
    ))
}

impl Stage for AuthStage {
    /// Reload phase: indexes the snapshot's apps; the replay cache is the plane's, carried
    /// across reloads (a reload must not forget the nonces already seen).
    fn build(snapshot: &Snapshot, carried: &Carried) -> Self {
        let apps = snapshot
            .apps
            .iter()
            .map(|(k, v)| {
                let key = SigningKey::new(v.secret.as_bytes());
                (k.clone(), (Arc::clone(v), key))
            })
            .collect();
        AuthStage {
            apps,
            unknown: SigningKey::new(b"portico: no such app"),
            replay: Arc::clone(&carried.replay),
        }
    }

    fn name(&self) -> &'static str {
        "auth"
    }

    /// Request phase, after `route` and after the body is read (the body is signed). `Continue`: an
    /// `auth: none` API, or a verified call (`ctx.app_key`/`ctx.app` set); `Respond`: a 401 in the
    /// error envelope (docs/PROTOCOL.md, "The error envelope"; or 429 when the app's replay cache
    /// is full). Without a route (a pipeline bug) it fails closed with 500.
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
    fn the_parsed_names_are_the_documented_headers() {
        for (name, key) in [
            (HEADER_APP_KEY, &APP_KEY_NAME),
            (HEADER_TIMESTAMP, &TIMESTAMP_NAME),
            (HEADER_NONCE, &NONCE_NAME),
            (HEADER_SIGNATURE, &SIGNATURE_NAME),
        ] {
            assert_eq!(key.as_str(), name.to_ascii_lowercase());
        }
    }

    #[test]
    fn a_call_signed_before_the_process_started_is_refused_without_redis() {
        // The vectors are signed at NOW_MS; this process "started" a millisecond later.
        let cache = Arc::new(ReplayCache::new().signed_since(NOW_MS + 1));
        let s = with_cache(&cache);
        let r = run(&s, &get_req(&vector_1(), NOW_MS + 1000));
        let Err(("SIGNATURE_EXPIRED", e)) = r else {
            panic!("{:?}", r.map(|_| ()));
        };
        assert!(e.message.contains("sign the call again"), "{}", e.message);
        // Signed at the start or later: accepted.
        let cache = Arc::new(ReplayCache::new().signed_since(NOW_MS));
        assert_eq!(
            code(run(&with_cache(&cache), &get_req(&vector_1(), NOW_MS))),
            "OK"
        );
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
        let unknown = run(&s, &get_req(&h, NOW_MS));
        // Indistinguishable from a known app's wrong signature (docs/SECURITY.md, "Threat model"):
        // status, code and message; only the access log's detail tells them apart.
        let mut h = vector_1();
        h.insert(HEADER_APP_KEY, "merchant-1".parse().unwrap());
        h.insert(HEADER_SIGNATURE, "00".repeat(32).parse().unwrap());
        let wrong = run(&s, &get_req(&h, NOW_MS));
        let (Err((_, u)), Err((_, w))) = (unknown, wrong) else {
            panic!("both refused");
        };
        assert_eq!((u.status(), &u.code), (w.status(), &w.code));
        assert_eq!(u.code, Code::SignatureInvalid);
        let u_msg = u.message.replace("merchant-2", "KEY");
        let w_msg = w.message.replace("merchant-1", "KEY");
        assert_eq!(u_msg, w_msg);
        assert_eq!(u.detail.as_deref(), Some("unknown app key"));
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
}
