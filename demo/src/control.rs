//! What an operator (or a test) can change on a running demo backend, shared by its HTTP
//! and gRPC servers: the load it reports, faults applied to every call, and sleep.
//!
//! HTTP admin calls (never counted, never faulted, answered while asleep):
//!
//! | call | effect |
//! |---|---|
//! | `GET /__admin` | `{"load": ..., "asleep": bool, "delay_ms": N, "status": S}` |
//! | `POST /__admin/load?value=vm_cpu=0.9,vm_mem=0.9,cpu=0.9,mem=0.9` | report this in `X-Portico-Load` (HTTP) and `x-portico-load` metadata (gRPC); an empty value stops reporting |
//! | `POST /__admin/faults?delay_ms=N&status=S` | every call (HTTP and gRPC, `/healthz` included) is delayed N ms and/or answered S (HTTP) / `UNAVAILABLE` (gRPC, S ≥ 500); no parameters clear them |
//! | `POST /__admin/sleep` | asleep: every HTTP call but `/__admin*` and `/__stats*` answers 503 `{"error": "ASLEEP"}` (so `GET /healthz` fails), gRPC calls fail `UNAVAILABLE` and `grpc.health.v1.Health/Check` says `NOT_SERVING` |
//! | `POST /__admin/wake?after_ms=N` | wakes up after N ms (default 0); answers 202 at once. This is the URL to give a cluster's `sleep.wake_url` |
//!
//! The binary takes `--load <report>` and `--asleep` to start that way.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The shared switches of one demo backend process.
#[derive(Debug, Default)]
pub struct Control {
    load: Mutex<String>,
    asleep: AtomicBool,
    delay_ms: AtomicU64,
    status: AtomicU16,
    /// Wake calls received (a test checks they were deduplicated).
    pub wake_calls: AtomicU64,
}

impl Control {
    /// A control reporting `load` (empty: none), asleep or not.
    pub fn new(load: &str, asleep: bool) -> Arc<Control> {
        let c = Control::default();
        c.set_load(load);
        c.asleep.store(asleep, Ordering::Relaxed);
        Arc::new(c)
    }

    /// The load report to send, if any.
    pub fn load(&self) -> Option<String> {
        let l = self.load.lock().unwrap_or_else(|e| e.into_inner());
        (!l.is_empty()).then(|| l.clone())
    }

    pub fn set_load(&self, v: &str) {
        *self.load.lock().unwrap_or_else(|e| e.into_inner()) = v.to_owned();
    }

    pub fn asleep(&self) -> bool {
        self.asleep.load(Ordering::Relaxed)
    }

    pub fn set_asleep(&self, v: bool) {
        self.asleep.store(v, Ordering::Relaxed);
    }

    /// Wakes up after `after` (on the current runtime).
    pub fn wake_after(self: &Arc<Self>, after: Duration) {
        self.wake_calls.fetch_add(1, Ordering::Relaxed);
        let me = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            me.set_asleep(false);
        });
    }

    /// The delay and status applied to every call.
    pub fn faults(&self) -> (Option<u64>, Option<u16>) {
        let d = self.delay_ms.load(Ordering::Relaxed);
        let s = self.status.load(Ordering::Relaxed);
        ((d > 0).then_some(d), (s > 0).then_some(s))
    }

    pub fn set_faults(&self, delay_ms: Option<u64>, status: Option<u16>) {
        self.delay_ms
            .store(delay_ms.unwrap_or(0), Ordering::Relaxed);
        self.status.store(status.unwrap_or(0), Ordering::Relaxed);
    }

    /// `GET /__admin`'s answer.
    pub fn view(&self) -> serde_json::Value {
        let (d, s) = self.faults();
        serde_json::json!({"load": self.load(), "asleep": self.asleep(), "delay_ms": d, "status": s,
            "wake_calls": self.wake_calls.load(Ordering::Relaxed)})
    }
}
