#!/usr/bin/env python3
"""A Portico notification client (docs/PROTOCOL.md, "Notifications"), standard library only.

Holds a signed Server-Sent Events stream, prints each event as one JSON line, acknowledges
what it handled, and reconnects with Last-Event-ID (to any gateway) after a drop:

    python3 notify_client.py --gateway http://127.0.0.1:8080 --app merchant-1 --secret s3cr3t-value

`verify_callback(...)` checks a callback POST the gateway sent to your callback_url.
"""

import argparse
import hashlib
import hmac
import http.client
import json
import secrets
import sys
import time
import urllib.parse

KEPT = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"
MAX_SKEW_MS = 300_000


def enc(raw: bytes) -> str:
    return "".join(chr(b) if b in KEPT else "%%%02X" % b for b in raw)


def canonical_query(query: str) -> str:
    pairs = []
    for part in filter(None, query.split("&")):
        name, _, value = part.partition("=")
        pairs.append((enc(urllib.parse.unquote_to_bytes(name)),   # '+' stays '+'
                      enc(urllib.parse.unquote_to_bytes(value))))
    return "&".join("%s=%s" % p for p in sorted(pairs))


def string_to_sign(method, path, query, app_key, ts, nonce, body: bytes) -> str:
    return "\n".join([method, path, canonical_query(query or ""), app_key, ts, nonce,
                      hashlib.sha256(body).hexdigest()])


def sign_headers(method, path, app_key, secret, body=b"", query=""):
    ts, nonce = str(int(time.time() * 1000)), secrets.token_urlsafe(12)
    sts = string_to_sign(method, path, query, app_key, ts, nonce, body)
    sig = hmac.new(secret.encode(), sts.encode(), hashlib.sha256).hexdigest()
    return {"X-Portico-AppKey": app_key, "X-Portico-Timestamp": ts,
            "X-Portico-Nonce": nonce, "X-Portico-Signature": sig}


CALLBACK_DOMAIN = "PORTICO-CALLBACK-v1"


def verify_callback(method, raw_target, headers, body: bytes, secret, seen_nonces) -> bool:
    """True if a callback POST is genuine: the signature of the request as received, a
    timestamp within 300 s, a nonce not seen before (seen_nonces: a dict nonce -> expiry ms
    you keep for 300 s). headers: a case-insensitive mapping (e.g. http.server's)."""
    app_key = headers.get("X-Portico-AppKey", "")
    ts = headers.get("X-Portico-Timestamp", "")
    nonce = headers.get("X-Portico-Nonce", "")
    sig = headers.get("X-Portico-Signature", "")
    if not (app_key and ts.isdigit() and nonce and sig):
        return False
    now = int(time.time() * 1000)
    if abs(now - int(ts)) > MAX_SKEW_MS:
        return False
    path, _, query = raw_target.partition("?")
    # A callback's string-to-sign starts with its own line, so that a callback can never be
    # presented to the gateway as one of your requests (docs/PROTOCOL.md, "Callbacks").
    sts = CALLBACK_DOMAIN + "\n" + string_to_sign(method, path, query, app_key, ts, nonce, body)
    want = hmac.new(secret.encode(), sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, sig):
        return False
    for n, until in list(seen_nonces.items()):
        if until < now:
            del seen_nonces[n]
    if nonce in seen_nonces:
        return False
    seen_nonces[nonce] = now + 2 * MAX_SKEW_MS
    return True


class Client:
    def __init__(self, gateway, app_key, secret):
        u = urllib.parse.urlsplit(gateway)
        self.https = u.scheme == "https"
        self.host = u.netloc
        self.app_key, self.secret = app_key, secret
        self.last_acked = None

    def _conn(self, timeout):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, timeout=timeout)

    def ack(self, ids):
        body = json.dumps({"ids": ids}, separators=(",", ":")).encode()
        headers = sign_headers("POST", "/notify/v1/ack", self.app_key, self.secret, body)
        headers["Content-Type"] = "application/json"
        conn = self._conn(30)
        try:
            conn.request("POST", "/notify/v1/ack", body=body, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200:
                raise RuntimeError("ack refused: %d %s" % (resp.status, answer.decode()))
        finally:
            conn.close()
        self.last_acked = ids[-1]

    def stream(self):
        """Yields ("event", dict) and ("close", dict) until the connection ends. A silent
        connection (no heartbeat for 45 s) raises socket.timeout."""
        headers = sign_headers("GET", "/notify/v1/stream", self.app_key, self.secret)
        if self.last_acked:
            headers["Last-Event-ID"] = self.last_acked
        conn = self._conn(45)
        try:
            conn.request("GET", "/notify/v1/stream", headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError("stream refused: %d %s" % (resp.status, resp.read().decode()))
            event, data = "", []
            while True:
                line = resp.readline()
                if not line:
                    return
                line = line.decode().rstrip("\r\n")
                if line == "":
                    if event in ("notification", "close") and data:
                        yield ("event" if event == "notification" else "close",
                               json.loads("\n".join(data)))
                    event, data = "", []
                elif line.startswith(":"):
                    continue  # a heartbeat
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
        finally:
            conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gateway", default="http://127.0.0.1:8080")
    p.add_argument("--app", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--max-events", type=int, default=0, help="exit after this many (0: never)")
    args = p.parse_args()
    client = Client(args.gateway, args.app, args.secret)
    handled, backoff = 0, 1
    while True:
        try:
            for kind, body in client.stream():
                backoff = 1
                if kind == "close":
                    print(json.dumps({"closed": body}), file=sys.stderr, flush=True)
                    if body.get("reason") in ("revoked", "replaced"):
                        return 1
                    break
                print(json.dumps(body), flush=True)   # handle the event here, then ack it
                client.ack([body["id"]])
                handled += 1
                if args.max_events and handled >= args.max_events:
                    return 0
        except (OSError, RuntimeError, http.client.HTTPException) as e:
            print("stream: %s; reconnecting in %d s" % (e, backoff), file=sys.stderr, flush=True)
            time.sleep(backoff)
            backoff = min(backoff * 2, 60)


if __name__ == "__main__":
    sys.exit(main())
