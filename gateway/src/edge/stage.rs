//! The stage contract every edge stage is built and answers with: [`Stage`], [`Flow`], the
//! request parts the stages read ([`EdgeRequest`]), what they learn ([`EdgeCtx`]) and the
//! state a plane carries across reloads ([`Carried`]). The stages' files use this file; it
//! uses none of them, only the state types they keep (`cache_store.rs`, `limiters.rs`,
//! `replay.rs`).

use super::cache_store::{CacheTicket, HotState};
use super::limiters::RateLimiters;
use super::replay::ReplayCache;
use crate::error::GatewayError;
use crate::model::{Response, RouteMatch};
use portico_control::{v1, Api, Snapshot};
use std::net::IpAddr;
use std::sync::Arc;

/// What a stage decided.
#[derive(Debug)]
pub enum Flow {
    /// Go on to the next stage.
    Continue,
    /// Stop here and answer: `Ok` with a response the gateway makes itself (a degradation
    /// fallback), `Err` with a refusal for the rescue point's envelope. The backend is not
    /// called.
    Respond(Result<Response, GatewayError>),
}

impl From<GatewayError> for Flow {
    fn from(e: GatewayError) -> Self {
        Flow::Respond(Err(e))
    }
}

/// The parts of the incoming request the edge stages read.
#[derive(Debug)]
pub struct EdgeRequest<'a> {
    /// Upper-case method as sent.
    pub method: &'a str,
    /// The path exactly as on the request line, without the query.
    pub path: &'a str,
    /// The raw query (after `?`), if any.
    pub query: Option<&'a str>,
    pub headers: &'a http::HeaderMap,
    /// The socket peer's address.
    pub peer: Option<IpAddr>,
    /// The whole request body (empty until the pipeline has read it, after `route`).
    pub body: &'a [u8],
    /// The gateway's clock, Unix epoch milliseconds (a parameter so tests control time).
    pub now_ms: u64,
}

/// What the stages learn about a request, in order; read by later stages, the pipeline
/// (which hands the route and the caller to the invoke tier) and the access log.
#[derive(Debug, Default)]
pub struct EdgeCtx {
    /// The client's address after trusted-proxy resolution (set by `ip_acl`).
    pub client_ip: Option<IpAddr>,
    /// The trusted proxies between the client and the gateway, left to right, ending with the
    /// peer; empty when the peer is the client (set by `ip_acl`).
    pub proxies: Vec<IpAddr>,
    /// Whether the peer is a trusted proxy (set by `ip_acl`).
    pub peer_trusted: bool,
    /// Set by `route`.
    pub route: Option<RouteMatch>,
    /// Set by `auth` for a signed call (the app key as sent).
    pub app_key: Option<String>,
    /// Set by `auth` for a signed call.
    pub app: Option<Arc<v1::App>>,
    /// Set by `cache` for an API with a cache or hot-key policy when it did not answer.
    pub cache: Option<CacheTicket>,
    /// Set by `auth` for a signed call whose nonce the node found fresh, when nonces are
    /// also recorded cluster-wide (Redis): the pipeline claims it right after `auth`.
    pub nonce_claim: Option<crate::fleet::NonceClaim>,
    /// A router-style call's body as JSON, parsed at most once, when a key selector first
    /// reads it (`keys::router_body`).
    pub router_body: std::sync::OnceLock<Option<serde_json::Value>>,
    /// Set by `degrade` when a switch that is on answered (its fallback or 503
    /// `API_DEGRADED`): the metrics and the access log count a fallback answer under the code
    /// `DEGRADED_FALLBACK`, apart from failures (docs/operations/history-and-reports.md, "Availability and
    /// degraded answers").
    pub degraded: bool,
}

impl EdgeCtx {
    /// The matched API; stages after `route` may rely on it.
    pub fn api(&self) -> Option<&Arc<Api>> {
        self.route.as_ref().map(|r| &r.api)
    }
}

/// Edge state that lives across reloads of one plane (docs/ARCHITECTURE.md, "One
/// snapshot"): stages built from a new snapshot share it with the stages they replace.
#[derive(Debug, Clone, Default)]
pub struct Carried {
    /// Nonces seen per app within the signature window (`auth`).
    pub replay: Arc<ReplayCache>,
    /// Rate limiters, kept per rule while the rule is unchanged (`rate_limit`).
    pub limiters: Arc<RateLimiters>,
    /// Response caches and hot-key detectors, kept per API while its definition is
    /// unchanged (`cache`).
    pub hot: Arc<HotState>,
}

/// One edge stage: one file, one struct, one `impl Stage`. Immutable once built, except for
/// the state it deliberately shares through [`Carried`].
pub trait Stage: Send + Sync {
    /// Reload phase, on the reload task (never per request): builds the stage from a
    /// validated snapshot, taking any state it keeps across reloads from `carried`. The stage
    /// built serves every request of this snapshot.
    fn build(snapshot: &Snapshot, carried: &Carried) -> Self
    where
        Self: Sized;

    /// The stage's name, as in metrics and the pipeline chart.
    fn name(&self) -> &'static str;

    /// Runs in the request phase, in pipeline order. `Flow::Continue` passes the request on;
    /// `Flow::Respond` answers it at once and nothing after this stage runs.
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow;
}
