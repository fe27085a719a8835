// The ops console's Drift tab: a file added to the target branch by hand
// shows up as UNEXPECTED with the commit that added it, its diff on
// demand, and an operator ignores it with a reason.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, GITLAB_SIM_URL, launch, pageAs, screenshot } from "../lib.mjs";

const PROJECT = encodeURIComponent("config/repo");

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

async function control(method, path, body) {
  const response = await fetch(`${GITLAB_SIM_URL}/_sim${path}`, {
    method,
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${await response.clone().text()}`);
  return response.status === 204 ? null : response.json();
}

test("the Drift tab lists a file added by hand, shows its diff, and an operator ignores it", async () => {
  // Someone on the platform team pushes a file changegate did not write.
  const { id } = await control("POST", "/users", { username: "platform-hand", token: "platform-hand-token" });
  await control("PUT", `/projects/${PROJECT}/members/${id}`, { access_level: "developer" });
  const path = `bindings/demo.feature-flags/by-hand-${Date.now()}.json`;
  await control("POST", `/projects/${PROJECT}/pushes`, {
    user_id: id,
    branch: "main",
    changes: [{ path, content: '{"edited": "by hand"}\n' }],
  });

  const page = await pageAs(browser, "admin");
  await page.goto(`${BASE_URL}/ops/drift`);
  const row = page.locator(`#drift tr[data-path="${path}"]`);
  // The demo's drift job runs every few seconds: read the tab again until it reports it.
  const deadline = Date.now() + 60_000;
  while (!(await row.count())) {
    assert.ok(Date.now() < deadline, "the file was never reported");
    await page.waitForTimeout(1000);
    await page.reload();
    await page.locator("#drift").waitFor();
  }
  assert.equal(await row.getAttribute("data-kind"), "UNEXPECTED");
  assert.match(await row.locator(".last-commit").innerText(), /External push/);

  await row.locator('button[data-action="diff"]').click();
  await page.locator("#drift-diff .d2h-ins", { hasText: '"edited": "by hand"' }).first().waitFor();
  await screenshot(page, "drift-1-diff");

  await row.locator('button[data-action="ignore"]').click();
  await page.fill("#confirm-reason", "e2e: the platform team's own file");
  await page.click("#confirm-ok");
  await page.locator("#confirm-result", { hasText: "Ignored." }).waitFor();
  await page.click("#confirm-cancel");
  await row.waitFor({ state: "detached" });
  await screenshot(page, "drift-2-ignored");
});
