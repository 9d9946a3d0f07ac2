//! The traffic listeners: Pingora's HTTP proxy service behind [`CappedApp`], which owns every
//! connection from its accept (docs/SECURITY.md, "Connections"). One file per job:
//!
//! - `accept.rs`: the connection phase ([`service`], [`CappedApp`]): each connection counted
//!   against the caps and refused beyond them, the TLS handshake and its deadline, HTTP/2 or
//!   HTTP/1, and the drain on shutdown;
//! - `cap.rs`: the count of a listener's open connections ([`ConnectionCap`]); `address.rs`:
//!   the count per client address ([`AddressCap`]);
//! - `h2.rs`: HTTP/2 by Portico's own accept loop (idle timeout, stream slots, reset budget,
//!   reset cancellation);
//! - `head_deadline.rs`: HTTP/1 by a copy of Pingora's keepalive loop that arms a total
//!   deadline for reading each request head (slowloris, [`HeadDeadlineApp`]);
//! - `head_stream.rs`: the connection wrapper that times a request head and bounds its size
//!   and parsing work ([`HeadDeadlineStream`]);
//! - `wrap.rs`: the delegation of Pingora's `IO` bundle that the wrappers share, and `Raw`
//!   (a `Stream` as the concrete `IO` type Pingora's TLS acceptor takes);
//! - `readiness.rs`: whether this process holds a listening socket ([`holds_listener`], for
//!   `/readyz`).
//!
//! This file only assembles them: the modules and what the rest of the gateway uses of them.

mod accept;
mod address;
mod cap;
pub mod h2;
mod head_deadline;
mod head_stream;
mod readiness;
mod wrap;

pub use accept::{
    drain_linger, service, CappedApp, ConnectionSettings, TlsEndpoint, TrafficApp,
    DEFAULT_TLS_HANDSHAKE,
};
pub use address::{AddressCap, AddressSlot, DEFAULT_MAX_PER_ADDRESS};
pub use cap::{ConnectionCap, OpenConnection, DEFAULT_MAX_CONNECTIONS};
pub use h2::H2Limits;
pub use head_deadline::HeadDeadlineApp;
pub use head_stream::{HeadDeadlineStream, MAX_HEAD_BYTES};
pub use readiness::holds_listener;

pub use crate::deadline::DEFAULT_HEAD_DEADLINE;

use pingora_core::listeners::L4BufferSettings;

/// The default for `--read-buffer-bytes`: the read buffer every accepted connection holds
/// for its whole life. Pingora's default is 64 KiB, nearly all of the ≈ 88 KiB an idle
/// keep-alive connection cost (benches/RESULTS.md, "Memory per idle keep-alive connection").
/// 4 KiB loses nothing: a read at least as large as the buffer bypasses it, and heads and
/// bodies are read into the HTTP session's own buffers of at least that size; it still
/// gathers the small reads a TLS record layer makes.
pub const DEFAULT_READ_BUFFER_BYTES: usize = 4096;

/// The L4 buffers of a traffic listener: `read` bytes of read buffer (0: unbuffered) and
/// Pingora's default write buffer (one TCP segment).
pub fn buffers(read: usize) -> L4BufferSettings {
    L4BufferSettings::default().read(read)
}
