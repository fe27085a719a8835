// The first glance at the ops console: how many requests are in each
// status (each count opens the list filtered by it), the request waiting
// longest in each unfinished status, and a chart of the last day's
// outcomes hour by hour, drawn here as SVG (no library, nothing fetched).

import { get, query } from "../api";
import { age, h, replace, when } from "../dom";
import { badge } from "../status";
import type { Overview } from "../types";

/** The outcome groups the chart stacks, bottom up, with their statuses and colour. */
const GROUPS: { key: string; label: string; statuses: string[]; colour: string }[] = [
  { key: "done", label: "done", statuses: ["VALIDATED", "CLOSED"], colour: "var(--ok)" },
  { key: "refused", label: "rejected", statuses: ["REJECTED", "BUSY_REJECTED"], colour: "var(--ended)" },
  {
    key: "failed",
    label: "failed or abandoned",
    statuses: ["CREATE_FAILED", "HANDLE_FAILED", "CLOSE_FAILED", "ABANDONED"],
    colour: "var(--failed)",
  },
];

const SVG = "http://www.w3.org/2000/svg";

function svg(tag: string, attributes: Record<string, string | number>, text?: string): SVGElement {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) el.setAttribute(name, String(value));
  if (text !== undefined) el.textContent = text;
  return el;
}

/** The panel, filled once the overview is read. */
export function overviewPanel(): HTMLElement {
  const panel = h("section", { id: "overview", "aria-live": "polite" }, h("p", { class: "hint" }, "Loading the overview…"));
  void get<Overview>("/admin/v1/overview")
    .then((overview) => replace(panel, statusTable(overview), chart(overview)))
    // The list below reads the same database with the same rights and says
    // what went wrong (a requester is told the console is for operators):
    // saying it here too would say it twice.
    .catch(() => panel.remove());
  return panel;
}

function statusTable(overview: Overview): HTMLElement {
  const oldest = new Map(overview.oldest.map((item) => [item.status, item]));
  return h("div", { class: "overview-statuses" },
    h("h2", {}, "Requests by status"),
    overview.statuses.length === 0
      ? h("p", { class: "hint" }, "No requests yet.")
      : h("table", { class: "list", id: "overview-statuses" },
        h("thead", {}, h("tr", {}, ["Status", "Requests", "Longest in it"].map((c) => h("th", {}, c)))),
        h("tbody", {}, overview.statuses.map(({ status, requests }) => {
          const longest = oldest.get(status);
          return h("tr", { "data-status": status },
            h("td", {}, badge(status)),
            h("td", {}, h("a", { href: `/ops${query({ status })}`, class: "count" }, String(requests))),
            h("td", { class: "oldest" }, longest
              ? [h("a", { href: `/operations/${longest.operationId}`, title: longest.operationId }, longest.operationId.slice(0, 8)),
                " for ", h("span", { title: when(longest.since) }, age(longest.since))]
              : "—"));
        }))));
}

/** Stacked bars, one per hour of the window, ending with the current hour. */
function chart(overview: Overview): HTMLElement {
  const hourMs = 3_600_000;
  const now = Math.floor(Date.now() / hourMs) * hourMs;
  const hours = Array.from({ length: overview.hours }, (_, i) => now - (overview.hours - 1 - i) * hourMs);
  const counts = new Map<string, number>();
  for (const { hour, status, requests } of overview.outcomes) {
    const group = GROUPS.find((g) => g.statuses.includes(status));
    if (!group) continue;
    const key = `${Date.parse(hour)}|${group.key}`;
    counts.set(key, (counts.get(key) ?? 0) + requests);
  }
  const totals = hours.map((start) => GROUPS.reduce((sum, g) => sum + (counts.get(`${start}|${g.key}`) ?? 0), 0));
  const highest = Math.max(1, ...totals);
  const [width, height, left, bottom] = [720, 160, 32, 20];
  const slot = (width - left) / hours.length;
  const scale = (height - bottom - 8) / highest;
  const graph = svg("svg", {
    id: "outcome-chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `Requests per hour by outcome over the last ${overview.hours} hours`,
  });
  graph.append(
    svg("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, stroke: "var(--line)" }),
    svg("text", { x: left - 4, y: 12, "text-anchor": "end", "font-size": 10, fill: "var(--muted)" }, String(highest)),
    svg("text", { x: left - 4, y: height - bottom, "text-anchor": "end", "font-size": 10, fill: "var(--muted)" }, "0"),
  );
  hours.forEach((start, i) => {
    const x = left + i * slot + 1;
    let y = height - bottom;
    for (const group of GROUPS) {
      const requests = counts.get(`${start}|${group.key}`) ?? 0;
      if (!requests) continue;
      const barHeight = requests * scale;
      y -= barHeight;
      const bar = svg("rect", {
        x, y, width: Math.max(1, slot - 2), height: barHeight, fill: group.colour,
        "data-hour": new Date(start).toISOString(), "data-outcome": group.key, "data-requests": requests,
      });
      bar.append(svg("title", {}, `${new Date(start).toLocaleString()}: ${requests} ${group.label}`));
      graph.append(bar);
    }
    if (i % 6 === 0 || i === hours.length - 1) {
      const label = new Date(start).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      graph.append(svg("text", { x: x + slot / 2, y: height - 6, "text-anchor": "middle", "font-size": 10, fill: "var(--muted)" }, label));
    }
  });
  return h("div", { class: "overview-chart" },
    h("h2", {}, `Outcomes per hour, last ${overview.hours} hours`),
    graph as unknown as HTMLElement,
    h("p", { class: "legend" }, GROUPS.map((g) =>
      h("span", { class: "legend-item" }, h("span", { class: "swatch", style: `background: ${g.colour}` }), ` ${g.label} `))));
}
