// Apps: merchant applications (live) and sandbox apps: create (the secret shown once),
// disable/enable, grant/revoke APIs, rotate the secret, delete.
import { useState } from "preact/hooks";
import { ApiDef, App, Item, List, get, request } from "../api";
import { useAction } from "../shared/hooks";
import { Badge, Button, CopyButton, Empty, ErrorBanner, Field, Modal, Spinner, cx, toast, usePoll } from "../ui";
import { RefusedNote, refusalsOf } from "../served";

type Env = "live" | "sandbox";
const prefix = (env: Env) => (env === "sandbox" ? "/sandbox" : "");

type Creds = { app_key: string; secret: string; rotated?: boolean };

export function AppsPage() {
  const [env, setEnv] = useState<Env>("live");
  const [apps, setApps] = useState<Item<App>[] | null>(null);
  const [apiIds, setApiIds] = useState<string[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [filter, setFilter] = useState("");
  const [creating, setCreating] = useState(false);
  const [creds, setCreds] = useState<Creds | null>(null);
  const [granting, setGranting] = useState<Item<App> | null>(null);
  const [confirm, setConfirm] = useState<{ title: string; text: string; action: string; kind: "danger" | "primary"; run: () => Promise<void> } | null>(null);

  const load = async () => {
    try {
      const [a, ids] = await Promise.all([get<List<App>>(`${prefix(env)}/apps`), get<List<ApiDef>>(env === "sandbox" ? "/sandbox/apis" : "/apis")]);
      setApps(a.data.items);
      setApiIds(ids.data.items.map((i) => i.id));
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  usePoll(load, 10000, [env]);

  const act = async (label: string, fn: () => Promise<unknown>) => {
    try {
      await fn();
      toast(label);
      load();
    } catch (e) {
      setError(e);
    }
  };
  const f = filter.trim().toLowerCase();
  const shown = (apps ?? []).filter((a) => !f || a.id.toLowerCase().includes(f) || (a.document?.name ?? "").toLowerCase().includes(f));

  return (
    <div class="page">
      <header class="page-head">
        <div>
          <h1>Apps</h1>
          <p class="muted">Merchant applications: their keys, status, granted APIs and secrets. Sandbox apps sign calls to drafts.</p>
        </div>
        <div class="head-actions">
          <Button kind="primary" onClick={() => setCreating(true)} data-testid="create-app">
            Create {env === "sandbox" ? "sandbox " : ""}app
          </Button>
        </div>
      </header>
      <div class="toolbar">
        <div class="seg">
          {(["live", "sandbox"] as const).map((k) => (
            <button
              key={k}
              class={cx("seg-btn", env === k && "active")}
              onClick={() => {
                setApps(null);
                setEnv(k);
              }}
            >
              {k === "live" ? "Live apps" : "Sandbox apps"}
            </button>
          ))}
        </div>
        <input class="search" type="search" placeholder="Filter by key or name…" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} />
      </div>
      <ErrorBanner error={error} onClose={() => setError(null)} />
      {apps === null ? (
        error ? null : <Spinner />
      ) : shown.length === 0 ? (
        <Empty title={apps.length ? "No app matches" : `No ${env} apps yet`}>{!apps.length && "Create one: its key and secret are generated, and the secret is shown once."}</Empty>
      ) : (
        <div class="card table-card">
          <table class="table" data-testid="apps-table">
            <thead>
              <tr>
                <th>App</th>
                <th>Status</th>
                <th>Granted APIs</th>
                <th>Own limits</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {shown.map((a) => {
                const d = a.document ?? {};
                const disabled = d.status === "disabled";
                const path = `${prefix(env)}/apps/${encodeURIComponent(a.id)}`;
                return (
                  <tr key={a.id} class={cx(disabled && "row-muted")} data-app={a.id}>
                    <td>
                      <code class="strong selectable">{a.id}</code>
                      {d.name && <div class="sub">{d.name}</div>}
                    </td>
                    <td>
                      {refusalsOf(a).length ? <Badge tone="bad">refused</Badge> : disabled ? <Badge tone="bad">disabled</Badge> : <Badge tone="ok">active</Badge>}
                      <RefusedNote item={a} />
                    </td>
                    <td>
                      <div class="chips">
                      {(d.apis ?? []).length === 0 && <span class="muted">none</span>}
                      {(d.apis ?? []).map((id) => (
                        <span key={id} class="chip">
                          {id === "*" ? "all APIs (*)" : id}
                          <button
                            class="chip-x"
                            aria-label={`Revoke ${id}`}
                            title={`Revoke ${id}`}
                            onClick={() =>
                              setConfirm({
                                title: `Revoke ${id} from ${a.id}?`,
                                text: `Calls by ${a.id} to ${id === "*" ? "APIs granted only through *" : id} get 403 APP_FORBIDDEN from now on.`,
                                action: "Revoke",
                                kind: "danger",
                                run: () => act(`Revoked ${id} from ${a.id}`, () => request("POST", `${path}/revoke`, { body: { apis: [id] }, ifMatch: a.etag })),
                              })
                            }
                          >
                            ×
                          </button>
                        </span>
                      ))}
                      </div>
                    </td>
                    <td class="sub">{(d.rate_limits ?? []).map((r) => `${r.limit}/${r.per}`).join(", ") || "—"}</td>
                    <td class="right nowrap">
                      <Button small onClick={() => setGranting(a)}>
                        Grant…
                      </Button>{" "}
                      {disabled ? (
                        <Button small kind="success" onClick={() => act(`Enabled ${a.id}`, () => request("POST", `${path}/enable`, { ifMatch: a.etag }))}>
                          Enable
                        </Button>
                      ) : (
                        <Button
                          small
                          kind="danger"
                          onClick={() =>
                            setConfirm({
                              title: `Disable ${a.id}?`,
                              text: `Every call signed by ${a.id} gets 403 APP_DISABLED until it is enabled again.`,
                              action: "Disable",
                              kind: "danger",
                              run: () => act(`Disabled ${a.id}`, () => request("POST", `${path}/disable`, { ifMatch: a.etag })),
                            })
                          }
                        >
                          Disable…
                        </Button>
                      )}{" "}
                      <Button
                        small
                        onClick={() =>
                          setConfirm({
                            title: `Rotate the secret of ${a.id}?`,
                            text: "A new secret is made and shown once. The old one stops working at once: calls signed with it get 401 SIGNATURE_INVALID.",
                            action: "Rotate secret",
                            kind: "danger",
                            run: async () => {
                              try {
                                const r = await request<Creds>("POST", `${path}/rotate-secret`, { ifMatch: a.etag });
                                setCreds({ ...r.data, rotated: true });
                                load();
                              } catch (e) {
                                setError(e);
                              }
                            },
                          })
                        }
                      >
                        Rotate secret…
                      </Button>{" "}
                      <Button
                        small
                        kind="ghost"
                        onClick={() =>
                          setConfirm({
                            title: `Delete ${a.id}?`,
                            text: "The app is removed: its calls get 401 APP_UNKNOWN. This cannot be undone (a new app gets a new secret).",
                            action: "Delete app",
                            kind: "danger",
                            run: () => act(`Deleted ${a.id}`, () => request("DELETE", path, { ifMatch: a.etag })),
                          })
                        }
                      >
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
      {creating && (
        <CreateApp
          env={env}
          apiIds={apiIds}
          onClose={() => setCreating(false)}
          onCreated={(c) => {
            setCreating(false);
            setCreds(c);
            load();
          }}
        />
      )}
      {creds && <SecretOnce creds={creds} onClose={() => setCreds(null)} />}
      {granting && (
        <GrantDialog
          app={granting}
          env={env}
          apiIds={apiIds}
          onClose={() => setGranting(null)}
          onDone={() => {
            setGranting(null);
            load();
          }}
        />
      )}
      {confirm && (
        <ConfirmDialog
          {...confirm}
          onClose={() => setConfirm(null)}
        />
      )}
    </div>
  );
}

function ConfirmDialog(props: { title: string; text: string; action: string; kind: "danger" | "primary"; run: () => Promise<void>; onClose: () => void }) {
  const { run, busy } = useAction(async () => {
    await props.run();
    props.onClose();
  });
  return (
    <Modal
      tone={props.kind === "danger" ? "danger" : "default"}
      title={props.title}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button
            kind={props.kind}
            busy={busy}
            data-autofocus
            onClick={run}
          >
            {props.action}
          </Button>
        </>
      }
    >
      <p>{props.text}</p>
    </Modal>
  );
}

function ApiPicker({ apiIds, selected, onChange }: { apiIds: string[]; selected: string[]; onChange: (v: string[]) => void }) {
  const toggle = (id: string) => onChange(selected.includes(id) ? selected.filter((x) => x !== id) : [...selected, id]);
  return (
    <div class="picker">
      <label class="check strong">
        <input type="checkbox" checked={selected.includes("*")} onChange={() => toggle("*")} /> all APIs (<code>*</code>), present and future
      </label>
      <div class="picker-list">
        {apiIds.length === 0 && <span class="muted">No APIs to grant yet.</span>}
        {apiIds.map((id) => (
          <label key={id} class="check">
            <input type="checkbox" checked={selected.includes(id)} disabled={selected.includes("*")} onChange={() => toggle(id)} /> {id}
          </label>
        ))}
      </div>
    </div>
  );
}

function CreateApp({ env, apiIds, onClose, onCreated }: { env: Env; apiIds: string[]; onClose: () => void; onCreated: (c: Creds) => void }) {
  const [key, setKey] = useState("");
  const [name, setName] = useState("");
  const [apis, setApis] = useState<string[]>([]);
  const [limit, setLimit] = useState("");
  const [per, setPer] = useState("second");
  const keyErr = key && !/^[A-Za-z0-9._-]{1,128}$/.test(key) ? "1–128 of A-Z a-z 0-9 . _ -" : undefined;
  const limitErr = limit && !/^\d+$/.test(limit) ? "a whole number" : undefined;
  const submitAction = useAction(async () => {
    const r = await request<Creds>("POST", `${prefix(env)}/apps`, {
      body: {
        ...(key.trim() ? { app_key: key.trim() } : {}),
        ...(name.trim() ? { name: name.trim() } : {}),
        apis,
        ...(limit ? { rate_limits: [{ limit: Number(limit), per }] } : {}),
      },
    });
    onCreated(r.data);
  });
  const { busy, error } = submitAction;
  const submit = submitAction.run;
  return (
    <Modal
      title={`Create a ${env} app`}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button kind="primary" busy={busy} disabled={!!keyErr || !!limitErr} onClick={submit} data-testid="confirm-create-app">
            Create app
          </Button>
        </>
      }
    >
      <div class="grid-2">
        <Field label="App key" error={keyErr} hint="leave empty to generate one">
          <input name="app_key" value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} placeholder="app-…" />
        </Field>
        <Field label="Name">
          <input name="name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} placeholder="e.g. Acme storefront" />
        </Field>
        <Field label="Own rate limit" error={limitErr} hint="over all its APIs; empty for none">
          <input name="limit" inputMode="numeric" value={limit} onInput={(e) => setLimit((e.target as HTMLInputElement).value)} />
        </Field>
        <Field label="Per">
          <select value={per} onChange={(e) => setPer((e.target as HTMLSelectElement).value)}>
            <option value="second">second</option>
            <option value="minute">minute</option>
          </select>
        </Field>
      </div>
      <Field label="Granted APIs">
        <ApiPicker apiIds={apiIds} selected={apis} onChange={setApis} />
      </Field>
      <ErrorBanner error={error} title="The app was not created" />
    </Modal>
  );
}

function SecretOnce({ creds, onClose }: { creds: Creds; onClose: () => void }) {
  const [stored, setStored] = useState(false);
  return (
    <Modal
      title={creds.rotated ? `New secret of ${creds.app_key}` : `App ${creds.app_key} created`}
      onClose={onClose}
      dismissable={false}
      footer={
        <Button kind="primary" disabled={!stored} onClick={onClose} data-testid="close-secret">
          Done
        </Button>
      }
    >
      <div class="warn-box">
        <b>This secret is shown once.</b> Copy it now and hand it to the merchant over a safe channel; the registry never shows it again.
      </div>
      <div class="cred">
        <span class="cred-label">App key</span>
        <code class="selectable" data-testid="new-app-key">{creds.app_key}</code>
        <CopyButton text={creds.app_key} />
      </div>
      <div class="cred">
        <span class="cred-label">Secret</span>
        <code class="selectable secret" data-testid="new-secret">{creds.secret}</code>
        <CopyButton text={creds.secret} />
      </div>
      <label class="check">
        <input type="checkbox" checked={stored} onChange={(e) => setStored((e.target as HTMLInputElement).checked)} data-testid="secret-stored" /> I have stored the secret
      </label>
    </Modal>
  );
}

function GrantDialog({ app, env, apiIds, onClose, onDone }: { app: Item<App>; env: Env; apiIds: string[]; onClose: () => void; onDone: () => void }) {
  const current = app.document?.apis ?? [];
  const [sel, setSel] = useState<string[]>(current);
  const add = sel.filter((x) => !current.includes(x));
  const remove = current.filter((x) => !sel.includes(x));
  const grantAction = useAction(async () => {
    const path = `${prefix(env)}/apps/${encodeURIComponent(app.id)}`;
    let etag = app.etag;
    if (add.length) etag = (await request("POST", `${path}/grant`, { body: { apis: add }, ifMatch: etag })).etag ?? etag;
    if (remove.length) await request("POST", `${path}/revoke`, { body: { apis: remove }, ifMatch: etag });
    toast(`Updated the grants of ${app.id}`);
    onDone();
  });
  const { busy, error } = grantAction;
  const submit = grantAction.run;
  return (
    <Modal
      title={`APIs granted to ${app.id}`}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button kind="primary" busy={busy} disabled={!add.length && !remove.length} onClick={submit}>
            {add.length || remove.length ? `Grant ${add.length}, revoke ${remove.length}` : "No change"}
          </Button>
        </>
      }
    >
      <ApiPicker apiIds={[...new Set([...apiIds, ...current.filter((x) => x !== "*")])]} selected={sel} onChange={setSel} />
      <ErrorBanner error={error} title="The grants were not changed" />
    </Modal>
  );
}
