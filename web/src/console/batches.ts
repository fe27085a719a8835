// The merge queue: batches newest first; one batch with its members, its
// membership history and its place in the split tree; an operator runs a
// claim round now or settles a stuck batch. One batch is `?batch=ID`, so
// its view can be shared and reloaded like the operations filters; what
// people read is its number (per project, as in its MR title), the id
// stays in the links.

import { call, get, query } from "../api";
import { confirmAction } from "../confirm";
import { age, h, replace, when } from "../dom";
import type { Batch, BatchDetail, MembershipEvent, Page, RoundResult, SplitStep } from "../types";
import { adminError } from "./common";

const TAB = "/ops/merge-queue";
/** A running batch's view refreshes itself this often. */
const POLL_MS = 2000;
/** The split tree reads at most this many pages of batches to find a root's descendants. */
const TREE_PAGES = 10;

export function batchesTab(root: HTMLElement): (() => void) | void {
  const id = new URLSearchParams(location.search).get("batch");
  return id ? batchView(root, id) : batchList(root);
}

/** A batch's status badge: merged, failed, or still going. */
function batchBadge(status: string): HTMLElement {
  const tone = status === "SUCCEEDED" ? "ok" : status === "RUNNING" ? "busy" : "failed";
  return h("span", { class: `badge ${tone}` }, status);
}

function batchLink(id: number, number: number): HTMLAnchorElement {
  return h("a", { href: `${TAB}?batch=${id}`, "data-batch-link": id }, `#${number}`);
}

/** The MR, linked only when GitLab's URL is plainly a web address. */
function mrLink(batch: Batch): HTMLElement | null {
  const mr = batch.mergeRequest;
  if (!mr) return null;
  return mr.url && /^https?:\/\//.test(mr.url)
    ? h("a", { href: mr.url, target: "_blank", rel: "noopener", class: "mr-link" }, `!${mr.iid}`)
    : h("span", { class: "mr-link" }, `!${mr.iid}`);
}

/** Where a batch comes from, in words: "half b of #5, from half a of #3". */
function splitOrigin(batch: Batch): (Node | string)[] {
  if (!batch.splitGroup) return ["first try"];
  if (!batch.splitFrom.length) return [batch.splitGroup];
  return [...batch.splitFrom].reverse()
    .flatMap((step, i) => [i ? ", from " : "", `half ${step.half} of `, batchLink(step.batchId, step.number)]);
}

/** A running batch's place in its train, what it is built on, and its rebuilds. */
function trainPlace(batch: Batch): (Node | string)[] {
  const parts: (Node | string)[] = [];
  if (batch.status === "RUNNING") {
    parts.push(h("span", { "data-train-position": batch.trainPosition }, batch.trainPosition === 1 ? "front" : `car ${batch.trainPosition}`));
    if (batch.aheadBatchId !== undefined) parts.push(", on ", h("a", { href: `${TAB}?batch=${batch.aheadBatchId}` }, "the batch ahead"));
  }
  if (batch.rebuilds) parts.push(`${parts.length ? ", " : ""}built ${batch.rebuilds + 1} times`);
  return parts;
}

/** The first try of a batch's split tree: the root of its path, or itself. */
function firstTry(batch: Batch): Pick<SplitStep, "batchId" | "number"> {
  return batch.splitFrom[0] ?? { batchId: batch.id, number: batch.number };
}

/** The split group of one half of a batch. */
function halfGroup(batch: Batch, half: string): string {
  return `${batch.splitGroup ? `${batch.splitGroup}/` : ""}${batch.id}${half}`;
}

function settleAction(batch: Batch, done: () => void): void {
  confirmAction({
    title: `Settle batch #${batch.number}`,
    text: `Give batch #${batch.number}'s slot back. If its MR merged meanwhile the batch succeeds; otherwise it fails and its requests wait for the next round.`,
    confirmLabel: "Settle",
    reasonRequired: true,
    act: async (reason) => {
      const body = await call<{ code: string; batch: Batch }>("POST", `/admin/v1/batches/${batch.id}/settle`, { reason });
      return `${body.code}: batch #${body.batch.number} is now ${body.batch.status}.`;
    },
    done,
  });
}

function settleButton(batch: Batch, done: () => void): HTMLButtonElement | null {
  if (batch.status !== "RUNNING") return null;
  return h("button", { type: "button", "data-action": "settle", onclick: () => settleAction(batch, done) }, "Settle");
}

/** A round's answer in words. */
function describeRound(round: RoundResult): string {
  const parts = round.claimed.map((c) => `claimed batch #${c.batchNumber} with ${c.members} request${c.members === 1 ? "" : "s"}`);
  if (round.slotOccupied) parts.push(`${round.slotOccupied} slot${round.slotOccupied === 1 ? "" : "s"} still held by a running batch`);
  if (round.raced) parts.push(`${round.raced} raced with another round`);
  return `${round.code}: ${parts.length ? parts.join("; ") : "nothing was waiting"}.`;
}

function batchList(root: HTMLElement): void {
  const rows = h("tbody", {});
  const more = h("button", { type: "button", id: "batches-more", hidden: true }, "Load more");
  const message = h("div", { "aria-live": "polite" });
  const run = h("button", { type: "button", id: "batch-run", "data-action": "run" }, "Run a round now");
  const reconcile = h("button", { type: "button", id: "reconcile-run", "data-action": "reconcile" }, "Reconcile deploys now");
  let cursor: string | null = null;

  reconcile.addEventListener("click", () => confirmAction({
    title: "Close out lost deploy callbacks now",
    text: "Requests merged a while ago whose deploy confirmation never came become VALIDATED when a later deploy includes them, as the scheduled reconciliation would.",
    confirmLabel: "Reconcile",
    reasonRequired: false,
    act: async (reason) => {
      const answer = await call<{ validated: number }>("POST", "/admin/v1/reconcile/run", reason ? { reason } : {});
      return answer.validated === 0
        ? "OK: no lost deploy confirmation to close out."
        : `OK: ${answer.validated} request${answer.validated === 1 ? "" : "s"} confirmed by a later deploy.`;
    },
    done: reload,
  }));

  run.addEventListener("click", () => confirmAction({
    title: "Run a merge-queue round now",
    text: "Claim the approved requests that are waiting into a batch now, as the scheduled round would. Safe to overlap with it.",
    confirmLabel: "Run",
    reasonRequired: false,
    act: async (reason) => describeRound(await call<RoundResult>("POST", "/admin/v1/batches/run", reason ? { reason } : {})),
    done: reload,
  }));

  replace(
    root,
    h("div", { class: "toolbar" },
      h("p", { class: "hint" }, "Approved requests wait here and are merged together, one MR per batch. Running batches form a train: each is tested on top of the ones ahead and they merge in order; a failing batch is retried in halves, and the batches behind it are built again."),
      run,
      reconcile),
    h("table", { class: "list", id: "batches" },
      h("thead", {}, h("tr", {}, ["Batch", "Status", "Train", "Split", "MR", "Idle", "Message", "Actions"].map((c) => h("th", {}, c)))),
      rows),
    message,
    more,
  );
  more.addEventListener("click", () => void load());

  async function load(): Promise<void> {
    more.disabled = true;
    try {
      const page = await get<Page<Batch>>(`/admin/v1/batches${query({ cursor, limit: 50 })}`);
      rows.append(...page.items.map(row));
      cursor = page.nextCursor ?? null;
      more.hidden = !cursor;
      replace(message, rows.children.length ? null : h("p", { class: "hint" }, "No batches yet."));
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

  function row(batch: Batch): HTMLTableRowElement {
    return h(
      "tr",
      { "data-batch": batch.id, "data-status": batch.status },
      h("td", {}, batchLink(batch.id, batch.number)),
      h("td", {}, batchBadge(batch.status), batch.status === "RUNNING" ? h("span", { class: "phase" }, ` ${batch.phase}`) : null),
      h("td", { class: "train" }, trainPlace(batch)),
      h("td", {}, splitOrigin(batch)),
      h("td", {}, mrLink(batch)),
      h("td", { title: when(batch.updatedAt) }, age(batch.updatedAt)),
      h("td", { class: "message" }, batch.message),
      h("td", {}, h("div", { class: "actions" }, settleButton(batch, reload))),
    );
  }

  void load();
}

function batchView(root: HTMLElement, id: string): () => void {
  let timer: number | undefined;
  let stopped = false;
  const body = h("div", { id: "batch" }, h("p", { class: "hint" }, "Loading…"));
  replace(root, h("p", {}, h("a", { href: TAB, id: "batches-back" }, "← All batches")), body);

  async function load(): Promise<void> {
    let detail: BatchDetail;
    try {
      detail = await get<BatchDetail>(`/admin/v1/batches/${encodeURIComponent(id)}`);
    } catch (error) {
      if (!stopped) replace(body, adminError(error));
      return;
    }
    const tree = await loadTree(detail);
    if (stopped) return;
    show(detail, tree);
    // A reload after an action may overlap a poll: keep one timer.
    window.clearTimeout(timer);
    if (detail.batch.status === "RUNNING") timer = window.setTimeout(() => void load(), POLL_MS);
  }

  // The batches of this one's split tree, from its root on. The rest of the
  // view does not need them, so a failed read leaves the tree out.
  async function loadTree(detail: BatchDetail): Promise<Batch[] | null> {
    const split = detail.history.some((e) => e.event === "SPLIT");
    if (!detail.batch.splitGroup && !split) return null;
    const rootId = firstTry(detail.batch).batchId;
    const found: Batch[] = [];
    let cursor: string | null = null;
    try {
      for (let page = 0; page < TREE_PAGES; page++) {
        const batches: Page<Batch> = await get<Page<Batch>>(`/admin/v1/batches${query({ cursor, limit: 200 })}`);
        found.push(...batches.items.filter((b) => b.id >= rootId));
        cursor = batches.nextCursor ?? null;
        const last = batches.items[batches.items.length - 1];
        if (!cursor || !last || last.id <= rootId) break;
      }
    } catch {
      return null;
    }
    return found;
  }

  function show(detail: BatchDetail, tree: Batch[] | null): void {
    const { batch, members, history } = detail;
    replace(
      body,
      h("h2", {}, `Batch #${batch.number} `, batchBadge(batch.status)),
      h("dl", { class: "facts" },
        h("dt", {}, "Status"), h("dd", { id: "batch-status" }, batchBadge(batch.status),
          batch.status === "RUNNING" ? ` ${batch.phase}` : null),
        h("dt", {}, "Project"), h("dd", {}, batch.project),
        h("dt", {}, "Split"), h("dd", { id: "batch-split" }, splitOrigin(batch)),
        h("dt", {}, "Merge request"), h("dd", { id: "batch-mr" }, mrLink(batch) ?? "none yet"),
        batch.mergeSha ? [h("dt", {}, "Merged head"), h("dd", {}, h("code", {}, batch.mergeSha))] : null,
        batch.message ? [h("dt", {}, "Message"), h("dd", {}, batch.message)] : null,
        h("dt", {}, "Created"), h("dd", {}, when(batch.createdAt)),
        h("dt", {}, "Updated"), h("dd", {}, when(batch.updatedAt)),
      ),
      h("div", { class: "actions" }, settleButton(batch, () => void reloadNow())),
      h("h2", {}, `Members (${members.length})`),
      members.length
        ? h("ul", { id: "batch-members" }, members.map((op) => h("li", { "data-operation": op }, operationLink(op))))
        : h("p", { class: "hint", id: "batch-members" }, "No request is in this batch now; the history below says where they went."),
      tree ? splitTree(batch, history, tree) : null,
      h("h2", {}, "History"),
      history.length
        ? h("table", { class: "list", id: "batch-history" },
          h("thead", {}, h("tr", {}, ["When", "Request", "Event", "Detail"].map((c) => h("th", {}, c)))),
          h("tbody", {}, history.map((entry) =>
            h("tr", { "data-event": entry.event },
              h("td", {}, when(entry.at)),
              h("td", {}, operationLink(entry.operationId)),
              h("td", {}, entry.event),
              h("td", {}, historyDetail(entry))))))
        : h("p", { class: "hint" }, "Nothing recorded."),
    );
  }

  function reloadNow(): Promise<void> {
    window.clearTimeout(timer);
    return load();
  }

  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

/** A history entry's detail; a split names the half, not its group's batch ids. */
function historyDetail(entry: MembershipEvent): string {
  if (entry.event === "SPLIT" && entry.detail) return `half ${entry.detail.slice(-1)}`;
  return entry.detail ?? "";
}

function operationLink(operationId: string): HTMLAnchorElement {
  return h("a", { href: `/operations/${operationId}`, title: operationId }, h("code", {}, operationId.slice(0, 8)));
}

/**
 * The split tree around a batch: from the first try down, each failed batch
 * with its halves (by split group) and the batches that retried each half.
 * This batch's own halves also list the requests that went into them.
 */
function splitTree(current: Batch, history: MembershipEvent[], batches: Batch[]): HTMLElement {
  const byGroup = new Map<string, Batch[]>();
  for (const b of batches) {
    const list = byGroup.get(b.splitGroup) ?? [];
    list.push(b);
    byGroup.set(b.splitGroup, list);
  }
  for (const list of byGroup.values()) list.sort((a, b) => a.id - b.id);
  const splitInto = new Map<string, string[]>();
  for (const e of history) {
    if (e.event !== "SPLIT" || !e.detail) continue;
    splitInto.set(e.detail, [...(splitInto.get(e.detail) ?? []), e.operationId]);
  }
  const root = firstTry(current);
  const rootBatch = batches.find((b) => b.id === root.batchId);

  function node(batch: Batch): HTMLLIElement {
    const halves = ["a", "b"].flatMap((half) => {
      const group = halfGroup(batch, half);
      const retries = byGroup.get(group) ?? [];
      const moved = batch.id === current.id ? splitInto.get(group) : undefined;
      if (!retries.length && !moved) return [];
      return [h("li", { "data-group": group },
        h("span", { class: "group" }, `half ${half}`),
        moved ? [": ", ...moved.flatMap((op, i) => [i ? ", " : "", operationLink(op)])] : null,
        retries.length
          ? h("ul", {}, retries.map(node))
          : h("span", { class: "hint" }, " waiting for a round"))];
    });
    return h("li", { "data-batch": batch.id, class: batch.id === current.id ? "current" : null },
      batch.id === current.id ? h("strong", {}, `#${batch.number}`) : batchLink(batch.id, batch.number), " ", batchBadge(batch.status),
      batch.id === current.id ? h("span", { class: "hint" }, " this batch") : null,
      halves.length ? h("ul", {}, halves) : null);
  }

  return h("section", { id: "split-tree" },
    h("h2", {}, "Split tree"),
    h("p", { class: "hint" }, "A batch whose pipeline fails or cannot rebase is retried in two halves, until the failing request is found."),
    rootBatch
      ? h("ul", { class: "tree" }, node(rootBatch))
      : h("p", { class: "hint" }, `The first try, batch #${root.number}, is not listed any more.`));
}
