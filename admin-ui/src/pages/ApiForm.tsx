// Create or edit a draft API's mapping: the HTTP method and path merchants call, the backend
// (an HTTP path on a cluster, or the gRPC method an import set), the deadline and the auth.
// Ranges are checked here with the same words as the registry (registry/src/api/checks.rs),
// which stays the authority: its 422 details are shown on the fields they name.
import { useState } from "preact/hooks";
import { ApiDef, ApiError, Detail, List, get, request } from "../api";
import { useAction } from "../shared/hooks";
import { Button, ErrorBanner, Field, Modal, toast, usePoll } from "../ui";

export const NAME = /^[A-Za-z0-9._-]{1,128}$/;
export const NAME_RULE = "1–128 characters of A-Z a-z 0-9 . _ -";
/** The gateways' longest deadline (control/src/validate/fields.rs MAX_TIMEOUT_MS). */
export const MAX_TIMEOUT_MS = 600_000;
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"];

type Form = { id: string; method: string; path: string; backendPath: string; cluster: string; timeout: string; auth: string };

function toForm(d: ApiDef | null): Form {
  return {
    id: d?.id ?? "",
    method: d?.http.method?.toUpperCase() ?? "GET",
    path: d?.http.path ?? "/v1/",
    backendPath: d?.backend.http?.path ?? "",
    cluster: d?.backend.cluster ?? "",
    timeout: d?.backend.timeout_ms !== undefined ? String(d.backend.timeout_ms) : "",
    auth: d?.auth ?? "signature",
  };
}

/** Field → message, for what the form can tell before the registry answers. */
export function mappingErrors(f: Form, creating: boolean): Record<string, string> {
  const e: Record<string, string> = {};
  if (creating && !NAME.test(f.id.trim())) e.id = `required: ${NAME_RULE}`;
  const p = f.path.trim();
  if (!p.startsWith("/")) e["http.path"] = "starts with /, e.g. /v1/orders/{order_id}";
  else if (/\s/.test(p)) e["http.path"] = "no spaces";
  else if ((p.match(/\{/g) ?? []).length !== (p.match(/\}/g) ?? []).length) e["http.path"] = "unbalanced { } around a variable";
  const bp = f.backendPath.trim();
  if (bp && !bp.startsWith("/")) e["backend.http.path"] = "starts with / (empty: the same path as merchants call)";
  if (!NAME.test(f.cluster.trim())) e["backend.cluster"] = `required: ${NAME_RULE}`;
  const t = f.timeout.trim();
  if (t && (!/^\d+$/.test(t) || Number(t) < 1 || Number(t) > MAX_TIMEOUT_MS)) e["backend.timeout_ms"] = `a whole number between 1 and ${MAX_TIMEOUT_MS} (ms)`;
  return e;
}

/**
 * The dialog. `draft` null: a new HTTP-backed draft (POST /sandbox/apis); else the draft
 * replaced under its ETag (PUT /sandbox/apis/{id}), every other field kept.
 */
export function ApiFormDialog(props: { draft: ApiDef | null; etag?: string; onClose: () => void; onSaved: (id: string) => void }) {
  const creating = !props.draft;
  const grpc = props.draft?.backend.grpc;
  const [form, setForm] = useState<Form>(() => toForm(props.draft));
  const [tried, setTried] = useState(false);
  const [details, setDetails] = useState<Detail[]>([]);
  const [clusters, setClusters] = useState<string[]>([]);
  usePoll(async () => {
    try {
      setClusters((await get<List<unknown>>("/sandbox/clusters")).data.items.map((i) => i.id));
    } catch {
      /* the field still takes a typed name */
    }
  }, 30000);
  const local = mappingErrors(form, creating);
  const errFor = (field: string) => (tried ? local[field] : undefined) ?? details.find((d) => d.field === field || d.field?.startsWith(`${field}.`))?.reason;
  const set = (patch: Partial<Form>) => setForm((f) => ({ ...f, ...patch }));

  const saveAction = useAction(
    async () => {
      setDetails([]);
      const base: ApiDef = props.draft ?? ({ id: form.id.trim(), version: 0, http: { method: "GET", path: "/" }, backend: { cluster: "" } } as ApiDef);
      const backend: ApiDef["backend"] = { ...base.backend, cluster: form.cluster.trim() };
      if (form.timeout.trim()) backend.timeout_ms = Number(form.timeout.trim());
      else delete backend.timeout_ms;
      if (!grpc) backend.http = form.backendPath.trim() ? { path: form.backendPath.trim() } : {};
      const doc: ApiDef = {
        ...base,
        http: { ...base.http, method: form.method, path: form.path.trim() },
        backend,
        auth: form.auth as "signature" | "none",
      };
      if (creating) await request("POST", "/sandbox/apis", { body: doc });
      else await request("PUT", `/sandbox/apis/${encodeURIComponent(doc.id)}`, { body: doc, ifMatch: props.etag });
      toast(creating ? `Created the draft ${doc.id}: the sandbox serves it now` : `Saved the mapping of ${doc.id}`);
      props.onSaved(doc.id);
    },
    {
      onError: (e) => {
        if (e instanceof ApiError) setDetails(e.details);
        return e;
      },
    },
  );
  const { busy, error } = saveAction;
  const save = async () => {
    setTried(true);
    if (Object.keys(local).length) return;
    await saveAction.run();
  };

  return (
    <Modal
      wide
      title={creating ? "New HTTP-backed API (draft)" : `Edit the mapping of ${props.draft!.id}`}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button kind="primary" busy={busy} onClick={save} data-testid="api-form-save">
            {creating ? "Create draft" : "Save draft"}
          </Button>
        </>
      }
    >
      <p class="muted">
        The draft is written to the sandbox, where "Try in sandbox" calls it; merchants see it once it is published. The registry checks it the way
        every gateway will before writing it.
      </p>
      <form data-testid="api-form" onSubmit={(e) => { e.preventDefault(); save(); }}>
        <div class="grid-2">
          {creating && (
            <Field label="API id" error={errFor("id")} hint={`e.g. order.refund; ${NAME_RULE}`}>
              <input name="id" value={form.id} onInput={(e) => set({ id: (e.target as HTMLInputElement).value })} />
            </Field>
          )}
          <Field label="Cluster" error={errFor("backend.cluster")} hint={form.cluster && clusters.length && !clusters.includes(form.cluster.trim()) ? <span class="warn-text">no sandbox cluster named {form.cluster}</span> : "the backend cluster the calls go to"}>
            <input name="cluster" list="api-form-clusters" value={form.cluster} onInput={(e) => set({ cluster: (e.target as HTMLInputElement).value })} />
            <datalist id="api-form-clusters">
              {clusters.map((c) => (
                <option key={c} value={c} />
              ))}
            </datalist>
          </Field>
          <Field label="Method" error={errFor("http.method")}>
            <select name="method" value={form.method} onChange={(e) => set({ method: (e.target as HTMLSelectElement).value })}>
              {METHODS.map((m) => (
                <option key={m} value={m}>
                  {m}
                </option>
              ))}
            </select>
          </Field>
          <Field label="Path merchants call" error={errFor("http.path") ?? errFor("http")} hint="a template: /v1/orders/{order_id}">
            <input name="path" value={form.path} onInput={(e) => set({ path: (e.target as HTMLInputElement).value })} />
          </Field>
          {grpc ? (
            <Field label="Backend" hint="set by the import; re-import to change it">
              <input disabled value={`gRPC ${grpc.service}/${grpc.method}`} />
            </Field>
          ) : (
            <Field label="Backend path" error={errFor("backend.http.path") ?? errFor("backend.http")} hint="empty: the same path; may use the path's {variables}">
              <input name="backend_path" value={form.backendPath} placeholder="(same path)" onInput={(e) => set({ backendPath: (e.target as HTMLInputElement).value })} />
            </Field>
          )}
          <Field label="Backend timeout (ms)" error={errFor("backend.timeout_ms")} hint={`1 to ${MAX_TIMEOUT_MS}; default 3000`}>
            <input name="timeout_ms" inputMode="numeric" value={form.timeout} placeholder="3000" onInput={(e) => set({ timeout: (e.target as HTMLInputElement).value })} />
          </Field>
          <Field label="Auth" error={errFor("auth")}>
            <select name="auth" value={form.auth} onChange={(e) => set({ auth: (e.target as HTMLSelectElement).value })}>
              <option value="signature">signature (merchants sign every request)</option>
              <option value="none">none (public)</option>
            </select>
          </Field>
        </div>
        <button type="submit" hidden />
      </form>
      <ErrorBanner error={error} title={error instanceof ApiError && error.code === "VALIDATION_FAILED" ? "The gateways would refuse this draft" : "Not saved"} />
    </Modal>
  );
}
