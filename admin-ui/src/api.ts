// The registry's admin REST API (/api/v1), as the console uses it. Every call carries the
// admin token (kept in sessionStorage: gone when the tab closes) and the operator's name
// (X-Portico-Operator, recorded in the audit log and on switches).

import type { components } from "./generated/api";
import { ApiError, call, type CallOptions, type Reply } from "./shared/http";

export { ApiError, type Detail, type Reply } from "./shared/http";

const TOKEN_KEY = "portico.token";
const OPERATOR_KEY = "portico.operator";

export const session = {
  token(): string | null {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  operator(): string {
    return sessionStorage.getItem(OPERATOR_KEY) || localStorage.getItem(OPERATOR_KEY) || "";
  },
  signIn(token: string, operator: string) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.setItem(OPERATOR_KEY, operator);
    localStorage.setItem(OPERATOR_KEY, operator); // a convenience for the next sign-in; never the token
  },
  signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

type Options = Pick<CallOptions, "body" | "form" | "binary" | "ifMatch" | "ifNoneMatch" | "query" | "signal"> & {
  /** A token to try instead of the session's (the sign-in form): its 401 does not sign out. */
  token?: string;
};

/** A call to the admin API (`/api/v1<path>`) with the admin token and the operator's name. */
export async function request<T = any>(method: string, path: string, opts: Options = {}): Promise<Reply<T>> {
  const { token: given, ...rest } = opts;
  const headers: Record<string, string> = {};
  const token = given ?? session.token();
  if (token) headers.Authorization = `Bearer ${token}`;
  const operator = session.operator();
  if (operator) headers["X-Portico-Operator"] = operator;
  try {
    return await call<T>(method, `/api/v1${path}`, { ...rest, headers });
  } catch (e) {
    if (e instanceof ApiError && e.status === 401 && !given) window.dispatchEvent(new CustomEvent("portico:unauthorized"));
    throw e;
  }
}

export const get = <T = any>(path: string, opts?: Options) => request<T>("GET", path, opts);

// ---- document shapes (docs/operations/config-tree.md "The configuration tree") ----
// Generated: src/generated/api.d.ts is made by `npm run gen:api` from the registry's OpenAPI
// document (src/generated/openapi.json), whose document schemas are generated from the Rust
// types the gateways parse (docs/operations/registry.md, "The admin API's schemas"). Never edit them here.

/** The schemas of the registry's OpenAPI document, by name. */
export type Schemas = components["schemas"];
export type HttpRule = Schemas["HttpRule"];
export type RateLimit = Schemas["RateLimitRule"];
export type Policy = Schemas["Policy"];
/** `apis/<id>`; fields a newer registry adds are kept as they are by the forms. */
export type ApiDef = Schemas["ApiDefinition"] & { [k: string]: unknown };
/** `clusters/<name>`. */
export type Cluster = Schemas["Cluster"];
export type AlertRule = Schemas["AlertRule"];
/** A gateway's refusal of a document (docs/operations/registry.md, "What the gateways serve"). */
export type Refusal = {
  node_id: string;
  reason: string;
  kept_previous: boolean;
  /** The version still served in its place, as the gateway describes it. */
  kept?: { updated_by?: string; updated_at?: string; version?: number; degraded?: boolean; active?: string; digest?: string } | null;
};
/** What the live gateways serve of a listed document (switches, apps, topics, clusters). */
export type Served = {
  nodes: number;
  refused: Refusal[];
  /** Switches: served degraded by every node (true), by none (false), or they differ / none answered (null). */
  degraded?: boolean | null;
  degraded_on?: string[];
  /** Clusters: the side every node serves, or null. */
  active?: string | null;
  sides?: { node_id: string; active: string; reason: "manual" | "auto" }[];
};
export type Item<T> = { id: string; etag: string; document: T | null; error?: string; raw?: string; written_at?: string; served?: Served | null };
export type List<T> = { items: Item<T>[] };
export type Fallback = Schemas["Fallback"];
/** `switches/<api_id>` or, a key-level switch, `switches/<api_id>@<label>`. */
export type Switch = Schemas["Switch"];
/** An app as the registry shows it: without its secret. */
export type App = Schemas["AppView"];
export type AuditEntry = {
  id: string;
  at: string;
  actor: string;
  action: string;
  target: string;
  request_id: string;
  detail?: any;
};
export type NodeView = {
  node_id: string;
  addr?: string;
  admin_addr?: string;
  sandbox_addr?: string;
  started_at?: string;
  updated_at?: string;
  config_version?: { generation: number; digest: string };
  in_sync?: boolean;
  lag_zxid?: number;
  updated_ms_ago?: number | null;
  error?: string;
  /** The documents the node refuses (live, and its sandbox plane), from its /status. */
  rejected_documents?: RejectedDocument[];
  sandbox_rejected_documents?: RejectedDocument[];
  status_error?: string;
};
export type RejectedDocument = { path: string; reason: string; kept_previous: boolean; kept?: Refusal["kept"] };
export type Nodes = { generation: number; digest: string; nodes: NodeView[] };
export type Quantiles = { p50: number | null; p90: number | null; p99: number | null; p999: number | null };
export type Point = Quantiles & { t: number; qps: number; availability: number | null };
export type ApiHealth = {
  plane: string;
  api: string;
  published: boolean;
  qps: number;
  requests: number;
  errors_5xx: number;
  availability: number | null;
  latency_ms: Quantiles;
  in_flight: number;
  breaker: "closed" | "open" | "half_open" | "unknown";
  breaker_nodes: { node_id: string; state: string }[];
  series?: Point[];
};
export type Health = {
  interval_ms: number;
  window_s: number;
  samples: number;
  warming_up: boolean;
  sampled_at_ms: number | null;
  error: string | null;
  nodes: { node_id: string; admin_addr: string; ok: boolean; error?: string; last_ok_ms_ago?: number; generation: Record<string, number> }[];
  totals: { qps: number; requests: number; errors_5xx: number; availability: number | null; latency_ms: Quantiles; series: Point[] };
  apis: ApiHealth[];
};
export type TryResult = {
  request: { method: string; url: string; headers: Record<string, string>; body: string; app_key: string | null; string_to_sign: string | null };
  response: { status: number; headers: Record<string, string>; body: string; body_encoding: string; body_bytes: number; truncated: boolean };
  latency_ms: number;
  node_id: string;
};

/** `GET /apis/{id}/hot-keys`: an API's hot keys merged across the live gateways. */
export type HotKey = { key: string; rate: number; bytes_per_s: number; since_ms: number | null; gateways: string[]; match: Record<string, string[]> | null };
export type HotKeys = { api_id: string; keys: HotKey[]; nodes: { node_id: string; ok: boolean; error?: string }[] };

/** `topics/<name>`: a notification topic (docs/operations/notifications.md, "Notifications"). */
export type Topic = Schemas["Topic"];
/** `GET /notifications`: what the live gateways report of notifications, merged. */
export type Notifications = {
  store: string | null;
  apps: { app: string; connections: number; backlog: number | null; callback: boolean; nodes: { node_id: string; connections: number; since_ms?: number | null; backlog?: number }[] }[];
  dead_letters: { app: string; id: string; topic: string; attempts: number; last_error: string; at_ms: number; node_id: string }[];
  dead_letters_total: number;
  nodes: { node_id: string; ok: boolean; error?: string; internal_addr?: string | null; store?: string; streams?: number; dead_letters_total?: number; note?: string }[];
  test_send: { available: boolean; reason?: string };
};
/** `POST /notifications/test`: the event id the gateway assigned. */
export type NotificationTestResult = { app: string; topic: string; id: string; node_id: string };
