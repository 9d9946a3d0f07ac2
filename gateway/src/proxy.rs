//! Portico's Pingora `ProxyHttp`: `request_filter` runs the whole pipeline and is the one
//! rescue point that turns any failure into the error envelope (docs/PROTOCOL.md, "The
//! error envelope") and writes every whole [`Response`]; `logging` writes the access log
//! line and the metrics. The gateway answers every request itself (HTTP backends are called
//! through Pingora's upstream pool inside the invoke tier), so `upstream_peer` is never
//! reached.
//!
//! Every write to the merchant is bounded by the write timeout (`--write-timeout-ms`, set on
//! the session as each request starts): a client that does not read its answer is cut off
//! (`WRITE_TIMEOUT` in the access log) instead of holding the connection, and, for a
//! streamed answer, the API's bulkhead slot. An error's `detail` (addresses, transport
//! errors) goes to the access log, never into the envelope.

use crate::error::{Code, GatewayError};
use crate::model::{Response, Whole};
use crate::observe::access_log::AccessRecord;
use crate::pipeline::{self, RequestCtx};
use crate::request_id;
use crate::runtime::Plane;
use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorType};
use pingora_http::ResponseHeader;
use pingora_proxy::{ProxyHttp, Session};
use portico_control::clock::now_rfc3339;
use std::sync::Arc;

/// The default for `--write-timeout-ms`: the longest one write of an answer may take.
pub const DEFAULT_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The code of a request whose client went away before its answer (an HTTP/2 stream the
/// client reset, or one still in flight when its connection ended), counted with status
/// `499` in `portico_requests_total` and the access log, never as a gateway failure.
pub const CLIENT_CLOSED: &str = "CLIENT_CLOSED";

/// The code of a switch's fallback answer in `portico_requests_total` and the access log: a
/// deliberate degradation, never a failure (docs/operations/history-and-reports.md, "Availability and degraded
/// answers").
pub const DEGRADED_FALLBACK: &str = "DEGRADED_FALLBACK";

/// How long a connection refused at the connection limit may take to send its request
/// head before it is closed without an answer.
const REFUSAL_HEAD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the body of a request refused before its body was read is drained, so closing
/// the connection does not reset the answer away before the client reads it.
const REFUSAL_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// One listener's proxy: a plane (live or sandbox) behind Pingora.
#[derive(Clone)]
pub struct Gateway {
    pub plane: Arc<Plane>,
}

impl Gateway {
    /// A connection the listener does not serve (over `--max-connections`): reads one
    /// HTTP/1 request head (within [`REFUSAL_HEAD_WAIT`]), answers it through the rescue
    /// point with `error` and the connection closed, and logs it like any request. A
    /// connection that sends no head in time is closed without an answer.
    pub async fn refuse_connection(
        &self,
        stream: pingora_core::protocols::Stream,
        error: GatewayError,
    ) {
        let mut session = Session::new_h1(stream);
        match tokio::time::timeout(REFUSAL_HEAD_WAIT, session.read_request()).await {
            Ok(Ok(true)) => {}
            _ => return,
        }
        let mut ctx = self.new_ctx();
        ctx.request_id = request_id::keep_or_make(&session.req_header().headers);
        let write_timeout = self.plane.shared.write_timeout;
        if !write_timeout.is_zero() {
            session.set_write_timeout(Some(write_timeout));
        }
        session.set_keepalive(None);
        // `rescue` drains what is left of the request body before the connection closes.
        let _ = rescue(&mut session, &mut ctx, error).await;
        self.logging(&mut session, None, &mut ctx).await;
        session.shutdown().await;
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new()
    }

    /// Request phase: assigns the request id, bounds writes to the merchant, runs the
    /// pipeline and writes the answer. Always returns `Ok(true)`: the response has been
    /// written here (or the connection is beyond saving), so Pingora never proxies on its own.
    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora_error::Result<bool> {
        ctx.request_id = request_id::keep_or_make(&session.req_header().headers);
        let write_timeout = self.plane.shared.write_timeout;
        if !write_timeout.is_zero() {
            session.set_write_timeout(Some(write_timeout));
        }
        // An HTTP/2 stream the client resets stops its work at once: the pipeline (and the
        // backend call in it) is dropped, which frees its bulkhead permit.
        let handled = match crate::model::current_stream() {
            None => Some(pipeline::handle(&self.plane, session, ctx).await),
            Some(stream) => tokio::select! {
                biased;
                () = stream.reset() => None,
                handled = pipeline::handle(&self.plane, session, ctx) => Some(handled),
            },
        };
        let Some(handled) = handled else {
            ctx.status = 499;
            ctx.code = CLIENT_CLOSED;
            ctx.detail = Some("the client reset the stream before its answer".to_owned());
            return Ok(true);
        };
        let written = match handled {
            Ok(Response::Streamed(status)) => {
                ctx.status = status;
                Ok(())
            }
            Ok(Response::Whole(whole)) => {
                ctx.status = whole.status;
                write_whole(session, whole, &ctx.request_id).await
            }
            Err(e) => rescue(session, ctx, e).await,
        };
        if let Err(e) = written {
            // The merchant is gone or the response broke half-way: close the connection.
            tracing::debug!(request_id = %ctx.request_id, error = %e, "response not completed");
            session.set_keepalive(None);
            if stream_reset(session) {
                // Whatever the pipeline came to, nobody was left to answer: not a failure of
                // the gateway's (docs/operations/gateway.md, "Admin endpoints", the metrics).
                ctx.status = 499;
                ctx.code = CLIENT_CLOSED;
            }
        }
        Ok(true)
    }

    /// Never called: every request is answered in `request_filter`.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> pingora_error::Result<Box<HttpPeer>> {
        Error::e_explain(
            ErrorType::InternalError,
            "portico answers every request in request_filter",
        )
    }

    /// Pingora-level failures (bad request line, ...) get the envelope too.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> pingora_proxy::FailToProxy {
        if ctx.request_id.is_empty() {
            ctx.request_id = request_id::keep_or_make(&session.req_header().headers);
        }
        let err = match e.etype() {
            ErrorType::InvalidHTTPHeader | ErrorType::H2Error => {
                GatewayError::bad_request(e.etype().as_str())
            }
            _ => GatewayError::internal(e.to_string()),
        };
        let code = err.status();
        let ok = !response_started(session) && rescue(session, ctx, err).await.is_ok();
        pingora_proxy::FailToProxy {
            error_code: code,
            can_reuse_downstream: ok,
        }
    }

    /// Logging phase: the access log line and the per-API metrics.
    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        let latency = ctx.started.elapsed();
        let shared = &self.plane.shared;
        let plane = self.plane.kind.as_str();
        let api = ctx.edge.api().map(|a| a.id.as_str());
        let status = if ctx.status == 0 {
            session.response_written().map_or(0, |r| r.status.as_u16())
        } else {
            ctx.status
        };
        // A switch's fallback answer is a deliberate degradation, counted apart from the
        // answers of the backend (docs/operations/history-and-reports.md, "Availability and degraded answers").
        if ctx.edge.degraded && ctx.code == "OK" {
            ctx.code = DEGRADED_FALLBACK;
        }
        let m = &shared.metrics;
        match (&ctx.api_metrics, status, ctx.code) {
            // The common case, on series resolved once per snapshot.
            (Some(am), 200, "OK") => am.ok.inc(),
            _ => m
                .requests
                .with_label_values(&[plane, api.unwrap_or("-"), status_label(status), ctx.code])
                .inc(),
        }
        match (&ctx.api_metrics, api) {
            (Some(am), _) => {
                am.latency.observe(latency.as_secs_f64());
                if let Some(up) = ctx.upstream.latency {
                    am.upstream_latency.observe(up.as_secs_f64());
                }
            }
            (None, Some(api)) => m
                .latency
                .with_label_values(&[plane, api])
                .observe(latency.as_secs_f64()),
            (None, None) => {}
        }
        if ctx.code != "OK" && ctx.code != CLIENT_CLOSED && ctx.code != DEGRADED_FALLBACK {
            m.rejections.with_label_values(&[plane, ctx.code]).inc();
        }
        if !shared.access_log.enabled() {
            return;
        }
        let req = session.req_header();
        let upstream = ctx.upstream.addr.map(|a| a.to_string());
        shared.access_log.write(&AccessRecord {
            ts: now_rfc3339(),
            plane,
            request_id: &ctx.request_id,
            method: req.method.as_str(),
            path: req.uri.path(),
            api,
            app_key: ctx.edge.app_key.as_deref(),
            client: ctx
                .edge
                .client_ip
                .or_else(|| {
                    session
                        .client_addr()
                        .and_then(|a| a.as_inet())
                        .map(|a| a.ip())
                })
                .map(|ip| ip.to_string()),
            status,
            code: ctx.code,
            latency_us: latency.as_micros() as u64,
            upstream: upstream.as_deref(),
            detail: ctx.detail.as_deref(),
        });
    }
}

/// Whether the client reset this request's HTTP/2 stream (or the stream broke); never for
/// HTTP/1. Looks without waiting.
fn stream_reset(session: &mut Session) -> bool {
    use futures::FutureExt;
    session
        .downstream_session
        .watch_h2_stream_close()
        .and_then(|closed| closed.now_or_never())
        .is_some()
}

/// Whether a final response head has been written (a `100 Continue` answered to
/// `Expect: 100-continue` is not the start of the response; see `edge/framing.rs`).
fn response_started(session: &Session) -> bool {
    session
        .response_written()
        .is_some_and(|r| !r.status.is_informational())
}

/// The one rescue point: a refusal or failure becomes the error envelope.
async fn rescue(
    session: &mut Session,
    ctx: &mut RequestCtx,
    e: GatewayError,
) -> pingora_error::Result<()> {
    ctx.status = e.status();
    ctx.code = e.code.as_str();
    ctx.detail = e.log_detail().map(str::to_owned);
    if e.code == Code::WriteTimeout {
        // The merchant is not reading: an envelope would not be read either.
        session.set_keepalive(None);
        return Error::e_explain(ErrorType::WriteTimedout, e.to_string());
    }
    if response_started(session) {
        // Half-way through a streamed response: nothing more can be said.
        return Error::e_explain(
            ErrorType::WriteError,
            format!("failure after response started: {e}"),
        );
    }
    // A refusal before the body was read must not leave the body on the connection.
    let unread = !session.is_body_done();
    if unread {
        session.set_keepalive(None);
    }
    let written = write_whole(
        session,
        Whole::envelope(&e, &ctx.request_id),
        &ctx.request_id,
    )
    .await;
    // Closing with the client's body still arriving would reset the connection, and a client
    // still writing that body would see the reset instead of the answer (a 413 to a large
    // upload, say): the body is read and dropped for at most `REFUSAL_DRAIN` first (a
    // lingering close). Not for a request refused as malformed (`BAD_REQUEST`): its framing is
    // not to be trusted, so it is closed at once.
    if unread && written.is_ok() && e.code != Code::BadRequest {
        let _ = tokio::time::timeout(REFUSAL_DRAIN, session.drain_request_body()).await;
    }
    written
}

/// The response head of a whole response: its status and headers, `content-type:
/// application/json` unless it sets a content type, `content-length`, and the request id;
/// returned with the body. The names and values are handed over as they are (a `String`
/// becomes `Bytes` without a copy) and parsed once, by Pingora, and written lower-case: no case
/// map is kept (HTTP/1.1 names are case-insensitive, RFC 9110 §5.1).
fn whole_head(whole: Whole, request_id: &str) -> pingora_error::Result<(ResponseHeader, Bytes)> {
    let Whole {
        status,
        headers,
        body,
    } = whole;
    let mut head = ResponseHeader::build_no_case(status, Some(headers.len() + 3))?;
    let mut has_type = false;
    for (name, value) in headers {
        has_type |= name.eq_ignore_ascii_case("content-type");
        head.append_header(Bytes::from(name), value)?;
    }
    if !has_type {
        head.insert_header(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        )?;
    }
    head.insert_header(http::header::CONTENT_LENGTH, body.len())?;
    head.insert_header(request_id::HEADER, request_id)?;
    Ok((head, body))
}

/// Writes a whole response with the request id (its head only, for a `HEAD` request), each
/// write within the session's write timeout.
async fn write_whole(
    session: &mut Session,
    whole: Whole,
    request_id: &str,
) -> pingora_error::Result<()> {
    let (head, body) = whole_head(whole, request_id)?;
    let head_only = session.req_header().method == http::Method::HEAD;
    let limit = session.get_write_timeout();
    bounded(
        limit,
        session.write_response_header(Box::new(head), head_only),
    )
    .await?;
    if !head_only {
        bounded(limit, session.write_response_body(Some(body), true)).await?;
    }
    Ok(())
}

/// Runs a write within `limit` (none: unbounded); `WriteTimedout` when it does not finish.
async fn bounded(
    limit: Option<std::time::Duration>,
    write: impl std::future::Future<Output = pingora_error::Result<()>>,
) -> pingora_error::Result<()> {
    match limit {
        None => write.await,
        Some(limit) => match crate::deadline::within(limit, write).await {
            Some(r) => r,
            None => Error::e_explain(
                ErrorType::WriteTimedout,
                format!("writing the response took longer than {limit:?}"),
            ),
        },
    }
}

fn status_label(status: u16) -> &'static str {
    // Avoid an allocation per request for the common statuses.
    match status {
        200 => "200",
        201 => "201",
        204 => "204",
        301 => "301",
        302 => "302",
        304 => "304",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        409 => "409",
        413 => "413",
        429 => "429",
        499 => "499",
        500 => "500",
        501 => "501",
        502 => "502",
        503 => "503",
        504 => "504",
        0 => "0",
        s if s < 200 => "1xx",
        s if s < 300 => "2xx",
        s if s < 400 => "3xx",
        s if s < 500 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::{plane, session, written};
    use bytes::Bytes;

    fn header<'h>(head: &'h ResponseHeader, name: &str) -> Vec<&'h str> {
        head.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    /// The body of a raw HTTP/1.1 response, as JSON.
    fn body_json(raw: &str) -> serde_json::Value {
        let (_, body) = raw.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn a_whole_head_is_json_with_length_and_request_id_unless_typed() {
        let json = Whole {
            status: 200,
            headers: vec![("x-extra".to_owned(), "1".to_owned())],
            body: Bytes::from_static(b"{}"),
        };
        let (head, _) = whole_head(json, "rid-1").unwrap();
        assert_eq!(head.status.as_u16(), 200);
        assert_eq!(header(&head, "content-type"), ["application/json"]);
        assert_eq!(header(&head, "content-length"), ["2"]);
        assert_eq!(header(&head, "x-portico-request-id"), ["rid-1"]);
        assert_eq!(header(&head, "x-extra"), ["1"]);
        let text = Whole {
            status: 503,
            headers: vec![("Content-Type".to_owned(), "text/plain".to_owned())],
            body: Bytes::from_static(b"busy"),
        };
        let (head, _) = whole_head(text, "rid-2").unwrap();
        assert_eq!(header(&head, "content-type"), ["text/plain"]);
        assert_eq!(header(&head, "content-length"), ["4"]);
    }

    #[tokio::test]
    async fn a_head_request_gets_the_head_only() {
        let (mut s, client) = session(b"HEAD /x HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let whole = Whole {
            status: 200,
            headers: Vec::new(),
            body: Bytes::from_static(b"{\"a\":1}"),
        };
        write_whole(&mut s, whole, "rid-3").await.unwrap();
        let out = written(s, client).await;
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(
            out.to_ascii_lowercase().contains("content-length: 7\r\n"),
            "{out}"
        );
        assert!(out.ends_with("\r\n\r\n"), "no body after the head: {out}");
    }

    #[tokio::test]
    async fn the_rescue_point_writes_the_envelope_with_retry_after() {
        let (mut s, client) = session(b"GET /x HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let mut ctx = RequestCtx::new();
        ctx.request_id = "rid-4".to_owned();
        let e = GatewayError::new(Code::RateLimited, "slow down").with_retry_after(3);
        rescue(&mut s, &mut ctx, e).await.unwrap();
        assert_eq!((ctx.status, ctx.code), (429, "RATE_LIMITED"));
        let out = written(s, client).await;
        let lower = out.to_ascii_lowercase();
        assert!(out.starts_with("HTTP/1.1 429"), "{out}");
        assert!(lower.contains("retry-after: 3\r\n"), "{out}");
        assert!(lower.contains("x-portico-request-id: rid-4\r\n"), "{out}");
        let v = body_json(&out);
        assert_eq!(v["code"], "RATE_LIMITED");
        assert_eq!(v["request_id"], "rid-4");
    }

    #[tokio::test]
    async fn request_filter_keeps_a_well_formed_request_id_and_makes_one_otherwise() {
        let gateway = Gateway {
            plane: Arc::new(plane()),
        };
        for (sent, kept) in [("order-42.retry_1", true), ("not ok!", false)] {
            let raw = format!("GET /x HTTP/1.1\r\nhost: x\r\nx-portico-request-id: {sent}\r\n\r\n");
            let (mut s, client) = session(raw.as_bytes()).await;
            let mut ctx = gateway.new_ctx();
            assert!(gateway.request_filter(&mut s, &mut ctx).await.unwrap());
            assert_eq!((ctx.status, ctx.code), (404, "API_NOT_FOUND"));
            if kept {
                assert_eq!(ctx.request_id, sent);
            } else {
                assert_eq!(ctx.request_id.len(), 32, "{}", ctx.request_id);
            }
            let out = written(s, client).await;
            let expected = format!("x-portico-request-id: {}\r\n", ctx.request_id);
            assert!(out.to_ascii_lowercase().contains(&expected), "{out}");
            assert_eq!(body_json(&out)["request_id"], ctx.request_id.as_str());
        }
    }
}
