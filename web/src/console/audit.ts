// The append-only audit log, newest first, a page at a time: who did (or
// tried) what, on what, with which parameters, and for a refused action why
// it was refused.

import { get, query } from "../api";
import { h, replace, when } from "../dom";
import type { AuditEntry, Page } from "../types";
import { adminError } from "./common";

/**
 * Parameters as a key/value list; nested objects as nested lists, lists of
 * plain values joined. The API leaves out the keys the server reserves.
 */
function paramList(params: Record<string, unknown>): HTMLElement {
  return h("dl", { class: "params" },
    Object.entries(params).flatMap(([key, value]) => [h("dt", {}, key), h("dd", {}, paramValue(value))]));
}

function paramValue(value: unknown): HTMLElement | string {
  if (value === null || value === undefined) return "—";
  if (Array.isArray(value)) {
    return value.every((item) => typeof item !== "object" || item === null)
      ? value.map((item) => String(item ?? "—")).join(", ")
      : h("ol", {}, value.map((item) => h("li", {}, paramValue(item))));
  }
  if (typeof value === "object") return paramList(value as Record<string, unknown>);
  return String(value);
}

function outcome(entry: AuditEntry): (HTMLElement | null)[] {
  return entry.outcome === "REFUSED"
    ? [h("span", { class: "badge failed" }, "refused"), entry.refusalReason ? h("div", { class: "refusal" }, entry.refusalReason) : null]
    : [h("span", { class: "badge ok" }, "done")];
}

export function auditTab(root: HTMLElement): void {
  const rows = h("tbody", {});
  const more = h("button", { type: "button", id: "audit-more", hidden: true }, "Load more");
  const message = h("div", { "aria-live": "polite" });
  let cursor: string | null = null;
  replace(
    root,
    h("table", { class: "list", id: "audit" },
      h("thead", {}, h("tr", {}, ["When", "Who", "Action", "On", "Outcome", "Parameters"].map((c) => h("th", {}, c)))),
      rows),
    message,
    more,
  );
  more.addEventListener("click", () => void load());

  async function load(): Promise<void> {
    more.disabled = true;
    try {
      const page = await get<Page<AuditEntry>>(`/admin/v1/audit${query({ cursor, limit: 50 })}`);
      rows.append(...page.items.map((entry) =>
        h("tr", { "data-audit": entry.id, "data-outcome": entry.outcome },
          h("td", {}, when(entry.createdAt)),
          h("td", { class: "actor" }, entry.actor),
          h("td", { class: "action" }, entry.action),
          h("td", {}, h("code", {}, entry.target)),
          h("td", { class: "outcome" }, outcome(entry)),
          h("td", {}, entry.params && Object.keys(entry.params).length
            ? paramList(entry.params)
            : h("span", { class: "hint" }, "none")))));
      cursor = page.nextCursor ?? null;
      more.hidden = !cursor;
      replace(message, rows.children.length ? null : h("p", { class: "hint" }, "Nothing audited yet."));
    } catch (error) {
      replace(message, adminError(error));
    } finally {
      more.disabled = false;
    }
  }
  void load();
}
