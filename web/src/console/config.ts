// The effective configuration, as the server resolved it (secrets redacted
// there): one row per key in effect, as a configuration file names it, with
// its value and whether a reload changes it (dynamic) or only a restart does
// (static).

import { get } from "../api";
import { h, replace } from "../dom";
import { adminError } from "./common";

interface Row {
  /** The key's path as a file writes it: `section.key`, then map keys. */
  path: string[];
  value: unknown;
}

/** The file's spelling of a key the server writes in camelCase; map keys (targets, buckets) stay. */
function fileKey(key: string): string {
  return /^[a-z][a-zA-Z0-9]*$/.test(key) ? key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`) : key;
}

/** One row per leaf value; objects open into their keys, lists stay one value. */
function rows(value: unknown, path: string[], out: Row[]): Row[] {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const entries = Object.entries(value as Record<string, unknown>);
    if (!entries.length) out.push({ path, value: null });
    for (const [key, inner] of entries) rows(inner, [...path, fileKey(key)], out);
  } else {
    out.push({ path, value });
  }
  return out;
}

/** Whether only a restart changes the key: the server lists whole sections and single keys. */
function isStatic(path: string[], staticKeys: string[]): boolean {
  return staticKeys.includes(path[0]) || staticKeys.includes(path.slice(0, 2).join("."));
}

/** A key as TOML writes it: parts with a dot (a target's key) quoted. */
function shown(path: string[]): string {
  return path.map((part) => (/^[A-Za-z0-9_-]+$/.test(part) ? part : JSON.stringify(part))).join(".");
}

function valueCell(value: unknown): HTMLElement {
  if (value === null || value === undefined || (Array.isArray(value) && !value.length)) {
    return h("td", { class: "muted" }, "none");
  }
  if (Array.isArray(value)) {
    return h("td", {}, value.map((item) => (typeof item === "object" ? JSON.stringify(item) : String(item))).join(", "));
  }
  return h("td", {}, String(value));
}

export function configTab(root: HTMLElement): void {
  replace(root, h("p", { class: "hint" }, "Loading…"));
  get<Record<string, unknown> & { staticKeys: string[] }>("/admin/v1/config").then(
    ({ staticKeys, ...config }) =>
      replace(root,
        h("p", { class: "hint" },
          "What this instance runs with now, after defaults, the file and the environment. Secrets are redacted. ",
          "Dynamic keys change on a reload of the file; static ones only on a restart."),
        h("table", { class: "list", id: "config" },
          h("thead", {}, h("tr", {}, h("th", {}, "Key"), h("th", {}, "Value"), h("th", {}, "Applies"))),
          h("tbody", {}, rows(config, [], []).map(({ path, value }) => {
            const kind = isStatic(path, staticKeys) ? "static" : "dynamic";
            return h("tr", { "data-key": shown(path), "data-applies": kind },
              h("td", {}, h("code", {}, shown(path))),
              valueCell(value),
              h("td", {}, kind));
          })))),
    (error) => replace(root, adminError(error)),
  );
}
