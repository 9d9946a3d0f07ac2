// End-to-end test of the console's cluster view in a real headless Chromium (Debian's
// `chromium`, driven by playwright-core). Run by registry/tests/it/cluster_console_e2e.rs, which
// starts ZooKeeper, two demo backends, a gateway and the registry, seeds a cluster with a
// standby set and autoscale rules, and passes in the environment:
//
//   CONSOLE_URL     the registry, serving the console at /   (required)
//   ADMIN_TOKEN     the registry's admin token                (required)
//   CLUSTER         the cluster to fail over                  (required)
//   NODE_ID         the gateway's node id                     (required)
//   PRIMARY / STANDBY  an endpoint address of each set        (required)
//   AUTO_CLUSTER    a cluster whose primary is down: the gateway fails over on its own (required)
//   GRPC_CLUSTER    the sandbox gRPC cluster imported drafts call (required)
//   PROTO           path of protos/demo/order.proto            (required)
//   SCREENSHOT_DIR  where the screenshots go                  (required)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//
// Flow: sign in → Clusters → the cluster: both sets with each endpoint's health as the
// gateway reports it, the gateway's row, primary serving → Fail over to standby: confirming
// without a reason is refused, with one the view shows standby serving, in the document and
// on the gateway → fail back to primary. The Rust test then checks ZooKeeper, the gateway and
// the audit log independently. Any failure exits 1 after a FAILED-*.png screenshot.
//
// Then the operator workflow (docs/operations/registry.md, "Draft → sandbox → publish → rollback"):
// the automatic failover of AUTO_CLUSTER shown as standby with its reason (not the document's
// primary); an HTTP-backed API created and its mapping edited in the console (a deadline out
// of range is refused by the form first); the demo proto imported with a preview naming the
// API that owns POST /v1/orders, its draft shown refused and "Try in sandbox" disabled; the
// API's draft deleted after typing its name; a cluster created, edited (a failover share out
// of range refused by the form) and deleted.

import { env, runBrowser } from "./harness.mjs";

const TOKEN = env("ADMIN_TOKEN");
const CLUSTER = env("CLUSTER");
const NODE_ID = env("NODE_ID");
const PRIMARY = env("PRIMARY");
const STANDBY = env("STANDBY");
const OPERATOR = "e2e-sre-clusters";
const AUTO_CLUSTER = env("AUTO_CLUSTER");
const GRPC_CLUSTER = env("GRPC_CLUSTER");
const PROTO = env("PROTO");
const HTTP_API = "checkout.create";
const CONFLICTING = "order.createorder";
const NEW_CLUSTER = "e2e-web";

/** The set badge's text in the page header. */
const activeSet = (page) => page.textContent('[data-testid="active-set"]').then((t) => t?.trim());

async function failOver({ page, shot }, to, reason) {
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

await runBrowser("cluster", async (t) => {
  const { page, log, shot, signIn } = t;
  log("sign in");
  await signIn(TOKEN, OPERATOR);

  log("clusters");
  await page.click("a.nav-item:has-text('Clusters')");
  await page.waitForSelector(`[data-testid="clusters-table"] tr[data-cluster="${CLUSTER}"]`);
  await shot("clusters");
  await page.click(`tr[data-cluster="${CLUSTER}"] a`);
  await page.waitForSelector(`[data-set="primary"] tr[data-endpoint="${PRIMARY}"]`);
  await page.waitForSelector(`[data-set="standby"] tr[data-endpoint="${STANDBY}"]`);
  await page.waitForSelector(`[data-testid="gateways-table"] tr[data-node="${NODE_ID}"]`);
  await page.waitForSelector('[data-testid="autoscale-rules"] >> text=rule 0');
  if ((await activeSet(page)) !== "primary") throw new Error(`expected primary serving, the page says ${await activeSet(page)}`);
  // Each endpoint as the gateway sees it: healthy (no probe has failed), with a load column.
  await page.waitForSelector(`[data-set="primary"] tr[data-endpoint="${PRIMARY}"] [data-testid="endpoint-state"] >> text=healthy`);
  await page.waitForSelector(`[data-set="standby"] tr[data-endpoint="${STANDBY}"] [data-testid="endpoint-state"] >> text=healthy`);
  await shot("cluster-primary");

  log("fail over to standby");
  await failOver(t, "standby", "e2e: primary data centre drill");
  await shot("cluster-standby");

  log("fail back to primary");
  await failOver(t, "primary", "e2e: drill over");
  await shot("cluster-primary-again");

  log("automatic failover, as the gateway serves it");
  await page.click("a.nav-item:has-text('Clusters')");
  await page.click(`tr[data-cluster="${AUTO_CLUSTER}"] a`);
  await page.waitForFunction(() => document.querySelector('[data-testid="active-set"]')?.textContent?.trim() === "standby", null, { timeout: 15_000 });
  await page.waitForSelector('[data-testid="active-reason"] >> text=automatic failover');
  await page.waitForSelector('[data-testid="active-reason"] >> text=the document says primary');
  await page.waitForSelector('[data-set="standby"] >> text=serving');
  await shot("auto-failover");

  log("create an HTTP-backed API");
  await page.click("a.nav-item:has-text('Services & APIs')");
  await page.click('[data-testid="new-api"]');
  await page.fill('[data-testid="api-form"] input[name="id"]', HTTP_API);
  await page.fill('[data-testid="api-form"] input[name="cluster"]', CLUSTER);
  await page.selectOption('[data-testid="api-form"] select[name="method"]', "POST");
  await page.fill('[data-testid="api-form"] input[name="path"]', "/v1/orders");
  await page.fill('[data-testid="api-form"] input[name="timeout_ms"]', "0");
  await page.click('[data-testid="api-form-save"]');
  await page.waitForSelector(".modal .field-error >> text=between 1 and 600000");
  await page.fill('[data-testid="api-form"] input[name="timeout_ms"]', "2000");
  await page.click('[data-testid="api-form-save"]');
  await page.waitForSelector(`h1:has-text("${HTTP_API}")`);
  await page.waitForSelector(".modal", { state: "detached" });

  log("edit its mapping");
  await page.click('[data-testid="edit-mapping"]');
  await page.fill('[data-testid="api-form"] input[name="backend_path"]', "/orders");
  await page.click('[data-testid="api-form-save"]');
  await page.waitForSelector(".modal", { state: "detached" });
  await page.waitForSelector('.page-head code:text-is("/orders")');
  await shot("http-api");

  log("import with a conflicting route: previewed, refused, not tried");
  await page.click("a.nav-item:has-text('Services & APIs')");
  await page.click('[data-testid="open-import"]');
  await page.setInputFiles('input[name="protos"]', PROTO);
  await page.waitForFunction(() => document.querySelector('input[name="cluster"]')?.value !== "");
  await page.fill('input[name="cluster"]', GRPC_CLUSTER);
  await page.click('[data-testid="import-submit"]');
  await page.waitForSelector(`[data-testid="import-preview"] tr[data-preview="${CONFLICTING}"] [data-testid="preview-conflict"] >> text=${HTTP_API}`);
  await shot("import-preview-conflict");
  await page.click('[data-testid="import-confirm"]');
  await page.waitForSelector(`[data-testid="import-result"] >> text=${CONFLICTING}`);
  await page.waitForSelector(`[data-testid="apis-table"] tr[data-api="${CONFLICTING}"] [data-testid="api-state"] >> text=refused by the sandbox`);
  await page.click(`[data-testid="apis-table"] tr[data-api="${CONFLICTING}"] a`);
  await page.waitForSelector(`[data-testid="draft-refused"] >> text=already bound by API ${HTTP_API}`);
  await page.click('[data-testid="tab-try"]');
  await page.waitForSelector('[data-testid="try-refused"]');
  if (!(await page.isDisabled('[data-testid="try-send"]'))) throw new Error("a refused draft can be tried");
  await shot("refused-draft");

  log("delete the HTTP API's draft (typed name)");
  await page.goto(`${env("CONSOLE_URL").replace(/\/$/, "")}/apis/${HTTP_API}`);
  await page.waitForSelector(`h1:has-text("${HTTP_API}")`);
  await page.click('[data-testid="delete-draft"]');
  if (!(await page.isDisabled('[data-testid="confirm-danger"]'))) throw new Error("delete enabled before the name was typed");
  await page.fill('[data-testid="confirm-name"]', HTTP_API);
  await page.click('[data-testid="confirm-danger"]');
  await page.waitForSelector('[data-testid="apis-table"]');
  await page.waitForSelector(`[data-testid="apis-table"] tr[data-api="${HTTP_API}"]`, { state: "detached" });

  log("create, edit and delete a cluster");
  await page.click("a.nav-item:has-text('Clusters')");
  await page.click('[data-testid="new-cluster"]');
  await page.fill('[data-testid="cluster-form"] input[name="name"]', NEW_CLUSTER);
  await page.fill('[data-testid="cluster-form"] textarea[name="endpoints"]', "127.0.0.1:9 2");
  await page.click('[data-testid="cluster-form-save"]');
  await page.waitForSelector(`tr[data-cluster="${NEW_CLUSTER}"]`);
  await page.click(`[data-testid="edit-cluster-${NEW_CLUSTER}"]`);
  await page.fill('[data-testid="cluster-form"] textarea[name="standby"]', "127.0.0.1:10");
  await page.fill('[data-testid="cluster-form"] input[name="failover_below"]', "2");
  await page.click('[data-testid="cluster-form-save"]');
  await page.waitForSelector(".modal .field-error >> text=must be in (0, 1]");
  await page.fill('[data-testid="cluster-form"] input[name="failover_below"]', "0.5");
  await page.click('[data-testid="cluster-form-save"]');
  await page.waitForSelector(".modal", { state: "detached" });
  await page.waitForSelector(`tr[data-cluster="${NEW_CLUSTER}"] >> text=+ 1 standby`);
  await shot("cluster-created");
  await page.click(`[data-testid="delete-cluster-${NEW_CLUSTER}"]`);
  await page.fill('[data-testid="confirm-name"]', NEW_CLUSTER);
  await page.click('[data-testid="confirm-danger"]');
  await page.waitForSelector(`tr[data-cluster="${NEW_CLUSTER}"]`, { state: "detached" });
});
