// The merchants' developer portal in a real headless Chromium (Debian's `chromium`, driven by
// playwright-core; no browser download). Run by registry/tests/it/portal_e2e.rs, which starts
// ZooKeeper, the demo backend, a gateway (live + sandbox listeners) and the registry serving
// a fresh build of admin-ui/ (the portal included), imports the example tree into the live and
// sandbox trees, and passes in the environment:
//
//   PORTAL_URL       the registry (the portal is at /portal/)                (required)
//   GATEWAY_URL      the gateway's live listener                             (required)
//   APP_KEY / APP_SECRET   an app of both trees granted every API            (required)
//   APP2_KEY / APP2_SECRET an app granted only order.get                     (required)
//   EXPECT_APIS      the ids of the published APIs, comma-separated          (required)
//   SCREENSHOT_DIR   where the screenshots go                                (required)
//   CHROMIUM         the browser (default /usr/bin/chromium)
//
// Flow: the catalogue lists every API → search narrows it → one API page (parameters, request
// and answer schemas, example, router style) → the Python snippet copied to the clipboard
// (and run by the test: it signs and gets 200 from the gateway) → "try it" signed in the
// browser and forwarded to the sandbox listener answers 200 → the signing page computes the
// worked examples' signatures, with WebCrypto and (on a non-secure origin) with the built-in
// fallback → the errors page → the notifications page (its callback vector matches) → none of
// the three points to a repository file → "My app" shows only that app's APIs, and the
// notifications page then lists that app's topics.
// Progress goes to stdout; the copied snippet is printed between SNIPPET-BEGIN/END lines; any
// failure exits 1 after a FAILED-*.png screenshot.

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`portal.e2e: ${name} is not set`);
    process.exit(2);
  }
  return v;
};
const BASE = env("PORTAL_URL").replace(/\/$/, "");
const APP_KEY = env("APP_KEY");
const APP_SECRET = env("APP_SECRET");
// The sandbox has its own secrets (docs/PROTOCOL.md, "The sandbox"): "try it" signs with it.
const APP_SANDBOX_SECRET = env("APP_SANDBOX_SECRET");
const APP2_KEY = env("APP2_KEY");
const APP2_SECRET = env("APP2_SECRET");
const EXPECT = env("EXPECT_APIS").split(",").filter(Boolean);
const SHOTS = env("SCREENSHOT_DIR");
const CHROMIUM = env("CHROMIUM", "/usr/bin/chromium");
const API = "grpc.order.create";

mkdirSync(SHOTS, { recursive: true });
const log = (msg) => console.log(`[portal.e2e ${new Date().toISOString().slice(11, 23)}] ${msg}`);
const check = (ok, msg) => {
  if (!ok) throw new Error(msg);
};

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  // portal.test is 127.0.0.1 too, but not a secure context: no crypto.subtle there.
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--host-resolver-rules=MAP portal.test 127.0.0.1"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: BASE });
const page = await context.newPage();
page.setDefaultTimeout(30_000);
const consoleErrors = [];
page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
page.on("pageerror", (e) => consoleErrors.push(String(e)));
const shot = (name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

try {
  // 1. The catalogue: every published API, without any token.
  await page.goto(`${BASE}/portal/`);
  await page.waitForSelector("[data-count]");
  const listed = await page.$$eval("tr[data-api]", (rows) => [...new Set(rows.map((r) => r.getAttribute("data-api")))].sort());
  const missing = EXPECT.filter((id) => !listed.includes(id));
  check(missing.length === 0, `the catalogue misses ${missing.join(", ")} (it lists ${listed.join(", ")})`);
  log(`catalogue: ${listed.length} APIs`);
  await shot("portal-catalogue");

  // 2. Search narrows it.
  const total = await page.$$eval("tr[data-api]", (rows) => rows.length);
  await page.fill("input[name=search]", "order create");
  await page.waitForFunction((n) => document.querySelectorAll("tr[data-api]").length < n, total);
  const found = await page.$$eval("tr[data-api]", (rows) => rows.map((r) => r.getAttribute("data-api")));
  check(found.includes(API) && found.includes("order.create"), `search "order create" found ${found.join(", ")}`);
  check(!found.includes("health.ping"), `search "order create" kept health.ping`);
  await page.fill("input[name=search]", "no-such-api-anywhere");
  await page.waitForSelector("text=No API matches");
  log(`search: ${found.length} of ${total} for "order create"`);
  await page.fill("input[name=search]", "order create");
  await shot("portal-search");

  // 3. One API page.
  await page.click(`tr[data-api="${API}"] a`);
  await page.waitForSelector(`[data-api-page="${API}"]`);
  const text = await page.textContent("main");
  for (const want of ["Request body", "Answer (200)", "POST /grpc/v1/orders", "Router style", "/router?method=grpc.order.create", "Rate limits", "Example request"]) {
    check(text.includes(want), `the ${API} page lacks "${want}"`);
  }
  const example = await page.textContent("[data-example]");
  check(example.includes('"qty"'), `the example request has no qty: ${example}`);
  log(`API page ${API}: example ${example.replace(/\s+/g, " ").slice(0, 80)}`);
  await shot("portal-api");

  // 4. The Python snippet, copied to the clipboard.
  await page.click('button[data-snippet="python"]');
  await page.waitForSelector('[data-snippet-source="python"]');
  await page.click('button[data-action="copy-snippet"]');
  await page.waitForSelector("text=Copied the Python snippet");
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  const shown = await page.textContent('[data-snippet-source="python"]');
  check(copied === shown, "the clipboard does not hold the snippet shown");
  check(copied.includes("hmac") && copied.includes("/grpc/v1/orders"), "the copied snippet does not sign or call the API");
  console.log("SNIPPET-BEGIN");
  console.log(Buffer.from(copied, "utf8").toString("base64"));
  console.log("SNIPPET-END");
  log(`snippet copied: ${copied.length} characters of Python`);

  // 5. Try it: signed in the browser, forwarded to the sandbox listener.
  await page.fill(".try input[name=app-key]", APP_KEY);
  // The live secret first: on the sandbox it is a wrong signature (the sandbox app has its own).
  await page.fill(".try input[name=secret]", APP_SECRET);
  await page.click('button[data-action="send"]');
  await page.waitForSelector('.answer[data-status="401"]');
  const refused = await page.textContent("[data-answer]");
  check(refused.includes("SIGNATURE_INVALID"), `the live secret was not refused by the sandbox: ${refused}`);
  log("try it with the live secret: 401 SIGNATURE_INVALID, the sandbox wants the sandbox secret");
  await page.fill(".try input[name=secret]", APP_SANDBOX_SECRET);
  await page.click('button[data-action="send"]');
  await page.waitForSelector('.answer[data-status="200"], .answer[data-status]:not([data-status="401"])');
  const status = await page.getAttribute(".answer", "data-status");
  const answer = await page.textContent("[data-answer]");
  check(status === "200", `try it answered ${status}: ${answer}`);
  check(answer.includes("book") || answer.includes("item"), `try it answered ${answer}`);
  log(`try it: HTTP ${status}`);
  await shot("portal-try");
  // A wrong secret: the sandbox gateway refuses the signature.
  await page.fill(".try input[name=secret]", "not-the-secret");
  await page.click('button[data-action="send"]');
  await page.waitForSelector('.answer[data-status="401"]');
  check((await page.textContent("[data-answer]")).includes("SIGNATURE_INVALID"), "a wrong secret was not refused");
  log("try it with a wrong secret: 401 SIGNATURE_INVALID");

  // 6. The signing guide computes the worked examples' signatures.
  await page.click("nav >> text=Signing");
  await page.waitForSelector('[data-vector="2"] [data-check]');
  const checks = await page.$$eval("[data-check]", (els) => els.map((e) => e.getAttribute("data-check")));
  check(checks.length === 2 && checks.every((c) => c === "match"), `signing vectors: ${checks.join(", ")}`);
  log("signing guide: both worked examples match");
  await shot("portal-signing");
  // The same where the page is no secure context (plain HTTP to another host than
  // localhost): the built-in SHA-256 / HMAC sign instead of WebCrypto.
  {
    const insecure = await browser.newContext();
    const p2 = await insecure.newPage();
    p2.setDefaultTimeout(30_000);
    await p2.goto(`${BASE.replace("127.0.0.1", "portal.test")}/portal/#/signing`);
    await p2.waitForSelector('[data-vector="2"] [data-check]');
    const impl = await p2.getAttribute("[data-impl]", "data-impl");
    check(impl === "builtin", `portal.test signs with ${impl}, not the built-in fallback`);
    const plain = await p2.$$eval("[data-check]", (els) => els.map((e) => e.getAttribute("data-check")));
    check(plain.length === 2 && plain.every((c) => c === "match"), `built-in signing: ${plain.join(", ")}`);
    await insecure.close();
    log("signing guide without WebCrypto (built-in SHA-256): both worked examples match");
  }

  // 7. The error codes.
  await page.click("nav >> text=Errors");
  await page.waitForSelector("[data-errors]");
  for (const code of ["SIGNATURE_INVALID", "NONCE_REPLAYED", "RATE_LIMITED"]) {
    check((await page.$(`tr[data-code="${code}"]`)) !== null, `the errors page lacks ${code}`);
  }
  await shot("portal-errors");

  // 8. Notifications, and no page points merchants to a repository file.
  await page.click("nav >> text=Notifications");
  await page.waitForSelector('[data-page="notifications"] [data-check]');
  const cb = await page.$$eval("[data-check]", (els) => els.map((e) => e.getAttribute("data-check")));
  check(cb.length === 1 && cb[0] === "match", `callback vector: ${cb.join(", ")}`);
  const notes = await page.textContent("main");
  for (const want of ["/notify/v1/stream", "/notify/v1/ws", "/notify/v1/ack", "PORTICO-CALLBACK-v1", "My app"]) {
    check(notes.includes(want), `the notifications page lacks "${want}"`);
  }
  await shot("portal-notifications");
  const repoPointer = /(^|[^A-Za-z0-9_])(docs|ops)\/|[A-Za-z0-9_]\.md\b|github\.com/;
  for (const route of ["signing", "errors", "notifications"]) {
    await page.goto(`${BASE}/portal/#/${route}`);
    await page.waitForSelector(`[data-page="${route}"]`);
    const shown = await page.textContent("main");
    const hit = shown.match(repoPointer);
    check(!hit, `the ${route} page points to a repository file: ${hit && shown.slice(Math.max(0, hit.index - 40), hit.index + 40)}`);
  }
  log("signing, errors and notifications pages: self-contained (no repository pointer)");

  // 9. My app: only what that app may call.
  await page.click("nav >> text=My app");
  await page.fill("input[name=app-key]", APP2_KEY);
  await page.fill("input[name=secret]", APP2_SECRET);
  await page.click("text=Show my APIs");
  await page.waitForSelector(".banner");
  await page.waitForSelector("[data-count]");
  const mine = await page.$$eval("tr[data-api]", (rows) => [...new Set(rows.map((r) => r.getAttribute("data-api")))]);
  check(mine.includes("order.get") && !mine.includes("order.create") && !mine.includes(API), `${APP2_KEY} sees ${mine.join(", ")}`);
  log(`my app ${APP2_KEY}: ${mine.join(", ")}`);
  await shot("portal-my-app");
  // Signed in, the notifications page lists the app's topics (an empty list says so).
  await page.click("nav >> text=Notifications");
  await page.waitForSelector("[data-topics]");
  log(`notifications for ${APP2_KEY}: topics "${await page.getAttribute("[data-topics]", "data-topics")}"`);

  check(consoleErrors.length === 0, `the page logged errors: ${consoleErrors.join(" | ")}`);
  log("PASSED");
  await browser.close();
} catch (e) {
  console.error(`portal.e2e FAILED: ${e instanceof Error ? e.stack : e}`);
  await page.screenshot({ path: join(SHOTS, "FAILED-portal.png"), fullPage: true }).catch(() => {});
  await browser.close();
  process.exit(1);
}
