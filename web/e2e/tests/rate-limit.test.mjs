// Over the apply limit, the form says so under itself and stays usable.
// Runs as `admin`, whom no later test needs within the minute the limit lasts.

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

test("a rate-limited submission shows the 429 message and leaves the form usable", async () => {
  // Every apply request counts, before its body is read: use up the allowance.
  let status = 0;
  for (let i = 0; i < 30 && status !== 429; i++) {
    const response = await fetch(`${BASE_URL}/api/v1/applications`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Auth-Request-User": "admin" },
      body: "{}",
    });
    status = response.status;
  }
  assert.equal(status, 429, "the apply limit was reached");

  const page = await pageAs(browser, "admin");
  await page.locator("#target").selectOption("demo.feature-flags");
  await page.fill("#reason", "e2e: one too many");
  await page.click("#submit");
  const error = page.locator("#submit-error.rate-limited");
  await error.waitFor();
  assert.match(await error.innerText(), /too many applications; wait a minute/);
  assert.equal(await page.locator("#submit").isEnabled(), true);
  assert.equal(new URL(page.url()).pathname, "/");
  await screenshot(page, "rate-limited");
});
