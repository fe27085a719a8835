// Apply for a change: pick a target, fill in its parameters, say why, and see
// as you type what the request would write (a diff against the target
// branch), what stands in its way, and the way it would go.

import { ApiError, call, get, newKey, type FieldError } from "../api";
import { h, replace } from "../dom";
import { navigate } from "../nav";
import { namesOnly, paramsForm, type ParamsForm } from "../schema_form";
import { type PreviewAnswer, previewView, submitLabel } from "../preview";
import type { Access, Submitted, Target } from "../types";

export function applyPage(root: HTMLElement): () => void {
  let previewTimer: number | undefined;
  let previewSeq = 0;
  // Once sent, the preview stops: the request it would describe exists.
  let submitted = false;
  // One key per filled-in form: a double click or a retry after a lost
  // answer is answered DUPLICATE_SUBMIT instead of applying twice.
  let key = newKey();

  const target = h("select", { id: "target", name: "targetKey", required: true });
  const subject = h("input", { id: "subject", name: "subjectId", placeholder: "yourself" });
  const subjectRow = h("div", { class: "field", hidden: true },
    h("label", { for: "subject" }, "For (subject)"), subject, fieldError("subjectId"));
  const params = h("div", { id: "params" });
  const expires = h("input", { id: "expires", name: "expiresAt", type: "datetime-local" });
  const notBefore = h("input", { id: "not-before", name: "notBefore", type: "datetime-local", step: 1 });
  const reason = h("textarea", { id: "reason", name: "reason", rows: 3, maxlength: 2000 });
  const submit = h("button", { type: "submit", id: "submit" }, "Apply");
  const result = h("div", { id: "result", "aria-live": "polite" });
  const preview = h("div", { id: "preview", class: "preview", "aria-live": "polite" }, "Pick a target to see the file it would write.");
  const description = h("p", { class: "hint", id: "target-description" });
  let targets: Target[] = [];
  let paramFields: ParamsForm = paramsForm(namesOnly([]), fieldError);

  const form: HTMLFormElement = h(
    "form",
    { id: "apply-form", novalidate: true, onsubmit: (event: Event) => void send(event) },
    h("div", { class: "field" }, h("label", { for: "target" }, "Target"), target, description, fieldError("targetKey")),
    subjectRow,
    params,
    h("div", { class: "field" }, h("label", { for: "expires" }, "Remove automatically at (optional)"), expires, fieldError("expiresAt")),
    h("div", { class: "field" }, h("label", { for: "not-before" }, "Not before (optional: approval is asked now, the change lands at or after this time)"), notBefore, fieldError("notBefore")),
    h("div", { class: "field" }, h("label", { for: "reason" }, "Reason"), reason, fieldError("reason")),
    h("div", { class: "actions" }, submit),
    result,
  );

  const access = h("div", { id: "access", "aria-live": "polite" });

  replace(
    root,
    h("h1", {}, "Apply for a change"),
    access,
    h("div", { class: "split" }, form, h("section", {}, h("h2", {}, "Preview"), preview)),
  );

  function fieldError(name: string): HTMLElement {
    return h("p", { class: "field-error", "data-field": name, "aria-live": "polite" });
  }

  function clearErrors(): void {
    for (const el of form.querySelectorAll<HTMLElement>(".field-error")) el.textContent = "";
    replace(result);
  }

  function selected(): Target | undefined {
    return targets.find((t) => t.key === target.value);
  }

  function showTarget(): void {
    const t = selected();
    description.textContent = t?.description ?? "";
    subjectRow.hidden = !t || t.selfOnly;
    // A server without parameter schemas still names the parameters: strings.
    paramFields = paramsForm(t?.paramsSchema ?? namesOnly(t?.params ?? []), fieldError);
    replace(params, paramFields.fields);
    schedulePreview();
  }

  function schedulePreview(): void {
    window.clearTimeout(previewTimer);
    previewTimer = window.setTimeout(() => void loadPreview(), 300);
  }

  /** The body the form would submit now; its operation id is the form's key, so the preview renders the very file. */
  function body(): Record<string, unknown> {
    const sent: Record<string, unknown> = { operationId: key, targetKey: target.value, reason: reason.value };
    const t = selected();
    if (t && !t.selfOnly && subject.value.trim()) sent.subjectId = subject.value.trim();
    if (!paramFields.empty) sent.params = paramFields.values();
    if (notBefore.value) {
      const at = new Date(notBefore.value);
      if (!Number.isNaN(at.getTime())) sent.notBefore = at.toISOString();
    }
    if (expires.value) {
      const at = new Date(expires.value);
      if (!Number.isNaN(at.getTime())) sent.expiresAt = at.toISOString();
    }
    return sent;
  }

  function setSubmit(answer: PreviewAnswer | null): void {
    const { label, enabled } = submitLabel(answer, "Apply");
    submit.textContent = label;
    submit.disabled = !enabled;
    submit.title = enabled ? "" : "The target branch already holds this file as the request would write it.";
  }

  // Advice: a preview that fails leaves submitting as it was.
  async function loadPreview(): Promise<void> {
    const seq = ++previewSeq;
    if (!target.value || submitted) return;
    let answer: PreviewAnswer | null = null;
    try {
      answer = await call<PreviewAnswer>("POST", "/api/v1/applications/preview", body());
    } catch {
      answer = null;
    }
    if (seq !== previewSeq || submitted) return;
    setSubmit(answer);
    if (!answer) {
      replace(preview, h("p", { class: "hint" }, "No preview available; you can still apply."));
      return;
    }
    replace(preview, previewView(answer, !reason.value.trim()));
  }

  function lock(locked: boolean): void {
    for (const el of form.querySelectorAll<HTMLInputElement>("input, select, textarea, button")) {
      el.disabled = locked;
    }
  }

  async function send(event: Event): Promise<void> {
    event.preventDefault();
    clearErrors();
    // What the schema already rules out is not sent: the messages stand beside the fields.
    const invalid = paramFields.check();
    if (invalid) {
      invalid.focus();
      return;
    }
    lock(true);
    submitted = true;
    try {
      const answer = await call<Submitted>("POST", "/api/v1/applications", body(), { "Idempotency-Key": key });
      const link = h("a", { href: `/operations/${answer.operationId}` }, "follow it");
      if (answer.code === "DUPLICATE_SUBMIT") {
        // Already submitted: the form stays locked so it cannot be sent again.
        replace(result, h("p", { class: "notice", id: "duplicate" },
          "This request was already submitted; ", link, ". ",
          h("button", { type: "button", id: "new-request", onclick: () => startOver() }, "Start a new request")));
        return;
      }
      navigate(`/operations/${answer.operationId}`);
    } catch (error) {
      submitted = false;
      lock(false);
      showError(error);
      schedulePreview();
    }
  }

  function startOver(): void {
    key = newKey();
    submitted = false;
    form.reset();
    clearErrors();
    lock(false);
    showTarget();
  }

  function showError(error: unknown): void {
    if (!(error instanceof ApiError)) throw error;
    // Every failing field beside its field; one the form has no slot for in the result area.
    const fields = error.fieldErrors;
    const unplaced: FieldError[] = [];
    for (const field of fields) {
      const slot = form.querySelector<HTMLElement>(`.field-error[data-field="${CSS.escape(field.field)}"]`);
      if (!slot) {
        unplaced.push(field);
        continue;
      }
      slot.textContent = slot.textContent ? `${slot.textContent}; ${field.message}` : field.message;
    }
    // Focus stays on the button: moving it to a field here, with messages
    // just added above, made Chromium scroll on the next mousedown, and the
    // next click on Apply landed beside the button.
    if (fields.length && !unplaced.length) return;
    if (unplaced.length) {
      const listed = unplaced.map((field) => `field \`${field.field}\`: ${field.message}`).join("; ");
      const reference = error.requestId ? ` (support reference ${error.requestId})` : "";
      replace(result, h("p", { class: "error", id: "submit-error" }, listed, reference));
      return;
    }
    const kind = error.status === 429 ? "rate-limited" : "error";
    const inTheWay = error.operationId
      ? [" ", h("a", { href: `/operations/${error.operationId}`, id: "in-the-way" }, "Open that request.")]
      : [];
    replace(result, h("p", { class: `error ${kind}`, id: "submit-error" }, error.describe(), ...inTheWay));
  }

  target.addEventListener("change", showTarget);
  // Every change of the form previews again (debounced).
  form.addEventListener("input", (event) => {
    if (event.target !== target) schedulePreview();
  });

  // Say up front when submissions are closed, rather than only after a 503.
  get<Access>("/api/v1/access").then(
    (now) => {
      if (now.open) return;
      const window = now.window && "start" in now.window
        ? ` Submissions are open from ${now.window.start} to ${now.window.end} (${now.window.timezone}).`
        : "";
      replace(access, h("p", { class: "notice" }, `Submissions are closed right now.${window}`));
    },
    // Advice only: a failed check leaves submitting to report the answer.
    () => undefined,
  );

  void (async () => {
    try {
      targets = await get<Target[]>("/api/v1/targets");
    } catch (error) {
      lock(true);
      replace(result, h("p", { class: "error" }, error instanceof ApiError ? error.describe() : String(error)));
      return;
    }
    if (targets.length === 0) {
      replace(result, h("p", { class: "hint" }, "There is nothing you may apply for."));
      lock(true);
      return;
    }
    replace(target, targets.map((t) => h("option", { value: t.key }, t.key)));
    const wanted = new URLSearchParams(location.search).get("target");
    if (wanted && targets.some((t) => t.key === wanted)) target.value = wanted;
    showTarget();
  })();

  return () => window.clearTimeout(previewTimer);
}
