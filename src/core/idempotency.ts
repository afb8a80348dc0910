/**
 * The Idempotency-Key records (issue 7 §11): one row per tenant, route and key, written BEFORE the
 * request runs (state `started`) and finished with the answer it gave (state `done`). See
 * engine/idempotency.ts for the rules; this is the port the stores implement.
 */

/** How long a key is kept, ms (24 h, as Stripe). */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

export type IdempotencyState = 'started' | 'done';

export interface IdempotencyRecord {
  /** The principal's tenant; '' for root, which has none. */
  tenantId: string;
  /** Method and route template, e.g. `POST /v1/sessions/:session/snapshots`. */
  scope: string;
  /** SHA-256 hex of the client's key (1–255 printable ASCII characters); the key itself is not stored. */
  key: string;
  /** SHA-256 hex of method, path and canonical body. */
  fingerprint: string;
  state: IdempotencyState;
  /** The server process (engine instance) that runs or ran it. */
  owner: string;
  /** Ids of the records it created (sessions, a snapshot), noted before each record is written. */
  created: string[];
  /** ms since the epoch. */
  createdAt: number;
  /** ms since the epoch; the row is gone (or treated as gone) from then on. */
  expiresAt: number;
  /** The answer, once `done`: HTTP status and the JSON body, sealed (engine/idempotency.ts). */
  status?: number;
  body?: string;
}

export interface IdempotencyRepo {
  /** Inserts r unless a live row (expiresAt > now) for its tenant, scope and key exists; returns that row, or undefined when r was inserted. An expired row is replaced. */
  claim(r: IdempotencyRecord, now: number): Promise<IdempotencyRecord | undefined>;
  get(tenantId: string, scope: string, key: string): Promise<IdempotencyRecord | undefined>;
  /** Hands a `started` row from one owner to another; false when it is no longer `started` by `from`. */
  takeOver(tenantId: string, scope: string, key: string, from: string, to: string): Promise<boolean>;
  /** Adds an id to `created` of a `started` row owned by `owner`. */
  noteCreated(tenantId: string, scope: string, key: string, owner: string, id: string): Promise<void>;
  /** Marks the row `done` with its answer (only while `started` by `owner`). */
  complete(tenantId: string, scope: string, key: string, owner: string, answer: { status: number; body: string }): Promise<void>;
  /** Deletes the row while it is `started` by `owner` (the request did not run: the key is free again). */
  release(tenantId: string, scope: string, key: string, owner: string): Promise<void>;
  /** Deletes rows whose expiresAt is at or before now; returns how many. */
  deleteExpired(now: number): Promise<number>;
  /**
   * Marks `owner` (this process) as alive for as long as the store is open, so that ownerAlive() elsewhere
   * answers true. Idempotent.
   */
  holdOwner(owner: string): Promise<void>;
  /** Whether the process that marked `owner` still has the store open. */
  ownerAlive(owner: string): Promise<boolean>;
}
