// Services & APIs: import protos (files, descriptor set, reflection) with a preview first, or
// create an HTTP-backed API directly; the drafts and the published APIs side by side, each
// shown refused when a gateway (or the registry's own check) refuses it
// (docs/operations/registry.md, "Draft → sandbox → publish → rollback").
import { useMemo, useState } from "preact/hooks";
import { ApiDef, ApiError, Item, List, get, request } from "../api";
import { useAction, useLoad } from "../shared/hooks";
import { sameDoc } from "../diff";
import { navigate } from "../router";
import { Badge, Button, Empty, ErrorBanner, Field, Link, MethodBadge, Spinner, cx, toast, usePoll } from "../ui";
import { ApiFormDialog } from "./ApiForm";

/** One refusal of a document: by a gateway node, or by the registry's own build of the tree (`registry`). */
export type Refusal = { node_id: string; reason: string; kept_previous: boolean };
/** Whether the gateways serve a document (`served` of a list item, or GET /sandbox/apis/{id}/served). */
export type Served = { nodes: number; refused: Refusal[] };
type ServedItem = Item<ApiDef> & { served?: Served };

type Row = { id: string; draft?: ServedItem; live?: ServedItem };

/** The distinct reasons of a list of refusals, each with who refuses it. */
export function refusalText(refused: Refusal[]): string[] {
  const by = new Map<string, string[]>();
  for (const r of refused) by.set(r.reason, [...(by.get(r.reason) ?? []), r.node_id === "registry" ? "the registry's check" : `gateway ${r.node_id}`]);
  return [...by.entries()].map(([reason, who]) => `${reason} (${who.join(", ")})`);
}

export function stateOf(row: { draft?: ServedItem; live?: ServedItem }): { label: string; tone: string; title: string } {
  if (row.draft?.served?.refused.length) return { label: "refused by the sandbox", tone: "bad", title: refusalText(row.draft.served.refused).join("\n") };
  if (row.live?.served?.refused.length) return { label: "refused live", tone: "bad", title: refusalText(row.live.served.refused).join("\n") };
  if (row.draft?.document && row.live?.document) {
    return sameDoc(row.draft.document, row.live.document)
      ? { label: "published", tone: "ok", title: "The draft is what is live" }
      : { label: "draft changed", tone: "warn", title: "The draft differs from the live version: publish to apply it" };
  }
  if (row.live) return { label: "published", tone: "ok", title: "Live; no draft in the sandbox" };
  return { label: "draft only", tone: "info", title: "Not published yet" };
}

export function ApisPage() {
  const [creating, setCreating] = useState(false);
  const [filter, setFilter] = useState("");
  const [importing, setImporting] = useState(false);

  const loaded = useLoad(
    async () => {
      const [d, l] = await Promise.all([get<{ items: ServedItem[] }>("/sandbox/apis"), get<{ items: ServedItem[] }>("/apis")]);
      return { drafts: d.data.items, live: l.data.items };
    },
    [],
    10000,
  );
  const drafts = loaded.data?.drafts ?? null;
  const live = loaded.data?.live ?? null;
  const { error, reload: load } = loaded;

  const rows = useMemo(() => {
    const map = new Map<string, Row>();
    for (const d of drafts ?? []) map.set(d.id, { id: d.id, draft: d });
    for (const l of live ?? []) map.set(l.id, { ...(map.get(l.id) ?? { id: l.id }), live: l });
    const f = filter.trim().toLowerCase();
    return [...map.values()]
      .filter((r) => {
        if (!f) return true;
        const doc = r.draft?.document ?? r.live?.document;
        return [r.id, doc?.http?.path, doc?.backend?.cluster, doc?.backend?.grpc?.service, doc?.description]
          .filter(Boolean)
          .some((s) => String(s).toLowerCase().includes(f));
      })
      .sort((a, b) => a.id.localeCompare(b.id));
  }, [drafts, live, filter]);

  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Services &amp; APIs</h1>
          <p class="muted">Import a backend's protos or create an HTTP-backed API to make drafts, try them in the sandbox, then publish.</p>
        </div>
        <div class="head-actions">
          <Button onClick={() => setCreating(true)} data-testid="new-api">
            New HTTP API…
          </Button>
          <Button kind="primary" onClick={() => setImporting((v) => !v)} data-testid="open-import">
            {importing ? "Close import" : "Import protos"}
          </Button>
        </div>
      </header>
      {creating && (
        <ApiFormDialog
          draft={null}
          onClose={() => setCreating(false)}
          onSaved={(id) => {
            setCreating(false);
            navigate(`/apis/${encodeURIComponent(id)}`);
          }}
        />
      )}
      {importing && (
        <ImportPanel
          onImported={() => {
            load();
          }}
        />
      )}
      <ErrorBanner error={error} title="Could not load the APIs" />
      <div class="toolbar">
        <input class="search" type="search" placeholder="Filter by id, path, cluster, service…" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} />
        <span class="muted">
          {drafts && live ? `${rows.length} API${rows.length === 1 ? "" : "s"} · ${drafts.length} draft${drafts.length === 1 ? "" : "s"} · ${live.length} published` : ""}
        </span>
      </div>
      {drafts === null ? (
        error ? null : <Spinner />
      ) : rows.length === 0 ? (
        <Empty title={filter ? "No API matches the filter" : "No APIs yet"}>
          {!filter && (
            <>
              Import a backend's <code>.proto</code> files (with <code>google.api.http</code> annotations): each annotated RPC becomes a draft API.
            </>
          )}
        </Empty>
      ) : (
        <div class="card table-card">
          <table class="table hoverable" data-testid="apis-table">
            <thead>
              <tr>
                <th>API</th>
                <th>HTTP mapping</th>
                <th>Backend</th>
                <th>Auth</th>
                <th>Live version</th>
                <th>State</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => {
                const doc = (r.draft?.document ?? r.live?.document) as ApiDef | null;
                const st = stateOf(r);
                return (
                  <tr key={r.id} class="clickable" data-api={r.id} onClick={() => navigate(`/apis/${encodeURIComponent(r.id)}`)}>
                    <td>
                      <Link to={`/apis/${encodeURIComponent(r.id)}`} class="strong">
                        {r.id}
                      </Link>
                      {doc?.description && <div class="sub">{doc.description}</div>}
                    </td>
                    <td>
                      {doc ? (
                        <span class="mapping">
                          <MethodBadge method={doc.http.method} /> <code>{doc.http.path}</code>
                          {(doc.http.additional_bindings?.length ?? 0) > 0 && <span class="sub"> +{doc.http.additional_bindings!.length} binding(s)</span>}
                        </span>
                      ) : (
                        <span class="bad-text">{r.draft?.error ?? r.live?.error ?? "unreadable"}</span>
                      )}
                    </td>
                    <td>
                      {doc?.backend.grpc ? (
                        <span title={doc.backend.grpc.service}>
                          <Badge tone="grpc">gRPC</Badge> {doc.backend.grpc.method}
                        </span>
                      ) : (
                        <span>
                          <Badge tone="http">HTTP</Badge> {doc?.backend.http?.path ?? ""}
                        </span>
                      )}
                      <div class="sub">cluster {doc?.backend.cluster}</div>
                    </td>
                    <td>{doc?.auth === "none" ? <Badge tone="warn">none</Badge> : <Badge>signature</Badge>}</td>
                    <td>{r.live?.document ? <b>v{r.live.document.version}</b> : <span class="muted">—</span>}</td>
                    <td data-testid="api-state">
                      <Badge tone={st.tone} title={st.title}>
                        {st.label}
                      </Badge>
                      {st.tone === "bad" && <div class="sub bad-text">{st.title.split("\n")[0]}</div>}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

type ImportResult = {
  dry_run?: boolean;
  descriptor: string;
  descriptor_bytes: number;
  services: string[];
  drafts: {
    id: string;
    rpc: string;
    created: boolean;
    etag?: string;
    state?: "new" | "changed" | "unchanged";
    conflicts?: { api: string; route: string; env: string }[];
    http: { method: string; path: string };
  }[];
  skipped: { method: string; reason: string }[];
  problems: { path: string; reason: string }[];
};

function ImportPanel({ onImported }: { onImported: () => void }) {
  const [mode, setMode] = useState<"protos" | "descriptor" | "reflection">("protos");
  const [files, setFiles] = useState<File[]>([]);
  const [descriptor, setDescriptor] = useState<File | null>(null);
  const [addr, setAddr] = useState("");
  const [cluster, setCluster] = useState("");
  const [auth, setAuth] = useState("signature");
  const [timeout, setTimeoutMs] = useState("");
  const [result, setResult] = useState<ImportResult | null>(null);
  const [preview, setPreview] = useState<ImportResult | null>(null);
  const [overwrite, setOverwrite] = useState(false);
  const [clusters, setClusters] = useState<{ sandbox: string[]; live: string[] }>({ sandbox: [], live: [] });

  usePoll(async () => {
    try {
      const [s, l] = await Promise.all([get<List<unknown>>("/sandbox/clusters"), get<List<unknown>>("/clusters")]);
      const sandbox = s.data.items.map((i) => i.id);
      setClusters({ sandbox, live: l.data.items.map((i) => i.id) });
      // Suggest the first sandbox cluster, never over what the user typed.
      if (sandbox.length) setCluster((c) => c || sandbox[0]);
    } catch {
      /* shown on submit */
    }
  }, 30000);

  const timeoutErr = timeout && !/^\d+$/.test(timeout) ? "a whole number of milliseconds" : undefined;
  const clusterErr = cluster && !/^[A-Za-z0-9._-]{1,128}$/.test(cluster) ? "1–128 of A-Z a-z 0-9 . _ -" : undefined;

  /** One import request: a preview (`dry_run`, nothing written) or the confirmed import. */
  const send = async (flags: { dry_run?: string; overwrite?: string }) => {
    if (mode === "protos") {
      if (!files.length) throw new ApiError(0, "NO_FILES", "choose one or more .proto files");
      const form = new FormData();
      for (const f of files) form.append((f as File & { webkitRelativePath?: string }).webkitRelativePath || f.name, f, f.name);
      form.append("cluster", cluster);
      form.append("auth", auth);
      if (timeout) form.append("timeout_ms", timeout);
      return request<ImportResult>("POST", "/protos", { form, query: flags });
    }
    if (mode === "descriptor") {
      if (!descriptor) throw new ApiError(0, "NO_FILE", "choose a FileDescriptorSet file (protoc --descriptor_set_out, --include_imports)");
      return request<ImportResult>("POST", "/descriptors", {
        binary: await descriptor.arrayBuffer(),
        query: { cluster, auth, timeout_ms: timeout || undefined, ...flags },
      });
    }
    return request<ImportResult>("POST", "/reflection", {
      body: { addr: addr.trim(), cluster, auth, ...(timeout ? { timeout_ms: Number(timeout) } : {}) },
      query: flags,
    });
  };

  // The preview and the import share one busy flag and one error.
  const step = useAction((work: () => Promise<void>) => work());
  const { busy, error, setError } = step;

  // First a preview: new / changed / unchanged drafts and the routes other APIs own.
  const submit = async (e: Event) => {
    e.preventDefault();
    await step.run(async () => {
      setResult(null);
      setPreview(null);
      setOverwrite(false);
      setPreview((await send({ dry_run: "true" })).data);
    });
  };

  // Then the import itself; drafts that exist and would change need the overwrite box.
  const confirmImport = async () => {
    await step.run(async () => {
      const r = await send(overwrite ? { overwrite: "true" } : {});
      setPreview(null);
      setResult(r.data);
      toast(`Imported ${r.data.drafts.length} draft API${r.data.drafts.length === 1 ? "" : "s"}`);
      onImported();
    });
  };
  const changed = preview?.drafts.filter((d) => d.state === "changed") ?? [];

  return (
    <section class="card import-card" data-testid="import-panel">
      <div class="tabs">
        {(
          [
            ["protos", ".proto files"],
            ["descriptor", "Descriptor set"],
            ["reflection", "gRPC reflection"],
          ] as const
        ).map(([k, label]) => (
          <button key={k} type="button" class={cx("tab", mode === k && "active")} onClick={() => setMode(k)}>
            {label}
          </button>
        ))}
      </div>
      <form class="import-form" onSubmit={submit}>
        <div class="grid-2">
          {mode === "protos" && (
            <Field label="Proto sources" hint={<>google/api annotations are vendored; upload your own files only.</>}>
              <input type="file" name="protos" accept=".proto" multiple onChange={(e) => setFiles([...((e.target as HTMLInputElement).files ?? [])])} />
              {files.length > 0 && <span class="sub">{files.map((f) => f.name).join(", ")}</span>}
            </Field>
          )}
          {mode === "descriptor" && (
            <Field label="FileDescriptorSet" hint="binary, e.g. protoc --include_imports --descriptor_set_out=set.pb">
              <input type="file" name="descriptor" onChange={(e) => setDescriptor((e.target as HTMLInputElement).files?.[0] ?? null)} />
            </Field>
          )}
          {mode === "reflection" && (
            <Field label="Backend gRPC address" hint="host:port of a backend that serves gRPC server reflection">
              <input name="addr" value={addr} placeholder="127.0.0.1:50051" onInput={(e) => setAddr((e.target as HTMLInputElement).value)} required />
            </Field>
          )}
          <Field
            label="Cluster"
            error={clusterErr}
            hint={
              cluster && !clusters.sandbox.includes(cluster) ? (
                <span class="warn-text">No sandbox cluster named {cluster}: the drafts will not answer in the sandbox until one exists.</span>
              ) : cluster && !clusters.live.includes(cluster) ? (
                <span class="warn-text">No live cluster named {cluster} yet: publishing will be refused until one exists.</span>
              ) : (
                "the backend cluster every draft calls"
              )
            }
          >
            <input name="cluster" list="cluster-names" value={cluster} onInput={(e) => setCluster((e.target as HTMLInputElement).value)} required />
            <datalist id="cluster-names">
              {[...new Set([...clusters.sandbox, ...clusters.live])].map((c) => (
                <option key={c} value={c} />
              ))}
            </datalist>
          </Field>
          <Field label="Auth">
            <select name="auth" value={auth} onChange={(e) => setAuth((e.target as HTMLSelectElement).value)}>
              <option value="signature">signature (merchants sign every request)</option>
              <option value="none">none (public)</option>
            </select>
          </Field>
          <Field label="Backend timeout (ms)" error={timeoutErr} hint="default 3000">
            <input name="timeout_ms" inputMode="numeric" value={timeout} placeholder="3000" onInput={(e) => setTimeoutMs((e.target as HTMLInputElement).value)} />
          </Field>
        </div>
        <ErrorBanner error={error} title="Import failed" onClose={() => setError(null)} />
        <div class="form-actions">
          <Button kind="primary" type="submit" busy={busy && !preview} disabled={!!timeoutErr || !!clusterErr} data-testid="import-submit">
            Preview the import
          </Button>
        </div>
      </form>
      {preview && (
        <div class="import-result" data-testid="import-preview">
          <div class="result-head">
            <b>Preview</b>
            <span class="muted">
              {" "}
              · nothing is written until you confirm · {preview.services.join(", ")}
            </span>
          </div>
          <table class="table compact">
            <thead>
              <tr>
                <th>Draft</th>
                <th>RPC</th>
                <th>HTTP mapping</th>
                <th>Effect</th>
              </tr>
            </thead>
            <tbody>
              {preview.drafts.map((d) => (
                <tr key={d.id} data-preview={d.id}>
                  <td class="strong">{d.id}</td>
                  <td class="sub">{d.rpc}</td>
                  <td>
                    <MethodBadge method={d.http.method} /> <code>{d.http.path}</code>
                  </td>
                  <td data-testid="preview-state">
                    {d.state === "new" ? <Badge tone="info">new</Badge> : d.state === "changed" ? <Badge tone="warn">replaces the existing draft</Badge> : <Badge>unchanged</Badge>}
                    {(d.conflicts ?? []).map((c, i) => (
                      <div key={i} class="sub bad-text" data-testid="preview-conflict">
                        conflict: {c.route} is owned by <Link to={`/apis/${encodeURIComponent(c.api)}`}>{c.api}</Link> ({c.env === "live" ? "live: publishing would be refused" : "the sandbox will refuse one of the two"})
                      </div>
                    ))}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {preview.problems.length > 0 && (
            <div class="warn-box">
              <b>The sandbox would not serve some drafts:</b>
              <ul>
                {preview.problems.map((p) => (
                  <li key={p.path}>
                    <code>{p.path}</code>: {p.reason}
                  </li>
                ))}
              </ul>
            </div>
          )}
          {changed.length > 0 && (
            <label class="check">
              <input type="checkbox" checked={overwrite} onChange={(e) => setOverwrite((e.target as HTMLInputElement).checked)} data-testid="import-overwrite" /> Replace the {changed.length} existing
              draft{changed.length === 1 ? "" : "s"} ({changed.map((d) => d.id).join(", ")}): their edits are lost
            </label>
          )}
          <div class="form-actions">
            <Button onClick={() => setPreview(null)}>Cancel</Button>
            <Button kind={changed.length ? "danger" : "primary"} busy={busy} disabled={changed.length > 0 && !overwrite} onClick={confirmImport} data-testid="import-confirm">
              Import {preview.drafts.length} draft{preview.drafts.length === 1 ? "" : "s"}
            </Button>
          </div>
        </div>
      )}
      {result && (
        <div class="import-result" data-testid="import-result">
          <div class="result-head">
            <Badge tone="ok">descriptor stored</Badge> <code title={result.descriptor}>{result.descriptor.slice(0, 12)}…</code>
            <span class="muted"> · {result.descriptor_bytes.toLocaleString()} bytes · {result.services.join(", ")}</span>
          </div>
          <table class="table compact">
            <thead>
              <tr>
                <th>Draft</th>
                <th>RPC</th>
                <th>HTTP mapping</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {result.drafts.map((d) => (
                <tr key={d.id}>
                  <td>
                    <Link to={`/apis/${encodeURIComponent(d.id)}`} class="strong">
                      {d.id}
                    </Link>
                  </td>
                  <td class="sub">{d.rpc}</td>
                  <td>
                    <MethodBadge method={d.http.method} /> <code>{d.http.path}</code>
                  </td>
                  <td>{d.created ? <Badge tone="info">new</Badge> : d.state === "unchanged" ? <Badge>unchanged</Badge> : <Badge tone="warn">replaced</Badge>}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {result.skipped.length > 0 && (
            <details>
              <summary>{result.skipped.length} RPC(s) without a google.api.http rule were skipped</summary>
              <ul>
                {result.skipped.map((s) => (
                  <li key={s.method}>
                    <code>{s.method}</code>: {s.reason}
                  </li>
                ))}
              </ul>
            </details>
          )}
          {result.problems.length > 0 && (
            <div class="warn-box">
              <b>The sandbox would not serve some drafts yet:</b>
              <ul>
                {result.problems.map((p) => (
                  <li key={p.path}>
                    <code>{p.path}</code>: {p.reason}
                  </li>
                ))}
              </ul>
            </div>
          )}
        </div>
      )}
    </section>
  );
}
