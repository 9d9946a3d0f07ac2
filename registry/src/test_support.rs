//! What the unit tests that need a real ZooKeeper share: a server of their own (the testkit's,
//! on a free loopback port) and a registry state on it.

use crate::api::context::Ctx;
use crate::state::{AppState, Config, Shared};
use axum::http::HeaderMap;
use axum::response::Response;
use portico_testkit::ZooKeeper;
use serde_json::Value;

/// A ZooKeeper and a registry state (root `/portico`, no token) on it. The server stops when
/// this is dropped.
pub struct TestRegistry {
    /// The server, running as long as this lives.
    _zk: ZooKeeper,
    /// The state handlers receive.
    pub state: Shared,
}

impl TestRegistry {
    /// Starts a ZooKeeper (blocking until it accepts sessions).
    pub fn start() -> TestRegistry {
        let zk = ZooKeeper::start_locked();
        let state = AppState::new(&Config {
            zk_hosts: zk.connect_string(),
            zk_root: "/portico".to_owned(),
            token: None,
            zk_auth: zk
                .credentials()
                .map(|c| portico_control::zk::ZkAuth::parse(&c.registry).unwrap()),
        });
        TestRegistry { _zk: zk, state }
    }
}

/// A request context with the operator `tester` and `headers` (`(name, value)` pairs).
pub fn ctx(headers: &[(&'static str, &str)]) -> Ctx {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(*name, value.parse().expect("a valid header value"));
    }
    Ctx {
        request_id: "req-test".to_owned(),
        operator: Some("tester".to_owned()),
        headers: map,
    }
}

/// A response's status, ETag (unquoted) and JSON body (`Null` when empty or not JSON).
pub async fn read(response: Response) -> (u16, Option<String>, Value) {
    let status = response.status().as_u16();
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_matches('"').to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a readable body");
    (
        status,
        etag,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}
