// Nodes & health: the live gateways (config version, lag) and per-API QPS, TP50/90/99/999,
// availability and breaker state, aggregated by the registry from the gateways' metrics and
// refreshed every 2 s.
import { useState } from "preact/hooks";
import { ApiHealth, Health, NodeView, Nodes, get } from "../api";
import { LineChart, Sparkline, fmtNum } from "../charts";
import { Badge, Button, Empty, ErrorBanner, Link, Spinner, ago, cx, usePoll } from "../ui";

const fmtMs = (v: number | null) => (v === null ? "—" : v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0));
const fmtPct = (v: number | null | undefined) => (v === null || v === undefined ? "—" : `${(v * 100).toFixed(v >= 0.9995 || v === 0 ? 1 : 2)}%`);

function availTone(v: number | null | undefined) {
  if (v === null || v === undefined) return "muted";
  if (v >= 0.999) return "ok";
  if (v >= 0.99) return "warn";
  return "bad";
}

function BreakerBadge({ state }: { state: string }) {
  const tone = state === "open" ? "bad" : state === "half_open" ? "warn" : state === "closed" ? "ok" : "neutral";
  return <Badge tone={tone}>{state === "half_open" ? "half-open" : state}</Badge>;
}

export function HealthPage() {
  const [nodes, setNodes] = useState<Nodes | null>(null);
  const [health, setHealth] = useState<Health | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [paused, setPaused] = useState(false);
  const [plane, setPlane] = useState<"live" | "sandbox">("live");
  const [selected, setSelected] = useState<string | null>(null);
  const [filter, setFilter] = useState("");

  usePoll(
    async () => {
      if (paused) return;
      try {
        const [n, h] = await Promise.all([get<Nodes>("/nodes"), get<Health>("/health/apis", { query: { plane } })]);
        setNodes(n.data);
        setHealth(h.data);
        setError(null);
      } catch (e) {
        setError(e);
      }
    },
    2000,
    [paused, plane],
  );

  const times = health?.totals.series.map((p) => p.t) ?? [];
  const f = filter.trim().toLowerCase();
  const apis = (health?.apis ?? []).filter((a) => !f || a.api.toLowerCase().includes(f)).sort((a, b) => b.qps - a.qps || a.api.localeCompare(b.api));
  const sel = selected ? health?.apis.find((a) => a.api === selected) : undefined;
  const openBreakers = (health?.apis ?? []).filter((a) => a.breaker === "open" || a.breaker === "half_open").length;
  const liveNodes = nodes?.nodes.length ?? 0;
  // A node refusing documents does not serve the tree as it is: not "in sync" (docs/operations/registry.md, "What the gateways serve").
  const refusing = (n: NodeView) => (n.rejected_documents?.length ?? 0) + (n.sandbox_rejected_documents?.length ?? 0);
  const inSync = nodes?.nodes.filter((n) => n.in_sync && !refusing(n)).length ?? 0;

  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Nodes &amp; health</h1>
          <p class="muted">
            Aggregated from every live gateway's metrics every 2 s{health ? ` · ${health.window_s ? `last ${Math.round(health.window_s)} s` : "warming up"}` : ""}.
          </p>
        </div>
        <div class="head-actions">
          <div class="seg">
            {(["live", "sandbox"] as const).map((p) => (
              <button key={p} class={cx("seg-btn", plane === p && "active")} onClick={() => setPlane(p)}>
                {p}
              </button>
            ))}
          </div>
          <Button onClick={() => setPaused((p) => !p)} kind={paused ? "primary" : "default"}>
            {paused ? "Resume" : "Pause"}
          </Button>
        </div>
      </header>
      <ErrorBanner error={error} title="Could not refresh" />
      {health?.error && <ErrorBanner error={new Error(health.error)} title="The registry cannot see the gateways" />}
      <div class="summary-cards">
        <div class={cx("summary", nodes && liveNodes === 0 ? "bad" : "")} data-testid="nodes-count">
          <div class="summary-num">{nodes ? liveNodes : "…"}</div>
          <div class="summary-label">live gateways</div>
        </div>
        <div class={cx("summary", nodes && inSync < liveNodes ? "warn" : "")}>
          <div class="summary-num">{nodes ? `${inSync}/${liveNodes}` : "…"}</div>
          <div class="summary-label">serving config {nodes ? `#${nodes.generation}` : ""} in full</div>
        </div>
        <div class="summary">
          <div class="summary-num">{health ? fmtNum(health.totals.qps) : "…"}</div>
          <div class="summary-label">requests / s</div>
        </div>
        <div class={cx("summary", availTone(health?.totals.availability))}>
          <div class="summary-num">{health ? fmtPct(health.totals.availability) : "…"}</div>
          <div class="summary-label">availability (non-5xx)</div>
        </div>
        <div class="summary">
          <div class="summary-num">{health ? fmtMs(health.totals.latency_ms.p99) : "…"}<small> ms</small></div>
          <div class="summary-label">TP99</div>
        </div>
        <div class={cx("summary", openBreakers ? "bad" : "")}>
          <div class="summary-num">{health ? openBreakers : "…"}</div>
          <div class="summary-label">breakers open</div>
        </div>
      </div>

      <div class="card table-card">
        <table class="table compact" data-testid="nodes-table">
          <thead>
            <tr>
              <th>Gateway node</th>
              <th>Listeners</th>
              <th>Config</th>
              <th>Lag</th>
              <th>Heartbeat</th>
              <th>Metrics</th>
            </tr>
          </thead>
          <tbody>
            {nodes === null && !error && (
              <tr>
                <td colSpan={6}>
                  <Spinner />
                </td>
              </tr>
            )}
            {nodes?.nodes.length === 0 && (
              <tr>
                <td colSpan={6}>
                  <span class="bad-text">No gateway is registered in ZooKeeper: nothing serves the published configuration.</span>
                </td>
              </tr>
            )}
            {nodes?.nodes.map((n) => {
              const scrape = health?.nodes.find((s) => s.node_id === n.node_id);
              return (
                <tr key={n.node_id}>
                  <td>
                    <b>{n.node_id}</b>
                    {n.error && <div class="bad-text">{n.error}</div>}
                  </td>
                  <td class="sub">
                    traffic <code>{n.addr}</code>
                    {n.sandbox_addr && (
                      <>
                        {" "}
                        · sandbox <code>{n.sandbox_addr}</code>
                      </>
                    )}{" "}
                    · admin <code>{n.admin_addr}</code>
                  </td>
                  <td>
                    #{n.config_version?.generation ?? "?"} <code class="sub">{n.config_version?.digest?.slice(0, 8)}</code>
                  </td>
                  <td data-testid="node-sync">
                    {!n.in_sync ? (
                      <Badge tone="warn">behind {n.lag_zxid}</Badge>
                    ) : refusing(n) ? (
                      <Badge tone="bad">refuses {refusing(n)} document{refusing(n) === 1 ? "" : "s"}</Badge>
                    ) : (
                      <Badge tone="ok">in sync</Badge>
                    )}
                    {refusing(n) > 0 && (
                      <ul class="rejected-docs" data-testid="rejected-documents">
                        {[...(n.rejected_documents ?? []).map((d) => ({ ...d, plane: "" })), ...(n.sandbox_rejected_documents ?? []).map((d) => ({ ...d, plane: "sandbox/" }))].map((d) => (
                          <li key={d.plane + d.path} data-path={d.plane + d.path}>
                            <code>{d.plane + d.path}</code>: <span class="bad-text">{d.reason}</span>
                            <div class="sub">
                              {d.kept_previous ? `previous version served${d.kept?.updated_by ? ` (by ${d.kept.updated_by}${d.kept.updated_at ? `, ${ago(d.kept.updated_at)}` : ""})` : ""}` : "not served"}
                            </div>
                          </li>
                        ))}
                      </ul>
                    )}
                    {n.status_error && <div class="sub bad-text">status unreadable: {n.status_error}</div>}
                  </td>
                  <td class="sub">{n.updated_ms_ago === null || n.updated_ms_ago === undefined ? "—" : ago(Date.now() - n.updated_ms_ago)}</td>
                  <td>{scrape ? scrape.ok ? <Badge tone="ok">scraped</Badge> : <Badge tone="bad" title={scrape.error}>unreachable</Badge> : <span class="muted">…</span>}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>

      <div class="grid-2 charts">
        <LineChart title={`Requests / s (${plane})`} times={times} series={[{ name: "qps", color: "#2f6fed", values: health?.totals.series.map((p) => p.qps) ?? [] }]} />
        <LineChart
          title="Latency (ms)"
          times={times}
          format={fmtMs}
          series={[
            { name: "p50", color: "#22a06b", values: health?.totals.series.map((p) => p.p50) ?? [] },
            { name: "p90", color: "#2f6fed", values: health?.totals.series.map((p) => p.p90) ?? [] },
            { name: "p99", color: "#e2a03f", values: health?.totals.series.map((p) => p.p99) ?? [] },
            { name: "p999", color: "#d9480f", values: health?.totals.series.map((p) => p.p999) ?? [] },
          ]}
        />
      </div>

      <div class="toolbar">
        <h2 class="section-title">Per API</h2>
        <input class="search" type="search" placeholder="Filter APIs…" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} />
      </div>
      {health === null ? (
        error ? null : <Spinner label="Collecting the first samples…" />
      ) : apis.length === 0 ? (
        <Empty title={`No ${plane} API traffic yet`}>Publish an API and send it some traffic; figures appear within a few seconds.</Empty>
      ) : (
        <div class="card table-card">
          <table class="table hoverable" data-testid="health-table">
            <thead>
              <tr>
                <th>API</th>
                <th class="num">QPS</th>
                <th>last 3 min</th>
                <th class="num">TP50</th>
                <th class="num">TP90</th>
                <th class="num">TP99</th>
                <th class="num">TP999</th>
                <th class="num">Availability</th>
                <th class="num">In flight</th>
                <th>Breaker</th>
              </tr>
            </thead>
            <tbody>
              {apis.map((a) => (
                <ApiRow key={a.api} a={a} selected={selected === a.api} onSelect={() => setSelected(selected === a.api ? null : a.api)} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      {sel && sel.series && (
        <div class="card api-charts" data-testid="api-charts">
          <div class="audit-head">
            <h3>
              <Link to={`/apis/${encodeURIComponent(sel.api)}`}>{sel.api}</Link>
            </h3>
            <span class="muted">
              breaker per node:{" "}
              {sel.breaker_nodes.length ? sel.breaker_nodes.map((b) => (
                <span key={b.node_id} class="breaker-node">
                  {b.node_id} <BreakerBadge state={b.state} />
                </span>
              )) : "no data"}
            </span>
          </div>
          <div class="grid-3">
            <LineChart title="Requests / s" height={150} times={sel.series.map((p) => p.t)} series={[{ name: "qps", color: "#2f6fed", values: sel.series.map((p) => p.qps) }]} />
            <LineChart
              title="Latency (ms)"
              height={150}
              format={fmtMs}
              times={sel.series.map((p) => p.t)}
              series={[
                { name: "p50", color: "#22a06b", values: sel.series.map((p) => p.p50) },
                { name: "p90", color: "#2f6fed", values: sel.series.map((p) => p.p90) },
                { name: "p99", color: "#e2a03f", values: sel.series.map((p) => p.p99) },
                { name: "p999", color: "#d9480f", values: sel.series.map((p) => p.p999) },
              ]}
            />
            <LineChart
              title="Availability (%)"
              height={150}
              yMax={100}
              format={(v) => (v === null ? "—" : v.toFixed(1))}
              times={sel.series.map((p) => p.t)}
              series={[{ name: "avail", color: "#22a06b", values: sel.series.map((p) => (p.availability === null ? null : p.availability * 100)) }]}
            />
          </div>
        </div>
      )}
    </div>
  );
}

function ApiRow({ a, selected, onSelect }: { a: ApiHealth; selected: boolean; onSelect: () => void }) {
  return (
    <tr class={cx("clickable", selected && "selected", a.breaker === "open" && "row-degraded")} onClick={onSelect} data-health={a.api}>
      <td>
        <b>{a.api}</b>
        {!a.published && a.plane === "live" && <div class="sub">unpublished</div>}
      </td>
      <td class="num strong">{fmtNum(a.qps)}</td>
      <td>
        <Sparkline values={(a.series ?? []).map((p) => p.qps)} />
      </td>
      <td class="num">{fmtMs(a.latency_ms.p50)}</td>
      <td class="num">{fmtMs(a.latency_ms.p90)}</td>
      <td class="num">{fmtMs(a.latency_ms.p99)}</td>
      <td class="num">{fmtMs(a.latency_ms.p999)}</td>
      <td class={cx("num", `${availTone(a.availability)}-text`)}>{fmtPct(a.availability)}</td>
      <td class="num">{a.in_flight}</td>
      <td>
        <BreakerBadge state={a.breaker} />
      </td>
    </tr>
  );
}
