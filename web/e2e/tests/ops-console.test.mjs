// The ops console: an operator re-runs a failed request and force-fails a
// stuck one, and reads both in the audit log with a refused second try;
// the first page's overview agrees with the server; a requester is turned
// away.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  APPROVAL_SIM_URL, BASE_URL, applyForDemoTarget, asUser, gitlabSim, launch, pageAs, screenshot, send,
} from "../lib.mjs";

/** How the approval simulator decides new requests. */
function approvalPolicy(policy) {
  return send("PUT", `${APPROVAL_SIM_URL}/_sim/policy`, policy);
}

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
  // Whatever happened here, later tests get passing pipelines and approvals.
  await gitlabSim("POST", "pipeline_script", { outcomes: [] });
  await approvalPolicy({ mode: "auto", result: "APPROVED", delay_ms: 3000 });
});

test("an operator retries a failed request from the console", async () => {
  // The next MR pipeline fails, so the request stops at CREATE_FAILED.
  await gitlabSim("POST", "pipeline_script", { outcomes: ["failed"] });

  const page = await pageAs(browser, "admin");
  const operationId = await applyForDemoTarget(page, "e2e: a request whose pipeline fails");
  await page.locator('#next[data-next="CONTACT_TEAM"]').waitFor({ timeout: 90_000 });
  assert.equal(await page.locator("#status").innerText(), "CREATE_FAILED");
  assert.equal(await page.locator('#timeline li[data-state="failed"]').getAttribute("data-stage"), "pipeline");
  await screenshot(page, "admin-1-failed");

  // Someone re-runs the MR's pipeline and it passes.
  const iid = (await page.locator("#mr-link").innerText()).replace("!", "");
  const mr = await gitlabSim("GET", `merge_requests/${iid}`);
  await gitlabSim("POST", `pipelines/${mr.head_pipeline.id}/force`, { outcome: "success" });

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
  // The recorded steps show the failure and who re-ran it.
  await page.locator("#history tr").filter({ hasText: "CREATE_PIPELINE_FAILED" }).waitFor();
  await page.locator("#history tr").filter({ hasText: "retried by admin: e2e: the pipeline is fixed" }).waitFor();
  await screenshot(page, "admin-4-validated");

  // The retry is in the audit log.
  await page.goto(`${BASE_URL}/ops/audit`);
  await page.locator("#audit tbody tr").filter({ hasText: operationId }).first().waitFor();
});

test("an operator force-fails a request stuck awaiting approval, with a reason; the audit log shows it and a refused second try", async () => {
  // Nobody decides: the request waits at APPROVAL_SENT.
  await approvalPolicy({ mode: "manual" });
  // An operator may apply for someone else; this subject has no binding yet.
  const submitted = await asUser("admin", "POST", "/api/v1/applications", {
    targetKey: "demo.feature-flags",
    subjectId: "e2e-stuck",
    reason: "e2e: waits for approval",
  });

  const page = await pageAs(browser, "admin");
  await page.goto(`${BASE_URL}/ops?status=APPROVAL_SENT`);
  const row = page.locator(`#operations tr[data-operation="${submitted.operationId}"]`);
  await row.waitFor();

  // The demo's approvals come from the approval system, and nothing of
  // changegate's waits to re-run: only force-fail is offered; Retry,
  // Approve and Reject are shown disabled, saying why on hover.
  const offered = await row.locator("button[data-action]:enabled").evaluateAll((buttons) =>
    buttons.map((button) => button.dataset.action),
  );
  assert.deepEqual(offered, ["fail"]);
  const withheld = await row.locator("button[data-action]:disabled").evaluateAll((buttons) =>
    buttons.map((button) => [button.dataset.action, button.title]),
  );
  assert.deepEqual(withheld.map(([action]) => action), ["retry", "approve", "reject"]);
  assert.match(withheld[0][1], /waiting for an outside decision/);
  for (const [, reason] of withheld.slice(1)) assert.match(reason, /approval system decides/);
  await row.locator('button[data-action="approve"]').hover();
  await screenshot(page, "admin-2b-withheld-actions");

  await row.locator('button[data-action="fail"]').click();
  // A reason is required before anything is sent.
  await page.click("#confirm-ok");
  await page.locator("#confirm-outcome .field-error").waitFor();
  await page.fill("#confirm-reason", "e2e: the approver left");
  await page.click("#confirm-ok");
  const result = page.locator("#confirm-result.success");
  await result.waitFor();
  assert.match(await result.innerText(), /^OK: the request is now ABANDONED/);
  await screenshot(page, "admin-5-force-failed");
  await page.click("#confirm-cancel");
  // The list is read again: the request is no longer awaiting approval.
  await row.waitFor({ state: "detached" });

  await page.goto(`${BASE_URL}/operations/${submitted.operationId}`);
  await page.locator('#next[data-next="REAPPLY"]').waitFor();
  assert.match(await page.locator("#next").innerText(), /An operator stopped it/);

  // A second try is refused (409), and audited with the refusal's message.
  const again = await fetch(`${BASE_URL}/admin/v1/operations/${submitted.operationId}/fail`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Auth-Request-User": "admin" },
    body: JSON.stringify({ reason: "e2e: once more" }),
  });
  assert.equal(again.status, 409);
  const { message: refusal } = await again.json();

  await page.goto(`${BASE_URL}/ops/audit`);
  const entries = page.locator("#audit tbody tr").filter({ hasText: submitted.operationId });
  const refused = entries.and(page.locator('[data-outcome="REFUSED"]'));
  await refused.waitFor();
  assert.equal(await refused.locator("td.actor").innerText(), "admin");
  assert.equal(await refused.locator("td.action").innerText(), "operation.force_fail");
  assert.match(await refused.locator("td.outcome").innerText(), /refused/);
  assert.equal(await refused.locator("td.outcome .refusal").innerText(), refusal);
  assert.deepEqual(await refused.locator(".params dt").allInnerTexts(), ["reason"]);
  assert.deepEqual(await refused.locator(".params dd").allInnerTexts(), ["e2e: once more"]);
  // The one that happened: its parameters as a key/value list.
  const done = entries.and(page.locator('[data-outcome="DONE"]'));
  assert.equal(await done.count(), 1);
  assert.match(await done.locator("td.outcome").innerText(), /done/);
  assert.deepEqual(await done.locator(".params dt").allInnerTexts(), ["reason"]);
  assert.deepEqual(await done.locator(".params dd").allInnerTexts(), ["e2e: the approver left"]);
  // No internal key and no raw JSON anywhere in the log.
  const log = await page.locator("#audit").innerText();
  assert.equal(log.includes("__"), false, "no reserved key is shown");
  assert.equal(log.includes("{\""), false, "no raw JSON is shown");
  await screenshot(page, "admin-6-audit");
});

test("the console's first page shows requests by status, the longest waiting, and the day's outcomes", async () => {
  // The page shows what the server answered it (requests of earlier tests
  // may still move: the answer the page read is the one to compare with).
  const page = await pageAs(browser, "admin");
  const answered = page.waitForResponse((response) => response.url().endsWith("/admin/v1/overview"));
  await page.click('nav a[href="/ops"]');
  const overview = await (await answered).json();
  const statuses = page.locator("#overview-statuses tbody tr");
  await statuses.first().waitFor();
  const shown = await statuses.evaluateAll((rows) =>
    rows.map((row) => [row.dataset.status, Number(row.querySelector("a.count").textContent)]));
  assert.deepEqual(shown, overview.statuses.map(({ status, requests }) => [status, requests]));
  // The earlier tests left a request retried to VALIDATED and one
  // force-failed, ABANDONED.
  const count = (status) => shown.find(([s]) => s === status)?.[1] ?? 0;
  assert.ok(count("VALIDATED") >= 1 && count("ABANDONED") >= 1, JSON.stringify(shown));
  for (const { status, operationId } of overview.oldest) {
    const link = page.locator(`#overview-statuses tr[data-status="${status}"] td.oldest a`);
    assert.equal(await link.getAttribute("href"), `/operations/${operationId}`);
  }

  // The chart's bars add up to the day's outcomes, grouped.
  const bars = await page.locator("#outcome-chart rect").evaluateAll((rects) =>
    rects.map((rect) => [rect.dataset.outcome, Number(rect.dataset.requests)]));
  const sum = (outcome) => bars.filter(([o]) => o === outcome).reduce((total, [, n]) => total + n, 0);
  const served = (statuses) => overview.outcomes
    .filter(({ status }) => statuses.includes(status))
    .reduce((total, { requests }) => total + requests, 0);
  assert.equal(sum("done"), served(["VALIDATED", "CLOSED"]));
  assert.equal(sum("failed"), served(["CREATE_FAILED", "HANDLE_FAILED", "CLOSE_FAILED", "ABANDONED"]));
  assert.ok(sum("done") >= 1 && sum("failed") >= 1, JSON.stringify(bars));
  await screenshot(page, "admin-0-overview");

  // A count opens the list filtered by its status, without the overview.
  await page.locator('#overview-statuses tr[data-status="ABANDONED"] a.count').click();
  await page.waitForURL(/\/ops\?status=ABANDONED$/);
  await page.locator("#operations tbody tr").first().waitFor();
  assert.equal(await page.locator("#overview").count(), 0);
});

test("an operator reads the effective configuration as a table, secrets redacted", async () => {
  const page = await pageAs(browser, "admin");
  await page.click('nav a[href="/ops"]');
  await page.click("#tab-config");
  const row = (key) => page.locator(`#config tr[data-key="${key}"]`);
  await row("web.demo_identity").waitFor();
  const cells = (key) => row(key).locator("td").allInnerTexts();
  assert.deepEqual(await cells("web.demo_identity"), ["web.demo_identity", "true", "dynamic"]);
  assert.deepEqual(await cells("gitlab.bot_token"), ["gitlab.bot_token", "[redacted]", "dynamic"]);
  assert.deepEqual(await cells("server.listen"), ["server.listen", "127.0.0.1:8080", "static"]);
  assert.equal((await cells("batch.max_split_depth"))[2], "static");
  // One row per key the server answered, none left out; its list of what
  // only a restart changes marks the rows, and is not a row itself.
  const { staticKeys, ...config } = await (await page.request.get(`${BASE_URL}/admin/v1/config`, { headers: { "X-Auth-Request-User": "admin" } })).json();
  assert.ok(staticKeys.includes("batch.max_split_depth") && staticKeys.includes("server"), String(staticKeys));
  assert.equal(await row("staticKeys").count(), 0);
  const leaves = (value) => value !== null && typeof value === "object" && !Array.isArray(value)
    ? Math.max(1, Object.values(value).reduce((n, inner) => n + leaves(inner), 0))
    : 1;
  assert.equal(await page.locator("#config tbody tr").count(), leaves(config));
  await screenshot(page, "admin-6-config");
});

test("a requester is told the console is for operators", async () => {
  const page = await pageAs(browser, "alice");
  await page.goto(`${BASE_URL}/ops`);
  await page.locator("#console-error").filter({ hasText: "Only operators" }).waitFor();
});
