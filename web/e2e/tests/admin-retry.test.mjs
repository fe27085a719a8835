// An operator finds a failed request in the ops console and re-runs it.
//
// Needs the admin operations API (GET /admin/v1/operations and
// POST /admin/v1/operations/{id}/retry). Enabled with CHANGEGATE_E2E_ADMIN=1
// until that API is part of every build this suite runs against.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, GITLAB_SIM_URL, applyForDemoTarget, launch, pageAs, screenshot } from "../lib.mjs";

const enabled = process.env.CHANGEGATE_E2E_ADMIN === "1";

let browser;
before(async () => {
  if (enabled) browser = await launch();
});
after(async () => {
  await browser?.close();
});

test("an operator retries a failed request from the console", { skip: !enabled && "CHANGEGATE_E2E_ADMIN is not 1" }, async () => {
  // The next MR pipeline fails, so the request stops at CREATE_FAILED.
  const script = await fetch(`${GITLAB_SIM_URL}/_sim/projects/config%2Frepo/pipeline_script`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ outcomes: ["failed"] }),
  });
  assert.equal(script.ok, true, `pipeline script: ${script.status}`);

  const page = await pageAs(browser, "admin");
  const operationId = await applyForDemoTarget(page, "e2e: a request whose pipeline fails");
  await page.locator('#next[data-next="CONTACT_TEAM"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "CREATE_FAILED");
  assert.equal(await page.locator('#timeline li[data-state="failed"]').getAttribute("data-stage"), "pipeline");
  await screenshot(page, "admin-1-failed");

  await page.goto(`${BASE_URL}/ops`);
  await page.selectOption("#filter-status", "CREATE_FAILED");
  await page.click('#ops-filters button[type="submit"]');
  await page.waitForURL(/status=CREATE_FAILED/);
  const row = page.locator(`#operations tr[data-operation="${operationId}"]`);
  await row.waitFor();
  await screenshot(page, "admin-2-console");

  await row.locator('button[data-action="retry"]').click();
  await page.fill("#confirm-reason", "e2e: the pipeline is fixed");
  await page.click("#confirm-ok");
  const result = page.locator("#confirm-result.success");
  await result.waitFor();
  assert.match(await result.innerText(), /^OK/);
  await screenshot(page, "admin-3-retried");
  await page.click("#confirm-cancel");

  await page.goto(`${BASE_URL}/operations/${operationId}`);
  await page.locator('#next[data-next="NONE"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "VALIDATED");
  await screenshot(page, "admin-4-validated");

  // The retry is in the audit log.
  await page.goto(`${BASE_URL}/ops/audit`);
  await page.locator("#audit tbody tr").filter({ hasText: operationId }).first().waitFor();
});

test("a requester is told the console is for operators", { skip: !enabled && "CHANGEGATE_E2E_ADMIN is not 1" }, async () => {
  const page = await pageAs(browser, "alice");
  await page.goto(`${BASE_URL}/ops`);
  await page.locator("#console-error").filter({ hasText: "Only operators" }).waitFor();
});
