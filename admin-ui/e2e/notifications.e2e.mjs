// End-to-end test of the console's Notifications page in a real headless Chromium. Run by
// registry/tests/it/notifications_console_e2e.rs, which starts ZooKeeper, a gateway with an
// internal listener and the registry with the gateways' publisher token, creates two apps
// (one with a callback URL nobody answers), opens a signed SSE stream for the other once the
// topic exists, and passes in the environment:
//
//   CONSOLE_URL     the registry, serving the console at /    (required)
//   ADMIN_TOKEN     the registry's admin token                 (required)
//   TOPIC           the topic to create                        (required)
//   APP             the app holding the stream                 (required)
//   CALLBACK_APP    the app whose callbacks fail               (required)
//   EVENT_ID_FILE   where the event id the page shows goes     (required)
//   SCREENSHOT_DIR  where the screenshots go                   (required)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//
// Flow: sign in → Notifications → New topic granted to both apps (a bad retention refused
// first) → the topic is listed → the app is listed connected (1 connection, as the test's
// stream reaches the gateway) → Send test event to it: the event id is shown (and written to
// EVENT_ID_FILE for the test to compare with what the stream received) → its backlog shows
// the unacknowledged event → a test event to the callback app → its dead letter is listed →
// edit the topic's description.

import { writeFileSync } from "node:fs";
import { env, runBrowser } from "./harness.mjs";

const TOKEN = env("ADMIN_TOKEN");
const TOPIC = env("TOPIC");
const APP = env("APP");
const CALLBACK_APP = env("CALLBACK_APP");
const EVENT_ID_FILE = env("EVENT_ID_FILE");
const OPERATOR = "e2e-sre-notify";

await runBrowser("notifications", async ({ page, log, shot, signIn }) => {
  log("sign in");
  await signIn(TOKEN, OPERATOR);

  log("the Notifications page");
  await page.click("a.nav-item:has-text('Notifications')");
  await page.waitForSelector("h1:has-text('Notifications')");
  // The registry reads the gateway's /status: the store is known once it has.
  await page.waitForSelector('[data-testid="notify-store"] .summary-num:has-text("memory")');
  await shot("empty");

  log(`create the topic ${TOPIC}`);
  await page.click('[data-testid="new-topic"]');
  await page.fill('input[name="topic-name"]', TOPIC);
  await page.fill('input[name="topic-owner"]', "order-team");
  await page.fill('input[name="topic-apps"]', `${APP}, ${CALLBACK_APP}`);
  await page.fill('input[name="topic-retention"]', "0");
  await page.click('[data-testid="save-topic"]');
  await page.waitForSelector(".modal >> text=a whole number of seconds above 0");
  await page.fill('input[name="topic-retention"]', "3600");
  await shot("new-topic");
  await page.click('[data-testid="save-topic"]');
  await page.waitForSelector(".modal", { state: "detached" });
  const topicRow = `[data-testid="topics-table"] tr[data-topic="${TOPIC}"]`;
  await page.waitForSelector(`${topicRow} [data-testid="topic-apps"]:has-text("${CALLBACK_APP}")`);

  log(`${APP} connected (the test opens its stream once the gateway has the topic)`);
  const appRow = `[data-testid="notify-apps-table"] tr[data-app="${APP}"]`;
  await page.waitForSelector(`${appRow} [data-testid="app-connections"]:text-is("1")`, { timeout: 60_000 });
  await shot("connected");

  log(`send a test event to ${APP}`);
  await page.selectOption('select[name="test-app"]', APP);
  await page.selectOption('select[name="test-topic"]', TOPIC);
  await page.fill('textarea[name="test-payload"]', "{not json");
  await page.click('[data-testid="send-test-event"]');
  await page.waitForSelector('[data-testid="test-send"] >> text=not JSON');
  await page.fill('textarea[name="test-payload"]', JSON.stringify({ order_id: "E2E-1", state: "paid" }));
  await page.click('[data-testid="send-test-event"]');
  const id = (await page.textContent('[data-testid="test-event-id"]', { timeout: 20_000 })).trim();
  if (!id) throw new Error("no event id shown");
  writeFileSync(EVENT_ID_FILE, id);
  log(`event id ${id}`);
  // Delivered and not acknowledged: the app's backlog.
  await page.waitForSelector(`${appRow} [data-testid="app-backlog"]:text-is("1")`, { timeout: 20_000 });
  await shot("sent");

  log(`a test event to ${CALLBACK_APP}, whose callback URL nobody answers`);
  await page.selectOption('select[name="test-app"]', CALLBACK_APP);
  await page.click('[data-testid="send-test-event"]');
  await page.waitForSelector(`[data-testid="test-send-result"]:has-text("${CALLBACK_APP}")`);
  const cbId = (await page.textContent('[data-testid="test-event-id"]')).trim();
  await page.waitForSelector(`[data-testid="dead-letters-table"] tr[data-dead="${cbId}"]`, { timeout: 60_000 });
  await page.waitForSelector(`[data-testid="notify-apps-table"] tr[data-app="${CALLBACK_APP}"] >> text=callback`);
  await shot("dead-letter");

  log("edit the topic");
  await page.click(`${topicRow} [data-testid="edit-topic"]`);
  await page.fill('input[name="topic-description"]', "orders paid, shipped, refunded");
  await page.click('[data-testid="save-topic"]');
  await page.waitForSelector(".modal", { state: "detached" });
  await page.waitForSelector(`${topicRow} >> text=orders paid, shipped, refunded`);
  await shot("edited");
});
