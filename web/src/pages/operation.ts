// One operation: where it is, what comes next, refreshed until it settles.

import { ApiError, get } from "../api";
import { h, replace, when } from "../dom";
import { advice, badge, timeline } from "../status";
import type { Operation } from "../types";

const POLL_MS = 2000;

export function operationPage(root: HTMLElement, params: Record<string, string>): () => void {
  const id = params.id;
  let timer: number | undefined;
  let stopped = false;
  const body = h("div", { id: "operation" }, h("p", { class: "hint" }, "Loading…"));
  replace(root, h("h1", {}, "Request ", h("code", {}, id)), body);

  async function load(): Promise<void> {
    let op: Operation;
    try {
      op = await get<Operation>(`/api/v1/operations/${encodeURIComponent(id)}`);
    } catch (error) {
      if (stopped) return;
      if (error instanceof ApiError && error.status === 404) {
        replace(body, h("p", { class: "error" }, "No such request, or it is not yours."));
        return;
      }
      // A passing outage: show it, and keep trying.
      replace(body, h("p", { class: "error" }, error instanceof ApiError ? error.describe() : String(error)));
      timer = window.setTimeout(() => void load(), POLL_MS * 2);
      return;
    }
    if (stopped) return;
    show(op);
    if (op.next === "WAIT") timer = window.setTimeout(() => void load(), POLL_MS);
  }

  function show(op: Operation): void {
    const mr = op.mergeRequest;
    const mrLink = mr
      ? mr.url
        ? h("a", { href: mr.url, target: "_blank", rel: "noopener", id: "mr-link" }, `!${mr.iid}`)
        : h("span", { id: "mr-link" }, `!${mr.iid}`)
      : null;
    replace(
      body,
      h("dl", { class: "facts" },
        h("dt", {}, "Target"), h("dd", {}, op.targetKey),
        h("dt", {}, "Subject"), h("dd", {}, op.subjectId),
        h("dt", {}, "Status"), h("dd", { id: "status" }, badge(op.status)),
        h("dt", {}, "Step"), h("dd", { id: "step" }, `${op.step.name} (${op.step.code})`),
        h("dt", {}, "Submitted"), h("dd", {}, when(op.createdAt)),
        h("dt", {}, "Updated"), h("dd", {}, when(op.updatedAt)),
      ),
      h("p", { class: `next next-${op.next.toLowerCase()}`, id: "next", "data-next": op.next },
        advice(op.next),
        op.next === "REAPPLY" ? [" ", h("a", { href: `/?target=${encodeURIComponent(op.targetKey)}` }, "Apply again")] : null),
      h("ol", { class: "timeline", id: "timeline" },
        timeline(op).map((stage) =>
          h("li", { class: stage.state, "data-stage": stage.key, "data-state": stage.state },
            h("span", { class: "label" }, stage.label),
            stage.key === "mr" && mrLink ? [" ", mrLink] : null,
            stage.state === "active" || stage.state === "failed" ? h("span", { class: "detail" }, op.message) : null,
          ))),
    );
  }

  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}
