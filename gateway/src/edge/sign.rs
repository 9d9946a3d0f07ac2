//! Request signing (DESIGN.md §3.1) as the edge uses it: a re-export of
//! [`portico_control::sign`], the one implementation shared with the `portico` CLI and the
//! tests, so the gateway can never drift from what merchants' tools compute.
//!
//! Also holds the hand-built snapshot pieces the edge stages' unit tests share.

pub use portico_control::sign::*;

#[cfg(test)]
pub(crate) mod testing {
    //! Small builders for stage tests: an API, an app, a routed context, a request.

    use crate::edge::{EdgeCtx, EdgeRequest, RouteMatch};
    use portico_control::{v1, Api, BackendKind};
    use std::net::IpAddr;
    use std::sync::Arc;

    /// The clock of the DESIGN.md test vectors.
    pub const NOW_MS: u64 = 1_796_000_000_000;

    /// An API with no bindings (stages after `route` never look at them).
    pub fn api(id: &str, auth: v1::AuthMode, rate_limits: Vec<v1::RateLimitRule>) -> Arc<Api> {
        let policy = v1::Policy {
            rate_limits,
            ..v1::Policy::default()
        };
        let definition = v1::ApiDefinition {
            id: id.to_owned(),
            version: 1,
            http: v1::HttpRule {
                method: "GET".to_owned(),
                path: format!("/{id}"),
                body: None,
                response_body: None,
                additional_bindings: Vec::new(),
            },
            backend: v1::Backend {
                cluster: "c".to_owned(),
                timeout_ms: 1000,
                grpc: None,
                http: Some(v1::HttpBackend::default()),
            },
            auth,
            policy: policy.clone(),
            description: None,
        };
        Arc::new(Api {
            id: id.to_owned(),
            version: 1,
            bindings: Vec::new(),
            backend: BackendKind::Http { path: None },
            cluster: "c".to_owned(),
            timeout_ms: 1000,
            auth,
            policy,
            definition,
        })
    }

    /// An app document.
    pub fn app(
        secret: &str,
        status: v1::AppStatus,
        apis: &[&str],
        rate_limits: Vec<v1::AppRateLimit>,
    ) -> Arc<v1::App> {
        Arc::new(v1::App {
            secret: secret.to_owned(),
            status,
            apis: apis.iter().map(|s| (*s).to_owned()).collect(),
            rate_limits,
            name: None,
        })
    }

    /// A context as `route` leaves it for `api`.
    pub fn routed(api: &Arc<Api>) -> EdgeCtx {
        EdgeCtx {
            route: Some(RouteMatch {
                api: Arc::clone(api),
                binding: Some(0),
                vars: Vec::new(),
                router_style: false,
            }),
            ..EdgeCtx::default()
        }
    }

    /// A bodiless GET of `path` from `peer` at [`NOW_MS`].
    pub fn get<'a>(
        path: &'a str,
        headers: &'a http::HeaderMap,
        peer: Option<IpAddr>,
    ) -> EdgeRequest<'a> {
        EdgeRequest {
            method: "GET",
            path,
            query: None,
            headers,
            peer,
            body: b"",
            now_ms: NOW_MS,
        }
    }
}
