//! Time limits armed only when they can matter: [`within`] polls the work once first, and
//! starts a timer only if it has to wait. Writing an answer to a socket with room, or reading
//! a body that arrived with the head, is done at the first poll, and a tokio timer (a clock
//! read, an entry in the timer wheel and its removal) would be pure cost there
//! (benches/RESULTS.md, "Instructions per request").

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

/// The default total deadline for reading a request head, from its first byte (the
/// listener's, `listener.rs`; an HTTP/2 client's preface and SETTINGS too, `listener/h2.rs`).
pub const DEFAULT_HEAD_DEADLINE: Duration = Duration::from_secs(10);

/// Runs `work` for at most `limit`, counted from its first wait; `None` if it did not finish
/// in time (the work is then dropped).
pub async fn within<F: Future>(limit: Duration, work: F) -> Option<F::Output> {
    let mut work = pin!(work);
    let first = std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(done) => Some(done),
        Poll::Pending => tokio::time::timeout(limit, work).await.ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ready_work_needs_no_timer_and_waiting_work_is_bounded() {
        assert_eq!(within(Duration::ZERO, async { 7 }).await, Some(7));
        let slow = tokio::time::sleep(Duration::from_secs(10));
        assert_eq!(within(Duration::from_secs(1), slow).await, None);
        let fast = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            8
        };
        assert_eq!(within(Duration::from_secs(1), fast).await, Some(8));
    }
}
