//! `GET /portal/apps/<app_key>/openapi.json` is answered only to that app: the request must
//! be signed with the app's secret exactly as a call to the gateway is (docs/PROTOCOL.md,
//! "Signing a request"; the string-to-sign's path line is `/portal/apps/<app_key>/openapi.json`),
//! and verified with the gateway's own code (`portico_control::sign`). So no merchant can
//! read another's grants, and the portal needs no admin token.
//!
//! Refusals carry the gateway's codes. An unknown app key gets the same 401
//! `SIGNATURE_INVALID` as a wrong signature, so the route tells nobody which keys exist. A
//! nonce is remembered (per registry process) for the 300 s window, so a captured request
//! cannot be replayed against the same registry.

use crate::error::{ApiError, ApiResult};
use axum::http::{HeaderMap, StatusCode};
use portico_control::sign::{
    string_to_sign, valid_nonce, verify, HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE,
    HEADER_TIMESTAMP, MAX_SKEW_MS,
};
use portico_control::v1;
use std::collections::HashMap;
use std::sync::Mutex;

/// The most nonces remembered at once (beyond that, signed requests are refused until some
/// expire: 429, as the gateway does with a full replay cache).
const MAX_NONCES: usize = 100_000;

fn unauthorized(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, code, message)
}

/// The request being checked.
pub struct Signed<'a> {
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The method, upper case.
    pub method: &'a str,
    /// The path exactly as sent.
    pub path: &'a str,
    /// The raw query, if any.
    pub query: Option<&'a str>,
    /// The body bytes.
    pub body: &'a [u8],
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> ApiResult<&'h str> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Err(unauthorized(
            "SIGNATURE_MISSING",
            format!("the {name} header is missing: sign this request with your app's secret"),
        ));
    };
    if values.next().is_some() {
        return Err(unauthorized(
            "SIGNATURE_INVALID",
            format!("{name} is sent more than once"),
        ));
    }
    value
        .to_str()
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| unauthorized("SIGNATURE_INVALID", format!("{name} is empty or not ASCII")))
}

/// Checks that `req` is signed by `app_key` with `app`'s secret (`app`: `None` when there is
/// no such app). `now_ms`: the current time.
pub fn check(req: &Signed<'_>, app_key: &str, app: Option<&v1::App>, now_ms: u64) -> ApiResult<()> {
    let key = header(req.headers, HEADER_APP_KEY)?;
    let timestamp = header(req.headers, HEADER_TIMESTAMP)?;
    let nonce = header(req.headers, HEADER_NONCE)?;
    let signature = header(req.headers, HEADER_SIGNATURE)?;
    if key != app_key {
        return Err(unauthorized(
            "SIGNATURE_INVALID",
            "X-Portico-AppKey must be the app whose document is asked for",
        ));
    }
    let fresh = timestamp
        .parse::<u64>()
        .is_ok_and(|ts| ts.abs_diff(now_ms) <= MAX_SKEW_MS);
    if !fresh {
        return Err(unauthorized(
            "SIGNATURE_EXPIRED",
            "X-Portico-Timestamp must be the current Unix time in milliseconds (±300 s)",
        ));
    }
    if !valid_nonce(nonce) {
        return Err(unauthorized(
            "SIGNATURE_INVALID",
            "X-Portico-Nonce must be 8-64 of A-Z a-z 0-9 _ -",
        ));
    }
    let sts = string_to_sign(
        req.method, req.path, req.query, key, timestamp, nonce, req.body,
    );
    // An unknown key costs the same HMAC as a known one: the two refusals are the same
    // answer by the same work.
    let verified = match app {
        Some(a) => verify(a.secret.as_bytes(), &sts, signature),
        None => {
            let _ = std::hint::black_box(verify(b"portico: no such app", &sts, signature));
            false
        }
    };
    let Some(app) = app.filter(|_| verified) else {
        return Err(unauthorized(
            "SIGNATURE_INVALID",
            format!(
                "the signature does not match (or there is no such app); the string-to-sign is {:?}",
                sts
            ),
        ));
    };
    remember(app_key, nonce, now_ms)?;
    if app.status == v1::AppStatus::Disabled {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "APP_DISABLED",
            "the app is disabled",
        ));
    }
    Ok(())
}

/// App key and nonce → until when (epoch ms) it is remembered.
fn nonces() -> &'static Mutex<HashMap<(String, String), u64>> {
    static NONCES: std::sync::OnceLock<Mutex<HashMap<(String, String), u64>>> =
        std::sync::OnceLock::new();
    NONCES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn remember(app_key: &str, nonce: &str, now_ms: u64) -> ApiResult<()> {
    let mut seen = nonces().lock().unwrap_or_else(|e| e.into_inner());
    let key = (app_key.to_owned(), nonce.to_owned());
    if seen.get(&key).is_some_and(|until| *until >= now_ms) {
        return Err(unauthorized(
            "NONCE_REPLAYED",
            "this nonce was already used by this app within 300 s",
        ));
    }
    if seen.len() >= MAX_NONCES {
        seen.retain(|_, until| *until >= now_ms);
        if seen.len() >= MAX_NONCES {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "RATE_LIMITED",
                "too many signed portal requests; retry in a minute",
            ));
        }
    }
    seen.insert(key, now_ms + 2 * MAX_SKEW_MS);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use portico_control::sign::sign_request;

    fn app(status: v1::AppStatus) -> v1::App {
        v1::App {
            secret: "s3cr3t-value".into(),
            status,
            apis: vec!["*".into()],
            rate_limits: vec![],
            name: None,
            topics: Vec::new(),
            callback_url: None,
        }
    }

    fn signed_headers(key: &str, secret: &str, path: &str, ts: u64, nonce: &str) -> HeaderMap {
        let s = sign_request(secret.as_bytes(), "GET", path, None, key, ts, nonce, b"");
        let mut h = HeaderMap::new();
        for (name, value) in s.pairs() {
            h.insert(name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_the_app_itself_gets_through() {
        let path = "/portal/apps/merchant-1/openapi.json";
        let now = 1_796_000_000_000;
        let check_with = |headers: &HeaderMap, app: Option<&v1::App>| {
            let req = Signed {
                headers,
                method: "GET",
                path,
                query: None,
                body: b"",
            };
            check(&req, "merchant-1", app, now).map_err(|e| e.code)
        };
        let active = app(v1::AppStatus::Active);
        let good = signed_headers("merchant-1", "s3cr3t-value", path, now, "portal-nonce-1");
        assert_eq!(check_with(&good, Some(&active)), Ok(()));
        assert_eq!(check_with(&good, Some(&active)), Err("NONCE_REPLAYED"));
        let wrong = signed_headers("merchant-1", "not-the-secret", path, now, "portal-nonce-2");
        assert_eq!(check_with(&wrong, Some(&active)), Err("SIGNATURE_INVALID"));
        // No such app: the same answer as a wrong signature.
        let good3 = signed_headers("merchant-1", "s3cr3t-value", path, now, "portal-nonce-3");
        assert_eq!(check_with(&good3, None), Err("SIGNATURE_INVALID"));
        // Another app's key, signed with its own secret, cannot read merchant-1's document.
        let other = signed_headers("merchant-2", "s3cr3t-value", path, now, "portal-nonce-4");
        assert_eq!(check_with(&other, Some(&active)), Err("SIGNATURE_INVALID"));
        let old = signed_headers(
            "merchant-1",
            "s3cr3t-value",
            path,
            now - 301_000,
            "portal-nonce-5",
        );
        assert_eq!(check_with(&old, Some(&active)), Err("SIGNATURE_EXPIRED"));
        assert_eq!(
            check_with(&HeaderMap::new(), Some(&active)),
            Err("SIGNATURE_MISSING")
        );
        let disabled = app(v1::AppStatus::Disabled);
        let good6 = signed_headers("merchant-1", "s3cr3t-value", path, now, "portal-nonce-6");
        assert_eq!(check_with(&good6, Some(&disabled)), Err("APP_DISABLED"));
    }
}
