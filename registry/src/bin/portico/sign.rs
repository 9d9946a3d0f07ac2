//! The merchant side: `portico sign` prints the signature headers of a request, `portico call`
//! sends a signed request to a gateway (docs/PROTOCOL.md, "Signing a request").

use crate::args::{parse_header, parse_method, CallArgs, SignArgs};
use portico_control::sign::sign_request;
use std::io::Write as _;
use std::process::ExitCode;

/// A random nonce: 24 hex digits.
fn random_nonce() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = fastrand::u128(..).to_le_bytes()[..12]
            .try_into()
            .unwrap_or([7; 12]);
    }
    hex::encode(bytes)
}

/// The path and raw query of a URL (or of a bare `/path?query`), as a client will send them.
pub(crate) fn path_and_query(url: &str) -> Result<(String, Option<String>), String> {
    let full = if url.starts_with('/') {
        format!("http://localhost{url}")
    } else {
        url.to_owned()
    };
    let parsed = reqwest::Url::parse(&full).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    Ok((parsed.path().to_owned(), parsed.query().map(str::to_owned)))
}

/// `portico sign`: the four headers (and, with `-v`, the string-to-sign on stderr).
pub(crate) fn sign(args: &SignArgs) -> Result<ExitCode, String> {
    let body = args.body.bytes()?;
    let (path, query) = path_and_query(&args.url)?;
    let nonce = args.nonce.clone().unwrap_or_else(random_nonce);
    if !portico_control::sign::valid_nonce(&nonce) {
        return Err(format!(
            "--nonce {nonce:?}: must be 8-64 of A-Z a-z 0-9 _ -"
        ));
    }
    let signed = sign_request(
        args.credentials.secret.as_bytes(),
        &args.method.to_ascii_uppercase(),
        &path,
        query.as_deref(),
        &args.credentials.key,
        args.timestamp
            .unwrap_or_else(portico_control::clock::now_ms),
        &nonce,
        &body,
    );
    if args.verbose {
        eprintln!("string-to-sign:\n{}\n", signed.string_to_sign);
    }
    for (name, value) in signed.pairs() {
        println!("{name}: {value}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `portico call`: sends the request (signed unless `--unsigned`), prints the status (and with
/// `-i` the headers) and the body.
pub(crate) async fn call(args: &CallArgs) -> Result<ExitCode, String> {
    let method = parse_method(&args.method)?;
    let body = args.body.bytes()?;
    let url = reqwest::Url::parse(&args.url).map_err(|e| {
        format!(
            "{:?} is not a URL: {e} (give the full gateway URL)",
            args.url
        )
    })?;
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| e.to_string())?;
    let mut req = http.request(method.clone(), url.clone());
    if !args.unsigned {
        let signed = sign_request(
            args.credentials.secret.as_bytes(),
            method.as_str(),
            url.path(),
            url.query(),
            &args.credentials.key,
            portico_control::clock::now_ms(),
            &random_nonce(),
            &body,
        );
        for (name, value) in signed.pairs() {
            req = req.header(name, value);
        }
    }
    if !body.is_empty() {
        let looks_json = body.first().is_some_and(|b| *b == b'{' || *b == b'[');
        let has_content_type = args
            .headers
            .iter()
            .any(|h| h.to_ascii_lowercase().starts_with("content-type"));
        if looks_json && !has_content_type {
            req = req.header("Content-Type", "application/json");
        }
        req = req.body(body);
    }
    for h in &args.headers {
        let (n, v) = parse_header(h)?;
        req = req.header(n, v);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    print_response(resp, args.include, args.fail).await
}

/// Prints `HTTP <status>`, the headers if asked, and the body; fails on a 4xx/5xx if asked.
async fn print_response(
    resp: reqwest::Response,
    include: bool,
    fail: bool,
) -> Result<ExitCode, String> {
    let status = resp.status();
    println!("HTTP {status}");
    if include {
        for (name, value) in resp.headers() {
            println!("{name}: {}", value.to_str().unwrap_or("<binary>"));
        }
        println!();
    }
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    let mut out = std::io::stdout();
    out.write_all(&bytes).map_err(|e| e.to_string())?;
    if !bytes.ends_with(b"\n") {
        let _ = out.write_all(b"\n");
    }
    Ok(if fail && status.as_u16() >= 400 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_as_sent() {
        assert_eq!(
            path_and_query("http://h:8080/v1/orders/42?b=2&a=1").unwrap(),
            ("/v1/orders/42".to_owned(), Some("b=2&a=1".to_owned()))
        );
        assert_eq!(
            path_and_query("/v1/orders").unwrap(),
            ("/v1/orders".to_owned(), None)
        );
    }

    #[test]
    fn nonces_are_valid() {
        let (a, b) = (random_nonce(), random_nonce());
        assert_ne!(a, b);
        assert!(portico_control::sign::valid_nonce(&a), "{a}");
    }
}
