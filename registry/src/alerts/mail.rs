//! Email through an SMTP server (`--smtp smtp://host[:port]`, `--smtp-from ADDRESS`): alert
//! notifications to `email` receivers, and the owners' reports ([`crate::reports`]).
//!
//! Plain SMTP only (no TLS, no authentication): point it at a relay on the registry's host or
//! network (a local Postfix, the platform's mail gateway) that forwards to the world
//! (docs/operations/history-and-reports.md, "Reports").

use lettre::message::header::ContentType;
use lettre::message::{Mailbox, MultiPart, SinglePart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::time::Duration;

/// The deadline of one message's delivery to the server.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// A configured SMTP server and sender.
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    server: String,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer")
            .field("server", &self.server)
            .field("from", &self.from.to_string())
            .finish()
    }
}

/// `smtp://host[:port]` → (host, port); port 25 by default.
pub fn parse_smtp_url(url: &str) -> Result<(String, u16), String> {
    let rest = url.strip_prefix("smtp://").ok_or_else(|| {
        format!("--smtp {url:?}: must be smtp://host[:port] (plain SMTP to a relay; TLS is not supported)")
    })?;
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains(['/', '@', '?']) {
        return Err(format!("--smtp {url:?}: must be smtp://host[:port]"));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            let port = p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("--smtp {url:?}: bad port {p:?}"))?;
            (h, port)
        }
        _ => (rest, 25),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("--smtp {url:?}: no host"));
    }
    Ok((host.to_owned(), port))
}

impl Mailer {
    /// A mailer sending through `url` (`smtp://host[:port]`) as `from`.
    pub fn new(url: &str, from: &str) -> Result<Mailer, String> {
        let (host, port) = parse_smtp_url(url)?;
        let from: Mailbox = from
            .parse()
            .map_err(|e| format!("--smtp-from {from:?}: not an address: {e}"))?;
        let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.clone())
            .port(port)
            .timeout(Some(SEND_TIMEOUT))
            .build();
        Ok(Mailer {
            transport,
            from,
            server: format!("{host}:{port}"),
        })
    }

    /// The server, `host:port`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Sends one message to `to`: `text`, with `html` as its alternative when given.
    pub async fn send(
        &self,
        to: &str,
        subject: &str,
        text: String,
        html: Option<String>,
    ) -> Result<(), String> {
        let to: Mailbox = to
            .parse()
            .map_err(|e| format!("{to:?} is not an address: {e}"))?;
        let builder = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject);
        let message = match html {
            Some(html) => builder.multipart(MultiPart::alternative_plain_html(text, html)),
            None => builder.singlepart(
                SinglePart::builder()
                    .header(ContentType::TEXT_PLAIN)
                    .body(text),
            ),
        }
        .map_err(|e| format!("cannot build the message: {e}"))?;
        self.transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| format!("SMTP {}: {e}", self.server))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls() {
        assert_eq!(
            parse_smtp_url("smtp://127.0.0.1:2525").unwrap(),
            ("127.0.0.1".to_owned(), 2525)
        );
        assert_eq!(
            parse_smtp_url("smtp://mail.example.com").unwrap(),
            ("mail.example.com".to_owned(), 25)
        );
        assert_eq!(
            parse_smtp_url("smtp://[::1]:26").unwrap(),
            ("::1".to_owned(), 26)
        );
        for bad in [
            "smtps://x:465",
            "http://x",
            "smtp://",
            "smtp://u:p@x",
            "smtp://x:0",
            "smtp://x:y",
        ] {
            assert!(parse_smtp_url(bad).is_err(), "{bad}");
        }
        assert!(Mailer::new("smtp://127.0.0.1:25", "not an address").is_err());
        let m = Mailer::new("smtp://127.0.0.1:25", "Portico <portico@example.com>").unwrap();
        assert_eq!(m.server(), "127.0.0.1:25");
    }
}
