// One request followed on its page, without a reload, through every system
// it passes: the approval system, the merge queue (QUEUED, then its batch),
// its MR's pipeline, each reviewer bot's approval, the merge commit and the
// deploy; the pipeline's and the commit's links open their pages.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, asUser, launch, pageAs, screenshot } from "../lib.mjs";

/** A requester no other test uses, so its binding is in nobody's way. */
const REQUESTER = "erin";

/** Freezes or thaws the merge queue, so the request is seen waiting for its round. */
async function freeze(frozen) {
  await asUser("admin", "PUT", "/admin/v1/batches/freeze", { frozen, reason: "e2e: watch a request wait for its round" });
}

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await freeze(false);
  await browser?.close();
});

test("a request's page follows it live through approval, batch, pipeline, both approvals, merge and deploy", async () => {
  await freeze(true);
  const { operationId } = await asUser(REQUESTER, "POST", "/api/v1/applications", {
    targetKey: "demo.feature-flags",
    reason: "e2e: followed live",
  });

  const page = await pageAs(browser, "admin");
  await page.goto(`${BASE_URL}/operations/${operationId}`);
  // A reload or a navigation would start a new document: this mark would be gone.
  await page.locator("#status .badge").waitFor();
  await page.evaluate(() => { window.sameDocument = true; });

  // The demo's approval system decides after three seconds.
  await page.locator('#timeline li[data-stage="approval"][data-state="active"]').waitFor();
  await screenshot(page, "timeline-1-approval");

  // Approved, it waits for the next merge round, which the freeze holds back.
  await page.locator("#status .badge").filter({ hasText: "QUEUED" }).waitFor({ timeout: 30_000 });
  assert.equal(await page.locator("#status .badge").getAttribute("data-status"), "MR_CREATING");
  assert.match(await page.locator("#step").innerText(), /^QUEUED /);
  // The badge, the step and the history agree: the newest entry is the wait.
  assert.equal(await page.locator("#history tr").last().getAttribute("data-step"), "QUEUED");
  await screenshot(page, "timeline-2-queued");
  await freeze(false);

  // A round claims it into a batch, whose MR's pipeline runs and passes.
  await page.locator("#batch").waitFor({ timeout: 30_000 });
  const run = page.locator("#stage-pipeline-run");
  await run.waitFor({ timeout: 60_000 });
  assert.match(await run.innerText(), /^pipeline #\d+ of MR !\d+ passed \(\d+ s\)$/);
  const runLink = await run.locator("a").getAttribute("href");
  assert.match(runLink, /\/config\/repo\/-\/pipelines\/\d+$/);
  assert.equal((await page.request.get(runLink)).status(), 200);
  assert.equal(await page.locator('#timeline li[data-stage="pipeline"]').getAttribute("data-state"), "done");
  await screenshot(page, "timeline-3-pipeline");

  // Each reviewer bot's approval, in its own history row.
  await page.locator("#stage-approvals").filter({ hasText: "reviewer bot 2" }).waitFor({ timeout: 60_000 });
  const approvals = await page.locator('#history tr[data-kind="APPROVAL"]')
    .evaluateAll((rows) => rows.map((tr) => tr.lastElementChild.textContent));
  assert.deepEqual(approvals, ["reviewer bot 1", "reviewer bot 2"]);

  // The merge commit, linked to its page.
  const commit = page.locator("#stage-merge-commit a.commit");
  await commit.waitFor({ timeout: 60_000 });
  const commitLink = await commit.getAttribute("href");
  assert.match(commitLink, /\/config\/repo\/-\/commit\/[0-9a-f]{40}$/);
  assert.ok(commitLink.includes(`/commit/${await commit.innerText()}`), "the link shows the commit's short sha");
  assert.equal((await page.request.get(commitLink)).status(), 200);

  // The deploy confirms it: done, and the page stops reading.
  await page.locator('#next[data-next="NONE"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "VALIDATED");
  // By the deploy pipeline, before or after the merge was recorded.
  assert.match(await page.locator("#stage-deploy").innerText(), /deploy/);
  const states = await page.locator("#timeline li").evaluateAll((items) => items.map((li) => li.dataset.state));
  assert.deepEqual(states, ["done", "done", "done", "done", "done", "done"]);

  // The history tells it in order, each event once.
  const kinds = await page.locator("#history tr").evaluateAll((rows) => rows.map((tr) => tr.dataset.kind));
  const events = kinds.filter((kind) => kind !== "STEP");
  assert.deepEqual(events, ["PIPELINE", "APPROVAL", "APPROVAL", "MERGE", "DEPLOY"]);
  assert.equal(await page.evaluate(() => window.sameDocument), true, "followed without a reload");
  await screenshot(page, "timeline-4-deployed");
});
