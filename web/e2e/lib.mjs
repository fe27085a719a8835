// Shared by the browser tests: where the demo runs, the browser, screenshots.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

/** changegate as started by run.sh (the demo, on loopback). */
export const BASE_URL = process.env.CHANGEGATE_E2E_BASE_URL ?? "http://127.0.0.1:8080";
/** The demo's GitLab simulator, whose control API injects pipeline failures. */
export const GITLAB_SIM_URL = process.env.CHANGEGATE_E2E_GITLAB_URL ?? "http://127.0.0.1:18081";
/** The demo's approval simulator, whose control API sets how requests are decided. */
export const APPROVAL_SIM_URL = process.env.CHANGEGATE_E2E_APPROVAL_URL ?? "http://127.0.0.1:18082";
/** Screenshots go here (ignored by git): each run leaves them for a reviewer to look at. */
export const OUTPUT_DIR = process.env.CHANGEGATE_E2E_OUTPUT ?? new URL("./screenshots/", import.meta.url).pathname;

mkdirSync(OUTPUT_DIR, { recursive: true });

/** Headless Chromium from the distribution (never a downloaded browser build). */
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    // Root in CI cannot use Chromium's sandbox, and containers often have a
    // small /dev/shm.
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}

/** A fresh page signed in, through the demo switcher, as `user`. */
export async function pageAs(browser, user) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${BASE_URL}/`);
  await page.selectOption("#demo-user", user);
  return page;
}

/** A full-page screenshot named after the step it shows. */
export async function screenshot(page, name) {
  await page.screenshot({ path: `${OUTPUT_DIR}/${name}.png`, fullPage: true });
}

/** Applies for the demo target through the form; resolves with the operation id. */
export async function applyForDemoTarget(page, reason) {
  await page.goto(`${BASE_URL}/`);
  await page.locator("#target").selectOption("demo.feature-flags");
  await page.fill("#reason", reason);
  await page.click("#submit");
  await page.waitForURL(/\/operations\/[0-9a-f-]{36}$/);
  return new URL(page.url()).pathname.split("/").pop();
}

/** Waits until `probe` resolves with a value, trying every second. */
export async function eventually(what, probe, timeoutMs = 90_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

/** A JSON call; resolves with the parsed answer (null when empty). */
export async function send(method, url, body, headers = {}) {
  const response = await fetch(url, {
    method,
    headers: body ? { "Content-Type": "application/json", ...headers } : headers,
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  assert.equal(response.ok, true, `${method} ${url}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** A changegate API call as `user` (the demo's identity header). */
export function asUser(user, method, path, body) {
  return send(method, `${BASE_URL}${path}`, body, { "X-Auth-Request-User": user });
}

/** The demo project in the GitLab simulator's control API. */
export function gitlabSim(method, path, body) {
  return send(method, `${GITLAB_SIM_URL}/_sim/projects/config%2Frepo/${path}`, body);
}
