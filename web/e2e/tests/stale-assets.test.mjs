// A page from an older deploy names a script this build no longer has. The
// page reloads once to get the current one; if that fails too, it offers a
// refresh button instead of reloading in a loop.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BASE_URL, launch, screenshot } from "../lib.mjs";

const DELETED = "/assets/app-D3l3t3d0.js";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/**
 * A page whose first `stale` document loads name a deleted script instead of
 * the built one; the server itself answers every request. Counts the loads.
 */
async function pageWithStaleDocuments(stale) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const documents = [];
  await page.route("**/*", async (route) => {
    const request = route.request();
    if (request.resourceType() !== "document") return route.continue();
    documents.push(request.url());
    const response = await route.fetch();
    let body = await response.text();
    if (documents.length <= stale) {
      body = body.replace(/\/assets\/app-[^"]+\.js/, DELETED);
    }
    return route.fulfill({ response, body });
  });
  const deletedAnswers = [];
  page.on("response", (response) => {
    if (new URL(response.url()).pathname === DELETED) deletedAnswers.push(response.status());
  });
  return { page, documents, deletedAnswers };
}

test("one stale load reloads once with a cache-busting parameter and recovers", async () => {
  const { page, documents, deletedAnswers } = await pageWithStaleDocuments(1);
  await page.goto(`${BASE_URL}/bindings`);
  await page.locator("#bindings").waitFor();
  assert.equal(documents.length, 2);
  assert.match(documents[1], /[?&]_reload=\d+/);
  // The missing script was a 404, not a 500 and not the page.
  assert.deepEqual(deletedAnswers, [404]);
  // The app drops the parameter once it runs.
  assert.equal(new URL(page.url()).search, "");
  assert.equal(await page.locator("#asset-error").count(), 0);
  await page.context().close();
});

test("a second failure within 30 s shows a refresh button instead of looping", async () => {
  const { page, documents } = await pageWithStaleDocuments(Infinity);
  await page.goto(`${BASE_URL}/`);
  const box = page.locator("#asset-error");
  await box.waitFor();
  const refresh = box.getByRole("button", { name: "Refresh" });
  assert.equal(await refresh.count(), 1);
  // No further reloads on its own.
  await page.waitForTimeout(3000);
  assert.equal(documents.length, 2);
  await screenshot(page, "stale-assets-refresh-button");

  // The button tries again by hand; a failure shows the button again.
  await refresh.click();
  await page.waitForURL(/_reload=/);
  await box.waitFor();
  await page.waitForTimeout(2000);
  assert.equal(documents.length, 3);
  await page.context().close();
});
