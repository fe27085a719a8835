// A submission's dry run (POST .../preview), shown beside the apply form and
// in the removal dialog: the way the request would go, what stands in its
// way in plain words, and each file as a diff against the target branch.

import { html as diffHtml } from "diff2html";
import "diff2html/bundles/css/diff2html.min.css";

import type { FieldError } from "./api";
import { h } from "./dom";

export type FileAction = "create" | "update" | "delete" | "unchanged";

export interface PreviewFile {
  path: string;
  action: FileAction;
  current: string | null;
  currentKnown: boolean;
  proposed: string | null;
  diff: string | null;
}

export interface Blocker {
  code: string;
  message: string;
  effect: "REFUSE" | "HOLD";
  operationId?: string;
  fields?: FieldError[];
}

export interface PreviewAnswer {
  files: PreviewFile[];
  blockers: Blocker[];
  route: {
    approval: "builtin" | "http" | "none";
    batched: boolean;
    reviewers: string[];
    project: string;
    targetBranch: string;
  };
  gitlab: { readable: boolean; reason?: string };
}

const VERB: Record<FileAction, string> = {
  create: "Creates",
  update: "Updates",
  delete: "Deletes",
  unchanged: "Leaves unchanged",
};

/** What the submit button says, and whether there is anything to submit. */
export function submitLabel(answer: PreviewAnswer | null, fallback: string): { label: string; enabled: boolean } {
  const file = answer?.files[0];
  if (!answer || !file) return { label: fallback, enabled: true };
  if (answer.files.every((f) => f.action === "unchanged")) return { label: "Already in place", enabled: false };
  const verb = { create: "Create", update: "Update", delete: "Delete", unchanged: "Write" }[file.action];
  const more = answer.files.length > 1 ? ` and ${answer.files.length - 1} more` : "";
  const ask = answer.route.approval === "none" ? "" : " and ask approval";
  return { label: `${verb} ${file.path}${more}${ask}`, enabled: true };
}

/** A blocker in words a requester acts on. */
function blockerText(blocker: Blocker): string {
  switch (blocker.code) {
    case "SERVICE_CLOSED":
      return "Submissions are closed right now: this request would be refused until they open again.";
    case "RATE_LIMITED":
      return "You have submitted too many requests in the last minute: wait a minute before submitting.";
    case "FORBIDDEN":
      return "You may not request this change: ask the platform team for access.";
    case "MERGE_FROZEN":
      return "The merge queue is frozen: once approved, this request waits until it thaws.";
    case "INVALID_ARGUMENT":
      if (blocker.fields?.length) return blocker.fields.map((f) => `${f.field}: ${f.message}`).join("; ");
      return blocker.message.replace(/^field `([^`]+)`: /, "$1: ");
    default:
      // IN_PROGRESS and NOT_FOUND: the server's message names the request and what helps.
      return blocker.message.charAt(0).toUpperCase() + blocker.message.slice(1);
  }
}

/**
 * The preview's elements. `hideReason` leaves out the complaint about a
 * reason the user has not typed yet (the form asks for it anyway).
 */
export function previewView(answer: PreviewAnswer, hideReason: boolean): HTMLElement[] {
  const route = answer.route;
  const once = {
    builtin: "Once an operator approves it in changegate, changegate",
    http: "Once the approval system approves it, changegate",
    none: "No approval is asked for a removal: changegate",
  }[route.approval];
  const merge = route.batched ? "in the next merge round, with other approved requests" : "in a merge request of its own";
  const reviewers = route.reviewers.length ? `, approved by ${route.reviewers.join(" and ")},` : "";
  const blockers = answer.blockers.filter((b) => !(hideReason && b.code === "INVALID_ARGUMENT" && b.message.startsWith("field `reason`")));
  const parts: HTMLElement[] = [
    h("p", { class: "hint", id: "preview-route" },
      `${once} writes it to ${route.project} ${merge}${reviewers} and merges it into ${route.targetBranch}.`),
  ];
  if (blockers.length) {
    parts.push(h("ul", { class: "blockers", id: "blockers" },
      blockers.map((b) => h("li", { "data-code": b.code, class: b.effect === "HOLD" ? "hold" : "refuse" },
        blockerText(b),
        b.operationId ? [" ", h("a", { href: `/operations/${b.operationId}` }, "Open that request.")] : null))));
  }
  if (!answer.gitlab.readable) {
    parts.push(h("p", { class: "notice", id: "preview-unread" },
      `The file on ${route.targetBranch} could not be read, so no diff is shown (${answer.gitlab.reason ?? "unknown reason"}).`));
  }
  for (const file of answer.files) {
    parts.push(h("p", { class: "preview-file", "data-action": file.action }, `${VERB[file.action]} `, h("code", {}, file.path)));
    if (file.diff) {
      const diff = h("div", { class: "diff" });
      // diff2html escapes the file's text; the markup is its own.
      diff.innerHTML = diffHtml(file.diff, { drawFileList: false, outputFormat: "line-by-line", matching: "lines" });
      parts.push(diff);
    } else if (!file.currentKnown && file.proposed !== null) {
      parts.push(h("pre", { class: "proposed" }, file.proposed));
    } else if (file.action === "unchanged") {
      parts.push(h("p", { class: "hint" }, `${route.targetBranch} already holds this file as the request would write it.`));
    }
  }
  return parts;
}
