// Stuck and failed operations, filtered by status, step and age, with the
// operator's actions: re-run, force-fail, and local approve or reject.

import { call, get, query } from "../api";
import { confirmAction } from "../confirm";
import { age, clock, h, replace, when } from "../dom";
import { navigate } from "../nav";
import { STATUSES, STEPS, operationBadge } from "../status";
import type { ActionResult, Operation, OperatorAction, Page, QueuePlace } from "../types";
import { adminError } from "./common";
import { overviewPanel } from "./overview";

const AGES: [string, string][] = [
  ["", "any age"],
  ["60", "older than 1 minute"],
  ["300", "older than 5 minutes"],
  ["900", "older than 15 minutes"],
  ["3600", "older than 1 hour"],
  ["86400", "older than 1 day"],
];

/** Views an operator opens most: the failed, and the long idle. */
const QUICK_VIEWS: [string, Record<string, string>][] = [
  ["Create failed", { status: "CREATE_FAILED" }],
  ["Handle failed", { status: "HANDLE_FAILED" }],
  ["Close failed", { status: "CLOSE_FAILED" }],
  ["Merging for over 15 minutes", { status: "MERGING", olderThanSeconds: "900" }],
  ["Awaiting approval for over a day", { status: "APPROVAL_SENT", olderThanSeconds: "86400" }],
];

export function operationsTab(root: HTMLElement): void {
  const search = new URLSearchParams(location.search);
  const status = h("select", { id: "filter-status", name: "status" },
    h("option", { value: "" }, "any status"),
    // SUPERSEDED: what the list shows for requests a newer one took over.
    [...STATUSES, "SUPERSEDED"].map((s) => h("option", { value: s, selected: s === search.get("status") }, s)));
  const step = h("select", { id: "filter-step", name: "step" },
    h("option", { value: "" }, "any step"),
    STEPS.map(([code, name]) => h("option", { value: code, selected: String(code) === search.get("step") }, `${code} ${name}`)));
  const older = h("select", { id: "filter-age", name: "olderThanSeconds" },
    AGES.map(([value, label]) => h("option", { value, selected: value === (search.get("olderThanSeconds") ?? "") }, label)));
  const rows = h("tbody", {});
  const more = h("button", { type: "button", id: "ops-more", hidden: true }, "Load more");
  const message = h("div", { "aria-live": "polite" });
  let cursor: string | null = null;

  const filters = h("form", { class: "filters", id: "ops-filters", onsubmit: (event: Event) => {
    event.preventDefault();
    // Filters live in the address, so a view can be shared and reloaded.
    navigate(`/ops${query({ status: status.value, step: step.value, olderThanSeconds: older.value })}`);
  } }, status, step, older, h("button", { type: "submit" }, "Show"));

  // The first glance, on the console's first page: not over a filtered list.
  const filtered = ["status", "step", "olderThanSeconds"].some((key) => search.has(key));
  replace(
    root,
    filtered ? null : overviewPanel(),
    h("p", { class: "quick-views" }, "Quick views: ",
      QUICK_VIEWS.flatMap(([label, params], i) => [i ? " · " : "", h("a", { href: `/ops${query(params)}` }, label)])),
    filters,
    h("table", { class: "list", id: "operations" },
      h("thead", {}, h("tr", {}, ["Request", "Target", "Subject", "Status", "Step", "Idle", "Message", "Actions"].map((c) => h("th", {}, c)))),
      rows),
    message,
    more,
  );
  more.addEventListener("click", () => void load());

  async function load(): Promise<void> {
    more.disabled = true;
    try {
      const page = await get<Page<Operation>>(`/admin/v1/operations${query({
        status: search.get("status"),
        step: search.get("step"),
        olderThanSeconds: search.get("olderThanSeconds"),
        cursor,
        limit: 50,
      })}`);
      rows.append(...page.items.map(row));
      cursor = page.nextCursor ?? null;
      more.hidden = !cursor;
      replace(message, rows.children.length ? null : h("p", { class: "hint" }, "No operations match."));
    } catch (error) {
      replace(message, adminError(error));
    } finally {
      more.disabled = false;
    }
  }

  function reload(): void {
    rows.replaceChildren();
    cursor = null;
    void load();
  }

  function row(op: Operation): HTMLTableRowElement {
    // What the server says would succeed now is offered; what an operator
    // may look for but cannot succeed now (an outside approval system
    // decides, or nothing of changegate's waits to re-run) is shown
    // disabled, the server's reason on hover; the rest is left out.
    const allowed = new Set(op.actions ?? []);
    const withheld = new Map((op.withheldActions ?? []).map(({ action, reason }) => [action, reason]));
    const offers: [OperatorAction, string, () => void][] = [
      ["retry", "Retry", () => act({
        title: "Re-run the step",
        text: `Re-run ${op.step.name} for ${op.subjectId} → ${op.targetKey}. Every step is safe to run again.`,
        confirmLabel: "Retry",
        reasonRequired: false,
        path: `/admin/v1/operations/${op.operationId}/retry`,
      })],
      ["fail", "Force-fail", () => act({
        title: "Force-fail the request",
        text: `Mark the request of ${op.subjectId} → ${op.targetKey} as failed. It stops here; the requester is told.`,
        confirmLabel: "Force-fail",
        reasonRequired: true,
        path: `/admin/v1/operations/${op.operationId}/fail`,
      })],
      ...(["approve", "reject"] as const).map((verb): [OperatorAction, string, () => void] => {
        const label = verb === "approve" ? "Approve" : "Reject";
        return [verb, label, () => act({
          title: `${label} locally`,
          text: `${label} the request of ${op.subjectId} → ${op.targetKey} as the built-in approval system.`,
          confirmLabel: label,
          reasonRequired: false,
          path: `/admin/v1/approvals/${op.operationId}/${verb}`,
        })];
      }),
    ];
    const actions: HTMLElement[] = [];
    for (const [verb, label, onclick] of offers) {
      const reason = withheld.get(verb);
      if (allowed.has(verb)) {
        actions.push(button(label, verb, onclick));
      } else if (reason !== undefined) {
        actions.push(h("button", { type: "button", "data-action": verb, disabled: true, title: reason }, label));
      }
    }
    return h(
      "tr",
      { "data-operation": op.operationId },
      h("td", {}, h("a", { href: `/operations/${op.operationId}`, title: op.operationId }, op.operationId.slice(0, 8))),
      h("td", {}, op.targetKey),
      h("td", {}, op.subjectId),
      h("td", {}, operationBadge(op),
        op.urgent ? [" ", h("span", { class: "badge urgent", "data-urgent": "true", title: "in the merge queue's urgent lane" }, "URGENT")] : null,
        op.revertOf ? [" reverts ", h("a", { href: `/operations/${op.revertOf}`, class: "revert-of" }, op.revertOf.slice(0, 8))] : null,
        op.revertedBy ? [" reverted by ", h("a", { href: `/operations/${op.revertedBy}`, class: "reverted-by" }, op.revertedBy.slice(0, 8))] : null,
        op.supersededBy
          ? [" by ", h("a", { href: `/operations/${op.supersededBy}`, class: "superseded-by" }, op.supersededBy.slice(0, 8))]
          : null,
        op.queue ? queuePlace(op.queue) : null),
      h("td", {}, `${op.step.name} (${op.step.code})`),
      h("td", { title: when(op.updatedAt) }, age(op.updatedAt)),
      h("td", { class: "message" }, op.message),
      h("td", {}, h("div", { class: "actions" }, actions)),
    );
  }

  function button(label: string, verb: string, onclick: () => void): HTMLButtonElement {
    return h("button", { type: "button", "data-action": verb, onclick }, label);
  }

  function act(action: { title: string; text: string; confirmLabel: string; reasonRequired: boolean; path: string }): void {
    confirmAction({
      ...action,
      act: async (reason) => {
        const body = await call<ActionResult>("POST", action.path, reason ? { reason } : {});
        const now = body.operation ?? (body.status ? { status: body.status } : null);
        return now ? `${body.code}: the request is now ${now.status}.` : body.code;
      },
      done: reload,
    });
  }

  void load();
}

/**
 * Where a request waiting on the merge queue stands and when it is expected
 * to merge, as its page says it; what the estimate comes from on hover.
 */
function queuePlace(queue: QueuePlace): HTMLElement {
  const merged = queue.expectedMergeAt
    ? `merged about ${clock(queue.expectedMergeAt)}`
    : "no expected time";
  return h("div", { class: "queue", "data-position": queue.position, "data-merge-at": queue.expectedMergeAt, title: queue.basis },
    `place ${queue.position} of ${queue.of} in the merge queue; ${merged}`);
}
