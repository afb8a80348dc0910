/**
 * The Store and AuditLog ports over PostgreSQL (`berth serve --database postgres://…`), the second
 * implementation beside the embedded SQLite store. Records are the same rows in the same schema versions
 * (migrations.ts). A write is durable when its promise resolves: PostgreSQL commits only after its WAL is
 * flushed (synchronous_commit=on, the server's default, which Berth checks at open and refuses to run
 * without).
 */
import pg from 'pg';
import { AppError, ConfigError } from '../../core/errors.js';
import { systemClock, type Clock, type Store, type TransactionOptions } from '../../core/store.js';
import type { ApprovalRepo, PolicyRepo, PortLinkRepo, SessionGateRepo, SessionRepo, SnapshotGateRepo, SnapshotRepo, TenantRepo, ToolRepo, WatchLinkRepo } from '../../core/store.js';
import { PgAuditLog } from './audit.js';
import { applyPgMigrations, PG_MIGRATIONS } from './migrations.js';
import { PgApprovalRepo, PgPolicyRepo, PgSessionGateRepo, PgSessionRepo, PgSnapshotGateRepo, PgSnapshotRepo, PgTenantRepo, PgToolRepo } from './repos.js';
import { PgPortLinkRepo } from './port-links.js';
import { PgWatchLinkRepo } from './watch-links.js';
import { PgScope } from './scope.js';
import { PgIdempotencyRepo } from './idempotency.js';
import type { IdempotencyRepo } from '../../core/idempotency.js';

export interface PostgresStoreOptions {
  /** `postgres://user[:password]@host[:port]/database[?…]` (also `postgresql://`). */
  url: string;
  /** Source of audit timestamps. Default: systemClock. */
  clock?: Clock;
  /** Head anchor file for the audit chain (e.g. `<data>/audit-head`). Default: none. */
  anchorPath?: string;
  /** Pooled connections. Default 10. */
  maxConnections?: number;
}

/** int8 (BIGINT) columns hold millisecond times and seqs, far below 2^53: read them as numbers. */
const INT8_OID = 20;
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === INT8_OID ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format ?? 'text')) as pg.CustomTypesConfig['getTypeParser'],
};

export function isPostgresUrl(s: string): boolean {
  return /^postgres(ql)?:\/\//.test(s);
}

/** Connects, checks durability settings, migrates. Throws ConfigError when the database cannot be used. */
export async function openPostgresStore(opts: PostgresStoreOptions): Promise<PostgresStore> {
  if (typeof opts.url !== 'string' || !isPostgresUrl(opts.url)) {
    throw new ConfigError('database: must be a postgres:// or postgresql:// URL', { details: { field: 'database' } });
  }
  const max = opts.maxConnections ?? 10;
  if (!Number.isSafeInteger(max) || max < 2) throw new ConfigError('maxConnections: an integer of at least 2', { details: { field: 'maxConnections' } });
  const pool = new pg.Pool({ connectionString: opts.url, max, types, application_name: 'berth' });
  pool.on('error', () => undefined); // an idle client's connection died: the pool replaces it; the next query reports
  let client: pg.PoolClient | undefined;
  try {
    client = await pool.connect();
    const sync = (await client.query<{ synchronous_commit: string }>('SHOW synchronous_commit')).rows[0]?.synchronous_commit;
    const fsync = (await client.query<{ fsync: string }>('SHOW fsync')).rows[0]?.fsync;
    if (sync === 'off' || fsync === 'off') {
      throw new ConfigError(`the database does not make commits durable (synchronous_commit=${sync}, fsync=${fsync})`, { details: { field: 'database' } });
    }
    const schema = await applyPgMigrations(client);
    client.release();
    client = undefined;
    const store = new PostgresStore({ pool, clock: opts.clock ?? systemClock, schemaVersion: schema.to, ...(opts.anchorPath ? { anchorPath: opts.anchorPath } : {}) });
    await store.audit.open();
    return store;
  } catch (e) {
    client?.release();
    await pool.end().catch(() => undefined);
    if (e instanceof AppError) throw e;
    throw new ConfigError(`cannot use database ${redact(opts.url)}: ${(e as Error).message}`, { details: { field: 'database' }, cause: e });
  }
}

/** The URL without its password, for messages. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://…';
  }
}

interface PostgresStoreParts {
  pool: pg.Pool;
  clock: Clock;
  schemaVersion: number;
  anchorPath?: string;
}

export class PostgresStore implements Store {
  readonly schemaVersion: number;
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
  readonly idempotency: IdempotencyRepo;
  readonly #idempotency: PgIdempotencyRepo;
  readonly audit: PgAuditLog;
  readonly #scope: PgScope;
  #closed = false;

  constructor(parts: PostgresStoreParts) {
    const scope = new PgScope(parts.pool);
    this.#scope = scope;
    this.schemaVersion = parts.schemaVersion;
    this.sessions = new PgSessionRepo(scope);
    this.snapshots = new PgSnapshotRepo(scope);
    this.tenants = new PgTenantRepo(scope);
    this.policies = new PgPolicyRepo(scope);
    this.tools = new PgToolRepo(scope);
    this.gates = new PgSessionGateRepo(scope);
    this.snapshotGates = new PgSnapshotGateRepo(scope);
    this.approvals = new PgApprovalRepo(scope);
    this.portLinks = new PgPortLinkRepo(scope);
    this.watchLinks = new PgWatchLinkRepo(scope);
    this.#idempotency = new PgIdempotencyRepo(scope);
    this.idempotency = this.#idempotency;
    this.audit = new PgAuditLog({ scope, clock: parts.clock, log: (line) => void process.stderr.write(`berth store: ${line}\n`), ...(parts.anchorPath ? { anchorPath: parts.anchorPath } : {}) });
  }

  /**
   * One transaction on one pooled connection (READ COMMITTED). Calls made inside fn, through the store or
   * its audit log, run on it; other callers' transactions run side by side, so a read-modify-write of a row
   * another writer may change reads it with `{ forUpdate: true }`. A nested call is a SAVEPOINT. Unlike
   * SQLite, a statement that fails inside a transaction fails the whole transaction (PostgreSQL refuses
   * further statements), even if fn catches the error; wrap such a statement in a nested transaction.
   */
  /** 'deferred' durability is taken as 'full' here: every commit waits for PostgreSQL's WAL flush. */
  transaction<T>(fn: (tx: Store) => Promise<T>, _opts?: TransactionOptions): Promise<T> {
    return this.#scope.transaction(() => fn(this));
  }

  /** Idempotent; waits for pooled connections to be returned. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#idempotency.holding();
    await this.#idempotency.releaseHeld();
    await this.#scope.pool.end();
    await this.flushed().catch(() => undefined); // a failed write was logged; the files lag, which the next open accepts
  }

  /** Resolves once the anchor and ledger files hold every committed head; rejects if the last write of either failed. */
  async flushed(): Promise<void> {
    await this.audit.anchorSettled();
    await this.audit.tree.ledgerSettled();
  }
}

export { PG_MIGRATIONS };
