// Alerts: the rules of the live tree (alerts/<name>), the alerts pending or firing now as the
// registry evaluates them every 2 s, and the history of firings and resolutions with what was
// sent (docs/operations/alerts.md, "Alerts"). The banner at the top of every page is AlertBanner.
import { useState } from "preact/hooks";
import { AlertRule, Item, get, request } from "../api";
import { useAction, useLoad } from "../shared/hooks";
import { Badge, Button, ConfirmDialog, Empty, ErrorBanner, Link, ago, pretty, toast, usePoll } from "../ui";

export type { AlertRule };
export type AlertNow = {
  rule: string;
  api: string;
  condition: string;
  severity: string;
  state: "pending" | "firing" | "resolving";
  value: number | null;
  threshold: number;
  started_at_ms: number;
  fired_at_ms: number | null;
  summary: string;
};
export type AlertEvent = {
  id: number;
  at_ms: number;
  rule: string;
  api: string;
  condition: string;
  severity: string;
  state: "firing" | "resolved";
  value: number | null;
  threshold: number;
  started_at_ms: number;
  notifications?: { receivers?: { kind: string; target: string; ok: boolean; attempts: number; error?: string }[] } | null;
};
export type Alerting = {
  evaluating: boolean;
  leader: boolean;
  evaluated_at_ms: number | null;
  rules: number;
  problem: string | null;
  alerts: AlertNow[];
  events: AlertEvent[];
};

const CONDITIONS = ["tp99_ms_above", "availability_below", "qps_above", "qps_below", "breaker_open", "node_missing", "config_lag_above"];

function tone(state: string) {
  return state === "firing" || state === "resolving" ? "bad" : state === "pending" ? "warn" : "ok";
}

/** A red banner on every page while any alert is firing. */
export function AlertBanner() {
  const [firing, setFiring] = useState<AlertNow[]>([]);
  usePoll(async () => {
    try {
      const r = await get<Alerting>("/alerting", { query: { limit: "1" } });
      setFiring(r.data.alerts.filter((a) => a.state !== "pending"));
    } catch {
      setFiring([]);
    }
  }, 5000);
  if (firing.length === 0) return null;
  return (
    <div class="alert-banner" role="alert" data-testid="alert-banner">
      <b>{firing.length} alert{firing.length > 1 ? "s" : ""} firing:</b> {firing.slice(0, 3).map((a) => a.summary).join(" · ")}
      {firing.length > 3 ? " …" : ""} <Link to="/alerts">Open Alerts</Link>
    </div>
  );
}

function RuleForm({ onSaved }: { onSaved: () => void }) {
  const [name, setName] = useState("");
  const [text, setText] = useState(
    pretty({ api: "*", condition: "tp99_ms_above", threshold: 200, for_s: 10, severity: "page", receivers: [{ webhook: "http://127.0.0.1:7000/hook" }] }),
  );
  const saveAction = useAction(async () => {
    await request("PUT", `/alerts/${encodeURIComponent(name.trim())}`, { body: JSON.parse(text) });
    toast(`Alert rule ${name} saved`);
    onSaved();
  });
  const { busy, error } = saveAction;
  const save = async (e: Event) => {
    e.preventDefault();
    await saveAction.run();
  };
  return (
    <form class="card rule-form" onSubmit={save} data-testid="rule-form">
      <h3>New or changed rule</h3>
      <p class="muted">Conditions: {CONDITIONS.join(", ")}. availability_below takes a fraction (0.999).</p>
      <input name="rule-name" placeholder="rule name, e.g. order-slow" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} required />
      <textarea name="rule-json" rows={8} class="mono" value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} />
      <ErrorBanner error={error} title="Not saved" />
      <Button kind="primary" busy={busy} type="submit">
        Save rule
      </Button>
    </form>
  );
}

export function AlertsPage() {
  const [n, setN] = useState(0);
  const loaded = useLoad(
    async () => {
      const [s, r] = await Promise.all([get<Alerting>("/alerting", { query: { limit: "100" } }), get<{ items: Item<AlertRule>[] }>("/alerts")]);
      return { state: s.data, rules: r.data.items };
    },
    [n],
    2000,
  );
  const state = loaded.data?.state ?? null;
  const rules = loaded.data?.rules ?? [];
  const error = loaded.error;
  // Removing asks first, naming the rule (the dialog shows a refusal and stays open).
  const [removing, setRemoving] = useState<Item<AlertRule> | null>(null);
  const remove = async (id: string) => {
    await request("DELETE", `/alerts/${encodeURIComponent(id)}`);
    toast(`Alert rule ${id} removed`);
    setN((x) => x + 1);
  };
  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Alerts</h1>
          <p class="muted">
            Rules evaluated every 2 s over the last 10 s of every gateway's metrics
            {state?.evaluated_at_ms ? ` · evaluated ${ago(state.evaluated_at_ms)}` : ""}
            {state ? (state.leader ? " · this registry sends the notifications" : " · another registry sends the notifications") : ""}.
          </p>
        </div>
      </header>
      <ErrorBanner error={error} title="Could not refresh" />
      {state?.problem && <ErrorBanner error={new Error(state.problem)} title="Evaluation" />}
      <h2>Now</h2>
      {state && state.alerts.length === 0 ? (
        <Empty title="No alert pending or firing" />
      ) : (
        <div class="card table-card">
          <table class="table" data-testid="alerts-now">
            <thead>
              <tr><th>State</th><th>Rule</th><th>API</th><th>Summary</th><th>Since</th></tr>
            </thead>
            <tbody>
              {(state?.alerts ?? []).map((a) => (
                <tr key={`${a.rule}@${a.api}`}>
                  <td><Badge tone={tone(a.state)}>{a.state}</Badge></td>
                  <td>{a.rule}</td>
                  <td>{a.api}</td>
                  <td>{a.summary}</td>
                  <td>{ago(a.started_at_ms)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h2>Rules</h2>
      <div class="card table-card">
        <table class="table" data-testid="alert-rules">
          <thead>
            <tr><th>Name</th><th>API</th><th>Condition</th><th>Threshold</th><th>For</th><th>Severity</th><th>Receivers</th><th /></tr>
          </thead>
          <tbody>
            {rules.map((r) => (
              <tr key={r.id}>
                <td>{r.id}</td>
                <td>{r.document?.api ?? "*"}</td>
                <td>{r.document?.condition ?? r.error}</td>
                <td>{r.document?.threshold ?? "—"}</td>
                <td>{r.document?.for_s ?? 0} s</td>
                <td>{r.document?.severity ?? "warning"}</td>
                <td>{(r.document?.receivers ?? []).map((x) => x.webhook ?? x.email).join(", ") || "console only"}</td>
                <td><Button small onClick={() => setRemoving(r)} data-testid={`remove-${r.id}`}>Remove</Button></td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <RuleForm onSaved={() => setN((x) => x + 1)} />
      {removing && (
        <ConfirmDialog title={`Remove alert rule ${removing.id}`} action="Remove rule" testid="confirm-remove-rule" run={() => remove(removing.id)} onClose={() => setRemoving(null)}>
          <p>
            Rule <b>{removing.id}</b>
            {removing.document ? (
              <>
                {" "}
                ({removing.document.condition} {removing.document.threshold} on <b>{removing.document.api ?? "every API"}</b>)
              </>
            ) : null}{" "}
            is deleted and no longer evaluated; its receivers are sent nothing more about it. Its past events stay in the history.
          </p>
        </ConfirmDialog>
      )}
      <h2>History</h2>
      {state && state.events.length === 0 ? (
        <Empty title="No alert has fired yet" />
      ) : (
        <div class="card table-card">
          <table class="table compact" data-testid="alert-history">
            <thead>
              <tr><th>When</th><th>State</th><th>Rule</th><th>API</th><th>Value</th><th>Threshold</th><th>Notified</th></tr>
            </thead>
            <tbody>
              {(state?.events ?? []).map((e) => (
                <tr key={e.id}>
                  <td title={new Date(e.at_ms).toISOString()}>{ago(e.at_ms)}</td>
                  <td><Badge tone={e.state === "firing" ? "bad" : "ok"}>{e.state}</Badge></td>
                  <td>{e.rule}</td>
                  <td>{e.api}</td>
                  <td>{e.value === null ? "no data" : e.value}</td>
                  <td>{e.threshold}</td>
                  <td>
                    {e.notifications?.receivers?.length
                      ? e.notifications.receivers.map((r) => `${r.target}: ${r.ok ? "ok" : r.error ?? "failed"}`).join(", ")
                      : "—"}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
