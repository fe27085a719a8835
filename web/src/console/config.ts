// The effective configuration, as the server resolved it (secrets redacted there).

import { get } from "../api";
import { h, replace } from "../dom";
import { adminError } from "./common";

export function configTab(root: HTMLElement): void {
  replace(root, h("p", { class: "hint" }, "Loading…"));
  get<unknown>("/admin/v1/config").then(
    (config) =>
      replace(root,
        h("p", { class: "hint" }, "What this instance runs with now, after defaults, the file and the environment. Secrets are redacted."),
        h("pre", { id: "config" }, JSON.stringify(config, null, 2))),
    (error) => replace(root, adminError(error)),
  );
}
