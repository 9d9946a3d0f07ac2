// Clusters: each cluster's endpoint sets (create, edit and delete them, live or sandbox), what
// every gateway says of each endpoint (health, load score) and which set it serves — the
// active side as the gateways serve it (manual or automatic failover, with the reason), not
// only the document's `active` — the failover button (a reason is required), and the
// cluster's autoscale and sleep events (docs/operations/clusters.md, "Failover runbook" and "Autoscale").
import { useState } from "preact/hooks";
import { Cluster, Item, Schemas, get, request } from "../api";
import { useAction, useLoad } from "../shared/hooks";
import { ConfirmDialog } from "../confirm";
import { navigate } from "../router";
import { Badge, Button, Empty, ErrorBanner, Field, Link, Modal, Spinner, ago, cx, fmtTime, toast } from "../ui";
import { ClusterDoc, ClusterFormDialog } from "./ClusterForm";

type Endpoint = Schemas["Endpoint"];
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

/** What the registry's list may say of what the gateways serve (`served`; absent from older registries). */
type ClusterServed = { nodes?: number; active?: string | null; sides?: { node_id: string; active: string; reason: string }[]; refused?: { node_id: string; reason: string }[] };
type ClusterItem = Item<Cluster> & { served?: ClusterServed };

/** The side a cluster is served from, as the gateways report it, and why. */
export type Side = { active: string; reason: string; auto: boolean; fromGateways: boolean };

/**
 * The active side from the gateways' own reports (`{active, reason}` per node: reason `auto`
 * is an automatic failover, `manual` the document's choice); the document's `active` only
 * when no gateway reports the cluster.
 */
export function servedSide(reports: { active?: string | null; reason?: string | null }[], docActive: string, failoverBelow?: number): Side {
  const read = reports.filter((r) => r.active === "primary" || r.active === "standby");
  if (!read.length) return { active: docActive, reason: "no gateway reports this cluster: the document's choice", auto: false, fromGateways: false };
  const standby = read.filter((r) => r.active === "standby");
  const auto = standby.some((r) => r.reason === "auto");
  if (standby.length && standby.length < read.length)
    return { active: "mixed", reason: `${standby.length} of ${read.length} gateways serve the standby set${auto ? " (automatic failover)" : ""}`, auto, fromGateways: true };
  if (standby.length)
    return {
      active: "standby",
      reason: auto
        ? `automatic failover: the primary set's healthy share fell below ${failoverBelow ?? 0.5}`
        : "manual failover: an operator moved it (the cluster document says standby)",
      auto,
      fromGateways: true,
    };
  return { active: "primary", reason: docActive === "standby" ? "the gateways have not applied the failover yet" : "primary serving", auto: false, fromGateways: true };
}

/** `/clusters`: every cluster of the live tree or the sandbox, with the side it is served from. */
export function ClustersPage() {
  const [env, setEnv] = useState<"live" | "sandbox">("live");
  const [editing, setEditing] = useState<ClusterItem | "new" | null>(null);
  const [deleting, setDeleting] = useState<ClusterItem | null>(null);
  const prefix = env === "sandbox" ? "/sandbox" : "";
  const list = useLoad(async () => (await get<{ items: ClusterItem[] }>(`${prefix}/clusters`)).data.items, [env], 3000);
  const { data: items, error, reload: load } = list;
  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Clusters</h1>
          <p class="muted">Backend endpoint sets: health and load as the gateways see them, failover to the standby set, autoscale events.</p>
        </div>
        <div class="head-actions">
          <Button kind="primary" onClick={() => setEditing("new")} data-testid="new-cluster">
            New cluster…
          </Button>
        </div>
      </header>
      <div class="tabs">
        {(["live", "sandbox"] as const).map((e) => (
          <button key={e} class={cx("tab", env === e && "active")} onClick={() => { list.set(null); setEnv(e); }} data-testid={`clusters-${e}`}>
            {e === "live" ? "Live" : "Sandbox (drafts)"}
          </button>
        ))}
      </div>
      <ErrorBanner error={error} title="Could not load the clusters" />
      {editing && (
        <ClusterFormDialog
          env={env}
          name={editing === "new" ? undefined : editing.id}
          doc={editing === "new" ? null : (editing.document as unknown as ClusterDoc)}
          etag={editing === "new" ? undefined : editing.etag}
          onClose={() => setEditing(null)}
          onSaved={() => {
            setEditing(null);
            load();
          }}
        />
      )}
      {deleting && (
        <DeleteCluster
          env={env}
          name={deleting.id}
          etag={deleting.etag}
          onClose={() => setDeleting(null)}
          onDone={() => {
            setDeleting(null);
            load();
          }}
        />
      )}
      {items === null ? (
        error ? null : <Spinner />
      ) : items.length === 0 ? (
        <Empty title="No clusters">Create one with "New cluster", the API or the CLI (docs/OPERATIONS.md).</Empty>
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
                <th />
              </tr>
            </thead>
            <tbody>
              {items.map((it) => {
                const c = it.document;
                const side = servedSide(it.served?.sides ?? [], c?.active ?? "primary", c?.standby?.failover_below);
                return (
                  <tr key={it.id} data-cluster={it.id}>
                    <td>
                      {env === "live" ? (
                        <Link to={`/clusters/${encodeURIComponent(it.id)}`} class="strong">
                          {it.id}
                        </Link>
                      ) : (
                        <b>{it.id}</b>
                      )}
                    </td>
                    <td>{c?.protocol ?? "?"}</td>
                    <td>{c?.balancing ?? "round_robin"}</td>
                    <td data-testid="cluster-serving" title={side.reason}>
                      <SetBadge set={side.active} />
                      {side.auto && <span class="sub"> automatic failover</span>}
                      {!side.fromGateways && c?.standby && <span class="sub muted"> (document)</span>}
                      {!c?.standby && <span class="sub muted"> no standby</span>}
                    </td>
                    <td>
                      {c?.endpoints.length ?? 0}
                      {c?.standby ? ` + ${c.standby.endpoints.length} standby` : ""}
                    </td>
                    <td class="right">
                      <Button small kind="ghost" onClick={() => setEditing(it)} disabled={!c} data-testid={`edit-cluster-${it.id}`}>
                        Edit…
                      </Button>{" "}
                      <Button small kind="danger" onClick={() => setDeleting(it)} data-testid={`delete-cluster-${it.id}`}>
                        Delete…
                      </Button>
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
  const [failover, setFailover] = useState<"primary" | "standby" | null>(null);
  const [dialog, setDialog] = useState<"edit" | "delete" | null>(null);
  const { data: o, error, reload: load } = useLoad(async () => (await get<Overview>(`/clusters/${encodeURIComponent(name)}/overview`)).data, [name], 2000);
  if (!o) return <div class="page">{error ? <ErrorBanner error={error} title={`Could not load cluster ${name}`} /> : <Spinner />}</div>;
  // The operator moves the document's side; the page shows the side the gateways serve.
  const other = o.active === "primary" ? "standby" : "primary";
  const canMove = other === "primary" || o.sets.standby.length > 0;
  const side = servedSide(o.gateways, o.active, o.cluster.standby?.failover_below);
  return (
    <div class="page">
      <header class="page-head">
        <div>
          <div class="sub">
            <Link to="/clusters">Clusters</Link> /
          </div>
          <h1>
            {o.name} <span data-testid="active-set"><SetBadge set={side.active} /></span>
          </h1>
          <p class={side.active === "primary" ? "muted" : "warn-text"} data-testid="active-reason">
            {side.fromGateways ? "Served: " : ""}
            {side.reason}
            {side.active !== o.active && ` · the document says ${o.active}`}
          </p>
          <p class="muted">
            {o.cluster.protocol} · {o.cluster.balancing ?? "round_robin"}
            {o.cluster.standby && ` · failover below ${o.cluster.standby.failover_below ?? 0.5} healthy, failback ${o.cluster.standby.failback ?? "auto"}`}
            {" · "}
            <span data-testid="cluster-rps">{o.rps == null ? "rate not evaluated" : `${o.rps.toFixed(1)} req/s (10 s)`}</span>
          </p>
        </div>
        <div class="head-actions">
          <Button onClick={() => setDialog("edit")} data-testid="edit-cluster">
            Edit…
          </Button>
          <Button kind="danger" onClick={() => setDialog("delete")} data-testid="delete-cluster">
            Delete…
          </Button>
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
          <SetCard key={set} set={set} endpoints={o.sets[set]} active={side.active === set} gateways={o.gateways} />
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
      {dialog === "edit" && (
        <ClusterFormDialog
          env="live"
          name={o.name}
          doc={o.cluster as unknown as ClusterDoc}
          etag={o.etag}
          onClose={() => setDialog(null)}
          onSaved={() => {
            setDialog(null);
            load();
          }}
        />
      )}
      {dialog === "delete" && (
        <DeleteCluster
          env="live"
          name={o.name}
          etag={o.etag}
          onClose={() => setDialog(null)}
          onDone={() => {
            setDialog(null);
            navigate("/clusters");
          }}
        />
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
  const [tried, setTried] = useState(false);
  const reasonErr = reason.trim() ? undefined : "required: say why, for the people on call after you";
  const submitAction = useAction(async () => {
    await request("POST", `/clusters/${encodeURIComponent(name)}/failover`, { body: { to, reason: reason.trim() } });
    toast(`${name}: the ${to} set serves on every gateway`);
    onDone();
  });
  const { busy, error } = submitAction;
  const submit = async () => {
    setTried(true);
    if (reasonErr) return;
    await submitAction.run();
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

/** Deleting a cluster: named, typed to confirm; the registry refuses while APIs use it. */
function DeleteCluster(props: { env: "live" | "sandbox"; name: string; etag?: string; onClose: () => void; onDone: () => void }) {
  return (
    <ConfirmDialog
      title={`Delete the ${props.env} cluster ${props.name}?`}
      confirmLabel={`Delete ${props.name}`}
      typeToConfirm={props.name}
      onClose={props.onClose}
      onConfirm={async () => {
        await request("DELETE", `${props.env === "sandbox" ? "/sandbox" : ""}/clusters/${encodeURIComponent(props.name)}`, { ifMatch: props.etag });
        toast(`Deleted the ${props.env} cluster ${props.name}`);
        props.onDone();
      }}
    >
      <p>
        Every gateway forgets <b>{props.name}</b> ({props.env} tree). The registry refuses while an API calls it (the refusal names each one). The deletion is
        recorded in the audit log.
      </p>
    </ConfirmDialog>
  );
}
