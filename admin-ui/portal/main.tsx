// The merchants' developer portal (docs/OPERATIONS.md, "The merchants' portal"), served by
// the registry at /portal/ without the admin token. Everything it shows comes from the
// registry's generated OpenAPI documents: /portal/openapi.json (every public API) or, after a
// merchant signs in with an app key and secret, /portal/apps/<key>/openapi.json (signed in
// the browser: the secret never leaves the page). "Try it" signs in the browser too and asks
// the registry to forward the signed request to a sandbox listener (POST /portal/try).
// The portal is self-contained: merchants have no repository, so its Signing, Errors and
// Notifications pages say everything (docs/PROTOCOL.md in merchant words), and no page points
// to a file (registry/tests/portal.rs and portal_e2e.rs check it).
import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import { canonicalQuery, freshNonce, hmacHex, sign, webCrypto } from "./sign";
import { CALLBACK_DOMAIN, VECTORS } from "./vectors";
import "./portal.css";

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

interface Op {
  path: string;
  method: string;
  op: Json;
  id: string;
}

const HTTP_METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

function operations(doc: Json): Op[] {
  const out: Op[] = [];
  for (const [path, item] of Object.entries<Json>(doc?.paths ?? {})) {
    if (path === "/router") continue;
    for (const [method, op] of Object.entries<Json>(item)) {
      // The notification endpoints (no x-portico-api) have their own page.
      if (!HTTP_METHODS.includes(method) || !op["x-portico-api"]) continue;
      out.push({ path, method, op, id: op.operationId ?? `${method} ${path}` });
    }
  }
  out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return out;
}

// ---- routing: #/ (catalogue), #/api/<operationId>, #/signing, #/errors, #/notifications, #/app ----
function useHash(): string {
  const [hash, setHash] = useState(location.hash || "#/");
  useEffect(() => {
    const on = () => {
      setHash(location.hash || "#/");
      window.scrollTo(0, 0);
    };
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash;
}

// ---- schemas ----
function refName(ref: string): string {
  return decodeURIComponent(ref.replace(/^#\/components\/schemas\//, "")).replace(/~1/g, "/").replace(/~0/g, "~");
}

function deref(doc: Json, s: Json): Json {
  let seen = 0;
  while (s && typeof s === "object" && typeof s.$ref === "string" && seen++ < 16) {
    const target = doc?.components?.schemas?.[refName(s.$ref)];
    if (!target) break;
    const { $ref: _unused, ...rest } = s;
    void _unused;
    s = { ...target, ...rest };
  }
  return s;
}

function typeOf(doc: Json, s: Json): string {
  if (!s || typeof s !== "object") return "any";
  if (typeof s.$ref === "string") return refName(s.$ref).split(".").pop() ?? "object";
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.enum)) return s.enum.map((v: Json) => JSON.stringify(v)).join(" | ");
  if (Array.isArray(s.oneOf) || Array.isArray(s.anyOf)) return (s.oneOf ?? s.anyOf).map((x: Json) => typeOf(doc, x)).join(" | ");
  const t = Array.isArray(s.type) ? s.type.join(" | ") : s.type;
  if (t === "array") return `${typeOf(doc, s.items)}[]`;
  if (t === "object" && s.additionalProperties && typeof s.additionalProperties === "object" && !s.properties)
    return `map<string, ${typeOf(doc, s.additionalProperties)}>`;
  const fmt = s.format ? ` (${s.format})` : "";
  return (t ?? "any") + fmt;
}

function SchemaRows({ doc, schema, depth, prefix }: { doc: Json; schema: Json; depth: number; prefix: string }) {
  const s = deref(doc, schema);
  const props = s?.properties && typeof s.properties === "object" ? Object.entries<Json>(s.properties) : [];
  const required: string[] = Array.isArray(s?.required) ? s.required : [];
  return (
    <>
      {props.map(([name, p]) => {
        const child = deref(doc, p?.type === "array" ? p.items : p);
        const nested = depth < 3 && child?.properties && !(typeof p?.$ref === "string" && depth > 0 && p.$ref === schema?.$ref);
        return (
          <>
            <tr key={prefix + name}>
              <td class="mono" style={{ paddingLeft: `${8 + depth * 18}px` }}>
                {prefix}
                {name}
              </td>
              <td class="mono">{typeOf(doc, p)}</td>
              <td>{required.includes(name) ? <span class="req">required</span> : ""}</td>
              <td class="desc">{deref(doc, p)?.description ?? ""}</td>
            </tr>
            {nested ? <SchemaRows doc={doc} schema={p?.type === "array" ? p.items : p} depth={depth + 1} prefix={`${prefix}${name}${p?.type === "array" ? "[]" : ""}.`} /> : null}
          </>
        );
      })}
    </>
  );
}

function Schema({ doc, schema, title }: { doc: Json; schema: Json; title: string }) {
  const s = deref(doc, schema);
  const [raw, setRaw] = useState(false);
  return (
    <div class="schema">
      <div class="row">
        <h4>{title}</h4>
        <span class="mono muted">{typeOf(doc, schema)}</span>
        <button class="link" onClick={() => setRaw(!raw)}>
          {raw ? "hide JSON Schema" : "JSON Schema"}
        </button>
      </div>
      {s?.properties ? (
        <table class="props">
          <thead>
            <tr>
              <th>field</th>
              <th>type</th>
              <th></th>
              <th>description</th>
            </tr>
          </thead>
          <tbody>
            <SchemaRows doc={doc} schema={schema} depth={0} prefix="" />
          </tbody>
        </table>
      ) : (
        <p class="muted">{s?.description ?? "No fields listed."}</p>
      )}
      {raw ? <pre class="code">{JSON.stringify(s, null, 2)}</pre> : null}
    </div>
  );
}

// ---- copy ----
async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const ta = document.createElement("textarea");
    ta.value = text;
    document.body.appendChild(ta);
    ta.select();
    const ok = document.execCommand("copy");
    ta.remove();
    return ok;
  }
}

function Snippets({ samples }: { samples: Json[] }) {
  const [tab, setTab] = useState(0);
  const [copied, setCopied] = useState("");
  if (!samples?.length) return null;
  const s = samples[Math.min(tab, samples.length - 1)];
  return (
    <div class="snippets">
      <div class="tabs" role="tablist">
        {samples.map((x, i) => (
          <button role="tab" data-snippet={x["x-id"]} class={i === tab ? "tab on" : "tab"} aria-selected={i === tab} onClick={() => (setTab(i), setCopied(""))}>
            {x.label}
          </button>
        ))}
        <span class="grow" />
        <button
          class="btn"
          data-action="copy-snippet"
          onClick={async () => setCopied((await copyText(s.source)) ? `Copied the ${s.label} snippet` : "Copy failed: select the text instead")}
        >
          Copy
        </button>
      </div>
      <p class="sub">
        Save as <code>{s["x-file"]}</code> and run <code>{s["x-run"]}</code>.{" "}
        <span class="copied" role="status">
          {copied}
        </span>
      </p>
      <pre class="code" data-snippet-source={s["x-id"]}>
        {s.source}
      </pre>
    </div>
  );
}

// ---- try it ----
interface Creds {
  appKey: string;
  secret: string;
}

function TryIt({ op, creds, setCreds }: { op: Op; creds: Creds; setCreds: (c: Creds) => void }) {
  const ex = op.op["x-portico-example"] ?? {};
  const signed = op.op["x-portico-auth"] === "signature";
  const method = String(ex.method ?? op.method).toUpperCase();
  const [path, setPath] = useState(ex.path ?? op.path);
  const [query, setQuery] = useState(ex.query ?? "");
  const [body, setBody] = useState(ex.body ?? "");
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<Json>(null);
  const [error, setError] = useState("");
  const [sts, setSts] = useState("");
  useEffect(() => {
    setPath(ex.path ?? op.path);
    setQuery(ex.query ?? "");
    setBody(ex.body ?? "");
    setResult(null);
    setError("");
    setSts("");
  }, [op.id]);

  async function send() {
    setBusy(true);
    setError("");
    setResult(null);
    try {
      const q = query.replace(/^\?/, "");
      const headers: Record<string, string> = {};
      if (body !== "") headers["Content-Type"] = "application/json";
      if (signed || creds.appKey) {
        if (!creds.appKey || !creds.secret) throw new Error("Enter a sandbox app key and secret: this API is signed.");
        const s = await sign({ method, path, query: q, appKey: creds.appKey, secret: creds.secret, timestamp: String(Date.now()), nonce: freshNonce(), body });
        Object.assign(headers, s.headers);
        setSts(s.stringToSign);
      }
      const resp = await fetch("/portal/try", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ method, path, query: q === "" ? undefined : q, headers, body: body === "" ? undefined : body }),
      });
      const answer = await resp.json();
      if (!resp.ok) throw new Error(`${answer.code ?? resp.status}: ${answer.message ?? "the registry refused the call"}`);
      setResult(answer);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  }

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
      <div class="grid2">
        <label>
          App key
          <input name="app-key" value={creds.appKey} onInput={(e) => setCreds({ ...creds, appKey: (e.target as HTMLInputElement).value.trim() })} autocomplete="off" />
        </label>
        <label>
          Secret
          <input name="secret" type="password" value={creds.secret} onInput={(e) => setCreds({ ...creds, secret: (e.target as HTMLInputElement).value })} autocomplete="off" />
        </label>
      </div>
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
        <button class="btn primary" data-action="send" disabled={busy} onClick={send}>
          {busy ? "Sending…" : "Send to the sandbox"}
        </button>
        {error ? <span class="bad">{error}</span> : null}
      </div>
      {sts ? (
        <details>
          <summary>String-to-sign</summary>
          <pre class="code">{sts}</pre>
        </details>
      ) : null}
      {r ? (
        <div class="answer" data-status={r.status}>
          <div class="row">
            <span class={r.status < 300 ? "pill ok" : "pill bad"}>HTTP {r.status}</span>
            <span class="sub">
              {result.latency_ms} ms · node {result.node_id} · {result.request?.url}
            </span>
          </div>
          <pre class="code" data-answer>
            {pretty}
          </pre>
        </div>
      ) : null}
    </div>
  );
}

// ---- pages ----
function Catalogue({ doc, ops }: { doc: Json; ops: Op[] }) {
  const [q, setQ] = useState(new URLSearchParams(location.hash.split("?")[1] ?? "").get("q") ?? "");
  const words = q.toLowerCase().split(/\s+/).filter(Boolean);
  const shown = ops.filter((o) => {
    const hay = `${o.id} ${o.method} ${o.path} ${o.op.summary ?? ""} ${o.op.description ?? ""} ${(o.op.tags ?? []).join(" ")}`.toLowerCase();
    return words.every((w) => hay.includes(w));
  });
  const groups = new Map<string, Op[]>();
  for (const o of shown) {
    const tag = o.op.tags?.[0] ?? "other";
    groups.set(tag, [...(groups.get(tag) ?? []), o]);
  }
  return (
    <div>
      <h1>{doc.info?.title}</h1>
      <p class="muted">{doc.info?.description?.split("\n\n")[0]}</p>
      <input class="search" type="search" name="search" placeholder="Search APIs by id, path or description" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} autofocus />
      <p class="sub" data-count={shown.length}>
        {shown.length} of {ops.length} operations
      </p>
      {[...groups.entries()].map(([tag, list]) => (
        <section class="group">
          <h3>{tag}</h3>
          <table class="catalogue">
            <tbody>
              {list.map((o) => (
                <tr data-api={o.op["x-portico-api"]}>
                  <td>
                    <span class={`verb ${o.method}`}>{o.method.toUpperCase()}</span>
                  </td>
                  <td class="mono">
                    <a href={`#/api/${encodeURIComponent(o.id)}`}>{o.path}</a>
                  </td>
                  <td class="mono">{o.op["x-portico-api"]}</td>
                  <td>{o.op["x-portico-auth"] === "signature" ? <span class="pill">signed</span> : <span class="pill ok">public</span>}</td>
                  <td class="desc">{o.op.summary !== o.op["x-portico-api"] ? o.op.summary : ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      ))}
      {shown.length === 0 ? <p class="muted">No API matches “{q}”.</p> : null}
    </div>
  );
}

function ApiPage({ doc, op, creds, setCreds }: { doc: Json; op: Op; creds: Creds; setCreds: (c: Creds) => void }) {
  const o = op.op;
  const ex = o["x-portico-example"] ?? {};
  const router = o["x-portico-router"];
  const params: Json[] = (o.parameters ?? []).map((p: Json) => (p.$ref ? doc.components?.parameters?.[p.$ref.split("/").pop()] : p)).filter(Boolean);
  const reqSchema = o.requestBody?.content?.["application/json"]?.schema;
  const ok = o.responses?.["200"] ?? o.responses?.["2XX"];
  const resSchema = ok?.content?.["application/json"]?.schema;
  const limits: Json[] = o["x-portico-rate-limits"] ?? [];
  const errors = Object.keys(o.responses ?? {}).filter((s) => /^[45]/.test(s));
  const target = ex.query ? `${ex.path}?${ex.query}` : ex.path;
  return (
    <div class="api" data-api-page={o["x-portico-api"]}>
      <p class="sub">
        <a href="#/">APIs</a> / {o.tags?.[0]}
      </p>
      <h1 class="mono">{o["x-portico-api"]}</h1>
      <p>{o.summary !== o["x-portico-api"] ? o.summary : null}</p>
      <div class="endpoint">
        <span class={`verb ${op.method}`}>{op.method.toUpperCase()}</span>
        <code>{op.path}</code>
        {o["x-portico-auth"] === "signature" ? <span class="pill">signed</span> : <span class="pill ok">public: no signature</span>}
        <span class="pill">{o["x-portico-backend"] === "grpc" ? "gRPC-backed" : "HTTP-backed"}</span>
      </div>
      <p class="desc">{o.description}</p>
      <div class="facts">
        <div>
          <b>Rate limits</b>
          {limits.length ? (
            <ul>
              {limits.map((l) => (
                <li>
                  {l.limit} per {l.per} per {(l.key ?? []).join(" + ") || "API"} (burst {l.burst})
                </li>
              ))}
            </ul>
          ) : (
            <p class="sub">none on this API (your app may have its own)</p>
          )}
        </div>
        <div>
          <b>Deadline</b>
          <p class="sub">{o["x-portico-timeout-ms"]} ms, then 504 UPSTREAM_TIMEOUT</p>
        </div>
        <div>
          <b>Largest body</b>
          <p class="sub">{o["x-portico-max-body-bytes"]} bytes, then 413</p>
        </div>
      </div>

      <h2>Parameters</h2>
      {params.length ? (
        <table class="props">
          <thead>
            <tr>
              <th>name</th>
              <th>in</th>
              <th>type</th>
              <th></th>
              <th>description</th>
            </tr>
          </thead>
          <tbody>
            {params.map((p) => (
              <tr data-param={p.name}>
                <td class="mono">{p.name}</td>
                <td>{p.in}</td>
                <td class="mono">{typeOf(doc, p.schema)}</td>
                <td>{p.required ? <span class="req">required</span> : ""}</td>
                <td class="desc">{p.description}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p class="muted">None.</p>
      )}
      {reqSchema ? <Schema doc={doc} schema={reqSchema} title="Request body" /> : null}
      {resSchema ? <Schema doc={doc} schema={resSchema} title="Answer (200)" /> : null}

      <h2>Example request</h2>
      <p class="sub">Accepted by the gateway as it stands (the example values fill every required field).</p>
      <pre class="code" data-example>
        {`${String(ex.method ?? op.method).toUpperCase()} ${target}`}
        {ex.body ? `\nContent-Type: application/json\n\n${ex.body}` : ""}
      </pre>
      {ex.response != null ? (
        <>
          <h3>Example answer</h3>
          <pre class="code">{JSON.stringify(ex.response, null, 2)}</pre>
        </>
      ) : null}
      {router ? (
        <>
          <h3>Router style</h3>
          <p class="sub">The same API as one POST to the router, the whole request (path fields included) as the body:</p>
          <pre class="code">{`POST /router?${router.query}\nContent-Type: application/json\n\n${router.body}`}</pre>
        </>
      ) : null}

      <h2>Code</h2>
      <p class="sub">
        Signs and calls this API. Set <code>PORTICO_APP_KEY</code> and <code>PORTICO_SECRET</code> (and <code>PORTICO_BASE_URL</code> for another gateway).
      </p>
      <Snippets samples={o["x-codeSamples"] ?? []} />

      <h2>Errors</h2>
      <p class="sub">
        Errors the gateway makes come as <code>{'{"code", "message", "request_id"}'}</code>. This API may answer {errors.join(", ")}; see <a href="#/errors">every code</a>.
      </p>

      <h2>Try it</h2>
      <TryIt op={op} creds={creds} setCreds={setCreds} />
    </div>
  );
}

/** The string-to-sign and signature of a vector, computed in this browser. */
async function computeVector(v: (typeof VECTORS)[number]): Promise<{ sts: string; signature: string }> {
  const s = await sign({ method: v.method, path: v.path, query: v.query, appKey: v.appKey, secret: v.secret, timestamp: v.timestamp, nonce: v.nonce, body: v.body });
  if (v.kind !== "callback") return { sts: s.stringToSign, signature: s.signature };
  const sts = `${CALLBACK_DOMAIN}\n${s.stringToSign}`;
  return { sts, signature: await hmacHex(v.secret, sts) };
}

function VectorSection({ v, i, computed }: { v: (typeof VECTORS)[number]; i: number; computed?: { sts: string; signature: string } }) {
  return (
    <section class="vector" data-vector={i + 1}>
      <h3>{v.title}</h3>
      <p class="sub">
        App key <code>{v.appKey}</code>, secret <code>{v.secret}</code>, timestamp <code>{v.timestamp}</code>, nonce <code>{v.nonce}</code>
        {v.body ? (
          <>
            , body ({new TextEncoder().encode(v.body).length} bytes, exactly as sent) <code>{v.body}</code>
          </>
        ) : (
          ", no body"
        )}
        :
      </p>
      <pre class="code">{`${v.method} ${v.path}${v.query ? `?${v.query}` : ""}`}</pre>
      {v.query ? (
        <p class="sub">
          Canonical query: <code>{canonicalQuery(v.query)}</code>
        </p>
      ) : null}
      <p class="sub">The string-to-sign:</p>
      <pre class="code" data-sts>
        {v.stringToSign}
      </pre>
      <p>
        Signature: <code>{v.signature}</code>{" "}
        {computed ? (
          computed.signature === v.signature && computed.sts === v.stringToSign ? (
            <span class="pill ok" data-check="match">
              this browser computes the same
            </span>
          ) : (
            <span class="pill bad" data-check="mismatch">
              this browser computes {computed.signature}
            </span>
          )
        ) : null}
      </p>
    </section>
  );
}

function useVectors(): { sts: string; signature: string }[] {
  const [computed, setComputed] = useState<{ sts: string; signature: string }[]>([]);
  useEffect(() => {
    Promise.all(VECTORS.map(computeVector)).then(setComputed);
  }, []);
  return computed;
}

function Signing() {
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

function Errors({ doc }: { doc: Json }) {
  const codes: Json[] = doc["x-portico-error-codes"] ?? [];
  const grpc: Json[] = doc["x-portico-grpc-codes"] ?? [];
  return (
    <div data-page="errors">
      <h1>Errors</h1>
      <p>Every answer the gateway makes itself (rather than the API's backend) has this JSON body:</p>
      <pre class="code">{'{"code": "SIGNATURE_INVALID", "message": "signature does not match", "request_id": "9f3c2a7e5b1d4c08"}'}</pre>
      <p>
        Branch on the HTTP status and <code>code</code>; <code>message</code> is text for people and may change. Every answer, success or not, carries <code>X-Portico-Request-Id</code>: send
        your own (1–64 of A-Z a-z 0-9 . _ -) to follow a call through your logs, and quote it when you ask for help.
      </p>
      <table class="props" data-errors>
        <thead>
          <tr>
            <th>status</th>
            <th>code</th>
            <th>meaning</th>
            <th>what to do</th>
          </tr>
        </thead>
        <tbody>
          {codes.map((c) => (
            <tr data-code={c.code}>
              <td>{c.status}</td>
              <td class="mono">{c.code}</td>
              <td class="desc">{c.meaning}</td>
              <td class="desc">{c.what_to_do}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Retrying</h2>
      <p>
        Retry on 429 and 503 after <code>Retry-After</code> seconds (or with backoff), with a <b>new nonce and timestamp</b>; do not retry other 4xx unchanged. Answers about the backend (502,
        503, 504) and internal errors (500) carry a fixed message: the request id is what operators need.
      </p>
      {grpc.length ? (
        <>
          <h2>gRPC-backed APIs</h2>
          <p class="sub">
            An API marked gRPC-backed reports its backend's error status with <code>code</code> the status name and <code>message</code> the backend's message (a fixed message for
            UNAVAILABLE, INTERNAL, UNKNOWN and DEADLINE_EXCEEDED), with this HTTP status:
          </p>
          <table class="props" data-grpc-codes>
            <tbody>
              {grpc.map((g) => (
                <tr>
                  <td class="mono">{g.code}</td>
                  <td>→ HTTP {g.status}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
    </div>
  );
}

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

function Notifications({ doc }: { doc: Json }) {
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
      <pre class="code">{'{"id": "1796000000000-0", "topic": "orders", "published_at": "2026-11-30T19:33:20Z", "payload": {"order_id": "42", "status": "paid"}}'}</pre>
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
      <pre class="code">{'id: 1796000000000-0\nevent: notification\ndata: {"id":"1796000000000-0","topic":"orders","published_at":"...","payload":{...}}\n'}</pre>
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
      <pre class="code" data-verify>
        {PYTHON_VERIFY}
      </pre>
      {callbackIndex >= 0 ? <VectorSection v={VECTORS[callbackIndex]} i={callbackIndex} computed={computed[callbackIndex]} /> : null}
    </div>
  );
}

function AppSignIn({ creds, setCreds, onDoc }: { creds: Creds; setCreds: (c: Creds) => void; onDoc: (d: Json) => void }) {
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  async function load() {
    setBusy(true);
    setError("");
    try {
      const path = `/portal/apps/${encodeURIComponent(creds.appKey)}/openapi.json`;
      const s = await sign({ method: "GET", path, query: "", appKey: creds.appKey, secret: creds.secret, timestamp: String(Date.now()), nonce: freshNonce(), body: "" });
      const resp = await fetch(path, { headers: s.headers, cache: "no-store" });
      const body = await resp.json();
      if (!resp.ok) throw new Error(`${body.code ?? resp.status}: ${body.message ?? ""}`);
      onDoc(body);
      location.hash = "#/";
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  }
  return (
    <div>
      <h1>Your app's APIs</h1>
      <p>
        Enter your app key and secret to see the APIs granted to your app (and its own rate limits). The request is signed in this browser like any call; the secret is not sent.
      </p>
      <div class="grid2">
        <label>
          App key
          <input name="app-key" value={creds.appKey} onInput={(e) => setCreds({ ...creds, appKey: (e.target as HTMLInputElement).value.trim() })} />
        </label>
        <label>
          Secret
          <input name="secret" type="password" value={creds.secret} onInput={(e) => setCreds({ ...creds, secret: (e.target as HTMLInputElement).value })} />
        </label>
      </div>
      <div class="row">
        <button class="btn primary" disabled={busy || !creds.appKey || !creds.secret} onClick={load}>
          Show my APIs
        </button>
        {error ? <span class="bad">{error}</span> : null}
      </div>
    </div>
  );
}

function Portal() {
  const hash = useHash();
  const [doc, setDoc] = useState<Json>(null);
  const [error, setError] = useState("");
  const [creds, setCreds] = useState<Creds>({ appKey: "", secret: "" });
  const loadPublic = () =>
    fetch("/portal/openapi.json", { cache: "no-store" })
      .then(async (r) => {
        const body = await r.json();
        if (!r.ok) throw new Error(`${body.code ?? r.status}: ${body.message ?? ""}`);
        setDoc(body);
      })
      .catch((e) => setError(`The API catalogue could not be loaded: ${e instanceof Error ? e.message : e}`));
  useEffect(() => {
    loadPublic();
  }, []);
  const ops = useMemo(() => operations(doc), [doc]);
  const route = hash.replace(/^#/, "").split("?")[0];
  let page;
  if (error) page = <p class="bad">{error}</p>;
  else if (!doc) page = <p class="muted">Loading the API catalogue…</p>;
  else if (route.startsWith("/api/")) {
    const id = decodeURIComponent(route.slice(5));
    const op = ops.find((o) => o.id === id);
    page = op ? <ApiPage doc={doc} op={op} creds={creds} setCreds={setCreds} /> : <p class="bad">No API {id} in this catalogue.</p>;
  } else if (route === "/signing") page = <Signing />;
  else if (route === "/errors") page = <Errors doc={doc} />;
  else if (route === "/notifications") page = <Notifications doc={doc} />;
  else if (route === "/app") page = <AppSignIn creds={creds} setCreds={setCreds} onDoc={setDoc} />;
  else page = <Catalogue doc={doc} ops={ops} />;
  return (
    <div class="shell">
      <header>
        <a class="brand" href="#/">
          Portico <span>developer portal</span>
        </a>
        <nav>
          <a href="#/">APIs</a>
          <a href="#/signing">Signing</a>
          <a href="#/errors">Errors</a>
          <a href="#/notifications">Notifications</a>
          <a href="#/app">My app</a>
          <a href="/portal/openapi.json" target="_blank" rel="noopener">
            OpenAPI
          </a>
        </nav>
      </header>
      {doc?.["x-portico-app"] ? (
        <div class="banner">
          Showing the APIs of app <b>{doc["x-portico-app"]}</b>.{" "}
          <button class="link" onClick={() => (setDoc(null), loadPublic())}>
            Show all public APIs
          </button>
        </div>
      ) : null}
      <main>{page}</main>
    </div>
  );
}

render(<Portal />, document.getElementById("portal")!);
