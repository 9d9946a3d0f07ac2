// "Try it": the request signed in this browser with a sandbox app's key and secret, forwarded
// by the registry to a gateway's sandbox listener (POST /portal/try), and its answer.
import { useEffect, useState } from "preact/hooks";
import { useAction } from "../../src/shared/hooks";
import { Button, Code, ErrorText } from "../../src/shared/ui";
import { tryRequest } from "../api";
import { freshNonce, sign, webCrypto } from "../sign";
import type { Creds, Op, TryResult } from "../types";
import { Credentials } from "./Credentials";

export function TryIt({ op, creds, setCreds }: { op: Op; creds: Creds; setCreds: (c: Creds) => void }) {
  const ex = op.op["x-portico-example"] ?? {};
  const signed = op.op["x-portico-auth"] === "signature";
  const method = String(ex.method ?? op.method).toUpperCase();
  const [path, setPath] = useState(ex.path ?? op.path);
  const [query, setQuery] = useState(ex.query ?? "");
  const [body, setBody] = useState(ex.body ?? "");
  const [result, setResult] = useState<TryResult | null>(null);
  const [sts, setSts] = useState("");
  const { run: send, busy, error, setError } = useAction(async () => {
    setResult(null);
    const q = query.replace(/^\?/, "");
    const headers: Record<string, string> = {};
    if (body !== "") headers["Content-Type"] = "application/json";
    if (signed || creds.appKey) {
      if (!creds.appKey || !creds.secret) throw new Error("Enter a sandbox app key and secret: this API is signed.");
      const s = await sign({ method, path, query: q, appKey: creds.appKey, secret: creds.secret, timestamp: String(Date.now()), nonce: freshNonce(), body });
      Object.assign(headers, s.headers);
      setSts(s.stringToSign);
    }
    setResult(await tryRequest({ method, path, query: q === "" ? undefined : q, headers, body: body === "" ? undefined : body }));
  });
  useEffect(() => {
    setPath(ex.path ?? op.path);
    setQuery(ex.query ?? "");
    setBody(ex.body ?? "");
    setResult(null);
    setError(null);
    setSts("");
  }, [op.id]);

  const r = result?.response;
  let pretty = r?.body ?? "";
  try {
    if (r && r.body_encoding === "utf-8" && r.body) pretty = JSON.stringify(JSON.parse(r.body), null, 2);
  } catch {
    /* not JSON: shown as it came */
  }
  return (
    <div class="try" id="try">
      <p class="sub">
        Sends the request below to a gateway's <b>sandbox</b> listener, signed here in your browser
        {webCrypto ? " (WebCrypto)" : " (this page is not a secure context: a built-in SHA-256 signs)"}. The registry forwards the
        signed request as it is and never sees your secret. Use a <b>sandbox</b> app's key and secret.
      </p>
      <Credentials creds={creds} setCreds={setCreds} autocomplete="off" />
      <label>
        {method} path
        <input name="path" class="mono" value={path} onInput={(e) => setPath((e.target as HTMLInputElement).value)} />
      </label>
      <label>
        Query (without ?)
        <input name="query" class="mono" value={query} onInput={(e) => setQuery((e.target as HTMLInputElement).value)} />
      </label>
      {method !== "GET" && method !== "DELETE" ? (
        <label>
          Body (JSON, sent and signed exactly as written)
          <textarea name="body" class="mono" rows={Math.min(14, Math.max(3, body.split("\n").length + 1))} value={body} onInput={(e) => setBody((e.target as HTMLTextAreaElement).value)} />
        </label>
      ) : null}
      <div class="row">
        <Button kind="primary" data-action="send" disabled={busy} onClick={send}>
          {busy ? "Sending…" : "Send to the sandbox"}
        </Button>
        <ErrorText error={error} />
      </div>
      {sts ? (
        <details>
          <summary>String-to-sign</summary>
          <Code>{sts}</Code>
        </details>
      ) : null}
      {r ? (
        <div class="answer" data-status={r.status}>
          <div class="row">
            <span class={(r.status ?? 0) < 300 ? "pill ok" : "pill bad"}>HTTP {r.status}</span>
            <span class="sub">
              {result?.latency_ms} ms · node {result?.node_id} · {result?.request.url}
            </span>
          </div>
          <Code data-answer>{pretty}</Code>
        </div>
      ) : null}
    </div>
  );
}
