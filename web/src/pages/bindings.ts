// My bindings, newest first, a page at a time, with removal of live ones.

import { ApiError, call, get, newKey, query } from "../api";
import { confirmAction } from "../confirm";
import { type PreviewAnswer, previewView, submitLabel } from "../preview";
import { h, replace, when } from "../dom";
import { CLOSABLE, badge, tone } from "../status";
import type { Binding, Page, Submitted } from "../types";

/** How often the table is read again while a binding is on its way. */
const REFRESH_MS = 3000;

export function bindingsPage(root: HTMLElement): () => void {
  const rows = h("tbody", {});
  const more = h("button", { type: "button", id: "more", hidden: true }, "Load more");
  const message = h("div", { "aria-live": "polite" });
  let cursor: string | null = null;
  let pages = 0;
  let timer: number | undefined;
  let stopped = false;

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
      if (stopped) return;
      rows.append(...page.items.map(row));
      pages += 1;
      cursor = page.nextCursor ?? null;
      more.hidden = !cursor;
      replace(message, rows.children.length ? null : h("p", { class: "hint" }, "You have no bindings yet. ", h("a", { href: "/" }, "Apply for one.")));
    } catch (error) {
      replace(message, h("p", { class: "error" }, error instanceof ApiError ? error.describe() : String(error)));
    } finally {
      more.disabled = false;
    }
    scheduleRefresh();
  }

  // The pages shown so far, read again: a removal or an apply on its way
  // shows each status it reaches, and the Remove button only while it can work.
  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    const shown = Math.max(pages, 1);
    rows.replaceChildren();
    cursor = null;
    pages = 0;
    for (let i = 0; i < shown && (i === 0 || cursor); i++) await load();
  }

  function scheduleRefresh(): void {
    window.clearTimeout(timer);
    const moving = Array.from(rows.querySelectorAll<HTMLElement>(".badge")).some((b) => tone(b.textContent ?? "") === "busy");
    if (moving && !stopped) timer = window.setTimeout(() => void refresh(), REFRESH_MS);
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
    const key = newKey();
    confirmAction({
      title: `Remove ${binding.targetKey}`,
      text: `changegate will open a merge request deleting the file of ${binding.subjectId}'s binding to ${binding.targetKey}.`,
      confirmLabel: "Remove",
      reasonRequired: true,
      act: async (reason) => {
        const path = `/api/v1/bindings/${encodeURIComponent(binding.targetKey)}/close`;
        const body = await call<Submitted>("POST", path, { operationId: key, subjectId: binding.subjectId, reason }, { "Idempotency-Key": key });
        return {
          text: body.code === "DUPLICATE_SUBMIT" ? "Removal was already requested." : "Removal requested.",
          follow: { href: `/operations/${body.operationId}`, label: "Follow the removal" },
        };
      },
      done: () => void refresh(),
      attach: (slot, ok, reason) => previewClose(binding, key, slot, ok, reason),
    });
  }

  /** The removal's preview in its dialog, again as the reason is typed (debounced). */
  function previewClose(binding: Binding, key: string, slot: HTMLElement, ok: HTMLButtonElement, reason: HTMLTextAreaElement): void {
    let seq = 0;
    let wait: number | undefined;
    const path = `/api/v1/bindings/${encodeURIComponent(binding.targetKey)}/close/preview`;
    const load = async (): Promise<void> => {
      const mine = ++seq;
      let answer: PreviewAnswer | null = null;
      try {
        answer = await call<PreviewAnswer>("POST", path, { operationId: key, subjectId: binding.subjectId, reason: reason.value });
      } catch {
        answer = null;
      }
      if (mine !== seq || ok.hidden) return;
      const { label, enabled } = submitLabel(answer, "Remove");
      ok.textContent = label;
      ok.disabled = !enabled;
      replace(slot, answer ? previewView(answer, !reason.value.trim()) : h("p", { class: "hint" }, "No preview available; you can still remove it."));
    };
    reason.addEventListener("input", () => {
      window.clearTimeout(wait);
      wait = window.setTimeout(() => void load(), 300);
    });
    replace(slot, h("p", { class: "hint" }, "Loading the preview…"));
    void load();
  }

  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}
