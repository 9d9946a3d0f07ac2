//! Portico's demo backend, as a library so that tests can use it two ways:
//!
//! - in process: [`http::spawn`] serves the HTTP demo API on a listener of the caller's
//!   runtime and returns the bound address;
//! - as a real process: tests start the `portico-demo-backend` binary with
//!   `portico_testkit::procs::BackendProcess`, on ephemeral ports it reports.
//!
//! The binary (`src/main.rs`) prints exactly one line on stdout once every listener is bound:
//!
//! ```text
//! portico-demo-backend http=127.0.0.1:41234 grpc=127.0.0.1:41235
//! ```
//!
//! (`grpc=` only when `--grpc` is given). `portico_testkit::procs::parse_ready_line` reads it.
//!
//! The HTTP demo API, its fault injection and its request counter are described in
//! [`http`]. The gRPC demo services live in [`grpc`].

pub mod control;
pub mod grpc;
pub mod http;

/// The encoded FileDescriptorSet of the demo protos (see [`grpc::descriptor_set_bytes`]).
pub use grpc::descriptor_set_bytes;

/// The first word of the readiness line the binary prints on stdout.
pub const READY_PREFIX: &str = "portico-demo-backend";
