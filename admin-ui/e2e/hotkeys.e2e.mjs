// End-to-end test of the console's hot-key view in a real headless Chromium. Run by
// registry/tests/it/hot_keys_console_e2e.rs, which starts ZooKeeper, the demo backend, a gateway
// and the registry, publishes an API with a hot-key policy, keeps one key busy and passes in
// the environment:
//
//   CONSOLE_URL     the registry, serving the console at /   (required)
//   ADMIN_TOKEN     the registry's admin token                (required)
//   API             the API with the hot-key policy           (required)
//   HOT             the busy key's value                      (required)
//   SCREENSHOT_DIR  where the screenshots go                  (required)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//
// Flow: sign in → the API → Hot keys: the busy key is listed (as every gateway's detector
// finds it) → Block this key…: confirming without a reason is refused, with one the switch
// is written → the Switches page lists the key-level switch, degraded, with the reason.

import { env, runBrowser } from "./harness.mjs";

const TOKEN = env("ADMIN_TOKEN");
const API = env("API");
const HOT = env("HOT");
const OPERATOR = "e2e-sre-hotkeys";
const REASON = `e2e: ${HOT} oversold`;

await runBrowser("hotkeys", async ({ page, log, shot, signIn }) => {
  log("sign in");
  await signIn(TOKEN, OPERATOR);

  log(`the API ${API}: hot keys`);
  await page.click(`[data-testid="apis-table"] a:has-text("${API}")`);
  await page.waitForSelector(`h1.api-title:has-text("${API}")`);
  await page.click('[data-testid="tab-hot-keys"]');
  // The detectors close a window every 500 ms and the panel asks every 2 s.
  const row = `[data-testid="hot-keys-table"] tr[data-key="${HOT}"]`;
  await page.waitForSelector(row, { timeout: 20_000 });
  await shot("hot-keys");

  log(`block ${HOT}`);
  await page.click(`${row} [data-testid="block-key"]`);
  await page.waitForSelector(".modal >> text=key-level switch");
  await page.click('[data-testid="confirm-block"]');
  await page.waitForSelector(".modal >> text=required: say why");
  await page.fill('[data-testid="block-reason"]', REASON);
  await shot("block-dialog");
  await page.click('[data-testid="confirm-block"]');
  await page.waitForSelector(".modal", { state: "detached" });
  await page.waitForSelector(`text=${HOT} of ${API} is blocked on every gateway`);
  // Blocked requests stop at the degrade stage, before the detector: the key cools down.
  await page.waitForSelector(row, { state: "detached", timeout: 20_000 });
  await shot("blocked");

  log("switches");
  await page.click("a.nav-item:has-text('Switches')");
  await page.waitForSelector(`tr[data-switch="${API}@hot-${HOT}"] >> text=${REASON}`);
  await shot("switches");
});
