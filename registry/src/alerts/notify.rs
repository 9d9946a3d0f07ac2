//! Notifications: the JSON payload of a firing or resolved alert, its signature, and its
//! delivery to the rule's receivers (docs/operations/alerts.md, "Receivers and the webhook
//! signature").
//!
//! A webhook gets `POST` with the payload as its body and these headers:
//! - `X-Portico-Signature: sha256=<hex>`: HMAC-SHA256 of the body's exact bytes, keyed with
//!   the shared secret (`--webhook-secret-file` or `PORTICO_WEBHOOK_SECRET`; absent when no
//!   secret is configured);
//! - `X-Portico-Event: firing | resolved`, `X-Portico-Delivery: <id>` (the same for every
//!   retry of one notification: receivers can drop duplicates by it).
//!
//! A delivery that fails (no connection, a timeout, 408, 429 or 5xx) is retried with
//! exponential backoff: after 1, 2, 4, ... seconds, at most [`BACKOFF_CAP`] apart, for
//! [`ATTEMPTS`] attempts in all. Any other answer ends it (2xx: delivered).

use super::mail::Mailer;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::Sha256;
use std::time::Duration;

/// Attempts per webhook delivery.
pub const ATTEMPTS: u32 = 8;
/// The longest wait between two attempts.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// The deadline of one attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The signature header.
pub const SIGNATURE_HEADER: &str = "X-Portico-Signature";

/// What is sent: one alert's firing or resolution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Payload {
    /// `rule@api/started_at_ms/state`: the same for every retry, unique per notification.
    pub id: String,
    /// The rule's name.
    pub rule: String,
    /// The API (`*` for gateway-wide conditions).
    pub api: String,
    pub condition: String,
    /// The condition's value (at firing; at resolution, the latest); `null` without data.
    pub value: Option<f64>,
    pub threshold: f64,
    pub for_s: u64,
    pub severity: String,
    /// `firing` or `resolved`.
    pub state: String,
    /// When the condition began to hold (RFC 3339).
    pub started_at: String,
    /// When the alert fired (RFC 3339).
    pub fired_at: String,
    /// When it resolved (RFC 3339; `null` while firing).
    pub resolved_at: Option<String>,
    /// A sentence for people.
    pub summary: String,
    /// The rule's description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The registry that sent it.
    pub registry: String,
    /// The console's Alerts page, when `--public-url` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_url: Option<String>,
    /// When this notification was made (RFC 3339).
    pub sent_at: String,
}

/// `sha256=<hex>` of HMAC-SHA256(secret, body).
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        // HMAC takes keys of any length.
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The wait before attempt `n` (1-based; the first is immediate).
pub fn backoff(n: u32) -> Duration {
    if n <= 1 {
        return Duration::ZERO;
    }
    let secs = 1u64 << (n - 2).min(16);
    Duration::from_secs(secs).min(BACKOFF_CAP)
}

/// How one receiver's delivery went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// `webhook` or `email`.
    pub kind: &'static str,
    /// The URL or address.
    pub target: String,
    pub ok: bool,
    pub attempts: u32,
    /// The last HTTP status, for webhooks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An error with its sources (reqwest's own text leaves out why the request failed).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether the egress policy refused the call (no retry helps).
fn is_egress_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<portico_control::egress::Refused>()
            .is_some_and(portico_control::egress::Refused::by_policy)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Where notifications go out from: the HTTP client, the webhook secret, the mailer.
#[derive(Clone)]
pub struct Sender {
    http: reqwest::Client,
    secret: Option<Vec<u8>>,
    mailer: Option<Mailer>,
    /// Waits between attempts are scaled by this (1.0; tests shorten them).
    pub backoff_scale: f64,
}

impl Sender {
    /// A sender signing with `secret` and mailing through `mailer`.
    pub fn new(secret: Option<Vec<u8>>, mailer: Option<Mailer>) -> Result<Sender, String> {
        // Webhooks name any URL an author wrote: through the egress policy, never redirected.
        let http = crate::egress::client_builder()
            .timeout(ATTEMPT_TIMEOUT)
            .user_agent(concat!("portico-registry/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(Sender {
            http,
            secret,
            mailer,
            backoff_scale: 1.0,
        })
    }

    /// Whether webhooks are signed.
    pub fn signs(&self) -> bool {
        self.secret.is_some()
    }

    /// Delivers `payload` to every receiver (concurrently); their outcomes, in order.
    pub async fn deliver(
        &self,
        payload: &Payload,
        receivers: &[portico_control::v1::AlertReceiver],
    ) -> Vec<Outcome> {
        let body = match serde_json::to_vec(payload) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "alert payload not encodable");
                return Vec::new();
            }
        };
        let jobs = receivers.iter().map(|r| async {
            match (&r.webhook, &r.email) {
                (Some(url), _) => self.webhook(url, payload, &body).await,
                (None, Some(addr)) => self.email(addr, payload).await,
                (None, None) => Outcome {
                    kind: "none",
                    target: String::new(),
                    ok: false,
                    attempts: 0,
                    status: None,
                    error: Some("the receiver names no webhook and no email".to_owned()),
                },
            }
        });
        futures::future::join_all(jobs).await
    }

    /// One webhook, with retries.
    async fn webhook(&self, url: &str, payload: &Payload, body: &[u8]) -> Outcome {
        let mut outcome = Outcome {
            kind: "webhook",
            target: url.to_owned(),
            ok: false,
            attempts: 0,
            status: None,
            error: None,
        };
        if let Err(e) = crate::egress::check_call(url) {
            outcome.error = Some(e.to_string());
            return outcome;
        }
        for n in 1..=ATTEMPTS {
            let wait = backoff(n).mul_f64(self.backoff_scale);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            outcome.attempts = n;
            let mut req = self
                .http
                .post(url)
                .header("Content-Type", "application/json")
                .header("X-Portico-Event", &payload.state)
                .header("X-Portico-Delivery", &payload.id)
                .body(body.to_vec());
            if let Some(secret) = &self.secret {
                req = req.header(SIGNATURE_HEADER, signature(secret, body));
            }
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    outcome.status = Some(status);
                    if resp.status().is_success() {
                        outcome.ok = true;
                        outcome.error = None;
                        return outcome;
                    }
                    outcome.error = Some(format!("answered {status}"));
                    if !(status == 408 || status == 429 || status >= 500) {
                        break;
                    }
                }
                Err(e) => {
                    outcome.error = Some(error_chain(&e));
                    if is_egress_refusal(&e) {
                        break;
                    }
                }
            }
            tracing::debug!(url, attempt = n, error = ?outcome.error, "alert webhook not delivered yet");
        }
        tracing::warn!(url, rule = %payload.rule, api = %payload.api, state = %payload.state,
            attempts = outcome.attempts, error = ?outcome.error, "alert webhook not delivered");
        outcome
    }

    /// One email (the SMTP server retries on its side).
    async fn email(&self, addr: &str, payload: &Payload) -> Outcome {
        let mut outcome = Outcome {
            kind: "email",
            target: addr.to_owned(),
            ok: false,
            attempts: 1,
            status: None,
            error: None,
        };
        let Some(mailer) = &self.mailer else {
            outcome.attempts = 0;
            outcome.error = Some("no SMTP server (--smtp)".to_owned());
            return outcome;
        };
        let subject = format!(
            "[{} {}] {}: {}",
            payload.state.to_ascii_uppercase(),
            payload.severity,
            payload.rule,
            payload.summary
        );
        let text = email_text(payload);
        match mailer.send(addr, &subject, text, None).await {
            Ok(()) => outcome.ok = true,
            Err(e) => {
                tracing::warn!(to = addr, error = %e, "alert email not sent");
                outcome.error = Some(e);
            }
        }
        outcome
    }
}

/// The plain-text body of an alert email.
fn email_text(p: &Payload) -> String {
    let mut t = format!(
        "{}\n\nrule       {}\napi        {}\ncondition  {} (threshold {}, for {} s)\nvalue      {}\nseverity   {}\nstate      {}\nstarted at {}\nfired at   {}\n",
        p.summary,
        p.rule,
        p.api,
        p.condition,
        p.threshold,
        p.for_s,
        p.value.map(|v| v.to_string()).unwrap_or_else(|| "no data".to_owned()),
        p.severity,
        p.state,
        p.started_at,
        p.fired_at,
    );
    if let Some(r) = &p.resolved_at {
        t.push_str(&format!("resolved   {r}\n"));
    }
    if let Some(d) = &p.description {
        t.push_str(&format!("\n{d}\n"));
    }
    if let Some(u) = &p.console_url {
        t.push_str(&format!("\n{u}\n"));
    }
    t.push_str(&format!("\nsent by {} at {}\n", p.registry, p.sent_at));
    t
}

/// The outcomes as stored with the history event.
pub fn outcomes_json(state: &str, outcomes: &[Outcome]) -> Value {
    json!({"state": state, "at": portico_control::clock::now_rfc3339(), "receivers": outcomes})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let waits: Vec<u64> = (1..=ATTEMPTS).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 32, 60]);
    }
}
