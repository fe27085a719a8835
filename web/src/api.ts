// Every call to changegate goes through here: one error shape (SPEC §2:
// `{code, message, requestId}`, with `operationId` naming the change request
// in the way of an `IN_PROGRESS`, and `fields` every failing field of an
// `INVALID_ARGUMENT`) and, in the demo only, the chosen identity.

/** One failing field of a 400: `field` is its path, like `params.max_connections`. */
export interface FieldError {
  field: string;
  message: string;
}

export interface ErrorBody {
  code: string;
  message: string;
  requestId?: string;
  operationId?: string;
  fields?: FieldError[];
}

/** A non-2xx answer. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId?: string,
    readonly operationId?: string,
    /** Every failing field, as the body lists them (empty when it lists none). */
    readonly fields: FieldError[] = [],
  ) {
    super(message);
  }

  /** The field a 400 names (messages read "field `reason`: ..."), with the rest of the message. */
  get field(): { name: string; message: string } | null {
    const match = /^field `([^`]+)`: (.*)$/s.exec(this.message);
    return this.status === 400 && match ? { name: match[1], message: match[2] } : null;
  }

  /** Every field a 400 names: the body's `fields`, or else the one its message names. */
  get fieldErrors(): FieldError[] {
    if (this.fields.length) return this.fields;
    const one = this.field;
    return one ? [{ field: one.name, message: one.message }] : [];
  }

  /**
   * For the page: the message, and the HTTP request's id to quote to the
   * team, labelled so that it is not taken for a change request (whose id a
   * message may name too).
   */
  describe(): string {
    return this.requestId ? `${this.message} (support reference ${this.requestId})` : this.message;
  }
}

let demoUser: string | null = null;

/** In the demo, the identity header the page sends; elsewhere the auth proxy sets it. */
export function setDemoUser(user: string | null): void {
  demoUser = user;
}

/** Calls the API; resolves with the body of a 2xx, rejects with `ApiError` otherwise. */
export async function call<T>(
  method: "GET" | "POST" | "PATCH" | "DELETE",
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<T> {
  const sent: Record<string, string> = { Accept: "application/json", ...headers };
  if (body !== undefined) sent["Content-Type"] = "application/json";
  if (demoUser) sent["X-Auth-Request-User"] = demoUser;
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, "NETWORK", "changegate cannot be reached; check your connection and try again");
  }
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    const error = parsed as Partial<ErrorBody> | null;
    throw new ApiError(
      response.status,
      error?.code ?? `HTTP_${response.status}`,
      error?.message ?? `changegate answered ${response.status}`,
      error?.requestId,
      error?.operationId,
      fieldErrors(error?.fields),
    );
  }
  return parsed as T;
}

/** The well-formed entries of a body's `fields`; anything else is dropped. */
function fieldErrors(fields: unknown): FieldError[] {
  if (!Array.isArray(fields)) return [];
  return fields.filter(
    (f): f is FieldError =>
      typeof f === "object" && f !== null && typeof f.field === "string" && typeof f.message === "string",
  );
}

/** GET and return the body. */
export function get<T>(path: string): Promise<T> {
  return call<T>("GET", path);
}

/** A query string from the set values only. */
export function query(params: Record<string, string | number | null | undefined>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/** A fresh idempotency key: a retry of the same submission must not apply twice. */
export function newKey(): string {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
