// End-to-end test of the console's Alerts and Reports pages in a real headless Chromium
// (Debian's `chromium`, driven by playwright-core). Run by registry/tests/alerts_console_e2e.rs,
// which starts ZooKeeper and the registry on a history store holding a synthetic day, publishes
// an API with no traffic and a `qps_below` rule on it (so an alert fires), and passes in:
//
//   CONSOLE_URL     the registry, serving the console at /   (required)
//   ADMIN_TOKEN     the registry's admin token                (required)
//   RULE            the rule that fires                       (required)
//   API             the API of the synthetic history          (required)
//   SCREENSHOT_DIR  where the screenshots go                  (required)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//
// Flow: sign in → the banner says an alert fires → Alerts: the alert firing now, the rule in
// the rules table, the firing in the history → a second rule saved through the form appears →
// Reports: the day's table has the platform row and the API with its figures → week.
// Any failure exits 1 after a FAILED-*.png screenshot.

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`alerts.e2e: ${name} is not set`);
    process.exit(2);
  }
  return v;
};
const BASE = env("CONSOLE_URL").replace(/\/$/, "");
const TOKEN = env("ADMIN_TOKEN");
const RULE = env("RULE");
const API = env("API");
const SHOTS = env("SCREENSHOT_DIR");
const CHROMIUM = env("CHROMIUM", "/usr/bin/chromium");

mkdirSync(SHOTS, { recursive: true });
const log = (msg) => console.log(`[alerts.e2e ${new Date().toISOString().slice(11, 23)}] ${msg}`);
const profile = mkdtempSync(join(tmpdir(), "portico-e2e-chromium-"));
let context;
let page;
let step = 0;
const shot = async (name) => {
  const file = join(SHOTS, `alerts-${String(++step).padStart(2, "0")}-${name}.png`);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: file, fullPage: true, animations: "disabled" });
  log(`screenshot ${file}`);
};

async function main() {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(30_000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(`console: ${m.text()}`);
  });

  log("sign in");
  await page.goto(`${BASE}/`);
  await page.waitForSelector("form.signin-card");
  await page.fill('input[name="token"]', TOKEN);
  await page.fill('input[name="operator"]', "e2e-sre-alerts");
  await page.click('button[type="submit"]');
  await page.waitForSelector("h1:has-text('Services & APIs')");

  log("the banner");
  await page.waitForSelector('[data-testid="alert-banner"] >> text=firing');
  await shot("banner");

  log("alerts");
  await page.click("a.nav-item:has-text('Alerts')");
  await page.waitForSelector(`[data-testid="alerts-now"] tr:has-text("${RULE}") >> text=firing`);
  await page.waitForSelector(`[data-testid="alert-rules"] tr:has-text("${RULE}")`);
  await page.waitForSelector(`[data-testid="alert-history"] tr:has-text("${RULE}") >> text=firing`);
  await shot("alerts");

  log("a rule through the form");
  await page.fill('input[name="rule-name"]', "e2e-slow");
  await page.fill('textarea[name="rule-json"]', JSON.stringify({ api: API, condition: "tp99_ms_above", threshold: 250, for_s: 30 }));
  await page.click('[data-testid="rule-form"] button[type="submit"]');
  await page.waitForSelector('[data-testid="alert-rules"] tr:has-text("e2e-slow")');
  // A bad rule is refused with the field named.
  await page.fill('input[name="rule-name"]', "e2e-bad");
  await page.fill('textarea[name="rule-json"]', JSON.stringify({ condition: "availability_below", threshold: 99.9 }));
  await page.click('[data-testid="rule-form"] button[type="submit"]');
  await page.waitForSelector('[data-testid="rule-form"] >> text=fraction');
  await shot("rule-form");

  log("reports");
  await page.click("a.nav-item:has-text('Reports')");
  await page.waitForSelector(`[data-testid="report-table"] tr:has-text("${API}")`);
  await page.waitForSelector('[data-testid="report-table"] tr:has-text("All APIs")');
  const row = await page.textContent(`[data-testid="report-table"] tr:has-text("${API}")`);
  if (!row.includes("98.000%") || !row.includes("455 ms")) throw new Error(`unexpected figures: ${row}`);
  await shot("report-day");
  await page.click(".seg-btn:has-text('week')");
  await page.waitForSelector("p.muted:has-text('7 days')");
  await page.waitForSelector(`[data-testid="report-table"] tr:has-text("${API}")`);
  await shot("report-week");

  if (errors.length) throw new Error(`the page logged errors:\n${errors.join("\n")}`);
  log("ok: every step passed");
}

try {
  await main();
  await context?.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit(0);
} catch (e) {
  console.error(`alerts.e2e FAILED at step ${step + 1}: ${e?.stack ?? e}`);
  try {
    await page?.screenshot({ path: join(SHOTS, `alerts-FAILED-${String(step + 1).padStart(2, "0")}.png`), fullPage: true });
  } catch {}
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
