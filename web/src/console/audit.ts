// The append-only audit log, newest first, a page at a time.

import { get, query } from "../api";
import { h, replace, when } from "../dom";
import type { AuditEntry, Page } from "../types";
import { adminError } from "./common";

export function auditTab(root: HTMLElement): void {
  const rows = h("tbody", {});
  const more = h("button", { type: "button", id: "audit-more", hidden: true }, "Load more");
  const message = h("div", { "aria-live": "polite" });
  let cursor: string | null = null;
  replace(
    root,
    h("table", { class: "list", id: "audit" },
      h("thead", {}, h("tr", {}, ["When", "Who", "Action", "On", "Parameters"].map((c) => h("th", {}, c)))),
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
        h("tr", {},
          h("td", {}, when(entry.createdAt)),
          h("td", {}, entry.actor),
          h("td", {}, entry.action),
          h("td", {}, h("code", {}, entry.target)),
          h("td", {}, h("code", { class: "params" }, JSON.stringify(entry.params))))));
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
