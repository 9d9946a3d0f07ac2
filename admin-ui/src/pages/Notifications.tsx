// Notifications (docs/operations/notifications.md, "Notifications"): the topics of the live tree
// (topics/<name>, edited through /topics), what every live gateway reports of its
// notifications (GET /notifications, merged by the registry, refreshed every 2 s: the apps
// connected per node, their backlog, the callbacks' dead letters) and "Send test event"
// (POST /notifications/test: published through a gateway's internal listener with the
// registry's publisher token).
import { useState } from "preact/hooks";
import { ApiError, App, Item, List, Notifications, NotificationTestResult, Topic, get, request } from "../api";
import { useAction, useLoad } from "../shared/hooks";
import { Badge, Button, Code, Empty, ErrorBanner, Field, Modal, Spinner, ago, cx, pretty, toast } from "../ui";
import { RefusedNote } from "../served";

/** How often the live tables ask the registry. */
const POLL_MS = 2000;

export function NotificationsPage() {
  const [editing, setEditing] = useState<{ item?: Item<Topic> } | null>(null);
  const [deleting, setDeleting] = useState<Item<Topic> | null>(null);

  const lists = useLoad(
    async () => {
      const [t, a] = await Promise.all([get<List<Topic>>("/topics"), get<List<App>>("/apps")]);
      return { topics: t.data.items, apps: a.data.items };
    },
    [],
    10_000,
  );
  const topics = lists.data?.topics ?? null;
  const apps = lists.data?.apps ?? null;
  const { error, reload: loadTopics } = lists;
  const { data: live, error: liveError } = useLoad(async () => (await get<Notifications>("/notifications")).data, [], POLL_MS);

  const connections = live?.apps.reduce((n, a) => n + a.connections, 0) ?? 0;
  const down = live?.nodes.filter((n) => !n.ok) ?? [];
  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Notifications</h1>
          <p class="muted">Events backends publish to merchants' apps: the topics they are published on, the apps connected to the gateways now, what waits for them, and callbacks that never succeeded.</p>
        </div>
        <Button kind="primary" onClick={() => setEditing({})} data-testid="new-topic">
          New topic
        </Button>
      </header>
      <div class="summary-cards">
        <div class="summary" data-testid="notify-store">
          <div class="summary-num">{live ? live.store ?? "—" : "…"}</div>
          <div class="summary-label">event store</div>
        </div>
        <div class="summary">
          <div class="summary-num" data-testid="notify-connections">{live ? connections : "…"}</div>
          <div class="summary-label">connections</div>
        </div>
        <div class={cx("summary", down.length ? "bad" : "ok")}>
          <div class="summary-num">{live ? `${live.nodes.length - down.length}/${live.nodes.length}` : "…"}</div>
          <div class="summary-label">gateways read</div>
        </div>
        <div class={cx("summary", live?.dead_letters_total ? "bad" : "ok")}>
          <div class="summary-num">{live ? live.dead_letters_total : "…"}</div>
          <div class="summary-label">dead letters</div>
        </div>
      </div>

      <ErrorBanner error={error} title="Could not load the topics" />
      <section class="card table-card" data-testid="topics">
        <div class="card-head">
          <b>Topics</b> <span class="muted">topics/&lt;name&gt; of the live tree; an app receives a topic it is granted here, or that it lists in its own "topics"</span>
        </div>
        {topics === null ? (
          error ? null : <Spinner />
        ) : topics.length === 0 ? (
          <Empty title="No topics">Create one, grant it to apps, and backends can publish on it.</Empty>
        ) : (
          <table class="table" data-testid="topics-table">
            <thead>
              <tr>
                <th>Topic</th>
                <th>Owner</th>
                <th>Granted to</th>
                <th class="num">Retention</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {topics.map((t) => (
                <tr key={t.id} data-topic={t.id}>
                  <td>
                    <b>{t.id}</b>
                    {t.document?.description && <div class="sub muted">{t.document.description}</div>}
                    <RefusedNote item={t} />
                    {t.error && <div class="sub warn-text">{t.error}</div>}
                  </td>
                  <td>{t.document?.owner ?? "—"}</td>
                  <td data-testid="topic-apps">{t.document?.apps?.length ? t.document.apps.map((a) => (a === "*" ? "every app" : a)).join(", ") : <span class="muted">no app (apps may list it)</span>}</td>
                  <td class="num">{fmtRetention(t.document?.retention_s ?? 86400)}</td>
                  <td class="nowrap">
                    <Button small onClick={() => setEditing({ item: t })} data-testid="edit-topic">
                      Edit
                    </Button>{" "}
                    <Button small kind="danger" onClick={() => setDeleting(t)} data-testid="delete-topic">
                      Delete
                    </Button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      <section class="card table-card" data-testid="notify-apps">
        <div class="card-head">
          <b>Connected apps and backlog</b> <span class="muted">as every live gateway reports it · refreshed every {POLL_MS / 1000} s</span>
        </div>
        <ErrorBanner error={liveError} title="Could not read the gateways' notifications" />
        {down.length > 0 && (
          <p class="warn-text" style="padding: 0 12px" data-testid="notify-unread">
            {down.length} gateway{down.length > 1 ? "s" : ""} could not be read: {down.map((n) => `${n.node_id} (${n.error ?? "?"})`).join(", ")}
          </p>
        )}
        {!live ? (
          liveError ? null : <Spinner />
        ) : live.apps.length === 0 ? (
          <p class="muted" style="padding: 0 12px 12px" data-testid="notify-apps-none">
            No app is connected or has a backlog on any of the {live.nodes.length} live gateway{live.nodes.length === 1 ? "" : "s"}.
          </p>
        ) : (
          <table class="table" data-testid="notify-apps-table">
            <thead>
              <tr>
                <th>App</th>
                <th class="num">Connections</th>
                <th>Per gateway</th>
                <th class="num">Backlog</th>
                <th>Delivery</th>
              </tr>
            </thead>
            <tbody>
              {live.apps.map((a) => (
                <tr key={a.app} data-app={a.app}>
                  <td>
                    <b>{a.app}</b>
                  </td>
                  <td class="num" data-testid="app-connections">
                    {a.connections}
                  </td>
                  <td>
                    {a.nodes.map((n) => (
                      <div key={n.node_id} class="sub" data-node={n.node_id}>
                        <code>{n.node_id}</code>: {n.connections} connection{n.connections === 1 ? "" : "s"}
                        {n.connections > 0 && n.since_ms ? `, since ${ago(n.since_ms)}` : ""}
                        {n.backlog !== undefined ? ` · backlog ${n.backlog}` : ""}
                      </div>
                    ))}
                  </td>
                  <td class="num" data-testid="app-backlog">
                    {a.backlog ?? "—"}
                  </td>
                  <td>{a.callback ? <Badge tone="info">callback</Badge> : <Badge tone="neutral">stream</Badge>}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {live && live.nodes.length > 0 && (
          <p class="muted sub" style="padding: 0 12px 12px">
            {live.nodes.map((n) => `${n.node_id}: ${n.ok ? `${n.store ?? "?"} store, ${n.streams ?? 0} stream${n.streams === 1 ? "" : "s"}${n.internal_addr ? "" : ", no internal listener"}` : "unreadable"}`).join(" · ")}
          </p>
        )}
      </section>

      <TestSend topics={topics} apps={apps} live={live} />

      <section class="card table-card" data-testid="dead-letters">
        <div class="card-head">
          <b>Dead letters</b> <span class="muted">callbacks that failed every try (newest first); the gateway went on with the next event</span>
        </div>
        {!live ? null : live.dead_letters.length === 0 ? (
          <p class="muted" style="padding: 0 12px 12px" data-testid="dead-letters-none">
            No dead letters.
          </p>
        ) : (
          <table class="table" data-testid="dead-letters-table">
            <thead>
              <tr>
                <th>When</th>
                <th>App</th>
                <th>Topic</th>
                <th>Event</th>
                <th class="num">Tries</th>
                <th>Last error</th>
                <th>Gateway</th>
              </tr>
            </thead>
            <tbody>
              {live.dead_letters.map((d) => (
                <tr key={`${d.node_id}-${d.app}-${d.id}`} data-dead={d.id}>
                  <td>{ago(d.at_ms)}</td>
                  <td>{d.app}</td>
                  <td>{d.topic}</td>
                  <td>
                    <code>{d.id}</code>
                  </td>
                  <td class="num">{d.attempts}</td>
                  <td class="warn-text">{d.last_error}</td>
                  <td>{d.node_id}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      {editing && <TopicDialog item={editing.item} onClose={() => setEditing(null)} onSaved={loadTopics} />}
      {deleting && <DeleteDialog item={deleting} onClose={() => setDeleting(null)} onDone={loadTopics} />}
    </div>
  );
}

function fmtRetention(s: number) {
  if (s % 86400 === 0) return `${s / 86400} d`;
  if (s % 3600 === 0) return `${s / 3600} h`;
  if (s % 60 === 0) return `${s / 60} min`;
  return `${s} s`;
}

const NAME_RE = /^[A-Za-z0-9._@-]{1,128}$/;

function TopicDialog({ item, onClose, onSaved }: { item?: Item<Topic>; onClose: () => void; onSaved: () => void }) {
  const doc = item?.document ?? undefined;
  const [name, setName] = useState(item?.id ?? "");
  const [owner, setOwner] = useState(doc?.owner ?? "");
  const [description, setDescription] = useState(doc?.description ?? "");
  const [apps, setApps] = useState((doc?.apps ?? []).join(", "));
  const [retention, setRetention] = useState(String(doc?.retention_s ?? 86400));
  const [tried, setTried] = useState(false);
  const nameErr = NAME_RE.test(name.trim()) ? undefined : "1 to 128 of A-Z a-z 0-9 . _ @ -";
  const retentionErr = /^\d+$/.test(retention.trim()) && Number(retention) > 0 ? undefined : "a whole number of seconds above 0";
  const body: Topic = {
    ...(owner.trim() ? { owner: owner.trim() } : {}),
    ...(description.trim() ? { description: description.trim() } : {}),
    apps: apps
      .split(/[\s,]+/)
      .map((a) => a.trim())
      .filter(Boolean),
    retention_s: Number(retention),
  };
  const saveAction = useAction(
    async () => {
      const path = `/topics/${encodeURIComponent(name.trim())}`;
      await request("PUT", path, item ? { body, ifMatch: item.etag } : { body, ifNoneMatch: true });
      toast(`Topic ${name.trim()} ${item ? "saved" : "created"}`);
      onSaved();
      onClose();
    },
    {
      onError: (e) => {
        if (e instanceof ApiError && e.status === 409)
          return new ApiError(409, e.code, item ? "The topic was changed by someone else: close and edit it again." : `A topic ${name.trim()} exists already.`, e.requestId, e.details);
        return e;
      },
    },
  );
  const { busy, error } = saveAction;
  const save = async () => {
    setTried(true);
    if (nameErr || retentionErr) return;
    await saveAction.run();
  };
  return (
    <Modal
      title={item ? `Edit topic ${item.id}` : "New topic"}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button kind="primary" busy={busy} onClick={save} data-testid="save-topic">
            {item ? "Save" : "Create"}
          </Button>
        </>
      }
    >
      <Field label="Name" error={tried ? nameErr : undefined} hint="backends publish on it by this name">
        <input name="topic-name" value={name} disabled={!!item} onInput={(e) => setName((e.target as HTMLInputElement).value)} placeholder="e.g. orders" data-autofocus />
      </Field>
      <Field label="Owner" hint="the team that publishes it">
        <input name="topic-owner" value={owner} onInput={(e) => setOwner((e.target as HTMLInputElement).value)} placeholder="e.g. order-team" />
      </Field>
      <Field label="Description">
        <input name="topic-description" value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
      </Field>
      <Field label="Granted to apps" hint='app keys, comma-separated; "*" for every app'>
        <input name="topic-apps" value={apps} onInput={(e) => setApps((e.target as HTMLInputElement).value)} placeholder="merchant-1, merchant-2" />
      </Field>
      <Field label="Retention (seconds)" error={tried ? retentionErr : undefined} hint="how long an unacknowledged event is kept">
        <input name="topic-retention" value={retention} inputMode="numeric" onInput={(e) => setRetention((e.target as HTMLInputElement).value)} />
      </Field>
      <Code>{pretty(body)}</Code>
      <ErrorBanner error={error} title="Not saved" />
    </Modal>
  );
}

function DeleteDialog({ item, onClose, onDone }: { item: Item<Topic>; onClose: () => void; onDone: () => void }) {
  const goAction = useAction(async () => {
    await request("DELETE", `/topics/${encodeURIComponent(item.id)}`, { ifMatch: item.etag });
    toast(`Topic ${item.id} deleted`);
    onDone();
    onClose();
  });
  const { busy, error } = goAction;
  const go = goAction.run;
  return (
    <Modal
      tone="danger"
      title={`Delete topic ${item.id}`}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button kind="danger" busy={busy} onClick={go} data-testid="confirm-delete-topic">
            Delete
          </Button>
        </>
      }
    >
      <p>
        Backends can no longer publish on <b>{item.id}</b>, and the apps' open streams lose it within a second. Events already stored stay in the apps' backlogs until their retention ends.
      </p>
      <ErrorBanner error={error} title="Not deleted" />
    </Modal>
  );
}

function TestSend({ topics, apps, live }: { topics: Item<Topic>[] | null; apps: Item<App>[] | null; live: Notifications | null }) {
  const [app, setApp] = useState("");
  const [topic, setTopic] = useState("");
  const [payload, setPayload] = useState('{\n  "hello": "from the console"\n}');
  const [result, setResult] = useState<NotificationTestResult | null>(null);
  const [tried, setTried] = useState(false);
  let payloadErr: string | undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(payload);
  } catch (e) {
    payloadErr = `not JSON: ${(e as Error).message}`;
  }
  const chosenApp = app || apps?.[0]?.id || "";
  const chosenTopic = topic || topics?.[0]?.id || "";
  const sendAction = useAction(async () => {
    setResult(null);
    const r = await request<NotificationTestResult>("POST", "/notifications/test", { body: { app: chosenApp, topic: chosenTopic, payload: parsed } });
    setResult(r.data);
  });
  const { busy, error } = sendAction;
  const send = async () => {
    setTried(true);
    if (payloadErr || !chosenApp || !chosenTopic) return;
    await sendAction.run();
  };
  return (
    <section class="card" data-testid="test-send">
      <div class="card-head">
        <b>Send test event</b> <span class="muted">published through a gateway's internal listener, as a backend would: the app receives it on its stream or callback</span>
      </div>
      <div>
        {live && !live.test_send.available && (
          <p class="warn-text" data-testid="test-send-unavailable">
            Test events cannot be sent now: {live.test_send.reason}
          </p>
        )}
        <div class="grid-2">
          <Field label="App">
            <select name="test-app" value={chosenApp} onChange={(e) => setApp((e.target as HTMLSelectElement).value)}>
              {(apps ?? []).map((a) => (
                <option key={a.id} value={a.id}>
                  {a.id}
                </option>
              ))}
            </select>
          </Field>
          <Field label="Topic">
            <select name="test-topic" value={chosenTopic} onChange={(e) => setTopic((e.target as HTMLSelectElement).value)}>
              {(topics ?? []).map((t) => (
                <option key={t.id} value={t.id}>
                  {t.id}
                </option>
              ))}
            </select>
          </Field>
        </div>
        <Field label="Payload (JSON)" error={tried ? payloadErr : undefined}>
          <textarea name="test-payload" rows={4} class="mono" value={payload} onInput={(e) => setPayload((e.target as HTMLTextAreaElement).value)} />
        </Field>
        {tried && (!chosenApp || !chosenTopic) && <p class="warn-text">Choose an app and a topic (create a topic first).</p>}
        <Button kind="primary" busy={busy} onClick={send} data-testid="send-test-event">
          Send test event
        </Button>
        {result && (
          <p data-testid="test-send-result">
            Sent to <b>{result.app}</b> on <b>{result.topic}</b> through {result.node_id}: event id <code class="selectable" data-testid="test-event-id">{result.id}</code>
          </p>
        )}
        <ErrorBanner error={error} title="The test event was not sent" />
      </div>
    </section>
  );
}
