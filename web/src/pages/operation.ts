// One operation: where it is, what comes next, what happened and when (its
// steps, and on the way each pipeline run of its MR, each reviewer bot's
// approval, rebases, the merge commit and the deploy), and the other
// requests of its relation. Everything comes from one read (the timeline
// answer), so the badge, the step, the stages and the history never
// disagree; the page reads it again every two seconds until the request
// settles.

import { ApiError, call, get, newKey } from "../api";
import { confirmAction } from "../confirm";
import { type PreviewAnswer, previewView } from "../preview";
import { clock, h, replace, when } from "../dom";
import { advice, badge, handedBackRemoval, operationBadge, timeline } from "../status";
import type { EntryKind, HistoryEntry, Operation, OperationTimeline, QueuePlace, Related, Submitted } from "../types";

const POLL_MS = 2000;

/** What an event's row says it is; a step's row names the step. */
const KIND_LABELS: Record<Exclude<EntryKind, "STEP">, string> = {
  PIPELINE: "Pipeline",
  APPROVAL: "Approval",
  REBASE: "Rebase",
  MERGE: "Merge",
  DEPLOY: "Deploy",
};

/** A link to a page GitLab gave (only what is plainly a web address), else the text. */
function gitlabLink(url: string | undefined, text: string, props: Record<string, string> = {}): HTMLElement {
  return url && /^https?:\/\//.test(url)
    ? h("a", { ...props, href: url, target: "_blank", rel: "noopener" }, text)
    : h("span", props, text);
}

/** What the stage of `key` shows of the events recorded for it. */
function stageEvents(key: string, items: HistoryEntry[]): HTMLElement | null {
  const last = (kind: EntryKind) => [...items].reverse().find((entry) => entry.kind === kind);
  switch (key) {
    case "pipeline": {
      const run = last("PIPELINE");
      if (!run) return null;
      return h("span", { class: "events", id: "stage-pipeline-run" }, gitlabLink(run.url, run.message));
    }
    case "reviews": {
      const approvals = items.filter((entry) => entry.kind === "APPROVAL");
      if (!approvals.length) return null;
      return h("span", { class: "events", id: "stage-approvals" }, `approved by ${approvals.map((entry) => entry.actor).join(", ")}`);
    }
    case "merge": {
      const merge = last("MERGE");
      if (!merge?.detail) return null;
      return h("span", { class: "events", id: "stage-merge-commit" }, "commit ", gitlabLink(merge.url, merge.detail.slice(0, 8), { class: "commit" }));
    }
    case "deploy": {
      const deploy = last("DEPLOY");
      if (!deploy) return null;
      return h("span", { class: "events", id: "stage-deploy" }, deploy.message);
    }
    default:
      return null;
  }
}

export function operationPage(root: HTMLElement, params: Record<string, string>): () => void {
  const id = params.id;
  let timer: number | undefined;
  let stopped = false;
  const body = h("div", { id: "operation" }, h("p", { class: "hint" }, "Loading…"));
  replace(root, h("h1", {}, "Request ", h("code", {}, id)), body);

  async function load(): Promise<void> {
    let snapshot: OperationTimeline;
    try {
      snapshot = await get<OperationTimeline>(`/api/v1/operations/${encodeURIComponent(id)}/timeline`);
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
    show(snapshot);
    if (snapshot.operation.next === "WAIT") timer = window.setTimeout(() => void load(), POLL_MS);
  }

  function show({ operation: op, items, batchMembers, relation }: OperationTimeline): void {
    const mr = op.mergeRequest;
    // The URL comes from GitLab: link only what is plainly a web address.
    const mrLink = mr ? gitlabLink(mr.url, `!${mr.iid}`, { id: "mr-link" }) : null;
    const batch = op.batchNumber !== undefined
      ? h("span", { id: "batch" }, `#${op.batchNumber}`, batchMembers && batchMembers > 1 ? `, with ${batchMembers - 1} other request${batchMembers > 2 ? "s" : ""}` : ", on its own",
          op.batchesAhead === undefined ? null
            : h("span", { id: "batches-ahead", "data-ahead": op.batchesAhead },
                op.batchesAhead === 0 ? "; next to merge" : `; ${op.batchesAhead} batch${op.batchesAhead === 1 ? "" : "es"} ahead merge first`))
      : null;
    const queue = op.queue ? expected(op.queue) : null;
    replace(
      body,
      h("dl", { class: "facts" },
        h("dt", {}, "Target"), h("dd", {}, op.targetKey),
        h("dt", {}, "Subject"), h("dd", {}, op.subjectId),
        h("dt", {}, "Status"), h("dd", { id: "status" }, operationBadge(op)),
        h("dt", {}, "Step"), h("dd", { id: "step" }, `${op.step.name} (${op.step.code})`),
        h("dt", {}, "Latest"), h("dd", { id: "message" }, op.message),
        batch ? [h("dt", {}, "Merge batch"), h("dd", {}, batch)] : null,
        queue ? [h("dt", {}, "Expected"), h("dd", {}, queue)] : null,
        op.scheduled
          ? [h("dt", {}, "Scheduled"), h("dd", { id: "scheduled", "data-waits-for": op.scheduled.waitsFor, "data-until": op.scheduled.until ?? "" },
              op.scheduled.until ? `lands at or after ${when(op.scheduled.until)}: ` : "", op.scheduled.description)]
          : op.notBefore ? [h("dt", {}, "Not before"), h("dd", { id: "not-before" }, when(op.notBefore))] : null,
        op.drift
          ? [h("dt", {}, "Repository"), h("dd", { id: "drift", "data-kind": op.drift.kind, class: "notice" },
              `The file ${op.drift.path} on the target branch ${op.drift.kind === "MISSING" ? "is gone" : "differs from what changegate wrote"} since ${when(op.drift.since)}`,
              op.drift.sinceCommit ? ` (commit ${op.drift.sinceCommit.slice(0, 8)})` : "", ".")]
          : null,
        op.urgent ? [h("dt", {}, "Urgent"), h("dd", { id: "urgent" }, "in the merge queue's urgent lane")] : null,
        op.revertOf ? [h("dt", {}, "Reverts"), h("dd", {}, h("a", { href: `/operations/${op.revertOf}`, id: "revert-of" }, op.revertOf))] : null,
        op.revertedBy ? [h("dt", {}, "Reverted by"), h("dd", {}, h("a", { href: `/operations/${op.revertedBy}`, id: "reverted-by" }, op.revertedBy))] : null,
        h("dt", {}, "Submitted"), h("dd", {}, when(op.createdAt)),
        h("dt", {}, "Updated"), h("dd", {}, when(op.updatedAt)),
      ),
      h("p", { class: `next next-${op.next.toLowerCase()}`, id: "next", "data-next": op.next },
        advice(op.next, op.status, op.supersededBy !== undefined, handedBackRemoval(op)),
        op.supersededBy
          ? [" ", h("a", { href: `/operations/${op.supersededBy}`, id: "superseded-by" }, "See the newer request.")]
          : null,
        op.next === "REAPPLY" ? [" ", h("a", { href: `/?target=${encodeURIComponent(op.targetKey)}` }, "Apply again")] : null),
      actions(op),
      h("ol", { class: "timeline", id: "timeline" },
        timeline(op).map((stage) =>
          h("li", { class: stage.state, "data-stage": stage.key, "data-state": stage.state },
            h("span", { class: "label" }, stage.label),
            stage.key === "mr" && mrLink ? [" ", mrLink] : null,
            // The stage says what it is at; the message of the last step is
            // under "Latest" (it may tell of the stage before, "opened MR !3").
            stage.state === "active" ? h("span", { class: "detail" }, op.step.name) : null,
            stage.state === "failed" ? h("span", { class: "detail" }, op.message) : null,
            stageEvents(stage.key, items),
          ))),
      items.length
        ? [
            h("h2", {}, "History"),
            h("table", { class: "list", id: "history" },
              h("tbody", {}, items.map((entry) =>
                h("tr", { "data-step": entry.step.name, "data-kind": entry.kind, class: entry.kind === "STEP" ? null : "event" },
                  h("td", {}, when(entry.at)),
                  h("td", {}, entry.kind === "STEP" ? entry.step.name : KIND_LABELS[entry.kind]),
                  h("td", {}, entry.status ? badge(entry.status) : null),
                  h("td", {}, entry.url ? gitlabLink(entry.url, entry.message, { class: "event-link" }) : entry.message),
                  h("td", {}, entry.actor))))),
          ]
        : null,
      relation.length > 1 ? relationTable(relation) : null,
    );
  }

  // Revert, for a landed change nobody took over; Withdraw, for a request
  // that has not reached the repository yet (a scheduled removal hands the
  // binding back). The server decides in the end.
  function actions(op: Operation): HTMLElement | null {
    const landed = !op.supersededBy && !handedBackRemoval(op) && (op.status === "VALIDATED" || op.status === "CLOSED") && !op.revertedBy;
    const waiting = op.step.name === "SCHEDULED" || op.step.name === "QUEUED" || op.status === "APPROVAL_SENDING" || op.status === "APPROVAL_SENT";
    if (!landed && !waiting) return null;
    return h("div", { class: "actions" },
      landed ? h("button", { type: "button", id: "revert", onclick: () => askRevert(op) }, "Revert") : null,
      waiting ? h("button", { type: "button", id: "withdraw", onclick: () => askWithdraw(op) }, "Withdraw") : null);
  }

  function askRevert(op: Operation): void {
    const key = newKey();
    const path = `/api/v1/operations/${encodeURIComponent(op.operationId)}/revert`;
    confirmAction({
      title: "Revert this change",
      text: op.status === "CLOSED"
        ? `changegate will apply ${op.subjectId}'s binding to ${op.targetKey} again, with the parameters this removal took away, through the normal approval.`
        : `changegate will remove ${op.subjectId}'s binding to ${op.targetKey}, as it was before this request, through the normal flow.`,
      confirmLabel: "Revert",
      reasonRequired: true,
      act: async (reason) => {
        const body = await call<Submitted>("POST", path, { reason }, { "Idempotency-Key": key });
        return {
          text: body.code === "DUPLICATE_SUBMIT" ? "The revert was already requested." : "Revert requested.",
          follow: { href: `/operations/${body.operationId}`, label: "Follow the revert" },
        };
      },
      done: () => void load(),
      attach: (slot) => {
        replace(slot, h("p", { class: "hint" }, "Loading what the revert restores…"));
        call<PreviewAnswer>("POST", `${path}/preview`, { reason: "preview" })
          .then((answer) => replace(slot, previewView(answer, true)))
          .catch((error) => replace(slot, h("p", { class: "error" }, error instanceof ApiError ? error.describe() : String(error))));
      },
    });
  }

  function askWithdraw(op: Operation): void {
    confirmAction({
      title: "Withdraw this request",
      text: op.status === "CLOSING"
        ? "The removal stops here, before anything is written to the repository: the binding stays as it is."
        : "It stops here, before anything is written to the repository. You may apply again later.",
      confirmLabel: "Withdraw",
      reasonRequired: true,
      act: async (reason) => {
        await call("POST", `/api/v1/operations/${encodeURIComponent(op.operationId)}/withdraw`, { reason });
        return "Withdrawn.";
      },
      done: () => void load(),
    });
  }

  // Every apply and removal of the same subject and target, newest first.
  function relationTable(relation: Related[]): HTMLElement[] {
    return [
      h("h2", {}, "Requests for this subject and target"),
      h("table", { class: "list", id: "relation" },
        h("tbody", {}, relation.map((related) =>
          h("tr", { "data-operation": related.operationId, "data-current": String(related.current) },
            h("td", {}, related.operationId === id
              ? h("strong", {}, "this request")
              : h("a", { href: `/operations/${related.operationId}` }, related.operationId.slice(0, 8))),
            h("td", {}, related.kind === "CLOSE" ? "removal" : "apply"),
            h("td", {}, related.status ? badge(related.status) : null),
            h("td", {}, related.current ? "current" : related.kind === "CLOSE" && related.step.name === "WITHDRAWN" ? "withdrawn" : "superseded"),
            h("td", {}, when(related.createdAt)))))),
    ];
  }

  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

/** When a waiting request is expected to land, and what that comes from. */
function expected(queue: QueuePlace): HTMLElement {
  const place = `place ${queue.position} of ${queue.of} in the merge queue`;
  if (!queue.expectedMergeAt) {
    return h("span", { id: "queue", "data-position": queue.position }, `${place}; `, h("span", { id: "queue-estimate" }, queue.basis));
  }
  return h("span", { id: "queue", "data-position": queue.position, title: queue.basis },
    `${place}; `,
    h("span", { id: "queue-estimate", "data-merge-at": queue.expectedMergeAt },
      `merged about ${clock(queue.expectedMergeAt)}`,
      queue.expectedDeployAt ? `, live about ${clock(queue.expectedDeployAt)}` : ""),
    h("span", { class: "hint" }, ` (${queue.basis})`));
}
