// One API's hot keys, live: what every gateway's detector finds hot now (merged by the
// registry, GET /apis/{id}/hot-keys, refreshed every 2 s), and "Block this key…", which writes
// the key-level switch switches/<api>@hot-<value> selecting exactly that key
// (docs/operations/caching.md, "Caching and hot keys").
import { useState } from "preact/hooks";
import { ApiDef, ApiError, HotKey, HotKeys, Switch, get, request } from "../api";
import { useAction } from "../shared/hooks";
import { Button, Code, Empty, ErrorBanner, Field, Link, Modal, Spinner, ago, pretty, toast, usePoll } from "../ui";

/** How often the panel asks the registry (the detectors close a window every 500 ms). */
const POLL_MS = 2000;

/** The label of the switch that blocks `m`: `hot-` and the values, in label characters. */
export function blockLabel(m: Record<string, string[]>): string {
  const values = Object.values(m)
    .map((v) => v[0] ?? "")
    .join("-");
  const label = `hot-${values}`.replace(/[^A-Za-z0-9._-]/g, "_");
  return label.slice(0, 100);
}

function fmtRate(n: number) {
  return n >= 100 ? Math.round(n).toLocaleString() : n.toFixed(1);
}

function fmtBytes(n: number) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB/s`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB/s`;
  return `${Math.round(n)} B/s`;
}

export function HotKeysPanel({ id, api }: { id: string; api: ApiDef | null }) {
  const [data, setData] = useState<HotKeys | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [blocking, setBlocking] = useState<HotKey | null>(null);
  const policy = api?.policy?.hot_keys;

  usePoll(
    async () => {
      if (!policy) return;
      try {
        setData((await get<HotKeys>(`/apis/${encodeURIComponent(id)}/hot-keys`)).data);
        setError(null);
      } catch (e) {
        setError(e);
      }
    },
    POLL_MS,
    [id, !!policy],
  );

  if (!api)
    return (
      <Empty title="Not published">
        Hot keys are found by the gateways serving the live API; this API is not published.
      </Empty>
    );
  if (!policy)
    return (
      <Empty title="No hot-key detection">
        Add <code>policy.hot_keys</code> (e.g. <code>{`{"key": ["path:sku"], "rate_above": 200}`}</code>) to the API and publish it: every gateway then counts
        requests per key in fixed memory, caches the hot ones and lists them here.
      </Empty>
    );
  const down = data?.nodes.filter((n) => !n.ok) ?? [];
  return (
    <div class="card table-card" data-testid="hot-keys">
      <div class="card-head">
        <div>
          <b>Hot now</b> <span class="muted">key {policy.key.join(" + ")} · hot above {policy.rate_above ?? 200} req/s{policy.link_bytes_per_s ? ` or ${Math.round((policy.bandwidth_share_above ?? 0.7) * 100)}% of ${fmtBytes(policy.link_bytes_per_s)}` : ""} · refreshed every {POLL_MS / 1000} s</span>
        </div>
      </div>
      <ErrorBanner error={error} title="Could not read the hot keys" />
      {down.length > 0 && (
        <p class="warn-text" style="padding: 0 12px" data-testid="hot-keys-unread">
          {down.length} gateway{down.length > 1 ? "s" : ""} could not be read: {down.map((n) => `${n.node_id} (${n.error ?? "?"})`).join(", ")}
        </p>
      )}
      {!data ? (
        <Spinner />
      ) : data.keys.length === 0 ? (
        <p class="muted" style="padding: 0 12px 12px" data-testid="hot-keys-none">
          No key is hot on any of the {data.nodes.length} live gateway{data.nodes.length === 1 ? "" : "s"}.
        </p>
      ) : (
        <table class="table" data-testid="hot-keys-table">
          <thead>
            <tr>
              <th>Key</th>
              <th class="num">req/s</th>
              <th class="num">answer bytes</th>
              <th>Hot since</th>
              <th>Gateways</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {data.keys.map((k) => (
              <tr key={k.key} data-testid="hot-key-row" data-key={k.key}>
                <td>
                  <code>{k.key || "(empty)"}</code>
                </td>
                <td class="num">{fmtRate(k.rate)}</td>
                <td class="num">{fmtBytes(k.bytes_per_s)}</td>
                <td>{k.since_ms ? ago(k.since_ms) : "—"}</td>
                <td>{k.gateways.join(", ")}</td>
                <td>
                  {k.match ? (
                    <Button small kind="danger" onClick={() => setBlocking(k)} data-testid="block-key">
                      Block this key…
                    </Button>
                  ) : (
                    <span class="muted" title="A digested (over 256 bytes) key, or one with a part missing from the requests, cannot be matched by a switch">
                      cannot be blocked
                    </span>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {blocking?.match && <BlockDialog id={id} hot={blocking} match={blocking.match} onClose={() => setBlocking(null)} />}
    </div>
  );
}

function BlockDialog({ id, hot, match, onClose }: { id: string; hot: HotKey; match: Record<string, string[]>; onClose: () => void }) {
  const [reason, setReason] = useState("");
  const [tried, setTried] = useState(false);
  const name = `${id}@${blockLabel(match)}`;
  const doc: Switch = { degraded: true, match, reason: reason.trim() };
  const reasonErr = reason.trim() ? undefined : "required: say why, for the people on call after you";

  const goAction = useAction(
    async () => {
      await request("PUT", `/switches/${encodeURIComponent(name)}`, { body: doc, ifNoneMatch: true });
      toast(`${hot.key} of ${id} is blocked on every gateway`);
      onClose();
    },
    {
      onError: (e) => {
        if (e instanceof ApiError && (e.status === 412 || e.status === 409))
          return new ApiError(e.status, e.code, `A switch ${name} exists already: change it on the Switches page.`, e.requestId, e.details);
        return e;
      },
    },
  );
  const { busy, error } = goAction;
  const go = async () => {
    setTried(true);
    if (reasonErr) return;
    await goAction.run();
  };
  return (
    <Modal
      tone="danger"
      title={`Block ${hot.key} of ${id}`}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button kind="danger" busy={busy} onClick={go} data-testid="confirm-block">
            Block on every gateway
          </Button>
        </>
      }
    >
      <p>
        Requests to <b>{id}</b> whose key is <code>{hot.key}</code> get 503 <code>API_DEGRADED</code> on every gateway within milliseconds; other keys still reach the backend. This writes the
        key-level switch <code>{name}</code>; restore it on the <Link to="/switches">Switches</Link> page.
      </p>
      <Code>{pretty(doc.match)}</Code>
      <Field label="Reason" error={tried ? reasonErr : undefined} hint="required; kept on the switch and in the audit log">
        <textarea name="reason" data-testid="block-reason" rows={2} value={reason} placeholder="e.g. sku BK-1 oversold, INC-4711" onInput={(e) => setReason((e.target as HTMLTextAreaElement).value)} data-autofocus />
      </Field>
      <ErrorBanner error={error} title="Block refused" />
    </Modal>
  );
}
