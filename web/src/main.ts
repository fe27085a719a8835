// The app shell: navigation, the demo user switcher, and a router over
// history paths (the server answers any extensionless navigation with this
// page, so every path below can be bookmarked and reloaded).

import "./style.css";
import { setDemoUser } from "./api";
import { h, replace } from "./dom";
import { navigate } from "./nav";
import { applyPage } from "./pages/apply";
import { bindingsPage } from "./pages/bindings";
import { consolePage } from "./pages/console";
import { operationPage } from "./pages/operation";

/** A view renders into `root` and may return a function that stops its timers. */
type View = (root: HTMLElement, params: Record<string, string>) => (() => void) | void;

const ROUTES: [RegExp, View][] = [
  [/^\/$/, applyPage],
  [/^\/bindings$/, bindingsPage],
  [/^\/operations\/(?<id>[^/]+)$/, operationPage],
  [/^\/ops(?:\/(?<tab>[a-z-]+))?$/, consolePage],
];

const DEMO_USERS = ["alice", "admin"];
const USER_KEY = "changegate.demoUser";

let stopView: (() => void) | void;

function render(): void {
  stopView?.();
  stopView = undefined;
  const main = document.getElementById("main");
  if (!main) return;
  main.replaceChildren();
  for (const link of document.querySelectorAll<HTMLAnchorElement>("nav a")) {
    const here = link.pathname === "/" ? location.pathname === "/" : location.pathname.startsWith(link.pathname);
    link.classList.toggle("current", here);
  }
  for (const [pattern, view] of ROUTES) {
    const match = pattern.exec(location.pathname);
    if (match) {
      stopView = view(main, { ...match.groups });
      return;
    }
  }
  replace(main, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "/" }, "Apply for a change")));
}

function demoSwitcher(): HTMLElement | null {
  const meta = document.querySelector<HTMLMetaElement>('meta[name="changegate-demo-identity"]');
  if (meta?.content !== "on") return null;
  const stored = localStorage.getItem(USER_KEY);
  const user = stored && DEMO_USERS.includes(stored) ? stored : DEMO_USERS[0];
  setDemoUser(user);
  const select = h(
    "select",
    {
      id: "demo-user",
      "aria-label": "Demo user",
      onchange: (event: Event) => {
        const chosen = (event.target as HTMLSelectElement).value;
        localStorage.setItem(USER_KEY, chosen);
        setDemoUser(chosen);
        render();
      },
    },
    DEMO_USERS.map((name) => h("option", { value: name, selected: name === user }, name)),
  );
  return h("label", { class: "demo-user", title: "Demo only: the identity this page sends" }, "Demo user ", select);
}

function shell(): void {
  const app = document.getElementById("app");
  if (!app) return;
  replace(
    app,
    h(
      "header",
      {},
      h("a", { class: "brand", href: "/" }, "changegate"),
      h(
        "nav",
        {},
        h("a", { href: "/" }, "Apply"),
        h("a", { href: "/bindings" }, "My bindings"),
        h("a", { href: "/ops" }, "Ops console"),
      ),
      demoSwitcher(),
    ),
    h("main", { id: "main" }),
  );
  // Internal links move within the app; modified clicks keep their browser meaning.
  app.addEventListener("click", (event) => {
    const link = (event.target as Element).closest("a");
    if (
      !link || link.target || link.origin !== location.origin || event.defaultPrevented ||
      event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey
    ) {
      return;
    }
    event.preventDefault();
    navigate(link.pathname + link.search);
  });
  window.addEventListener("popstate", render);
}

// The assets loaded: forget the cache-busting retry, and drop its parameter
// so a bookmark of this page stays clean.
try {
  sessionStorage.removeItem("changegate.assetReloadAt");
} catch {
  // No storage: the page never reloads by itself, so there is nothing to forget.
}
const url = new URL(location.href);
if (url.searchParams.has("_reload")) {
  url.searchParams.delete("_reload");
  history.replaceState(null, "", url.pathname + url.search + url.hash);
}
shell();
render();
