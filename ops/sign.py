#!/usr/bin/env python3
"""Sign (and send) a Portico request, per the signing contract (docs/PROTOCOL.md).

Standard library only. Examples:

    python3 ops/sign.py --key merchant-1 --secret s3cr3t-value GET http://127.0.0.1:8080/v1/orders/42
    python3 ops/sign.py --key merchant-1 --secret s3cr3t-value --body '{"item":"book","qty":2}' \
        POST http://127.0.0.1:8080/v1/orders
    python3 ops/sign.py ... --curl GET URL        # print a curl command instead of sending
    python3 ops/sign.py --self-test               # check the contract's test vectors

Sending prints the status line, the X-Portico-* and Retry-After response headers, then the
body; the exit status is 0 for a 2xx answer, 1 otherwise.
"""

import argparse
import hashlib
import hmac
import secrets
import shlex
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")


def encode(raw: bytes) -> str:
    """Keep A-Z a-z 0-9 - _ . ~, write every other byte as %XX (upper-case hex)."""
    return "".join(chr(b) if b in UNRESERVED else "%%%02X" % b for b in raw)


def canonical_query(raw_query: str) -> str:
    """Step 3 of the string-to-sign: decode, re-encode, sort, join."""
    pairs = []
    for part in raw_query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        # unquote_to_bytes decodes %XX only: '+' stays '+'.
        pairs.append(
            (
                encode(urllib.parse.unquote_to_bytes(name)),
                encode(urllib.parse.unquote_to_bytes(value)),
            )
        )
    pairs.sort()
    return "&".join("%s=%s" % p for p in pairs)


def string_to_sign(method, path, raw_query, app_key, timestamp, nonce, body: bytes) -> str:
    return "\n".join(
        [
            method.upper(),
            path,
            canonical_query(raw_query),
            app_key,
            str(timestamp),
            nonce,
            hashlib.sha256(body).hexdigest(),
        ]
    )


# The first line of a callback's string-to-sign (docs/PROTOCOL.md, "Callbacks"): a callback
# is signed over it and then the request's seven lines, so it never verifies as a request.
CALLBACK_DOMAIN = "PORTICO-CALLBACK-v1"


def callback_string_to_sign(path, raw_query, app_key, timestamp, nonce, body: bytes) -> str:
    """The string-to-sign of a callback POST the gateway sent to path?raw_query."""
    return CALLBACK_DOMAIN + "\n" + string_to_sign(
        "POST", path, raw_query, app_key, timestamp, nonce, body
    )


def verify_callback(secret: str, raw_target: str, headers, body: bytes) -> bool:
    """Whether a received callback's X-Portico-Signature is the gateway's (signature only:
    also check the timestamp's window and the nonce's novelty, docs/PROTOCOL.md)."""
    path, _, query = raw_target.partition("?")
    sts = callback_string_to_sign(
        path,
        query,
        headers.get("X-Portico-AppKey", ""),
        headers.get("X-Portico-Timestamp", ""),
        headers.get("X-Portico-Nonce", ""),
        body,
    )
    return hmac.compare_digest(signature(secret, sts), headers.get("X-Portico-Signature", ""))


def signature(secret: str, sts: str) -> str:
    return hmac.new(secret.encode(), sts.encode(), hashlib.sha256).hexdigest()


def signed_headers(method, url, app_key, secret, body: bytes, timestamp=None, nonce=None):
    """The four X-Portico-* headers for a call to `url` (path and query taken as written)."""
    parts = urllib.parse.urlsplit(url)
    timestamp = str(timestamp if timestamp is not None else int(time.time() * 1000))
    nonce = nonce or secrets.token_urlsafe(12)
    sts = string_to_sign(method, parts.path or "/", parts.query, app_key, timestamp, nonce, body)
    return sts, {
        "X-Portico-AppKey": app_key,
        "X-Portico-Timestamp": timestamp,
        "X-Portico-Nonce": nonce,
        "X-Portico-Signature": signature(secret, sts),
    }


def self_test() -> int:
    key, secret, ts = "merchant-1", "s3cr3t-value", "1796000000000"
    cases = [
        (
            "GET",
            "/v1/orders/42?b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93",
            "n0nce-0001",
            b"",
            "GET\n/v1/orders/42\na=%2F&a=hello%20world&b=2&c=x%2By&d=%E2%9C%93\nmerchant-1\n"
            "1796000000000\nn0nce-0001\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73",
        ),
        (
            "POST",
            "/v1/orders",
            "n0nce-0002",
            b'{"item":"book","qty":2}',
            "POST\n/v1/orders\n\nmerchant-1\n1796000000000\nn0nce-0002\n"
            "6383114cff22e5f82e81e96fbe30c7239424b9ed893e27fea7eb67532aa03fb9",
            "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107",
        ),
    ]
    failed = 0
    for method, target, nonce, body, want_sts, want_sig in cases:
        sts, headers = signed_headers(method, target, key, secret, body, ts, nonce)
        ok = sts == want_sts and headers["X-Portico-Signature"] == want_sig
        failed += not ok
        print("%s %s %s" % ("ok  " if ok else "FAIL", method, target))
        if not ok:
            print("  string-to-sign: %r\n  signature: %s" % (sts, headers["X-Portico-Signature"]))
    # The callback vector: signed in its own domain, never valid as the same request.
    body = (
        b'{"id":"1796000000000-0","topic":"orders","published_at":"2026-11-30T00:53:20Z",'
        b'"payload":{"order_id":"1001","state":"paid"}}'
    )
    cb_sts = callback_string_to_sign(
        "/hooks/portico", "shop=7", key, ts, "cb0123456789abcdef", body
    )
    cb_sig = signature(secret, cb_sts)
    want = "cff5413a59f1ff12680e8afab43fce035f3a11a53afdf3a75415389897772714"
    headers = {
        "X-Portico-AppKey": key,
        "X-Portico-Timestamp": ts,
        "X-Portico-Nonce": "cb0123456789abcdef",
        "X-Portico-Signature": cb_sig,
    }
    as_request = string_to_sign(
        "POST", "/hooks/portico", "shop=7", key, ts, "cb0123456789abcdef", body
    )
    ok = (
        cb_sig == want
        and verify_callback(secret, "/hooks/portico?shop=7", headers, body)
        and signature(secret, as_request) != cb_sig
    )
    failed += not ok
    print("%s callback POST /hooks/portico?shop=7" % ("ok  " if ok else "FAIL"))
    if not ok:
        print("  string-to-sign: %r\n  signature: %s" % (cb_sts, cb_sig))
    print("sign.py self-test: %d passed, %d failed" % (len(cases) + 1 - failed, failed))
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description="Sign and send a Portico request.")
    p.add_argument("--key", help="app key (X-Portico-AppKey)")
    p.add_argument("--secret", help="app secret")
    p.add_argument("--body", help="request body (sent as application/json)")
    p.add_argument("--timestamp", help="epoch milliseconds (default: now)")
    p.add_argument("--nonce", help="nonce (default: random)")
    p.add_argument("-H", "--header", action="append", default=[], help="extra header 'Name: value'")
    p.add_argument("--curl", action="store_true", help="print a curl command instead of sending")
    p.add_argument("-v", "--verbose", action="store_true", help="print the string-to-sign on stderr")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    p.add_argument("--self-test", action="store_true", help="check the contract's test vectors")
    p.add_argument("method", nargs="?")
    p.add_argument("url", nargs="?")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not (a.key and a.secret and a.method and a.url):
        p.error("--key, --secret, METHOD and URL are required")

    method = a.method.upper()
    body = a.body.encode() if a.body is not None else b""
    sts, headers = signed_headers(method, a.url, a.key, a.secret, body, a.timestamp, a.nonce)
    if a.verbose:
        print("string-to-sign:\n" + sts, file=sys.stderr)
    if a.body is not None:
        headers["Content-Type"] = "application/json"
    for h in a.header:
        name, _, value = h.partition(":")
        headers[name.strip()] = value.strip()

    if a.curl:
        cmd = ["curl", "-sS", "-i", "-X", method]
        for name, value in headers.items():
            cmd += ["-H", "%s: %s" % (name, value)]
        if a.body is not None:
            cmd += ["--data-binary", a.body]
        cmd.append(a.url)
        print(" ".join(shlex.quote(c) for c in cmd))
        return 0

    req = urllib.request.Request(a.url, data=body if a.body is not None else None, method=method)
    for name, value in headers.items():
        req.add_header(name, value)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        resp = opener.open(req, timeout=a.timeout)
        status, reason, resp_headers, payload = resp.status, resp.reason, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        status, reason, resp_headers, payload = e.code, e.reason, e.headers, e.read()
    print("HTTP %d %s" % (status, reason))
    for name, value in resp_headers.items():
        if name.lower().startswith("x-portico-") or name.lower() in ("retry-after", "content-type"):
            print("%s: %s" % (name, value))
    print()
    sys.stdout.write(payload.decode("utf-8", "replace"))
    if payload and not payload.endswith(b"\n"):
        print()
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
