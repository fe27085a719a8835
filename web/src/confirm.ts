// Confirmation for every action that changes something: a modal dialog that
// says what will happen, asks for a reason, and then shows the answer.

import { ApiError } from "./api";
import { h, replace } from "./dom";

export interface ConfirmOptions {
  title: string;
  /** What will happen, in plain words. */
  text: string;
  confirmLabel: string;
  /** Whether a reason must be given. */
  reasonRequired: boolean;
  /** The API takes no reason (its body is strict): the field is left out. */
  noReason?: boolean;
  /** Does the action; its resolved value is described in the dialog. */
  act: (reason: string) => Promise<string | Outcome>;
  /** Called after a successful action, at once (the page behind shows its effect). */
  done?: () => void;
  /**
   * Fills a part of the dialog under the text (a preview of the change),
   * given the confirm button and the reason field to follow.
   */
  attach?: (slot: HTMLElement, ok: HTMLButtonElement, reason: HTMLTextAreaElement) => void;
}

/** What an action did, with where to follow it. */
export interface Outcome {
  text: string;
  follow?: { href: string; label: string };
}

/** Opens the dialog; the action runs only after the user confirms. */
export function confirmAction(options: ConfirmOptions): void {
  const reason = h("textarea", { id: "confirm-reason", rows: 3, maxlength: 2000 });
  const outcome = h("div", { id: "confirm-outcome", "aria-live": "polite" });
  const slot = h("div", { id: "confirm-preview", class: "preview" });
  const ok = h("button", { type: "submit", id: "confirm-ok" }, options.confirmLabel);
  const cancel = h("button", { type: "button", id: "confirm-cancel" }, "Cancel");
  const dialog = h(
    "dialog",
    { id: "confirm", class: "confirm" },
    h(
      "form",
      { method: "dialog", onsubmit: (event: Event) => void run(event) },
      h("h2", {}, options.title),
      h("p", {}, options.text),
      options.attach ? slot : null,
      options.noReason
        ? null
        : [h("label", { for: "confirm-reason" }, options.reasonRequired ? "Reason (required)" : "Reason (optional)"), reason],
      outcome,
      h("div", { class: "actions" }, cancel, ok),
    ),
  );
  cancel.addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  options.attach?.(slot, ok, reason);
  dialog.showModal();

  async function run(event: Event): Promise<void> {
    event.preventDefault();
    const text = reason.value.trim();
    if (options.reasonRequired && !text) {
      replace(outcome, h("p", { class: "field-error" }, "Give a reason: it is written to the audit log."));
      return;
    }
    ok.disabled = true;
    reason.disabled = true;
    replace(outcome, h("p", { class: "hint" }, "Working…"));
    try {
      const result = await options.act(text);
      const { text: description, follow } = typeof result === "string" ? { text: result, follow: undefined } : result;
      replace(outcome, h("p", { class: "success", id: "confirm-result" }, description,
        follow ? [" ", h("a", { href: follow.href, id: "confirm-follow", onclick: () => dialog.close() }, follow.label)] : null));
      ok.hidden = true;
      cancel.textContent = "Close";
      options.done?.();
    } catch (error) {
      const message = error instanceof ApiError ? error.describe() : String(error);
      replace(outcome, h("p", { class: "error", id: "confirm-result" }, message));
      ok.disabled = false;
      reason.disabled = false;
    }
  }
}
