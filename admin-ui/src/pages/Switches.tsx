// Switches: every published API's degradation state at a glance; degrade or restore with a
// confirmation and a required reason; the audit trail beside it.
import { useMemo, useState } from "preact/hooks";
import { ApiDef, AuditEntry, Item, List, Switch, get, request } from "../api";
import { useAction, useLoad } from "../shared/hooks";
import { Badge, Button, Empty, ErrorBanner, Field, Link, MethodBadge, Modal, Spinner, ago, cx, fmtTime, pretty, toast } from "../ui";
import { RefusedNote, refusalsOf } from "../served";

type Row = { id: string; api?: ApiDef; sw?: Item<Switch> };

/** Whether the gateways serve the API degraded: what they report when they refuse the switch
 * document (the kept version), else the document's own state. */
function servedDegraded(r: Row): boolean {
  const served = r.sw?.served;
  if (refusalsOf(r.sw).length) {
    if (served?.degraded !== undefined && served.degraded !== null) return served.degraded;
    return (served?.degraded_on?.length ?? 0) > 0;
  }
  return !!r.sw?.document?.degraded;
}

export function SwitchesPage() {
  const [filter, setFilter] = useState("");
  const [show, setShow] = useState<"all" | "degraded" | "normal">("all");
  const [acting, setActing] = useState<{ row: Row; degrade: boolean } | null>(null);
  const [auditTick, setAuditTick] = useState(0);

  const loaded = useLoad(
    async () => {
      const [a, s] = await Promise.all([get<List<ApiDef>>("/apis"), get<List<Switch>>("/switches")]);
      return { apis: a.data.items, switches: s.data.items };
    },
    [],
    3000,
  );
  const apis = loaded.data?.apis ?? null;
  const switches = loaded.data?.switches ?? null;
  const { error, reload: load } = loaded;

  const rows = useMemo(() => {
    const map = new Map<string, Row>();
    for (const a of apis ?? []) map.set(a.id, { id: a.id, api: a.document ?? undefined });
    for (const s of switches ?? []) map.set(s.id, { ...(map.get(s.id) ?? { id: s.id }), sw: s });
    return [...map.values()].sort((x, y) => {
      const dx = servedDegraded(x) || refusalsOf(x.sw).length ? 0 : 1;
      const dy = servedDegraded(y) || refusalsOf(y.sw).length ? 0 : 1;
      return dx - dy || x.id.localeCompare(y.id);
    });
  }, [apis, switches]);
  const degradedCount = rows.filter(servedDegraded).length;
  const refusedCount = rows.filter((r) => refusalsOf(r.sw).length).length;
  const f = filter.trim().toLowerCase();
  const shown = rows.filter((r) => {
    const deg = servedDegraded(r);
    if (show === "degraded" && !deg) return false;
    if (show === "normal" && deg) return false;
    if (!f) return true;
    return [r.id, r.api?.http.path, r.sw?.document?.reason, r.sw?.document?.updated_by].filter(Boolean).some((x) => String(x).toLowerCase().includes(f));
  });

  return (
    <div class="page page-split">
      <div class="split-main">
        <header class="page-head">
          <div>
            <h1>Switches</h1>
            <p class="muted">Degrade an API to a fallback answer on every gateway within milliseconds; restore it the same way.</p>
          </div>
        </header>
        <div class="summary-cards">
          <div class={cx("summary", degradedCount ? "bad" : "ok")} data-testid="degraded-count">
            <div class="summary-num">{apis ? degradedCount : "…"}</div>
            <div class="summary-label">degraded</div>
          </div>
          <div class="summary">
            <div class="summary-num">{apis ? rows.length - degradedCount : "…"}</div>
            <div class="summary-label">serving normally</div>
          </div>
          {refusedCount > 0 && (
            <div class="summary bad" data-testid="refused-count">
              <div class="summary-num">{refusedCount}</div>
              <div class="summary-label">refused by gateways</div>
            </div>
          )}
        </div>
        <div class="toolbar">
          <input class="search" type="search" placeholder="Search APIs, reasons, people…" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} data-testid="switch-search" />
          <div class="seg">
            {(["all", "degraded", "normal"] as const).map((k) => (
              <button key={k} class={cx("seg-btn", show === k && "active")} onClick={() => setShow(k)}>
                {k}
              </button>
            ))}
          </div>
        </div>
        <ErrorBanner error={error} title="Could not load the switches" />
        {apis === null ? (
          error ? null : <Spinner />
        ) : shown.length === 0 ? (
          <Empty title={rows.length ? "Nothing matches" : "No published APIs"}>{rows.length ? "Change the search or the filter." : "Publish an API first: switches act on live APIs."}</Empty>
        ) : (
          <div class="card table-card">
            <table class="table" data-testid="switches-table">
              <thead>
                <tr>
                  <th>State</th>
                  <th>API</th>
                  <th>Reason</th>
                  <th>Changed</th>
                  <th />
                </tr>
              </thead>
              <tbody>
                {shown.map((r) => {
                  const sw = r.sw?.document;
                  const deg = servedDegraded(r);
                  const refused = refusalsOf(r.sw).length > 0;
                  return (
                    <tr key={r.id} class={cx(deg && "row-degraded")} data-switch={r.id}>
                      <td>
                        {refused ? (
                          <span class="state state-bad" data-testid="state">
                            <i /> REFUSED
                          </span>
                        ) : deg ? (
                          <span class="state state-bad" data-testid="state">
                            <i /> DEGRADED
                          </span>
                        ) : (
                          <span class="state state-ok" data-testid="state">
                            <i /> normal
                          </span>
                        )}
                      </td>
                      <td>
                        <Link to={`/apis/${encodeURIComponent(r.id)}`} class="strong">
                          {r.id}
                        </Link>
                        {r.api && (
                          <div class="sub mapping">
                            <MethodBadge method={r.api.http.method} /> <code>{r.api.http.path}</code>
                          </div>
                        )}
                        {refused && r.sw && <RefusedNote item={r.sw} served={deg ? "degraded" : "normal"} />}
                        {deg && !refused && (
                          <div class="sub">
                            answers {sw?.fallback ? <code>{sw.fallback.status ?? 200} fallback</code> : <code>503 API_DEGRADED</code>}
                          </div>
                        )}
                      </td>
                      <td class="reason">{sw?.reason ?? <span class="muted">—</span>}</td>
                      <td>
                        {sw?.updated_at ? (
                          <span title={fmtTime(sw.updated_at)}>
                            {ago(sw.updated_at)}
                            <div class="sub">by {sw.updated_by ?? "?"}</div>
                          </span>
                        ) : r.sw?.written_at ? (
                          <span title={fmtTime(r.sw.written_at)}>
                            {ago(r.sw.written_at)}
                            <div class="sub">not through the registry</div>
                          </span>
                        ) : (
                          <span class="muted">never</span>
                        )}
                      </td>
                      <td class="right">
                        {deg ? (
                          <Button kind="success" onClick={() => setActing({ row: r, degrade: false })} data-testid={`restore-${r.id}`}>
                            Restore…
                          </Button>
                        ) : (
                          <Button kind="danger" onClick={() => setActing({ row: r, degrade: true })} data-testid={`degrade-${r.id}`}>
                            Degrade…
                          </Button>
                        )}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
        )}
      </div>
      <aside class="split-side">
        <AuditTrail key={auditTick} onlySwitches />
      </aside>
      {acting && (
        <SwitchDialog
          row={acting.row}
          degrade={acting.degrade}
          onClose={() => setActing(null)}
          onDone={() => {
            setActing(null);
            load();
            setAuditTick((t) => t + 1);
          }}
        />
      )}
    </div>
  );
}

function SwitchDialog({ row, degrade, onClose, onDone }: { row: Row; degrade: boolean; onClose: () => void; onDone: () => void }) {
  const prev = row.sw?.document;
  const [reason, setReason] = useState("");
  const [message, setMessage] = useState(prev?.message ?? "");
  const [custom, setCustom] = useState(!!prev?.fallback);
  const [status, setStatus] = useState(String(prev?.fallback?.status ?? 200));
  const [headers, setHeaders] = useState(prev?.fallback?.headers ? pretty(prev.fallback.headers) : '{\n  "X-Degraded": "1"\n}');
  const [body, setBody] = useState(prev?.fallback?.body !== undefined ? pretty(prev.fallback.body) : "{}");
  const [tried, setTried] = useState(false);

  const parse = (text: string): [unknown, string | undefined] => {
    if (!text.trim()) return [undefined, undefined];
    try {
      return [JSON.parse(text), undefined];
    } catch (e) {
      return [undefined, `not valid JSON: ${(e as Error).message}`];
    }
  };
  const [hdrs, hdrErr0] = parse(headers);
  const hdrErr =
    hdrErr0 ??
    (hdrs !== undefined && (typeof hdrs !== "object" || Array.isArray(hdrs) || Object.values(hdrs as object).some((v) => typeof v !== "string"))
      ? 'an object of strings, e.g. {"X-Degraded": "1"}'
      : undefined);
  const [bodyVal, bodyErr] = parse(body);
  const statusErr = !/^\d{3}$/.test(status) || Number(status) < 100 || Number(status) > 599 ? "an HTTP status, 100–599" : undefined;
  const reasonErr = reason.trim() ? undefined : "required: say why, for the people on call after you";
  const messageErr = message.length > 200 || /[\u0000-\u001f\u007f]/.test(message) ? "at most 200 characters on one line" : undefined;
  const invalid = !!reasonErr || (degrade && !custom && !!messageErr) || (degrade && custom && (!!hdrErr || !!bodyErr || !!statusErr));

  const submitAction = useAction(async () => {
    const fallback = custom ? { status: Number(status), ...(hdrs ? { headers: hdrs as Record<string, string> } : {}), ...(bodyVal !== undefined ? { body: bodyVal } : {}) } : undefined;
    // A key-level switch keeps its match (re-degrading it needs one).
    const publicMessage = degrade && !custom && message.trim() ? { message: message.trim() } : {};
    const doc: Switch = { degraded: degrade, reason: reason.trim(), ...publicMessage, ...(prev?.match ? { match: prev.match } : {}), ...(degrade ? (fallback ? { fallback } : {}) : prev?.fallback ? { fallback: prev.fallback } : {}) };
    await request("PUT", `/switches/${encodeURIComponent(row.id)}`, row.sw ? { body: doc, ifMatch: row.sw.etag } : { body: doc, ifNoneMatch: true });
    toast(degrade ? `${row.id} is degraded on every gateway` : `${row.id} is restored on every gateway`);
    onDone();
  });
  const { busy, error } = submitAction;
  const submit = async () => {
    setTried(true);
    if (invalid) return;
    await submitAction.run();
  };

  return (
    <Modal
      tone={degrade ? "danger" : "default"}
      wide={degrade}
      title={degrade ? `Degrade ${row.id}?` : `Restore ${row.id}?`}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button kind={degrade ? "danger" : "success"} busy={busy} onClick={submit} disabled={tried && invalid} data-testid="confirm-switch">
            {degrade ? `Degrade ${row.id}` : `Restore ${row.id}`}
          </Button>
        </>
      }
    >
      {degrade ? (
        <p>
          Every gateway stops calling the backend of <b>{row.id}</b> and answers at once with {custom ? "the fallback below" : <code>503 API_DEGRADED</code>}. Merchants see it within milliseconds.
        </p>
      ) : (
        <p>
          Every gateway calls the backend of <b>{row.id}</b> again. Degraded since {fmtTime(prev?.updated_at ?? undefined)} by {prev?.updated_by ?? "?"}: “{prev?.reason}”.
        </p>
      )}
      <Field label="Reason" error={tried ? reasonErr : undefined} hint="required; kept on the switch and in the audit log; never shown to merchants">
        <textarea name="reason" data-testid="switch-reason" rows={2} value={reason} placeholder={degrade ? "e.g. order DB failover, INC-4711" : "e.g. DB healthy again"} onInput={(e) => setReason((e.target as HTMLTextAreaElement).value)} data-autofocus />
      </Field>
      {degrade && (
        <>
          <div class="radio-row">
            <label>
              <input type="radio" name="fallback-kind" checked={!custom} onChange={() => setCustom(false)} /> 503 <code>API_DEGRADED</code> (the standard envelope)
            </label>
            <label>
              <input type="radio" name="fallback-kind" checked={custom} onChange={() => setCustom(true)} data-testid="custom-fallback" /> a custom fallback response
            </label>
          </div>
          {!custom && (
            <Field label="Message for merchants" error={messageErr} hint="the envelope's message; empty: “the API is temporarily unavailable”">
              <input name="message" data-testid="switch-message" value={message} maxLength={200} placeholder="e.g. ordering is paused, back by 10:00 UTC" onInput={(e) => setMessage((e.target as HTMLInputElement).value)} />
            </Field>
          )}
          {custom && (
            <div class="fallback-grid">
              <Field label="Status" error={statusErr}>
                <input name="fallback-status" data-testid="fallback-status" value={status} inputMode="numeric" onInput={(e) => setStatus((e.target as HTMLInputElement).value)} />
              </Field>
              <Field label="Headers (JSON object)" error={hdrErr}>
                <textarea name="fallback-headers" class="mono" rows={3} value={headers} onInput={(e) => setHeaders((e.target as HTMLTextAreaElement).value)} spellcheck={false} />
              </Field>
              <Field label="Body (JSON)" error={bodyErr} class="span-2">
                <textarea name="fallback-body" data-testid="fallback-body" class="mono" rows={5} value={body} onInput={(e) => setBody((e.target as HTMLTextAreaElement).value)} spellcheck={false} />
              </Field>
            </div>
          )}
        </>
      )}
      <ErrorBanner error={error} title={degrade ? "The switch was not turned on" : "The switch was not turned off"} />
    </Modal>
  );
}

/** The actor of audit entries for changes made outside the registry (docs/operations/registry.md, "Changes outside the registry"). */
const OUTSIDE_ACTOR = "outside the registry";

const ACTION_TONE: Record<string, string> = {
  "outside.write": "warn",
  "outside.delete": "warn",
  "switch.on": "bad",
  "switch.off": "ok",
  "switch.delete": "neutral",
  "api.publish": "info",
  "api.rollback": "warn",
  "app.disable": "warn",
  "app.rotate_secret": "warn",
};

export function AuditTrail({ onlySwitches }: { onlySwitches?: boolean }) {
  const [all, setAll] = useState(!onlySwitches);
  const { data: entries, error } = useLoad(async () => (await get<{ entries: AuditEntry[] }>("/audit", { query: { limit: "200" } })).data.entries, [], 5000);
  const shown = (entries ?? []).filter((e) => all || e.action.startsWith("switch.") || (e.action.startsWith("outside.") && /^(sandbox\/)?switches\//.test(e.target))).slice(0, 60);
  return (
    <div class="card audit" data-testid="audit">
      <div class="audit-head">
        <h3>Audit trail</h3>
        <label class="check">
          <input type="checkbox" checked={all} onChange={(e) => setAll((e.target as HTMLInputElement).checked)} /> all changes
        </label>
      </div>
      <ErrorBanner error={error} />
      {entries === null && !error && <Spinner />}
      {entries !== null && shown.length === 0 && <div class="muted">No {all ? "" : "switch "}changes yet.</div>}
      <ol class="timeline">
        {shown.map((e) => (
          <li key={e.id}>
            <div class="tl-head">
              <Badge tone={ACTION_TONE[e.action] ?? "neutral"}>{e.action}</Badge>
              <span class="muted" title={fmtTime(e.at)}>
                {ago(e.at)}
              </span>
            </div>
            <div class="tl-body">
              <code>{e.target.replace(/^switches\//, "")}</code> by <b>{e.actor}</b>
              {e.actor === OUTSIDE_ACTOR ? (
                <div class={e.detail?.valid === false ? "tl-reason bad-text" : "tl-reason"} data-testid="outside-entry">
                  {e.detail?.deleted ? "deleted with zkCli or another ZooKeeper client" : e.detail?.valid === false ? `refused by the gateways: ${e.detail?.reason ?? "invalid"}` : "valid; written with zkCli or another ZooKeeper client"}
                </div>
              ) : (
                e.detail?.reason && <div class="tl-reason">“{e.detail.reason}”</div>
              )}
              {e.detail?.comment && <div class="tl-reason">“{e.detail.comment}”</div>}
            </div>
            <div class="tl-rid">{e.request_id}</div>
          </li>
        ))}
      </ol>
    </div>
  );
}
