// The merchants' developer portal (docs/OPERATIONS.md, "The merchants' portal"), served by
// the registry at /portal/ without the admin token. Everything it shows comes from the
// registry's generated OpenAPI documents: /portal/openapi.json (every public API) or, after a
// merchant signs in with an app key and secret, /portal/apps/<key>/openapi.json (signed in
// the browser: the secret never leaves the page). "Try it" signs in the browser too and asks
// the registry to forward the signed request to a sandbox listener (POST /portal/try).
import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import { canonicalQuery, freshNonce, sign, webCrypto } from "./sign";
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
      if (!HTTP_METHODS.includes(method)) continue;
      out.push({ path, method, op, id: op.operationId ?? `${method} ${path}` });
    }
  }
  out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return out;
}

// ---- routing: #/ (catalogue), #/api/<operationId>, #/signing, #/errors, #/app ----
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
        <span class="pill">{o["x-portico-backend"] === "grpc" ? `gRPC ${o["x-portico-grpc-method"] ?? ""}` : "HTTP"}</span>
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

const VECTORS = [
  {
    title: "Worked example 1: GET with a query",
    method: "GET",
    path: "/v1/orders/42",
    query: "b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93",
    nonce: "n0nce-0001",
    body: "",
    signature: "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73",
  },
  {
    title: "Worked example 2: POST with a body",
    method: "POST",
    path: "/v1/orders",
    query: "",
    nonce: "n0nce-0002",
    body: '{"item":"book","qty":2}',
    signature: "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107",
  },
];

function Signing() {
  const [computed, setComputed] = useState<{ sts: string; signature: string }[]>([]);
  useEffect(() => {
    Promise.all(
      VECTORS.map((v) =>
        sign({ method: v.method, path: v.path, query: v.query, appKey: "merchant-1", secret: "s3cr3t-value", timestamp: "1796000000000", nonce: v.nonce, body: v.body }).then((s) => ({
          sts: s.stringToSign,
          signature: s.signature,
        })),
      ),
    ).then(setComputed);
  }, []);
  return (
    <div class="signing">
      <h1>Signing a request</h1>
      <p>Send these four headers on every call to a signed API (docs/PROTOCOL.md, "Signing a request"):</p>
      <table class="props">
        <tbody>
          <tr>
            <td class="mono">X-Portico-AppKey</td>
            <td>your app key</td>
          </tr>
          <tr>
            <td class="mono">X-Portico-Timestamp</td>
            <td>the current time in Unix epoch milliseconds; at most 300 s away from the gateway's clock</td>
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
      <p>The string-to-sign is seven lines joined by a single line feed (none at the end):</p>
      <ol>
        <li>the HTTP method, upper case;</li>
        <li>the path exactly as sent, without the query (keep its percent-encoding);</li>
        <li>the canonical query: split on &amp;, split each part at the first =, percent-decode (%XX only; + stays +), re-encode keeping only A-Z a-z 0-9 - _ . ~ (other bytes as %XX, upper-case hex), sort by name then value, join name=value with &amp; (an empty line without a query);</li>
        <li>the app key;</li>
        <li>the timestamp, as in the header;</li>
        <li>the nonce, as in the header;</li>
        <li>lowercase hex SHA-256 of the raw body bytes (of the empty string without a body).</li>
      </ol>
      {VECTORS.map((v, i) => (
        <section class="vector" data-vector={i + 1}>
          <h2>{v.title}</h2>
          <p class="sub">
            App key <code>merchant-1</code>, secret <code>s3cr3t-value</code>, timestamp <code>1796000000000</code>, nonce <code>{v.nonce}</code>
            {v.body ? (
              <>
                , body <code>{v.body}</code>
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
          <p class="sub" data-impl={webCrypto ? "webcrypto" : "builtin"}>
            String-to-sign, computed by this page ({webCrypto ? "WebCrypto" : "built-in SHA-256: this page is not a secure context"}):
          </p>
          <pre class="code">{computed[i]?.sts ?? "…"}</pre>
          <p>
            Signature: <code>{v.signature}</code>{" "}
            {computed[i] ? (
              computed[i].signature === v.signature ? (
                <span class="pill ok" data-check="match">
                  this browser computes the same
                </span>
              ) : (
                <span class="pill bad" data-check="mismatch">
                  this browser computes {computed[i].signature}
                </span>
              )
            ) : null}
          </p>
        </section>
      ))}
    </div>
  );
}

function Errors({ doc }: { doc: Json }) {
  const codes: Json[] = doc["x-portico-error-codes"] ?? [];
  const grpc: Json[] = doc["x-portico-grpc-codes"] ?? [];
  return (
    <div>
      <h1>Errors</h1>
      <p>
        Errors the gateway makes itself come as <code>{'{"code": "...", "message": "...", "request_id": "..."}'}</code> with the status below. Branch on the status and the
        code; the message is for people. Quote the request id (also in <code>X-Portico-Request-Id</code>) when you ask for help.
      </p>
      <table class="props" data-errors>
        <thead>
          <tr>
            <th>status</th>
            <th>code</th>
            <th>meaning</th>
          </tr>
        </thead>
        <tbody>
          {codes.map((c) => (
            <tr data-code={c.code}>
              <td>{c.status}</td>
              <td class="mono">{c.code}</td>
              <td class="desc">{c.meaning}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {grpc.length ? (
        <>
          <h2>gRPC-backed APIs</h2>
          <p class="sub">A gRPC backend's error status becomes an HTTP status:</p>
          <table class="props">
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
