// End-to-end test of the console's cluster view in a real headless Chromium (Debian's
// `chromium`, driven by playwright-core). Run by registry/tests/cluster_console_e2e.rs, which
// starts ZooKeeper, two demo backends, a gateway and the registry, seeds a cluster with a
// standby set and autoscale rules, and passes in the environment:
//
//   CONSOLE_URL     the registry, serving the console at /   (required)
//   ADMIN_TOKEN     the registry's admin token                (required)
//   CLUSTER         the cluster to fail over                  (required)
//   NODE_ID         the gateway's node id                     (required)
//   PRIMARY / STANDBY  an endpoint address of each set        (required)
//   SCREENSHOT_DIR  where the screenshots go                  (required)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//
// Flow: sign in → Clusters → the cluster: both sets with each endpoint's health as the
// gateway reports it, the gateway's row, primary serving → Fail over to standby: confirming
// without a reason is refused, with one the view shows standby serving, in the document and
// on the gateway → fail back to primary. The Rust test then checks ZooKeeper, the gateway and
// the audit log independently. Any failure exits 1 after a FAILED-*.png screenshot.

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`cluster.e2e: ${name} is not set`);
    process.exit(2);
  }
  return v;
};
const BASE = env("CONSOLE_URL").replace(/\/$/, "");
const TOKEN = env("ADMIN_TOKEN");
const CLUSTER = env("CLUSTER");
const NODE_ID = env("NODE_ID");
const PRIMARY = env("PRIMARY");
const STANDBY = env("STANDBY");
const SHOTS = env("SCREENSHOT_DIR");
const CHROMIUM = env("CHROMIUM", "/usr/bin/chromium");
const OPERATOR = "e2e-sre-clusters";

mkdirSync(SHOTS, { recursive: true });
const log = (msg) => console.log(`[cluster.e2e ${new Date().toISOString().slice(11, 23)}] ${msg}`);

const profile = mkdtempSync(join(tmpdir(), "portico-e2e-chromium-"));
let context;
let page;
let step = 0;
const shot = async (name) => {
  const file = join(SHOTS, `cluster-${String(++step).padStart(2, "0")}-${name}.png`);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: file, fullPage: true, animations: "disabled" });
  log(`screenshot ${file}`);
};

/** The set badge's text in the page header. */
const activeSet = () => page.textContent('[data-testid="active-set"]').then((t) => t?.trim());

async function failOver(to, reason) {
  await page.click('[data-testid="failover"]');
  await page.waitForSelector(`.modal h2:has-text("over to ${to}")`);
  await page.click('[data-testid="confirm-failover"]');
  await page.waitForSelector(".modal >> text=required: say why");
  await page.fill('[data-testid="failover-reason"]', reason);
  await shot(`failover-${to}-dialog`);
  await page.click('[data-testid="confirm-failover"]');
  await page.waitForSelector(".modal", { state: "detached" });
  await page.waitForFunction((set) => document.querySelector('[data-testid="active-set"]')?.textContent?.trim() === set, to, { timeout: 10_000 });
  // The gateway's own word, read from its /status by the registry (the view polls every 2 s).
  await page.waitForFunction(
    ([node, set]) => document.querySelector(`tr[data-node="${node}"] [data-testid="gateway-set"] .badge`)?.textContent?.trim() === set,
    [NODE_ID, to],
    { timeout: 10_000 },
  );
}

async function main() {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(`console: ${m.text()}`);
  });

  log("sign in");
  await page.goto(`${BASE}/`);
  await page.waitForSelector("form.signin-card");
  await page.fill('input[name="token"]', TOKEN);
  await page.fill('input[name="operator"]', OPERATOR);
  await page.click('button[type="submit"]');
  await page.waitForSelector("h1:has-text('Services & APIs')");

  log("clusters");
  await page.click("a.nav-item:has-text('Clusters')");
  await page.waitForSelector(`[data-testid="clusters-table"] tr[data-cluster="${CLUSTER}"]`);
  await shot("clusters");
  await page.click(`tr[data-cluster="${CLUSTER}"] a`);
  await page.waitForSelector(`[data-set="primary"] tr[data-endpoint="${PRIMARY}"]`);
  await page.waitForSelector(`[data-set="standby"] tr[data-endpoint="${STANDBY}"]`);
  await page.waitForSelector(`[data-testid="gateways-table"] tr[data-node="${NODE_ID}"]`);
  await page.waitForSelector('[data-testid="autoscale-rules"] >> text=rule 0');
  if ((await activeSet()) !== "primary") throw new Error(`expected primary serving, the page says ${await activeSet()}`);
  // Each endpoint as the gateway sees it: healthy (no probe has failed), with a load column.
  await page.waitForSelector(`[data-set="primary"] tr[data-endpoint="${PRIMARY}"] [data-testid="endpoint-state"] >> text=healthy`);
  await page.waitForSelector(`[data-set="standby"] tr[data-endpoint="${STANDBY}"] [data-testid="endpoint-state"] >> text=healthy`);
  await shot("cluster-primary");

  log("fail over to standby");
  await failOver("standby", "e2e: primary data centre drill");
  await shot("cluster-standby");

  log("fail back to primary");
  await failOver("primary", "e2e: drill over");
  await shot("cluster-primary-again");

  if (errors.length) throw new Error(`the page logged errors:\n${errors.join("\n")}`);
  log("ok: every step passed");
}

try {
  await main();
  await context?.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit(0);
} catch (e) {
  console.error(`cluster.e2e FAILED at step ${step + 1}: ${e?.stack ?? e}`);
  try {
    await page?.screenshot({ path: join(SHOTS, `cluster-FAILED-${String(step + 1).padStart(2, "0")}.png`), fullPage: true });
  } catch {}
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
