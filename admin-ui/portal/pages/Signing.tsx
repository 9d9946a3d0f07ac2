// How to sign a request, in merchant words, with the worked examples recomputed here.
import { VectorSection, useVectors } from "../components/Vectors";
import { webCrypto } from "../sign";
import { VECTORS } from "../vectors";

export function Signing() {
  const computed = useVectors();
  return (
    <div class="signing" data-page="signing">
      <h1>Signing a request</h1>
      <p>
        Each app has an <b>app key</b> (e.g. <code>merchant-1</code>) and a <b>secret</b>. The secret never travels: it signs each call. Public APIs (marked <i>public</i>) need no signature;
        every other API needs these four headers on every call. Sign the same way over HTTP and HTTPS.
      </p>
      <table class="props" data-headers>
        <tbody>
          <tr>
            <td class="mono">X-Portico-AppKey</td>
            <td>your app key</td>
          </tr>
          <tr>
            <td class="mono">X-Portico-Timestamp</td>
            <td>
              the current time in Unix epoch <b>milliseconds</b>, e.g. <code>1796000000000</code>
            </td>
          </tr>
          <tr>
            <td class="mono">X-Portico-Nonce</td>
            <td>a fresh random string of 8–64 characters from A-Z a-z 0-9 _ -, never reused</td>
          </tr>
          <tr>
            <td class="mono">X-Portico-Signature</td>
            <td>lowercase hex of HMAC-SHA256(key = your secret, message = the string-to-sign)</td>
          </tr>
        </tbody>
      </table>
      <h2>The string-to-sign</h2>
      <p>Seven lines joined by a single line feed (\n), with no line feed at the end:</p>
      <ol>
        <li>
          the HTTP method, upper case: <code>GET</code>;
        </li>
        <li>
          the path exactly as sent on the request line, without the query: <code>/v1/orders/42</code> (keep its percent-encoding as you send it; do not decode or normalise it);
        </li>
        <li>the canonical query (below); an empty line when there is no query;</li>
        <li>the app key, as in X-Portico-AppKey;</li>
        <li>the timestamp, exactly as in X-Portico-Timestamp;</li>
        <li>the nonce, as in X-Portico-Nonce;</li>
        <li>
          lowercase hex SHA-256 of the raw body bytes, exactly as sent; with no body, the SHA-256 of the empty string, <code>e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855</code>.
        </li>
      </ol>
      <h3>The canonical query</h3>
      <p>Built from the raw query string (what follows ?):</p>
      <ol>
        <li>split it on &amp;, skipping empty parts;</li>
        <li>split each part at the first = into a name and a value (no =: the value is empty);</li>
        <li>
          percent-decode the name and the value to bytes (%XX only: a <code>+</code> stays a <code>+</code>, it is not a space);
        </li>
        <li>re-encode each, keeping only the bytes A-Z a-z 0-9 - _ . ~ and writing every other byte as %XX with upper-case hex digits;</li>
        <li>sort the pairs by encoded name, then by encoded value (plain byte order; repeated names are kept, each pair once per occurrence);</li>
        <li>join them as name=value with &amp;.</li>
      </ol>
      <h2>Timestamp window and nonces</h2>
      <p data-window>
        The gateway refuses a call whose timestamp is more than <b>300 seconds</b> away from its clock in either direction (<code>401 SIGNATURE_EXPIRED</code>: keep your clock in sync with NTP),
        and a nonce the same app already used within that window (<code>401 NONCE_REPLAYED</code>). Every retry is a new call: sign it again with a new timestamp and a new nonce. Sign the bytes
        you send: serialise the body once, hash those bytes, send the same bytes.
      </p>
      <h2>The sandbox</h2>
      <p>
        The sandbox listener has its own secret per app (never your live secret). Sign sandbox calls exactly as above with the sandbox secret: a call signed with your live secret is refused
        there (<code>401 SIGNATURE_INVALID</code>). "Try it" on each API page signs in this browser with the key and secret you enter; the secret is not sent.
      </p>
      <h2>Test vectors</h2>
      <p class="sub" data-impl={webCrypto ? "webcrypto" : "builtin"}>
        Check your signer against these. This page recomputes each one ({webCrypto ? "WebCrypto" : "built-in SHA-256: this page is not a secure context"}).
      </p>
      {VECTORS.map((v, i) => (v.kind === "request" ? <VectorSection v={v} i={i} computed={computed[i]} /> : null))}
      <p class="sub">
        Callbacks are signed in their own domain: see <a href="#/notifications">Notifications</a>, whose test vector this page checks too.
      </p>
    </div>
  );
}
