//! The connection wrapper of the HTTP/1 head deadline: [`HeadDeadlineStream`] times the
//! reading of each request head and bounds its size and the work of parsing it; the HTTP/1
//! loop that arms it for each request is `head_deadline.rs`'s.
//!
//! [`HeadDeadlineStream`] is armed at the start of each request (connection start, and again
//! each time Pingora hands the connection back for keepalive reuse). While armed and before
//! any byte has arrived, nothing is timed: the idle keepalive rules of Pingora apply. The
//! first byte of a head starts the deadline; the read that brings the end of the head (the
//! empty line) disarms it. After that, reads and writes are passed straight through. When
//! the deadline passes first, the stream answers `408` (one non-blocking write, best effort)
//! and fails the read with `TimedOut`, so Pingora gives up the request head and closes the
//! connection.
//!
//! Cost on the hot path: one extra allocation per connection and one extra virtual call per
//! read/write. While armed, a read whose bytes end with the end of the head (a GET arriving
//! in one segment) is recognised in O(1) without a clock read or a timer; otherwise the bytes
//! are scanned up to the end of the head. A timer (and a clock read) exists only while a head
//! spans more than one read.
//!
//! The same stream bounds the work of reading a head (docs/SECURITY.md, "Bounded work before
//! authentication"): Pingora parses the whole head again after every read that does not
//! complete it, so a head trickled in small pieces would cost its length squared. While a
//! head is incomplete the stream holds what it reads and hands it on only when the head ends
//! or [`HEAD_RELEASE_BYTES`] are held, and a head over [`MAX_HEAD_BYTES`] is answered `431`
//! and the connection closed: a head is parsed at most a handful of times.

use super::wrap::{delegate_io, delegate_write};
use crate::request_id;
use pingora_core::protocols::Stream;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The longest request head read (request line and header fields): a head over it is
/// answered `431` and the connection closed. Routing takes 8 KiB of target and the header
/// limits 32 KiB of fields (docs/PROTOCOL.md, "Limits"), so nothing over this could be
/// served anyway; Pingora's own limit is 1 MiB.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// While a head is incomplete, bytes are handed to Pingora once this many are held (or the
/// head ends): Pingora re-parses the head from its start after every read.
const HEAD_RELEASE_BYTES: usize = 16 * 1024;

/// Where a connection is in reading a request head.
enum Head {
    /// Between requests, or before the first byte of this one: not timed here.
    AwaitingFirstByte,
    /// Part of the head has arrived; the timer fires at the deadline.
    Reading(Pin<Box<Sleep>>),
    /// The head has been read: reads (the body, draining it) pass straight through.
    Done,
    /// The deadline passed: every read fails.
    Expired,
}

/// A connection that fails a request head read that takes longer than its deadline (see the
/// module doc). Implements Pingora's `IO` bundle by delegating to the wrapped stream.
pub struct HeadDeadlineStream {
    inner: Stream,
    deadline: Duration,
    head: Head,
    end: HeadEnd,
    /// Bytes of an unfinished head read from the connection but not yet handed to Pingora
    /// (see [`HEAD_RELEASE_BYTES`]), and how many of them were handed over already.
    held: Vec<u8>,
    held_from: usize,
    /// Bytes of the current head read so far (see [`MAX_HEAD_BYTES`]).
    head_bytes: usize,
    /// Set through a shared reference (the stream is inside Pingora's session by then): the
    /// current head is not timed. Checked only while armed.
    skip: AtomicBool,
}

impl HeadDeadlineStream {
    /// Wraps `inner`, armed for the first request.
    pub fn new(inner: Stream, deadline: Duration) -> Self {
        HeadDeadlineStream {
            inner,
            deadline,
            head: Head::AwaitingFirstByte,
            end: HeadEnd::default(),
            held: Vec::new(),
            held_from: 0,
            head_bytes: 0,
            skip: AtomicBool::new(false),
        }
    }

    /// Arms the deadline for the next request head (starts at its first byte).
    pub fn arm(&mut self) {
        self.head = Head::AwaitingFirstByte;
        self.end = HeadEnd::default();
        self.head_bytes = 0;
        // Bytes read with the previous request but not taken by Pingora yet begin this head.
        let early = &self.held[self.held_from..];
        if !early.is_empty() {
            self.head_bytes = early.len();
            self.head = if self.end.feed(early) {
                Head::Done
            } else {
                Head::Reading(Box::pin(tokio::time::sleep(self.deadline)))
            };
        }
        *self.skip.get_mut() = false;
    }

    /// Leaves the head of the current request untimed (see `apply_settings`).
    pub fn skip_this_head(&self) {
        self.skip.store(true, Ordering::Relaxed);
    }

    /// Stops timing the current head.
    pub fn disarm(&mut self) {
        self.head = Head::Done;
    }

    /// Whether a head is being timed or awaited.
    pub fn is_armed(&self) -> bool {
        matches!(self.head, Head::AwaitingFirstByte | Head::Reading(_))
    }

    /// A head over [`MAX_HEAD_BYTES`]: one non-blocking attempt at a `431`, then the read
    /// error (as for [`HeadDeadlineStream::expire`]).
    fn too_large(&mut self, cx: &mut Context<'_>) -> io::Error {
        self.head = Head::Expired;
        self.held.clear();
        self.held_from = 0;
        let reply = format!(
            "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
             connection: close\r\n{}: {}\r\n\r\n",
            request_id::HEADER,
            request_id::make()
        );
        if let Poll::Ready(Ok(n)) = Pin::new(&mut self.inner).poll_write(cx, reply.as_bytes()) {
            if n == reply.len() {
                let _ = Pin::new(&mut self.inner).poll_flush(cx);
            }
        }
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("request head over {MAX_HEAD_BYTES} bytes"),
        )
    }

    /// Hands held bytes to the reader, as many as fit.
    fn release(&mut self, buf: &mut ReadBuf<'_>) {
        let rest = &self.held[self.held_from..];
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        self.held_from += n;
        if self.held_from == self.held.len() {
            self.held.clear();
            self.held_from = 0;
        }
    }

    /// The first read of a head, straight into `buf`: `Some` is the answer to the caller
    /// (the head ended, the stream ended, an error, pending, or enough is held to release);
    /// `None`: the bytes read are now held and the caller reads on.
    fn read_direct(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Option<Poll<io::Result<()>>> {
        match &mut self.head {
            Head::Expired => return Some(Poll::Ready(Err(self.timed_out()))),
            Head::Reading(timer) => {
                if timer.as_mut().poll(cx).is_ready() {
                    return Some(Poll::Ready(Err(self.expire(cx))));
                }
            }
            Head::AwaitingFirstByte | Head::Done => {}
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending => return Some(Poll::Pending),
            Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
            Poll::Ready(Ok(())) => {}
        }
        let got = &buf.filled()[before..];
        if got.is_empty() {
            return Some(Poll::Ready(Ok(())));
        }
        // One read may bring a whole oversized head (Pingora's buffer grows): the cap is on
        // the head's own bytes, not on a body read with it.
        let ended = self.end.feed_end(got);
        let head_len = self.head_bytes + ended.unwrap_or(got.len());
        self.head_bytes += got.len();
        if head_len > MAX_HEAD_BYTES {
            return Some(Poll::Ready(Err(self.too_large(cx))));
        }
        if ended.is_some() {
            self.head = Head::Done;
            return Some(Poll::Ready(Ok(())));
        }
        self.held.extend_from_slice(got);
        buf.set_filled(before);
        if matches!(self.head, Head::AwaitingFirstByte) {
            self.head = Head::Reading(Box::pin(tokio::time::sleep(self.deadline)));
        }
        if self.held.len() >= HEAD_RELEASE_BYTES {
            self.release(buf);
            return Some(Poll::Ready(Ok(())));
        }
        None
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "request head not complete within {:?} of its first byte",
                self.deadline
            ),
        )
    }

    /// The deadline passed: one non-blocking attempt at a `408`, then the read error. Nothing
    /// of this request has been answered (its head was never parsed), so the reply cannot
    /// interleave with another response.
    fn expire(&mut self, cx: &mut Context<'_>) -> io::Error {
        self.head = Head::Expired;
        let reply = format!(
            "HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\
             {}: {}\r\n\r\n",
            request_id::HEADER,
            request_id::make()
        );
        if let Poll::Ready(Ok(n)) = Pin::new(&mut self.inner).poll_write(cx, reply.as_bytes()) {
            if n == reply.len() {
                let _ = Pin::new(&mut self.inner).poll_flush(cx);
            }
        }
        self.timed_out()
    }
}

impl AsyncRead for HeadDeadlineStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.held_from < this.held.len() {
            // Bytes already read and released (the end of a head and what followed it).
            this.release(buf);
            return Poll::Ready(Ok(()));
        }
        if this.skip.load(Ordering::Relaxed) && matches!(this.head, Head::AwaitingFirstByte) {
            this.head = Head::Done;
        }
        if matches!(this.head, Head::Done) {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        // A head is being read: read on until it ends or HEAD_RELEASE_BYTES are held, so
        // that Pingora, which parses the whole head again after every read that does not
        // complete it, parses a head at most a few times (docs/SECURITY.md, "Bounded work
        // before authentication").
        if this.held.is_empty() && buf.remaining() > 0 {
            // The usual case, a head that arrives in one read: read straight into Pingora's
            // buffer (no copy, no zeroed chunk); an unfinished head is taken back and held.
            if let Some(ready) = this.read_direct(cx, buf) {
                return ready;
            }
        }
        let mut chunk = [0u8; 4096];
        loop {
            match &mut this.head {
                Head::Expired => return Poll::Ready(Err(this.timed_out())),
                Head::Reading(timer) => {
                    // Checked before reading so a steady trickle cannot outrun it.
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(this.expire(cx)));
                    }
                }
                Head::AwaitingFirstByte | Head::Done => {}
            }
            let mut read = ReadBuf::new(&mut chunk);
            if Pin::new(&mut this.inner)
                .poll_read(cx, &mut read)?
                .is_pending()
            {
                return Poll::Pending;
            }
            let got = read.filled();
            if got.is_empty() {
                // End of stream: what is held first, then Pingora sees the end.
                this.release(buf);
                return Poll::Ready(Ok(()));
            }
            this.head_bytes += got.len();
            this.held.extend_from_slice(got);
            if this.end.feed(got) {
                this.head = Head::Done;
                this.release(buf);
                return Poll::Ready(Ok(()));
            }
            if this.head_bytes > MAX_HEAD_BYTES {
                return Poll::Ready(Err(this.too_large(cx)));
            }
            if matches!(this.head, Head::AwaitingFirstByte) {
                this.head = Head::Reading(Box::pin(tokio::time::sleep(this.deadline)));
            }
            if this.held.len() >= HEAD_RELEASE_BYTES {
                this.release(buf);
                return Poll::Ready(Ok(()));
            }
        }
    }
}

delegate_write!(HeadDeadlineStream);
delegate_io!(HeadDeadlineStream);

/// Finds the end of a request head across reads, as httparse does: the first empty line
/// (`LF [CR] LF`) after the request line. Empty lines before the request line are skipped
/// (httparse skips them too), so they cannot end the head early. Bare `CR`s are ignored: a
/// `CR` not followed by `LF` is a parse error in httparse, so ignoring it can only end the
/// head where httparse fails anyway.
#[derive(Debug, Default, Clone, Copy)]
struct HeadEnd {
    /// A byte other than CR/LF has been seen (the request line has started).
    started: bool,
    /// The last line end seen is followed only by CRs so far.
    at_line_start: bool,
}

impl HeadEnd {
    /// Feeds the next bytes read; true when the head ended within them.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        self.feed_end(bytes).is_some()
    }

    /// Feeds the next bytes read; `Some(n)` when the head ended within them, after their
    /// first `n` bytes.
    fn feed_end(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut rest = bytes;
        if !self.started {
            // Empty lines before the request line (rare): skipped.
            match rest.iter().position(|&b| b != b'\r' && b != b'\n') {
                Some(i) => rest = &rest[i..],
                None => return None,
            }
            self.started = true;
            self.at_line_start = false;
        }
        let skipped = bytes.len() - rest.len();
        // Fast path, O(1): the bytes end with an empty line (a head arriving in one segment
        // without a body). The head may have ended earlier in them: the length reported is
        // then an upper bound, which is what the size cap needs.
        if rest.ends_with(b"\n\n") || rest.ends_with(b"\n\r\n") {
            return Some(bytes.len());
        }
        // Otherwise from line end to line end: the head ends at an LF that follows the previous
        // LF with nothing but CRs in between.
        let mut after_lf = self.at_line_start;
        let mut from = 0;
        while let Some(i) = find_lf(&rest[from..]) {
            if after_lf && rest[from..from + i].iter().all(|&b| b == b'\r') {
                return Some(skipped + from + i + 1);
            }
            after_lf = true;
            from += i + 1;
        }
        self.at_line_start = after_lf && rest[from..].iter().all(|&b| b == b'\r');
        None
    }
}

/// The index of the first LF in `hay`, eight bytes at a time.
fn find_lf(hay: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const LFS: u64 = ONES * b'\n' as u64;
    let mut words = hay.chunks_exact(8);
    let mut base = 0;
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        // Bytes equal to LF become zero; the lowest zero byte is flagged exactly.
        let x = u64::from_le_bytes(w) ^ LFS;
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        if zeros != 0 {
            return Some(base + (zeros.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| base + i)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    fn ends(chunks: &[&[u8]]) -> Option<usize> {
        let mut h = HeadEnd::default();
        chunks.iter().position(|c| h.feed(c))
    }

    #[test]
    fn head_end_is_found_across_reads() {
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"]), Some(0));
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\n\r\n{\"a\":1}"]), Some(0));
        assert_eq!(ends(&[b"GET / HTTP/1.1\n\n"]), Some(0));
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nHost: a\r\n", b"\r\n"]), Some(1));
        assert_eq!(
            ends(&[b"GET / HTTP/1.1\r\nHost: a\r", b"\n\r", b"\n"]),
            Some(2)
        );
        assert_eq!(
            ends(&[b"G", b"E", b"T / HTTP/1.1\r\n", b"H: v\r\n", b"\r\n"]),
            Some(4)
        );
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nHost: a\r\n"]), None);
        // Header line ends are not the end of the head.
        assert_eq!(
            ends(&[b"GET / HTTP/1.1\r\n", b"A: 1\r\n", b"B: 2\r\n"]),
            None
        );
    }

    #[test]
    fn leading_empty_lines_do_not_end_the_head() {
        assert_eq!(ends(&[b"\r\n\r\n\r\n"]), None);
        assert_eq!(ends(&[b"\r\n", b"\n\n", b"GET / HTTP/1.1\r\n"]), None);
        assert_eq!(ends(&[b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"]), Some(0));
        assert_eq!(ends(&[b"\n\n", b"GET / HTTP/1.1\r\n", b"\r\n"]), Some(2));
    }

    /// The rule byte by byte, as a reference.
    fn naive_end(bytes: &[u8]) -> Option<usize> {
        let (mut started, mut at_line_start) = (false, false);
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'\n' if at_line_start => return Some(i),
                b'\n' => at_line_start = started,
                b'\r' => {}
                _ => (started, at_line_start) = (true, false),
            }
        }
        None
    }

    #[test]
    fn head_end_matches_the_byte_rule_for_any_split() {
        let alphabet = b"\r\n\r\nab: ";
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let len = rng.usize(0..40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let expected = naive_end(&bytes);
            let mut h = HeadEnd::default();
            let mut at = 0;
            let mut found = None;
            while at < bytes.len() {
                let n = rng.usize(1..=bytes.len() - at);
                if let Some(used) = h.feed_end(&bytes[at..at + n]) {
                    found = Some(at..at + n);
                    // The head's length within the read is never under-counted (the size
                    // cap relies on it) and never past the read.
                    let end = naive_end(&bytes).unwrap();
                    assert!(at + used > end && used <= n, "{bytes:?} {at} {used}");
                    break;
                }
                at += n;
            }
            // Reported by the very read that holds the end of the head.
            match (expected, found) {
                (Some(end), Some(chunk)) => assert!(chunk.contains(&end), "{bytes:?} {chunk:?}"),
                (None, None) => {}
                (e, f) => panic!("{bytes:?}: expected {e:?}, reported in {f:?}"),
            }
        }
    }

    #[test]
    fn find_lf_finds_the_first() {
        for len in 0..40 {
            for at in 0..=len {
                let mut v = vec![b'a'; len];
                if at < len {
                    v[at] = b'\n';
                    if at + 3 < len {
                        v[at + 3] = b'\n';
                    }
                }
                let want = (at < len).then_some(at);
                assert_eq!(find_lf(&v), want, "{len} {at}");
            }
        }
    }

    fn pair(deadline: Duration) -> (HeadDeadlineStream, DuplexStream) {
        let (server, client) = tokio::io::duplex(4096);
        (HeadDeadlineStream::new(Box::new(server), deadline), client)
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_head_times_out_with_a_408() {
        let (mut s, mut c) = pair(Duration::from_millis(500));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => {
                        drop(s);
                        return Err(e);
                    }
                }
            }
        });
        c.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let mut result = None;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if reader.is_finished() {
                result = Some(reader.await.unwrap());
                break;
            }
            let _ = c.write_all(b"x").await;
        }
        let err = result.expect("the head deadline fired").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let mut reply = String::new();
        c.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 408 "), "{reply}");
        assert!(reply.contains("x-portico-request-id: "), "{reply}");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_before_the_first_byte_is_not_counted() {
        let (mut s, mut c) = pair(Duration::from_millis(500));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            c.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            c.write_all(b"Host: a\r\n\r\nbody").await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            c.write_all(b"more body").await.unwrap();
            c
        });
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while !got.ends_with(b"more body") {
            let n = s.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert!(!s.is_armed());
        // Re-armed for the next request: idle again is fine, a slow head is not.
        s.arm();
        assert!(s.is_armed());
    }

    #[tokio::test]
    async fn a_head_in_one_read_arms_no_timer() {
        let (mut s, mut c) = pair(Duration::from_millis(500));
        c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(n, 27);
        assert!(matches!(s.head, Head::Done));
    }
}
