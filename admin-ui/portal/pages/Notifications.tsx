// Notifications: the app's topics (signed in), the stream, the WebSocket and callbacks, and
// how to verify a callback (its worked example recomputed here).
import { Code } from "../../src/shared/ui";
import { VectorSection, useVectors } from "../components/Vectors";
import { CALLBACK_DOMAIN, VECTORS } from "../vectors";
import type { PortalDocument } from "../types";

const PYTHON_VERIFY = `import hashlib, hmac, time, urllib.parse

KEPT = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"
SEEN = {}  # nonce -> when seen; keep 300 s

def enc(raw):
    return "".join(chr(b) if b in KEPT else "%%%02X" % b for b in raw)

def canonical_query(query):
    pairs = []
    for part in filter(None, query.split("&")):
        name, _, value = part.partition("=")
        pairs.append((enc(urllib.parse.unquote_to_bytes(name)), enc(urllib.parse.unquote_to_bytes(value))))
    return "&".join("%s=%s" % p for p in sorted(pairs))

def verify_callback(secret, path, query, headers, body):
    """True when a callback POST (path and raw query as received, its headers, the raw body) is genuine."""
    ts, nonce = headers["X-Portico-Timestamp"], headers["X-Portico-Nonce"]
    if abs(time.time() * 1000 - int(ts)) > 300_000 or nonce in SEEN:
        return False
    sts = "\\n".join(["PORTICO-CALLBACK-v1", "POST", path, canonical_query(query),
                     headers["X-Portico-AppKey"], ts, nonce, hashlib.sha256(body).hexdigest()])
    good = hmac.new(secret.encode(), sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(good, headers["X-Portico-Signature"]):
        return False
    SEEN[nonce] = time.time()
    return True`;

export function Notifications({ doc }: { doc: PortalDocument }) {
  const computed = useVectors();
  const n = doc["x-portico-notifications"] ?? {};
  const topics: string[] | null = Array.isArray(n.topics) ? n.topics : null;
  const callbackIndex = VECTORS.findIndex((v) => v.kind === "callback");
  return (
    <div data-page="notifications">
      <h1>Notifications</h1>
      <p>
        Besides answering your calls, the platform can push events to your app as they happen (an order paid, a coupon issued). Your app is granted <b>topics</b> (say{" "}
        <code>orders</code>) by your operator. Every event has an <code>id</code>, its <code>topic</code>, <code>published_at</code> (RFC 3339, UTC) and a JSON <code>payload</code> (and{" "}
        <code>key</code>, when the publisher gave its own id of the event):
      </p>
      <Code>{'{"id": "1796000000000-0", "topic": "orders", "published_at": "2026-11-30T19:33:20Z", "payload": {"order_id": "42", "status": "paid"}}'}</Code>
      <p>
        Delivery is <b>at least once</b>, in <b>publish order</b> per app: acknowledge each event by its <code>id</code> and make your handling idempotent by <code>id</code>. Event ids grow
        with publish order (<code>&lt;ms&gt;-&lt;seq&gt;</code>). Events wait for you while you are offline, for the topic's retention (a day unless your operator sets another).
      </p>
      <h2>Your topics</h2>
      {topics ? (
        <div data-topics={topics.join(",")}>
          {topics.length ? (
            <p>
              App <b>{doc["x-portico-app"]}</b> is granted: {topics.map((t, i) => (
                <>
                  {i ? ", " : ""}
                  <code>{t}</code>
                </>
              ))}
              . It receives them by {n.delivery === "callback" ? "callbacks to its callback URL" : "a stream or a WebSocket"}.
            </p>
          ) : (
            <p>App {doc["x-portico-app"]} is granted no topic yet: ask your operator.</p>
          )}
        </div>
      ) : (
        <p data-topics-how>
          Sign in on <a href="#/app">My app</a> to see the topics granted to your app, or fetch <code>GET /portal/apps/&lt;your app key&gt;/openapi.json</code> signed as any call: its{" "}
          <code>x-portico-notifications.topics</code> lists them.
        </p>
      )}
      <p>Choose one of three ways to receive them: a Server-Sent Events stream, a WebSocket (the same events and rules), or callbacks.</p>

      <h2>A stream (Server-Sent Events)</h2>
      <p>
        Open <code>GET /notify/v1/stream</code> on the gateway, signed like any call (method GET, path <code>/notify/v1/stream</code>, no query, empty body), and keep the connection open. The
        answer is 200 with <code>Content-Type: text/event-stream</code>; events arrive as:
      </p>
      <Code>{'id: 1796000000000-0\nevent: notification\ndata: {"id":"1796000000000-0","topic":"orders","published_at":"...","payload":{...}}\n'}</Code>
      <p>
        A line starting with <code>:</code> is a heartbeat (every 15 s of silence); if you see nothing for 45 s, reconnect. Refusals of the opening request are the usual{" "}
        <a href="#/errors">error envelope</a> (401 for a bad signature or a replayed nonce, 403 APP_FORBIDDEN when your app is granted no topic or receives callbacks).
      </p>
      <p>
        <b>Acknowledge</b> with a signed <code>POST /notify/v1/ack</code>, body <code>{'{"ids": ["1796000000000-0", ...]}'}</code> (at most 10,000 ids), on any gateway: the answer is{" "}
        <code>{'{"acked": n}'}</code>. An event not acknowledged within 30 s is sent again. At most 1,000 events wait for your ack at a time; a client that keeps that many unacknowledged for
        longer is a slow consumer and its stream is closed.
      </p>
      <p>
        <b>Reconnect</b> to any gateway with a freshly signed request and <code>Last-Event-ID</code> set to the id of the last event you acknowledged; delivery resumes after it. Your app holds one
        stream: opening a new one closes the old one. Before closing, the gateway sends <code>event: close</code> with <code>{'{"reason": "...", "message": "..."}'}</code>:
      </p>
      <table class="props">
        <tbody>
          <tr>
            <td class="mono">revoked</td>
            <td>your app lost its last topic grant or was disabled: do not reconnect until told</td>
          </tr>
          <tr>
            <td class="mono">replaced</td>
            <td>your app opened a newer stream (perhaps on another gateway): close this one</td>
          </tr>
          <tr>
            <td class="mono">slow_consumer</td>
            <td>ack as you go, then reconnect</td>
          </tr>
        </tbody>
      </table>
      <p>A connection that drops without a close: reconnect at once with Last-Event-ID, then back off (1 s, 2 s, 4 s, ... up to a minute).</p>

      <h2>A WebSocket</h2>
      <p>
        Open <code>GET /notify/v1/ws</code> as a WebSocket (RFC 6455 over HTTP/1.1), the opening request signed like any call (method GET, path <code>/notify/v1/ws</code>, no query, empty
        body). Refusals come before the upgrade, as the error envelope; an opening that is not a proper WebSocket handshake is 400 BAD_REQUEST. Then each event is one text message (the JSON
        above); a ping comes after 15 s of silence (your library answers it).
      </p>
      <p>You send text messages of JSON (at most 64 KiB each):</p>
      <table class="props">
        <tbody>
          <tr>
            <td class="mono">{'{"type": "resume", "after": "1796000000000-0"}'}</td>
            <td>optional, and only as the first message: delivery resumes after your last acknowledged event</td>
          </tr>
          <tr>
            <td class="mono">{'{"type": "ack", "ids": ["1796000000000-0"]}'}</td>
            <td>any time, at most 10,000 ids</td>
          </tr>
        </tbody>
      </table>
      <p>
        The gateway ends a session with <code>{'{"type": "close", "reason": "...", "message": "..."}'}</code> and a close code: 4003 revoked (do not reconnect until told), 4009 replaced, 1008
        slow_consumer or too many control frames, 4008 no_pong (reconnect), 1011 unavailable (reconnect with backoff), 1002/1003/1007/1009 a malformed, binary, non-UTF-8 or too large message
        (fix the client).
      </p>

      <h2>Callbacks</h2>
      <p>
        If your app cannot hold a connection, your operator sets a callback URL on it. The gateway then POSTs each event, in order, with the JSON above as the body and the headers{" "}
        <code>X-Portico-AppKey</code>, <code>X-Portico-Timestamp</code>, <code>X-Portico-Nonce</code>, <code>X-Portico-Signature</code> and <code>X-Portico-Event-Id</code>. Answer any 2xx
        once you have stored the event: anything else (or no answer within 5 s) is retried after 1 s, 2 s, 4 s, ... (at most a minute apart), up to 10 tries. An app with a callback URL cannot
        open a stream.
      </p>
      <p>
        <b>Verify every callback.</b> It is signed with your app's secret in its own domain: the string-to-sign is the line <code>{CALLBACK_DOMAIN}</code>, a line feed, then the seven lines a
        request to your URL would sign (see <a href="#/signing">Signing</a>): POST, the path and canonical query as received, your app key, the timestamp, the nonce, SHA-256 of the raw body.
        Compare the HMAC in constant time, refuse a timestamp more than 300 s from your clock and a nonce seen in the last 300 s. Store events by id: an event may come again, never under
        another id.
      </p>
      <Code data-verify>
        {PYTHON_VERIFY}
      </Code>
      {callbackIndex >= 0 ? <VectorSection v={VECTORS[callbackIndex]} i={callbackIndex} computed={computed[callbackIndex]} /> : null}
    </div>
  );
}
