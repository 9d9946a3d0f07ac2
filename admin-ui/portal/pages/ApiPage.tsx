// One API: method and path, limits, parameters, request and answer schemas, an example
// request (and the router style), its code, its errors and "try it".
import { Code } from "../../src/shared/ui";
import { Schema } from "../components/Schema";
import { Snippets } from "../components/Snippets";
import { TryIt } from "../components/TryIt";
import { parametersOf, typeOf } from "../openapi";
import type { Creds, Op, PortalDocument } from "../types";

export function ApiPage({ doc, op, creds, setCreds }: { doc: PortalDocument; op: Op; creds: Creds; setCreds: (c: Creds) => void }) {
  const o = op.op;
  const ex = o["x-portico-example"] ?? {};
  const router = o["x-portico-router"];
  const params = parametersOf(doc, o);
  const reqSchema = o.requestBody?.content?.["application/json"]?.schema;
  const ok = o.responses?.["200"] ?? o.responses?.["2XX"];
  const resSchema = ok?.content?.["application/json"]?.schema;
  const limits = o["x-portico-rate-limits"] ?? [];
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
      <Code data-example>
        {`${String(ex.method ?? op.method).toUpperCase()} ${target}`}
        {ex.body ? `\nContent-Type: application/json\n\n${ex.body}` : ""}
      </Code>
      {ex.response != null ? (
        <>
          <h3>Example answer</h3>
          <Code>{JSON.stringify(ex.response, null, 2)}</Code>
        </>
      ) : null}
      {router ? (
        <>
          <h3>Router style</h3>
          <p class="sub">The same API as one POST to the router, the whole request (path fields included) as the body:</p>
          <Code>{`POST /router?${router.query}\nContent-Type: application/json\n\n${router.body}`}</Code>
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
