//! The registry's outbound calls made for config authors — alert webhooks, autoscale webhooks
//! and `sleep_url`s, the reflection import — go through the one egress policy
//! (`portico_control::egress`; docs/operations/egress.md, "Egress policy"):
//!
//! - at write time, a document naming a refused target is refused with 400 and the reason
//!   ([`check_document`], from `api::validation`);
//! - at call time, the URL's host is checked as written (an address literal), a host name is
//!   resolved and every address checked, and the connection goes to the checked addresses only
//!   ([`Resolver`]: reqwest asks it, never the system resolver), never following a redirect
//!   ([`client_builder`]). A refused call is logged, counted
//!   (`portico_control::egress::refused_total`) and reported as the call's error.

use portico_control::egress::{self, Refused};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;

/// reqwest's resolver for these calls: the policy's resolve-then-check.
#[derive(Debug, Clone, Copy, Default)]
pub struct Resolver;

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match egress::global().resolve(&host, 0).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                Err(e) => {
                    if e.by_policy() {
                        tracing::warn!(host, error = %e, "egress: outbound call refused");
                    }
                    Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}

/// A client builder for outbound calls made for config authors: no proxy, no redirects, the
/// policy's resolver.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(Resolver))
}

/// Checks a URL about to be called: its host as written (reqwest does not resolve an address
/// literal, so the policy sees it here). Logs and counts a refusal.
pub fn check_call(url: &str) -> Result<(), Refused> {
    let parsed = reqwest::Url::parse(url).map_err(|e| Refused::Invalid(format!("{url:?}: {e}")))?;
    let policy = egress::global();
    // The URL parser has already normalised address literals (`2852039166` → `169.254.169.254`).
    let result = match parsed.host_str() {
        Some(host) => policy.check_host(host).map(|_| ()),
        None => Err(Refused::Invalid(format!("{url:?}: no host"))),
    };
    if let Err(e) = &result {
        if e.by_policy() {
            egress::record_refusal();
            tracing::warn!(url, error = %e, "egress: outbound call refused");
        }
    }
    result
}

/// The outbound targets a document names (its JSON field and URL): alert receivers'
/// `webhook`, a cluster's `autoscale.webhook`, `sleep.sleep_url` and `sleep.wake_url`, an
/// app's `callback_url`.
pub fn targets(rel: &str, doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut push = |field: String, v: &Value| {
        if let Some(url) = v.as_str() {
            out.push((field, url.to_owned()));
        }
    };
    let kind = rel.rsplit_once('/').map_or(rel, |(dir, _)| dir);
    let kind = kind.rsplit('/').next().unwrap_or(kind);
    match kind {
        "alerts" => {
            if let Some(list) = doc.get("receivers").and_then(Value::as_array) {
                for (i, r) in list.iter().enumerate() {
                    push(format!("receivers[{i}].webhook"), &r["webhook"]);
                }
            }
        }
        "clusters" => {
            push("autoscale.webhook".into(), &doc["autoscale"]["webhook"]);
            push("sleep.sleep_url".into(), &doc["sleep"]["sleep_url"]);
            push("sleep.wake_url".into(), &doc["sleep"]["wake_url"]);
        }
        "apps" => push("callback_url".into(), &doc["callback_url"]),
        _ => {}
    }
    out
}

/// Refuses (with the field and the policy's reason) a document naming a target the policy
/// refuses as written: an address literal in a denied range, a metadata host name. A host
/// name is checked again, resolved, when it is called.
pub fn check_document(rel: &str, doc: &Value) -> Result<(), String> {
    for (field, url) in targets(rel, doc) {
        match egress::global().check_url(&url) {
            Err(e) if e.by_policy() => return Err(format!("{rel}: {field}: {e}")),
            _ => {}
        }
    }
    Ok(())
}

/// A connector for tonic that connects to the checked addresses only.
#[derive(Clone)]
pub struct Pinned(pub Vec<SocketAddr>);

impl tonic::codegen::Service<http::Uri> for Pinned {
    type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let addrs = self.0.clone();
        Box::pin(async move {
            let mut last = std::io::Error::other("no checked address");
            for addr in addrs {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        return Ok(hyper_util::rt::TokioIo::new(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_naming_metadata_targets_are_refused() {
        let alert =
            json!({"receivers": [{"email": "a@b"}, {"webhook": "http://169.254.169.254/latest"}]});
        let err = check_document("alerts/high-latency", &alert).unwrap_err();
        assert!(err.contains("receivers[1].webhook"), "{err}");
        assert!(err.contains("169.254.169.254"), "{err}");
        let ok = json!({"receivers": [{"webhook": "http://127.0.0.1:9/hook"}]});
        check_document("alerts/x", &ok).unwrap();
        let cluster = json!({"sleep": {"wake_url": "http://[fd00:ec2::254]/wake"}});
        assert!(check_document("clusters/c", &cluster).is_err());
        let cluster = json!({"autoscale": {"webhook": "http://metadata.google.internal/"}});
        assert!(check_document("sandbox/clusters/c", &cluster).is_err());
        let app = json!({"callback_url": "http://2852039166/cb"});
        assert!(check_document("apps/m", &app).is_err());
        assert!(check_call("http://0xa9fea9fe/").is_err());
        assert!(check_call("http://[::ffff:169.254.169.254]/").is_err());
        check_call("http://127.0.0.1:9/").unwrap();
    }
}
