// The apply form previews the request as it is typed: the diff against the
// target branch before anything is submitted, a submit button that says
// what will happen, and, while submissions are closed, that blocker in
// plain words. Nothing is submitted here.

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { after, before, test } from "node:test";

import { BASE_URL, launch, pageAs, screenshot } from "../lib.mjs";

/** The demo's configuration, which it reloads when the file changes. */
const DEMO_CONFIG = new URL("../../../config/demo.toml", import.meta.url).pathname;
const original = readFileSync(DEMO_CONFIG, "utf8");

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  // Whatever happened, the demo's configuration is as committed.
  writeFileSync(DEMO_CONFIG, original);
  await browser?.close();
});

/** Waits until GET /api/v1/access says submissions are `open` (the reload is asynchronous). */
async function accessIs(open) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const response = await fetch(`${BASE_URL}/api/v1/access`, { headers: { "X-Auth-Request-User": "alice" } });
    if ((await response.json()).open === open) return;
    assert.ok(Date.now() < deadline, `submissions never became ${open ? "open" : "closed"}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

test("the apply form shows the diff before submitting, and the closed window as a blocker", async () => {
  const page = await pageAs(browser, "alice");
  const applies = [];
  page.on("request", (request) => {
    if (request.method() === "POST" && new URL(request.url()).pathname === "/api/v1/applications") applies.push(request);
  });

  await page.locator("#target").selectOption("demo.feature-flags");
  await page.fill("#reason", "e2e: look before applying");
  // The file, as a diff against main: its operation id is the form's own,
  // so the line is one the merge request would write.
  const file = page.locator('#preview .preview-file code', { hasText: "bindings/demo.feature-flags/alice.json" });
  await file.waitFor();
  const action = await page.locator("#preview .preview-file").getAttribute("data-action");
  assert.ok(["create", "update"].includes(action), action);
  await page.locator("#preview .diff .d2h-ins", { hasText: '"operationId"' }).first().waitFor();
  if (action === "create") {
    assert.ok(await page.locator("#preview .diff .d2h-ins", { hasText: '"target": "demo.feature-flags"' }).count() > 0);
  }
  const verb = action === "create" ? "Create" : "Update";
  await page.locator("#submit", { hasText: `${verb} bindings/demo.feature-flags/alice.json and ask approval` }).waitFor();
  assert.equal(await page.locator("#submit").isEnabled(), true);
  assert.match(await page.locator("#preview-route").innerText(), /merges it into main/);
  assert.equal(await page.locator("#blockers").count(), 0, "nothing stands in the way");
  await screenshot(page, "preview-1-diff");

  // Submissions close: the next preview says so, in words, with no reload.
  writeFileSync(DEMO_CONFIG, original.replace('mode = "OPEN"', 'mode = "CLOSED"'));
  try {
    await accessIs(false);
    await page.fill("#reason", "e2e: look again while closed");
    const closed = page.locator('#blockers li[data-code="SERVICE_CLOSED"]');
    await closed.waitFor();
    assert.match(await closed.innerText(), /Submissions are closed right now/);
    // The diff is still there: the blocker is about when, not what.
    assert.ok(await page.locator("#preview .diff .d2h-ins").count() > 0);
    await screenshot(page, "preview-2-closed");
  } finally {
    writeFileSync(DEMO_CONFIG, original);
  }
  await accessIs(true);
  await page.fill("#reason", "e2e: open again");
  await page.locator('#blockers li[data-code="SERVICE_CLOSED"]').waitFor({ state: "detached" });
  assert.equal(applies.length, 0, "nothing was submitted");
});
