// Create or edit a cluster (`clusters/<name>`, live or sandbox): protocol, balancing, the
// primary and standby endpoints, when to fail over, and the active health check
// (docs/operations/clusters.md, "Clusters: balancing, health, failover, sleep"). Fields the form does
// not show (autoscale, sleep, sticky, gRPC settings, ...) are kept as they are. The ranges are
// the gateways' (control/src/validate/cluster.rs); the registry checks them again and its 422 details
// are shown here.
import { useState } from "preact/hooks";
import { ApiError, Detail, request } from "../api";
import { useAction } from "../shared/hooks";
import { Button, ErrorBanner, Field, Modal, toast } from "../ui";
import { NAME, NAME_RULE } from "./ApiForm";

export type ClusterDoc = Record<string, unknown> & {
  protocol?: string;
  endpoints?: { addr: string; weight?: number }[];
  balancing?: string;
  standby?: { endpoints: { addr: string; weight?: number }[]; failover_below?: number; failback?: string };
  health_check?: { path?: string; interval_ms?: number; timeout_ms?: number; unhealthy_after?: number; healthy_after?: number };
};

type Form = {
  name: string;
  env: "live" | "sandbox" | "both";
  protocol: string;
  balancing: string;
  endpoints: string;
  standby: string;
  failoverBelow: string;
  failback: string;
  health: boolean;
  healthPath: string;
  healthInterval: string;
};

const lines = (eps?: { addr: string; weight?: number }[]) => (eps ?? []).map((e) => (e.weight && e.weight !== 1 ? `${e.addr} ${e.weight}` : e.addr)).join("\n");

/** `host:port [weight]` per line → endpoints, or the first line's problem. */
export function parseEndpoints(text: string): { endpoints: { addr: string; weight: number }[]; error?: string } {
  const endpoints: { addr: string; weight: number }[] = [];
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line) continue;
    const [addr, weight, extra] = line.split(/\s+/);
    const m = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(addr);
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535 || extra !== undefined) return { endpoints, error: `line ${i + 1}: "${line}" is not host:port (1–65535), optionally followed by a weight` };
    const w = weight === undefined ? 1 : Number(weight);
    if (!/^\d+$/.test(weight ?? "1") || w < 1 || w > 4294967295) return { endpoints, error: `line ${i + 1}: the weight must be a whole number of at least 1` };
    endpoints.push({ addr, weight: w });
  }
  return { endpoints };
}

function formErrors(f: Form, creating: boolean): Record<string, string> {
  const e: Record<string, string> = {};
  if (creating && !NAME.test(f.name.trim())) e.name = `required: ${NAME_RULE}`;
  const primary = parseEndpoints(f.endpoints);
  if (primary.error) e.endpoints = primary.error;
  else if (!primary.endpoints.length) e.endpoints = "at least one endpoint";
  const standby = parseEndpoints(f.standby);
  if (standby.error) e["standby.endpoints"] = standby.error;
  const addrs = [...primary.endpoints, ...standby.endpoints].map((x) => x.addr);
  const dup = addrs.find((a, i) => addrs.indexOf(a) !== i);
  if (dup) e[standby.endpoints.some((x) => x.addr === dup) ? "standby.endpoints" : "endpoints"] = `${dup} is listed twice (across both sets)`;
  if (standby.endpoints.length) {
    const t = f.failoverBelow.trim();
    if (t && (!/^\d*\.?\d+$/.test(t) || Number(t) <= 0 || Number(t) > 1)) e["standby.failover_below"] = "must be in (0, 1]: the primary's healthy share under which the standby serves (0.5: half)";
  }
  if (f.health) {
    if (!/^\/[\x21-\x7e]*$/.test(f.healthPath.trim())) e["health_check.path"] = "starts with / and holds no spaces";
    const iv = f.healthInterval.trim();
    if (iv && (!/^\d+$/.test(iv) || Number(iv) < 1 || Number(iv) > 600000)) e["health_check.interval_ms"] = "a whole number of ms between 1 and 600000";
  }
  return e;
}

/** The dialog: `doc` null creates (POST, in the chosen tree or both); else replaces under `etag`. */
export function ClusterFormDialog(props: { name?: string; env: "live" | "sandbox"; doc: ClusterDoc | null; etag?: string; onClose: () => void; onSaved: (name: string) => void }) {
  const creating = !props.doc;
  const d = props.doc ?? {};
  const [form, setForm] = useState<Form>({
    name: props.name ?? "",
    env: creating ? "both" : props.env,
    protocol: d.protocol ?? "http",
    balancing: d.balancing ?? "round_robin",
    endpoints: lines(d.endpoints),
    standby: lines(d.standby?.endpoints),
    failoverBelow: d.standby?.failover_below !== undefined ? String(d.standby.failover_below) : "",
    failback: d.standby?.failback ?? "auto",
    health: !!d.health_check,
    healthPath: d.health_check?.path ?? "/healthz",
    healthInterval: d.health_check?.interval_ms !== undefined ? String(d.health_check.interval_ms) : "",
  });
  const [tried, setTried] = useState(false);
  const [details, setDetails] = useState<Detail[]>([]);
  const local = formErrors(form, creating);
  const errFor = (field: string) => (tried ? local[field] : undefined) ?? details.find((x) => x.field === field || x.field?.startsWith(`${field}[`) || x.field?.startsWith(`${field}.`))?.reason;
  const set = (patch: Partial<Form>) => setForm((f) => ({ ...f, ...patch }));

  const document = (): ClusterDoc => {
    const out: ClusterDoc = { ...d, protocol: form.protocol, endpoints: parseEndpoints(form.endpoints).endpoints };
    if (form.balancing === "round_robin") delete out.balancing;
    else out.balancing = form.balancing;
    const sb = parseEndpoints(form.standby).endpoints;
    if (sb.length) {
      out.standby = { ...(d.standby ?? {}), endpoints: sb, failback: form.failback };
      if (form.failoverBelow.trim()) out.standby.failover_below = Number(form.failoverBelow.trim());
      else delete out.standby.failover_below;
    } else {
      delete out.standby;
      delete out.active;
    }
    if (form.health) {
      out.health_check = { ...(d.health_check ?? {}), path: form.healthPath.trim() };
      if (form.healthInterval.trim()) out.health_check.interval_ms = Number(form.healthInterval.trim());
    } else delete out.health_check;
    return out;
  };

  const saveAction = useAction(
    async () => {
      setDetails([]);
      const doc = document();
      const name = creating ? form.name.trim() : props.name!;
      if (creating) {
        const envs = form.env === "both" ? ["live", "sandbox"] : [form.env];
        for (const env of envs) await request("POST", `${env === "sandbox" ? "/sandbox" : ""}/clusters`, { body: { name, ...doc } });
      } else {
        await request("PUT", `${props.env === "sandbox" ? "/sandbox" : ""}/clusters/${encodeURIComponent(name)}`, { body: doc, ifMatch: props.etag });
      }
      toast(creating ? `Created the cluster ${name}` : `Saved the cluster ${name}: gateways apply it within a second`);
      props.onSaved(name);
    },
    {
      onError: (e) => {
        if (e instanceof ApiError) setDetails(e.details);
        return e;
      },
    },
  );
  const { busy, error } = saveAction;
  const save = async () => {
    setTried(true);
    if (Object.keys(local).length) return;
    await saveAction.run();
  };

  return (
    <Modal
      wide
      title={creating ? "New cluster" : `Edit the cluster ${props.name} (${props.env})`}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button kind="primary" busy={busy} onClick={save} data-testid="cluster-form-save">
            {creating ? "Create cluster" : "Save cluster"}
          </Button>
        </>
      }
    >
      <form data-testid="cluster-form" onSubmit={(e) => { e.preventDefault(); save(); }}>
        <div class="grid-2">
          {creating && (
            <Field label="Name" error={errFor("name")} hint={NAME_RULE}>
              <input name="name" value={form.name} onInput={(e) => set({ name: (e.target as HTMLInputElement).value })} />
            </Field>
          )}
          {creating && (
            <Field label="Tree" hint="drafts call sandbox clusters; published APIs call live ones">
              <select name="env" value={form.env} onChange={(e) => set({ env: (e.target as HTMLSelectElement).value as Form["env"] })}>
                <option value="both">live and sandbox</option>
                <option value="live">live only</option>
                <option value="sandbox">sandbox only</option>
              </select>
            </Field>
          )}
          <Field label="Protocol" error={errFor("protocol")}>
            <select name="protocol" value={form.protocol} onChange={(e) => set({ protocol: (e.target as HTMLSelectElement).value })}>
              <option value="http">http</option>
              <option value="grpc">grpc</option>
            </select>
          </Field>
          <Field label="Balancing" error={errFor("balancing")}>
            <select name="balancing" value={form.balancing} onChange={(e) => set({ balancing: (e.target as HTMLSelectElement).value })}>
              <option value="round_robin">round_robin (weighted)</option>
              <option value="least_load">least_load</option>
              <option value="peak_ewma">peak_ewma</option>
              <option value="consistent_hash">consistent_hash</option>
            </select>
          </Field>
          <Field label="Endpoints" error={errFor("endpoints")} hint="one host:port per line, optionally a weight: 10.0.0.5:8080 2">
            <textarea name="endpoints" rows={3} class="mono" value={form.endpoints} onInput={(e) => set({ endpoints: (e.target as HTMLTextAreaElement).value })} spellcheck={false} />
          </Field>
          <Field label="Standby endpoints" error={errFor("standby.endpoints") ?? errFor("standby")} hint="optional: the set that serves on failover">
            <textarea name="standby" rows={3} class="mono" value={form.standby} onInput={(e) => set({ standby: (e.target as HTMLTextAreaElement).value })} spellcheck={false} />
          </Field>
          <Field label="Fail over below (healthy share)" error={errFor("standby.failover_below")} hint="in (0, 1]; default 0.5">
            <input name="failover_below" inputMode="decimal" value={form.failoverBelow} placeholder="0.5" onInput={(e) => set({ failoverBelow: (e.target as HTMLInputElement).value })} />
          </Field>
          <Field label="Failback" hint="after an automatic failover: back on its own once healthy, or stay until an operator moves it">
            <select name="failback" value={form.failback} onChange={(e) => set({ failback: (e.target as HTMLSelectElement).value })}>
              <option value="auto">auto</option>
              <option value="manual">manual</option>
            </select>
          </Field>
          <Field label="Health check" hint="every gateway probes every endpoint">
            <label class="check">
              <input type="checkbox" name="health" checked={form.health} onChange={(e) => set({ health: (e.target as HTMLInputElement).checked })} /> probe the endpoints
            </label>
          </Field>
          {form.health && (
            <Field label="Probe path and interval (ms)" error={errFor("health_check.path") ?? errFor("health_check.interval_ms") ?? errFor("health_check")}>
              <div class="inline">
                <input name="health_path" value={form.healthPath} onInput={(e) => set({ healthPath: (e.target as HTMLInputElement).value })} />
                <input name="health_interval" inputMode="numeric" value={form.healthInterval} placeholder="1000" onInput={(e) => set({ healthInterval: (e.target as HTMLInputElement).value })} />
              </div>
            </Field>
          )}
        </div>
        <button type="submit" hidden />
      </form>
      <ErrorBanner error={error} title={error instanceof ApiError && error.code === "VALIDATION_FAILED" ? "The gateways would refuse this cluster" : "Not saved"} />
    </Modal>
  );
}
