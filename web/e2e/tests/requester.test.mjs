// A requester applies in the browser, watches the request reach VALIDATED,
// and removes the binding again.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { launch, pageAs, screenshot } from "../lib.mjs";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

test("a requester applies, the timeline reaches VALIDATED, and the binding is removed", async () => {
  const page = await pageAs(browser, "alice");

  // The preview shows the file the request would write.
  await page.locator("#target").selectOption("demo.feature-flags");
  await page.locator("#preview code").filter({ hasText: "bindings/demo.feature-flags/alice.json" }).waitFor();
  // The target is for oneself only: no subject to choose.
  assert.equal(await page.locator("#subject").isVisible(), false);

  // A missing reason is reported next to the field, and the form stays usable.
  await page.click("#submit");
  const reasonError = page.locator('.field-error[data-field="reason"]');
  await reasonError.waitFor();
  assert.match(await reasonError.innerText(), /1 to 2000 characters, not only spaces/);
  assert.equal(await page.locator("#submit").isEnabled(), true);
  await screenshot(page, "requester-1-field-error");

  // The first answer is lost and the browser's request is sent again with
  // the same idempotency key: the server answers DUPLICATE_SUBMIT, and the
  // form stays locked so the request cannot be sent a third time.
  await page.route("**/api/v1/applications", async (route) => {
    await route.fetch();
    await route.fulfill({ response: await route.fetch() });
  });
  await page.fill("#reason", "e2e: try the demo flags");
  await page.click("#submit");
  const duplicate = page.locator("#duplicate");
  await duplicate.waitFor();
  for (const field of ["#target", "#reason", "#submit"]) {
    assert.equal(await page.locator(field).isDisabled(), true, `${field} stays locked`);
  }
  await screenshot(page, "requester-2-duplicate");
  await page.unroute("**/api/v1/applications");

  await duplicate.getByRole("link", { name: "follow it" }).click();
  await page.waitForURL(/\/operations\/[0-9a-f-]{36}$/);
  const operationId = new URL(page.url()).pathname.split("/").pop();
  // The demo's approval system decides after three seconds: first it waits.
  await page.locator('#next[data-next="WAIT"]').waitFor();
  assert.equal(await page.locator('#timeline li[data-state="active"]').getAttribute("data-stage"), "approval");
  await screenshot(page, "requester-3-in-progress");

  // The page polls by itself until the request settles.
  await page.locator('#next[data-next="NONE"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "VALIDATED");
  const states = await page.locator("#timeline li").evaluateAll((items) => items.map((li) => li.dataset.state));
  assert.deepEqual(states, ["done", "done", "done", "done", "done", "done"]);
  assert.match(await page.locator("#mr-link").innerText(), /^!\d+$/);
  assert.match(await page.locator("#mr-link").getAttribute("href"), /\/config\/repo\/-\/merge_requests\/\d+$/);
  assert.match(await page.locator("#next").innerText(), /Done/);
  await screenshot(page, "requester-4-validated");

  // My bindings lists it as live, with the removal button.
  await page.click('nav a[href="/bindings"]');
  const row = page.locator('#bindings tr[data-target="demo.feature-flags"]');
  await row.waitFor();
  assert.equal(await row.locator(".badge").innerText(), "VALIDATED");
  assert.equal(await row.locator(`a[href="/operations/${operationId}"]`).count(), 1);
  assert.equal(await row.locator("button.close").count(), 1);
  await screenshot(page, "requester-5-bindings");

  // Removing it asks for a reason, then follows the removal to CLOSED.
  await row.locator("button.close").click();
  await page.click("#confirm-ok");
  await page.locator("#confirm-outcome .field-error").waitFor();
  await page.fill("#confirm-reason", "e2e: done trying");
  await page.click("#confirm-ok");
  await page.locator("#confirm-result.success").filter({ hasText: "Removal requested" }).waitFor();
  await page.click("#confirm-cancel");
  await page.waitForURL(/\/operations\/[0-9a-f-]{36}$/);
  assert.notEqual(new URL(page.url()).pathname, `/operations/${operationId}`);
  await page.locator('#next[data-next="REAPPLY"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "CLOSED");
  assert.match(await page.locator("#next").innerText(), /removed\. You can apply again/);
  const closeStates = await page.locator("#timeline li").evaluateAll((items) => items.map((li) => li.dataset.state));
  assert.deepEqual(closeStates, ["done", "done", "done", "done", "done", "done"]);
  await screenshot(page, "requester-6-closed");

  // A reload of an app route gets the page again (the server's fallback).
  await page.reload();
  await page.locator('#next[data-next="REAPPLY"]').waitFor();
});
