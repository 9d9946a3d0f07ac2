// Reading the portal's OpenAPI document: its operations in catalogue order, `$ref`s followed
// to their schemas, and a schema's type written for people.
import type { JsonSchema, Op, Operation, Parameter, ParameterRef, PortalDocument } from "./types";

const HTTP_METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

function isOperation(v: unknown): v is Operation {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The API operations of `doc`, sorted by id (the router and the notification endpoints have their own pages). */
export function operations(doc: PortalDocument | null): Op[] {
  const out: Op[] = [];
  for (const [path, item] of Object.entries(doc?.paths ?? {})) {
    if (path === "/router") continue;
    for (const [method, op] of Object.entries(item)) {
      // The notification endpoints (no x-portico-api) have their own page.
      if (!HTTP_METHODS.includes(method) || !isOperation(op) || !op["x-portico-api"]) continue;
      out.push({ path, method, op, id: op.operationId ?? `${method} ${path}` });
    }
  }
  out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return out;
}

export function refName(ref: string): string {
  return decodeURIComponent(ref.replace(/^#\/components\/schemas\//, "")).replace(/~1/g, "/").replace(/~0/g, "~");
}

/** `s` with its `$ref`s followed (at most 16), its own fields over the target's. */
export function deref(doc: PortalDocument, s: JsonSchema | undefined): JsonSchema | undefined {
  let seen = 0;
  while (s && typeof s.$ref === "string" && seen++ < 16) {
    const target = doc.components?.schemas?.[refName(s.$ref)];
    if (!target) break;
    const { $ref: _unused, ...rest } = s;
    void _unused;
    s = { ...target, ...rest };
  }
  return s;
}

/** A schema's type as the tables show it: `string (int64)`, `Item[]`, `map<string, int32>`, `"A" | "B"`. */
export function typeOf(doc: PortalDocument, s: JsonSchema | undefined): string {
  if (!s || typeof s !== "object") return "any";
  if (typeof s.$ref === "string") return refName(s.$ref).split(".").pop() ?? "object";
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  const alternatives = s.oneOf ?? s.anyOf;
  if (Array.isArray(alternatives)) return alternatives.map((x) => typeOf(doc, x)).join(" | ");
  const t = Array.isArray(s.type) ? s.type.join(" | ") : s.type;
  if (t === "array") return `${typeOf(doc, s.items)}[]`;
  if (t === "object" && s.additionalProperties && typeof s.additionalProperties === "object" && !s.properties)
    return `map<string, ${typeOf(doc, s.additionalProperties)}>`;
  const fmt = s.format ? ` (${s.format})` : "";
  return (t ?? "any") + fmt;
}

/** An operation's parameters, shared ones (`#/components/parameters/...`) looked up. */
export function parametersOf(doc: PortalDocument, op: Operation): Parameter[] {
  const out: Parameter[] = [];
  for (const p of op.parameters ?? []) {
    if ("$ref" in p) {
      const found = doc.components?.parameters?.[(p as ParameterRef).$ref.split("/").pop() ?? ""];
      if (found) out.push(found);
    } else out.push(p);
  }
  return out;
}
