// The ops console's webhooks: an operator adds an endpoint pointing at a
// receiver on loopback (the demo allows private targets), copies its secret,
// shown once, sees a requester's request delivered, signed with it, in the
// endpoint's delivery log (which names the request's subject, target, status
// change and operation), sends it again by hand, rotates the secret, then
// disables and deletes the endpoint. Each action shows on the page at once,
// while its dialog is still open.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import { BASE_URL, eventually, launch, pageAs, screenshot } from "../lib.mjs";

/** A requester the other tests do not use. */
const REQUESTER = "dave";

/** Every request the receiver got: headers and raw body. */
const received = [];
let receiver;
let browser;

before(async () => {
  receiver = createServer((request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", () => {
      received.push({ headers: request.headers, body: Buffer.concat(chunks).toString("utf8") });
      response.writeHead(204).end();
    });
  });
  await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve()));
});

/**
 * Marks what `locator` matches now, so that a wait for it without the mark
 * sees only what the page rendered after.
 */
async function markStale(locator) {
  await locator.evaluateAll((elements) => elements.forEach((element) => element.setAttribute("data-stale", "")));
}

/** Standard Webhooks: base64 HMAC-SHA256 of "id.timestamp.body" with the secret's key. */
function signs(secret, delivery) {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signatures } = delivery.headers;
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${delivery.body}`).digest("base64");
  return signatures.split(" ").includes(`v1,${expected}`);
}

test("an operator adds a webhook endpoint, sees its secret once and its deliveries, redelivers, rotates, disables and deletes it", async () => {
  const url = `http://127.0.0.1:${receiver.address().port}/hooks`;
  const page = await pageAs(browser, "admin");
  await page.goto(`${BASE_URL}/ops`);
  await page.click("#tab-webhooks");
  await page.waitForURL(/\/ops\/webhooks$/);

  // Adding one is confirmed; the answer, and the page, show its secret.
  await page.fill("#webhook-url", url);
  await page.fill("#webhook-event-types", "binding.status_changed");
  await page.fill("#webhook-description", "e2e receiver");
  await page.click("#webhook-create-submit");
  await page.click("#confirm-ok");
  const result = page.locator("#confirm-result.success");
  await result.waitFor();
  const answer = await result.innerText();
  const [, endpointId, secret] = /^OK: endpoint #(\d+) is added\. .*: (whsec_\S+)$/.exec(answer) ?? [];
  assert.ok(secret, `no secret in: ${answer}`);
  // The list shows it at once, behind the dialog that is still open.
  const row = page.locator(`#webhook-endpoints tr[data-endpoint="${endpointId}"]`);
  await row.waitFor();
  assert.equal(await page.locator("#confirm").count(), 1, "the dialog is still open");
  assert.equal(await page.getByText("No webhook endpoints yet.").count(), 0);
  await screenshot(page, "webhooks-1-created");
  await page.click("#confirm-cancel");
  assert.equal(await page.locator("#webhook-secret-value").innerText(), secret);
  await page.locator("#webhook-secret").getByText("will not show it again").waitFor();
  assert.equal(await row.getAttribute("data-enabled"), "true");
  assert.equal(await row.locator("code").innerText(), url);
  // The list never shows a secret again.
  await page.reload();
  await row.waitFor();
  assert.equal(await page.locator("#webhook-secret").count(), 0);
  assert.equal((await page.locator("#console-panel").innerText()).includes(secret), false);
  await screenshot(page, "webhooks-2-list");

  // A requester applies: their binding's status changes reach the receiver, signed.
  const response = await fetch(`${BASE_URL}/api/v1/applications`, {
    method: "POST",
    headers: { "X-Auth-Request-User": REQUESTER, "Content-Type": "application/json" },
    body: JSON.stringify({ targetKey: "demo.feature-flags", reason: "e2e: heard by a webhook" }),
  });
  assert.equal(response.ok, true, `apply: ${response.status}`);
  const { operationId } = await response.json();
  const ours = () => received.filter((d) => JSON.parse(d.body).data?.operationId === operationId);
  const first = await eventually("a delivery to the receiver", () => ours()[0]);
  assert.equal(JSON.parse(first.body).type, "binding.status_changed");
  assert.ok(signs(secret, first), "the delivery is signed with the secret shown");

  // The endpoint's delivery log shows it delivered.
  await row.locator('a[data-action="deliveries"]').click();
  await page.waitForURL(new RegExp(`/ops/webhooks\\?endpoint=${endpointId}$`));
  const delivered = page.locator('#webhook-deliveries tr[data-status="delivered"]')
    .filter({ has: page.locator(`td[title="${first.headers["webhook-id"]}"]`) });
  await eventually("the delivery in the log", async () => {
    await page.click("#deliveries-refresh");
    await page.locator("#webhook-deliveries tbody tr").or(page.getByText("Nothing delivered yet.")).first().waitFor();
    return (await delivered.count()) === 1;
  });
  assert.equal(Number(await delivered.locator("td.attempts").innerText()) >= 1, true);
  // It names what it tells: whose binding, which target, the status change
  // the body carries, and the request, linked.
  const sent = JSON.parse(first.body).data;
  assert.equal(await delivered.locator("td.subject").innerText(), REQUESTER);
  assert.equal(await delivered.locator("td.target").innerText(), "demo.feature-flags");
  assert.equal(await delivered.locator("td.change").innerText(),
    `${sent.fromStatus ?? "new"} → ${sent.toStatus}`);
  const link = delivered.locator("td.operation a");
  assert.equal(await link.getAttribute("href"), `/operations/${operationId}`);
  // Every delivery of the log says which request it is about.
  const unnamed = page.locator("#webhook-deliveries tbody tr").filter({ hasNot: page.locator("td.operation a") });
  assert.equal(await unnamed.count(), 0);
  await screenshot(page, "webhooks-3-deliveries");

  // Sent again by hand, with the same webhook-id; the log is read again at once.
  const deliveryId = await delivered.getAttribute("data-delivery");
  const thisDelivery = `#webhook-deliveries tr[data-delivery="${deliveryId}"]`;
  await markStale(page.locator(thisDelivery));
  await delivered.locator('button[data-action="redeliver"]').click();
  await page.fill("#confirm-reason", "e2e: send it again");
  await page.click("#confirm-ok");
  const redelivered = page.locator("#confirm-result.success");
  await redelivered.waitFor();
  assert.match(await redelivered.innerText(), /^OK: delivery #\d+ is queued to be sent again\.$/);
  await page.locator(`${thisDelivery}:not([data-stale])`).waitFor();
  assert.equal(await page.locator("#confirm").count(), 1, "the dialog is still open");
  await page.click("#confirm-cancel");
  await eventually("the redelivery", () =>
    received.filter((d) => d.headers["webhook-id"] === first.headers["webhook-id"]).length >= 2);

  // A rotated secret is shown once too, and differs.
  await markStale(page.locator("#webhook-endpoint h2"));
  await page.click('button[data-action="rotate"]');
  await page.click("#confirm-ok");
  const rotated = page.locator("#confirm-result.success");
  await rotated.waitFor();
  const newSecret = /(whsec_\S+)$/.exec(await rotated.innerText())?.[1];
  assert.ok(newSecret && newSecret !== secret, "a new secret is shown");
  await page.locator("#webhook-endpoint h2:not([data-stale])").waitFor();
  await page.click("#confirm-cancel");
  assert.equal(await page.locator("#webhook-secret-value").innerText(), newSecret);

  // Disabled, then deleted, each confirmed.
  await page.click('button[data-action="disable"]');
  await page.click("#confirm-ok");
  const disabled = page.locator("#confirm-result.success");
  await disabled.waitFor();
  assert.equal(await disabled.innerText(), `OK: endpoint #${endpointId} is now disabled.`);
  await page.locator("#endpoint-state").getByText("disabled").waitFor();
  await page.locator('button[data-action="enable"]').waitFor();
  assert.equal(await page.locator("#confirm").count(), 1, "the dialog is still open");
  await page.click("#confirm-cancel");
  await screenshot(page, "webhooks-4-disabled");

  await page.click('button[data-action="delete"]');
  await page.click("#confirm-ok");
  const deleted = page.locator("#confirm-result.success");
  await deleted.waitFor();
  assert.equal(await deleted.innerText(), `OK: endpoint #${endpointId} is deleted.`);
  // The list, without it, is behind the dialog at once.
  await page.waitForURL(/\/ops\/webhooks$/);
  await page.locator("#webhook-endpoints").waitFor();
  await page.locator("#webhook-endpoints tbody tr").or(page.getByText("No webhook endpoints yet.")).first().waitFor();
  assert.equal(await row.count(), 0);
  assert.equal(await page.locator("#confirm").count(), 1, "the dialog is still open");
  await page.click("#confirm-cancel");
});
