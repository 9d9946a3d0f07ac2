// Reports: the daily or weekly report per API and for the platform, from the registry's history
// store (docs/operations/history-and-reports.md, "Reports"): calls, availability, TP50/90/99/999, top error codes,
// slowest APIs, breaker openings, switch flips and the change vs the previous period.
// Degraded answers (a switch that is on) are their own figure and never lower availability
// (docs/operations/history-and-reports.md, "Availability and degraded answers").
import { useEffect, useState } from "preact/hooks";
import { ApiError, get, request, session } from "../api";
import { useAction } from "../shared/hooks";
import { LineChart, fmtNum } from "../charts";
import { Button, ConfirmDialog, Empty, ErrorBanner, Spinner, cx, toast } from "../ui";

type Figures = {
  api: string;
  owner?: string;
  calls: number;
  errors: number;
  degraded: number;
  availability: number | null;
  p50_ms: number | null;
  p90_ms: number | null;
  p99_ms: number | null;
  p999_ms: number | null;
  top_errors: { status: number; code: string; count: number }[];
  breaker_openings: number;
  switch_flips: number;
  change: { previous_calls: number; calls_pct: number | null; availability_pts: number | null; p99_pct: number | null };
  series: { at_ms: number; calls: number; errors: number; degraded: number }[];
};
type Report = { period: "day" | "week"; from_ms: number; to_ms: number; platform: Figures; apis: Figures[]; slowest: { api: string; p99_ms: number }[] };

const pct = (v: number | null) => (v === null ? "—" : `${(v * 100).toFixed(3)}%`);
const ms = (v: number | null) => (v === null ? "—" : `${v} ms`);
// In the table the unit is in the header.
const msNum = (v: number | null) => (v === null ? "—" : `${v}`);
const delta = (v: number | null, unit: string) => (v === null ? "—" : `${v >= 0 ? "+" : ""}${v}${unit}`);

function Row({ f }: { f: Figures }) {
  return (
    <tr>
      <td class="nowrap">{f.api === "*" ? <b>All APIs</b> : f.api}</td>
      <td class="num">{f.calls}</td>
      <td class="num">{pct(f.availability)}</td>
      <td class="num">{f.errors}</td>
      <td class="num" data-testid="degraded">{f.degraded ?? 0}</td>
      <td class="num">{msNum(f.p50_ms)}</td>
      <td class="num">{msNum(f.p90_ms)}</td>
      <td class="num">{msNum(f.p99_ms)}</td>
      <td class="num">{msNum(f.p999_ms)}</td>
      <td class="errors">
        {f.top_errors.length === 0
          ? "—"
          : f.top_errors.map((e) => (
              <span key={`${e.status} ${e.code}`} class="line">
                {e.status} {e.code} ×{e.count}
              </span>
            ))}
      </td>
      <td class="num">
        {f.breaker_openings} / {f.switch_flips}
      </td>
      <td class="num">
        <span class="sub">calls {delta(f.change.calls_pct, "%")}</span>
        <span class="sub">avail. {delta(f.change.availability_pts, " pts")}</span>
        <span class="sub">TP99 {delta(f.change.p99_pct, "%")}</span>
      </td>
    </tr>
  );
}

/**
 * Opens the HTML report in a new tab with the session's token: the page is fetched with the
 * Authorization header and shown from a blob URL (a plain link would carry no token: 401).
 * The tab is opened before the fetch, while the click still counts as the user's gesture.
 */
async function openHtml(period: string) {
  const tab = window.open("about:blank", "_blank");
  try {
    const headers: Record<string, string> = { Accept: "text/html" };
    const token = session.token();
    if (token) headers.Authorization = `Bearer ${token}`;
    const resp = await fetch(`/api/v1/reports?period=${encodeURIComponent(period)}&format=html`, { headers });
    if (!resp.ok) {
      let env: { code?: string; message?: string } = {};
      try {
        env = await resp.json();
      } catch {
        // not JSON: the status says enough
      }
      throw new ApiError(resp.status, env.code ?? `HTTP_${resp.status}`, env.message ?? resp.statusText);
    }
    const blob = new Blob([await resp.text()], { type: "text/html" });
    const url = URL.createObjectURL(blob);
    if (tab) tab.location.href = url;
    else window.location.href = url;
    // The tab has loaded it by then; the URL only holds the page in memory.
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (e) {
    tab?.close();
    throw e;
  }
}

export function ReportsPage() {
  const [period, setPeriod] = useState<"day" | "week">("day");
  const [report, setReport] = useState<Report | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [confirmSend, setConfirmSend] = useState(false);
  useEffect(() => {
    setReport(null);
    get<Report>("/reports", { query: { period } })
      .then((r) => {
        setReport(r.data);
        setError(null);
      })
      .catch(setError);
  }, [period]);
  const send = async () => {
    const r = await request<{ files: string[]; mails: { to: string; sent: boolean }[] }>("POST", "/reports/send", { query: { period } });
    toast(`${r.data.files.length} files written, ${r.data.mails.filter((m) => m.sent).length} of ${r.data.mails.length} owners mailed`);
  };
  // A failure to open the HTML report is the page's error (it replaces a load error).
  const { run: html, busy: opening } = useAction(() => openHtml(period), {
    onError: (e) => {
      setError(e);
      return null;
    },
  });
  const owners = report ? Array.from(new Set(report.apis.map((f) => f.owner).filter((o): o is string => !!o))) : [];
  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Reports</h1>
          <p class="muted">
            The rolling {period === "day" ? "24 hours" : "7 days"} up to now, from this registry's history store
            {report ? ` · ${new Date(report.from_ms).toLocaleString()} to ${new Date(report.to_ms).toLocaleString()}` : ""}.
          </p>
        </div>
        <div class="head-actions">
          <div class="seg">
            {(["day", "week"] as const).map((p) => (
              <button key={p} class={cx("seg-btn", period === p && "active")} onClick={() => setPeriod(p)}>
                {p}
              </button>
            ))}
          </div>
          <Button onClick={html} busy={opening} data-testid="report-html">
            HTML
          </Button>
          <Button onClick={() => setConfirmSend(true)} data-testid="report-send">
            Send to owners now
          </Button>
        </div>
      </header>
      <ErrorBanner error={error} title="No report" />
      {!report && !error && <Spinner label="Building the report" />}
      {report && (
        <>
          <div class="summary-cards">
            <div class="summary"><div class="summary-num">{fmtNum(report.platform.calls, 0)}</div><div class="summary-label">calls</div></div>
            <div class="summary"><div class="summary-num">{pct(report.platform.availability)}</div><div class="summary-label">availability (non-5xx, degraded answers apart)</div></div>
            <div class="summary" data-testid="summary-degraded"><div class="summary-num">{fmtNum(report.platform.degraded ?? 0, 0)}</div><div class="summary-label">degraded answers (switches on)</div></div>
            <div class="summary"><div class="summary-num">{ms(report.platform.p99_ms)}</div><div class="summary-label">TP99</div></div>
            <div class="summary"><div class="summary-num">{report.platform.breaker_openings}</div><div class="summary-label">breaker openings</div></div>
          </div>
          <div class="card">
            <LineChart
              title={`Calls per ${period === "day" ? "hour" : "6 hours"}`}
              times={report.platform.series.map((p) => p.at_ms)}
              series={[
                { name: "calls", color: "#2f6fed", values: report.platform.series.map((p) => p.calls) },
                { name: "5xx", color: "#c62828", values: report.platform.series.map((p) => p.errors) },
                { name: "degraded", color: "#8a63d2", values: report.platform.series.map((p) => p.degraded ?? 0) },
              ]}
            />
          </div>
          {report.slowest.length > 0 && (
            <p data-testid="slowest">
              Slowest (TP99): {report.slowest.map((s) => `${s.api} ${s.p99_ms} ms`).join(" · ")}
            </p>
          )}
          {report.apis.length === 0 ? (
            <Empty title="No traffic recorded in this period" />
          ) : (
            <div class="card table-card">
              <table class="table compact dense" data-testid="report-table">
                <thead>
                  <tr>
                    <th>API</th><th>Calls</th><th>Availability</th><th>5xx</th><th title="Answers of a switch that is on (503 API_DEGRADED or its fallback): not failures">Degraded</th>
                    <th>TP50 ms</th><th>TP90 ms</th><th>TP99 ms</th><th>TP99.9 ms</th><th>Top errors</th>
                    <th title="Breaker openings / switch flips">Breaker / switch</th><th>vs previous</th>
                  </tr>
                </thead>
                <tbody>
                  <Row f={report.platform} />
                  {report.apis.map((f) => (
                    <Row key={f.api} f={f} />
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
      {confirmSend && (
        <ConfirmDialog
          title={`Send the ${period === "day" ? "daily" : "weekly"} report to the owners now`}
          action="Send now"
          kind="primary"
          testid="confirm-send"
          run={send}
          onClose={() => setConfirmSend(false)}
        >
          <p>
            The {period === "day" ? "daily (last 24 hours)" : "weekly (last 7 days)"} report is written to the reports directory and mailed now,
            outside its schedule, to{" "}
            {owners.length === 0 ? "the owners of the APIs (none is named in this report)" : <b>{owners.join(", ")}</b>}.
          </p>
        </ConfirmDialog>
      )}
    </div>
  );
}
