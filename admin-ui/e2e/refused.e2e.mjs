// A zkCli typo shown as what the gateways do, in a real headless Chromium (docs/operations/registry.md,
// "What the gateways serve", "Changes outside the registry"). Run by
// registry/tests/it/hot_keys_console_e2e.rs, which degrades API through the registry, then
// writes `{"degraded":fals` into ZooKeeper with zkCli as the operator would; the gateway
// refuses it and keeps serving the degraded version. It passes in the environment:
//
//   CONSOLE_URL     the registry, serving the console at /   (required)
//   ADMIN_TOKEN     the registry's admin token                (required)
//   API             the API whose switch was broken           (required)
//   NODE_ID         the gateway's node id                     (required)
//   SCREENSHOT_DIR  where the screenshots go                  (required)
//
// Flow: sign in → Switches: the API's row says REFUSED, "not valid JSON", gateways still
// serve "degraded", never "normal"; the audit trail has the "outside the registry" entry →
// Nodes & health: the node lists switches/<API> as rejected and does not say "in sync".

import { env, runBrowser } from "./harness.mjs";

const TOKEN = env("ADMIN_TOKEN");
const API = env("API");
const NODE_ID = env("NODE_ID");
const BASE = env("CONSOLE_URL").replace(/\/$/, "");

await runBrowser("refused", async ({ page, log, shot, signIn }) => {
  await signIn(TOKEN, "e2e-sre-refused");
  await page.goto(`${BASE}/switches`);
  const row = `tr[data-switch="${API}"]`;
  await page.waitForSelector(`${row} [data-testid="refused"]`);
  const state = (await page.textContent(`${row} [data-testid="state"]`))?.trim();
  if (state !== "REFUSED") throw new Error(`the switch's state reads ${JSON.stringify(state)}, not REFUSED`);
  const note = (await page.textContent(`${row} [data-testid="refused"]`)) ?? "";
  if (!note.includes("not valid JSON")) throw new Error(`the refusal does not give the reason: ${note}`);
  const served = (await page.textContent(`${row} [data-testid="still-served"]`))?.trim();
  if (served !== "degraded") throw new Error(`"gateways still serve" reads ${JSON.stringify(served)}, not degraded`);
  if (!note.includes(NODE_ID)) throw new Error(`the refusal does not name the node: ${note}`);
  if ((await page.textContent(row))?.includes("normal")) throw new Error("the refused switch is shown as normal somewhere in its row");
  log(`switches: ${note.replace(/\s+/g, " ")}`);
  // The audit trail beside it: the zkCli write, as "outside the registry", refused.
  await page.waitForSelector('[data-testid="audit"] [data-testid="outside-entry"]:has-text("refused by the gateways")', { timeout: 20_000 });
  const entry = await page.textContent('[data-testid="audit"] li:has([data-testid="outside-entry"])');
  if (!entry?.includes("outside the registry") || !entry.includes(API)) throw new Error(`the audit entry reads: ${entry}`);
  await shot("switches-refused");

  await page.goto(`${BASE}/health`);
  await page.waitForSelector(`[data-testid="rejected-documents"] li[data-path="switches/${API}"]`);
  const sync = (await page.textContent('[data-testid="nodes-table"] [data-testid="node-sync"]')) ?? "";
  if (sync.includes("in sync")) throw new Error(`Nodes & health says "in sync" for a node refusing a document: ${sync}`);
  if (!sync.includes("refuses 1 document")) throw new Error(`the node's state reads: ${sync}`);
  log(`health: ${sync.replace(/\s+/g, " ")}`);
  await shot("health-rejected");
});
