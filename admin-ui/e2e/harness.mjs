// What the console's browser tests share: the environment they are given, a headless
// Chromium (Debian's `chromium`, driven by playwright-core) with its own profile, signing in,
// numbered screenshots, and the exit code (0 when every step passed, 1 after a FAILED-*.png
// screenshot). Each `*.e2e.mjs` is run by a Rust test in registry/tests/it/ that starts the real
// processes and passes their addresses in the environment.

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

/** The environment variable `name` (or `fallback`); exits 2 when it is missing. */
export function env(name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`e2e: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

/**
 * Runs `steps(t)` in a fresh headless Chromium and exits. `t` holds `page`, `log(msg)`,
 * `shot(name)` (a numbered full-page screenshot named `<prefix>-NN-<name>.png`) and
 * `signIn(token, operator)`. Errors the page logs fail the run.
 */
export async function runBrowser(prefix, steps) {
  const shots = env("SCREENSHOT_DIR");
  const executablePath = env("CHROMIUM", "/usr/bin/chromium");
  mkdirSync(shots, { recursive: true });
  const profile = mkdtempSync(join(tmpdir(), "portico-e2e-chromium-"));
  const log = (msg) => console.log(`[${prefix}.e2e ${new Date().toISOString().slice(11, 23)}] ${msg}`);
  let context;
  let page;
  let step = 0;
  const shot = async (name) => {
    const file = join(shots, `${prefix}-${String(++step).padStart(2, "0")}-${name}.png`);
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: file, fullPage: true, animations: "disabled" });
    log(`screenshot ${file}`);
  };
  const signIn = async (token, operator) => {
    await page.goto(`${env("CONSOLE_URL").replace(/\/$/, "")}/`);
    await page.waitForSelector("form.signin-card");
    await page.fill('input[name="token"]', token);
    await page.fill('input[name="operator"]', operator);
    await page.click('button[type="submit"]');
    await page.waitForSelector("h1:has-text('Services & APIs')");
  };
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath,
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
    await steps({ page, log, shot, signIn });
    if (errors.length) throw new Error(`the page logged errors:\n${errors.join("\n")}`);
    log("ok: every step passed");
    await context.close();
    rmSync(profile, { recursive: true, force: true });
    process.exit(0);
  } catch (e) {
    console.error(`${prefix}.e2e FAILED at step ${step + 1}: ${e?.stack ?? e}`);
    try {
      await page?.screenshot({ path: join(shots, `${prefix}-FAILED-${String(step + 1).padStart(2, "0")}.png`), fullPage: true });
    } catch {}
    await context?.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
    process.exit(1);
  }
}
