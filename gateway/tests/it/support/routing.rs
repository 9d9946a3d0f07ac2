//! Helpers for the routing tests: demo backends on fixed (restartable) free ports, their
//! admin switches, and a tree with `auth: none` APIs over one cluster.

use super::*;
use serde_json::json;

/// A demo backend process that can be stopped and started again on the same ports.
pub struct Demo {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub load: String,
    pub proc: Option<BackendProcess>,
}

impl Demo {
    /// Starts a backend (HTTP and gRPC) reporting `load` (empty: none).
    pub fn start(load: &str) -> Demo {
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut d = Demo {
            http,
            grpc,
            load: load.to_owned(),
            proc: None,
        };
        d.restart();
        d
    }

    /// Starts the process again on the same ports.
    pub fn restart(&mut self) {
        let (h, g) = (self.http.to_string(), self.grpc.to_string());
        let mut args = vec!["--http", &h, "--grpc", &g];
        if !self.load.is_empty() {
            args.extend(["--load", self.load.as_str()]);
        }
        // The port may linger briefly after a kill: retry.
        let mut last = None;
        for _ in 0..50 {
            match BackendProcess::start(&args) {
                Ok(p) => {
                    self.proc = Some(p);
                    return;
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("demo backend did not restart: {last:?}");
    }

    /// Kills the process (connections to it are refused from now on).
    pub fn kill(&mut self) {
        self.proc = None;
    }

    /// `POST /__admin/<what>?<query>`.
    pub fn admin(&self, what: &str, query: &str) {
        let url = format!("http://{}/__admin/{what}?{query}", self.http);
        let r = client().post(url).send().expect("admin call");
        assert!(r.status().is_success(), "admin {what}: {}", r.status());
    }

    pub fn admin_state(&self) -> Value {
        client()
            .get(format!("http://{}/__admin", self.http))
            .send()
            .unwrap()
            .json()
            .unwrap()
    }
}

/// The load report of a single figure for every part.
pub fn load(x: f64) -> String {
    format!("vm_cpu={x},vm_mem={x},cpu={x},mem={x}")
}

/// A tree with app-less (`auth: none`) APIs: `GET /v1/echo` (HTTP cluster `web`) and, when
/// `grpc` is given, `GET /v1/orders/{order_id}` (gRPC cluster `rpc`).
pub fn tree(web: Value, grpc: Option<Value>) -> ConfigTree {
    let t = ConfigTree::new();
    t.put("clusters/web", &web);
    t.put(
        "apis/echo",
        &json!({"id": "echo", "http": {"method": "GET", "path": "/v1/echo"},
                "backend": {"cluster": "web", "timeout_ms": 3000, "http": {"path": "/echo"}},
                "auth": "none"}),
    );
    if let Some(rpc) = grpc {
        let fds = portico_demo::descriptor_set_bytes();
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(fds));
        std::fs::create_dir_all(t.path().join("descriptors")).unwrap();
        std::fs::write(t.path().join(format!("descriptors/{sha}.pb")), fds).unwrap();
        t.put("clusters/rpc", &rpc);
        t.put("apis/order.get", &json!({
            "id": "order.get",
            "http": {"method": "GET", "path": "/v1/orders/{order_id}"},
            "backend": {"cluster": "rpc", "timeout_ms": 3000,
                        "grpc": {"service": "demo.order.v1.OrderService", "method": "GetOrder", "descriptor": sha}},
            "auth": "none"
        }));
    }
    t
}

/// One answer: status, the instance that served it (`X-Demo-Instance`, or the gRPC
/// metadata header), the `Set-Cookie` if any, and whether a load header leaked.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub instance: String,
    pub cookie: Option<String>,
    pub load_leaked: bool,
    pub code: String,
    pub retry_after: Option<String>,
}

pub fn call(gw: &GatewayProcess, path: &str, headers: &[(&str, &str)]) -> Answer {
    call_with(&client(), gw, path, headers)
}

pub fn call_with(
    c: &reqwest::blocking::Client,
    gw: &GatewayProcess,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut req = c.get(gw.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().expect("request");
    let h = resp.headers().clone();
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let status = resp.status().as_u16();
    let body: Value = resp.json().unwrap_or(Value::Null);
    Answer {
        status,
        instance: get("x-demo-instance")
            .or_else(|| get("grpc-metadata-x-demo-instance"))
            .unwrap_or_default(),
        cookie: get("set-cookie"),
        load_leaked: h.contains_key("x-portico-load")
            || h.contains_key("grpc-metadata-x-portico-load"),
        code: body["code"].as_str().unwrap_or_default().to_owned(),
        retry_after: get("retry-after"),
    }
}

/// The `clusters.<name>` part of `/status`.
pub fn cluster_status(gw: &GatewayProcess, name: &str) -> Value {
    gw.status()["clusters"][name].clone()
}

/// Whether `/status` says endpoint `addr` of cluster `name` is healthy.
pub fn endpoint_healthy(gw: &GatewayProcess, name: &str, addr: &str) -> Option<bool> {
    let c = cluster_status(gw, name);
    ["primary", "standby"]
        .iter()
        .filter_map(|s| c[*s].as_array())
        .flatten()
        .find(|e| e["addr"] == addr)
        .and_then(|e| e["healthy"].as_bool())
}
