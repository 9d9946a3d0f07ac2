//! Stub-less gRPC: what both the gateway (a client of any backend) and the demo backend (a
//! server without generated code) need to speak gRPC with prost-reflect
//! [`DynamicMessage`](prost_reflect::DynamicMessage)s.
//!
//! - [`codec`]: the tonic codec of dynamic messages;
//! - [`status`]: gRPC status codes by name, and the HTTP status each answers with.
//!
//! It depends on no HTTP server, so it builds (and can be fuzzed) without Pingora.

pub mod codec;
pub mod status;

pub use codec::DynamicCodec;
pub use status::{code_by_name, code_name_and_status};
