#!/usr/bin/env python3
"""Calls {{API_ID}} ({{METHOD}} {{PATH}}) through a Portico gateway, signed as the signing
guide says (the developer portal's Signing page). Python 3.8+, standard library only.

    PORTICO_APP_KEY=<app key> PORTICO_SECRET=<secret> python3 call.py

PORTICO_BASE_URL overrides the gateway address. PORTICO_TIMESTAMP and PORTICO_NONCE fix the
signed values, to compare with the guide's worked examples (leave them unset otherwise).
"""
import hashlib, hmac, os, secrets, sys, time, urllib.error, urllib.parse, urllib.request

BASE_URL = os.environ.get("PORTICO_BASE_URL", "{{BASE_URL}}")
APP_KEY = os.environ.get("PORTICO_APP_KEY", "{{APP_KEY}}")
SECRET = os.environ.get("PORTICO_SECRET", "")
METHOD = "{{METHOD}}"
TARGET = {{TARGET}}  # the path and query, exactly as sent (percent-encoded)
BODY = {{BODY}}.encode("utf-8")  # the exact bytes sent and signed
SIGNED = {{SIGNED}}  # False: a public API (auth none), no signature needed

KEPT = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"


def enc(raw: bytes) -> str:
    return "".join(chr(b) if b in KEPT else "%%%02X" % b for b in raw)


def canonical_query(query: str) -> str:
    pairs = []
    for part in filter(None, query.split("&")):
        name, _, value = part.partition("=")
        pairs.append((enc(urllib.parse.unquote_to_bytes(name)),  # '+' stays '+'
                      enc(urllib.parse.unquote_to_bytes(value))))
    return "&".join("%s=%s" % p for p in sorted(pairs))


def main() -> int:
    path, _, query = TARGET.partition("?")
    headers = {"Content-Type": "application/json"} if BODY else {}
    if SIGNED:
        if not SECRET:
            sys.exit("set PORTICO_SECRET (and PORTICO_APP_KEY) to your app's secret and key")
        ts = os.environ.get("PORTICO_TIMESTAMP") or str(int(time.time() * 1000))
        nonce = os.environ.get("PORTICO_NONCE") or secrets.token_urlsafe(12)
        string_to_sign = "\n".join([METHOD, path, canonical_query(query), APP_KEY, ts, nonce,
                                    hashlib.sha256(BODY).hexdigest()])
        headers["X-Portico-AppKey"] = APP_KEY
        headers["X-Portico-Timestamp"] = ts
        headers["X-Portico-Nonce"] = nonce
        headers["X-Portico-Signature"] = hmac.new(
            SECRET.encode(), string_to_sign.encode(), hashlib.sha256).hexdigest()
    req = urllib.request.Request(BASE_URL.rstrip("/") + TARGET, data=BODY or None,
                                 method=METHOD, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, answer = resp.status, resp.read()
    except urllib.error.HTTPError as e:  # 4xx/5xx: the error envelope
        status, answer = e.code, e.read()
    print("HTTP %d" % status)
    print(answer.decode("utf-8", "replace"))
    return 0 if status < 400 else 1


if __name__ == "__main__":
    sys.exit(main())
