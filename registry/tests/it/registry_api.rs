//! The registry's admin API against a real ZooKeeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{registry, ORDER_PROTO, TOKEN};
use portico_testkit::ZooKeeper;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn grpc_cluster() -> Value {
    json!({"protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:50051", "weight": 1}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_envelope_and_every_documented_route_exists() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let anon = reqwest::Client::new();

    // The OpenAPI document and health are public.
    let doc: Value = anon
        .get(format!("{}/openapi.json", reg.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let health = anon
        .get(format!("{}/health", reg.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);

    // Everything else needs the token: 401 UNAUTHENTICATED in the envelope.
    for auth in [None, Some("Bearer wrong"), Some("Basic abc")] {
        let mut req = anon
            .get(format!("{}/clusters", reg.base))
            .header("X-Portico-Request-Id", "req-123");
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(resp.headers()["x-portico-request-id"], "req-123");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "UNAUTHENTICATED");
        assert_eq!(body["request_id"], "req-123");
        assert!(body["message"].as_str().unwrap().len() > 5);
    }

    // Unknown routes and methods get the envelope too.
    let r = reg.get("/no-such-thing").await.expect(404);
    assert_eq!(r.code(), "ROUTE_NOT_FOUND");
    assert!(r.request_id.is_some());
    let r = reg
        .send(reg.request(Method::PATCH, "/clusters"))
        .await
        .expect(405);
    assert_eq!(r.code(), "METHOD_NOT_ALLOWED");

    // Every documented route exists on the server (whatever it answers to dummy input).
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 30, "only {} paths documented", paths.len());
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path.replace("{version}", "1").replace(['{', '}'], "");
            let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let r = reg
                .send(
                    reg.request(m, &concrete)
                        .header("content-type", "application/json")
                        .body("{}"),
                )
                .await;
            assert_ne!(
                r.code(),
                "ROUTE_NOT_FOUND",
                "{method} {path} is documented but not routed"
            );
            assert_ne!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            if !r.status.is_success() {
                assert!(
                    r.body["request_id"].is_string(),
                    "{method} {path}: no envelope: {:?}",
                    r.body
                );
            }
        }
    }

    // Bad JSON is 400; a wrong field type is 422 naming the field.
    let r = reg
        .send(
            reg.request(Method::PUT, "/clusters/c1")
                .header("content-type", "application/json")
                .body("{nope"),
        )
        .await
        .expect(400);
    assert_eq!(r.code(), "BAD_REQUEST");
    let r = reg
        .put(
            "/clusters/c1",
            &json!({"protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:1", "weight": "heavy"}]}),
        )
        .await
        .expect(422);
    assert_eq!(r.code(), "VALIDATION_FAILED");
    assert_eq!(r.body["details"][0]["field"], "endpoints[0].weight");
    // Semantically wrong (gateway validation): named document and field.
    let r = reg
        .put(
            "/clusters/c1",
            &json!({"protocol": "grpc", "endpoints": [{"addr": "not an address"}]}),
        )
        .await
        .expect(422);
    assert_eq!(r.body["details"][0]["path"], "clusters/c1");
    assert!(
        r.body["details"][0]["field"]
            .as_str()
            .unwrap()
            .starts_with("endpoints"),
        "{:?}",
        r.body
    );
    // Bad ids.
    reg.get("/clusters/bad%20name").await.expect(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_apps_switches_ipacl_and_audit() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;

    // Clusters: create, read with ETag, CAS update, conflict, create-existing conflict.
    let r = reg
        .post("/clusters", &json!({"name": "order-svc", "protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:50051"}]}))
        .await
        .expect(201);
    let v0 = r.version();
    assert_eq!(v0, "0");
    reg.post(
        "/clusters",
        &json!({"name": "order-svc", "protocol": "grpc", "endpoints": []}),
    )
    .await
    .expect(409);
    let r = reg.get("/clusters/order-svc").await.expect(200);
    assert_eq!(r.body["protocol"], "grpc");
    assert_eq!(r.version(), "0");
    let r = reg
        .put_if("/clusters/order-svc", "0", &grpc_cluster())
        .await
        .expect(200);
    assert_eq!(r.version(), "1");
    let r = reg
        .put_if("/clusters/order-svc", "0", &grpc_cluster())
        .await
        .expect(409);
    assert_eq!(r.code(), "CONFLICT");
    let r = reg
        .send(
            reg.request(Method::PUT, "/clusters/order-svc")
                .header("If-None-Match", "*")
                .json(&grpc_cluster()),
        )
        .await
        .expect(409);
    assert_eq!(r.code(), "CONFLICT");
    let list = reg.get("/clusters").await.expect(200);
    assert_eq!(list.body["items"][0]["id"], "order-svc");
    assert_eq!(list.body["items"][0]["etag"], "1");

    // The APIs the apps and switches below name (the registry refuses grants and switches
    // naming no API: tests/it/write_checks.rs).
    reg.put(
        "/clusters/refs",
        &json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:1"}]}),
    )
    .await
    .expect(201);
    let api = |id: &str, path: &str| {
        json!({"encoding": "utf-8", "content": json!({"id": id, "http": {"method": "GET", "path": path},
            "backend": {"cluster": "refs", "http": {}}}).to_string()})
    };
    let files = json!({"files": {"apis/order.get.json": api("order.get", "/refs/get"),
                                 "apis/order.create.json": api("order.create", "/refs/create")}});
    reg.post("/import?env=live", &files).await.expect(200);

    // Apps: the secret is shown once.
    let created = reg
        .post(
            "/apps",
            &json!({"name": "Merchant One", "apis": ["order.get"]}),
        )
        .await
        .expect(201);
    let key = created.body["app_key"].as_str().unwrap().to_owned();
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    assert!(secret.len() >= 32);
    assert!(created.body["app"].get("secret").is_none());
    let r = reg.get(&format!("/apps/{key}")).await.expect(200);
    assert!(
        r.body.get("secret").is_none(),
        "secret leaked: {:?}",
        r.body
    );
    assert_eq!(r.body["status"], "active");
    let list = reg.get("/apps").await.expect(200);
    assert!(!list
        .bytes
        .windows(secret.len())
        .any(|w| w == secret.as_bytes()));
    // Given key and secret.
    let r = reg
        .post(
            "/apps",
            &json!({"app_key": "merchant-1", "secret": "s3cr3t-value", "apis": ["*"]}),
        )
        .await
        .expect(201);
    assert_eq!(r.body["secret"], "s3cr3t-value");
    reg.post("/apps", &json!({"app_key": "merchant-1"}))
        .await
        .expect(409);
    // Disable, grant, revoke, patch, rotate.
    let r = reg
        .post(&format!("/apps/{key}/disable"), &json!({}))
        .await
        .expect(200);
    assert_eq!(r.body["status"], "disabled");
    let r = reg
        .post(
            &format!("/apps/{key}/grant"),
            &json!({"apis": ["order.create", "order.get"]}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["apis"], json!(["order.get", "order.create"]));
    let r = reg
        .post(
            &format!("/apps/{key}/revoke"),
            &json!({"apis": ["order.get"]}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["apis"], json!(["order.create"]));
    let r = reg
        .json(
            Method::PATCH,
            &format!("/apps/{key}"),
            &json!({"status": "active", "name": "M1"}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["status"], "active");
    assert_eq!(r.body["name"], "M1");
    reg.json(
        Method::PATCH,
        &format!("/apps/{key}"),
        &json!({"secret": "x"}),
    )
    .await
    .expect(400);
    let rotated = reg
        .post(&format!("/apps/{key}/rotate-secret"), &json!({}))
        .await
        .expect(200);
    let secret2 = rotated.body["secret"].as_str().unwrap();
    assert_ne!(secret2, secret);
    // Stale If-Match on an app action.
    let r = reg
        .send(
            reg.request(Method::POST, &format!("/apps/{key}/disable"))
                .header("If-Match", "\"0\""),
        )
        .await
        .expect(409);
    assert_eq!(r.code(), "CONFLICT");
    // Sandbox apps are separate.
    reg.post("/sandbox/apps", &json!({"app_key": "sb-merchant"}))
        .await
        .expect(201);
    reg.get("/apps/sb-merchant").await.expect(404);
    reg.get("/sandbox/apps/sb-merchant").await.expect(200);

    // IP ACL.
    let r = reg.get("/ipacl").await.expect(200);
    assert_eq!(r.body, json!({"deny": [], "allow": []}));
    reg.put("/ipacl", &json!({"deny": ["203.0.113.0/24"], "allow": []}))
        .await
        .expect(201);
    let r = reg.get("/ipacl").await.expect(200);
    assert_eq!(r.body["deny"][0], "203.0.113.0/24");
    let r = reg
        .put("/ipacl", &json!({"deny": ["not-a-cidr"]}))
        .await
        .expect(422);
    assert_eq!(r.body["details"][0]["path"], "ipacl");

    // Switches: who from the header, when set by the registry.
    let r = reg
        .send(
            reg.request(Method::PUT, "/switches/order.get")
                .header("X-Portico-Operator", "sre-alice")
                .json(&json!({"degraded": true, "reason": "db failover", "fallback": {"status": 200, "body": {"items": []}}})),
        )
        .await
        .expect(201);
    assert_eq!(r.body["updated_by"], "sre-alice");
    assert!(r.body["updated_at"].as_str().unwrap().starts_with("20"));
    let r = reg
        .put(
            "/switches/order.get",
            &json!({"degraded": false, "reason": "recovered", "updated_by": "sre-bob"}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["updated_by"], "sre-bob");
    let r = reg
        .put(
            "/switches/order.get",
            &json!({"degraded": true, "fallback": {"status": "x"}}),
        )
        .await
        .expect(422);
    assert_eq!(r.body["details"][0]["field"], "fallback.status");

    // Delete with CAS.
    reg.send(
        reg.request(Method::DELETE, "/clusters/order-svc")
            .header("If-Match", "\"0\""),
    )
    .await
    .expect(409);
    reg.delete("/clusters/order-svc").await.expect(204);
    reg.get("/clusters/order-svc").await.expect(404);

    // The audit log has every change, newest first, with actor and request id.
    let audit = reg.get("/audit?limit=500").await.expect(200);
    let entries = audit.body["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for expected in [
        "cluster.create",
        "cluster.put",
        "app.create",
        "app.disable",
        "app.grant",
        "app.revoke",
        "app.update",
        "app.rotate_secret",
        "ipacl.put",
        "switch.on",
        "switch.off",
        "cluster.delete",
    ] {
        assert!(
            actions.contains(&expected),
            "{expected} missing from {actions:?}"
        );
    }
    assert_eq!(actions[0], "cluster.delete");
    let on = entries.iter().find(|e| e["action"] == "switch.on").unwrap();
    assert_eq!(on["actor"], "sre-alice");
    assert_eq!(on["target"], "switches/order.get");
    assert!(on["request_id"].as_str().unwrap().len() > 3);
    // Paging.
    let page = reg.get("/audit?limit=2").await.expect(200);
    assert_eq!(page.body["entries"].as_array().unwrap().len(), 2);
    let before = page.body["next_before"].as_str().unwrap();
    let next = reg
        .get(&format!("/audit?limit=2&before={before}"))
        .await
        .expect(200);
    assert_eq!(next.body["entries"][0]["id"], entries[2]["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_flow_with_the_demo_proto() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    reg.put("/clusters/order-svc", &grpc_cluster())
        .await
        .expect(201);
    reg.put("/sandbox/clusters/order-svc", &grpc_cluster())
        .await
        .expect(201);

    // Upload the demo proto: one draft per annotated RPC.
    let imported = reg
        .post(
            "/protos",
            &json!({
                "files": {"demo/order.proto": ORDER_PROTO},
                "cluster": "order-svc",
                "timeout_ms": 800,
                "ids": {"demo.order.v1.OrderService/GetOrder": "order.get"}
            }),
        )
        .await
        .expect(200);
    let sha = imported.body["descriptor"].as_str().unwrap().to_owned();
    assert_eq!(sha.len(), 64);
    let ids: Vec<&str> = imported.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"order.get"), "{ids:?}");
    assert!(ids.contains(&"order.createorder"), "{ids:?}");
    assert_eq!(imported.body["problems"], json!([]), "{:#?}", imported.body);
    let draft = reg.get("/sandbox/apis/order.get").await.expect(200);
    assert_eq!(draft.body["http"]["path"], "/v1/orders/{order_id}");
    assert_eq!(
        draft.body["http"]["additional_bindings"][0]["path"],
        "/v1/shops/{shop.id}/orders/{order_id}"
    );
    assert_eq!(draft.body["backend"]["grpc"]["descriptor"], sha.as_str());
    assert_eq!(draft.body["backend"]["timeout_ms"], 800);
    reg.get(&format!("/sandbox/descriptors/{sha}"))
        .await
        .expect(200);
    reg.get(&format!("/descriptors/{sha}")).await.expect(404);
    reg.get("/apis/order.get").await.expect(404);

    // Publish: version 1, live, history, the descriptor copied into the live tree.
    let p1 = reg
        .post("/apis/order.get/publish", &json!({"comment": "first"}))
        .await
        .expect(200);
    assert_eq!(p1.body["version"], 1);
    let live = reg.get("/apis/order.get").await.expect(200);
    assert_eq!(live.body["version"], 1);
    assert_eq!(live.body["backend"]["timeout_ms"], 800);
    let d = reg.get(&format!("/descriptors/{sha}")).await.expect(200);
    assert_eq!(
        d.bytes.len(),
        imported.body["descriptor_bytes"].as_u64().unwrap() as usize
    );

    // Change the draft (CAS), publish again: version 2.
    let mut changed = draft.body.clone();
    changed["backend"]["timeout_ms"] = json!(500);
    reg.put_if("/sandbox/apis/order.get", &draft.version(), &changed)
        .await
        .expect(200);
    reg.put_if("/sandbox/apis/order.get", &draft.version(), &changed)
        .await
        .expect(409);
    let p2 = reg
        .send(
            reg.request(Method::POST, "/apis/order.get/publish")
                .header("If-Match", format!("\"{}\"", live.version())),
        )
        .await
        .expect(200);
    assert_eq!(p2.body["version"], 2);
    // Publishing against a stale live version conflicts.
    let r = reg
        .send(
            reg.request(Method::POST, "/apis/order.get/publish")
                .header("If-Match", format!("\"{}\"", live.version())),
        )
        .await
        .expect(409);
    assert_eq!(r.code(), "CONFLICT");

    // Roll back to version 1: written as version 3 with version 1's content.
    let p3 = reg
        .post("/apis/order.get/rollback", &json!({"version": 1}))
        .await
        .expect(200);
    assert_eq!(p3.body["version"], 3);
    let live = reg.get("/apis/order.get").await.expect(200);
    assert_eq!(live.body["version"], 3);
    assert_eq!(live.body["backend"]["timeout_ms"], 800);
    let h = reg.get("/apis/order.get/history").await.expect(200);
    let versions: Vec<u64> = h.body["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, [1, 2, 3]);
    assert_eq!(h.body["live_version"], 3);
    let v2 = reg.get("/apis/order.get/history/2").await.expect(200);
    assert_eq!(v2.body["backend"]["timeout_ms"], 500);
    reg.post("/apis/order.get/rollback", &json!({"version": 9}))
        .await
        .expect(404);

    // A draft that the live tree cannot take is refused, saying what and where.
    let mut bad = draft.body.clone();
    bad["id"] = json!("order.bad");
    bad["backend"]["cluster"] = json!("nowhere");
    bad["http"]["path"] = json!("/v1/bad/{order_id}");
    bad["http"]["additional_bindings"] = json!([]);
    reg.put("/sandbox/clusters/nowhere", &grpc_cluster())
        .await
        .expect(201);
    reg.put("/sandbox/apis/order.bad", &bad).await.expect(201);
    let r = reg
        .post("/apis/order.bad/publish", &json!({}))
        .await
        .expect(422);
    assert_eq!(r.code(), "VALIDATION_FAILED");
    assert_eq!(r.body["details"][0]["path"], "apis/order.bad");
    assert_eq!(r.body["details"][0]["field"], "backend.cluster");
    reg.get("/apis/order.bad").await.expect(404);
    // Publishing a draft that does not exist.
    let r = reg
        .post("/apis/nothing/publish", &json!({}))
        .await
        .expect(404);
    assert!(r.body["message"].as_str().unwrap().contains("draft"));

    // An HTTP-backend API defined directly as a draft, then published.
    reg.put(
        "/clusters/web",
        &json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:8081"}]}),
    )
    .await
    .expect(201);
    reg.put(
        "/sandbox/clusters/web",
        &json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:8081"}]}),
    )
    .await
    .expect(201);
    reg.post(
        "/sandbox/apis",
        &json!({"id": "web.hello", "http": {"method": "GET", "path": "/v1/hello/{name}"}, "backend": {"cluster": "web", "http": {"path": "/hello/{name}"}}, "auth": "none"}),
    )
    .await
    .expect(201);
    let r = reg
        .post("/apis/web.hello/publish", &json!({}))
        .await
        .expect(200);
    assert_eq!(r.body["version"], 1);

    // Unpublish keeps the history.
    reg.delete("/apis/web.hello").await.expect(204);
    reg.get("/apis/web.hello").await.expect(404);
    reg.get("/apis/web.hello/history").await.expect(200);
    // Publishing again continues the numbering.
    let r = reg
        .post("/apis/web.hello/publish", &json!({}))
        .await
        .expect(200);
    assert_eq!(r.body["version"], 2);

    // The audit log shows the workflow.
    let actions = reg.audit_actions(1000).await;
    for a in [
        "api.import",
        "api.publish",
        "api.rollback",
        "draft.put",
        "api.unpublish",
    ] {
        assert!(
            actions.iter().any(|x| x == a),
            "{a} missing from {actions:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_upload_multipart_and_reflection_import() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let set = portico_demo::grpc::descriptor_set_bytes().to_vec();

    // Raw FileDescriptorSet with options in the query.
    let r = reg
        .send(
            reg.request(
                Method::POST,
                "/descriptors?cluster=order-svc&services=demo.order.v1.OrderService",
            )
            .header("content-type", "application/octet-stream")
            .body(set.clone()),
        )
        .await
        .expect(200);
    assert_eq!(r.body["services"], json!(["demo.order.v1.OrderService"]));
    assert!(r.body["drafts"].as_array().unwrap().len() >= 5);
    let sha_raw = r.body["descriptor"].as_str().unwrap().to_owned();

    // The same set as base64 JSON with another auth: every draft would change, so the import
    // is refused (409, listing each) until confirmed with overwrite; a dry run writes nothing.
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&set);
    let again = json!({"descriptor_set": encoded, "cluster": "order-svc", "auth": "none"});
    let refused = reg.post("/descriptors", &again).await.expect(409);
    assert_eq!(refused.code(), "WOULD_OVERWRITE");
    assert_eq!(
        refused.body["details"].as_array().unwrap().len(),
        r.body["drafts"].as_array().unwrap().len(),
        "{:#}",
        refused.body
    );
    let preview = reg
        .post("/descriptors?dry_run=true", &again)
        .await
        .expect(200);
    assert_eq!(preview.body["dry_run"], true);
    let changed = preview.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["state"] == "changed")
        .count();
    assert_eq!(changed, r.body["drafts"].as_array().unwrap().len());
    let draft = reg.get("/sandbox/apis/order.getorder").await.expect(200);
    assert_ne!(draft.body["auth"], "none", "a dry run writes nothing");
    let mut confirmed = again.clone();
    confirmed["overwrite"] = json!(true);
    let r = reg.post("/descriptors", &confirmed).await.expect(200);
    assert_eq!(r.body["descriptor"], sha_raw.as_str());
    let updated = r.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "order.getorder")
        .unwrap();
    assert_eq!(updated["created"], false);
    let draft = reg.get("/sandbox/apis/order.getorder").await.expect(200);
    assert_eq!(draft.body["auth"], "none");

    // Garbage is refused.
    let r = reg
        .send(
            reg.request(Method::POST, "/descriptors?cluster=x")
                .header("content-type", "application/octet-stream")
                .body(vec![0xff, 0x01, 0x02]),
        )
        .await
        .expect(422);
    assert_eq!(r.code(), "VALIDATION_FAILED");
    // No cluster.
    reg.send(
        reg.request(Method::POST, "/descriptors")
            .header("content-type", "application/octet-stream")
            .body(set.clone()),
    )
    .await
    .expect(400);

    // Multipart .proto upload.
    let form = reqwest::multipart::Form::new()
        .part(
            "demo/order.proto",
            reqwest::multipart::Part::text(ORDER_PROTO).file_name("order.proto"),
        )
        .text("cluster", "order-svc")
        .text("services", "demo.order.v1.OrderService");
    let r = reg
        .send(
            reg.request(Method::POST, "/protos?overwrite=true")
                .multipart(form),
        )
        .await
        .expect(200);
    assert!(
        r.body["drafts"].as_array().unwrap().len() >= 5,
        "{:#?}",
        r.body
    );
    // A compile error names the file and position.
    let r = reg
        .post(
            "/protos",
            &json!({"files": {"broken.proto": "syntax = \"proto3\";\nmessage {"}, "cluster": "c"}),
        )
        .await
        .expect(422);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("broken.proto:2:"),
        "{:?}",
        r.body
    );

    // gRPC server reflection from the running demo backend.
    let stats = std::sync::Arc::new(portico_demo::grpc::GrpcStats::default());
    let (addr, _server) = portico_demo::grpc::spawn(stats).await.unwrap();
    let r = reg
        .post("/reflection", &json!({"addr": addr.to_string(), "cluster": "order-svc", "services": ["demo.order.v1.OrderService"], "overwrite": true}))
        .await
        .expect(200);
    let ids: Vec<&str> = r.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"order.getorder"), "{ids:?}");
    let sha = r.body["descriptor"].as_str().unwrap();
    let stored = reg
        .get(&format!("/sandbox/descriptors/{sha}"))
        .await
        .expect(200);
    assert!(prost_reflect::DescriptorPool::decode(stored.bytes.as_slice()).is_ok());
    // Every service when none is named.
    let r = reg
        .post(
            "/reflection",
            &json!({"addr": addr.to_string(), "cluster": "order-svc", "overwrite": true}),
        )
        .await
        .expect(200);
    assert!(
        r.body["services"].as_array().unwrap().len() >= 2,
        "{:?}",
        r.body["services"]
    );
    // A backend that is not there.
    let dead = format!("127.0.0.1:{}", portico_testkit::free_port());
    let r = reg
        .post(
            "/reflection",
            &json!({"addr": dead, "cluster": "order-svc"}),
        )
        .await
        .expect(502);
    assert_eq!(r.code(), "UPSTREAM_ERROR");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_registries_writing_the_same_api_one_wins() {
    let zk = ZooKeeper::on_shared_locked();
    let a = registry(&zk).await;
    let b = registry(&zk).await;
    let http_cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:8081"}]});
    a.put("/clusters/web", &http_cluster).await.expect(201);
    a.put("/sandbox/clusters/web", &http_cluster)
        .await
        .expect(201);
    let api = |timeout: u64| json!({"id": "web.x", "http": {"method": "GET", "path": "/x"}, "backend": {"cluster": "web", "timeout_ms": timeout, "http": {}}});

    // Both create the same draft at once: one 201, one 409.
    let (api100, api200) = (api(100), api(200));
    let (ra, rb) = tokio::join!(
        a.post("/sandbox/apis", &api100),
        b.post("/sandbox/apis", &api200)
    );
    let mut statuses = [ra.status.as_u16(), rb.status.as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409], "{:?} {:?}", ra.body, rb.body);

    // Both update from the same version: one wins, the other gets 409 CONFLICT.
    let current = a.get("/sandbox/apis/web.x").await.expect(200);
    let etag = current.version();
    let (api300, api400) = (api(300), api(400));
    let (ra, rb) = tokio::join!(
        a.put_if("/sandbox/apis/web.x", &etag, &api300),
        b.put_if("/sandbox/apis/web.x", &etag, &api400)
    );
    let mut statuses = [ra.status.as_u16(), rb.status.as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409]);
    let loser = if ra.status == StatusCode::CONFLICT {
        &ra
    } else {
        &rb
    };
    assert_eq!(loser.code(), "CONFLICT");
    let winner_timeout = if ra.status == StatusCode::OK {
        300
    } else {
        400
    };
    let now = b.get("/sandbox/apis/web.x").await.expect(200);
    assert_eq!(now.body["backend"]["timeout_ms"], winner_timeout);

    // Both publish the first version at once (create-only): one wins.
    let (ra, rb) = tokio::join!(
        a.send(
            a.request(Method::POST, "/apis/web.x/publish")
                .header("If-None-Match", "*")
        ),
        b.send(
            b.request(Method::POST, "/apis/web.x/publish")
                .header("If-None-Match", "*")
        )
    );
    let mut statuses = [ra.status.as_u16(), rb.status.as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{:?} {:?}", ra.body, rb.body);

    // Both publish a changed draft over the same live version: one wins, one 409; the
    // history has no gap. (The draft changes first: an unchanged draft publishes nothing,
    // tests/it/publish_unchanged.rs.)
    a.put("/sandbox/apis/web.x", &api(500)).await.expect(200);
    let live = a.get("/apis/web.x").await.expect(200);
    let etag = live.version();
    let if_match = format!("\"{etag}\"");
    let (ra, rb) = tokio::join!(
        a.send(
            a.request(Method::POST, "/apis/web.x/publish")
                .header("If-Match", &if_match)
        ),
        b.send(
            b.request(Method::POST, "/apis/web.x/publish")
                .header("If-Match", &if_match)
        )
    );
    let mut statuses = [ra.status.as_u16(), rb.status.as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409]);
    let h = b.get("/apis/web.x/history").await.expect(200);
    let versions: Vec<u64> = h.body["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, [1, 2]);

    // Unconditional publishes from both still never lose a version or overwrite blindly.
    a.put("/sandbox/apis/web.x", &api(600)).await.expect(200);
    let empty = json!({});
    let (ra, rb) = tokio::join!(
        a.post("/apis/web.x/publish", &empty),
        b.post("/apis/web.x/publish", &empty)
    );
    assert!(ra.status.is_success() || rb.status.is_success());
    for r in [&ra, &rb] {
        assert!(
            r.status == StatusCode::OK || r.status == StatusCode::CONFLICT,
            "{:?}",
            r.body
        );
    }
    let token_check = reqwest::Client::new()
        .get(format!("{}/apis", a.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(token_check.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_lag_and_export() {
    use portico_control::zk::{NodeInfo, ZkSource};
    use portico_control::ConfigSource;
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    reg.put(
        "/clusters/web",
        &json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:8081"}]}),
    )
    .await
    .expect(201);
    reg.put("/ipacl", &json!({"deny": ["203.0.113.0/24"]}))
        .await
        .expect(201);

    // A gateway node registers and applies the tree it receives.
    let source =
        ZkSource::new(&zk.connect_string(), zk.root()).with_auth(crate::common::gateway_auth(&zk));
    source.register_node(NodeInfo::new("gw-1", "127.0.0.1:8080", "127.0.0.1:9180"));
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let s = source.clone();
    tokio::spawn(async move { s.run(tx).await });
    // Apply every tree as a gateway would.
    let applier = source.clone();
    tokio::spawn(async move {
        while let Some(tree) = rx.recv().await {
            let snapshot = portico_control::build_snapshot(&tree, None);
            applier.set_applied(&portico_control::ConfigVersion {
                generation: tree.generation,
                digest: snapshot.version.digest.clone(),
            });
        }
    });

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let node = loop {
        let r = reg.get("/nodes").await.expect(200);
        if let Some(n) = r.body["nodes"].as_array().and_then(|n| n.first()) {
            if n["config_version"]["generation"] == r.body["generation"] {
                break n.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node never showed its applied version"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(node["node_id"], "gw-1");
    assert_eq!(node["in_sync"], true);
    assert_eq!(node["lag_zxid"], 0);
    assert_eq!(node["ephemeral"], true);

    // A change the node has not applied shows as lag.
    let frozen =
        ZkSource::new(&zk.connect_string(), zk.root()).with_auth(crate::common::gateway_auth(&zk));
    frozen.register_node(NodeInfo::new("gw-2", "127.0.0.1:8082", "127.0.0.1:9182"));
    let (tx2, _rx2) = tokio::sync::mpsc::channel(1);
    let f = frozen.clone();
    tokio::spawn(async move { f.run(tx2).await });
    // (A switch names an existing API.)
    let web_x = json!({"id": "web.x", "http": {"method": "GET", "path": "/x"},
        "backend": {"cluster": "web", "http": {}}});
    let files =
        json!({"files": {"apis/web.x.json": {"encoding": "utf-8", "content": web_x.to_string()}}});
    reg.post("/import?env=live", &files).await.expect(200);
    reg.put("/switches/web.x", &json!({"degraded": true}))
        .await
        .expect(201);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = reg.get("/nodes").await.expect(200);
        let nodes = r.body["nodes"].as_array().unwrap();
        let gw2 = nodes.iter().find(|n| n["node_id"] == "gw-2");
        if let Some(gw2) = gw2 {
            // gw-2 never applies anything: behind.
            assert_eq!(gw2["in_sync"], false);
            assert!(gw2["lag_zxid"].as_u64().unwrap() > 0);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gw-2 never registered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Export: the file layout of docs/OPERATIONS.md ("The configuration tree").
    let r = reg.get("/export").await.expect(200);
    let files = r.body["files"].as_object().unwrap();
    assert_eq!(files["clusters/web.json"]["encoding"], "utf-8");
    assert!(files["ipacl.json"]["content"]
        .as_str()
        .unwrap()
        .contains("203.0.113.0/24"));
    assert!(files.contains_key("switches/web.x.json"));
    reg.get("/export?env=sandbox").await.expect(200);
    reg.get("/export?env=nope").await.expect(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_down_is_503_and_the_registry_recovers() {
    let mut zk = ZooKeeper::start_locked();
    let reg = registry(&zk).await;
    reg.put(
        "/clusters/web",
        &json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:8081"}]}),
    )
    .await
    .expect(201);
    zk.stop();
    let started = std::time::Instant::now();
    let r = reg.get("/clusters/web").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(r.code(), "ZOOKEEPER_UNAVAILABLE");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let h = reqwest::get(format!("{}/health", reg.base)).await.unwrap();
    assert_eq!(h.status(), StatusCode::SERVICE_UNAVAILABLE);
    zk.start_again();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = reg.get("/clusters/web").await;
        if r.status == StatusCode::OK {
            break;
        }
        assert_eq!(r.code(), "ZOOKEEPER_UNAVAILABLE", "{:?}", r.body);
        assert!(
            tokio::time::Instant::now() < deadline,
            "registry never recovered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_topics_and_the_app_fields() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    // A topic is granted to an existing app (tests/it/write_checks.rs).
    reg.post("/apps", &json!({"app_key": "merchant-1"}))
        .await
        .expect(201);
    let topic = json!({"owner": "order-team", "description": "orders paid", "apps": ["merchant-1"], "retention_s": 3600});
    reg.put("/topics/orders", &topic).await.expect(201);
    let r = reg.get("/topics/orders").await.expect(200);
    assert_eq!(r.body, topic);
    let list = reg.get("/topics").await.expect(200);
    assert_eq!(list.body["items"][0]["id"], "orders");
    let r = reg
        .put("/topics/orders", &json!({"apps": ["*"], "retention_s": 0}))
        .await
        .expect(422);
    assert_eq!(r.body["details"][0]["path"], "topics/orders");
    assert!(r.body["message"].as_str().unwrap().contains("retention_s"));
    reg.send(
        reg.request(Method::PUT, "/topics/orders")
            .header("If-Match", "\"7\"")
            .json(&json!({"apps": ["*"]})),
    )
    .await
    .expect(409);
    reg.put("/sandbox/topics/drafts", &json!({"apps": ["*"]}))
        .await
        .expect(201);
    reg.get("/topics/drafts").await.expect(404);

    // An app's topics and callback URL, on create and patch; a bad URL is refused.
    reg.post(
        "/apps",
        &json!({"app_key": "m-cb", "topics": ["orders"], "callback_url": "https://m.example/hooks"}),
    )
    .await
    .expect(201);
    let r = reg.get("/apps/m-cb").await.expect(200);
    assert_eq!(r.body["topics"], json!(["orders"]));
    assert_eq!(r.body["callback_url"], "https://m.example/hooks");
    let r = reg
        .send(
            reg.request(Method::PATCH, "/apps/m-cb")
                .json(&json!({"callback_url": "ftp://nope"})),
        )
        .await
        .expect(422);
    assert!(r.body["message"].as_str().unwrap().contains("callback_url"));
    reg.send(
        reg.request(Method::PATCH, "/apps/m-cb")
            .json(&json!({"callback_url": "http://127.0.0.1:1/cb"})),
    )
    .await
    .expect(200);

    reg.delete("/topics/orders").await.expect(204);
    reg.get("/topics/orders").await.expect(404);
    let actions = reg.audit_actions(100).await;
    assert!(
        actions.iter().any(|a| a == "topic.put") && actions.iter().any(|a| a == "topic.delete"),
        "{actions:?}"
    );
}

/// docs/operations/registry.md, "Draft → sandbox → publish → rollback": an import is previewed (new,
/// changed, and the routes other APIs own, naming them) and never replaces a draft without
/// `overwrite`; a draft the sandbox refuses is listed as refused and is not tried (the call
/// would reach the API that owns the route); unpublish and draft deletion are audited; an
/// HTTP draft with several numbers out of range is refused naming each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_import_is_previewed_refused_and_not_tried() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let web = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:18081"}]});
    for env in ["", "/sandbox"] {
        reg.put(&format!("{env}/clusters/web"), &web)
            .await
            .expect(201);
        reg.put(&format!("{env}/clusters/order-svc"), &grpc_cluster())
            .await
            .expect(201);
    }
    // An HTTP-backed API on POST /v1/orders, drafted and published.
    let checkout = json!({"id": "checkout.create", "http": {"method": "POST", "path": "/v1/orders"},
                          "backend": {"cluster": "web", "http": {"path": "/orders"}}});
    reg.post("/sandbox/apis", &checkout).await.expect(201);
    reg.post("/apis/checkout.create/publish", &json!({}))
        .await
        .expect(200);

    // The preview names the API owning the route, in the sandbox and live; nothing is written.
    let import = json!({"files": {"demo/order.proto": ORDER_PROTO}, "cluster": "order-svc",
                        "services": ["demo.order.v1.OrderService"]});
    let preview = reg.post("/protos?dry_run=true", &import).await.expect(200);
    assert_eq!(preview.body["dry_run"], true);
    let drafts = preview.body["drafts"].as_array().unwrap();
    let create = drafts
        .iter()
        .find(|d| d["id"] == "order.createorder")
        .expect("order.createorder previewed");
    assert_eq!(create["state"], "new");
    let conflicts = create["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 2, "{create:#}");
    for c in conflicts {
        assert_eq!(c["api"], "checkout.create", "{c:#}");
        assert_eq!(c["route"], "POST /v1/orders", "{c:#}");
    }
    assert!(drafts
        .iter()
        .filter(|d| d["id"] != "order.createorder")
        .all(|d| d["conflicts"] == json!([])));
    reg.get("/sandbox/apis/order.createorder").await.expect(404);

    // Imported: the conflicting draft is listed as refused by the sandbox, with the reason.
    let imported = reg.post("/protos", &import).await.expect(200);
    assert!(!imported.body["problems"].as_array().unwrap().is_empty());
    let list = reg.get("/sandbox/apis").await.expect(200);
    let item = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "order.createorder")
        .unwrap()
        .clone();
    let refused = item["served"]["refused"].as_array().unwrap();
    assert!(
        refused.iter().any(|r| r["node_id"] == "registry"
            && r["reason"]
                .as_str()
                .unwrap()
                .contains("already bound by API checkout.create")),
        "{item:#}"
    );
    let served = reg
        .get("/sandbox/apis/order.createorder/served")
        .await
        .expect(200);
    assert_eq!(served.body["refused"], item["served"]["refused"]);
    let ok = reg
        .get("/sandbox/apis/order.getorder/served")
        .await
        .expect(200);
    assert_eq!(ok.body["refused"], json!([]));

    // Trying it is refused, with every reason (no gateway is even asked).
    let tried = reg
        .post(
            "/sandbox/call",
            &json!({"api_id": "order.createorder", "body": {}}),
        )
        .await
        .expect(409);
    assert_eq!(tried.code(), "DRAFT_REFUSED");
    assert!(
        tried.body["message"]
            .as_str()
            .unwrap()
            .contains("checkout.create"),
        "{:#}",
        tried.body
    );
    assert!(!tried.body["details"].as_array().unwrap().is_empty());

    // Re-importing with another deadline would replace every draft: 409 listing them all,
    // until confirmed.
    let mut changed = import.clone();
    changed["timeout_ms"] = json!(900);
    let r = reg.post("/protos", &changed).await.expect(409);
    assert_eq!(r.code(), "WOULD_OVERWRITE");
    let paths: Vec<&str> = r.body["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths.len(), drafts.len(), "{paths:?}");
    assert!(paths.contains(&"sandbox/apis/order.createorder"));
    let unchanged = reg.post("/protos", &import).await.expect(200);
    assert!(unchanged.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["state"] == "unchanged"));
    reg.post("/protos?overwrite=true", &changed)
        .await
        .expect(200);
    let draft = reg.get("/sandbox/apis/order.getorder").await.expect(200);
    assert_eq!(draft.body["backend"]["timeout_ms"], 900);

    // Unpublish (audited, history kept), then delete the draft: the route is free, the
    // imported draft is served.
    reg.delete("/apis/checkout.create").await.expect(204);
    reg.get("/apis/checkout.create").await.expect(404);
    reg.get("/apis/checkout.create/history").await.expect(200);
    reg.delete("/sandbox/apis/checkout.create")
        .await
        .expect(204);
    let actions = reg.audit_actions(5).await;
    assert_eq!(actions[0], "draft.delete", "{actions:?}");
    assert_eq!(actions[1], "api.unpublish", "{actions:?}");
    let served = reg
        .get("/sandbox/apis/order.createorder/served")
        .await
        .expect(200);
    assert_eq!(served.body["refused"], json!([]));

    // An HTTP draft with three numbers out of range: 422 naming each.
    let bad = json!({"id": "bad.ranges", "http": {"method": "GET", "path": "/v1/bad"},
                     "backend": {"cluster": "web", "timeout_ms": 0, "http": {}},
                     "policy": {"bulkhead": {"max_concurrent": 0}, "breaker": {"error_ratio": 2}}});
    let r = reg.post("/sandbox/apis", &bad).await.expect(422);
    let fields: Vec<&str> = r.body["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    for f in [
        "backend.timeout_ms",
        "policy.bulkhead.max_concurrent",
        "policy.breaker.error_ratio",
    ] {
        assert!(fields.contains(&f), "{f} not in {fields:?}");
    }
}
