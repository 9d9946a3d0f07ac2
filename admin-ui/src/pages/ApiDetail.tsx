// One API: its HTTP mapping and backend (edited in ApiForm.tsx), the policy editor (ranges
// checked as the registry does, its 422 details shown inline), try-it in the sandbox (refused
// for a draft the sandbox refuses), publish, versions with diffs, rollback, unpublish, delete
// the draft, and the live hot keys (HotKeys.tsx). Destructive actions confirm naming the API
// (confirm.tsx).
import { useEffect, useMemo, useState } from "preact/hooks";
import { ApiDef, ApiError, Detail, Item, List, Policy, TryResult, get, request } from "../api";
import { ConfirmDialog } from "../confirm";
import { useAction } from "../shared/hooks";
import { canonical, comparable, diffLines, sameDoc } from "../diff";
import { navigate } from "../router";
import { ApiFormDialog, MAX_TIMEOUT_MS } from "./ApiForm";
import { Served, refusalText } from "./Apis";
import { HotKeysPanel } from "./HotKeys";
import { Badge, Button, Code, CopyButton, Empty, ErrorBanner, Field, Link, MethodBadge, Modal, Spinner, cx, fmtTime, pretty, toast } from "../ui";

type Loaded = { draft: ApiDef | null; draftEtag?: string; live: ApiDef | null; liveEtag?: string; served: Served | null };

async function loadBoth(id: string): Promise<Loaded> {
  const enc = encodeURIComponent(id);
  const opt = async (path: string) => {
    try {
      return await get<ApiDef>(path);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return null;
      throw e;
    }
  };
  const [d, l] = await Promise.all([opt(`/sandbox/apis/${enc}`), opt(`/apis/${enc}`)]);
  let served: Served | null = null;
  if (d) {
    try {
      served = (await get<Served>(`/sandbox/apis/${enc}/served`)).data;
    } catch {
      served = null; // shown as unknown; trying it still asks the registry, which refuses
    }
  }
  return { draft: d?.data ?? null, draftEtag: d?.etag, live: l?.data ?? null, liveEtag: l?.etag, served };
}

export function ApiDetailPage({ id }: { id: string }) {
  const [data, setData] = useState<Loaded | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tab, setTab] = useState<"policy" | "try" | "versions" | "hot">("policy");
  const [publishing, setPublishing] = useState(false);
  const [dialog, setDialog] = useState<"mapping" | "delete" | "unpublish" | null>(null);
  const [historyTick, setHistoryTick] = useState(0);

  const reload = async () => {
    try {
      setData(await loadBoth(id));
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  useEffect(() => {
    setData(null);
    reload();
  }, [id]);

  if (!data) return <div class="page">{error ? <ErrorBanner error={error} title={`Could not load ${id}`} /> : <Spinner />}</div>;
  const doc = data.draft ?? data.live;
  if (!doc)
    return (
      <div class="page">
        <Empty title={`No API ${id}`}>
          Neither a draft nor a published API has this id. <Link to="/apis">Back to the list</Link>
        </Empty>
      </div>
    );
  const changed = data.draft && data.live ? !sameDoc(data.draft, data.live) : !!data.draft;
  const refused = data.served?.refused ?? [];

  return (
    <div class="page">
      <div class="crumbs">
        <Link to="/apis">Services &amp; APIs</Link> / <span>{id}</span>
      </div>
      <header class="page-head">
        <div>
          <h1 class="api-title">
            {id}{" "}
            {data.live ? <Badge tone="ok">live v{data.live.version}</Badge> : <Badge tone="info">not published</Badge>}{" "}
            {data.draft && data.live && changed && <Badge tone="warn">draft changed</Badge>}{" "}
            {refused.length > 0 && <Badge tone="bad">refused by the sandbox</Badge>}
          </h1>
          <div class="mapping big">
            <MethodBadge method={doc.http.method} /> <code>{doc.http.path}</code>
            {doc.http.body && <span class="sub"> body: {doc.http.body}</span>}
            {doc.http.response_body && <span class="sub"> response_body: {doc.http.response_body}</span>}
          </div>
          {(doc.http.additional_bindings ?? []).map((b, i) => (
            <div key={i} class="mapping sub">
              also <MethodBadge method={b.method} /> <code>{b.path}</code>
            </div>
          ))}
          <div class="sub">
            {doc.backend.grpc ? (
              <>
                gRPC <code>{doc.backend.grpc.service}/{doc.backend.grpc.method}</code> · descriptor <code title={doc.backend.grpc.descriptor}>{doc.backend.grpc.descriptor.slice(0, 10)}…</code>
              </>
            ) : (
              <>HTTP backend {doc.backend.http?.path ? <code>{doc.backend.http.path}</code> : "(same path)"}</>
            )}{" "}
            · cluster <code>{doc.backend.cluster}</code>
          </div>
          <div class="sub" data-testid="cache-summary">
            {cacheSummary(doc)}
          </div>
        </div>
        <div class="head-actions">
          {data.draft && (
            <Button onClick={() => setDialog("mapping")} data-testid="edit-mapping">
              Edit mapping…
            </Button>
          )}
          {data.draft && (
            <Button kind="danger" onClick={() => setDialog("delete")} data-testid="delete-draft">
              Delete draft…
            </Button>
          )}
          {data.live && (
            <Button kind="danger" onClick={() => setDialog("unpublish")} data-testid="unpublish">
              Unpublish…
            </Button>
          )}
          <Button kind="primary" disabled={!data.draft || !changed} onClick={() => setPublishing(true)} data-testid="publish" title={!data.draft ? "No draft to publish" : !changed ? "The draft is already live" : ""}>
            {data.live ? `Publish v${(data.live.version ?? 0) + 1}…` : "Publish…"}
          </Button>
        </div>
      </header>
      <ErrorBanner error={error} onClose={() => setError(null)} />
      {refused.length > 0 && (
        <div class="error-banner" role="alert" data-testid="draft-refused">
          <div class="error-head">
            <strong>The sandbox refuses this draft: it is not served, and cannot be tried until it is fixed</strong>
          </div>
          <ul class="error-details">
            {refusalText(refused).map((r) => (
              <li key={r}>{r}</li>
            ))}
          </ul>
        </div>
      )}
      <div class="tabs">
        <button class={cx("tab", tab === "policy" && "active")} onClick={() => setTab("policy")} data-testid="tab-policy">
          Policy
        </button>
        <button class={cx("tab", tab === "try" && "active")} onClick={() => setTab("try")} data-testid="tab-try">
          Try in sandbox
        </button>
        <button class={cx("tab", tab === "versions" && "active")} onClick={() => setTab("versions")} data-testid="tab-versions">
          Versions
        </button>
        <button class={cx("tab", tab === "hot" && "active")} onClick={() => setTab("hot")} data-testid="tab-hot-keys">
          Hot keys
        </button>
      </div>
      {tab === "policy" &&
        (data.draft ? (
          <PolicyEditor key={data.draftEtag} draft={data.draft} etag={data.draftEtag} onSaved={reload} />
        ) : (
          <div class="card">
            <p>
              This API has no draft in the sandbox: it was published from a draft that has since been deleted, or written directly to the live tree. Its live policy:
            </p>
            <Code>{pretty(data.live?.policy ?? {})}</Code>
          </div>
        ))}
      {tab === "try" && (data.draft ? <TryIt api={data.draft} refused={refused} /> : <Empty title="No draft">The sandbox serves drafts; this API has none.</Empty>)}
      {tab === "hot" && <HotKeysPanel id={id} api={data.live} />}
      {tab === "versions" && <Versions key={historyTick} id={id} draft={data.draft} live={data.live} liveEtag={data.liveEtag} onChanged={() => { reload(); setHistoryTick((t) => t + 1); }} />}
      {dialog === "mapping" && data.draft && (
        <ApiFormDialog
          draft={data.draft}
          etag={data.draftEtag}
          onClose={() => setDialog(null)}
          onSaved={() => {
            setDialog(null);
            reload();
          }}
        />
      )}
      {dialog === "delete" && data.draft && (
        <ConfirmDialog
          title={`Delete the draft ${id}?`}
          confirmLabel={`Delete the draft ${id}`}
          typeToConfirm={id}
          onClose={() => setDialog(null)}
          onConfirm={async () => {
            await request("DELETE", `/sandbox/apis/${encodeURIComponent(id)}`, { ifMatch: data.draftEtag });
            toast(`Deleted the draft ${id}`);
            setDialog(null);
            if (data.live) reload();
            else navigate("/apis");
          }}
        >
          <p>
            The sandbox stops serving <b>{id}</b> and its unsaved work is gone. {data.live ? `The live v${data.live.version} is not touched.` : "It was never published."} The deletion is recorded in the
            audit log.
          </p>
        </ConfirmDialog>
      )}
      {dialog === "unpublish" && data.live && (
        <ConfirmDialog
          title={`Unpublish ${id} from every gateway?`}
          confirmLabel={`Unpublish ${id}`}
          typeToConfirm={id}
          onClose={() => setDialog(null)}
          onConfirm={async () => {
            await request("DELETE", `/apis/${encodeURIComponent(id)}`, { ifMatch: data.liveEtag });
            toast(`Unpublished ${id}: merchants get 404 on it within a second`);
            setDialog(null);
            reload();
            setHistoryTick((t) => t + 1);
          }}
        >
          <p>
            Every gateway stops serving <b>{id}</b> (v{data.live.version}): merchants calling <code>{data.live.http.method} {data.live.http.path}</code> get 404. Its versions stay in history,
            so it can be published again; the draft stays in the sandbox. The change is recorded in the audit log with your name.
          </p>
        </ConfirmDialog>
      )}
      {publishing && data.draft && (
        <PublishDialog
          id={id}
          draft={data.draft}
          live={data.live}
          liveEtag={data.liveEtag}
          onClose={() => setPublishing(false)}
          onDone={() => {
            setPublishing(false);
            reload();
            setHistoryTick((t) => t + 1);
          }}
        />
      )}
    </div>
  );
}

// ---- diff view ----

export function DiffView({ before, after, emptyText = "No differences." }: { before: unknown; after: unknown; emptyText?: string }) {
  const lines = useMemo(() => diffLines(before === undefined ? "" : canonical(comparable(before)), canonical(comparable(after))), [before, after]);
  const changes = lines.filter((l) => l.op !== " ").length;
  if (!changes) return <div class="muted diff-empty">{emptyText}</div>;
  // Show changes with 3 lines of context.
  const keep = lines.map((_, i) => lines.slice(Math.max(0, i - 3), i + 4).some((l) => l.op !== " "));
  const out = [];
  let skipped = 0;
  for (let i = 0; i < lines.length; i++) {
    if (!keep[i]) {
      skipped++;
      continue;
    }
    if (skipped) {
      out.push(
        <div key={`s${i}`} class="diff-skip">
          ⋯ {skipped} unchanged line{skipped === 1 ? "" : "s"}
        </div>,
      );
      skipped = 0;
    }
    const l = lines[i];
    out.push(
      <div key={i} class={cx("diff-line", l.op === "+" && "add", l.op === "-" && "del")}>
        <span class="diff-op">{l.op}</span>
        {l.text}
      </div>,
    );
  }
  if (skipped) out.push(<div key="end" class="diff-skip">⋯ {skipped} unchanged line{skipped === 1 ? "" : "s"}</div>);
  return (
    <div class="diff" data-testid="diff">
      <div class="diff-stat">
        <span class="add-text">+{lines.filter((l) => l.op === "+").length}</span> <span class="del-text">−{lines.filter((l) => l.op === "-").length}</span>
      </div>
      {out}
    </div>
  );
}

function PublishDialog(props: { id: string; draft: ApiDef; live: ApiDef | null; liveEtag?: string; onClose: () => void; onDone: () => void }) {
  const [comment, setComment] = useState("");
  const { run: publish, busy, error } = useAction(async () => {
    const r = await request<{ version: number }>("POST", `/apis/${encodeURIComponent(props.id)}/publish`, {
      body: comment.trim() ? { comment: comment.trim() } : {},
      ...(props.live ? { ifMatch: props.liveEtag } : { ifNoneMatch: true }),
    });
    toast(`Published ${props.id} v${r.data.version}: gateways apply it within a second`);
    props.onDone();
  });
  return (
    <Modal
      wide
      title={props.live ? `Publish ${props.id}: v${props.live.version ?? 0} → v${(props.live.version ?? 0) + 1}` : `Publish ${props.id} for the first time`}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button kind="primary" busy={busy} onClick={publish} data-testid="confirm-publish">
            Publish to every gateway
          </Button>
        </>
      }
    >
      <p class="muted">
        The draft is validated against the live tree, written as the next version (the current one stays in history for rollback), and pushed to every gateway through ZooKeeper.
      </p>
      <h3>Changes to the live API</h3>
      {props.live ? <DiffView before={props.live} after={props.draft} /> : <DiffView before={undefined} after={props.draft} />}
      <Field label="Comment (audit log)">
        <input value={comment} placeholder="e.g. raise the timeout for the sale" onInput={(e) => setComment((e.target as HTMLInputElement).value)} />
      </Field>
      <ErrorBanner error={error} title="Publish refused" />
    </Modal>
  );
}

// ---- who the response cache answers (docs/operations/caching.md, "Caching and hot keys") ----

/** One line saying whether the API's answers are cached, for how long and for whom. */
export function cacheSummary(doc: ApiDef): string {
  const p = doc.policy ?? {};
  const c = p.cache;
  const anonymous = doc.auth === "none";
  const whom = c?.shared ? "one answer for every app (shared)" : anonymous ? "per request (anonymous API)" : "per app: never served to another app";
  const what = c?.query ? `query parameters ${c.query.length ? c.query.join(", ") : "(none)"}` : "the whole query";
  const keyed = c?.key?.length ? ` · key ${c.key.join(" + ")}` : "";
  if (c && (c.ttl_ms ?? 0) === 0) return "Response cache: off (ttl 0, hot keys are never cached)";
  if (c) return `Response cache: ${c.ttl_ms} ms · ${whom} · ${what}${keyed}`;
  const auto = p.hot_keys?.auto_cache_ms;
  if (p.hot_keys && p.read_only && auto) return `Response cache: hot keys only, ${auto} ms · ${whom}`;
  return "Response cache: none";
}

// ---- policy editor ----

const BREAKER_FIELDS: [keyof NonNullable<Policy["breaker"]>, string, string][] = [
  ["consecutive_failures", "Consecutive failures", "open after this many failures in a row"],
  ["slow_call_ms", "Slow call (ms)", "a call slower than this counts as slow"],
  ["consecutive_slow_calls", "Consecutive slow calls", "open after this many slow calls in a row"],
  ["open_ms", "Open for (ms)", "how long the breaker stays open"],
  ["half_open_probes", "Half-open probes", "trial calls before closing again"],
  ["error_ratio", "Error ratio", "more than 0, at most 1: open when this share of calls fails…"],
  ["min_calls", "Min calls", "…over at least this many calls…"],
  ["window_ms", "Window (ms)", "…in this window"],
];

type RL = { key: string; limit: string; per: string; burst: string };
type Form = {
  description: string;
  timeout_ms: string;
  auth: string;
  bulkhead_max: string;
  bulkhead_wait: string;
  breaker: Record<string, string>;
  rate_limits: RL[];
  max_body_bytes: string;
};

const s = (v: unknown) => (v === undefined || v === null ? "" : String(v));

function toForm(d: ApiDef): Form {
  const p = d.policy ?? {};
  return {
    description: s(d.description),
    timeout_ms: s(d.backend.timeout_ms),
    auth: d.auth ?? "signature",
    bulkhead_max: s(p.bulkhead?.max_concurrent),
    bulkhead_wait: s(p.bulkhead?.max_wait_ms),
    breaker: Object.fromEntries(BREAKER_FIELDS.map(([k]) => [k, s(p.breaker?.[k])])),
    rate_limits: (p.rate_limits ?? []).map((r) => ({
      key: Array.isArray(r.key) ? r.key.join(", ") : r.key ?? "api",
      limit: s(r.limit),
      per: r.per,
      burst: s(r.burst),
    })),
    max_body_bytes: s(p.max_body_bytes),
  };
}

const INT = /^\d+$/;
const NUM = /^\d*\.?\d+$/;

const U32_MAX = 4294967295;
const DAY_MS = 86_400_000;
/** Each number's documented range, as the registry checks it (registry/src/api/checks.rs). */
const RANGES: Record<string, [number, number]> = {
  "backend.timeout_ms": [1, MAX_TIMEOUT_MS],
  "policy.bulkhead.max_concurrent": [1, U32_MAX],
  "policy.bulkhead.max_wait_ms": [0, MAX_TIMEOUT_MS],
  "policy.breaker.consecutive_failures": [1, U32_MAX],
  "policy.breaker.consecutive_slow_calls": [1, U32_MAX],
  "policy.breaker.half_open_probes": [1, U32_MAX],
  "policy.breaker.min_calls": [1, U32_MAX],
  "policy.breaker.slow_call_ms": [1, MAX_TIMEOUT_MS],
  "policy.breaker.open_ms": [1, DAY_MS],
  "policy.breaker.window_ms": [1, DAY_MS],
  "policy.max_body_bytes": [1, Number.MAX_SAFE_INTEGER],
  limit: [1, U32_MAX],
};

/** "must be a whole number between 1 and 4294967295", as the registry says it. */
function rangeText(field: string): string {
  const [min, max] = RANGES[field] ?? RANGES.limit;
  return max === Number.MAX_SAFE_INTEGER ? `must be a whole number of at least ${min}` : `must be a whole number between ${min} and ${max}`;
}

/** Client-side checks of form: field path → message, the ranges mirroring the registry's (which stays the authority). */
function localErrors(f: Form): Record<string, string> {
  const e: Record<string, string> = {};
  const int = (v: string, field: string, required = false, range = field) => {
    const t = v.trim();
    if (!t) {
      if (required) e[field] = "required";
      return;
    }
    const [min, max] = RANGES[range] ?? [0, Number.MAX_SAFE_INTEGER];
    if (!INT.test(t) || Number(t) < min || Number(t) > max) e[field] = rangeText(range);
  };
  int(f.timeout_ms, "backend.timeout_ms");
  int(f.bulkhead_max, "policy.bulkhead.max_concurrent", !!f.bulkhead_wait.trim());
  int(f.bulkhead_wait, "policy.bulkhead.max_wait_ms");
  for (const [k] of BREAKER_FIELDS) {
    const v = f.breaker[k] ?? "";
    if (k === "error_ratio") {
      const t = v.trim();
      if (t && (!NUM.test(t) || Number(t) <= 0 || Number(t) > 1)) e[`policy.breaker.${k}`] = "must be in (0, 1]: more than 0, at most 1 (0.5 for half the calls)";
    } else int(v, `policy.breaker.${k}`);
  }
  f.rate_limits.forEach((r, i) => {
    int(r.limit, `policy.rate_limits[${i}].limit`, true, "limit");
    int(r.burst, `policy.rate_limits[${i}].burst`, false, "limit");
    if (!r.key.trim()) e[`policy.rate_limits[${i}].key`] = "required";
  });
  int(f.max_body_bytes, "policy.max_body_bytes");
  return e;
}

function fromForm(base: ApiDef, f: Form): ApiDef {
  const num = (v: string) => (v.trim() === "" ? undefined : Number(v.trim()));
  const policy: Policy = { ...(base.policy ?? {}) };
  const max = num(f.bulkhead_max);
  if (max !== undefined) policy.bulkhead = { max_concurrent: max, ...(num(f.bulkhead_wait) !== undefined ? { max_wait_ms: num(f.bulkhead_wait) } : {}) };
  else delete policy.bulkhead;
  const breaker: Record<string, number> = {};
  for (const [k] of BREAKER_FIELDS) {
    const v = num(f.breaker[k] ?? "");
    if (v !== undefined) breaker[k] = v;
  }
  if (Object.keys(breaker).length) policy.breaker = breaker;
  else delete policy.breaker;
  const limits = f.rate_limits.map((r) => {
    const parts = r.key.split(/[,+]/).map((x) => x.trim()).filter(Boolean);
    return {
      key: parts.length > 1 ? parts : parts[0] ?? "api",
      limit: num(r.limit) ?? 0,
      per: r.per as "second" | "minute",
      ...(num(r.burst) !== undefined ? { burst: num(r.burst) } : {}),
    };
  });
  if (limits.length) policy.rate_limits = limits;
  else delete policy.rate_limits;
  const mb = num(f.max_body_bytes);
  if (mb !== undefined) policy.max_body_bytes = mb;
  else delete policy.max_body_bytes;
  const out: ApiDef = {
    ...base,
    auth: f.auth as "signature" | "none",
    backend: { ...base.backend, ...(num(f.timeout_ms) !== undefined ? { timeout_ms: num(f.timeout_ms) } : {}) },
    policy,
  };
  if (f.description.trim()) out.description = f.description.trim();
  else delete out.description;
  return out;
}

function PolicyEditor({ draft, etag, onSaved }: { draft: ApiDef; etag?: string; onSaved: () => void }) {
  const [form, setForm] = useState<Form>(() => toForm(draft));
  const [serverErrors, setServerErrors] = useState<Detail[]>([]);
  const [touched, setTouched] = useState(false);
  const local = localErrors(form);
  const next = useMemo(() => fromForm(draft, form), [draft, form]);
  const dirty = !sameDoc(next, draft);
  const set = (patch: Partial<Form>) => {
    setForm((f) => ({ ...f, ...patch }));
    setTouched(true);
  };
  const errFor = (field: string): string | undefined => {
    if (local[field]) return local[field];
    const d = serverErrors.find((x) => x.field === field || (x.field && x.field.startsWith(field + ".")));
    return d?.reason;
  };
  const unplaced = serverErrors.filter((d) => !d.field || !document.querySelector(`[data-field="${CSS.escape(d.field)}"]`));

  const {
    run: save,
    busy,
    error,
    setError,
  } = useAction(
    async () => {
      setServerErrors([]);
      await request("PUT", `/sandbox/apis/${encodeURIComponent(draft.id)}`, { body: next, ifMatch: etag });
      toast(`Saved the draft of ${draft.id}: the sandbox serves it now`);
      setTouched(false);
      onSaved();
    },
    {
      onError: (e) => {
        if (e instanceof ApiError && e.code === "VALIDATION_FAILED") setServerErrors(e.details);
        return e;
      },
    },
  );
  const num = (field: string, label: string, value: string, onInput: (v: string) => void, hint?: string, placeholder?: string) => (
    <Field label={label} error={touched || serverErrors.length ? errFor(field) : local[field]} hint={hint}>
      <input data-field={field} name={field} inputMode="numeric" value={value} placeholder={placeholder ?? "default"} onInput={(e) => onInput((e.target as HTMLInputElement).value)} />
    </Field>
  );

  return (
    <div class="policy">
      <div class="card">
        <h3>Call</h3>
        <div class="grid-3">
          {num("backend.timeout_ms", "Backend timeout (ms)", form.timeout_ms, (v) => set({ timeout_ms: v }), "every call's deadline", "3000")}
          <Field label="Auth" error={errFor("auth")}>
            <select data-field="auth" value={form.auth} onChange={(e) => set({ auth: (e.target as HTMLSelectElement).value })}>
              <option value="signature">signature</option>
              <option value="none">none (public!)</option>
            </select>
          </Field>
          {num("policy.max_body_bytes", "Max body (bytes)", form.max_body_bytes, (v) => set({ max_body_bytes: v }), "default 1 MiB")}
        </div>
        <Field label="Description" error={errFor("description")}>
          <input data-field="description" value={form.description} onInput={(e) => set({ description: (e.target as HTMLInputElement).value })} />
        </Field>
      </div>
      <div class="card">
        <h3>Bulkhead</h3>
        <div class="grid-3">
          {num("policy.bulkhead.max_concurrent", "Max concurrent calls", form.bulkhead_max, (v) => set({ bulkhead_max: v }), "full → 503 BULKHEAD_FULL at once")}
          {num("policy.bulkhead.max_wait_ms", "Max wait (ms)", form.bulkhead_wait, (v) => set({ bulkhead_wait: v }), "wait for a slot at most this long", "0")}
        </div>
      </div>
      <div class="card">
        <h3>Circuit breaker</h3>
        <div class="grid-4">
          {BREAKER_FIELDS.map(([k, label, hint]) =>
            num(`policy.breaker.${k}`, label, form.breaker[k] ?? "", (v) => set({ breaker: { ...form.breaker, [k]: v } }), hint),
          )}
        </div>
      </div>
      <div class="card">
        <h3>Rate limits</h3>
        {form.rate_limits.length === 0 && <p class="muted">No per-API limit (apps' own limits still apply).</p>}
        {form.rate_limits.map((r, i) => {
          const upd = (patch: Partial<RL>) => set({ rate_limits: form.rate_limits.map((x, j) => (j === i ? { ...x, ...patch } : x)) });
          return (
            <div key={i} class="rl-row">
              <Field label="Key" error={errFor(`policy.rate_limits[${i}].key`)} hint="api, app, ip, header:Name; a list for a combined key">
                <input data-field={`policy.rate_limits[${i}].key`} value={r.key} onInput={(e) => upd({ key: (e.target as HTMLInputElement).value })} />
              </Field>
              <Field label="Limit" error={errFor(`policy.rate_limits[${i}].limit`)}>
                <input data-field={`policy.rate_limits[${i}].limit`} inputMode="numeric" value={r.limit} onInput={(e) => upd({ limit: (e.target as HTMLInputElement).value })} />
              </Field>
              <Field label="Per">
                <select value={r.per} onChange={(e) => upd({ per: (e.target as HTMLSelectElement).value })}>
                  <option value="second">second</option>
                  <option value="minute">minute</option>
                </select>
              </Field>
              <Field label="Burst" error={errFor(`policy.rate_limits[${i}].burst`)}>
                <input data-field={`policy.rate_limits[${i}].burst`} inputMode="numeric" value={r.burst} placeholder="= limit" onInput={(e) => upd({ burst: (e.target as HTMLInputElement).value })} />
              </Field>
              <Button small kind="ghost" class="rl-remove" onClick={() => set({ rate_limits: form.rate_limits.filter((_, j) => j !== i) })} aria-label="Remove this limit">
                Remove
              </Button>
            </div>
          );
        })}
        <Button small onClick={() => set({ rate_limits: [...form.rate_limits, { key: "app", limit: "100", per: "second", burst: "" }] })}>
          + Add a rate limit
        </Button>
      </div>
      {error && <ErrorBanner error={error} title={error instanceof ApiError && error.code === "VALIDATION_FAILED" ? "The gateways would reject this policy" : "Save failed"} />}
      {unplaced.length > 0 && !error && (
        <ul class="error-details">
          {unplaced.map((d, i) => (
            <li key={i}>
              {d.field && <code>{d.field}</code>} {d.reason}
            </li>
          ))}
        </ul>
      )}
      <div class="sticky-actions">
        <span class="muted">{dirty ? "Unsaved changes to the draft" : "The draft is saved"}</span>
        <Button disabled={!dirty} onClick={() => { setForm(toForm(draft)); setServerErrors([]); setError(null); setTouched(false); }}>
          Discard
        </Button>
        <Button kind="primary" busy={busy} disabled={!dirty || Object.keys(local).length > 0} onClick={save} data-testid="save-draft">
          Save draft
        </Button>
      </div>
    </div>
  );
}

// ---- try it ----

function templateVars(path: string): { name: string; multi: boolean }[] {
  const out: { name: string; multi: boolean }[] = [];
  for (const m of path.matchAll(/\{([^}=]+)(=([^}]*))?\}/g)) out.push({ name: m[1], multi: !!m[3] && m[3].includes("/") });
  return out;
}

function fillTemplate(path: string, values: Record<string, string>): string {
  return path.replace(/\{([^}=]+)(=([^}]*))?\}/g, (_, name: string, _eq, pattern?: string) => {
    const v = values[name] ?? "";
    return pattern && pattern.includes("/") ? v.split("/").map(encodeURIComponent).join("/") : encodeURIComponent(v);
  });
}

function statusTone(status: number) {
  if (status >= 500) return "bad";
  if (status >= 400) return "warn";
  return "ok";
}

function TryIt({ api, refused }: { api: ApiDef; refused: Served["refused"] }) {
  const bindings = [api.http, ...(api.http.additional_bindings ?? [])];
  const [binding, setBinding] = useState(0);
  const rule = bindings[binding] ?? api.http;
  const vars = templateVars(rule.path);
  const [values, setValues] = useState<Record<string, string>>({});
  const [query, setQuery] = useState("");
  const [headers, setHeaders] = useState("");
  const [body, setBody] = useState(rule.body ? "{\n  \n}" : "");
  const [apps, setApps] = useState<Item<{ status?: string; apis?: string[] }>[]>([]);
  const [appKey, setAppKey] = useState("");
  const [result, setResult] = useState<TryResult | null>(null);
  useEffect(() => {
    get<List<{ status?: string; apis?: string[] }>>("/sandbox/apps")
      .then((r) => setApps(r.data.items))
      .catch(() => setApps([]));
  }, []);
  const path = fillTemplate(rule.path, values);
  const missing = vars.filter((v) => !(values[v.name] ?? "").trim()).map((v) => v.name);
  let bodyError: string | undefined;
  if (body.trim()) {
    try {
      JSON.parse(body);
    } catch (e) {
      bodyError = `not valid JSON: ${(e as Error).message}`;
    }
  }
  const headerLines = headers
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const badHeader = headerLines.find((l) => !/^[A-Za-z0-9-]+\s*:/.test(l));
  const action = useAction(
    async () => {
      const hdrs: Record<string, string> = {};
      for (const l of headerLines) {
        const i = l.indexOf(":");
        hdrs[l.slice(0, i).trim()] = l.slice(i + 1).trim();
      }
      const r = await request<TryResult>("POST", "/sandbox/call", {
        body: {
          api_id: api.id,
          method: rule.method,
          path,
          ...(query.trim() ? { query: query.trim().replace(/^\?/, "") } : {}),
          ...(body.trim() ? { body } : {}),
          headers: hdrs,
          ...(appKey ? { app_key: appKey } : {}),
        },
      });
      setResult(r.data);
    },
    {
      onError: (e) => {
        setResult(null);
        return e;
      },
    },
  );
  const { busy, error } = action;
  const send = (e: Event) => {
    e.preventDefault();
    action.run();
  };
  const activeApps = apps.filter((a) => a.document?.status !== "disabled");
  return (
    <div class="try">
      <form class="card try-form" onSubmit={send}>
        <div class="try-line">
          <MethodBadge method={rule.method} />
          <code class="try-path" data-testid="try-path">
            {path}
            {query.trim() ? `?${query.trim().replace(/^\?/, "")}` : ""}
          </code>
          {bindings.length > 1 && (
            <select value={binding} onChange={(e) => setBinding(Number((e.target as HTMLSelectElement).value))} aria-label="Binding">
              {bindings.map((b, i) => (
                <option key={i} value={i}>
                  {b.method} {b.path}
                </option>
              ))}
            </select>
          )}
        </div>
        {vars.length > 0 && (
          <div class="grid-3">
            {vars.map((v) => (
              <Field key={v.name} label={`{${v.name}}`} hint={v.multi ? "may contain /" : "path variable"}>
                <input name={`var-${v.name}`} data-testid={`var-${v.name}`} value={values[v.name] ?? ""} onInput={(e) => setValues({ ...values, [v.name]: (e.target as HTMLInputElement).value })} />
              </Field>
            ))}
          </div>
        )}
        <div class="grid-2">
          <Field label="Query" hint="raw, e.g. status=ORDER_STATUS_PAID&tags=a">
            <input name="query" value={query} onInput={(e) => setQuery((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="Sign as (sandbox app)" hint={activeApps.length ? "the registry signs with the app's secret; it never reaches the browser" : <span class="warn-text">no active sandbox app: create one under Apps → Sandbox</span>}>
            <select name="app" value={appKey} onChange={(e) => setAppKey((e.target as HTMLSelectElement).value)}>
              <option value="">automatic (first app granted this API)</option>
              {apps.map((a) => (
                <option key={a.id} value={a.id}>
                  {a.id}
                  {a.document?.status === "disabled" ? " (disabled)" : ""}
                </option>
              ))}
            </select>
          </Field>
        </div>
        <div class={rule.body ? "grid-2" : ""}>
          {rule.body && (
            <Field label="Body (JSON)" error={bodyError} hint={`mapped to ${rule.body === "*" ? "the request message" : `field ${rule.body}`}`}>
              <textarea name="body" data-testid="try-body" rows={6} class="mono" value={body} onInput={(e) => setBody((e.target as HTMLTextAreaElement).value)} spellcheck={false} />
            </Field>
          )}
          <Field label="Extra headers" error={badHeader ? `"${badHeader}" is not Name: value` : undefined} hint={`one Name: value per line (e.g. x-demo-delay-ms: 200)${rule.body ? "" : "; this binding takes no body"}`}>
            <textarea name="headers" rows={rule.body ? 6 : 2} class="mono" value={headers} onInput={(e) => setHeaders((e.target as HTMLTextAreaElement).value)} spellcheck={false} />
          </Field>
        </div>
        <div class="form-actions">
          {missing.length > 0 && <span class="muted">Fill in {missing.map((m) => `{${m}}`).join(", ")}</span>}
          {refused.length > 0 && <span class="bad-text" data-testid="try-refused">The sandbox refuses this draft: a call would reach whatever it serves on this route instead.</span>}
          <Button
            kind="primary"
            type="submit"
            busy={busy}
            disabled={refused.length > 0 || missing.length > 0 || !!bodyError || !!badHeader}
            title={refused.length ? refusalText(refused).join("\n") : undefined}
            data-testid="try-send"
          >
            Send signed request
          </Button>
        </div>
      </form>
      <ErrorBanner error={error} title="The sandbox call could not be made" />
      {result && (
        <div class="try-result" data-testid="try-result">
          <div class="result-bar">
            <span class={`status-pill ${statusTone(result.response.status)}`} data-testid="try-status">
              {result.response.status}
            </span>
            <span>
              <b data-testid="try-latency">{result.latency_ms.toFixed(1)} ms</b> <span class="muted">via gateway node {result.node_id}</span>
            </span>
            {result.response.headers["x-portico-request-id"] && (
              <span class="muted">
                request id <code class="selectable">{result.response.headers["x-portico-request-id"]}</code>
              </span>
            )}
          </div>
          <div class="grid-2 align-start">
            <div class="card">
              <h3>Request</h3>
              <Code>{`${result.request.method} ${result.request.url}\n${Object.entries(result.request.headers)
                .map(([k, v]) => `${k}: ${v}`)
                .join("\n")}${result.request.body ? `\n\n${result.request.body}` : ""}`}</Code>
              {result.request.string_to_sign && (
                <details>
                  <summary>String to sign (docs/PROTOCOL.md, "Signing a request"), signed as {result.request.app_key}</summary>
                  <Code>{result.request.string_to_sign}</Code>
                </details>
              )}
            </div>
            <div class="card">
              <h3>
                Response <CopyButton text={result.response.body} label="Copy body" />
              </h3>
              <Code class="response-body">{pretty(result.response.body) || "(empty body)"}</Code>
              <details>
                <summary>{Object.keys(result.response.headers).length} response headers</summary>
                <Code>{Object.entries(result.response.headers).map(([k, v]) => `${k}: ${v}`).join("\n")}</Code>
              </details>
            </div>
          </div>
        </div>
      )}
    </div>
  );
}

// ---- versions ----

type History = { id: string; live_version: number | null; versions: { version: number; published_at: string; live: boolean }[] };

function Versions(props: { id: string; draft: ApiDef | null; live: ApiDef | null; liveEtag?: string; onChanged: () => void }) {
  const [hist, setHist] = useState<History | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [docs, setDocs] = useState<Record<string, ApiDef>>({});
  const [a, setA] = useState<string>("");
  const [b, setB] = useState<string>("");
  const [rollbackTo, setRollbackTo] = useState<number | null>(null);
  const enc = encodeURIComponent(props.id);
  useEffect(() => {
    get<History>(`/apis/${enc}/history`)
      .then((r) => {
        setHist(r.data);
        const vs = r.data.versions.map((v) => v.version);
        const live = r.data.live_version ?? vs[vs.length - 1];
        const prev = vs.filter((v) => v < (live ?? 0)).pop();
        setA(prev !== undefined ? String(prev) : String(live));
        setB(props.draft ? "draft" : String(live));
      })
      .catch((e) => {
        if (e instanceof ApiError && e.status === 404) setHist({ id: props.id, live_version: null, versions: [] });
        else setError(e);
      });
  }, [props.id]);
  const load = async (v: string) => {
    if (!v || v === "draft" || docs[v]) return;
    try {
      const r = await get<ApiDef>(`/apis/${enc}/history/${v}`);
      setDocs((d) => ({ ...d, [v]: r.data }));
    } catch (e) {
      setError(e);
    }
  };
  useEffect(() => {
    load(a);
    load(b);
  }, [a, b]);
  const docOf = (v: string) => (v === "draft" ? props.draft : docs[v]);
  if (error) return <ErrorBanner error={error} />;
  if (!hist) return <Spinner />;
  if (!hist.versions.length) return <Empty title="Never published">Publish the draft to make version 1; every later publish keeps the one before for rollback.</Empty>;
  const options = [...(props.draft ? [{ v: "draft", label: "draft (sandbox)" }] : []), ...[...hist.versions].reverse().map((x) => ({ v: String(x.version), label: `v${x.version}${x.live ? " (live)" : ""}` }))];
  return (
    <div class="versions">
      <div class="card table-card">
        <table class="table" data-testid="versions-table">
          <thead>
            <tr>
              <th>Version</th>
              <th>Published</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {[...hist.versions].reverse().map((v) => (
              <tr key={v.version}>
                <td>
                  <b>v{v.version}</b> {v.live && <Badge tone="ok">live</Badge>}
                </td>
                <td>{fmtTime(v.published_at)}</td>
                <td class="right">
                  <Button small kind="ghost" onClick={() => { setA(String(hist.live_version ?? v.version)); setB(String(v.version)); }}>
                    Compare with live
                  </Button>{" "}
                  {!v.live && (
                    <Button small kind="danger" onClick={() => { load(String(v.version)); setRollbackTo(v.version); }} data-testid={`rollback-${v.version}`}>
                      Roll back to v{v.version}…
                    </Button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <div class="card">
        <div class="compare-bar">
          <h3>Diff</h3>
          <select value={a} onChange={(e) => setA((e.target as HTMLSelectElement).value)} aria-label="From">
            {options.map((o) => (
              <option key={o.v} value={o.v}>
                {o.label}
              </option>
            ))}
          </select>
          <span>→</span>
          <select value={b} onChange={(e) => setB((e.target as HTMLSelectElement).value)} aria-label="To">
            {options.map((o) => (
              <option key={o.v} value={o.v}>
                {o.label}
              </option>
            ))}
          </select>
        </div>
        {docOf(a) && docOf(b) ? <DiffView before={docOf(a)} after={docOf(b)} emptyText="The two are the same (apart from the version number)." /> : <Spinner />}
      </div>
      {rollbackTo !== null && (
        <RollbackDialog
          id={props.id}
          version={rollbackTo}
          target={docs[String(rollbackTo)]}
          live={props.live}
          liveEtag={props.liveEtag}
          onClose={() => setRollbackTo(null)}
          onDone={() => {
            setRollbackTo(null);
            props.onChanged();
          }}
        />
      )}
    </div>
  );
}

function RollbackDialog(props: { id: string; version: number; target?: ApiDef; live: ApiDef | null; liveEtag?: string; onClose: () => void; onDone: () => void }) {
  const [comment, setComment] = useState("");
  const { run: go, busy, error } = useAction(async () => {
    const r = await request<{ version: number }>("POST", `/apis/${encodeURIComponent(props.id)}/rollback`, {
      body: { version: props.version, ...(comment.trim() ? { comment: comment.trim() } : {}) },
      ...(props.liveEtag ? { ifMatch: props.liveEtag } : {}),
    });
    toast(`Rolled back ${props.id}: v${props.version} is live again as v${r.data.version}`);
    props.onDone();
  });
  return (
    <Modal
      wide
      tone="danger"
      title={`Roll back ${props.id} to v${props.version}`}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button kind="danger" busy={busy} onClick={go} data-testid="confirm-rollback">
            Roll back every gateway to v{props.version}
          </Button>
        </>
      }
    >
      <p>
        v{props.version} is published again as a new version; the live v{props.live?.version} stays in history. The draft in the sandbox is not changed.
      </p>
      {props.target && props.live ? <DiffView before={props.live} after={props.target} /> : <Spinner />}
      <Field label="Comment (audit log)">
        <input value={comment} onInput={(e) => setComment((e.target as HTMLInputElement).value)} placeholder="e.g. v7 broke the checkout" />
      </Field>
      <ErrorBanner error={error} title="Rollback refused" />
    </Modal>
  );
}

export function gotoApi(id: string) {
  navigate(`/apis/${encodeURIComponent(id)}`);
}
