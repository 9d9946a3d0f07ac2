//! `permit`: whether the app that signed a call may call this API.
//!
//! For an API whose `auth` is `signature`: an app whose `status` is `disabled` gets 403
//! `APP_DISABLED`; an app whose `apis` neither contains `"*"` nor the API's id gets 403
//! `APP_FORBIDDEN`. For `auth: none` APIs there is no app and the stage passes.
//!
//! The notification endpoints (`model::NOTIFY_STREAM`, `NOTIFY_ACK`) are granted to an
//! active app granted at least one topic (`topics/<name>` listing it or `"*"`, or the app
//! listing an existing topic in its own `topics`), else 403
//! `APP_FORBIDDEN` (docs/PROTOCOL.md, "Notifications").
//!
//! The stage reads the app `auth` put in the context (the snapshot's document at the time
//! the pipeline was built) and, for notifications, the snapshot's topics.

use crate::edge::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use portico_control::{v1, Snapshot};

/// Checks the calling app's status and grants.
#[derive(Debug, Clone, Default)]
pub struct PermitStage {
    /// The snapshot's notification topics, for the notification endpoints.
    topics: std::collections::BTreeMap<String, std::sync::Arc<v1::Topic>>,
}

/// Whether `app` is granted the API `api_id`: `"*"` or the id itself in its `apis`.
pub fn granted(app: &v1::App, api_id: &str) -> bool {
    app.apis.iter().any(|a| a == "*" || a == api_id)
}

impl Stage for PermitStage {
    /// Reload phase: keeps the snapshot's topics (the stage otherwise reads the app `auth`
    /// found). Carries nothing.
    fn build(snapshot: &Snapshot, _carried: &Carried) -> Self {
        PermitStage {
            topics: snapshot.topics.clone(),
        }
    }

    fn name(&self) -> &'static str {
        "permit"
    }

    /// Request phase, after `auth`. `Continue`: an `auth: none` API, or an active app granted
    /// this API; `Respond`: 403 `APP_DISABLED` / `APP_FORBIDDEN`. Without a route, or on a
    /// signed API without an authenticated app (a pipeline bug), it fails closed with 500.
    fn apply(&self, _req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow {
        let Some(api) = ctx.api() else {
            return GatewayError::new(Code::Internal, "permit ran before route").into();
        };
        if api.auth == v1::AuthMode::None {
            return Flow::Continue;
        }
        let Some(app) = ctx.app.as_ref() else {
            return GatewayError::new(Code::Internal, "permit ran before auth").into();
        };
        if app.status == v1::AppStatus::Disabled {
            return GatewayError::new(Code::AppDisabled, "this app is disabled").into();
        }
        if crate::model::is_notify_api(&api.id) {
            let key = ctx.app_key.as_deref().unwrap_or_default();
            let listed = self
                .topics
                .values()
                .any(|t| t.apps.iter().any(|a| a == "*" || a == key));
            let any = listed || app.topics.iter().any(|t| self.topics.contains_key(t));
            if !any {
                return GatewayError::new(
                    Code::AppForbidden,
                    "this app is not granted any notification topic",
                )
                .into();
            }
            return Flow::Continue;
        }
        if !granted(app, &api.id) {
            return GatewayError::new(
                Code::AppForbidden,
                format!("this app is not granted the API {}", api.id),
            )
            .into();
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{api, app, get, routed};
    use http::HeaderMap;
    use v1::{AppStatus, AuthMode};

    fn run(api_id: &str, auth: AuthMode, caller: Option<std::sync::Arc<v1::App>>) -> &'static str {
        let headers = HeaderMap::new();
        let req = get("/x", &headers, None);
        let mut ctx = routed(&api(api_id, auth, vec![]));
        ctx.app = caller;
        match PermitStage::build(&Snapshot::default(), &Carried::default()).apply(&req, &mut ctx) {
            Flow::Continue => "OK",
            Flow::Respond(Err(e)) => e.code.as_str(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn wildcard_and_listed_grants() {
        let all = app("s", AppStatus::Active, &["*"], vec![]);
        let some = app("s", AppStatus::Active, &["order.get", "order.list"], vec![]);
        assert_eq!(
            run("order.get", AuthMode::Signature, Some(all.clone())),
            "OK"
        );
        assert_eq!(run("anything", AuthMode::Signature, Some(all)), "OK");
        assert_eq!(
            run("order.list", AuthMode::Signature, Some(some.clone())),
            "OK"
        );
        assert_eq!(
            run("order.create", AuthMode::Signature, Some(some)),
            "APP_FORBIDDEN"
        );
        let none = app("s", AppStatus::Active, &[], vec![]);
        assert_eq!(
            run("order.get", AuthMode::Signature, Some(none)),
            "APP_FORBIDDEN"
        );
    }

    #[test]
    fn disabled_app_is_refused_before_grants() {
        let off = app("s", AppStatus::Disabled, &["*"], vec![]);
        assert_eq!(
            run("order.get", AuthMode::Signature, Some(off)),
            "APP_DISABLED"
        );
        let off_not_granted = app("s", AppStatus::Disabled, &[], vec![]);
        assert_eq!(
            run("order.get", AuthMode::Signature, Some(off_not_granted)),
            "APP_DISABLED"
        );
    }

    #[test]
    fn open_apis_pass_and_missing_app_fails_closed() {
        assert_eq!(run("public", AuthMode::None, None), "OK");
        assert_eq!(run("order.get", AuthMode::Signature, None), "INTERNAL");
        let headers = HeaderMap::new();
        let req = get("/x", &headers, None);
        let mut ctx = EdgeCtx::default();
        assert!(matches!(
            PermitStage::default().apply(&req, &mut ctx),
            Flow::Respond(_)
        ));
    }

    #[test]
    fn notification_endpoints_need_a_topic_grant() {
        use crate::model::{notify_api, NOTIFY_STREAM};
        let mut snap = Snapshot::default();
        let topic = |apps: &[&str]| {
            std::sync::Arc::new(v1::Topic {
                owner: None,
                description: None,
                apps: apps.iter().map(|a| (*a).to_owned()).collect(),
                retention_s: 60,
            })
        };
        snap.topics.insert("orders".into(), topic(&["m1"]));
        snap.topics.insert("coupons".into(), topic(&[]));
        let stage = PermitStage::build(&snap, &Carried::default());
        let api = std::sync::Arc::new(notify_api(NOTIFY_STREAM).unwrap());
        let headers = HeaderMap::new();
        let req = get("/notify/v1/stream", &headers, None);
        let check = |key: &str, caller: std::sync::Arc<v1::App>| {
            let mut ctx = routed(&api);
            ctx.app_key = Some(key.to_owned());
            ctx.app = Some(caller);
            match stage.apply(&req, &mut ctx) {
                Flow::Continue => "OK",
                Flow::Respond(Err(e)) => e.code.as_str(),
                other => panic!("unexpected {other:?}"),
            }
        };
        // Granted by the topic's list, not by `apis`.
        assert_eq!(check("m1", app("s", AppStatus::Active, &[], vec![])), "OK");
        assert_eq!(
            check("m2", app("s", AppStatus::Active, &["*"], vec![])),
            "APP_FORBIDDEN"
        );
        // Granted by the app's own `topics` (an existing topic only).
        let mut own = (*app("s", AppStatus::Active, &[], vec![])).clone();
        own.topics = vec!["coupons".into()];
        assert_eq!(check("m2", std::sync::Arc::new(own.clone())), "OK");
        own.topics = vec!["nope".into()];
        assert_eq!(check("m2", std::sync::Arc::new(own)), "APP_FORBIDDEN");
        assert_eq!(
            check("m1", app("s", AppStatus::Disabled, &[], vec![])),
            "APP_DISABLED"
        );
    }
}
