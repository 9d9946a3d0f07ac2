//! The merchants' developer portal (docs/operations/portal.md, "The merchants' portal";
//! docs/PROTOCOL.md points merchants here): public routes under `/portal`, outside `/api/v1`
//! and without the admin token.
//!
//! | route | what |
//! |---|---|
//! | `GET /portal/openapi.json` | the OpenAPI 3.1 document of every public API ([`catalog::public_apis`]) |
//! | `GET /portal/apps/<app_key>/openapi.json` | the document of the APIs that app can call; the request must be signed by that app ([`signed`], checked against the apps held in memory, [`keys`], before anything is read) |
//! | `POST /portal/try` | forwards a request the browser signed to a sandbox listener ([`forward`]) |
//! | `GET /portal/`, `/portal/...` | the portal's pages (`admin-ui/portal/`, built into `<console dir>/portal/`) |
//!
//! The documents are made from the live tree in ZooKeeper ([`catalog`]; the public one is
//! cached, [`cache`]):
//! schemas from the descriptors ([`schema`]) or the APIs' attached JSON Schemas, examples
//! ([`example`]) and code snippets ([`snippets`]) per operation ([`openapi`]).

pub mod cache;
pub mod catalog;
pub mod example;
pub mod forward;
pub mod keys;
pub mod openapi;
pub mod schema;
pub mod signed;
pub mod snippets;

use crate::api::context::Ctx;
use crate::api::reply::{json_response, raw_json_response};
use crate::error::{ApiError, ApiResult};
use crate::input::{check_name, parse_json};
use crate::state::Shared;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;

/// The portal's routes (mounted at the root by [`crate::server::router`]).
pub fn router() -> Router<Shared> {
    Router::new()
        .route("/portal/openapi.json", get(public_document))
        .route("/portal/apps/{app_key}/openapi.json", get(app_document))
        .route("/portal/try", post(try_call))
        .route("/portal", get(page))
        .route("/portal/", get(page))
        .route("/portal/{*rest}", get(page))
        .layer(Extension(Arc::new(cache::PublicDocument::default())))
        .layer(Extension(Arc::new(cache::AppDocuments::default())))
        .layer(Extension(Arc::new(keys::LiveApps::default())))
}

/// `GET /portal/openapi.json`.
async fn public_document(
    State(state): State<Shared>,
    Extension(cache): Extension<Arc<cache::PublicDocument>>,
) -> ApiResult<Response> {
    let body = cache.get(&state).await?;
    let mut response = raw_json_response(StatusCode::OK, body.to_vec(), None);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// `GET /portal/apps/<app_key>/openapi.json`, signed by that app.
async fn app_document(
    State(state): State<Shared>,
    Extension(cache): Extension<Arc<cache::AppDocuments>>,
    Extension(keys): Extension<Arc<keys::LiveApps>>,
    Path(app_key): Path<String>,
    ctx: Ctx,
    uri: Uri,
) -> ApiResult<Response> {
    check_name("app key", &app_key)?;
    // The signature is checked against the apps held in memory: nothing is read from
    // ZooKeeper for a request that is not verified ([`keys`]).
    let apps = keys.get(&state).await?;
    let app = apps.get(&app_key).cloned();
    let request = signed::Signed {
        headers: &ctx.headers,
        method: "GET",
        path: uri.path(),
        query: uri.query(),
        body: b"",
    };
    signed::check(
        &request,
        &app_key,
        app.as_deref(),
        portico_control::clock::now_ms(),
    )?;
    let Some(app) = app else {
        return Err(ApiError::internal("the app vanished"));
    };
    let live = catalog::load(&state).await?;
    let body = cache.get(&live, &app_key, &app)?;
    let mut response = raw_json_response(StatusCode::OK, body.to_vec(), None);
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    Ok(response)
}

/// `POST /portal/try`.
async fn try_call(
    State(state): State<Shared>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let client = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    if let Some(refused) = forward::admit(client) {
        return Ok(refused);
    }
    let (req, _) = parse_json::<forward::TryRequest>(&body, "try")?;
    let answer = forward::forward(&state, &ctx.request_id, client, req).await?;
    Ok(json_response(StatusCode::OK, &answer, None))
}

/// The portal's pages: files of `<console dir>/portal/`, and its `index.html` for any other
/// path (the page's own routes).
async fn page(method: Method, uri: Uri) -> Response {
    let rest = uri.path().strip_prefix("/portal").unwrap_or("/");
    let root = crate::console::dir().map(|d| d.join("portal"));
    match root {
        Some(root) if root.join("index.html").is_file() => {
            crate::console::serve(
                &root,
                if rest.is_empty() { "/" } else { rest },
                method == Method::HEAD,
            )
            .await
        }
        _ => not_built(),
    }
}

/// The page merchants get when the portal's pages are not built (`admin-ui/build.sh`, which
/// `./ops/up.sh` runs, builds them into `admin-ui/dist/portal`): merchant words, no
/// repository path (merchants have no checkout).
fn not_built() -> Response {
    let page = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
        <title>Portico developer portal not available</title></head><body>\
        <h1>The developer portal's pages are not available here yet</h1>\
        <p>Ask the operator of this Portico deployment to install the developer portal. The API \
        documents are up all the same: <a href=\"/portal/openapi.json\">/portal/openapi.json</a>.</p></body></html>";
    crate::console::not_built_page(page.to_owned(), "x-portico-portal")
}

#[cfg(test)]
mod tests {
    /// The portal's Signing page (`admin-ui/portal/vectors.ts`) and docs/PROTOCOL.md ("Worked
    /// example 1/2", "Callbacks") hold the same test vectors, and the gateway's signer agrees.
    #[test]
    fn the_signing_page_and_the_protocol_hold_the_same_vectors() {
        use portico_control::sign;
        let ts = include_str!("../../../admin-ui/portal/vectors.ts");
        let protocol = include_str!("../../../docs/PROTOCOL.md");
        let json = ts
            .split_once("/* JSON-BEGIN */")
            .and_then(|(_, rest)| rest.split_once("/* JSON-END */"))
            .map(|(json, _)| json)
            .unwrap();
        let vectors: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
        assert_eq!(vectors.len(), 3);
        for v in &vectors {
            let field = |name: &str| v[name].as_str().unwrap().to_owned();
            let query = field("query");
            let request_sts = sign::string_to_sign(
                &field("method"),
                &field("path"),
                Some(query.as_str()).filter(|q| !q.is_empty()),
                &field("appKey"),
                &field("timestamp"),
                &field("nonce"),
                field("body").as_bytes(),
            );
            let sts = match v["kind"].as_str() {
                Some("callback") => format!("PORTICO-CALLBACK-v1\n{request_sts}"),
                _ => request_sts,
            };
            assert_eq!(sts, field("stringToSign"), "{}", field("title"));
            assert_eq!(
                sign::sign(field("secret").as_bytes(), &sts),
                field("signature"),
                "{}",
                field("title")
            );
            // The guide shows the same string-to-sign, signature, nonce and body.
            assert!(
                protocol.contains(&format!("```\n{sts}\n```")),
                "docs/PROTOCOL.md lacks the string-to-sign of {}",
                field("title")
            );
            for f in ["signature", "nonce", "body"] {
                assert!(
                    protocol.contains(&field(f)),
                    "docs/PROTOCOL.md lacks the {f} of {}",
                    field("title")
                );
            }
        }
    }

    #[test]
    fn the_not_built_page_is_a_page_like_the_others() {
        let response = super::not_built();
        let h = response.headers();
        assert_eq!(h["x-portico-portal"], "not-built");
        assert_eq!(h["cache-control"], "no-store");
        assert_eq!(h["content-type"], "text/html; charset=utf-8");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert!(h.contains_key("content-security-policy"));
    }
}
