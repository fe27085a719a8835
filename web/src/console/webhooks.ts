// Outbound webhooks: the endpoints, each with its event types, whether it is
// enabled and its circuit breaker; an operator registers one (its secret is
// shown once), enables or disables it, rotates its secret (the new one shown
// once) or deletes it. One endpoint is `?endpoint=ID`: its delivery log,
// newest first, each delivery naming the binding change it carries (subject,
// target, from → to, the operation), where a finished delivery is sent again
// by hand. After each action the list and the log are read again at once,
// while the dialog still shows the answer (a secret among it).

import { call, get, query } from "../api";
import { confirmAction } from "../confirm";
import { age, h, replace, when } from "../dom";
import { navigate } from "../nav";
import { badge } from "../status";
import type { CreatedEndpoint, Page, RotatedSecret, WebhookDelivery, WebhookEndpoint } from "../types";
import { adminError } from "./common";

const TAB = "/ops/webhooks";
/** Deliveries in these states can be sent again; queued and sending ones are on their way. */
const FINISHED = ["delivered", "failed", "silent"];

export function webhooksTab(root: HTMLElement): void {
  const id = new URLSearchParams(location.search).get("endpoint");
  return id ? endpointView(root, id) : endpointList(root);
}

function endpointLink(id: number): HTMLAnchorElement {
  return h("a", { href: `${TAB}?endpoint=${id}`, "data-endpoint-link": id }, `#${id}`);
}

function enabledBadge(endpoint: WebhookEndpoint): HTMLElement {
  return endpoint.enabled
    ? h("span", { class: "badge ok" }, "enabled")
    : h("span", { class: "badge ended", title: endpoint.disabledReason || null }, "disabled");
}

/** The breaker: closed sends, open waits, half-open sends one probe. */
function breakerBadge(breaker: string): HTMLElement {
  const tone = breaker === "closed" ? "ok" : breaker === "open" ? "failed" : "busy";
  return h("span", { class: `badge ${tone}` }, breaker.replace("_", "-"));
}

function deliveryBadge(status: string): HTMLElement {
  const tone = status === "delivered" ? "ok" : status === "failed" ? "failed" : status === "silent" ? "ended" : "busy";
  return h("span", { class: `badge ${tone}` }, status);
}

/** The binding's flip an event reports: `from → to`, or `new → to` for a new binding. */
function statusChange(delivery: WebhookDelivery): (HTMLElement | string)[] {
  if (!delivery.toStatus) return [];
  return [delivery.fromStatus ? badge(delivery.fromStatus) : h("span", { class: "hint" }, "new"), " → ", badge(delivery.toStatus)];
}

function eventTypes(types: string[]): string {
  return types.length ? types.join(", ") : "every event";
}

/**
 * A secret the API shows only once, kept on the page until the operator
 * leaves it. `into` is emptied first: only the latest secret is shown.
 */
function showSecret(into: HTMLElement, label: string, secret: string, extra?: string): void {
  replace(
    into,
    h("div", { class: "secret", id: "webhook-secret", role: "alert" },
      h("p", {}, h("strong", {}, label)),
      h("p", {}, h("code", { id: "webhook-secret-value" }, secret)),
      h("p", { class: "hint" }, "Copy it now into the receiver's configuration: changegate will not show it again.",
        extra ? ` ${extra}` : null)),
  );
}

function toggleAction(endpoint: WebhookEndpoint, changed: () => void): void {
  const enable = !endpoint.enabled;
  confirmAction({
    title: `${enable ? "Enable" : "Disable"} endpoint #${endpoint.id}`,
    text: enable
      ? `Send events to ${endpoint.url} again; its waiting deliveries go out and its circuit breaker closes.`
      : `Stop sending to ${endpoint.url}. Its queued deliveries wait until it is enabled again; events that happen meanwhile are not delivered to it.`,
    confirmLabel: enable ? "Enable" : "Disable",
    reasonRequired: false,
    noReason: true,
    act: async () => {
      const changed = await call<WebhookEndpoint>("PATCH", `/admin/v1/webhook-endpoints/${endpoint.id}`, { enabled: enable });
      return `OK: endpoint #${changed.id} is now ${changed.enabled ? "enabled" : "disabled"}.`;
    },
    done: changed,
  });
}

function rotateAction(endpoint: WebhookEndpoint, secretBox: HTMLElement, changed: () => void): void {
  confirmAction({
    title: `Rotate the secret of endpoint #${endpoint.id}`,
    text: "A new secret signs every delivery from now on; the old one also signs them for a grace period, so the receiver can switch over. The new secret is shown once.",
    confirmLabel: "Rotate",
    reasonRequired: false,
    act: async (reason) => {
      const answer = await call<RotatedSecret>("POST", `/admin/v1/webhook-endpoints/${endpoint.id}/rotate`, reason ? { reason } : {});
      const grace = answer.previousSecretValidUntil ? `The old secret also signs until ${when(answer.previousSecretValidUntil)}.` : undefined;
      showSecret(secretBox, `New secret of endpoint #${answer.id}`, answer.secret, grace);
      return `OK: endpoint #${answer.id} has a new secret, shown on the page (only this once): ${answer.secret}`;
    },
    done: changed,
  });
}

function deleteAction(endpoint: WebhookEndpoint, changed: () => void): void {
  confirmAction({
    title: `Delete endpoint #${endpoint.id}`,
    text: `Stop sending to ${endpoint.url} for good and delete its delivery log. This cannot be undone.`,
    confirmLabel: "Delete",
    reasonRequired: false,
    noReason: true,
    act: async () => {
      await call<null>("DELETE", `/admin/v1/webhook-endpoints/${endpoint.id}`);
      return `OK: endpoint #${endpoint.id} is deleted.`;
    },
    done: changed,
  });
}

function endpointActions(endpoint: WebhookEndpoint, secretBox: HTMLElement, changed: () => void, deleted: () => void): HTMLElement {
  return h("div", { class: "actions" },
    h("button", { type: "button", "data-action": endpoint.enabled ? "disable" : "enable", onclick: () => toggleAction(endpoint, changed) },
      endpoint.enabled ? "Disable" : "Enable"),
    h("button", { type: "button", "data-action": "rotate", onclick: () => rotateAction(endpoint, secretBox, changed) }, "Rotate secret"),
    h("button", { type: "button", "data-action": "delete", onclick: () => deleteAction(endpoint, deleted) }, "Delete"));
}

function endpointList(root: HTMLElement): void {
  const rows = h("tbody", {});
  const message = h("div", { "aria-live": "polite" });
  const secretBox = h("div", { id: "webhook-secret-box" });
  const url = h("input", { id: "webhook-url", name: "url", type: "url", required: true, placeholder: "https://receiver.example/hooks", size: 40 });
  const types = h("input", { id: "webhook-event-types", name: "eventTypes", placeholder: "binding.status_changed (empty: every event)", size: 30 });
  const description = h("input", { id: "webhook-description", name: "description", maxlength: 500, size: 25 });
  const form = h("form", { class: "filters", id: "webhook-create", onsubmit: (event: Event) => {
    event.preventDefault();
    createAction();
  } },
  h("label", { for: "webhook-url" }, "URL"), url,
  h("label", { for: "webhook-event-types" }, "Event types"), types,
  h("label", { for: "webhook-description" }, "Description"), description,
  h("button", { type: "submit", id: "webhook-create-submit" }, "Add endpoint"));

  function createAction(): void {
    const body = {
      url: url.value.trim(),
      eventTypes: types.value.split(",").map((t) => t.trim()).filter(Boolean),
      description: description.value.trim(),
    };
    confirmAction({
      title: "Add a webhook endpoint",
      text: `Sign and send ${eventTypes(body.eventTypes)} to ${body.url} from now on. Its secret is shown once, in the answer.`,
      confirmLabel: "Add",
      reasonRequired: false,
      noReason: true,
      act: async () => {
        const created = await call<CreatedEndpoint>("POST", "/admin/v1/webhook-endpoints", body);
        showSecret(secretBox, `Secret of endpoint #${created.id} (${created.url})`, created.secret);
        form.reset();
        return `OK: endpoint #${created.id} is added. Its secret, shown on the page only this once: ${created.secret}`;
      },
      done: reload,
    });
  }

  replace(
    root,
    h("p", { class: "hint" }, "changegate signs each event (Standard Webhooks) and POSTs it to every enabled endpoint that wants its type, retrying failures; receivers dedupe on webhook-id."),
    form,
    secretBox,
    h("table", { class: "list", id: "webhook-endpoints" },
      h("thead", {}, h("tr", {}, ["Endpoint", "URL", "Event types", "State", "Breaker", "Updated", "Actions"].map((c) => h("th", {}, c)))),
      rows),
    message,
  );

  // Reads may overlap (an action's reload while the first read is under
  // way): only the latest one's answer is shown.
  let reads = 0;

  async function load(): Promise<void> {
    const read = ++reads;
    try {
      const page = await get<{ items: WebhookEndpoint[] }>("/admin/v1/webhook-endpoints");
      if (read !== reads) return;
      rows.replaceChildren(...page.items.map(row));
      replace(message, rows.children.length ? null : h("p", { class: "hint" }, "No webhook endpoints yet."));
    } catch (error) {
      if (read === reads) replace(message, adminError(error));
    }
  }

  function reload(): void {
    void load();
  }

  function row(endpoint: WebhookEndpoint): HTMLTableRowElement {
    return h(
      "tr",
      { "data-endpoint": endpoint.id, "data-enabled": String(endpoint.enabled) },
      h("td", {}, endpointLink(endpoint.id)),
      h("td", { class: "message" }, h("code", {}, endpoint.url), endpoint.description ? h("div", { class: "hint" }, endpoint.description) : null),
      h("td", {}, eventTypes(endpoint.eventTypes)),
      h("td", {}, enabledBadge(endpoint)),
      h("td", {}, breakerBadge(endpoint.breaker)),
      h("td", { title: when(endpoint.updatedAt) }, age(endpoint.updatedAt)),
      h("td", {}, h("a", { href: `${TAB}?endpoint=${endpoint.id}`, "data-action": "deliveries" }, "Deliveries"),
        endpointActions(endpoint, secretBox, reload, reload)),
    );
  }

  void load();
}

function endpointView(root: HTMLElement, id: string): void {
  const facts = h("div", { id: "webhook-endpoint" }, h("p", { class: "hint" }, "Loading…"));
  const secretBox = h("div", { id: "webhook-secret-box" });
  const rows = h("tbody", {});
  const more = h("button", { type: "button", id: "deliveries-more", hidden: true }, "Load more");
  const message = h("div", { "aria-live": "polite" });
  const refresh = h("button", { type: "button", id: "deliveries-refresh" }, "Refresh");
  let cursor: string | null = null;

  replace(
    root,
    h("p", {}, h("a", { href: TAB, id: "webhooks-back" }, "← All endpoints")),
    facts,
    secretBox,
    h("div", { class: "toolbar" }, h("h2", {}, "Deliveries"), refresh),
    h("table", { class: "list", id: "webhook-deliveries" },
      h("thead", {}, h("tr", {}, ["Delivery", "Event", "Subject", "Target", "Change", "Operation", "Status", "Attempts", "Last answer", "Next attempt", "Updated", "Actions"].map((c) => h("th", {}, c)))),
      rows),
    message,
    more,
  );
  more.addEventListener("click", () => void loadDeliveries(reads));
  refresh.addEventListener("click", () => reload());

  // Reads may overlap (an action's reload while a read is under way): only
  // the answers of the latest reload are shown.
  let reads = 0;

  async function loadEndpoint(read: number): Promise<void> {
    // The list is the only read of an endpoint.
    try {
      const page = await get<{ items: WebhookEndpoint[] }>("/admin/v1/webhook-endpoints");
      if (read !== reads) return;
      const endpoint = page.items.find((e) => String(e.id) === id);
      if (!endpoint) {
        replace(facts, h("p", { class: "error", id: "console-error" }, `No webhook endpoint #${id}.`));
        return;
      }
      replace(
        facts,
        h("h2", {}, `Endpoint #${endpoint.id} `, enabledBadge(endpoint)),
        h("dl", { class: "facts" },
          h("dt", {}, "URL"), h("dd", { id: "endpoint-url" }, h("code", {}, endpoint.url)),
          endpoint.description ? [h("dt", {}, "Description"), h("dd", {}, endpoint.description)] : null,
          h("dt", {}, "Event types"), h("dd", {}, eventTypes(endpoint.eventTypes)),
          h("dt", {}, "State"), h("dd", { id: "endpoint-state" }, enabledBadge(endpoint),
            endpoint.disabledReason ? ` ${endpoint.disabledReason}` : null),
          h("dt", {}, "Breaker"), h("dd", { id: "endpoint-breaker" }, breakerBadge(endpoint.breaker)),
          h("dt", {}, "Created"), h("dd", {}, when(endpoint.createdAt)),
          h("dt", {}, "Updated"), h("dd", {}, when(endpoint.updatedAt)),
        ),
        // Deleted, it has no page any more: the list shows it gone.
        endpointActions(endpoint, secretBox, reload, () => navigate(TAB)),
      );
    } catch (error) {
      if (read === reads) replace(facts, adminError(error));
    }
  }

  /** The next page of the log for reload `read`; its first page replaces the rows. */
  async function loadDeliveries(read: number): Promise<void> {
    const first = cursor === null;
    more.disabled = true;
    try {
      const page = await get<Page<WebhookDelivery>>(
        `/admin/v1/webhook-endpoints/${encodeURIComponent(id)}/deliveries${query({ cursor, limit: 50 })}`);
      if (read !== reads) return;
      if (first) rows.replaceChildren();
      rows.append(...page.items.map(row));
      cursor = page.nextCursor ?? null;
      more.hidden = !cursor;
      replace(message, rows.children.length ? null : h("p", { class: "hint" }, "Nothing delivered yet."));
    } catch (error) {
      if (read === reads) replace(message, adminError(error));
    } finally {
      more.disabled = false;
    }
  }

  function reload(): void {
    const read = ++reads;
    cursor = null;
    void loadEndpoint(read);
    void loadDeliveries(read);
  }

  function redeliverAction(delivery: WebhookDelivery): void {
    confirmAction({
      title: `Redeliver delivery #${delivery.id}`,
      text: `Send ${delivery.eventType}${delivery.subjectId ? ` of ${delivery.subjectId} → ${delivery.targetKey}` : ""} (${delivery.webhookId}) again, with the same webhook-id and body and a fresh retry schedule.`,
      confirmLabel: "Redeliver",
      reasonRequired: false,
      act: async (reason) => {
        const answer = await call<{ code: string }>("POST", `/admin/v1/webhook-deliveries/${delivery.id}/redeliver`, reason ? { reason } : {});
        return `${answer.code}: delivery #${delivery.id} is queued to be sent again.`;
      },
      done: reload,
    });
  }

  function row(delivery: WebhookDelivery): HTMLTableRowElement {
    const last = [delivery.lastStatus ? `HTTP ${delivery.lastStatus}` : null, delivery.lastError].filter(Boolean).join(": ");
    return h(
      "tr",
      { "data-delivery": delivery.id, "data-status": delivery.status },
      h("td", { title: delivery.webhookId }, `#${delivery.id}`),
      h("td", {}, delivery.eventType),
      h("td", { class: "subject" }, delivery.subjectId ?? ""),
      h("td", { class: "target" }, delivery.targetKey ? h("code", {}, delivery.targetKey) : ""),
      h("td", { class: "change" }, statusChange(delivery)),
      h("td", { class: "operation" }, delivery.operationId
        ? h("a", { href: `/operations/${encodeURIComponent(delivery.operationId)}`, "data-operation-link": delivery.operationId, title: delivery.operationId },
          delivery.operationId.slice(0, 8))
        : ""),
      h("td", {}, deliveryBadge(delivery.status)),
      h("td", { class: "attempts" }, delivery.attempts),
      h("td", { class: "message" }, last),
      h("td", {}, delivery.status === "queued" ? when(delivery.nextAttemptAt) : ""),
      h("td", { title: when(delivery.updatedAt) }, age(delivery.updatedAt)),
      h("td", {}, FINISHED.includes(delivery.status)
        ? h("button", { type: "button", "data-action": "redeliver", onclick: () => redeliverAction(delivery) }, "Redeliver")
        : null),
    );
  }

  reload();
}
