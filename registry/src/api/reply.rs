//! How the API answers: JSON with the document's znode version as `ETag: "N"`, and list items
//! `{"id", "etag", "document"}`.

use crate::zk_store::Stat;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{json, Value};

/// `ETag: "N"` for a znode version.
pub fn etag(version: i32) -> String {
    format!("\"{version}\"")
}

/// A JSON response with an optional ETag.
pub fn json_response<T: Serialize>(status: StatusCode, body: &T, stat: Option<&Stat>) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    raw_json_response(status, bytes, stat)
}

/// Already-encoded JSON with an optional ETag.
pub fn raw_json_response(status: StatusCode, bytes: Vec<u8>, stat: Option<&Stat>) -> Response {
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    match stat {
        Some(stat) => with_etag(response, stat.version),
        None => response,
    }
}

/// `response` with `ETag: "version"`.
pub fn with_etag(mut response: Response, version: i32) -> Response {
    if let Ok(v) = HeaderValue::from_str(&etag(version)) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

/// One item of a list response; a stored document that is not JSON is listed with an `error`
/// and its `raw` text.
pub fn list_item(id: &str, stat: &Stat, data: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(data) {
        Ok(document) => json!({"id": id, "etag": stat.version.to_string(), "document": document}),
        Err(e) => json!({
            "id": id,
            "etag": stat.version.to_string(),
            "document": null,
            "error": format!("not valid JSON: {e}"),
            "raw": String::from_utf8_lossy(data),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_quoted_versions() {
        let r = json_response(StatusCode::CREATED, &json!({"a": 1}), None);
        assert!(r.headers().get(header::ETAG).is_none());
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        let r = with_etag(r, 7);
        assert_eq!(r.headers()[header::ETAG], "\"7\"");
    }

    #[test]
    fn list_items_keep_unreadable_documents_visible() {
        let stat = Stat {
            czxid: 1,
            mzxid: 3,
            pzxid: 1,
            ctime: 0,
            mtime: 0,
            version: 2,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 7,
            num_children: 0,
        };
        let ok = list_item("a", &stat, br#"{"x":1}"#);
        assert_eq!(ok, json!({"id": "a", "etag": "2", "document": {"x": 1}}));
        let bad = list_item("b", &stat, b"{oops");
        assert!(bad["document"].is_null());
        assert_eq!(bad["raw"], "{oops");
        assert!(bad["error"].as_str().unwrap().starts_with("not valid JSON"));
    }
}
