// The ops console's merge queue: a requester's approved request is merged in
// a batch, and the operator finds that batch, its MR and its member; a batch
// stuck on its pipeline is settled by hand, and its request merges later.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, asUser, eventually, gitlabSim, launch, pageAs, screenshot } from "../lib.mjs";

/** Requesters the other tests do not use, so their bindings are in nobody's way. */
const REQUESTER = "bob";
const STUCK_REQUESTER = "carol";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
  // Whatever happened here, later tests get passing pipelines.
  await gitlabSim("POST", "pipeline_script", { outcomes: [] });
});

/**
 * The batch a request is in, once claimed: its id (what links name) and its
 * number (what people read), which the claim's timeline entry names too.
 */
async function batchOf(operationId, user) {
  const { operation, items } = await asUser(user, "GET", `/api/v1/operations/${operationId}/timeline`);
  if (operation.batchId === undefined) return undefined;
  const claims = items.filter((entry) => /^in merge batch #\d+$/.test(entry.message));
  assert.equal(claims[claims.length - 1]?.message, `in merge batch #${operation.batchNumber}`);
  return { id: operation.batchId, number: operation.batchNumber };
}

test("an operator finds the batch that merged a request, with its MR and member", async () => {
  const submitted = await asUser(REQUESTER, "POST", "/api/v1/applications", {
    targetKey: "demo.feature-flags",
    reason: "e2e: merged through the queue",
  });
  const operationId = submitted.operationId;

  // The approval simulator decides after ~3 s, then a round (every 5 s)
  // claims the request into a batch: its timeline names the batch.
  const batch = await eventually("the request to join a batch", () => batchOf(operationId, REQUESTER));

  const page = await pageAs(browser, "admin");
  await page.goto(`${BASE_URL}/ops`);
  await page.click("#tab-merge-queue");
  await page.waitForURL(/\/ops\/merge-queue$/);

  // The list is read when the tab opens: open it again until the batch merged.
  const row = page.locator(`#batches tr[data-batch="${batch.id}"]`);
  await eventually("the batch to succeed in the list", async () => {
    await page.click("#tab-merge-queue");
    await page.locator("#batches tbody tr").or(page.getByText("No batches yet.")).first().waitFor();
    return (await row.getAttribute("data-status", { timeout: 1000 }).catch(() => null)) === "SUCCEEDED";
  });
  assert.equal(await row.locator(".badge").innerText(), "SUCCEEDED");
  // Merged: no longer in the train, and built once.
  assert.equal(await row.locator("td.train").innerText(), "");
  assert.equal(await row.locator("td").nth(3).innerText(), "first try");
  const mrLink = row.locator("a.mr-link");
  assert.match(await mrLink.innerText(), /^!\d+$/);
  assert.match(await mrLink.getAttribute("href"), /\/config\/repo\/-\/merge_requests\/\d+$/);
  // A merged batch cannot be settled.
  assert.equal(await row.locator('button[data-action="settle"]').count(), 0);
  await screenshot(page, "merge-queue-1-list");

  // The request's MR is the batch's.
  const operation = await asUser(REQUESTER, "GET", `/api/v1/operations/${operationId}`);
  if (operation.mergeRequest) {
    assert.equal(await mrLink.innerText(), `!${operation.mergeRequest.iid}`);
  }

  // Its detail, linked by id and named by number: the member, linking to
  // the request's page, and how it got there.
  const link = row.locator(`a[data-batch-link="${batch.id}"]`);
  assert.equal(await link.innerText(), `#${batch.number}`);
  await link.click();
  await page.waitForURL(new RegExp(`/ops/merge-queue\\?batch=${batch.id}$`));
  assert.match(await page.locator("#batch h2").first().innerText(), new RegExp(`^Batch #${batch.number} `));
  await page.locator("#batch-status .badge").filter({ hasText: "SUCCEEDED" }).waitFor();
  assert.match(await page.locator("#batch-mr").innerText(), /^!\d+$/);
  const member = page.locator(`#batch-members li[data-operation="${operationId}"] a`);
  assert.equal(await member.getAttribute("href"), `/operations/${operationId}`);
  const events = await page.locator("#batch-history tbody tr")
    .filter({ has: page.locator(`a[href="/operations/${operationId}"]`) })
    .evaluateAll((rows) => rows.map((tr) => tr.dataset.event));
  assert.deepEqual(events.filter((e) => e === "CLAIMED" || e === "MERGED"), ["CLAIMED", "MERGED"]);
  // A first try that merged has no split tree.
  assert.equal(await page.locator("#split-tree").count(), 0);
  await screenshot(page, "merge-queue-2-detail");

  // A round run by hand is confirmed, and its answer shown.
  await page.click("#batches-back");
  await page.click("#batch-run");
  await page.fill("#confirm-reason", "e2e: run a round");
  await page.click("#confirm-ok");
  const result = page.locator("#confirm-result.success");
  await result.waitFor();
  assert.match(await result.innerText(), /^OK: /);
  await screenshot(page, "merge-queue-3-round");
  await page.click("#confirm-cancel");
  await row.waitFor();

  // So is a reconciliation run by hand (nothing is lost here: it says so).
  await page.click("#reconcile-run");
  await page.click("#confirm-ok");
  const reconciled = page.locator("#confirm-result.success");
  await reconciled.waitFor();
  assert.match(await reconciled.innerText(), /^OK: /);
  await page.click("#confirm-cancel");
});

test("an operator settles a batch stuck on its pipeline, with a reason, and its request merges later", async () => {
  // The next batch's pipeline never finishes.
  await gitlabSim("POST", "pipeline_script", { outcomes: ["stuck_running"] });
  const submitted = await asUser(STUCK_REQUESTER, "POST", "/api/v1/applications", {
    targetKey: "demo.feature-flags",
    reason: "e2e: stuck in the queue",
  });
  const operationId = submitted.operationId;
  const batch = await eventually("the request to join a batch", () => batchOf(operationId, STUCK_REQUESTER));

  const page = await pageAs(browser, "admin");
  await page.goto(`${BASE_URL}/ops/merge-queue?batch=${batch.id}`);
  // The view refreshes itself while the batch runs.
  await page.locator("#batch-status").filter({ hasText: "RUNNING PIPELINE" }).waitFor({ timeout: 30_000 });
  await page.locator(`#batch-members li[data-operation="${operationId}"]`).waitFor();
  await screenshot(page, "merge-queue-4-stuck");

  await page.click('button[data-action="settle"]');
  // A reason is required before anything is sent.
  await page.click("#confirm-ok");
  await page.locator("#confirm-outcome .field-error").waitFor();
  await page.fill("#confirm-reason", "e2e: the pipeline hangs");
  await page.click("#confirm-ok");
  const result = page.locator("#confirm-result.success");
  await result.waitFor();
  assert.equal(await result.innerText(), `OK: batch #${batch.number} is now FAILED.`);
  await screenshot(page, "merge-queue-5-settled");
  await page.click("#confirm-cancel");

  // The view is read again: the batch let its request go, with the reason.
  await page.locator("#batch-status .badge").filter({ hasText: "FAILED" }).waitFor();
  assert.equal(await page.locator('button[data-action="settle"]').count(), 0);
  await page.locator('#batch-history tr[data-event="RELEASED"]').filter({ hasText: "e2e: the pipeline hangs" }).waitFor();

  // The request waits for the next round, whose pipeline passes.
  const retried = await eventually("the request to join another batch", async () => {
    const now = await batchOf(operationId, STUCK_REQUESTER);
    return now && now.id !== batch.id && now;
  });
  assert.ok(retried.number > batch.number, `a later batch of the project: #${retried.number}`);
  await page.goto(`${BASE_URL}/ops/merge-queue?batch=${retried.id}`);
  await page.locator("#batch-status .badge").filter({ hasText: "SUCCEEDED" }).waitFor({ timeout: 60_000 });
  await page.locator(`#batch-members li[data-operation="${operationId}"]`).waitFor();
  await screenshot(page, "merge-queue-6-merged-later");
});
