// The ops console for the operator rule. Each tab is one admin resource.

import { h, replace } from "../dom";
import { auditTab } from "../console/audit";
import { batchesTab } from "../console/batches";
import { configTab } from "../console/config";
import { driftTab } from "../console/drift";
import { operationsTab } from "../console/operations";
import { webhooksTab } from "../console/webhooks";

interface Tab {
  key: string;
  label: string;
  render: (root: HTMLElement) => (() => void) | void;
}

const TABS: Tab[] = [
  { key: "operations", label: "Operations", render: operationsTab },
  { key: "merge-queue", label: "Merge queue", render: batchesTab },
  { key: "drift", label: "Drift", render: driftTab },
  { key: "webhooks", label: "Webhooks", render: webhooksTab },
  { key: "audit", label: "Audit log", render: auditTab },
  { key: "config", label: "Configuration", render: configTab },
];

export function consolePage(root: HTMLElement, params: Record<string, string>): (() => void) | void {
  const current = TABS.find((tab) => tab.key === (params.tab ?? "operations"));
  const panel = h("section", { class: "panel", id: "console-panel" });
  replace(
    root,
    h("h1", {}, "Ops console"),
    h("nav", { class: "tabs", "aria-label": "Console sections" },
      TABS.map((tab) =>
        h("a", { href: tab.key === "operations" ? "/ops" : `/ops/${tab.key}`, class: tab === current ? "current" : null, id: `tab-${tab.key}` }, tab.label))),
    panel,
  );
  if (!current) {
    replace(panel, h("p", { class: "error" }, "No such section."));
    return;
  }
  return current.render(panel);
}
