//! `POST /sandbox/call`: the console's "try it" ([`crate::sandbox_call`]).

use super::context::Ctx;
use super::reply::json_response;
use crate::error::ApiResult;
use crate::input::parse_json;
use crate::route::{Body, Reply, Route};
use crate::sandbox_call::{call, CallRequest};
use crate::state::Shared;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::post;

/// The route of the sandbox call.
pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::POST,
        "/sandbox/call",
        "sandbox",
        "Try an API in the sandbox: the registry signs the request with a sandbox app's secret \
         (docs/PROTOCOL.md, 'Signing a request') and sends it to a live gateway's sandbox listener; answers the request sent, \
         the response (status, headers, body) and the latency. Body: {api_id?, method?, \
         path?, query?, body?, headers?, app_key?, node_id?}",
        post(try_call),
    )
    .body(Body::Json("SandboxCall"))
    .reply(Reply::Json(200, "SandboxCallResult"))
    .calls_out()]
}

async fn try_call(State(state): State<Shared>, ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let (req, _) = parse_json::<CallRequest>(&body, "sandbox call")?;
    let answer = call(&state, &ctx.request_id, req).await?;
    Ok(json_response(StatusCode::OK, &answer, None))
}
