//! The console: the built admin UI (`admin-ui/dist`, made by `npm run build`, which
//! `./ops/up.sh` and `./ops/test.sh` run) served at `/`.
//!
//! Where the files are, first match wins:
//! 1. the directory given to [`set_dir`] (`portico-registry --console-dir DIR`);
//! 2. `$PORTICO_CONSOLE_DIR`;
//! 3. `admin-ui/dist` of the source tree the registry was built from (`CARGO_MANIFEST_DIR/..`);
//! 4. `admin-ui/dist` next to the executable or up to three levels above it (so
//!    `target/debug/portico-registry` of a checkout finds the checkout's), or
//!    `<exe dir>/../share/portico/console` for an installed layout.
//!
//! A path that names a file of the directory is that file (hashed `/assets/*` cached for a
//! year, everything else revalidated); a missing static file (`.js`, `.css`, ...) is a 404 and
//! any other path is the SPA's `index.html`, so a deep link such as `/switches` or a reload
//! works; `/api/...` paths that no
//! route matched keep the API's `ROUTE_NOT_FOUND` envelope. Without a built console, `/` is a
//! page that says how to build it.

use crate::error::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static CONSOLE_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Sets the console directory (`--console-dir`). Only the first call has an effect; returns
/// whether it was this one.
pub fn set_dir(dir: PathBuf) -> bool {
    CONSOLE_DIR.set(dir).is_ok()
}

/// The directories looked at, in order (see the module docs).
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = CONSOLE_DIR.get() {
        out.push(dir.clone());
        // An explicit choice is the only one.
        return out;
    }
    if let Some(dir) = std::env::var_os("PORTICO_CONSOLE_DIR").filter(|d| !d.is_empty()) {
        out.push(PathBuf::from(dir));
        return out;
    }
    out.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../admin-ui/dist"));
    if let Ok(exe) = std::env::current_exe() {
        let mut dir = exe.parent().map(Path::to_path_buf);
        if let Some(d) = &dir {
            out.push(d.join("../share/portico/console"));
        }
        for _ in 0..4 {
            let Some(d) = dir else { break };
            out.push(d.join("admin-ui/dist"));
            dir = d.parent().map(Path::to_path_buf);
        }
    }
    out
}

/// The console directory in use: the first candidate holding an `index.html`.
pub fn dir() -> Option<PathBuf> {
    candidates()
        .into_iter()
        .find(|d| d.join("index.html").is_file())
        .map(|d| d.canonicalize().unwrap_or(d))
}

/// The router's fallback: `/api/...` → `ROUTE_NOT_FOUND`; anything else → the console.
pub async fn fallback(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    if path == "/api" || path.starts_with("/api/") {
        return ApiError::new(StatusCode::NOT_FOUND, "ROUTE_NOT_FOUND", "no such route")
            .into_response();
    }
    if method != Method::GET && method != Method::HEAD {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            "the console is read with GET",
        )
        .into_response();
    }
    let Some(root) = dir() else {
        return not_built();
    };
    serve(&root, path, method == Method::HEAD).await
}

/// Serves `path` from `root` (see the module docs).
pub async fn serve(root: &Path, path: &str, head: bool) -> Response {
    let Some(rel) = safe_relative(path) else {
        return ApiError::bad_request("the path is not a valid console path").into_response();
    };
    if !rel.as_os_str().is_empty() {
        let file = root.join(&rel);
        if let Ok(bytes) = tokio::fs::read(&file).await {
            let immutable = rel.starts_with("assets");
            return file_response(&file, bytes, immutable, head);
        }
        // A missing static file (a stale asset, a typo) is a 404, not the app; a route of the
        // app may have a dot (`/apis/order.get`).
        if content_type(&rel) != "application/octet-stream" {
            return ApiError::not_found(format!("console file {path:?} does not exist"))
                .into_response();
        }
    }
    let index = root.join("index.html");
    match tokio::fs::read(&index).await {
        Ok(bytes) => file_response(&index, bytes, false, head),
        Err(_) => not_built(),
    }
}

/// The request path as a relative path inside the console directory: percent-decoded,
/// without empty, `.` or `..` segments, hidden files or backslashes. `None` if it has any.
fn safe_relative(path: &str) -> Option<PathBuf> {
    let decoded: Vec<u8> = percent_decode(path)?;
    let decoded = String::from_utf8(decoded).ok()?;
    let mut rel = PathBuf::new();
    for seg in decoded.split('/') {
        if seg.is_empty() {
            continue;
        }
        if seg.starts_with('.') || seg.contains('\\') || seg.contains('\0') {
            return None;
        }
        rel.push(seg);
    }
    Some(rel)
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Headers that keep the console from being framed or sniffed, and confine what it loads.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
                   base-uri 'none'; form-action 'self'";

fn secure(response: &mut Response) {
    let h = response.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
}

fn file_response(file: &Path, bytes: Vec<u8>, immutable: bool, head: bool) -> Response {
    let len = bytes.len();
    let body = if head {
        Body::empty()
    } else {
        Body::from(bytes)
    };
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(file)),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if immutable {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    secure(&mut response);
    response
}

/// The page shown at `/` when there is no built console.
fn not_built() -> Response {
    let looked: String = candidates()
        .iter()
        .map(|d| {
            format!(
                "<li><code>{}</code></li>",
                html_escape(&d.display().to_string())
            )
        })
        .collect();
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Portico console not built</title>\
         <style>body{{font:15px/1.5 system-ui,sans-serif;max-width:44rem;margin:4rem auto;\
         padding:0 1rem;color:#1d2433}}code{{background:#eef1f6;padding:.1rem .3rem;\
         border-radius:4px}}h1{{font-size:1.4rem}}</style></head><body>\
         <h1>console not built: run ./ops/up.sh</h1>\
         <p>The registry serves the admin console from <code>admin-ui/dist</code>, which \
         <code>./ops/up.sh</code> builds (or, by hand: <code>cd admin-ui &amp;&amp; npm ci \
         &amp;&amp; npm run build</code>). Point the registry at another build with \
         <code>--console-dir DIR</code> or <code>PORTICO_CONSOLE_DIR</code>.</p>\
         <p>Looked for <code>index.html</code> in:</p><ul>{looked}</ul>\
         <p>The admin API itself is up: <a href=\"/api/v1/openapi.json\">/api/v1/openapi.json</a>.</p>\
         </body></html>"
    );
    not_built_page(page, "x-portico-console")
}

/// A "not built" page (`html`), for the console and the developer portal: 200, not 503 (the
/// registry itself is healthy, and this is a page for a person), never cached (the build may
/// come any moment), with the pages' security headers and `<marker>: not-built` for scripts.
pub fn not_built_page(html: String, marker: &'static str) -> Response {
    let mut response = (StatusCode::OK, html).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(marker, HeaderValue::from_static("not-built"));
    secure(&mut response);
    response
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    #[test]
    fn relative_paths_are_confined() {
        assert_eq!(safe_relative("/").unwrap(), PathBuf::new());
        assert_eq!(
            safe_relative("/assets/index-abc.js").unwrap(),
            PathBuf::from("assets/index-abc.js")
        );
        assert_eq!(safe_relative("//a//b").unwrap(), PathBuf::from("a/b"));
        assert!(safe_relative("/../etc/passwd").is_none());
        assert!(safe_relative("/%2e%2e/etc/passwd").is_none());
        assert!(safe_relative("/a/%2E%2E/b").is_none());
        assert!(safe_relative("/.env").is_none());
        assert!(safe_relative("/a\\b").is_none());
        assert!(safe_relative("/a%5c..").is_none());
        assert!(safe_relative("/a%zz").is_none());
        assert!(safe_relative("/a%00").is_none());
    }

    async fn body_text(r: Response) -> String {
        let bytes = to_bytes(r.into_body(), 1 << 20).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn files_spa_fallback_and_missing_assets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "<html>app</html>").unwrap();
        std::fs::create_dir(dir.path().join("assets")).unwrap();
        std::fs::write(dir.path().join("assets/app-1.js"), "console.log(1)").unwrap();

        let r = serve(dir.path(), "/assets/app-1.js", false).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript"));
        assert!(r.headers()[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable"));
        assert_eq!(body_text(r).await, "console.log(1)");

        for deep in ["/", "/switches", "/apis/order.get"] {
            let r = serve(dir.path(), deep, false).await;
            assert_eq!(r.status(), StatusCode::OK, "{deep}");
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-cache");
            assert!(r.headers().contains_key(header::CONTENT_SECURITY_POLICY));
            assert_eq!(body_text(r).await, "<html>app</html>");
        }
        // A missing asset is a 404, not the app.
        let r = serve(dir.path(), "/assets/gone-2.js", false).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let r = serve(dir.path(), "/../secret", false).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let r = serve(dir.path(), "/", true).await;
        assert_eq!(r.headers()[header::CONTENT_LENGTH], "16");
        assert_eq!(body_text(r).await, "");
    }

    #[tokio::test]
    async fn missing_console_says_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let r = serve(dir.path(), "/", false).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["x-portico-console"], "not-built");
        assert!(body_text(r)
            .await
            .contains("console not built: run ./ops/up.sh"));
    }

    #[tokio::test]
    async fn api_paths_keep_the_envelope() {
        let r = fallback(Method::GET, Uri::from_static("/api/v1/nope")).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let r = fallback(Method::POST, Uri::from_static("/switches")).await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
