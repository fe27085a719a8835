import { ApiError } from "../api";
import { h } from "../dom";

/** An admin call's failure, in words an operator can act on. */
export function adminError(error: unknown): HTMLElement {
  let text: string;
  if (error instanceof ApiError && error.status === 403) {
    text = "Only operators can use the console (the operator rule).";
  } else if (error instanceof ApiError && error.status === 401) {
    text = "Sign in first: changegate does not know who you are.";
  } else {
    text = error instanceof ApiError ? error.describe() : String(error);
  }
  return h("p", { class: "error", id: "console-error" }, text);
}
