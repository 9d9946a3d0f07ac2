// The portal's calls to the registry, through the console's HTTP client (src/shared/http.ts:
// the same error decoding). The portal has no admin token: the public document is anonymous,
// an app's document is signed here in the browser (the secret never leaves the page), and
// "try it" posts a request already signed for the sandbox.
import { call } from "../src/shared/http";
import { freshNonce, sign } from "./sign";
import type { Creds, PortalDocument, TryRequest, TryResult } from "./types";

const peer = "the registry";

/** `GET /portal/openapi.json`: every public API. */
export async function publicDocument(): Promise<PortalDocument> {
  return (await call<PortalDocument>("GET", "/portal/openapi.json", { cache: "no-store", peer })).data;
}

/** `GET /portal/apps/<key>/openapi.json`, signed with the app's secret: that app's APIs. */
export async function appDocument(creds: Creds): Promise<PortalDocument> {
  const path = `/portal/apps/${encodeURIComponent(creds.appKey)}/openapi.json`;
  const s = await sign({ method: "GET", path, query: "", appKey: creds.appKey, secret: creds.secret, timestamp: String(Date.now()), nonce: freshNonce(), body: "" });
  return (await call<PortalDocument>("GET", path, { headers: s.headers, cache: "no-store", peer })).data;
}

/** `POST /portal/try`: the registry forwards the request to a sandbox listener as it is. */
export async function tryRequest(req: TryRequest): Promise<TryResult> {
  return (await call<TryResult>("POST", "/portal/try", { body: req, peer })).data;
}
