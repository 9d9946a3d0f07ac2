//! The invoke tier: `bulkhead → breaker → balance → http proxy | grpc generic call`.
//!
//! Every call holds a bulkhead permit and a breaker ticket for its whole duration, and has a
//! deadline (the API's `timeout_ms`).

pub mod balance;
pub mod breaker;
pub mod bulkhead;
pub mod grpc;
pub mod http;
pub mod transcode;

use bytes::Bytes;

/// A whole answer produced by the invoke tier (gRPC calls are answered in full; HTTP
/// responses are streamed by `http.rs` instead).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    /// Extra response headers (`content-type` is always JSON for transcoded calls).
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}
