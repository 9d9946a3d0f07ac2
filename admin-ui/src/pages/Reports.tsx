// Reports: the daily or weekly report per API and for the platform, from the registry's history
// store (docs/OPERATIONS.md, "Reports"): calls, availability, TP50/90/99/999, top error codes,
// slowest APIs, breaker openings, switch flips and the change vs the previous period.
import { useEffect, useState } from "preact/hooks";
import { get, request } from "../api";
import { LineChart, fmtNum } from "../charts";
import { Button, Empty, ErrorBanner, Spinner, cx, toast } from "../ui";

type Figures = {
  api: string;
  owner?: string;
  calls: number;
  errors: number;
  availability: number | null;
  p50_ms: number | null;
  p90_ms: number | null;
  p99_ms: number | null;
  p999_ms: number | null;
  top_errors: { status: number; code: string; count: number }[];
  breaker_openings: number;
  switch_flips: number;
  change: { previous_calls: number; calls_pct: number | null; availability_pts: number | null; p99_pct: number | null };
  series: { at_ms: number; calls: number; errors: number }[];
};
type Report = { period: "day" | "week"; from_ms: number; to_ms: number; platform: Figures; apis: Figures[]; slowest: { api: string; p99_ms: number }[] };

const pct = (v: number | null) => (v === null ? "—" : `${(v * 100).toFixed(3)}%`);
const ms = (v: number | null) => (v === null ? "—" : `${v} ms`);
const delta = (v: number | null, unit: string) => (v === null ? "—" : `${v >= 0 ? "+" : ""}${v}${unit}`);

function Row({ f }: { f: Figures }) {
  return (
    <tr>
      <td>{f.api === "*" ? <b>All APIs</b> : f.api}</td>
      <td>{f.calls}</td>
      <td>{pct(f.availability)}</td>
      <td>{ms(f.p50_ms)}</td>
      <td>{ms(f.p90_ms)}</td>
      <td>{ms(f.p99_ms)}</td>
      <td>{ms(f.p999_ms)}</td>
      <td>{f.top_errors.map((e) => `${e.status} ${e.code} ×${e.count}`).join(", ") || "—"}</td>
      <td>{f.breaker_openings}</td>
      <td>{f.switch_flips}</td>
      <td>{delta(f.change.calls_pct, "%")}</td>
      <td>{delta(f.change.availability_pts, " pts")}</td>
      <td>{delta(f.change.p99_pct, "%")}</td>
    </tr>
  );
}

export function ReportsPage() {
  const [period, setPeriod] = useState<"day" | "week">("day");
  const [report, setReport] = useState<Report | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
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
    setBusy(true);
    try {
      const r = await request<{ files: string[]; mails: { to: string; sent: boolean }[] }>("POST", "/reports/send", { query: { period } });
      toast(`${r.data.files.length} files written, ${r.data.mails.filter((m) => m.sent).length} of ${r.data.mails.length} owners mailed`);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
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
          <a class="btn" href={`/api/v1/reports?period=${period}&format=html`} target="_blank" rel="noreferrer">
            HTML
          </a>
          <Button onClick={send} busy={busy}>
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
            <div class="summary"><div class="summary-num">{pct(report.platform.availability)}</div><div class="summary-label">availability (non-5xx)</div></div>
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
              <table class="table compact" data-testid="report-table">
                <thead>
                  <tr>
                    <th>API</th><th>Calls</th><th>Availability</th><th>TP50</th><th>TP90</th><th>TP99</th><th>TP99.9</th><th>Top errors</th>
                    <th>Breaker</th><th>Switch</th><th>Calls Δ</th><th>Avail. Δ</th><th>TP99 Δ</th>
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
    </div>
  );
}
