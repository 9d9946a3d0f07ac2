// Clusters: each live cluster's endpoint sets, what every gateway says of each endpoint (health,
// load score) and which set it serves, the failover button (a reason is required), and the
// cluster's autoscale and sleep events (docs/OPERATIONS.md, "Failover" and "Autoscale").
import { useState } from "preact/hooks";
import { Item, List, get, request } from "../api";
import { Badge, Button, Empty, ErrorBanner, Field, Link, Modal, Spinner, ago, cx, fmtTime, toast, usePoll } from "../ui";

type Endpoint = { addr: string; weight?: number };
type Rule = { rps_above?: number; rps_below?: number; for_s: number; action: string };
type Cluster = {
  protocol: string;
  endpoints: Endpoint[];
  balancing?: string;
  standby?: { endpoints: Endpoint[]; failover_below?: number; failback?: string };
  active?: "primary" | "standby";
  autoscale?: { webhook: string; rules: Rule[]; cooldown_s?: number };
  sleep?: { wake_url: string; sleep_url?: string; idle_s?: number };
};
type GatewayEndpoint = Record<string, unknown> & { addr?: string; set?: string };
type GatewayView = {
  node_id: string;
  admin_addr: string;
  active: string;
  reason?: string | null;
  endpoints: GatewayEndpoint[];
  note?: string;
  error?: string;
  config_version?: { generation?: number };
};
type Event = {
  id: string;
  kind: "autoscale" | "sleep";
  at: string;
  action?: string;
  rps?: number;
  rule?: number;
  outcome: "pending" | "ok" | "failed";
  status?: number;
  error?: string;
  idle_s?: number;
};
type Overview = {
  name: string;
  etag: string;
  cluster: Cluster;
  active: "primary" | "standby";
  sets: { primary: Endpoint[]; standby: Endpoint[] };
  gateways: GatewayView[];
  rps: number | null;
  events: Event[];
};

/** `/clusters`: every live cluster, with its active set. */
export function ClustersPage() {
  const [items, setItems] = useState<Item<Cluster>[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  usePoll(async () => {
    try {
      setItems((await get<List<Cluster>>("/clusters")).data.items);
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, 3000);
  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Clusters</h1>
          <p class="muted">Backend endpoint sets: health and load as the gateways see them, failover to the standby set, autoscale events.</p>
        </div>
      </header>
      <ErrorBanner error={error} title="Could not load the clusters" />
      {items === null ? (
        error ? null : <Spinner />
      ) : items.length === 0 ? (
        <Empty title="No clusters">Create one with the API or the CLI (docs/OPERATIONS.md).</Empty>
      ) : (
        <div class="card table-card">
          <table class="table" data-testid="clusters-table">
            <thead>
              <tr>
                <th>Cluster</th>
                <th>Protocol</th>
                <th>Balancing</th>
                <th>Serving</th>
                <th>Endpoints</th>
              </tr>
            </thead>
            <tbody>
              {items.map((it) => {
                const c = it.document;
                return (
                  <tr key={it.id} data-cluster={it.id}>
                    <td>
                      <Link to={`/clusters/${encodeURIComponent(it.id)}`} class="strong">
                        {it.id}
                      </Link>
                    </td>
                    <td>{c?.protocol ?? "?"}</td>
                    <td>{c?.balancing ?? "round_robin"}</td>
                    <td>
                      <SetBadge set={c?.active ?? "primary"} />
                      {!c?.standby && <span class="sub muted"> no standby</span>}
                    </td>
                    <td>
                      {c?.endpoints.length ?? 0}
                      {c?.standby ? ` + ${c.standby.endpoints.length} standby` : ""}
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

function SetBadge({ set }: { set: string }) {
  const tone = set === "primary" ? "ok" : set === "standby" ? "warn" : "neutral";
  return (
    <Badge tone={tone} title={set === "unknown" ? "this gateway does not report clusters (older version) or could not be read" : undefined}>
      {set}
    </Badge>
  );
}

/** What a gateway says of an endpoint: its health and load score, whatever the names. */
function endpointState(e: GatewayEndpoint): { health: string; score: string } {
  const h = e.healthy ?? e.health ?? e.state;
  const health = typeof h === "boolean" ? (h ? "healthy" : "unhealthy") : typeof h === "string" ? h : "unknown";
  const s = e.score ?? e.load_score ?? e.load;
  const score = typeof s === "number" ? s.toFixed(3) : s == null ? "—" : String(s);
  return { health, score };
}

/** `/clusters/<name>`: the sets, each gateway's view, failover, autoscale. */
export function ClusterPage({ name }: { name: string }) {
  const [o, setO] = useState<Overview | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [failover, setFailover] = useState<"primary" | "standby" | null>(null);
  const load = async () => {
    try {
      setO((await get<Overview>(`/clusters/${encodeURIComponent(name)}/overview`)).data);
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  usePoll(load, 2000, [name]);
  if (!o) return <div class="page">{error ? <ErrorBanner error={error} title={`Could not load cluster ${name}`} /> : <Spinner />}</div>;
  const other = o.active === "primary" ? "standby" : "primary";
  const canMove = other === "primary" || o.sets.standby.length > 0;
  return (
    <div class="page">
      <header class="page-head">
        <div>
          <div class="sub">
            <Link to="/clusters">Clusters</Link> /
          </div>
          <h1>
            {o.name} <span data-testid="active-set"><SetBadge set={o.active} /></span>
          </h1>
          <p class="muted">
            {o.cluster.protocol} · {o.cluster.balancing ?? "round_robin"}
            {o.cluster.standby && ` · failover below ${o.cluster.standby.failover_below ?? 0.5} healthy, failback ${o.cluster.standby.failback ?? "auto"}`}
            {" · "}
            <span data-testid="cluster-rps">{o.rps == null ? "rate not evaluated" : `${o.rps.toFixed(1)} req/s (10 s)`}</span>
          </p>
        </div>
        <div>
          {canMove ? (
            <Button kind={other === "standby" ? "danger" : "success"} onClick={() => setFailover(other)} data-testid="failover">
              Fail over to {other}…
            </Button>
          ) : (
            <span class="muted">no standby set to fail over to</span>
          )}
        </div>
      </header>
      <ErrorBanner error={error} title="Refresh failed (showing the last view)" />
      <div class="grid-2">
        {(["primary", "standby"] as const).map((set) => (
          <SetCard key={set} set={set} endpoints={o.sets[set]} active={o.active === set} gateways={o.gateways} />
        ))}
      </div>
      <h2>Gateways</h2>
      {o.gateways.length === 0 ? (
        <Empty title="No live gateway">Gateways register in ZooKeeper when they start.</Empty>
      ) : (
        <div class="card table-card">
          <table class="table" data-testid="gateways-table">
            <thead>
              <tr>
                <th>Node</th>
                <th>Serves</th>
                <th>Config generation</th>
                <th>Note</th>
              </tr>
            </thead>
            <tbody>
              {o.gateways.map((g) => (
                <tr key={g.node_id} data-node={g.node_id}>
                  <td class="strong">
                    {g.node_id}
                    <div class="sub">{g.admin_addr}</div>
                  </td>
                  <td data-testid="gateway-set">
                    <SetBadge set={g.active} />
                    {g.reason && <div class="sub">{g.reason}</div>}
                  </td>
                  <td>{g.config_version?.generation ?? "?"}</td>
                  <td class="muted">{g.error ?? g.note ?? ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h2>Autoscale &amp; sleep</h2>
      <AutoscaleRules c={o.cluster} />
      {o.events.length === 0 ? (
        <Empty title="No events yet">Firings of the autoscale rules and sleep calls appear here.</Empty>
      ) : (
        <div class="card table-card">
          <table class="table" data-testid="events-table">
            <thead>
              <tr>
                <th>When</th>
                <th>What</th>
                <th>Rate</th>
                <th>Outcome</th>
              </tr>
            </thead>
            <tbody>
              {o.events.map((e) => (
                <tr key={e.id}>
                  <td title={fmtTime(e.at)}>{ago(e.at)}</td>
                  <td>{e.kind === "autoscale" ? `scale ${e.action} (rule ${e.rule})` : `sleep after ${e.idle_s} s idle`}</td>
                  <td>{e.rps != null ? `${e.rps} req/s` : "—"}</td>
                  <td>
                    <Badge tone={e.outcome === "ok" ? "ok" : e.outcome === "failed" ? "bad" : "neutral"}>{e.outcome}</Badge>
                    {e.error && <div class="sub">{e.error}</div>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {failover && (
        <FailoverDialog
          name={o.name}
          to={failover}
          onClose={() => setFailover(null)}
          onDone={() => {
            setFailover(null);
            load();
          }}
        />
      )}
    </div>
  );
}

function SetCard({ set, endpoints, active, gateways }: { set: string; endpoints: Endpoint[]; active: boolean; gateways: GatewayView[] }) {
  return (
    <div class={cx("card", active && "card-active")} data-set={set}>
      <div class="card-head">
        <b>{set}</b> {active ? <Badge tone="ok">serving</Badge> : <Badge tone="neutral">idle</Badge>}
      </div>
      {endpoints.length === 0 ? (
        <p class="muted">No endpoints.</p>
      ) : (
        <table class="table">
          <thead>
            <tr>
              <th>Endpoint</th>
              {gateways.map((g) => (
                <th key={g.node_id}>{g.node_id}: health · load</th>
              ))}
            </tr>
          </thead>
          <tbody>
            {endpoints.map((e) => (
              <tr key={e.addr} data-endpoint={e.addr}>
                <td>
                  <code>{e.addr}</code>
                  {e.weight && e.weight !== 1 ? <span class="sub"> ×{e.weight}</span> : null}
                </td>
                {gateways.map((g) => {
                  const seen = g.endpoints.find((x) => x.addr === e.addr && (x.set ?? set) === set);
                  if (!seen) return <td key={g.node_id} class="muted">unknown</td>;
                  const s = endpointState(seen);
                  return (
                    <td key={g.node_id} data-testid="endpoint-state">
                      <Badge tone={s.health === "healthy" ? "ok" : s.health === "unknown" ? "neutral" : "bad"}>{s.health}</Badge> {s.score}
                    </td>
                  );
                })}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

function AutoscaleRules({ c }: { c: Cluster }) {
  if (!c.autoscale && !c.sleep?.sleep_url) return <p class="muted">No autoscale rules and no sleep_url on this cluster.</p>;
  return (
    <ul class="plain" data-testid="autoscale-rules">
      {c.autoscale?.rules.map((r, i) => (
        <li key={i}>
          rule {i}: {r.rps_above != null ? `above ${r.rps_above} req/s` : `below ${r.rps_below} req/s`} for {r.for_s} s → <b>{r.action}</b>
        </li>
      ))}
      {c.autoscale && (
        <li class="muted">
          webhook {c.autoscale.webhook}, at most once per {c.autoscale.cooldown_s ?? 60} s
        </li>
      )}
      {c.sleep?.sleep_url && (
        <li class="muted">
          sleep after {c.sleep.idle_s} s without requests: POST {c.sleep.sleep_url}
        </li>
      )}
    </ul>
  );
}

function FailoverDialog({ name, to, onClose, onDone }: { name: string; to: "primary" | "standby"; onClose: () => void; onDone: () => void }) {
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [tried, setTried] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const reasonErr = reason.trim() ? undefined : "required: say why, for the people on call after you";
  const submit = async () => {
    setTried(true);
    if (reasonErr) return;
    setBusy(true);
    setError(null);
    try {
      await request("POST", `/clusters/${encodeURIComponent(name)}/failover`, { body: { to, reason: reason.trim() } });
      toast(`${name}: the ${to} set serves on every gateway`);
      onDone();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <Modal
      tone={to === "standby" ? "danger" : "default"}
      title={`Fail ${name} over to ${to}?`}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button kind={to === "standby" ? "danger" : "success"} busy={busy} onClick={submit} data-testid="confirm-failover">
            Fail over to {to}
          </Button>
        </>
      }
    >
      <p>
        Every gateway moves all of {name}'s traffic to its <b>{to}</b> set as soon as it reads the change from ZooKeeper. The change is recorded in
        the audit log with your name and reason.
      </p>
      <Field label="Reason" error={tried ? reasonErr : undefined}>
        <textarea name="reason" rows={3} value={reason} onInput={(e) => setReason((e.target as HTMLTextAreaElement).value)} data-testid="failover-reason" />
      </Field>
      <ErrorBanner error={error} title="Failover refused" />
    </Modal>
  );
}
