// What the portal reads from the registry, typed. The registry's admin OpenAPI document
// (src/generated/) does not describe the /portal endpoints, so the documents they answer are
// written out here, as registry/src/portal/openapi/ makes them: an OpenAPI 3 document per
// audience (every public API, or one app's) with the portal's `x-portico-*` extensions.
// "Try it" answers the console's sandbox call shape (registry/src/portal/forward.rs sends
// through the same code), so that one comes from the generated types.

import type { components } from "../src/generated/api";

/** The JSON Schema subset the registry writes (proto3 JSON mapping), read loosely. */
export interface JsonSchema {
  $ref?: string;
  type?: string | string[];
  format?: string;
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  additionalProperties?: boolean | JsonSchema;
  enum?: unknown[];
  const?: unknown;
  oneOf?: JsonSchema[];
  anyOf?: JsonSchema[];
  [extension: string]: unknown;
}

export interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  description?: string;
  schema?: JsonSchema;
}

/** A reference to a shared parameter (`#/components/parameters/<name>`). */
export interface ParameterRef {
  $ref: string;
}

export interface MediaType {
  schema?: JsonSchema;
}

export interface ResponseObject {
  description?: string;
  content?: Record<string, MediaType>;
}

/** A copy-ready snippet (`x-codeSamples`, with the portal's own fields). */
export interface CodeSample {
  lang: string;
  label: string;
  source: string;
  "x-id": string;
  /** The file to save it as. */
  "x-file": string;
  /** The command that runs it. */
  "x-run": string;
}

/** `x-portico-rate-limits`: one rate limit of the API. */
export interface RateLimit {
  key?: string[];
  limit: number;
  per: string;
  burst: number;
}

/** `x-portico-example`: a request the gateway accepts as it stands, and an example answer. */
export interface ExampleRequest {
  method?: string;
  path?: string;
  query?: string;
  body?: string;
  response?: unknown;
}

/** `x-portico-router`: the same API called in the router style. */
export interface RouterStyle {
  method: string;
  path: string;
  query: string;
  body: string;
  reply?: unknown;
}

export interface Operation {
  operationId?: string;
  summary?: string;
  description?: string;
  tags?: string[];
  parameters?: (Parameter | ParameterRef)[];
  requestBody?: { content?: Record<string, MediaType> };
  responses?: Record<string, ResponseObject>;
  "x-portico-api"?: string;
  "x-portico-binding"?: number;
  "x-portico-auth"?: "signature" | "none";
  "x-portico-backend"?: "grpc" | "http";
  "x-portico-timeout-ms"?: number;
  "x-portico-max-body-bytes"?: number;
  "x-portico-rate-limits"?: RateLimit[];
  "x-portico-example"?: ExampleRequest;
  "x-portico-router"?: RouterStyle;
  "x-codeSamples"?: CodeSample[];
}

/** A path item: its operations by HTTP method (and the item's own fields, unread). */
export type PathItem = Record<string, Operation | unknown>;

/** `x-portico-error-codes`: an error code a merchant can meet. */
export interface ErrorCode {
  status: number;
  code: string;
  meaning: string;
  what_to_do: string;
}

/** `x-portico-grpc-codes`: a gRPC status name and the HTTP status it answers. */
export interface GrpcCode {
  code: string;
  status: number;
}

/** `x-portico-notifications`: the app's topics (signed-in document) or how to list them. */
export interface NotificationsInfo {
  topics?: string[] | null;
  delivery?: "callback" | "stream or websocket";
  how_to_list?: string;
}

/** `GET /portal/openapi.json` and `GET /portal/apps/<key>/openapi.json`. */
export interface PortalDocument {
  openapi?: string;
  info?: { title?: string; description?: string; version?: string };
  paths?: Record<string, PathItem>;
  components?: { schemas?: Record<string, JsonSchema>; parameters?: Record<string, Parameter> };
  "x-portico-app"?: string;
  "x-portico-error-codes"?: ErrorCode[];
  "x-portico-grpc-codes"?: GrpcCode[];
  "x-portico-notifications"?: NotificationsInfo;
}

/** One operation of the catalogue: where it is and its stable id. */
export interface Op {
  path: string;
  method: string;
  op: Operation;
  id: string;
}

/** `POST /portal/try`'s body: the request to forward as it is (signed in the browser). */
export interface TryRequest {
  method: string;
  path: string;
  query?: string;
  headers: Record<string, string>;
  body?: string;
}

/** `POST /portal/try`'s answer: the console's sandbox call result. */
export type TryResult = components["schemas"]["SandboxCallResult"];

/** An app key and secret as the merchant typed them (kept in the page only). */
export interface Creds {
  appKey: string;
  secret: string;
}
