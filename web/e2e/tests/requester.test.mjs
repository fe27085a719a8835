// A requester applies in the browser, watches the request reach VALIDATED,
// and removes the binding again.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, launch, pageAs, screenshot } from "../lib.mjs";

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

  // Status, step and history come from one read: whenever the page shows a
  // status, the history's last recorded status is that status.
  for (let i = 0; i < 20; i++) {
    const shown = await page.locator("#status .badge").getAttribute("data-status");
    const recorded = await page.locator("#history tr .badge").evaluateAll((badges) => badges.map((b) => b.textContent));
    if (recorded.length) assert.equal(shown, recorded[recorded.length - 1], "the badge and the history agree");
    if (shown === "VALIDATED") break;
    await page.waitForTimeout(500);
  }

  // The page polls by itself until the request settles.
  await page.locator('#next[data-next="NONE"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "VALIDATED");
  const states = await page.locator("#timeline li").evaluateAll((items) => items.map((li) => li.dataset.state));
  assert.deepEqual(states, ["done", "done", "done", "done", "done", "done"]);
  assert.match(await page.locator("#mr-link").innerText(), /^!\d+$/);
  assert.match(await page.locator("#mr-link").getAttribute("href"), /\/config\/repo\/-\/merge_requests\/\d+$/);
  // The link opens the merge request's page (GitLab's, here the simulator's).
  const mrPage = await page.request.get(await page.locator("#mr-link").getAttribute("href"));
  assert.equal(mrPage.status(), 200);
  assert.match(await page.locator("#next").innerText(), /Done/);
  await screenshot(page, "requester-4-validated");

  // Applying again for a live binding says what helps and links the request in the way.
  await page.click('nav a[href="/"]');
  await page.locator("#target").selectOption("demo.feature-flags");
  await page.fill("#reason", "e2e: once more");
  await page.click("#submit");
  const inTheWay = page.locator("#submit-error");
  await inTheWay.waitFor();
  const told = await inTheWay.innerText();
  assert.match(told, /already live \(request [0-9a-f-]+\): request its removal first/);
  // One id is called a request: the change request in the way, not the HTTP call.
  assert.equal(told.match(/request [0-9a-f]{8}-/g).length, 1, told);
  assert.ok(told.includes(operationId), told);
  assert.match(told, /support reference [0-9a-f-]+/);
  assert.equal(await inTheWay.locator("#in-the-way").getAttribute("href"), `/operations/${operationId}`);
  await screenshot(page, "requester-4b-live-already");

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
  // Its preview says what will happen: no approval, an MR of its own.
  await page.locator("#preview-route", { hasText: "No approval is asked for a removal" }).waitFor();
  assert.match(await page.locator("#preview-route").innerText(), /in a merge request of its own/);
  assert.doesNotMatch(await page.locator("#confirm-ok").innerText(), /ask approval/);
  await page.click("#confirm-ok");
  await page.locator("#confirm-outcome .field-error").waitFor();
  await page.fill("#confirm-reason", "e2e: done trying");
  await page.click("#confirm-ok");
  await page.locator("#confirm-result.success").filter({ hasText: "Removal requested" }).waitFor();
  // The table behind the dialog shows the removal at once, without the button.
  await row.locator(".badge").filter({ hasText: "CLOSING" }).waitFor({ timeout: 5_000 });
  assert.equal(await row.locator("button.close").count(), 0);
  await screenshot(page, "requester-5b-removal-requested");
  await page.click("#confirm-follow");
  await page.waitForURL(/\/operations\/[0-9a-f-]{36}$/);
  const removalId = new URL(page.url()).pathname.split("/").pop();
  assert.notEqual(removalId, operationId);
  await page.locator('#next[data-next="REAPPLY"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "CLOSED");
  assert.match(await page.locator("#next").innerText(), /removed\. You can apply again/);
  const closeStates = await page.locator("#timeline li").evaluateAll((items) => items.map((li) => li.dataset.state));
  assert.deepEqual(closeStates, ["done", "done", "done", "done", "done", "done"]);
  await screenshot(page, "requester-6-closed");

  // The apply it removed no longer says it is live: it is superseded, and
  // links the removal; both are listed for the subject and target.
  await page.goto(`${BASE_URL}/operations/${operationId}`);
  await page.locator("#status .badge").filter({ hasText: "SUPERSEDED" }).waitFor();
  assert.equal(await page.locator("#next").getAttribute("data-next"), "NONE");
  assert.doesNotMatch(await page.locator("#next").innerText(), /Done/);
  assert.equal(await page.locator("#superseded-by").getAttribute("href"), `/operations/${removalId}`);
  const relation = await page.locator("#relation tr").evaluateAll((rows) => rows.map((tr) => [tr.dataset.operation, tr.dataset.current]));
  assert.deepEqual(relation, [[removalId, "true"], [operationId, "false"]]);
  await screenshot(page, "requester-7-superseded");

  // The operators' list shows it the same way, and its status filter agrees.
  const ops = await pageAs(browser, "admin");
  await ops.goto(`${BASE_URL}/ops?status=SUPERSEDED`);
  const listed = ops.locator(`#operations tr[data-operation="${operationId}"]`);
  await listed.waitFor();
  assert.equal(await listed.locator(".badge").innerText(), "SUPERSEDED");
  assert.equal(await listed.locator(".superseded-by").getAttribute("href"), `/operations/${removalId}`);
  await ops.goto(`${BASE_URL}/ops?status=VALIDATED`);
  await ops.locator("#operations, .hint").first().waitFor();
  await ops.waitForLoadState("networkidle");
  assert.equal(await ops.locator(`#operations tr[data-operation="${operationId}"]`).count(), 0);

  // A reload of an app route gets the page again (the server's fallback).
  await page.reload();
  await page.locator("#status .badge").filter({ hasText: "SUPERSEDED" }).waitFor();
});
