#!/usr/bin/env python3
"""Checks that docs/PROTOCOL.md stays true: its worked examples (string-to-sign and
signature) are what ops/sign.py computes, and its Python snippet signs the same way.
Run by ops/test.sh."""

import hashlib
import hmac
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "ops"))
sys.dont_write_bytecode = True
import sign  # noqa: E402

KEY, SECRET, TS = "merchant-1", "s3cr3t-value", "1796000000000"
EXAMPLES = [
    ("GET", "/v1/orders/42?b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93", "n0nce-0001", b""),
    ("POST", "/v1/orders", "n0nce-0002", b'{"item":"book","qty":2}'),
]


def main() -> int:
    doc = open(os.path.join(ROOT, "docs", "PROTOCOL.md"), encoding="utf-8").read()
    problems = []

    # The worked examples: each string-to-sign appears as a code block, and its signature.
    blocks = re.findall(r"```\n(.*?)\n```", doc, re.S)
    for method, target, nonce, body in EXAMPLES:
        sts, headers = sign.signed_headers(method, target, KEY, SECRET, body, TS, nonce)
        if sts not in blocks:
            problems.append("no code block with the string-to-sign of %s %s" % (method, target))
        if headers["X-Portico-Signature"] not in doc:
            problems.append("signature of %s %s missing" % (method, target))

    # The Python snippet: its canonical_query and signing agree with sign.py.
    m = re.search(r"```python\n(.*?)```", doc, re.S)
    if not m:
        problems.append("no python snippet")
    else:
        code = m.group(1).split("\nprint(call(")[0]
        ns = {}
        exec(code, ns)  # defines functions only
        for method, target, nonce, body in EXAMPLES:
            query = target.partition("?")[2]
            if ns["canonical_query"](query) != sign.canonical_query(query):
                problems.append("snippet canonical_query differs for %r" % query)
        raw = "a=%zz&+=x y&&b=%2f&B=1&~=."
        if ns["canonical_query"](raw) != sign.canonical_query(raw):
            problems.append("snippet canonical_query differs for %r" % raw)
        sts = "\n".join(["GET", "/v1/orders/42", ns["canonical_query"](EXAMPLES[0][1].partition("?")[2]),
                         KEY, TS, "n0nce-0001", hashlib.sha256(b"").hexdigest()])
        sig = hmac.new(SECRET.encode(), sts.encode(), hashlib.sha256).hexdigest()
        if sig != "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73":
            problems.append("snippet signs vector 1 as %s" % sig)

    # The callback example: its string-to-sign and signature are what sign.py computes.
    cb_body = (
        b'{"id":"1796000000000-0","topic":"orders","published_at":"2026-11-30T00:53:20Z",'
        b'"payload":{"order_id":"1001","state":"paid"}}'
    )
    cb_sts = sign.callback_string_to_sign(
        "/hooks/portico", "shop=7", KEY, TS, "cb0123456789abcdef", cb_body
    )
    if ("```\n%s\n```" % cb_sts) not in doc:
        problems.append("no code block with the callback example's string-to-sign")
    if sign.signature(SECRET, cb_sts) not in doc:
        problems.append("the callback example's signature is missing")

    for p in problems:
        print("docs/PROTOCOL.md: " + p)
    print("check_docs: %s" % ("ok" if not problems else "%d problems" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
