// The JSON shapes of the API, as the handlers in src/http/api/ write them.

export interface Target {
  key: string;
  description: string;
  /** The parameter names: the keys of `paramsSchema.properties`. */
  params: string[];
  /** What the parameters may be; the apply form is generated from it. */
  paramsSchema?: JsonSchema;
  selfOnly: boolean;
}

/** A JSON value, as a schema's `enum` and `default` hold them. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/**
 * The part of JSON Schema (draft 2020-12) that targets use for their
 * parameters: an object of scalar properties. Other keywords may come along
 * and are ignored here; the server checks every submission anyway.
 */
export interface JsonSchema {
  type?: "object" | "string" | "integer" | "number" | "boolean";
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean;
  enum?: JsonValue[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  default?: JsonValue;
  description?: string;
  title?: string;
}

/** `GET /api/v1/access`: `window` is null when there is no time restriction. */
export interface Access {
  mode: "OPEN" | "TEST_WINDOW" | "CLOSED";
  open: boolean;
  window: { start: string; end: string; timezone: string } | { valid: false } | null;
}

export type Next = "WAIT" | "CONTACT_TEAM" | "REAPPLY" | "NONE";

export interface Operation {
  operationId: string;
  subjectId: string;
  targetKey: string;
  status: string;
  step: { code: number; name: string };
  next: Next;
  message: string;
  mergeRequest?: { iid: number; url?: string };
  /** The merge batch it is (or was last) in: its id, for links. */
  batchId?: number;
  /** That batch's number among its project's batches, as its MR title and the messages name it. */
  batchNumber?: number;
  /** While its batch is in the merge train: how many batches are ahead of it (0: the next to merge). */
  batchesAhead?: number;
  /** While it waits on the merge queue: its place and expected times. */
  queue?: QueuePlace;
  createdAt: string;
  updatedAt: string;
  /** The newer request for the same subject and target that took the binding over. */
  supersededBy?: string;
  /** The earliest time it may land, as its requester asked. */
  notBefore?: string;
  /** While it is SCHEDULED: what it waits for, and until when. */
  scheduled?: { waitsFor: "NOT_BEFORE" | "WINDOW" | "NO_WINDOW"; until?: string; description: string };
  /** An operator sent it to the merge queue's urgent lane. */
  urgent?: boolean;
  /** The request this one reverts. */
  revertOf?: string;
  /** The newest request that reverts this one. */
  revertedBy?: string;
  /** The binding's file on the target branch is not what changegate wrote. */
  drift?: { kind: "CHANGED" | "MISSING"; path: string; since: string; sinceCommit?: string };
  /** In the operators' list: the actions the server would accept now. */
  actions?: OperatorAction[];
  /** In the operators' list: actions an operator may look for that cannot succeed now, and why. */
  withheldActions?: { action: OperatorAction; reason: string }[];
}

/** A request's place in the merge queue, and when it is expected to land. */
export interface QueuePlace {
  /** Its batch's place: 1 is the next batch to merge. */
  position: number;
  /** Batches in the queue, its own included. */
  of: number;
  /** Its batch's number, once it is in one. */
  batch?: number;
  /** Absent while there is no estimate (see `basis`). */
  expectedMergeAt?: string;
  expectedDeployAt?: string;
  /** What the times come from, or why there are none yet. */
  basis: string;
}

/** An operator action on an operation. */
export type OperatorAction = "retry" | "fail" | "approve" | "reject";

/** One recorded step of an operation, oldest first. */
/** A step, or an event on the way that left the step as it was. */
export type EntryKind = "STEP" | "PIPELINE" | "APPROVAL" | "REBASE" | "MERGE" | "DEPLOY";

export interface HistoryEntry {
  kind: EntryKind;
  step: { code: number; name: string };
  status?: string;
  actor: string;
  message: string;
  /** A pipeline's status, the approving bot's number, a commit's sha. */
  detail?: string;
  /** Its page on GitLab. */
  url?: string;
  at: string;
}

/** Another request for the same subject and target (or this one). */
export interface Related {
  operationId: string;
  kind: "APPLY" | "CLOSE";
  status?: string;
  step: { code: number; name: string };
  /** Whether it holds the binding now; the others are superseded. */
  current: boolean;
  createdAt: string;
}

/** A request as of one moment: status, steps and relation from one read. */
export interface OperationTimeline {
  operation: Operation;
  items: HistoryEntry[];
  batchMembers?: number;
  relation: Related[];
}

export interface Submitted {
  code: "ACCEPTED" | "DUPLICATE_SUBMIT";
  operationId: string;
  status: string;
  next: Next;
}

export interface Binding {
  subjectId: string;
  targetKey: string;
  status: string;
  operationId: string;
  expiresAt?: string;
  updatedAt: string;
}

export interface Page<T> {
  items: T[];
  nextCursor?: string | null;
}

/** An audit entry: an operator action, done or refused. */
export interface AuditEntry {
  id: number | string;
  /** The authenticated operator who acted (or tried to). */
  actor: string;
  action: string;
  target: string;
  /** As sent (redacted, cut), without the keys the server reserves (`__…`). */
  params: Record<string, unknown> | null;
  /** `REFUSED`: the state did not allow it (answered 409); nothing changed. */
  outcome: "DONE" | "REFUSED";
  /** The message of the 409 answer; null when done. */
  refusalReason?: string | null;
  createdAt: string;
}

/** What an operator action answers. */
export interface ActionResult {
  code: string;
  operation?: Operation;
  operationId?: string;
  status?: string;
}

/** One batch of the merge queue (`GET /admin/v1/batches`). */
export interface Batch {
  /** For links and routes. */
  id: number;
  /** Its number among its project's batches (1, 2, 3, … without gaps): what people call it. */
  number: number;
  /** RUNNING, SUCCEEDED, FAILED or BLOCKED. */
  status: string;
  /** OPENING, PIPELINE, PASSED (waiting for the batches ahead) or MERGING: meaningful while RUNNING. */
  phase: string;
  project: string;
  /** Its place in its partition's merge train while active (1: the front). */
  trainPosition: number;
  /** The batch it was built on; absent when built on the target branch. */
  aheadBatchId?: number;
  /** The head its pipeline tests. */
  headSha?: string;
  /** How often it was built again (a batch ahead failed, or the target branch moved). */
  rebuilds: number;
  /** The half of a failed batch it retries, as a path of batch ids (`3a`, `3a/5b`); empty for a first try. */
  splitGroup: string;
  /** The same path, each failed batch with its number, first try first. */
  splitFrom: SplitStep[];
  mergeRequest?: { iid: number; url?: string | null };
  mergeSha?: string;
  message?: string;
  createdAt: string;
  updatedAt: string;
}

/** Half `half` of the failed batch `batchId`. */
export interface SplitStep {
  batchId: number;
  number: number;
  half: string;
}

/** One change of a batch's membership. */
export interface MembershipEvent {
  operationId: string;
  /** CLAIMED, MERGED, RELEASED, SPLIT (detail: the half's split group) or FAILED. */
  event: string;
  detail?: string | null;
  at: string;
}

/** `GET /admin/v1/batches/{id}`. */
export interface BatchDetail {
  batch: Batch;
  members: string[];
  history: MembershipEvent[];
}

/** `POST /admin/v1/batches/run`. */
export interface RoundResult {
  code: string;
  claimed: { batchId: number; batchNumber: number; members: number }[];
  slotOccupied: number;
  raced: number;
}

/** `GET /admin/v1/webhook-endpoints`: an endpoint, never with its secret. */
export interface WebhookEndpoint {
  id: number;
  url: string;
  description: string;
  /** Empty: every event type. */
  eventTypes: string[];
  enabled: boolean;
  disabledReason?: string | null;
  /** `closed`, `open` or `half_open`. */
  breaker: string;
  createdAt: string;
  updatedAt: string;
}

/** `POST /admin/v1/webhook-endpoints`: the only answer with the secret, besides rotate. */
export interface CreatedEndpoint {
  id: number;
  url: string;
  eventTypes: string[];
  description: string;
  secret: string;
}

/** `POST /admin/v1/webhook-endpoints/{id}/rotate`. */
export interface RotatedSecret {
  id: number;
  secret: string;
  previousSecretValidUntil?: string | null;
}

/** One row of an endpoint's delivery log. */
export interface WebhookDelivery {
  id: number;
  eventId: number;
  eventType: string;
  /** The operation whose status change the event reports. */
  operationId?: string | null;
  /** The binding that changed. */
  subjectId?: string | null;
  targetKey?: string | null;
  /** Its status before (null for a new binding) and after. */
  fromStatus?: string | null;
  toStatus?: string | null;
  webhookId: string;
  /** `queued`, `sending`, `delivered`, `failed` or `silent`. */
  status: string;
  attempts: number;
  nextAttemptAt: string;
  lastStatus?: number | null;
  lastError?: string | null;
  createdAt: string;
  updatedAt: string;
}

/** `GET /admin/v1/overview`: the ops console's first glance. */
export interface Overview {
  statuses: { status: string; requests: number }[];
  oldest: { status: string; operationId: string; since: string }[];
  hours: number;
  outcomes: { hour: string; status: string; requests: number }[];
}
