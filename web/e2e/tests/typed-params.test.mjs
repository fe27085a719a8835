// The apply form is generated from the target's parameter schema: defaults
// filled in, values checked as they are typed without asking the server,
// the server's own field errors shown beside the fields, values sent typed.

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

test("the demo.pools form checks typed parameters as they are typed and sends them typed", async () => {
  const page = await pageAs(browser, "alice");
  const sent = [];
  page.on("request", (request) => {
    if (request.method() === "POST" && new URL(request.url()).pathname === "/api/v1/applications") {
      sent.push(request);
    }
  });
  const slot = (name) => page.locator(`.field-error[data-field="params.${name}"]`);

  // The fields come from the schema, with its defaults.
  await page.locator("#target").selectOption("demo.pools");
  const connections = page.locator("#param-max_connections");
  await connections.waitFor();
  assert.equal(await connections.getAttribute("type"), "number");
  assert.equal(await connections.getAttribute("data-param"), "max_connections");
  assert.equal(await connections.inputValue(), "20");
  assert.equal(await page.locator("#param-mode").inputValue(), "read");
  assert.equal(await page.locator("#param-tls").isChecked(), true);
  assert.match(await page.locator('label[for="param-max_connections"]').innerText(), /\*/, "marked required");
  assert.match(await page.locator("#params").innerText(), /The most connections the pool opens at once/);

  // Out of range: said at once, beside the field, without a request.
  await connections.fill("501");
  await slot("max_connections").filter({ hasText: "must be at most 500" }).waitFor();
  assert.equal(sent.length, 0);

  // Submitting anyway sends nothing and puts the cursor in the field.
  await page.fill("#reason", "e2e: a bigger pool");
  await page.click("#submit");
  assert.equal(await page.evaluate(() => document.activeElement?.id), "param-max_connections");
  assert.equal(await slot("max_connections").innerText(), "must be at most 500");
  assert.equal(sent.length, 0, "no request while a field is invalid");
  await screenshot(page, "typed-params-1-out-of-range");

  // An optional field is checked when filled in, and fine when empty.
  const email = page.locator("#param-owner_email");
  await email.fill("abc");
  await slot("owner_email").filter({ hasText: "must match the pattern" }).waitFor();
  await email.fill("");
  assert.equal(await slot("owner_email").textContent(), "");

  // What the server refuses lands beside each field it names: here the
  // request is changed on its way so that the server sees bad values.
  await connections.fill("50");
  assert.equal(await slot("max_connections").textContent(), "");
  await page.route("**/api/v1/applications", (route) => {
    const body = route.request().postDataJSON();
    body.params = { ...body.params, max_connections: 501, mode: "write" };
    return route.continue({ postData: JSON.stringify(body) });
  });
  await page.click("#submit");
  await slot("mode").filter({ hasText: /\S/ }).waitFor();
  assert.match(await slot("max_connections").innerText(), /must be at most 500/);
  assert.match(await slot("mode").innerText(), /read, read-write/);
  assert.equal(await page.locator("#submit").isEnabled(), true);
  await screenshot(page, "typed-params-2-server-field-errors");
  await page.unroute("**/api/v1/applications");
  assert.equal(sent.length, 1);

  // Valid values go as JSON numbers and booleans; the empty optional field is left out.
  await page.locator("#param-mode").selectOption("read-write");
  await page.click("#submit");
  await page.waitForURL(/\/operations\/[0-9a-f-]{36}$/);
  assert.equal(sent.length, 2);
  assert.deepEqual(sent[1].postDataJSON().params, { max_connections: 50, mode: "read-write", tls: true });

  // The operation page loads for the new request.
  await page.locator("#status .badge").waitFor();
  assert.equal(await page.locator(".facts dd").first().innerText(), "demo.pools");
  await screenshot(page, "typed-params-3-operation");
});
