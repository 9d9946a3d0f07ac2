//! Copy-ready code that signs and sends one request, per language: curl (bash + openssl),
//! Python, JavaScript (Node.js), Java and Go. Each is a template in `snippets/` filled with
//! the request (method, the path and query as sent, the body bytes), the gateway's address
//! and the app key; the secret is read from `PORTICO_SECRET` and never written into the
//! code. Each implements the signing of docs/PROTOCOL.md ("Signing a request") itself (the canonical query
//! included), and `PORTICO_TIMESTAMP` / `PORTICO_NONCE` fix the signed values so that a
//! merchant (and the tests) can check it against the guide's worked examples.

use portico_control::sign::canonical_query;
use serde_json::{json, Value};

/// The request a snippet sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The API's id, for the comments.
    pub api_id: String,
    /// Upper-case HTTP method.
    pub method: String,
    /// The path exactly as sent (percent-encoded), without the query.
    pub path: String,
    /// The raw query (without `?`), empty for none.
    pub query: String,
    /// The body exactly as sent (UTF-8 JSON), empty for none.
    pub body: String,
    /// Whether the API wants a signature (`auth: signature`).
    pub signed: bool,
}

impl Request {
    /// The path and query as sent.
    pub fn target(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

/// One language's snippet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// `curl`, `python`, `node`, `java`, `go`.
    pub id: &'static str,
    /// What the portal shows on its tab.
    pub label: &'static str,
    /// The language, as OpenAPI's `x-codeSamples` name it.
    pub lang: &'static str,
    /// A file name to save it as (the Java class is `PorticoCall`).
    pub file: &'static str,
    /// How to run it.
    pub run: &'static str,
    /// The code.
    pub source: String,
}

const CURL: &str = include_str!("snippets/curl.sh");
const PYTHON: &str = include_str!("snippets/python.py");
const NODE: &str = include_str!("snippets/node.mjs");
const JAVA: &str = include_str!("snippets/java.java");
const GO: &str = include_str!("snippets/go.go");

/// Every snippet of `req`, calling `base_url` as `app_key`.
pub fn all(req: &Request, base_url: &str, app_key: &str) -> Vec<Snippet> {
    let common = |template: &str, quote: fn(&str) -> String, truth: (&str, &str)| {
        template
            .replace("{{API_ID}}", &comment_safe(&req.api_id))
            .replace("{{METHOD}}", &req.method)
            .replace("{{PATH}}", &comment_safe(&req.target()))
            .replace("{{BASE_URL}}", &plain_safe(base_url))
            .replace("{{APP_KEY}}", &plain_safe(app_key))
            .replace("{{TARGET}}", &quote(&req.target()))
            .replace("{{BODY}}", &quote(&req.body))
            .replace("{{SIGNED}}", if req.signed { truth.0 } else { truth.1 })
    };
    let curl = CURL
        .replace("{{API_ID}}", &comment_safe(&req.api_id))
        .replace("{{METHOD}}", &req.method)
        .replace("{{PATH}}", &comment_safe(&req.target()))
        .replace("{{BASE_URL}}", &plain_safe(base_url))
        .replace("{{APP_KEY}}", &plain_safe(app_key))
        .replace("{{SH_PATH}}", &sh_single(&req.path))
        .replace("{{SH_QUERY}}", &sh_single(&req.query))
        .replace(
            "{{SH_CANONICAL_QUERY}}",
            &sh_single(&canonical_query(&req.query)),
        )
        .replace("{{SH_BODY}}", &sh_single(&req.body))
        .replace("{{SH_SIGNED}}", if req.signed { "1" } else { "0" });
    vec![
        Snippet {
            id: "curl",
            label: "curl",
            lang: "Shell",
            file: "call.sh",
            run: "PORTICO_APP_KEY=... PORTICO_SECRET=... bash call.sh",
            source: curl,
        },
        Snippet {
            id: "python",
            label: "Python",
            lang: "Python",
            file: "call.py",
            run: "PORTICO_APP_KEY=... PORTICO_SECRET=... python3 call.py",
            source: common(PYTHON, python_str, ("True", "False")),
        },
        Snippet {
            id: "node",
            label: "JavaScript (Node.js)",
            lang: "JavaScript",
            file: "call.mjs",
            run: "PORTICO_APP_KEY=... PORTICO_SECRET=... node call.mjs",
            source: common(NODE, js_str, ("true", "false")),
        },
        Snippet {
            id: "java",
            label: "Java",
            lang: "Java",
            file: "PorticoCall.java",
            run: "PORTICO_APP_KEY=... PORTICO_SECRET=... java PorticoCall.java",
            source: common(JAVA, js_str, ("true", "false")),
        },
        Snippet {
            id: "go",
            label: "Go",
            lang: "Go",
            file: "call.go",
            run: "PORTICO_APP_KEY=... PORTICO_SECRET=... go run call.go",
            source: common(GO, go_str, ("true", "false")),
        },
    ]
}

/// The snippets as OpenAPI's `x-codeSamples` (with the portal's extra fields).
pub fn code_samples(snippets: &[Snippet]) -> Value {
    Value::Array(
        snippets
            .iter()
            .map(|s| {
                json!({
                    "lang": s.lang, "label": s.label, "source": s.source,
                    "x-id": s.id, "x-file": s.file, "x-run": s.run,
                })
            })
            .collect(),
    )
}

/// Text inside a comment: one line, no comment terminators.
fn comment_safe(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
        .replace("*/", "* /")
        .replace("\"\"\"", "'''")
}

/// A value placed inside an existing `"..."` (and a shell `${X:-...}`): printable ASCII
/// without quotes, backslashes, `$`, backticks or braces.
fn plain_safe(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\' | '$' | '`' | '{' | '}'))
        .collect()
}

/// A bash single-quoted string's content (`'` → `'\''`).
fn sh_single(s: &str) -> String {
    s.replace('\'', "'\\''")
}

/// A double-quoted string literal, ASCII only: quotes, backslashes and line ends escaped as
/// every target language writes them, any other character outside printable ASCII by
/// `other` (the language's own escape).
fn quoted(s: &str, other: impl Fn(char, &mut String)) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (' '..='~').contains(&c) => out.push(c),
            c => other(c, &mut out),
        }
    }
    out.push('"');
    out
}

/// A Python string literal, ASCII only.
fn python_str(s: &str) -> String {
    quoted(s, |c, out| {
        let n = c as u32;
        out.push_str(&match n {
            0..=0xff => format!("\\x{n:02x}"),
            0x100..=0xffff => format!("\\u{n:04x}"),
            _ => format!("\\U{n:08x}"),
        });
    })
}

/// A JavaScript or Java string literal, ASCII only (UTF-16 escapes; Java reads `\u` escapes
/// before anything else, so line ends are never written that way).
fn js_str(s: &str) -> String {
    quoted(s, |c, out| {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    })
}

/// A Go interpreted string literal, ASCII only.
fn go_str(s: &str) -> String {
    quoted(s, |c, out| {
        let n = c as u32;
        out.push_str(&match n {
            0..=0xffff => format!("\\u{n:04x}"),
            _ => format!("\\U{n:08x}"),
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_ascii_and_exact() {
        let s = "a\"b\\c\nd\u{e9}\u{1F600}\u{7f}";
        assert_eq!(python_str(s), r#""a\"b\\c\nd\xe9\U0001f600\x7f""#);
        assert_eq!(js_str(s), r#""a\"b\\c\nd\u00e9\ud83d\ude00\u007f""#);
        assert_eq!(go_str(s), r#""a\"b\\c\nd\u00e9\U0001f600\u007f""#);
        assert_eq!(sh_single("it's"), "it'\\''s");
        assert_eq!(plain_safe("http://h:1/${x}\""), "http://h:1/x");
    }

    #[test]
    fn every_placeholder_is_filled() {
        let req = Request {
            api_id: "order.create".into(),
            method: "POST".into(),
            path: "/v1/orders".into(),
            query: "a=1".into(),
            body: r#"{"item":"book","qty":2}"#.into(),
            signed: true,
        };
        for s in all(&req, "http://127.0.0.1:8080", "merchant-1") {
            assert!(!s.source.contains("{{"), "{}: {}", s.id, s.source);
            assert!(s.source.contains("order.create"), "{}", s.id);
        }
    }
}
