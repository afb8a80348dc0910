import type { SessionRecord, SnapshotRecord, TenantRecord } from './records.js';
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

export interface Store {
  readonly sessions: SessionRepo;
  readonly snapshots: SnapshotRepo;
  readonly tenants: TenantRepo;
  /** Runs fn in one transaction; nested calls join the outer one. */
  transaction<T>(fn: () => T): T;
  close(): void;
}

/** A time source; tests pass a fake one. */
export interface Clock {
  now(): number;
}
export const systemClock: Clock = { now: () => Date.now() };
