//! The merchants' portal against a real gateway: the OpenAPI documents it generates for the
//! demo APIs are valid OpenAPI 3.1 (checked by `openapi-spec-validator`, which
//! `./ops/test.sh` installs), list every demo API, and say what the gateway really accepts
//! and answers: each operation's example request is sent as it stands to a real gateway and
//! must succeed, and the answer must validate against the operation's response schema (the
//! `jsonschema` crate). The per-app document is only given to that app, signed; "try it"
//! forwards a browser-signed request to the sandbox listener; and the code snippets, run for
//! real, sign exactly as the worked examples of docs/PROTOCOL.md and call the gateway.
//!
//! Python and Node.js (and curl with openssl) must be present; Java and Go snippets are run
//! when `java` / `go` are installed, and skipped with a printed reason otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::browser::workspace;
use crate::portal_world::{
    assert_merchant_words, call, http, World, INTERNAL_REASON, M1, M1_SANDBOX, M2,
};
use portico_registry::portal::snippets::{self, Snippet};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Python that has `openapi-spec-validator`: `$PORTICO_OPENAPI_PYTHON` (set by
/// `./ops/test.sh`), else the venv `.run/venv` it installs into, else `python3`.
fn openapi_python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("PORTICO_OPENAPI_PYTHON") {
        return p.into();
    }
    let venv = workspace().join(".run/venv/bin/python");
    let has = |py: &Path| {
        Command::new(py)
            .args(["-c", "import openapi_spec_validator"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has(&venv) {
        venv
    } else {
        "python3".into()
    }
}

/// Checks `doc` with `openapi-spec-validator` (PyPI; `./ops/test.sh` installs it).
fn validate_openapi(doc: &Value, dir: &Path, name: &str) {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
    let out = Command::new(openapi_python())
        .args([
            "-c",
            "import sys, json\n\
             try:\n    from openapi_spec_validator import validate\n\
             except ImportError:\n    sys.exit('openapi-spec-validator is not installed: run ./ops/test.sh (it installs it into .run/venv), or pip install openapi-spec-validator==0.9.0, or set PORTICO_OPENAPI_PYTHON')\n\
             validate(json.load(open(sys.argv[1])))\nprint('valid')",
        ])
        .arg(&file)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{name}: not a valid OpenAPI document ({}):\n{}{}",
        file.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A validator of `schema` whose `$ref`s point into `doc`'s components.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let rooted = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "allOf": [schema],
        "components": doc["components"],
    });
    jsonschema::options()
        .should_validate_formats(true)
        .build(&rooted)
        .unwrap_or_else(|e| panic!("schema {schema} does not compile: {e}"))
}

fn assert_valid(doc: &Value, schema: &Value, value: &Value, what: &str) {
    let v = validator(doc, schema);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: {value} does not validate against {schema}: {errors:?}"
    );
}

/// Every operation of a document: (path, method, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            out.push((path.clone(), method.clone(), op.clone()));
        }
    }
    out
}

fn ids_of(doc: &Value) -> Vec<String> {
    let mut ids: Vec<String> = operations(doc)
        .iter()
        .filter_map(|(_, _, op)| op["x-portico-api"].as_str().map(str::to_owned))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The ids of the example tree's APIs.
fn demo_api_ids() -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(workspace().join("ops/examples/standalone/apis"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_owned()
        })
        .collect();
    ids.sort();
    ids
}

fn signed_get(
    http: &reqwest::blocking::Client,
    base: &str,
    path: &str,
    app: (&str, &str),
    nonce: &str,
) -> reqwest::blocking::Response {
    let signed = portico_control::sign::sign_request(
        app.1.as_bytes(),
        "GET",
        path,
        None,
        app.0,
        portico_control::clock::now_ms(),
        nonce,
        b"",
    );
    let mut req = http.get(format!("{base}{path}"));
    for (k, v) in signed.pairs() {
        req = req.header(k, v);
    }
    req.send().unwrap()
}

#[test]
fn portal_documents_match_what_the_gateway_accepts_and_answers() {
    let world = World::start(None);
    let http = &world.http;
    let dir = world.work.path();

    // The public document: no token needed, valid OpenAPI 3.1, every demo API in it.
    let started = std::time::Instant::now();
    let resp = http
        .get(format!("{}/portal/openapi.json", world.registry_url))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let doc: Value = resp.json().unwrap();
    validate_openapi(&doc, dir, "public");
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        ids_of(&doc),
        demo_api_ids(),
        "every demo API is public (merchant-1 has *)"
    );
    assert_eq!(doc["servers"][0]["url"], world.gateway_url);
    assert_eq!(doc["servers"][1]["url"], world.sandbox_url);
    let text = doc.to_string();
    for secret in ["s3cr3t-value", "m2-secret-value", "m3-secret-value"] {
        assert!(!text.contains(secret), "the public document holds a secret");
    }
    println!(
        "public document: {} bytes, first answer in {:?}",
        text.len(),
        started.elapsed()
    );
    let started = std::time::Instant::now();
    for _ in 0..5 {
        let resp = http
            .get(format!("{}/portal/openapi.json", world.registry_url))
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.bytes().unwrap();
    }
    println!(
        "public document: {:?} per request (5 in a row)",
        started.elapsed() / 5
    );

    // Every operation's example, sent as it stands, succeeds; the answer fits the schema.
    let mut checked = 0;
    for (path, method, op) in operations(&doc) {
        // The router and the notification endpoints (no API id) are checked apart.
        if path == "/router" || op.get("x-portico-api").is_none() {
            continue;
        }
        let id = op["x-portico-api"].as_str().unwrap().to_owned();
        let ex = &op["x-portico-example"];
        let target = ex["path"].as_str().unwrap();
        let body = ex["body"].as_str().unwrap();
        assert_eq!(ex["method"].as_str().unwrap().to_ascii_lowercase(), method);
        if !body.is_empty() {
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            assert_valid(
                &doc,
                schema,
                &serde_json::from_str(body).unwrap(),
                &format!("{id}: example request"),
            );
        }
        let signer = (op["x-portico-auth"] == "signature").then_some(M1);
        let (status, answer) = call(
            http,
            &world.gateway_url,
            ex["method"].as_str().unwrap(),
            target,
            body,
            signer,
        );
        assert!(
            (200..300).contains(&status),
            "{id}: {method} {target} {body} → {status} {answer}\n{}",
            world.logs()
        );
        let success = op["responses"]["200"]
            .get("content")
            .or_else(|| op["responses"]["2XX"].get("content"))
            .unwrap();
        let schema = &success["application/json"]["schema"];
        let value: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("{id}: answer is not JSON ({e}): {answer}"));
        if id != "promo.list" {
            // promo.list is degraded: it answers the switch's fallback, not the backend.
            assert_valid(
                &doc,
                schema,
                &value,
                &format!("{id}: answer to {method} {target}"),
            );
        }
        // The example response shown fits the schema too.
        if let Some(shown) = ex.get("response").filter(|v| !v.is_null()) {
            assert_valid(&doc, schema, shown, &format!("{id}: example response"));
        }
        // The router style of the API, where it has one.
        if let Some(router) = op.get("x-portico-router") {
            let target = format!("/router?{}", router["query"].as_str().unwrap());
            let body = router["body"].as_str().unwrap();
            let (status, answer) = call(http, &world.gateway_url, "POST", &target, body, signer);
            assert!(
                (200..300).contains(&status),
                "{id}: POST {target} {body} → {status} {answer}"
            );
            if id != "promo.list" {
                let value: Value = serde_json::from_str(&answer).unwrap();
                assert_valid(
                    &doc,
                    &router["reply"],
                    &value,
                    &format!("{id}: router answer"),
                );
            }
        }
        checked += 1;
    }
    assert!(
        checked >= demo_api_ids().len(),
        "only {checked} operations checked"
    );
    println!("{checked} operations: examples accepted by the gateway, answers valid");

    // A field of the wrong type is refused by the gateway, as the schema says.
    let (status, answer) = call(
        http,
        &world.gateway_url,
        "POST",
        "/grpc/v1/orders",
        r#"{"qty":"many"}"#,
        Some(M1),
    );
    assert_eq!(status, 400, "{answer}");
    let bad = json!({"qty": "many"});
    let create = &doc["paths"]["/grpc/v1/orders"]["post"]["requestBody"]["content"]
        ["application/json"]["schema"];
    assert!(
        !validator(&doc, create).is_valid(&bad),
        "the schema accepts what the gateway refuses"
    );

    // The per-app document: only to that app, signed.
    let m2_path = format!("/portal/apps/{}/openapi.json", M2.0);
    let resp = http
        .get(format!("{}{m2_path}", world.registry_url))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let envelope: Value = resp.json().unwrap();
    assert_eq!(envelope["code"], "SIGNATURE_MISSING", "{envelope}");
    let resp = signed_get(http, &world.registry_url, &m2_path, M2, "portal-m2-0001");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("private"));
    let m2_doc: Value = resp.json().unwrap();
    validate_openapi(&m2_doc, dir, "merchant-2");
    let public: Vec<String> = demo_api_ids()
        .into_iter()
        .filter(|id| {
            let def: Value = serde_json::from_slice(
                &std::fs::read(workspace().join(format!("ops/examples/standalone/apis/{id}.json")))
                    .unwrap(),
            )
            .unwrap();
            def["auth"] == "none" || id == "order.get"
        })
        .collect();
    assert_eq!(
        ids_of(&m2_doc),
        public,
        "merchant-2: order.get and the public APIs"
    );
    assert_eq!(m2_doc["x-portico-app"], "merchant-2");
    assert!(!m2_doc.to_string().contains("m2-secret-value"));
    // The same nonce again, another app's key, another app's secret: refused alike.
    let resp = signed_get(http, &world.registry_url, &m2_path, M2, "portal-m2-0001");
    assert_eq!(resp.json::<Value>().unwrap()["code"], "NONCE_REPLAYED");
    let resp = signed_get(http, &world.registry_url, &m2_path, M1, "portal-m1-0001");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(resp.json::<Value>().unwrap()["code"], "SIGNATURE_INVALID");
    let resp = signed_get(
        http,
        &world.registry_url,
        &m2_path,
        (M2.0, M1.1),
        "portal-m2-0002",
    );
    assert_eq!(resp.json::<Value>().unwrap()["code"], "SIGNATURE_INVALID");
    let resp = signed_get(
        http,
        &world.registry_url,
        "/portal/apps/nobody/openapi.json",
        ("nobody", "whatever-secret"),
        "portal-nb-0001",
    );
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        resp.json::<Value>().unwrap()["code"],
        "SIGNATURE_INVALID",
        "no oracle for app keys"
    );
    let m3 = signed_get(
        http,
        &world.registry_url,
        "/portal/apps/merchant-3/openapi.json",
        ("merchant-3", "m3-secret-value"),
        "portal-m3-0001",
    );
    assert_eq!(m3.status().as_u16(), 403);
    // The admin API still wants its token.
    let resp = http
        .get(format!("{}/api/v1/apps", world.registry_url))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);

    // "Try it": a request signed here (as the browser does, with a sandbox app's secret) is
    // forwarded to the sandbox listener; the registry never gets the secret.
    let path = "/grpc/v1/orders";
    let body = r#"{"item":"book","qty":2}"#;
    let signed = portico_control::sign::sign_request(
        M1_SANDBOX.1.as_bytes(),
        "POST",
        path,
        None,
        M1_SANDBOX.0,
        portico_control::clock::now_ms(),
        "portal-try-0001",
        body.as_bytes(),
    );
    let mut headers = serde_json::Map::new();
    for (k, v) in signed.pairs() {
        headers.insert(k.to_owned(), json!(v));
    }
    headers.insert("Content-Type".into(), json!("application/json"));
    let resp = http
        .post(format!("{}/portal/try", world.registry_url))
        .json(&json!({"method": "POST", "path": path, "headers": headers, "body": body}))
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let answer: Value = resp.json().unwrap();
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["response"]["status"], 200, "{answer:#}");
    assert!(
        answer["request"]["url"]
            .as_str()
            .unwrap()
            .starts_with(&world.sandbox_url),
        "{answer:#}"
    );
    let order: Value = serde_json::from_str(answer["response"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(order["item"], "book");
    // Tampered on the way: the sandbox gateway refuses it.
    let resp = http
        .post(format!("{}/portal/try", world.registry_url))
        .json(&json!({"method": "POST", "path": path, "headers": headers, "body": r#"{"item":"book","qty":3}"#}))
        .send()
        .unwrap();
    let answer: Value = resp.json().unwrap();
    assert_eq!(answer["response"]["status"], 401, "{answer:#}");
    let resp = http
        .post(format!("{}/portal/try", world.registry_url))
        .json(&json!({"method": "GET", "path": "/x", "headers": {"Host": "elsewhere"}}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);

    // The snippets, run for real against the gateway: a signed POST with a body, a signed GET.
    run_live_snippets(&world, &doc);

    // Merchants read merchant words: the documents, the snippets in them, the pages served,
    // the gateway's envelopes (a degraded API's included); try-it sends the path as typed.
    let started = std::time::Instant::now();
    merchant_words(&world, &doc, &m2_doc);
    println!("merchant words checked in {:?}", started.elapsed());

    // A change to the live tree shows in the (cached) public document within seconds:
    // disabling merchant-1, the only app granted `*`, hides the APIs only it could call.
    let resp = http
        .post(format!(
            "{}/api/v1/apps/merchant-1/disable",
            world.registry_url
        ))
        .bearer_auth(crate::portal_world::TOKEN)
        .header("X-Portico-Operator", "portal-test")
        .send()
        .unwrap();
    assert!(
        resp.status().is_success(),
        "disable: {}",
        resp.text().unwrap()
    );
    let started = std::time::Instant::now();
    let gone = portico_testkit::wait_for(Duration::from_secs(20), || {
        let doc: Value = http
            .get(format!("{}/portal/openapi.json", world.registry_url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let ids = ids_of(&doc);
        !ids.contains(&"order.create".to_owned()) && ids.contains(&"order.get".to_owned())
    });
    assert!(
        gone,
        "the public document still lists order.create after merchant-1 was disabled"
    );
    println!(
        "a change reached the public document in {:?}",
        started.elapsed()
    );
}

/// Item "merchants read merchant words" (docs/PROTOCOL.md, "The error envelope"; the
/// portal's pages): no operator's reason, switch path, repository path or gRPC service name
/// in the portal's documents (the catalogue, the per-app one, their snippets), the portal's
/// pages as served here (no console build: the not-built page), or the gateway's answers to
/// merchants: refusals, and a degraded API whose switch carries an internal reason.
fn merchant_words(world: &World, doc: &Value, m2_doc: &Value) {
    let http = &world.http;
    // The check itself finds what issue reports showed merchants, and passes merchant words.
    for bad in [
        "degraded by switches/promo.list.json",
        "see docs/PROTOCOL.md",
        "python3 ops/sign.py --key k",
        "README.md",
        "order.v1.OrderService/GetOrder",
        "backed by shop.v1.CartService",
        INTERNAL_REASON,
    ] {
        let caught = std::panic::catch_unwind(|| assert_merchant_words(bad, "probe"));
        assert!(caught.is_err(), "not caught: {bad}");
    }
    assert_merchant_words(
        "GET /grpc/v1/shops/s1/products/p1 answers demo.order.v1.Order; see the Signing page.",
        "merchant words",
    );
    assert_merchant_words(&doc.to_string(), "the public OpenAPI document");
    assert_merchant_words(&m2_doc.to_string(), "merchant-2's OpenAPI document");
    let mut snippets = 0;
    for (_, _, op) in operations(doc) {
        for sample in op["x-codeSamples"].as_array().into_iter().flatten() {
            assert_merchant_words(sample["source"].as_str().unwrap(), "a snippet");
            snippets += 1;
        }
    }
    assert!(snippets >= 5 * demo_api_ids().len(), "{snippets} snippets");
    // The notification endpoints are documented; the per-app document names its topics.
    for path in ["/notify/v1/stream", "/notify/v1/ws", "/notify/v1/ack"] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    assert!(doc["webhooks"]["notification"]["post"].is_object());
    assert!(doc["x-portico-notifications"]["how_to_list"].is_string());
    // Made for merchant-2 alone: `orders` is granted to merchant-1 only (the example tree),
    // so merchant-2's document (cached per app key, served only to a call signed by that
    // app) does not name it.
    let m2_topics = m2_doc["x-portico-notifications"]["topics"]
        .as_array()
        .unwrap();
    assert!(
        !m2_topics
            .iter()
            .any(|t| t == "orders" || t["name"] == "orders"),
        "merchant-2's document lists merchant-1's topic: {m2_topics:?}"
    );
    for e in doc["x-portico-error-codes"].as_array().unwrap() {
        assert!(e["what_to_do"].is_string(), "{e}");
    }
    let page = http
        .get(format!("{}/portal/", world.registry_url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_merchant_words(&page, "the portal page served without a build");

    // A degraded API: the switch's reason is the operators'; merchants get the public message.
    let set = |degraded: bool| {
        let resp = http
            .put(format!("{}/api/v1/switches/order.get", world.registry_url))
            .bearer_auth(crate::portal_world::TOKEN)
            .header("X-Portico-Operator", "sre-portal-test")
            .json(&json!({"degraded": degraded, "reason": INTERNAL_REASON}))
            .send()
            .unwrap();
        let status = resp.status();
        assert!(
            status.is_success(),
            "switch: {status} {}",
            resp.text().unwrap()
        );
    };
    set(true);
    let mut answer = (0, String::new());
    let degraded = portico_testkit::wait_for(Duration::from_secs(20), || {
        answer = call(
            http,
            &world.gateway_url,
            "GET",
            "/v1/orders/42",
            "",
            Some(M1),
        );
        answer.0 == 503
    });
    assert!(degraded, "order.get was not degraded: {answer:?}");
    let envelope: Value = serde_json::from_str(&answer.1).unwrap();
    assert_eq!(envelope["code"], "API_DEGRADED", "{envelope}");
    assert_eq!(envelope["message"], "the API is temporarily unavailable");
    assert_merchant_words(&answer.1, "a degraded API's 503");
    // The router style answers the same.
    let (status, body) = call(
        http,
        &world.gateway_url,
        "POST",
        "/router?method=order.get",
        "{}",
        Some(M1),
    );
    assert!(status >= 400, "{status} {body}");
    assert_merchant_words(&body, "a degraded API's router answer");
    set(false);

    // Refusals: unsigned, a wrong secret, no grant, no such API, a bad field (a dot segment
    // is below: this client would resolve it before sending).
    type Refusal<'a> = (&'a str, &'a str, &'a str, Option<(&'a str, &'a str)>, u16);
    let refusals: [Refusal; 6] = [
        ("GET", "/v1/orders/42", "", None, 401),
        (
            "GET",
            "/v1/orders/42",
            "",
            Some((M1.0, "wrong-secret")),
            401,
        ),
        ("POST", "/v1/orders", "{}", Some(M2), 403),
        ("GET", "/v1/no-such-api", "", Some(M1), 404),
        (
            "POST",
            "/grpc/v1/orders",
            r#"{"qty":"many"}"#,
            Some(M1),
            400,
        ),
        ("POST", "/router?method=no.such.api", "{}", Some(M1), 404),
    ];
    for (method, target, body, app, want) in refusals {
        let (status, text) = call(http, &world.gateway_url, method, target, body, app);
        assert_eq!(status, want, "{method} {target}: {text}");
        let envelope: Value = serde_json::from_str(&text).unwrap();
        assert!(envelope["code"].is_string() && envelope["request_id"].is_string());
        assert_merchant_words(&text, &format!("{method} {target} → {status}"));
    }

    // Try it sends the path as typed: the sandbox gateway refuses the dot segment itself
    // (400), where a normalising client would have called /v1/orders/42.
    let typed = "/grpc/v1/../v1/orders/42";
    let signed = portico_control::sign::sign_request(
        M1_SANDBOX.1.as_bytes(),
        "GET",
        typed,
        None,
        M1_SANDBOX.0,
        portico_control::clock::now_ms(),
        "portal-try-dots-0001",
        b"",
    );
    let headers: serde_json::Map<String, Value> = signed
        .pairs()
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let resp = http
        .post(format!("{}/portal/try", world.registry_url))
        .json(&json!({"method": "GET", "path": typed, "headers": headers}))
        .send()
        .unwrap();
    let answer: Value = resp.json().unwrap();
    assert_eq!(answer["response"]["status"], 400, "{answer:#}");
    assert!(
        answer["request"]["url"].as_str().unwrap().ends_with(typed),
        "{answer:#}"
    );
    let body = answer["response"]["body"].as_str().unwrap();
    assert!(body.contains("BAD_REQUEST"), "{body}");
    assert_merchant_words(body, "try-it's answer");
}

/// Runs every snippet of three operations against the live gateway, as merchant-1.
fn run_live_snippets(world: &World, doc: &Value) {
    let dir = world.work.path();
    for (path, method) in [
        ("/grpc/v1/orders", "post"),
        ("/v1/orders/{order_id}", "get"),
        ("/grpc/v1/files/{path}", "get"),
    ] {
        let op = &doc["paths"][path][method];
        let samples = op["x-codeSamples"].as_array().unwrap();
        assert_eq!(samples.len(), 5);
        for sample in samples {
            let snippet = Snippet {
                id: leak(sample["x-id"].as_str().unwrap()),
                label: "",
                lang: "",
                file: leak(sample["x-file"].as_str().unwrap()),
                run: "",
                source: sample["source"].as_str().unwrap().to_owned(),
            };
            let env = [("PORTICO_APP_KEY", M1.0), ("PORTICO_SECRET", M1.1)];
            match run_snippet(&snippet, &env, dir) {
                Ran::Skipped(why) => println!("{} snippet of {path}: skipped: {why}", snippet.id),
                Ran::Done(out) => {
                    assert!(
                        out.contains("HTTP 200"),
                        "{} snippet of {method} {path} did not get 200:\n{out}\n{}",
                        snippet.id,
                        snippet.source
                    );
                    println!("{} snippet of {method} {path}: HTTP 200", snippet.id);
                }
            }
        }
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

enum Ran {
    Done(String),
    Skipped(String),
}

fn has(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a snippet with `env` in a fresh folder under `dir`; its stdout and stderr.
fn run_snippet(s: &Snippet, env: &[(&str, &str)], dir: &Path) -> Ran {
    let work = tempfile::Builder::new()
        .prefix(s.id)
        .tempdir_in(dir)
        .unwrap();
    let file = work.path().join(s.file);
    std::fs::write(&file, &s.source).unwrap();
    let mut cmd = match s.id {
        "curl" => {
            for tool in ["curl", "openssl"] {
                assert!(
                    has(
                        tool,
                        if tool == "curl" {
                            "--version"
                        } else {
                            "version"
                        }
                    ),
                    "{tool} is missing (./ops/test.sh installs it)"
                );
            }
            let mut c = Command::new("bash");
            c.arg(&file);
            c
        }
        "python" => {
            let mut c = Command::new("python3");
            c.arg(&file);
            c
        }
        "node" => {
            assert!(
                has("node", "--version"),
                "node is missing (./ops/test.sh installs it)"
            );
            let mut c = Command::new("node");
            c.arg(&file);
            c
        }
        "java" => {
            if !has("java", "-version") {
                return Ran::Skipped("no `java` on this machine (a JDK 11+ runs it)".into());
            }
            let mut c = Command::new("java");
            c.arg(&file);
            c
        }
        "go" => {
            if !has("go", "version") {
                return Ran::Skipped("no `go` on this machine (Go 1.17+ runs it)".into());
            }
            let mut c = Command::new("go");
            c.arg("run")
                .arg(&file)
                .env("GOTOOLCHAIN", "local")
                .env("GOFLAGS", "-mod=mod");
            if std::env::var_os("GOCACHE").is_none() && std::env::var_os("HOME").is_none() {
                c.env("GOCACHE", work.path().join("gocache"));
            }
            c
        }
        other => panic!("unknown snippet {other}"),
    };
    cmd.current_dir(work.path());
    for var in [
        "PORTICO_BASE_URL",
        "PORTICO_APP_KEY",
        "PORTICO_SECRET",
        "PORTICO_TIMESTAMP",
        "PORTICO_NONCE",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running the {} snippet: {e}", s.id));
    Ran::Done(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// One request as a capturing server received it.
#[derive(Debug, Clone)]
struct Captured {
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Captured {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP/1.1 server on a free port that records each request and answers `200 {}`.
fn capture_server() -> (String, Arc<Mutex<Vec<Captured>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h.trim_end().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.trim_end().split_once(':') {
                    headers.push((k.trim().to_owned(), v.trim().to_owned()));
                }
            }
            let len: usize = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            record.lock().unwrap().push(Captured {
                target,
                headers,
                body,
            });
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            );
        }
    });
    (format!("http://{addr}"), seen)
}

/// Each snippet, given the key, secret, timestamp and nonce of docs/PROTOCOL.md's worked
/// examples, sends exactly the examples' requests with exactly their signatures.
#[test]
fn snippets_reproduce_the_signing_vectors() {
    let vectors = [
        (
            "GET",
            "/v1/orders/42",
            "b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93",
            "",
            "n0nce-0001",
            "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73",
        ),
        (
            "POST",
            "/v1/orders",
            "",
            r#"{"item":"book","qty":2}"#,
            "n0nce-0002",
            "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107",
        ),
    ];
    // The vectors are the contract's (docs/PROTOCOL.md); check they are still written there.
    let protocol = std::fs::read_to_string(workspace().join("docs/PROTOCOL.md")).unwrap();
    for v in &vectors {
        assert!(
            protocol.contains(v.5),
            "docs/PROTOCOL.md no longer has signature {}",
            v.5
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (base, seen) = capture_server();
    let mut ran = 0;
    for (method, path, query, body, nonce, signature) in vectors {
        let req = snippets::Request {
            api_id: "vector".into(),
            method: method.into(),
            path: path.into(),
            query: query.into(),
            body: body.into(),
            signed: true,
        };
        for snippet in snippets::all(&req, "http://127.0.0.1:9", "someone-else") {
            seen.lock().unwrap().clear();
            let env = [
                ("PORTICO_BASE_URL", base.as_str()),
                ("PORTICO_APP_KEY", "merchant-1"),
                ("PORTICO_SECRET", "s3cr3t-value"),
                ("PORTICO_TIMESTAMP", "1796000000000"),
                ("PORTICO_NONCE", nonce),
            ];
            let out = match run_snippet(&snippet, &env, dir.path()) {
                Ran::Skipped(why) => {
                    println!("{} snippet: skipped: {why}", snippet.id);
                    continue;
                }
                Ran::Done(out) => out,
            };
            let got = seen.lock().unwrap().clone();
            assert_eq!(got.len(), 1, "{} snippet ({method}): {out}", snippet.id);
            let c = &got[0];
            let want_target = if query.is_empty() {
                path.to_owned()
            } else {
                format!("{path}?{query}")
            };
            assert_eq!(
                c.target, want_target,
                "{} snippet sent another target",
                snippet.id
            );
            assert_eq!(
                c.body,
                body.as_bytes(),
                "{} snippet sent other bytes",
                snippet.id
            );
            assert_eq!(
                c.header("X-Portico-AppKey"),
                Some("merchant-1"),
                "{}",
                snippet.id
            );
            assert_eq!(
                c.header("X-Portico-Timestamp"),
                Some("1796000000000"),
                "{}",
                snippet.id
            );
            assert_eq!(c.header("X-Portico-Nonce"), Some(nonce), "{}", snippet.id);
            assert_eq!(
                c.header("X-Portico-Signature"),
                Some(signature),
                "the {} snippet signs {method} {want_target} differently:\n{out}",
                snippet.id
            );
            assert!(out.contains("HTTP 200"), "{}: {out}", snippet.id);
            ran += 1;
            println!(
                "{} snippet: {method} {want_target} signed {signature}",
                snippet.id
            );
        }
    }
    assert!(
        ran >= 6,
        "only {ran} snippet runs (curl, Python and Node are required)"
    );
}

/// An HTTP client of this file's own, for [`portal_world`].
#[allow(dead_code)]
fn _client() -> reqwest::blocking::Client {
    http()
}
