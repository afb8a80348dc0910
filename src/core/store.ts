import type {
  ApprovalRecord,
  ApprovalStatus,
  SessionGateRecord,
  SessionRecord,
  SnapshotGateRecord,
  SnapshotRecord,
  TenantPolicyRecord,
  TenantRecord,
  ToolDefinitionRecord,
} from './records.js';
import type { SessionState } from './state.js';

/**
 * The Store port: durable records. The embedded implementation is SQLite (src/store). Methods are
 * synchronous because the embedded store is; every write is durable when the call returns.
 */
export interface SessionFilter {
  tenantId?: string;
  states?: readonly SessionState[];
}

export interface SessionRepo {
  insert(r: SessionRecord): void;
  get(id: string): SessionRecord | undefined;
  list(filter?: SessionFilter): SessionRecord[];
  /** Replaces the record (matched by id). Throws NotFoundError when absent. */
  put(r: SessionRecord): void;
}

export interface SnapshotRepo {
  insert(r: SnapshotRecord): void;
  get(id: string): SnapshotRecord | undefined;
  list(filter?: { tenantId?: string; sessionId?: string }): SnapshotRecord[];
  delete(id: string): void;
}

export interface TenantRepo {
  insert(r: TenantRecord): void;
  get(id: string): TenantRecord | undefined;
  getByKeyHash(hash: string): TenantRecord | undefined;
  list(): TenantRecord[];
}

export interface PolicyRepo {
  get(tenantId: string): TenantPolicyRecord | undefined;
  /** Inserts or replaces the tenant's policy. */
  put(r: TenantPolicyRecord): void;
}

export interface ToolRepo {
  get(tenantId: string, name: string): ToolDefinitionRecord | undefined;
  list(tenantId: string): ToolDefinitionRecord[];
  /** Inserts or replaces (tenantId, name). */
  put(r: ToolDefinitionRecord): void;
}

export interface SessionGateRepo {
  get(sessionId: string): SessionGateRecord | undefined;
  /** Inserts or replaces the session's row. */
  put(r: SessionGateRecord): void;
}

/** Deleting a snapshot (SnapshotRepo.delete) deletes its gate copy too. */
export interface SnapshotGateRepo {
  get(snapshotId: string): SnapshotGateRecord | undefined;
  insert(r: SnapshotGateRecord): void;
}

export interface ApprovalFilter {
  tenantId?: string;
  sessionId?: string;
  statuses?: readonly ApprovalStatus[];
}

export interface ApprovalRepo {
  insert(r: ApprovalRecord): void;
  get(id: string): ApprovalRecord | undefined;
  /** Replaces the record (matched by id). Throws NotFoundError when absent. */
  put(r: ApprovalRecord): void;
  /** Oldest first. */
  list(filter?: ApprovalFilter): ApprovalRecord[];
  /** The newest approval of a session for one call (tool + canonical arguments). */
  latestFor(sessionId: string, argsDigest: string): ApprovalRecord | undefined;
  /** Pending approvals whose expiresAt is at or before `now`. */
  expiring(now: number): ApprovalRecord[];
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
  /** Runs fn in one transaction; nested calls join the outer one. */
  transaction<T>(fn: () => T): T;
  close(): void;
}

/** A time source; tests pass a fake one. */
export interface Clock {
  now(): number;
}
export const systemClock: Clock = { now: () => Date.now() };
