// End-to-end test of the console in a real headless Chromium (Debian's `chromium`, driven by
// playwright-core; no browser download). Run by registry/tests/it/console_e2e.rs, which starts
// ZooKeeper, the demo backend, a gateway (live + sandbox listeners) and the registry, seeds
// the clusters and apps, and passes their addresses in the environment:
//
//   CONSOLE_URL     the registry, serving the console at /       (required)
//   ADMIN_TOKEN     the registry's admin token                    (required)
//   GATEWAY_URL     the gateway's live listener                   (required)
//   LIVE_APP_KEY / LIVE_APP_SECRET   a live app granted every API  (required)
//   PROTO_FILE      the demo order.proto                          (required)
//   CLUSTER         the cluster the imported drafts call          (default demo-grpc)
//   SCREENSHOT_DIR  where the screenshots go                      (required)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//
// Flow: sign in → import the demo proto → edit the policy (a refused value shows the
// registry's inline message) → sandbox call succeeds → publish → the API answers on the
// gateway → degrade it from the Switches page (the reason is required) → the gateway answers
// the fallback → restore → the gateway answers normally again; then the Apps and Nodes &
// health pages. Each page is saved as a screenshot. Progress goes to stdout; any failure
// exits 1 after a FAILED-*.png screenshot.

import { createHash, createHmac, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`console.e2e: ${name} is not set`);
    process.exit(2);
  }
  return v;
};
const BASE = env("CONSOLE_URL").replace(/\/$/, "");
const TOKEN = env("ADMIN_TOKEN");
const GATEWAY = env("GATEWAY_URL").replace(/\/$/, "");
const APP_KEY = env("LIVE_APP_KEY");
const APP_SECRET = env("LIVE_APP_SECRET");
const PROTO = env("PROTO_FILE");
const CLUSTER = env("CLUSTER", "demo-grpc");
const SHOTS = env("SCREENSHOT_DIR");
const CHROMIUM = env("CHROMIUM", "/usr/bin/chromium");
const API = "order.getorder";
const OPERATOR = "e2e-sre";

mkdirSync(SHOTS, { recursive: true });
const log = (msg) => console.log(`[console.e2e ${new Date().toISOString().slice(11, 23)}] ${msg}`);

// ---- signing (docs/PROTOCOL.md, "Signing a request"), for calls to the gateway ----
const UNRESERVED = /[A-Za-z0-9\-_.~]/;
function reencode(s) {
  const bytes = [];
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "%" && /^[0-9A-Fa-f]{2}$/.test(s.slice(i + 1, i + 3))) {
      bytes.push(parseInt(s.slice(i + 1, i + 3), 16));
      i += 2;
    } else for (const b of Buffer.from(s[i], "utf8")) bytes.push(b);
  }
  return bytes.map((b) => (UNRESERVED.test(String.fromCharCode(b)) && b < 128 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, "0")}`)).join("");
}
function canonicalQuery(raw) {
  if (!raw) return "";
  const pairs = raw
    .split("&")
    .filter(Boolean)
    .map((p) => {
      const i = p.indexOf("=");
      return i < 0 ? [reencode(p), ""] : [reencode(p.slice(0, i)), reencode(p.slice(i + 1))];
    });
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  return pairs.map(([n, v]) => `${n}=${v}`).join("&");
}
async function gatewayCall(method, pathAndQuery, body = "") {
  const [path, query = ""] = pathAndQuery.split("?");
  const ts = String(Date.now());
  const nonce = `e2e-${randomBytes(8).toString("hex")}`;
  const sts = [method, path, canonicalQuery(query), APP_KEY, ts, nonce, createHash("sha256").update(body).digest("hex")].join("\n");
  const sig = createHmac("sha256", APP_SECRET).update(sts).digest("hex");
  const resp = await fetch(`${GATEWAY}${pathAndQuery}`, {
    method,
    headers: {
      "X-Portico-AppKey": APP_KEY,
      "X-Portico-Timestamp": ts,
      "X-Portico-Nonce": nonce,
      "X-Portico-Signature": sig,
      ...(body ? { "Content-Type": "application/json" } : {}),
    },
    body: body || undefined,
  });
  const text = await resp.text();
  return { status: resp.status, headers: resp.headers, text };
}
/** Polls the gateway until `ok(reply)` (the control plane pushes within milliseconds; allow 10 s). */
async function gatewayUntil(what, ok) {
  const deadline = Date.now() + 10_000;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await gatewayCall("GET", "/v1/orders/42");
      if (ok(last)) return last;
    } catch (e) {
      last = { status: 0, text: String(e) };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`the gateway never answered ${what}; last: ${last?.status} ${last?.text?.slice(0, 300)}`);
}

// ---- the browser ----
const profile = mkdtempSync(join(tmpdir(), "portico-e2e-chromium-"));
let context;
let page;
let step = 0;
const shot = async (name) => {
  const file = join(SHOTS, `${String(++step).padStart(2, "0")}-${name}.png`);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: file, fullPage: true, animations: "disabled" });
  log(`screenshot ${file}`);
};

async function main() {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const consoleErrors = [];
  page.on("pageerror", (e) => consoleErrors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    // 4xx answers the flow provokes on purpose (a wrong token, a refused policy) are logged by the browser too.
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) consoleErrors.push(`console: ${m.text()}`);
  });

  // 1. Sign in (a wrong token is refused first).
  log("sign in");
  await page.goto(`${BASE}/`);
  await page.waitForSelector("form.signin-card");
  await page.fill('input[name="token"]', "not-the-token");
  await page.fill('input[name="operator"]', OPERATOR);
  await page.click('button[type="submit"]');
  await page.waitForSelector('.error-banner[data-code="UNAUTHENTICATED"]');
  await shot("sign-in-refused");
  await page.fill('input[name="token"]', TOKEN);
  await page.click('button[type="submit"]');
  await page.waitForSelector("h1:has-text('Services & APIs')");
  await page.waitForSelector("text=No APIs yet");
  await shot("apis-empty");

  // 2. Upload the demo proto.
  log("import the demo proto");
  await page.click('[data-testid="open-import"]');
  await page.setInputFiles('input[name="protos"]', PROTO);
  // The form suggests the first sandbox cluster once it has listed them; type after that.
  await page.waitForFunction(() => document.querySelector('input[name="cluster"]')?.value !== "");
  await page.fill('input[name="cluster"]', CLUSTER);
  if ((await page.inputValue('input[name="cluster"]')) !== CLUSTER) throw new Error("the cluster field did not keep what was typed");
  await page.click('[data-testid="import-submit"]');
  // A preview first (every draft new); nothing is written until confirmed.
  await page.waitForSelector(`[data-testid="import-preview"] tr[data-preview="${API}"] >> text=new`);
  await page.click('[data-testid="import-confirm"]');
  await page.waitForSelector(`[data-testid="import-result"] >> text=${API}`);
  await page.waitForSelector(`[data-testid="apis-table"] tr[data-api="${API}"]`);
  await shot("import-result");

  // 3. The API: policy editor with inline validation from the registry.
  log("edit the policy");
  await page.click(`[data-testid="apis-table"] tr[data-api="${API}"] a`);
  await page.waitForSelector(`h1:has-text("${API}")`);
  // The form says the range at once, in the registry's words, and does not send the value.
  await page.fill('input[data-field="policy.bulkhead.max_concurrent"]', "0");
  await page.waitForSelector('.field.has-error >> text=must be a whole number between 1 and 4294967295');
  if (!(await page.isDisabled('[data-testid="save-draft"]'))) throw new Error("a bulkhead of 0 could be saved");
  await page.fill('input[data-field="policy.breaker.error_ratio"]', "2");
  await page.waitForSelector('.field.has-error >> text=must be in (0, 1]');
  await page.fill('input[data-field="policy.breaker.error_ratio"]', "");
  await shot("policy-inline-validation");
  await page.fill('input[data-field="policy.bulkhead.max_concurrent"]', "32");
  await page.fill('input[data-field="backend.timeout_ms"]', "1500");
  await page.click('[data-testid="save-draft"]');
  await page.waitForSelector("text=The draft is saved");
  await shot("policy-saved");

  // 4. Try it in the sandbox.
  log("sandbox call");
  await page.click('[data-testid="tab-try"]');
  await page.fill('[data-testid="var-order_id"]', "42");
  await page.click('[data-testid="try-send"]');
  await page.waitForSelector('[data-testid="try-result"]');
  const status = (await page.textContent('[data-testid="try-status"]'))?.trim();
  const body = await page.textContent(".response-body");
  if (status !== "200") throw new Error(`the sandbox call answered ${status}: ${body}`);
  if (!body?.includes("42")) throw new Error(`the sandbox answer does not mention order 42: ${body}`);
  await shot("sandbox-call");

  // 5. Publish (the dialog shows the diff).
  log("publish");
  await page.click('[data-testid="publish"]');
  await page.waitForSelector('[data-testid="diff"]');
  await shot("publish-dialog");
  await page.click('[data-testid="confirm-publish"]');
  await page.waitForSelector("text=live v1");
  const t0 = Date.now();
  // 6. The API answers on the gateway.
  const live = await gatewayUntil("200 for the published API", (r) => r.status === 200);
  log(`gateway answers 200 ${Date.now() - t0} ms after the publish was confirmed: ${live.text.slice(0, 120)}`);
  if (!live.text.includes("42")) throw new Error(`the live answer does not mention order 42: ${live.text}`);

  // The API page says whether answers are cached and for whom (this API has no cache).
  const cacheLine = (await page.textContent('[data-testid="cache-summary"]'))?.trim();
  if (cacheLine !== "Response cache: none") throw new Error(`cache summary: ${cacheLine}`);

  // 6b. A second version, its diff, and a rollback to the first.
  log("publish v2, diff, roll back to v1");
  await page.click('[data-testid="tab-policy"]');
  await page.fill('input[data-field="backend.timeout_ms"]', "1200");
  await page.click('[data-testid="save-draft"]');
  await page.waitForSelector("text=draft changed");
  await page.click('[data-testid="publish"]');
  await page.waitForSelector('[data-testid="diff"] >> text=1200');
  await page.click('[data-testid="confirm-publish"]');
  await page.waitForSelector("text=live v2");
  await page.click('[data-testid="tab-versions"]');
  await page.waitForSelector('[data-testid="versions-table"] >> text=v2');
  await page.waitForSelector('[data-testid="diff"] >> text=1500');
  await shot("versions-diff");
  await page.click('[data-testid="rollback-1"]');
  await page.waitForSelector('[role="dialog"] [data-testid="diff"]');
  await shot("rollback-dialog");
  await page.click('[data-testid="confirm-rollback"]');
  await page.waitForSelector("text=live v3");
  await page.waitForSelector('[data-testid="versions-table"] >> text=v3');
  await gatewayUntil("200 after the rollback", (r) => r.status === 200);

  // 7. Degrade it from the Switches page: the reason is required.
  log("degrade");
  await page.click("a.nav-item:has-text('Switches')");
  await page.waitForSelector(`tr[data-switch="${API}"]`);
  await page.fill('[data-testid="switch-search"]', "getorder");
  await page.click(`[data-testid="degrade-${API}"]`);
  await page.waitForSelector('[role="dialog"]');
  await page.click('[data-testid="confirm-switch"]');
  await page.waitForSelector('[role="dialog"] .field-error >> text=required');
  if (!(await page.isDisabled('[data-testid="confirm-switch"]'))) throw new Error("degrade without a reason was not blocked");
  await page.fill('[data-testid="switch-reason"]', "e2e: order DB failover drill");
  await page.check('[data-testid="custom-fallback"]');
  await page.fill('[data-testid="fallback-body"]', '{"fallback": true, "orders": []}');
  await shot("degrade-dialog");
  await page.click('[data-testid="confirm-switch"]');
  await page.waitForSelector(`tr[data-switch="${API}"] >> text=DEGRADED`);
  const t1 = Date.now();
  // 8. The gateway answers the fallback.
  const fb = await gatewayUntil("the fallback", (r) => r.status === 200 && r.text.includes('"fallback"'));
  log(`gateway answers the fallback ${Date.now() - t1} ms after the switch showed DEGRADED (X-Degraded: ${fb.headers.get("x-degraded")})`);
  if (fb.headers.get("x-degraded") !== "1") throw new Error("the fallback lacks its X-Degraded header");
  await page.waitForSelector('[data-testid="audit"] >> text=switch.on');
  await shot("switches-degraded");

  // 9. Restore.
  log("restore");
  await page.click(`[data-testid="restore-${API}"]`);
  await page.waitForSelector('[role="dialog"]');
  await page.fill('[data-testid="switch-reason"]', "e2e: DB healthy again");
  await page.click('[data-testid="confirm-switch"]');
  await page.waitForSelector(`tr[data-switch="${API}"] >> text=normal`);
  const back = await gatewayUntil("the backend's answer again", (r) => r.status === 200 && !r.text.includes('"fallback"'));
  if (!back.text.includes("42")) throw new Error(`after restore: ${back.text}`);
  await page.waitForSelector('[data-testid="audit"] >> text=switch.off');
  await page.fill('[data-testid="switch-search"]', "");
  await shot("switches-restored");

  // 10. Apps: create one, its secret shown once.
  log("apps");
  await page.click("a.nav-item:has-text('Apps')");
  await page.waitForSelector('[data-testid="apps-table"]');
  await page.click('[data-testid="create-app"]');
  await page.fill('input[name="app_key"]', "e2e-storefront");
  await page.fill('input[name="name"]', "E2E storefront");
  await page.click('[data-testid="confirm-create-app"]');
  await page.waitForSelector('[data-testid="new-secret"]');
  const secret = (await page.textContent('[data-testid="new-secret"]'))?.trim() ?? "";
  if (!/^[0-9a-f]{32,}$/.test(secret)) throw new Error(`the new secret looks wrong: ${secret}`);
  await shot("app-secret-once");
  await page.check('[data-testid="secret-stored"]');
  await page.click('[data-testid="close-secret"]');
  await page.waitForSelector('tr[data-app="e2e-storefront"]');
  await shot("apps");

  // 11. Nodes & health, with some traffic.
  log("health");
  let stop = false;
  const traffic = (async () => {
    const until = Date.now() + 15_000;
    while (!stop && Date.now() < until) {
      await Promise.all([0, 1, 2, 3].map(() => gatewayCall("GET", "/v1/orders/42").catch(() => null)));
      await new Promise((r) => setTimeout(r, 40));
    }
  })();
  await page.click("a.nav-item:has-text('Nodes & health')");
  await page.waitForSelector('[data-testid="nodes-table"] >> text=in sync');
  await page.waitForFunction(
    (api) => {
      const row = document.querySelector(`tr[data-health="${api}"]`);
      const qps = row?.querySelector("td.num.strong")?.textContent ?? "";
      return row && parseFloat(qps) > 0;
    },
    API,
    { timeout: 20_000 },
  );
  await page.click(`tr[data-health="${API}"]`);
  await page.waitForSelector('[data-testid="api-charts"]');
  await page.waitForTimeout(4500); // a few more samples for the charts
  stop = true;
  await traffic;
  await shot("health");

  if (consoleErrors.length) throw new Error(`the page logged errors:\n${consoleErrors.join("\n")}`);
  log("ok: every step passed");
}

try {
  await main();
  await context?.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit(0);
} catch (e) {
  console.error(`console.e2e FAILED at step ${step + 1}: ${e?.stack ?? e}`);
  try {
    await page?.screenshot({ path: join(SHOTS, `FAILED-${String(step + 1).padStart(2, "0")}.png`), fullPage: true });
    console.error(`screenshot of the failure: ${join(SHOTS, `FAILED-${String(step + 1).padStart(2, "0")}.png`)}`);
  } catch {}
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
