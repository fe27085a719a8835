// A waiting request's page shows its place in the merge queue and when it
// is expected to merge, and follows both as the queue moves: second behind
// a batch whose pipeline runs (the ops console's list says so too), first
// once that batch has merged, and gone from the queue once its own has.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, asUser, gitlabSim, launch, pageAs, screenshot } from "../lib.mjs";

/** `user` applies for the demo target for themself: the operation id. */
async function apply(user, reason) {
  const answer = await asUser(user, "POST", "/api/v1/applications", { targetKey: "demo.feature-flags", reason });
  return answer.operationId;
}

/** The request's view once `done(view)` holds, read every half second. */
async function until(operationId, user, done, what) {
  const deadline = Date.now() + 90_000;
  let view;
  while (Date.now() < deadline) {
    view = await asUser(user, "GET", `/api/v1/operations/${operationId}`);
    if (done(view)) return view;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  assert.fail(`${operationId} never ${what}: ${JSON.stringify(view)}`);
}

/** Ends the pipeline of the request's merge request with success. */
async function passPipelineOf(view) {
  const mr = await gitlabSim("GET", `merge_requests/${view.mergeRequest.iid}`);
  await gitlabSim("POST", `pipelines/${mr.head_pipeline.id}/force`, { outcome: "success" });
}

const landed = (view) => ["MERGED", "VALIDATED"].includes(view.status);

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
  // Whatever happened here, later tests get passing pipelines.
  await gitlabSim("POST", "pipeline_script", { outcomes: [] });
});

test("a queued request's place and expected time follow the queue as it moves", async () => {
  // Expected times come from the project's last merged batches (three at
  // least): three requests merged one after another give them, whatever
  // the tests before this one merged.
  for (const user of ["eta-one", "eta-two", "eta-three"]) {
    const id = await apply(user, "e2e: history for the expected times");
    await until(id, user, landed, "merged");
  }

  // The next two pipelines run until they are told to end: the first
  // request's batch stays in the queue while the second waits behind it.
  await gitlabSim("POST", "pipeline_script", { outcomes: ["stuck_running", "stuck_running"] });
  const first = await apply("eta-ahead", "e2e: the batch ahead");
  const ahead = await until(first, "eta-ahead", (view) => view.mergeRequest?.iid !== undefined,
    "had its batch's merge request opened");
  const second = await apply("eta-behind", "e2e: the request watched");

  const page = await pageAs(browser, "admin");
  await page.goto(`${BASE_URL}/operations/${second}`);
  const place = page.locator("#queue");
  const estimate = page.locator("#queue-estimate");
  await page.locator('#queue[data-position="2"]').waitFor({ timeout: 60_000 });
  const behindOne = await estimate.getAttribute("data-merge-at");
  assert.ok(behindOne, `an expected merge time behind one batch: ${await place.innerText()}`);
  assert.match(await estimate.innerText(), /^merged about /);
  await screenshot(page, "queue-1-second");

  // The ops console's list says the same of it.
  const console = await pageAs(browser, "admin");
  await console.goto(`${BASE_URL}/ops`);
  const row = console.locator(`#operations tr[data-operation="${second}"] .queue`);
  await row.waitFor();
  assert.equal(await row.getAttribute("data-position"), "2");
  assert.ok(await row.getAttribute("data-merge-at"), await row.innerText());
  assert.match(await row.innerText(), /^place 2 of 2 in the merge queue; merged about /);
  await screenshot(console, "queue-1-console");
  await console.close();

  // The batch ahead passes and merges: the request is next, and its
  // expected time is read again without a reload.
  await page.evaluate(() => { window.sameDocument = true; });
  await passPipelineOf(ahead);
  await until(first, "eta-ahead", landed, "merged");
  await page.locator('#queue[data-position="1"]').waitFor({ timeout: 60_000 });
  const next = await estimate.getAttribute("data-merge-at");
  assert.ok(next, `an expected merge time as the next to merge: ${await place.innerText()}`);
  assert.equal(await page.evaluate(() => window.sameDocument), true, "followed without a reload");
  await screenshot(page, "queue-2-next");

  // Its own batch merges: it has no place in the queue any more.
  const behind = await until(second, "eta-behind", (view) => view.mergeRequest?.iid !== undefined,
    "had its batch's merge request opened");
  await passPipelineOf(behind);
  await until(second, "eta-behind", landed, "merged");
  await place.waitFor({ state: "detached", timeout: 60_000 });
  await screenshot(page, "queue-3-merged");
});
