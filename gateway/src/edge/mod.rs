//! The edge: cheap checks first, each stage in its own file, all reading one snapshot.
//!
//! Request order (the pipeline in `crate::pipeline` lists them exactly so):
//! `ip_acl → route → (read body) → auth → permit → rate_limit → degrade`.

pub mod auth;
pub mod degrade;
pub mod framing;
pub mod ip_acl;
pub mod permit;
pub mod rate_limit;
pub mod route;
pub mod sign;

use crate::error::GatewayError;
use portico_control::v1;
use portico_control::Api;
use std::net::IpAddr;
use std::sync::Arc;

/// What a stage decided.
#[derive(Debug)]
pub enum Flow {
    /// Go on to the next stage.
    Continue,
    /// Stop here and answer with this reply (the backend is not called).
    Respond(Reply),
}

/// An answer the gateway makes itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A refusal or failure, answered with the §3.2 envelope.
    Error(GatewayError),
    /// A canned answer (a degradation switch's fallback).
    Canned {
        status: u16,
        headers: Vec<(String, String)>,
        body: bytes::Bytes,
    },
}

impl From<GatewayError> for Flow {
    fn from(e: GatewayError) -> Self {
        Flow::Respond(Reply::Error(e))
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

/// What a route match found: the API, which binding matched, and the path variables.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    pub api: Arc<Api>,
    /// Index into `api.bindings`; `None` for the `/router?method=` style.
    pub binding: Option<usize>,
    /// Path variables: field path (`order_id`, `parent.name`) → percent-decoded value.
    pub vars: Vec<(String, String)>,
    /// Whether the request came in the open-platform router style.
    pub router_style: bool,
}

/// What the stages learn about a request, in order; read by later stages, the invoke tier
/// and the access log.
#[derive(Debug, Default)]
pub struct EdgeCtx {
    /// The client's address after trusted-proxy resolution (set by `ip_acl`).
    pub client_ip: Option<IpAddr>,
    /// Set by `route`.
    pub route: Option<RouteMatch>,
    /// Set by `auth` for a signed call (the app key as sent).
    pub app_key: Option<String>,
    /// Set by `auth` for a signed call.
    pub app: Option<Arc<v1::App>>,
}

impl EdgeCtx {
    /// The matched API; stages after `route` may rely on it.
    pub fn api(&self) -> Option<&Arc<Api>> {
        self.route.as_ref().map(|r| &r.api)
    }
}

/// One edge stage. Each is built from a snapshot (`TryFrom`/`build`) and is immutable
/// afterwards, except for runtime state it deliberately carries (limiters, replay cache).
pub trait Stage: Send + Sync {
    /// The stage's name, as in metrics and the pipeline chart.
    fn name(&self) -> &'static str;

    /// Runs in the request phase, in pipeline order. `Flow::Continue` passes the request on;
    /// `Flow::Respond` answers it at once and nothing after this stage runs.
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow;
}
