// Drift: the files on the target branch that are not what changegate
// wrote, as the drift job's last pass found them, each with the commit that
// last changed it, its diff on demand, and the repairs that accept the
// repository (adopt, ignore), each with a reason, audited.

import { html as diffHtml } from "diff2html";
import "diff2html/bundles/css/diff2html.min.css";

import { call, get, query } from "../api";
import { confirmAction } from "../confirm";
import { h, replace, when } from "../dom";
import { adminError } from "./common";

interface Finding {
  kind: "CHANGED" | "MISSING" | "UNEXPECTED";
  targetKey?: string;
  subjectId?: string;
  project: string;
  path: string;
  since: string;
  detectedAt: string;
  lastCommit?: { id: string; title: string; authorName?: string; committedAt?: string; webUrl?: string };
  lastCommitUnknown?: string;
}

interface DriftDiff {
  kind: string;
  path: string;
  diff: string;
  unreadable?: string;
}

const KIND_TEXT: Record<Finding["kind"], string> = {
  CHANGED: "differs from what changegate wrote",
  MISSING: "is missing",
  UNEXPECTED: "has no live binding",
};

export function driftTab(root: HTMLElement): void {
  const rows = h("tbody", {});
  const message = h("div", { "aria-live": "polite" });
  const detail = h("div", { id: "drift-diff" });
  replace(
    root,
    h("p", { class: "hint" }, "Files on the target branch that are not what changegate wrote, as the drift job's last pass found them. Repairs never write to the repository."),
    h("table", { class: "list", id: "drift" },
      h("thead", {}, h("tr", {}, ["Kind", "Target", "Subject", "File", "Since", "Last commit", ""].map((c) => h("th", {}, c)))),
      rows),
    message,
    detail,
  );

  async function load(): Promise<void> {
    try {
      const report = await get<{ items: Finding[] }>("/admin/v1/drift");
      rows.replaceChildren(...report.items.map(row));
      replace(message, report.items.length ? null : h("p", { class: "hint", id: "drift-none" }, "Nothing differs: the target branch holds what changegate believes."));
    } catch (error) {
      replace(message, adminError(error));
    }
  }

  function row(finding: Finding): HTMLTableRowElement {
    const commit = finding.lastCommit;
    return h("tr", { "data-path": finding.path, "data-kind": finding.kind },
      h("td", {}, h("span", { class: "badge failed", title: KIND_TEXT[finding.kind] }, finding.kind)),
      h("td", {}, finding.targetKey ?? "—"),
      h("td", {}, finding.subjectId ?? "—"),
      h("td", {}, h("code", {}, finding.path)),
      h("td", {}, when(finding.since)),
      h("td", { class: "last-commit" }, commit
        ? [commit.webUrl && /^https?:\/\//.test(commit.webUrl)
            ? h("a", { href: commit.webUrl, target: "_blank", rel: "noopener" }, commit.id.slice(0, 8))
            : h("code", {}, commit.id.slice(0, 8)),
          ` ${commit.title}`, commit.authorName ? ` (${commit.authorName})` : ""]
        : h("span", { class: "hint" }, finding.lastCommitUnknown ?? "none")),
      h("td", {}, h("div", { class: "actions" },
        h("button", { type: "button", "data-action": "diff", onclick: () => void showDiff(finding) }, "Diff"),
        finding.kind === "UNEXPECTED"
          ? null
          : h("button", { type: "button", "data-action": "restore", onclick: () => restore(finding) }, "Restore"),
        h("button", { type: "button", "data-action": "adopt", onclick: () => repair(finding, "adopt") }, "Adopt"),
        finding.kind === "UNEXPECTED"
          ? h("button", { type: "button", "data-action": "ignore", onclick: () => repair(finding, "ignore") }, "Ignore")
          : null)));
  }

  async function showDiff(finding: Finding): Promise<void> {
    replace(detail, h("p", { class: "hint" }, `Reading ${finding.path}…`));
    try {
      const answer = await get<DriftDiff>(`/admin/v1/drift/diff${query({ project: finding.project, path: finding.path })}`);
      const view = h("div", { class: "diff", "data-path": answer.path });
      if (answer.unreadable) {
        replace(detail, h("p", { class: "error" }, `The file could not be read: ${answer.unreadable}`));
        return;
      }
      // diff2html escapes the file's text; the markup is its own.
      view.innerHTML = diffHtml(answer.diff, { drawFileList: false, outputFormat: "line-by-line", matching: "lines" });
      replace(detail, h("h2", {}, `${answer.path}: what changegate wrote (−) and what the target branch holds (+)`), view);
    } catch (error) {
      replace(detail, adminError(error));
    }
  }

  function restore(finding: Finding): void {
    confirmAction({
      title: "Restore the binding's file",
      text: `Submit a change request that writes ${finding.path} again as changegate rendered it for ${finding.subjectId} → ${finding.targetKey}, through the usual approval and merge queue.`,
      confirmLabel: "Restore",
      reasonRequired: true,
      act: async (reason) => {
        const answer = await call<{ operationId: string }>("POST", "/admin/v1/drift/restore", { project: finding.project, path: finding.path, reason });
        return { text: "Restore requested.", follow: { href: `/operations/${answer.operationId}`, label: "Follow the restore" } };
      },
      done: () => void load(),
    });
  }

  function repair(finding: Finding, action: "adopt" | "ignore"): void {
    confirmAction({
      title: action === "adopt" ? "Adopt the repository's file" : "Ignore this path",
      text: action === "adopt"
        ? `Accept ${finding.path} as the target branch holds it now. It is reported again if it changes again.`
        : `Never report ${finding.path}, which no live binding names.`,
      confirmLabel: action === "adopt" ? "Adopt" : "Ignore",
      reasonRequired: true,
      act: async (reason) => {
        await call("POST", "/admin/v1/drift/repair", { project: finding.project, path: finding.path, action, reason });
        return action === "adopt" ? "Adopted." : "Ignored.";
      },
      done: () => void load(),
    });
  }

  void load();
}
