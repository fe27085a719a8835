// My bindings, newest first, a page at a time, with removal of live ones.

import { ApiError, call, get, newKey, query } from "../api";
import { confirmAction } from "../confirm";
import { h, replace, when } from "../dom";
import { navigate } from "../nav";
import { CLOSABLE, badge } from "../status";
import type { Binding, Page, Submitted } from "../types";

export function bindingsPage(root: HTMLElement): void {
  const rows = h("tbody", {});
  const more = h("button", { type: "button", id: "more", hidden: true }, "Load more");
  const message = h("div", { "aria-live": "polite" });
  let cursor: string | null = null;

  replace(
    root,
    h("h1", {}, "My bindings"),
    h("table", { class: "list", id: "bindings" },
      h("thead", {}, h("tr", {}, ["Target", "Subject", "Status", "Expires", "Updated", ""].map((c) => h("th", {}, c)))),
      rows),
    message,
    more,
  );

  more.addEventListener("click", () => void load());

  async function load(): Promise<void> {
    more.disabled = true;
    try {
      const page = await get<Page<Binding>>(`/api/v1/me/bindings${query({ cursor, limit: 20 })}`);
      rows.append(...page.items.map(row));
      cursor = page.nextCursor ?? null;
      more.hidden = !cursor;
      if (!rows.children.length) replace(message, h("p", { class: "hint" }, "You have no bindings yet. ", h("a", { href: "/" }, "Apply for one.")));
    } catch (error) {
      replace(message, h("p", { class: "error" }, error instanceof ApiError ? error.describe() : String(error)));
    } finally {
      more.disabled = false;
    }
  }

  function row(binding: Binding): HTMLTableRowElement {
    const close = CLOSABLE.includes(binding.status)
      ? h("button", { type: "button", class: "close", onclick: () => askClose(binding) }, "Remove")
      : null;
    return h(
      "tr",
      { "data-target": binding.targetKey },
      h("td", {}, binding.targetKey),
      h("td", {}, binding.subjectId),
      h("td", {}, h("a", { href: `/operations/${binding.operationId}` }, badge(binding.status))),
      h("td", {}, when(binding.expiresAt)),
      h("td", {}, when(binding.updatedAt)),
      h("td", {}, close),
    );
  }

  function askClose(binding: Binding): void {
    let operationId = "";
    const key = newKey();
    confirmAction({
      title: `Remove ${binding.targetKey}`,
      text: `changegate will open a merge request deleting the file of ${binding.subjectId}'s binding to ${binding.targetKey}.`,
      confirmLabel: "Remove",
      reasonRequired: true,
      act: async (reason) => {
        const path = `/api/v1/bindings/${encodeURIComponent(binding.targetKey)}/close`;
        const body = await call<Submitted>("POST", path, { subjectId: binding.subjectId, reason }, { "Idempotency-Key": key });
        operationId = body.operationId;
        return body.code === "DUPLICATE_SUBMIT" ? "Removal was already requested." : "Removal requested.";
      },
      done: () => navigate(`/operations/${operationId}`),
    });
  }

  void load();
}
