//! HTTP/1 connections of the traffic listeners with a total deadline for reading each request
//! head (slowloris, docs/SECURITY.md, "Connections"): [`HeadDeadlineApp`].
//!
//! Pingora 0.9 only bounds each *read* of a request head (60 s, and no bound at all on a
//! reused keepalive connection), so a client trickling one byte a minute holds a connection
//! forever. `HttpProxy` reads the head itself, so the deadline lives one layer down, in the
//! connection: [`HeadDeadlineApp`] runs Pingora's own HTTP/1 keepalive loop with the
//! connection wrapped in [`HeadDeadlineStream`] (`head_stream.rs`), and hands what is not
//! HTTP/1 (h2c, custom: Portico enables neither) untouched to `HttpProxy`'s own `ServerApp`.
//! HTTP/2 by ALPN never reaches it: `CappedApp` (`accept.rs`) serves it with `h2.rs`.
//!
//! **A copy of Pingora.** [`HeadDeadlineApp::is_http1`] and `serve_http1` copy `process_new`
//! of `impl<T> ServerApp for T where T: HttpServerApp + Send + Sync + 'static` in pingora-core
//! 0.9.1, `src/apps/mod.rs` (the protocol dispatch and the HTTP/1.1 keepalive loop; the
//! 60 s first-request keepalive is [`FIRST_REQUEST_KEEPALIVE_SECS`], the h2c preface
//! [`H2_PREFACE`]). A new Pingora may change that loop (settings carried over between
//! requests, the dispatch order), and the copy would silently keep the old behaviour: the
//! test `the_copy_is_of_the_locked_pingora` below fails as soon as Cargo.lock locks another
//! pingora-core than its `PINGORA_COMPARED`. Then compare the new `process_new` with the
//! copy, carry over what changed, and set `PINGORA_COMPARED` and the versions named in this
//! file to the locked one.

use super::head_stream::HeadDeadlineStream;
use async_trait::async_trait;
use pingora_core::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::{Stream, ALPN};
use pingora_core::server::ShutdownWatch;
use std::sync::Arc;
use std::time::Duration;

/// Pingora's default idle keepalive for a connection's first request, in seconds (as in
/// pingora-core's `ServerApp` for `HttpServerApp`).
const FIRST_REQUEST_KEEPALIVE_SECS: u64 = 60;

/// The HTTP/2 connection preface (RFC 9113 §3.4), for h2c detection.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A `ServerApp` that serves HTTP/1 connections of an `HttpServerApp` with a total request
/// head deadline, and everything else exactly as the app's own `ServerApp` does.
pub struct HeadDeadlineApp<A> {
    app: Arc<A>,
    /// Zero: off (every connection goes to the app's own `ServerApp`).
    pub(super) head_deadline: Duration,
}

impl<A> HeadDeadlineApp<A> {
    pub fn new(app: Arc<A>, head_deadline: Duration) -> Self {
        HeadDeadlineApp { app, head_deadline }
    }
}

impl<A> HeadDeadlineApp<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    /// Whether `stream` is served as HTTP/1 by Pingora's own dispatch: the same decisions, in
    /// the same order, as the h2c / ALPN / custom branches of `process_new` in the
    /// `impl<T> ServerApp for T where T: HttpServerApp` of pingora-core 0.9.1,
    /// `src/apps/mod.rs`. `None`: the h2c preface peek failed (the client went away), which
    /// Pingora treats as the end of the connection.
    pub(super) async fn is_http1(&self, stream: &mut Stream) -> Option<bool> {
        let opts = self.app.server_options();
        let h2c = opts.is_some_and(|o| o.h2c);
        if opts.is_some_and(|o| o.force_custom) {
            return Some(false);
        }
        if stream.get_ssl_digest().is_none() && h2c {
            let mut buf = [0u8; H2_PREFACE.len()];
            // Peeking does not consume: whichever side serves the stream reads it again.
            let peeked = match stream.try_peek(&mut buf).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "read error while peeking the h2c preface");
                    return None;
                }
            };
            if !peeked || buf == H2_PREFACE {
                return Some(false);
            }
        }
        Some(matches!(
            stream.selected_alpn_proto(),
            None | Some(ALPN::H1) | Some(ALPN::H2H1)
        ))
    }

    /// Pingora's HTTP/1 keepalive loop, with the head deadline armed for each request: the
    /// HTTP/1.1 fallback branch of the same `process_new` (pingora-core 0.9.1
    /// `src/apps/mod.rs`), line for line, plus the wrapper, [`rearm`] and what
    /// [`apply_settings`] adds after Pingora's `apply_to_session`.
    async fn serve_http1(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) {
        let stream: Stream = Box::new(HeadDeadlineStream::new(stream, self.head_deadline));
        let mut session = ServerSession::new_http1(stream);
        if *shutdown.borrow() {
            // Stop the client from reusing the connection: the service is shutting down.
            session.set_keepalive(None);
        } else {
            session.set_keepalive(Some(FIRST_REQUEST_KEEPALIVE_SECS));
        }
        session.set_keepalive_reuses_remaining(
            self.app
                .server_options()
                .and_then(|o| o.keepalive_request_limit),
        );
        let mut result = self.app.process_new_http(session, shutdown).await;
        while let Some((stream, settings)) = result.map(|r| r.consume()) {
            let Some(stream) = rearm(stream) else {
                return;
            };
            let mut session = ServerSession::new_http1(stream);
            apply_settings(settings, &mut session);
            result = self.app.process_new_http(session, shutdown).await;
        }
    }
}

fn apply_settings(settings: Option<HttpPersistentSettings>, session: &mut ServerSession) {
    if let Some(settings) = settings {
        settings.apply_to_session(session);
    }
    // Pingora carries "no limit" (0) over to a reused connection when the client sent no
    // Keep-Alive header, so an idle client could hold a connection forever: bound the idle
    // wait between requests as for the first one.
    if session.get_keepalive() == Some(0) {
        session.set_keepalive(Some(FIRST_REQUEST_KEEPALIVE_SECS));
    }
    // With pipelining, bytes of this head may have been read during the previous request (the
    // pipelined prefix) and never pass through the armed stream, so its end could be missed.
    // Pipelining is off in Portico (Pingora then refuses reuse when bytes were over-read);
    // should it be turned on, such requests go without the deadline rather than risk a false
    // timeout.
    if session.pipelining_enabled() {
        if let Some(s) = session
            .stream()
            .and_then(|s| s.as_any().downcast_ref::<HeadDeadlineStream>())
        {
            s.skip_this_head();
        }
    }
}

/// Arms the head deadline of a connection handed back for keepalive reuse.
fn rearm(stream: Stream) -> Option<Stream> {
    match stream.into_any().downcast::<HeadDeadlineStream>() {
        Ok(mut s) => {
            s.arm();
            Some(s)
        }
        Err(_) => {
            // Unreachable: the connection is the stream `serve_http1` wrapped.
            tracing::error!("keepalive connection lost its head deadline wrapper; closing it");
            None
        }
    }
}

#[async_trait]
impl<A> ServerApp for HeadDeadlineApp<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // h2c and custom protocols (not enabled in Portico; h2 by ALPN is served by
        // `CappedApp`): Pingora's own dispatch, unchanged.
        if self.head_deadline.is_zero() || !self.is_http1(&mut stream).await? {
            return ServerApp::process_new(&self.app, stream, shutdown).await;
        }
        self.serve_http1(stream, shutdown).await;
        None
    }

    async fn cleanup(&self) {
        ServerApp::cleanup(&*self.app).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The pingora-core version whose `ServerApp::process_new` (`src/apps/mod.rs`) the HTTP/1
    /// dispatch and keepalive loop here were compared with, line for line (see the module
    /// docs).
    const PINGORA_COMPARED: &str = "0.9.1";

    /// The version of `package` that a `Cargo.lock` names; `None` when it names none, or
    /// more than one version (then each would need comparing).
    fn locked_version<'a>(lock: &'a str, package: &str) -> Option<&'a str> {
        let name = format!("name = \"{package}\"");
        let mut versions = lock
            .split("[[package]]")
            .filter(|entry| entry.lines().any(|l| l.trim() == name))
            .filter_map(|entry| {
                entry.lines().find_map(|l| {
                    l.trim()
                        .strip_prefix("version = \"")
                        .and_then(|v| v.strip_suffix('"'))
                })
            });
        let first = versions.next()?;
        versions.next().is_none().then_some(first)
    }

    #[test]
    fn the_copy_is_of_the_locked_pingora() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock");
        let lock = std::fs::read_to_string(path).expect("the workspace's Cargo.lock");
        let locked = locked_version(&lock, "pingora-core");
        assert_eq!(
            locked,
            Some(PINGORA_COMPARED),
            "Cargo.lock locks pingora-core {locked:?}, but gateway/src/listener/head_deadline.rs \
             copies the HTTP/1 dispatch and keepalive loop of pingora-core {PINGORA_COMPARED} \
             (`process_new` of `impl<T> ServerApp for T where T: HttpServerApp` in \
             src/apps/mod.rs). Compare that function of the locked version with \
             `HeadDeadlineApp::is_http1` and `serve_http1`, carry over what changed, then set \
             PINGORA_COMPARED and the versions this file names to the locked one."
        );
    }

    #[test]
    fn the_locked_version_is_read_from_its_own_entry() {
        let lock = "version = 4\n\n[[package]]\nname = \"pingora-cache\"\nversion = \"0.8.0\"\n\n\
                    [[package]]\nname = \"pingora-core\"\nversion = \"0.10.0\"\n\
                    dependencies = [\n \"pingora-error\",\n]\n";
        assert_eq!(locked_version(lock, "pingora-core"), Some("0.10.0"));
        assert_eq!(locked_version(lock, "pingora-cache"), Some("0.8.0"));
        assert_eq!(locked_version(lock, "pingora-error"), None);
        let two = format!("{lock}\n[[package]]\nname = \"pingora-core\"\nversion = \"0.9.1\"\n");
        assert_eq!(locked_version(&two, "pingora-core"), None);
    }

    #[test]
    fn rearm_recovers_the_wrapper_from_a_stream() {
        let (server, _client) = tokio::io::duplex(64);
        let mut s = HeadDeadlineStream::new(Box::new(server), Duration::from_secs(1));
        s.disarm();
        let stream: Stream = Box::new(s);
        let stream = rearm(stream).expect("our stream");
        let s = stream
            .into_any()
            .downcast::<HeadDeadlineStream>()
            .expect("still ours");
        assert!(s.is_armed());
    }
}
