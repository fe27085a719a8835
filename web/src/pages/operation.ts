// One operation: where it is, what comes next, refreshed until it settles.

import { ApiError, get } from "../api";
import { h, replace, when } from "../dom";
import { advice, badge, timeline } from "../status";
import type { HistoryEntry, Operation } from "../types";

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
    const history = await loadHistory();
    if (stopped) return;
    show(op, history);
    if (op.next === "WAIT") timer = window.setTimeout(() => void load(), POLL_MS);
  }

  // The recorded steps. The stages above need only the status, so a failed
  // read of the history leaves it out rather than failing the page.
  async function loadHistory(): Promise<HistoryEntry[] | null> {
    try {
      return (await get<{ items: HistoryEntry[] }>(`/api/v1/operations/${encodeURIComponent(id)}/timeline`)).items;
    } catch {
      return null;
    }
  }

  function show(op: Operation, history: HistoryEntry[] | null): void {
    const mr = op.mergeRequest;
    // The URL comes from GitLab: link only what is plainly a web address.
    const mrLink = mr
      ? mr.url && /^https?:\/\//.test(mr.url)
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
        advice(op.next, op.status),
        op.next === "REAPPLY" ? [" ", h("a", { href: `/?target=${encodeURIComponent(op.targetKey)}` }, "Apply again")] : null),
      h("ol", { class: "timeline", id: "timeline" },
        timeline(op).map((stage) =>
          h("li", { class: stage.state, "data-stage": stage.key, "data-state": stage.state },
            h("span", { class: "label" }, stage.label),
            stage.key === "mr" && mrLink ? [" ", mrLink] : null,
            stage.state === "active" || stage.state === "failed" ? h("span", { class: "detail" }, op.message) : null,
          ))),
      history?.length
        ? [
            h("h2", {}, "History"),
            h("table", { class: "list", id: "history" },
              h("tbody", {}, history.map((entry) =>
                h("tr", {},
                  h("td", {}, when(entry.at)),
                  h("td", {}, entry.step.name),
                  h("td", {}, entry.message),
                  h("td", {}, entry.actor))))),
          ]
        : null,
    );
  }

  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}
