// The one HTTP client of the console and the portal: builds the request, sends it, and decodes
// the registry's answer — a JSON document, or the error envelope {code, message, request_id,
// details} (docs/PROTOCOL.md, "The error envelope"; docs/operations/registry.md, "What the registry
// refuses before writing") into an ApiError. Who the caller is stays with each
// entry: the console adds its admin token and operator name (src/api.ts), the portal its
// in-browser signature headers or none (portal/api.ts).

import type { components } from "../generated/api";

/** The registry's error envelope, as its OpenAPI document describes it. */
export type ErrorEnvelope = components["schemas"]["Error"];
export type Detail = { path?: string; field?: string; reason: string };

/** A failed call: the registry's envelope {code, message, request_id, details}. */
export class ApiError extends Error {
  status: number;
  code: string;
  requestId: string;
  details: Detail[];
  constructor(status: number, code: string, message: string, requestId = "", details: Detail[] = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
    this.details = details;
  }
}

export type Reply<T> = { data: T; etag?: string; requestId: string; status: number };

export type CallOptions = {
  /** Sent as JSON (Content-Type: application/json). */
  body?: unknown;
  /** Sent as the exact text given, with `contentType` (a signed body must be the bytes signed). */
  text?: string;
  contentType?: string;
  form?: FormData;
  binary?: ArrayBuffer;
  headers?: Record<string, string>;
  ifMatch?: string;
  ifNoneMatch?: boolean;
  query?: Record<string, string | undefined>;
  signal?: AbortSignal;
  cache?: RequestCache;
  /** Who answers, in the NETWORK error's words ("the registry"). */
  peer?: string;
};

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function details(v: unknown): Detail[] {
  if (!Array.isArray(v)) return [];
  return v.filter(isRecord).map((d) => ({
    path: typeof d.path === "string" ? d.path : undefined,
    field: typeof d.field === "string" ? d.field : undefined,
    reason: typeof d.reason === "string" ? d.reason : "",
  }));
}

/** The ApiError of a refused answer: the envelope's fields, else the status and the text. */
export function decodeError(status: number, statusText: string, data: unknown, requestId: string): ApiError {
  const env: Partial<ErrorEnvelope> & Record<string, unknown> = isRecord(data) ? data : {};
  return new ApiError(
    status,
    typeof env.code === "string" ? env.code : `HTTP_${status}`,
    typeof env.message === "string" ? env.message : typeof data === "string" && data ? data.slice(0, 300) : statusText,
    typeof env.request_id === "string" ? env.request_id : requestId,
    details(env.details),
  );
}

/** Sends one request to `url`; resolves with the decoded answer, rejects with an ApiError. */
export async function call<T>(method: string, url: string, opts: CallOptions = {}): Promise<Reply<T>> {
  const headers: Record<string, string> = { Accept: "application/json", ...opts.headers };
  if (opts.ifMatch) headers["If-Match"] = `"${opts.ifMatch.replace(/"/g, "")}"`;
  if (opts.ifNoneMatch) headers["If-None-Match"] = "*";
  let body: BodyInit | undefined;
  if (opts.form) {
    body = opts.form;
  } else if (opts.binary) {
    body = opts.binary;
    headers["Content-Type"] = "application/octet-stream";
  } else if (opts.text !== undefined) {
    body = opts.text;
    headers["Content-Type"] = opts.contentType ?? "text/plain";
  } else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers["Content-Type"] = "application/json";
  }
  if (opts.query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query)) if (v !== undefined && v !== "") q.set(k, v);
    const s = q.toString();
    if (s) url += `?${s}`;
  }
  let resp: Response;
  try {
    resp = await fetch(url, { method, headers, body, signal: opts.signal, cache: opts.cache });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw new ApiError(0, "NETWORK", `${opts.peer ?? "the registry"} cannot be reached (${(e as Error).message})`);
  }
  const requestId = resp.headers.get("X-Portico-Request-Id") ?? "";
  const etag = resp.headers.get("ETag")?.replace(/"/g, "") ?? undefined;
  const text = resp.status === 204 ? "" : await resp.text();
  let data: unknown = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!resp.ok) throw decodeError(resp.status, resp.statusText, data, requestId);
  return { data: data as T, etag, requestId, status: resp.status };
}

/** One line for a failure: "CODE: message" for the registry's refusals, else the message. */
export function errorLine(e: unknown): string {
  if (e instanceof ApiError) return `${e.code}: ${e.message}`;
  return e instanceof Error ? e.message : String(e);
}
