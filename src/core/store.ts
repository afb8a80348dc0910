import type {
  ApprovalRecord,
  ApprovalStatus,
  PortLinkRecord,
  SessionGateRecord,
  SessionRecord,
  SnapshotGateRecord,
  SnapshotRecord,
  TenantPolicyRecord,
  TenantRecord,
  ToolDefinitionRecord,
  WatchLinkRecord,
} from './records.js';
import type { SessionState } from './state.js';
import type { IdempotencyRepo } from './idempotency.js';

/**
 * The Store port: durable records. The embedded implementation is SQLite (src/store). Every method is
 * asynchronous, so a database in another process can stand behind the port; a write is durable when its
 * promise resolves (or, inside a transaction, when the transaction's promise resolves).
 */
export interface SessionFilter {
  tenantId?: string;
  states?: readonly SessionState[];
}

/**
 * For a read-modify-write inside transaction(): `forUpdate` holds the row until the transaction ends, so a
 * second writer (another connection, another host) waits instead of overwriting the change (PostgreSQL:
 * SELECT … FOR UPDATE). SQLite has one writer at a time, so there it changes nothing. Outside a
 * transaction it has no effect.
 */
export interface ReadOptions {
  forUpdate?: boolean;
}

export interface SessionRepo {
  insert(r: SessionRecord): Promise<void>;
  get(id: string, opts?: ReadOptions): Promise<SessionRecord | undefined>;
  list(filter?: SessionFilter): Promise<SessionRecord[]>;
  /** Replaces the record (matched by id). Throws NotFoundError when absent. */
  put(r: SessionRecord): Promise<void>;
}

export interface SnapshotRepo {
  insert(r: SnapshotRecord): Promise<void>;
  get(id: string): Promise<SnapshotRecord | undefined>;
  list(filter?: { tenantId?: string; sessionId?: string }): Promise<SnapshotRecord[]>;
  delete(id: string): Promise<void>;
}

export interface TenantRepo {
  insert(r: TenantRecord): Promise<void>;
  get(id: string): Promise<TenantRecord | undefined>;
  getByKeyHash(hash: string): Promise<TenantRecord | undefined>;
  list(): Promise<TenantRecord[]>;
  /** Replaces a tenant's record (name, quotas); the id and key hash stay. Throws not_found. */
  put(r: TenantRecord): Promise<void>;
}

export interface PolicyRepo {
  get(tenantId: string): Promise<TenantPolicyRecord | undefined>;
  /** Inserts or replaces the tenant's policy. */
  put(r: TenantPolicyRecord): Promise<void>;
}

export interface ToolRepo {
  get(tenantId: string, name: string): Promise<ToolDefinitionRecord | undefined>;
  list(tenantId: string): Promise<ToolDefinitionRecord[]>;
  /** Inserts or replaces (tenantId, name). */
  put(r: ToolDefinitionRecord): Promise<void>;
}

export interface SessionGateRepo {
  get(sessionId: string, opts?: ReadOptions): Promise<SessionGateRecord | undefined>;
  /** Inserts or replaces the session's row. */
  put(r: SessionGateRecord): Promise<void>;
}

/** Deleting a snapshot (SnapshotRepo.delete) deletes its gate copy too. */
export interface SnapshotGateRepo {
  get(snapshotId: string): Promise<SnapshotGateRecord | undefined>;
  insert(r: SnapshotGateRecord): Promise<void>;
}

export interface ApprovalFilter {
  tenantId?: string;
  sessionId?: string;
  statuses?: readonly ApprovalStatus[];
}

export interface ApprovalRepo {
  insert(r: ApprovalRecord): Promise<void>;
  get(id: string, opts?: ReadOptions): Promise<ApprovalRecord | undefined>;
  /** Replaces the record (matched by id). Throws NotFoundError when absent. */
  put(r: ApprovalRecord): Promise<void>;
  /** Oldest first. */
  list(filter?: ApprovalFilter): Promise<ApprovalRecord[]>;
  /** The newest approval of a session for one call (tool + canonical arguments). */
  latestFor(sessionId: string, argsDigest: string): Promise<ApprovalRecord | undefined>;
  /** Pending approvals whose expiresAt is at or before `now`. */
  expiring(now: number): Promise<ApprovalRecord[]>;
}

/** Port links (records.ts PortLinkRecord); rows are never deleted, a revoke sets revokedAt. */
export interface PortLinkRepo {
  insert(r: PortLinkRecord): Promise<void>;
  get(id: string): Promise<PortLinkRecord | undefined>;
  getByTokenHash(tokenHash: string): Promise<PortLinkRecord | undefined>;
  /** A session's links, oldest first. */
  list(sessionId: string): Promise<PortLinkRecord[]>;
  /** Replaces the record (matched by id). Throws NotFoundError when absent. */
  put(r: PortLinkRecord): Promise<void>;
}

export interface WatchLinkRepo {
  /** A duplicate id or token hash throws 'conflict'. */
  insert(r: WatchLinkRecord): Promise<void>;
  get(id: string): Promise<WatchLinkRecord | undefined>;
  getByTokenHash(hash: string): Promise<WatchLinkRecord | undefined>;
  /** A session's links, oldest first (revoked and expired ones too). */
  listBySession(sessionId: string): Promise<WatchLinkRecord[]>;
  /** Replaces the record (matched by id). Throws NotFoundError when absent. */
  put(r: WatchLinkRecord): Promise<void>;
}

/**
 * How durable a commit must be when transaction() resolves.
 *  - 'full' (the default): on disk. What must hold before an action runs (a gate's decision, a state
 *    transition) is written this way.
 *  - 'deferred': committed (visible to every reader, kept if this process dies) but possibly not yet on
 *    disk: the store makes it durable in the background within milliseconds, and the next 'full' commit
 *    carries it in any case. Only a power cut or kernel crash in that window can lose it. For writes that
 *    follow a durable one and whose loss in a power cut is caught (a tool's result after its fsynced
 *    decision; an Idempotency-Key claim, which the call's own decision commit then carries to disk).
 * A store may treat 'deferred' as 'full'. Anything derived from the audit log outside the database (the
 * head anchor, the signed-head ledger) moves only once the entries it names are on disk.
 */
export interface TransactionOptions {
  durability?: 'full' | 'deferred';
}

export interface Store {
  readonly sessions: SessionRepo;
  readonly snapshots: SnapshotRepo;
  readonly tenants: TenantRepo;
  readonly policies: PolicyRepo;
  readonly tools: ToolRepo;
  readonly gates: SessionGateRepo;
  readonly snapshotGates: SnapshotGateRepo;
  readonly approvals: ApprovalRepo;
  readonly portLinks: PortLinkRepo;
  readonly watchLinks: WatchLinkRepo;
  /** Idempotency-Key records (issue 7 §11). */
  readonly idempotency: IdempotencyRepo;
  /**
   * Runs fn in one transaction and resolves to its result once committed; if fn throws (or its promise
   * rejects) everything it wrote is rolled back and the error is rethrown. Every store and audit call made
   * while fn runs, through `tx` or through this store, is part of the transaction. A nested call joins the
   * outer transaction (as a savepoint: if the inner fn throws, only its own writes are undone).
   * `durability` (outermost call only; a nested call joins the outer one's) — see TransactionOptions.
   */
  transaction<T>(fn: (tx: Store) => Promise<T>, opts?: TransactionOptions): Promise<T>;
  /**
   * Resolves once every commit made so far is durable and the files outside the database that follow it
   * (the audit head anchor, the signed-head ledger: written in the background after commits) hold it;
   * rejects ('unavailable') if the last write of one of them failed.
   */
  flushed(): Promise<void>;
  /** Idempotent; waits for what flushed() waits for. */
  close(): Promise<void>;
}

/** A time source; tests pass a fake one. */
export interface Clock {
  now(): number;
}
export const systemClock: Clock = { now: () => Date.now() };
