// End-to-end test of the console's Alerts and Reports pages in a real headless Chromium
// (Debian's `chromium`, driven by playwright-core). Run by registry/tests/it/alerts_console_e2e.rs,
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
// Remove asks first, naming the rule (Cancel keeps it; confirming removes a third one) →
// Reports: the day's table has the platform row and the API with its figures, its degraded
// answers apart (availability unchanged by them), the chart's time axis in clock time
// (HH:MM) → "HTML" opens the report with the session's token (not a 401) → "Send to owners
// now" asks first, naming the owners → week.
// Any failure exits 1 after a FAILED-*.png screenshot.

import { env, runBrowser } from "./harness.mjs";

const TOKEN = env("ADMIN_TOKEN");
const RULE = env("RULE");
const API = env("API");

await runBrowser("alerts", async ({ page, log, shot, signIn }) => {
  // The alert fires and the history store answers on a loaded machine: a longer wait than
  // the harness's default.
  page.setDefaultTimeout(30_000);
  log("sign in");
  await signIn(TOKEN, "e2e-sre-alerts");

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

  log("remove asks first");
  await page.fill('input[name="rule-name"]', "e2e-gone");
  await page.fill('textarea[name="rule-json"]', JSON.stringify({ api: API, condition: "qps_above", threshold: 1000 }));
  await page.click('[data-testid="rule-form"] button[type="submit"]');
  await page.waitForSelector('[data-testid="alert-rules"] tr:has-text("e2e-gone")');
  await page.click('[data-testid="remove-e2e-slow"]');
  await page.waitForSelector('.modal:has-text("Remove alert rule e2e-slow")');
  await shot("remove-confirm");
  await page.click('.modal [data-testid="confirm-cancel"]');
  await page.waitForSelector(".modal", { state: "detached" });
  await page.waitForSelector('[data-testid="alert-rules"] tr:has-text("e2e-slow")');
  await page.click('[data-testid="remove-e2e-gone"]');
  await page.waitForSelector('.modal:has-text("Remove alert rule e2e-gone")');
  await page.click('[data-testid="confirm-remove-rule"]');
  await page.waitForSelector('[data-testid="alert-rules"] tr:has-text("e2e-gone")', { state: "detached" });
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
  if (!row.includes("98.000%") || !row.includes("455")) throw new Error(`unexpected figures: ${row}`);
  // The 5000 degraded answers the driver seeded are their own figure; availability (98 %, the
  // 2 % of 502s) does not count them.
  const degraded = await page.textContent(`[data-testid="report-table"] tr:has-text("${API}") [data-testid="degraded"]`);
  if (degraded.trim() !== "5000") throw new Error(`degraded answers: ${degraded}`);
  const ticks = await page.$$eval(".chart .x-tick", (els) => els.map((e) => e.textContent ?? ""));
  if (ticks.length < 2 || !ticks.every((t) => /(^|\s)\d{2}:\d{2}$/.test(t))) throw new Error(`time axis not in HH:MM: ${JSON.stringify(ticks)}`);
  log(`time axis: ${ticks.join(" | ")}`);
  // The table fits the page at 1280 px: nothing scrolls sideways.
  // The charts redraw at their new width when their ResizeObserver fires (after a layout), so
  // the page is measured once two animation frames have passed.
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  const overflow = await page.$eval('[data-testid="report-table"]', (t) => {
    const card = t.closest(".table-card");
    return { table: t.scrollWidth, card: card ? card.clientWidth : 0, page: document.documentElement.scrollWidth, view: window.innerWidth };
  });
  if (overflow.table > overflow.card + 1 || overflow.page > overflow.view + 1) throw new Error(`the report table does not fit at 1280 px: ${JSON.stringify(overflow)}`);
  await shot("report-day");

  log("the HTML report opens with the session's token");
  const [popup] = await Promise.all([page.waitForEvent("popup"), page.click('[data-testid="report-html"]')]);
  await popup.waitForSelector("h1:has-text('Portico day report')");
  const html = await popup.content();
  if (!html.includes(API) || html.includes("UNAUTHORIZED")) throw new Error(`the HTML report: ${html.slice(0, 300)}`);
  await popup.close();

  log("send to owners asks first");
  await page.click('[data-testid="report-send"]');
  await page.waitForSelector('.modal:has-text("owner-pay@example.com")');
  await shot("send-confirm");
  await page.click('.modal [data-testid="confirm-cancel"]');
  await page.waitForSelector(".modal", { state: "detached" });
  await page.click(".seg-btn:has-text('week')");
  await page.waitForSelector("p.muted:has-text('7 days')");
  await page.waitForSelector(`[data-testid="report-table"] tr:has-text("${API}")`);
  await shot("report-week");

});
