// Binding statuses and steps in the requester's words: badges, the `next`
// advice, and the timeline of one operation derived from its status and step.

import { h } from "./dom";
import type { Next, Operation } from "./types";

/** Every binding status (src/domain/binding_status.rs), for filters. */
export const STATUSES = [
  "APPROVAL_SENDING", "APPROVAL_SENT", "MR_CREATING", "MR_CREATED", "MERGING", "MERGED",
  "VALIDATED", "CREATE_FAILED", "HANDLE_FAILED", "REJECTED", "BUSY_REJECTED", "CLOSING",
  "CLOSE_FAILED", "CLOSED", "ABANDONED",
] as const;

/** Step codes and names (src/domain/step.rs), for filters. */
export const STEPS: [number, string][] = [
  [10001, "ACCEPTED"], [10002, "BUSY_REJECTED"], [10003, "APPROVAL_SENDING"],
  [10004, "APPROVAL_SENT"], [10005, "APPROVAL_SEND_UNKNOWN"], [10006, "APPROVAL_SEND_FAILED"],
  [10007, "QUEUED"], [10008, "MR_CREATING"], [10009, "MR_CREATED"], [10010, "CREATE_FAILED"],
  [10011, "CREATE_PIPELINE_FAILED"], [10012, "CREATE_REFUSED"], [10013, "ALREADY_IN_PLACE"], [10014, "PIPELINE_RETRYING"],
  [10015, "GITLAB_UNREACHABLE"], [10016, "GITLAB_ACCESS_DENIED"], [10017, "GITLAB_PROJECT_NOT_FOUND"],
  [10018, "CREATE_UNRENDERABLE"], [10019, "SCHEDULED"], [10020, "WITHDRAWN"],
  [10101, "HANDLE_STARTED"],
  [10102, "HANDLE_APPROVED"], [10103, "HANDLE_MERGING"], [10104, "HANDLE_MERGED"],
  [10105, "HANDLE_REBASE_CONFLICT"], [10106, "HANDLE_APPROVE_FAILED"],
  [10107, "HANDLE_MERGE_REFUSED"], [10108, "HANDLE_MR_CLOSED"], [10109, "HANDLE_FAILED"],
  [10110, "HANDLE_BATCH_RETRY"], [10111, "HANDLE_NOT_LANDED"], [10112, "HANDLE_BATCH_EXHAUSTED"], [10201, "CLOSE_REQUESTED"], [10202, "CLOSE_EXPIRED"],
  [10203, "CLOSE_MR_CREATED"], [10204, "CLOSED"], [10205, "CLOSE_FAILED"],
  [10301, "CALLED_BACK_APPROVED"], [10302, "CALLED_BACK_REJECTED"],
  [10303, "CALLED_BACK_WITHDRAWN"], [10304, "DEPLOY_CONFIRMED"], [10305, "DEPLOY_RECONCILED"],
  [10306, "DEPLOY_FAILED"], [10501, "PIPELINE_PENDING"], [10502, "REBASE_PENDING"],
  [10503, "MERGE_PENDING"], [10504, "MANUAL_RETRY"], [10505, "MANUAL_ABANDONED"],
  [10506, "MERGE_CHECKS_PENDING"],
];

/** The badge colour family of a status. */
export function tone(status: string): "ok" | "busy" | "failed" | "ended" {
  if (status === "VALIDATED") return "ok";
  if (status.endsWith("_FAILED")) return "failed";
  if (["REJECTED", "BUSY_REJECTED", "CLOSED", "ABANDONED", "UNKNOWN"].includes(status)) return "ended";
  return "busy";
}

/** A status badge. */
export function badge(status: string): HTMLElement {
  return h("span", { class: `badge ${tone(status)}` }, status);
}

/** Step QUEUED: waiting in the merge queue for the next round. */
const QUEUED = 10007;
const WITHDRAWN = 10020;

/**
 * The badge of an operation: its binding status, except that a request a
 * newer one superseded says so (its status was its last, no longer what is
 * live), and one waiting for the next merge round says QUEUED rather than
 * MR_CREATING. The binding status stays in the badge's tooltip.
 */
export function operationBadge(op: Pick<Operation, "status" | "step" | "supersededBy">): HTMLElement {
  const handedBack = handedBackRemoval(op);
  const label = op.supersededBy ? "SUPERSEDED" : op.step.code === QUEUED ? "QUEUED" : handedBack ? "WITHDRAWN" : op.status;
  const ended = op.supersededBy || handedBack;
  const element = h("span", { class: `badge ${ended ? "ended" : tone(op.status)}`, "data-status": op.status }, label);
  if (label !== op.status) element.title = op.supersededBy ? `was ${op.status}` : `binding status ${op.status}`;
  return element;
}

/**
 * A removal withdrawn before its time: it handed the binding back to the
 * request before it, so its status is the binding's, live again (a
 * withdrawn apply is ABANDONED instead).
 */
export function handedBackRemoval(op: Pick<Operation, "status" | "step">): boolean {
  return op.step.code === WITHDRAWN && op.status !== "ABANDONED";
}

/** Statuses whose binding may be removed (src/store/submit.rs, close). */
export const CLOSABLE = ["MERGED", "VALIDATED", "CLOSE_FAILED"];

/** Why a request ended without a live binding, when its status says. */
const ENDED: Record<string, string> = {
  REJECTED: "It was not approved.",
  BUSY_REJECTED: "changegate was too busy to start it; nothing was changed.",
  CLOSED: "The binding is removed.",
  ABANDONED: "An operator stopped it.",
};

/** `next` in plain words; a superseded request points at its successor instead. */
export function advice(next: Next, status: string, superseded = false, handedBack = false): string {
  if (superseded) return "Superseded: a newer request for the same target took over, and what is live is shown there.";
  if (handedBack) return "Withdrawn before its time: nothing was removed, and the binding stays as the request before it left it.";
  switch (next) {
    case "WAIT":
      return "Keep waiting: this is in progress, and this page updates by itself.";
    case "CONTACT_TEAM":
      return "Contact the team: this failed in a way that waiting will not fix.";
    case "REAPPLY":
      return `${ENDED[status] ?? "This request is over."} You can apply again.`;
    case "NONE":
      return "Done: the change is live.";
  }
}

export type StageState = "done" | "active" | "failed" | "pending";

export interface Stage {
  key: string;
  label: string;
  state: StageState;
}

const APPLY_STAGES: [string, string][] = [
  ["approval", "Approval"],
  ["mr", "Merge request"],
  ["pipeline", "Pipeline"],
  ["reviews", "Reviewer approvals"],
  ["merge", "Merge"],
  ["deploy", "Deploy confirmed"],
];

const CLOSE_STAGES: [string, string][] = [
  ["request", "Removal requested"],
  ["mr", "Merge request"],
  ["pipeline", "Pipeline"],
  ["reviews", "Reviewer approvals"],
  ["merge", "Merge"],
  ["removed", "Removed"],
];

const CLOSE_STATUSES = ["CLOSING", "CLOSE_FAILED", "CLOSED"];

/** Which stage a step of the MR part of the flow is at (shared by apply and close). */
function mrStageOf(code: number): string | null {
  switch (code) {
    case 10007: case 10008: case 10110: case 10201: case 10202:
      return "mr";
    case 10009: case 10011: case 10014: case 10203: case 10501:
      return "pipeline";
    case 10101: case 10106:
      return "reviews";
    case 10102: case 10103: case 10104: case 10105: case 10107: case 10108: case 10111: case 10502: case 10503: case 10506:
      return "merge";
    default:
      return null;
  }
}

/**
 * The stages of an operation with how far it got. The status API reports the
 * current status and step, not a history, so the stages before the current
 * one are shown done and the ones after it pending.
 */
export function timeline(op: Operation): Stage[] {
  const closing = CLOSE_STATUSES.includes(op.status) || (op.step.code >= 10201 && op.step.code < 10300);
  let stages = closing ? CLOSE_STAGES : APPLY_STAGES;
  const code = op.step.code;
  if (handedBackRemoval(op)) {
    return [
      { key: CLOSE_STAGES[0][0], label: CLOSE_STAGES[0][1], state: "done" },
      { key: "withdrawn", label: "Withdrawn before its time", state: "done" },
    ];
  }
  // The target branch already held the change: no MR, pipeline or merge
  // happened, and the timeline must not show them done.
  if (code === 10013) {
    return [
      { key: stages[0][0], label: stages[0][1], state: "done" },
      { key: "in-place", label: "Already on the target branch", state: "done" },
    ];
  }
  let at: string;
  let failed = false;
  switch (op.status) {
    case "APPROVAL_SENDING":
    case "APPROVAL_SENT":
      // The MR-first order opens the MR before asking for approval.
      if (op.mergeRequest) {
        stages = [stages[1], stages[2], stages[0], ...stages.slice(3)];
      }
      at = "approval";
      break;
    case "REJECTED":
    case "BUSY_REJECTED":
      at = "approval";
      failed = true;
      break;
    case "MR_CREATING":
      at = "mr";
      break;
    case "MR_CREATED":
      at = "pipeline";
      break;
    case "CREATE_FAILED":
      at = code === 10011 ? "pipeline" : "mr";
      failed = true;
      break;
    case "MERGING":
      at = mrStageOf(code) ?? "reviews";
      break;
    case "HANDLE_FAILED":
      at = code === 10106 ? "reviews" : "merge";
      failed = true;
      break;
    case "MERGED":
      at = "deploy";
      failed = code === 10306;
      break;
    case "VALIDATED":
      at = "";
      break;
    case "CLOSING":
      at = mrStageOf(code) ?? "mr";
      break;
    case "CLOSE_FAILED":
      at = mrStageOf(code) ?? "merge";
      failed = true;
      break;
    case "CLOSED":
      at = "";
      break;
    default:
      // ABANDONED or UNKNOWN: no stage is known to be running.
      return stages.map(([key, label]) => ({ key, label, state: "pending" }));
  }
  const index = at === "" ? stages.length : stages.findIndex(([key]) => key === at);
  return stages.map(([key, label], i) => ({
    key,
    label,
    state: i < index ? "done" : i > index ? "pending" : failed ? "failed" : "active",
  }));
}
