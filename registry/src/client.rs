//! A small client of the registry API, used by the `portico` CLI (and handy in tests).

use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::Duration;

/// Talks to one registry with the admin token.
#[derive(Clone)]
pub struct RegistryClient {
    base: String,
    token: Option<String>,
    operator: Option<String>,
    http: reqwest::Client,
}

/// A registry answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The ETag, unquoted (the znode version).
    pub etag: Option<String>,
    /// The JSON body (`Null` when empty or not JSON).
    pub body: Value,
    /// The body as received.
    pub bytes: Vec<u8>,
}

/// A failed call, with a message fit for a person.
#[derive(Debug)]
pub struct ClientError(pub String);

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClientError {}

impl RegistryClient {
    /// `registry` is the registry's base URL (`http://127.0.0.1:9000`); `/api/v1` is added.
    pub fn new(
        registry: &str,
        token: Option<String>,
        operator: Option<String>,
    ) -> Result<RegistryClient, ClientError> {
        let trimmed = registry.trim_end_matches('/');
        let base = if trimmed.ends_with("/api/v1") {
            trimmed.to_owned()
        } else {
            format!("{trimmed}/api/v1")
        };
        reqwest::Url::parse(&base)
            .map_err(|e| ClientError(format!("--registry {registry:?} is not a URL: {e}")))?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ClientError(format!("cannot build an HTTP client: {e}")))?;
        Ok(RegistryClient {
            base,
            token,
            operator,
            http,
        })
    }

    /// The API's base URL (ending in `/api/v1`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (under `/api/v1`) with the token and operator headers.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(op) = &self.operator {
            req = req.header("X-Portico-Operator", op);
        }
        req
    }

    /// Sends and reads the answer; a non-2xx answer becomes an error describing the envelope.
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Result<Answer, ClientError> {
        let answer = self.send_raw(req).await?;
        if answer.status.is_success() {
            Ok(answer)
        } else {
            Err(ClientError(describe_error(&answer)))
        }
    }

    /// Sends and reads the answer whatever its status.
    pub async fn send_raw(&self, req: reqwest::RequestBuilder) -> Result<Answer, ClientError> {
        let resp = req.send().await.map_err(|e| {
            ClientError(format!(
                "cannot reach the registry at {}: {e} (set --registry or PORTICO_REGISTRY)",
                self.base
            ))
        })?;
        let status = resp.status();
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim_matches('"').to_owned());
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| ClientError(format!("reading the registry's answer: {e}")))?
            .to_vec();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            etag,
            body,
            bytes,
        })
    }

    /// `GET path`; a non-2xx answer is an error.
    pub async fn get(&self, path: &str) -> Result<Answer, ClientError> {
        self.send(self.request(Method::GET, path)).await
    }

    /// `POST path` with a JSON body; a non-2xx answer is an error.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Answer, ClientError> {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    /// `PUT path` with a JSON body; a non-2xx answer is an error.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Answer, ClientError> {
        self.send(self.request(Method::PUT, path).json(body)).await
    }
}

/// `error: 409 CONFLICT: <message> (request <id>)` plus one line per detail.
pub fn describe_error(answer: &Answer) -> String {
    let code = answer.body["code"].as_str();
    let message = answer.body["message"].as_str();
    let mut text = match (code, message) {
        (Some(code), Some(message)) => format!("{} {code}: {message}", answer.status.as_u16()),
        _ => format!(
            "{} {}",
            answer.status,
            String::from_utf8_lossy(&answer.bytes).trim()
        ),
    };
    if answer.status == StatusCode::UNAUTHORIZED {
        text.push_str(" (give the admin token with --token or PORTICO_ADMIN_TOKEN)");
    }
    if let Some(id) = answer.body["request_id"].as_str() {
        text.push_str(&format!(" [request {id}]"));
    }
    if let Some(details) = answer.body["details"].as_array() {
        for d in details {
            let place = [d["path"].as_str(), d["field"].as_str()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            text.push_str(&format!(
                "\n  - {place}: {}",
                d["reason"].as_str().unwrap_or("")
            ));
        }
    }
    text
}
