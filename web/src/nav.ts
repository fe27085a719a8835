/** Moves to an app path without reloading the page; the shell re-renders on `popstate`. */
export function navigate(path: string): void {
  history.pushState(null, "", path);
  window.dispatchEvent(new PopStateEvent("popstate"));
}
