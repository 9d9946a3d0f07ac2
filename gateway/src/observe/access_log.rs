//! The JSON access log: one line per request, written by a dedicated thread so that the
//! request path never waits on a disk or a pipe. When the writer falls behind, lines are
//! dropped and counted (`portico_access_log_dropped_total`) rather than slowing traffic.

use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Stdout,
    File(PathBuf),
    Off,
}

impl std::str::FromStr for LogTarget {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "-" | "stdout" => LogTarget::Stdout,
            "off" | "none" => LogTarget::Off,
            path => LogTarget::File(PathBuf::from(path)),
        })
    }
}

/// One access log line.
#[derive(Debug, Serialize)]
pub struct AccessRecord<'a> {
    /// RFC 3339 UTC time the request finished.
    pub ts: String,
    pub plane: &'a str,
    pub request_id: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub api: Option<&'a str>,
    pub app_key: Option<&'a str>,
    pub client: Option<String>,
    pub status: u16,
    /// The envelope code for answers the gateway made, `OK` for backend answers.
    pub code: &'a str,
    pub latency_us: u64,
    pub upstream: Option<&'a str>,
    /// What went wrong, for operators: the backend address, the transport error, ... that
    /// the answer's envelope does not tell (absent when there is nothing to add).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'a str>,
}

/// A handle to the access log writer thread.
#[derive(Clone)]
pub struct AccessLog {
    tx: Option<SyncSender<Vec<u8>>>,
    dropped: prometheus::IntCounter,
}

impl AccessLog {
    /// Starts the writer thread for `target` (nothing for `Off`).
    pub fn start(target: LogTarget, dropped: prometheus::IntCounter) -> std::io::Result<AccessLog> {
        let mut out: Box<dyn Write + Send> = match &target {
            LogTarget::Off => return Ok(AccessLog { tx: None, dropped }),
            LogTarget::Stdout => Box::new(std::io::stdout()),
            LogTarget::File(p) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
        };
        let (tx, rx) = sync_channel::<Vec<u8>>(65_536);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                let mut w = std::io::BufWriter::with_capacity(64 * 1024, &mut out);
                while let Ok(line) = rx.recv() {
                    let _ = w.write_all(&line);
                    // Flush when the queue is drained, so lines appear promptly at low rates.
                    while let Ok(more) = rx.try_recv() {
                        let _ = w.write_all(&more);
                    }
                    let _ = w.flush();
                }
            })?;
        Ok(AccessLog {
            tx: Some(tx),
            dropped,
        })
    }

    /// Whether lines are written at all (`--access-log off` turns it off).
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Queues one record; never blocks.
    pub fn write(&self, record: &AccessRecord<'_>) {
        let Some(tx) = &self.tx else { return };
        let mut line = match serde_json::to_vec(record) {
            Ok(l) => l,
            Err(_) => return,
        };
        line.push(b'\n');
        match tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => self.dropped.inc(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_json_lines_to_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let counter = prometheus::IntCounter::new("x", "x").unwrap();
        let log = AccessLog::start(LogTarget::File(path.clone()), counter).unwrap();
        log.write(&AccessRecord {
            ts: portico_control::clock::now_rfc3339(),
            plane: "live",
            request_id: "r1",
            method: "GET",
            path: "/v1/x",
            api: Some("x.get"),
            app_key: None,
            client: Some("127.0.0.1".into()),
            status: 200,
            code: "OK",
            latency_us: 12,
            upstream: Some("127.0.0.1:1"),
            detail: Some("upstream 127.0.0.1:1 did not answer in time"),
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.ends_with('\n') {
                let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
                assert_eq!(v["request_id"], "r1");
                assert_eq!(v["latency_us"], 12);
                assert_eq!(v["detail"], "upstream 127.0.0.1:1 did not answer in time");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "log line never written"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
