// A requester takes a landed change back with the Revert button (seeing
// first what the revert restores, then following the linked new request),
// and schedules an apply for a time ahead: it waits, SCHEDULED, then lands;
// a removal scheduled ahead is withdrawn, and the binding stays.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, launch, pageAs, screenshot } from "../lib.mjs";

const TARGET = "demo.feature-flags";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

async function api(method, path, body) {
  const response = await fetch(`${BASE_URL}${path}`, {
    method,
    headers: { "X-Auth-Request-User": "alice", "Content-Type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: response.status, body: await response.json() };
}

/** Waits until operation `id` is in `status` (or failed: then the test fails). */
async function statusOf(id, status) {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const { body } = await api("GET", `/api/v1/operations/${id}`);
    if (body.status === status) return body;
    assert.notEqual(body.next, "CONTACT_TEAM", JSON.stringify(body));
    assert.ok(Date.now() < deadline, `never ${status}: ${JSON.stringify(body)}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** Alice's binding to the demo target removed, whatever an earlier test left. */
async function noBinding() {
  const { body } = await api("GET", "/api/v1/me/bindings?limit=100");
  const live = body.items.find((b) => b.targetKey === TARGET && ["VALIDATED", "MERGED"].includes(b.status));
  if (!live) return;
  const closed = await api("POST", `/api/v1/bindings/${TARGET}/close`, { reason: "e2e: start clean" });
  assert.equal(closed.status, 202, JSON.stringify(closed.body));
  await statusOf(closed.body.operationId, "CLOSED");
}

/** `at` as a datetime-local input's value, in the browser's (and this process's) time zone. */
function localInput(at) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`;
}

test("Revert shows what it restores and links the new request; a scheduled apply waits, then lands", async () => {
  await noBinding();
  const page = await pageAs(browser, "alice");
  await page.locator("#target").selectOption(TARGET);
  await page.fill("#reason", "e2e: a change to take back");
  await page.click("#submit");
  await page.waitForURL(/\/operations\/[0-9a-f-]{36}$/);
  const applied = new URL(page.url()).pathname.split("/").pop();
  await statusOf(applied, "VALIDATED");

  // The Revert button: its dialog shows the file the revert deletes.
  await page.reload();
  await page.locator("#revert").click();
  const removal = page.locator('#confirm-preview .preview-file[data-action="delete"] code', { hasText: `bindings/${TARGET}/alice.json` });
  await removal.waitFor();
  await screenshot(page, "revert-1-preview");
  await page.fill("#confirm-reason", "e2e: take it back");
  await page.click("#confirm-ok");
  await page.locator("#confirm-follow").click();
  await page.waitForURL((url) => !url.pathname.endsWith(applied));
  const reverting = new URL(page.url()).pathname.split("/").pop();
  assert.equal(await page.locator("#revert-of").innerText(), applied);
  await statusOf(reverting, "CLOSED");
  await page.goto(`${BASE_URL}/operations/${applied}`);
  await page.locator("#reverted-by", { hasText: reverting }).waitFor();
  assert.equal(await page.locator("#revert").count(), 0, "a reverted change offers no second revert");
  await screenshot(page, "revert-2-linked");

  // An apply scheduled a few seconds ahead: approved at once, it waits.
  const notBefore = new Date(Math.ceil((Date.now() + 12_000) / 1000) * 1000);
  await page.goto(`${BASE_URL}/`);
  await page.locator("#target").selectOption(TARGET);
  await page.fill("#not-before", localInput(notBefore));
  await page.fill("#reason", "e2e: not before its time");
  await page.click("#submit");
  await page.waitForURL(/\/operations\/[0-9a-f-]{36}$/);
  const scheduled = new URL(page.url()).pathname.split("/").pop();
  const waiting = page.locator('#scheduled[data-waits-for="NOT_BEFORE"]');
  await waiting.waitFor({ timeout: 30_000 });
  assert.equal(new Date(await waiting.getAttribute("data-until")).getTime(), notBefore.getTime());
  await screenshot(page, "schedule-1-waiting");
  const landed = await statusOf(scheduled, "VALIDATED");
  assert.ok(new Date(landed.updatedAt) >= notBefore, JSON.stringify(landed));
  await page.reload();
  await page.locator('#status [data-status="VALIDATED"]').waitFor();
  await screenshot(page, "schedule-2-landed");

  // A removal scheduled ahead is withdrawn before its time: the binding
  // stays, live, with the apply that made it.
  const removeAt = new Date(Date.now() + 3_600_000);
  const later = await api("POST", `/api/v1/bindings/${TARGET}/close`, { reason: "e2e: later", notBefore: removeAt.toISOString() });
  assert.equal(later.status, 202, JSON.stringify(later.body));
  await page.goto(`${BASE_URL}/operations/${later.body.operationId}`);
  await page.locator("#scheduled").waitFor();
  await page.locator("#withdraw").click();
  await page.locator("#confirm-ok").waitFor();
  assert.match(await page.locator("dialog").innerText(), /the binding stays as it is/);
  await page.fill("#confirm-reason", "e2e: kept after all");
  await page.click("#confirm-ok");
  await page.locator("#confirm-result", { hasText: "Withdrawn." }).waitFor();
  await page.click("#confirm-cancel");
  await page.locator('#status .badge', { hasText: "WITHDRAWN" }).waitFor();
  assert.match(await page.locator("#next").innerText(), /nothing was removed/);
  assert.equal(await page.locator("#revert").count(), 0, "a withdrawn removal has nothing to revert");
  assert.match(await page.locator(`#relation tr[data-operation="${later.body.operationId}"]`).innerText(), /withdrawn/);
  assert.equal(await page.locator(`#relation tr[data-operation="${scheduled}"]`).getAttribute("data-current"), "true");
  await screenshot(page, "schedule-3-removal-withdrawn");
  const kept = await api("GET", `/api/v1/operations/${scheduled}`);
  assert.equal(kept.body.status, "VALIDATED", JSON.stringify(kept.body));
  assert.equal(kept.body.supersededBy, undefined, JSON.stringify(kept.body));

  await noBinding();
});
