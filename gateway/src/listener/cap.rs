//! The connection cap of a traffic listener (`--max-connections`): [`ConnectionCap`] counts
//! its open connections, [`OpenConnection`] holds one place until the connection closes.
//! The cap per client address is `address.rs`'s; what happens to a connection beyond either
//! is `accept.rs`'s.

use crate::observe::metrics::Metrics;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The default for `--max-connections`: open connections per traffic listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Counts a listener's open connections against its limit.
pub struct ConnectionCap {
    max: usize,
    open: AtomicUsize,
    open_gauge: prometheus::IntGauge,
    refused: prometheus::IntCounter,
}

impl ConnectionCap {
    /// The cap of listener `name` (its metric series) at `max` connections.
    pub fn new(metrics: &Metrics, name: &str, max: usize) -> Arc<ConnectionCap> {
        Arc::new(ConnectionCap {
            max,
            open: AtomicUsize::new(0),
            open_gauge: metrics.connections_open.with_label_values(&[name]),
            refused: metrics.connections_refused.with_label_values(&[name]),
        })
    }

    /// Counts a new connection in, unless the listener is at its limit (then it is counted as
    /// refused). The connection counts until the returned guard is dropped.
    pub fn try_open(self: &Arc<Self>) -> Option<OpenConnection> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.refused.inc();
            return None;
        }
        self.open_gauge.inc();
        Some(OpenConnection(self.clone()))
    }

    /// Connections open right now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// One open connection of a [`ConnectionCap`]; dropping it frees its place.
pub struct OpenConnection(Arc<ConnectionCap>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.open_gauge.dec();
    }
}
