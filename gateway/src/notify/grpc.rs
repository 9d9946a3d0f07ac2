//! `portico.notify.v1.Notify/Publish` (protos/portico/notify/v1/notify.proto) on the internal
//! listener, beside the HTTP form: the same token, checks and answer (`internal.rs`,
//! [`super::Notifier::publish`]), with gRPC statuses instead of the envelope.

use super::hub::PublishRequest as Publish;
use super::publisher::{authorize, InternalState};
use crate::error::GatewayError;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use std::future::Future;
use std::pin::Pin;
use tonic::{Code, Status};

/// The gRPC method's path.
pub const PUBLISH_PATH: &str = "/portico.notify.v1.Notify/Publish";

/// `portico.notify.v1.PublishRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PublishRequest {
    #[prost(string, tag = "1")]
    pub app: String,
    #[prost(string, tag = "2")]
    pub topic: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(string, tag = "4")]
    pub payload_json: String,
    #[prost(uint64, tag = "5")]
    pub ttl_s: u64,
}

/// `portico.notify.v1.PublishResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PublishResponse {
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<PublishedEvent>,
}

/// `portico.notify.v1.PublishedEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PublishedEvent {
    #[prost(string, tag = "1")]
    pub app: String,
    #[prost(string, tag = "2")]
    pub id: String,
}

/// The gRPC status of a refusal.
fn status(e: &GatewayError) -> Status {
    let code = match e.status() {
        400 | 413 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        429 => Code::ResourceExhausted,
        503 => Code::Unavailable,
        _ => Code::Internal,
    };
    Status::new(code, e.public_message().to_owned())
}

struct Unary(InternalState);

impl tonic::server::UnaryService<PublishRequest> for Unary {
    type Response = PublishResponse;
    type Future =
        Pin<Box<dyn Future<Output = Result<tonic::Response<PublishResponse>, Status>> + Send>>;

    fn call(&mut self, request: tonic::Request<PublishRequest>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let mut headers = http::HeaderMap::new();
            if let Some(v) = request.metadata().get("authorization") {
                if let Ok(v) = http::HeaderValue::from_bytes(v.as_encoded_bytes()) {
                    headers.insert(http::header::AUTHORIZATION, v);
                }
            }
            authorize(&state, &headers).map_err(|e| status(&e))?;
            let m = request.into_inner();
            let payload = serde_json::from_str(&m.payload_json)
                .map_err(|e| Status::invalid_argument(format!("payload_json: not JSON: {e}")))?;
            let req = Publish {
                app: (!m.app.is_empty()).then_some(m.app),
                topic: m.topic,
                id: (!m.id.is_empty()).then_some(m.id),
                payload,
                ttl_s: (m.ttl_s > 0).then_some(m.ttl_s),
            };
            let events = state.notifier.publish(req).await.map_err(|e| status(&e))?;
            Ok(tonic::Response::new(PublishResponse {
                events: events
                    .into_iter()
                    .map(|p| PublishedEvent {
                        app: p.app,
                        id: p.id.to_string(),
                    })
                    .collect(),
            }))
        })
    }
}

/// The axum handler of [`PUBLISH_PATH`] (HTTP/2, served by `internal::serve`).
pub async fn publish(State(state): State<InternalState>, req: Request) -> Response {
    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<
        PublishResponse,
        PublishRequest,
    >::default());
    grpc.unary(Unary(state), req)
        .await
        .map(axum::body::Body::new)
        .into_response()
}
