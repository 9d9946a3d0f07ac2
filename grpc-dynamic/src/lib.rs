//! Stub-less gRPC: what both the gateway (a client of any backend) and the demo backend (a
//! server without generated code) need to speak gRPC with prost-reflect
//! [`DynamicMessage`](prost_reflect::DynamicMessage)s.
//!
//! - [`codec`]: the tonic codec of dynamic messages;
//! - [`status`]: gRPC status codes by name, and the HTTP status each answers with;
//! - [`transcode`]: HTTP/JSON ⇄ gRPC by the `google.api.http` rules: a [`MethodPlan`] per
//!   API maps a request (path variables, query, JSON body) to the method's input message
//!   and its reply to JSON; failures are [`TranscodeError`]s;
//! - [`proto_json`]: the reference JSON of a dynamic message (prost-reflect's, with
//!   non-finite wrapper values as proto3 JSON's strings);
//! - [`reply_json`], [`request_json`]: replies written as JSON in one pass over their
//!   protobuf bytes, JSON bodies encoded as protobuf in one pass.
//!
//! It depends on no HTTP server, so it builds (and can be fuzzed) without Pingora; without
//! its default `tonic` feature (the codecs and status names) it needs no gRPC stack either
//! (the fuzz targets build it so).

#[cfg(feature = "tonic")]
pub mod codec;
mod error;
pub mod proto_json;
pub mod reply_json;
pub mod request_json;
mod schema;
#[cfg(feature = "tonic")]
pub mod status;
#[cfg(test)]
mod testgen;
pub mod transcode;

#[cfg(feature = "tonic")]
pub use codec::DynamicCodec;
pub use error::{TranscodeError, TranscodeErrorKind};
pub use reply_json::ReplyWriter;
pub use request_json::{JsonCodecs, RequestEncoder};
#[cfg(feature = "tonic")]
pub use status::{code_by_name, code_name_and_status};
pub use transcode::{check_json_depth, BindingSpec, MethodPlan, MAX_JSON_DEPTH};
