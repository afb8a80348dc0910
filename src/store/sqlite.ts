import { chmodSync, closeSync, openSync } from 'node:fs';
import Database from 'better-sqlite3';
import type BetterSqlite3 from 'better-sqlite3';
import { AppError, ConfigError, NotFoundError } from '../core/errors.js';
import type { SessionRecord, SnapshotRecord, TenantRecord } from '../core/records.js';
import { systemClock } from '../core/store.js';
import type { IdempotencyRepo } from '../core/idempotency.js';
import type { ApprovalRepo, Clock, PolicyRepo, PortLinkRepo, SessionFilter, SessionGateRepo, SessionRepo, SnapshotGateRepo, SnapshotRepo, Store, TenantRepo, ToolRepo, TransactionOptions, WatchLinkRepo } from '../core/store.js';
import { SqliteAuditLog, anchorPathFor } from './audit.js';
import { SqlitePortLinkRepo } from './port-links.js';
import { SqliteApprovalRepo, SqlitePolicyRepo, SqliteSessionGateRepo, SqliteSnapshotGateRepo, SqliteToolRepo } from './gate-repos.js';
import { SqliteWatchLinkRepo } from './watch-links.js';
import { SqliteIdempotencyRepo } from './idempotency.js';
import { applyMigrations } from './migrations.js';
import { translateSqliteError } from './sqlite-errors.js';
import { TxScope, asyncRepo, type Syncify } from './sqlite-tx.js';
import { WalFlusher } from './sqlite-flush.js';

/**
 * The embedded Store: one SQLite file in WAL mode. Each record is stored as the columns it is filtered on
 * plus a JSON `data` column holding the rest. Every statement is prepared once, when the store opens.
 *
 * Durability: synchronous=FULL, so a write is on disk (the WAL is fsynced) when its call returns, as the
 * Store port promises; a transaction asked for 'deferred' durability commits at NORMAL and is fsynced in
 * the background (sqlite-flush.ts). Note that NORMAL would already survive a SIGKILL of the server (a committed WAL
 * frame is in the kernel's page cache); FULL is what survives a power loss or kernel crash.
 */
export interface SqliteStoreOptions {
  /** Database file path (its directory must exist), or ':memory:' for a private database without an anchor. */
  path: string;
  /** Source of audit timestamps. Default: systemClock. */
  clock?: Clock;
}

/** Milliseconds a writer waits for another connection's lock before failing with 'unavailable'. */
const BUSY_TIMEOUT_MS = 5000;

/**
 * Every statement this module prepares stays reachable for the life of the process. better-sqlite3 12.x
 * built Statement and Database on the raw node::ObjectWrap, whose destructor on Node 24 aborts the process
 * (`Assertion failed: (env) != nullptr` in node::RemoveEnvironmentCleanupHook) when V8 finalizes one outside
 * a JS context; 13.x is built on Node-API, which does not. The statements are still kept, at no cost (a
 * server opens one store and prepares its statements, about a hundred, once), so that a finalizer of this
 * module's never runs on a hot path whatever the binding does.
 */
const KEPT_STATEMENTS: unknown[] = [];

function keepStatements(db: BetterSqlite3.Database): void {
  const prepare = db.prepare.bind(db) as (source: string) => BetterSqlite3.Statement;
  (db as unknown as { prepare: (source: string) => BetterSqlite3.Statement }).prepare = (source: string) => {
    const st = prepare(source);
    KEPT_STATEMENTS.push(st);
    return st;
  };
}

export function openSqliteStore(opts: SqliteStoreOptions): SqliteStore {
  if (typeof opts.path !== 'string' || opts.path === '') {
    throw new ConfigError('store path must be a file path or ":memory:"', { details: { field: 'path' } });
  }
  const clock = opts.clock ?? systemClock;
  let db: BetterSqlite3.Database;
  try {
    // 0600: the database holds token hashes and the environments given at create. SQLite gives its -wal
    // and -shm files the database file's mode.
    if (opts.path !== ':memory:') closeSync(openSync(opts.path, 'a', 0o600));
    if (opts.path !== ':memory:') chmodSync(opts.path, 0o600);
    db = new Database(opts.path, { timeout: BUSY_TIMEOUT_MS });
    keepStatements(db);
  } catch (e) {
    throw new ConfigError(`cannot open database ${opts.path}`, { details: { path: opts.path }, cause: e });
  }
  try {
    // Triggers and views in a file someone else may have written must not call application functions.
    db.exec('PRAGMA trusted_schema = OFF');
    const mode = db.prepare('PRAGMA journal_mode = WAL').pluck().get();
    if (opts.path !== ':memory:' && mode !== 'wal') {
      throw new ConfigError(`database ${opts.path} cannot use WAL mode (got ${String(mode)})`, { details: { path: opts.path } });
    }
    db.exec('PRAGMA synchronous = FULL');
    // Deleted and overwritten content is zeroed, not left in free pages: a session's environment values
    // (secrets, blanked when it ends) must not linger in the file (issue 12 §3).
    db.exec('PRAGMA secure_delete = ON');
    const schema = applyMigrations(db);
    return new SqliteStore({ db, path: opts.path, clock, schemaVersion: schema.to });
  } catch (e) {
    db.close();
    if (e instanceof AppError) throw e;
    throw new ConfigError(`cannot use database ${opts.path}`, { details: { path: opts.path }, cause: e });
  }
}

function parseData(raw: string, table: string, id: string): Record<string, unknown> {
  try {
    return JSON.parse(raw) as Record<string, unknown>;
  } catch (e) {
    throw new AppError('internal', `stored ${table} record is unreadable`, { details: { table, id }, cause: e });
  }
}

interface SessionRow {
  id: string;
  tenant_id: string;
  state: string;
  data: string;
}

type SessionData = Omit<SessionRecord, 'id' | 'tenantId' | 'state'>;

function sessionFromRow(row: SessionRow): SessionRecord {
  const rest = parseData(row.data, 'sessions', row.id) as unknown as SessionData;
  return { id: row.id, tenantId: row.tenant_id, state: row.state as SessionRecord['state'], ...rest };
}

class SqliteSessionRepo implements Syncify<SessionRepo> {
  readonly #insert: BetterSqlite3.Statement<[string, string, string, string]>;
  readonly #put: BetterSqlite3.Statement<[{ id: string; tenantId: string; state: string; data: string }]>;
  readonly #get: BetterSqlite3.Statement<[string], SessionRow>;
  /** Keyed by which of tenantId (t) and states (s) the list filters on. */
  readonly #list: Record<'' | 't' | 's' | 'ts', BetterSqlite3.Statement<[Record<string, unknown>], SessionRow>>;

  constructor(db: BetterSqlite3.Database) {
    this.#insert = db.prepare('INSERT INTO sessions (id, tenant_id, state, data) VALUES (?, ?, ?, ?)');
    this.#put = db.prepare('UPDATE sessions SET tenant_id = @tenantId, state = @state, data = @data WHERE id = @id');
    this.#get = db.prepare('SELECT id, tenant_id, state, data FROM sessions WHERE id = ?');
    const q = (where: string) =>
      db.prepare<[Record<string, unknown>], SessionRow>(`SELECT id, tenant_id, state, data FROM sessions ${where} ORDER BY rowid`);
    const inStates = 'state IN (SELECT value FROM json_each(@states))';
    this.#list = {
      '': q(''),
      t: q('WHERE tenant_id = @tenantId'),
      s: q(`WHERE ${inStates}`),
      ts: q(`WHERE tenant_id = @tenantId AND ${inStates}`),
    };
  }

  static #encode(r: SessionRecord): [string, string, string, string] {
    const { id, tenantId, state, ...rest } = r;
    return [id, tenantId, state, JSON.stringify(rest)];
  }

  insert(r: SessionRecord): void {
    try {
      this.#insert.run(...SqliteSessionRepo.#encode(r));
    } catch (e) {
      translateSqliteError(e, { kind: 'session', id: r.id });
    }
  }

  get(id: string): SessionRecord | undefined {
    const row = this.#get.get(id);
    return row && sessionFromRow(row);
  }

  list(filter: SessionFilter = {}): SessionRecord[] {
    if (filter.states !== undefined && filter.states.length === 0) return [];
    const key = `${filter.tenantId !== undefined ? 't' : ''}${filter.states !== undefined ? 's' : ''}` as '' | 't' | 's' | 'ts';
    const params = { tenantId: filter.tenantId, states: JSON.stringify(filter.states ?? []) };
    return this.#list[key].all(params).map(sessionFromRow);
  }

  put(r: SessionRecord): void {
    let changes: number;
    try {
      const [id, tenantId, state, data] = SqliteSessionRepo.#encode(r);
      changes = this.#put.run({ id, tenantId, state, data }).changes;
    } catch (e) {
      translateSqliteError(e, { kind: 'session', id: r.id });
    }
    if (changes === 0) throw new NotFoundError('session', r.id);
  }
}

interface SnapshotRow {
  id: string;
  tenant_id: string;
  session_id: string;
  kind: string;
  data: string;
}

type SnapshotData = Omit<SnapshotRecord, 'id' | 'tenantId' | 'sessionId' | 'kind'>;

function snapshotFromRow(row: SnapshotRow): SnapshotRecord {
  const rest = parseData(row.data, 'snapshots', row.id) as unknown as SnapshotData;
  return { id: row.id, tenantId: row.tenant_id, sessionId: row.session_id, kind: row.kind as SnapshotRecord['kind'], ...rest };
}

class SqliteSnapshotRepo implements Syncify<SnapshotRepo> {
  readonly #insert: BetterSqlite3.Statement<[string, string, string, string, string]>;
  readonly #get: BetterSqlite3.Statement<[string], SnapshotRow>;
  readonly #delete: BetterSqlite3.Statement<[string]>;
  /** Keyed by which of tenantId (t) and sessionId (s) the list filters on. */
  readonly #list: Record<'' | 't' | 's' | 'ts', BetterSqlite3.Statement<[Record<string, unknown>], SnapshotRow>>;

  constructor(db: BetterSqlite3.Database) {
    const cols = 'id, tenant_id, session_id, kind, data';
    this.#insert = db.prepare(`INSERT INTO snapshots (${cols}) VALUES (?, ?, ?, ?, ?)`);
    this.#get = db.prepare(`SELECT ${cols} FROM snapshots WHERE id = ?`);
    this.#delete = db.prepare('DELETE FROM snapshots WHERE id = ?');
    const q = (where: string) =>
      db.prepare<[Record<string, unknown>], SnapshotRow>(`SELECT ${cols} FROM snapshots ${where} ORDER BY rowid`);
    this.#list = {
      '': q(''),
      t: q('WHERE tenant_id = @tenantId'),
      s: q('WHERE session_id = @sessionId'),
      ts: q('WHERE tenant_id = @tenantId AND session_id = @sessionId'),
    };
  }

  insert(r: SnapshotRecord): void {
    const { id, tenantId, sessionId, kind, ...rest } = r;
    try {
      this.#insert.run(id, tenantId, sessionId, kind, JSON.stringify(rest));
    } catch (e) {
      translateSqliteError(e, { kind: 'snapshot', id });
    }
  }

  get(id: string): SnapshotRecord | undefined {
    const row = this.#get.get(id);
    return row && snapshotFromRow(row);
  }

  list(filter: { tenantId?: string; sessionId?: string } = {}): SnapshotRecord[] {
    const key = `${filter.tenantId !== undefined ? 't' : ''}${filter.sessionId !== undefined ? 's' : ''}` as '' | 't' | 's' | 'ts';
    return this.#list[key].all({ tenantId: filter.tenantId, sessionId: filter.sessionId }).map(snapshotFromRow);
  }

  /** Idempotent: deleting an absent id does nothing (like SnapshotStore.delete). */
  delete(id: string): void {
    try {
      this.#delete.run(id);
    } catch (e) {
      translateSqliteError(e, { kind: 'snapshot', id });
    }
  }
}

interface TenantRow {
  id: string;
  api_key_hash: string;
  data: string;
}

function tenantFromRow(row: TenantRow): TenantRecord {
  const rest = parseData(row.data, 'tenants', row.id) as unknown as Omit<TenantRecord, 'id' | 'apiKeyHash'>;
  return { id: row.id, apiKeyHash: row.api_key_hash, ...rest };
}

class SqliteTenantRepo implements Syncify<TenantRepo> {
  readonly #insert: BetterSqlite3.Statement<[string, string, string]>;
  readonly #get: BetterSqlite3.Statement<[string], TenantRow>;
  readonly #byKey: BetterSqlite3.Statement<[string], TenantRow>;
  readonly #list: BetterSqlite3.Statement<[], TenantRow>;
  readonly #put: BetterSqlite3.Statement<[string, string]>;

  constructor(db: BetterSqlite3.Database) {
    this.#put = db.prepare('UPDATE tenants SET data = ? WHERE id = ?');
    this.#insert = db.prepare('INSERT INTO tenants (id, api_key_hash, data) VALUES (?, ?, ?)');
    this.#get = db.prepare('SELECT id, api_key_hash, data FROM tenants WHERE id = ?');
    this.#byKey = db.prepare('SELECT id, api_key_hash, data FROM tenants WHERE api_key_hash = ?');
    this.#list = db.prepare('SELECT id, api_key_hash, data FROM tenants ORDER BY rowid');
  }

  /** A duplicate id or API key hash throws 'conflict'. */
  insert(r: TenantRecord): void {
    const { id, apiKeyHash, ...rest } = r;
    try {
      this.#insert.run(id, apiKeyHash, JSON.stringify(rest));
    } catch (e) {
      translateSqliteError(e, { kind: 'tenant', id });
    }
  }

  get(id: string): TenantRecord | undefined {
    const row = this.#get.get(id);
    return row && tenantFromRow(row);
  }

  getByKeyHash(hash: string): TenantRecord | undefined {
    const row = this.#byKey.get(hash);
    return row && tenantFromRow(row);
  }

  list(): TenantRecord[] {
    return this.#list.all().map(tenantFromRow);
  }

  put(r: TenantRecord): void {
    const { id, apiKeyHash: _key, ...rest } = r;
    if (this.#put.run(JSON.stringify(rest), id).changes === 0) throw new NotFoundError('tenant', id);
  }
}

interface SqliteStoreParts {
  db: BetterSqlite3.Database;
  path: string;
  clock: Clock;
  schemaVersion: number;
}

/** Built by openSqliteStore(), which configures and migrates the database first. */
export class SqliteStore implements Store {
  readonly path: string;
  /** Schema version after migration (the length of MIGRATIONS). */
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
  readonly audit: SqliteAuditLog;
  readonly #db: BetterSqlite3.Database;
  readonly #scope = new TxScope();
  /** Makes deferred commits durable; undefined for an in-memory database. */
  readonly #flusher: WalFlusher | undefined;
  /** A deferred commit came after the last full one (so the flusher has something a full commit did not cover). */
  #deferredSinceFull = false;

  constructor(parts: SqliteStoreParts) {
    const db = parts.db;
    const scope = this.#scope;
    this.#db = db;
    this.path = parts.path;
    this.schemaVersion = parts.schemaVersion;
    this.sessions = asyncRepo<SessionRepo>(new SqliteSessionRepo(db), scope);
    this.snapshots = asyncRepo<SnapshotRepo>(new SqliteSnapshotRepo(db), scope);
    this.tenants = asyncRepo<TenantRepo>(new SqliteTenantRepo(db), scope);
    this.policies = asyncRepo<PolicyRepo>(new SqlitePolicyRepo(db), scope);
    this.tools = asyncRepo<ToolRepo>(new SqliteToolRepo(db), scope);
    this.gates = asyncRepo<SessionGateRepo>(new SqliteSessionGateRepo(db), scope);
    this.snapshotGates = asyncRepo<SnapshotGateRepo>(new SqliteSnapshotGateRepo(db), scope);
    this.approvals = asyncRepo<ApprovalRepo>(new SqliteApprovalRepo(db), scope);
    this.portLinks = asyncRepo<PortLinkRepo>(new SqlitePortLinkRepo(db), scope);
    this.watchLinks = asyncRepo<WatchLinkRepo>(new SqliteWatchLinkRepo(db), scope);
    this.idempotency = asyncRepo<IdempotencyRepo>(new SqliteIdempotencyRepo(db), scope);
    const anchorPath = anchorPathFor(parts.path);
    const log = (line: string): void => void process.stderr.write(`berth store: ${line}\n`);
    this.audit = new SqliteAuditLog({ db, clock: parts.clock, scope, log, ...(anchorPath === undefined ? {} : { anchorPath }) });
    if (anchorPath !== undefined) {
      this.#flusher = new WalFlusher({
        walPath: `${parts.path}-wal`,
        capture: () => this.audit.durableMark(),
        durable: (m) => this.audit.markDurable(m),
        covered: () => !this.#deferredSinceFull,
        log,
      });
    }
  }

  /**
   * Runs fn in one IMMEDIATE transaction and resolves to its result after the COMMIT. While fn runs (across
   * its awaits) the transaction holds the connection: calls made inside it run at once, calls from elsewhere
   * wait until it ends, so two transactions never interleave. A nested call runs as a SAVEPOINT inside the
   * outer transaction: if it throws, only its own changes are undone, and the outer one decides whether
   * everything commits. Audit entries appended inside move the head anchor and the signed-head ledger once
   * the COMMIT is durable, in the background (FileSlot): flushed() waits for them.
   */
  async transaction<T>(fn: (tx: Store) => Promise<T>, opts: TransactionOptions = {}): Promise<T> {
    const open = this.#scope.current();
    if (open) return this.#savepoint(open, fn);
    // A deferred commit skips the WAL fsync (synchronous=NORMAL for this COMMIT only); #flusher makes it
    // durable in the background. In memory there is nothing to sync.
    const deferred = opts.durability === 'deferred' && this.#flusher !== undefined;
    await this.#scope.lock.acquire();
    const frame = { active: true, savepoints: 0 };
    try {
      let result: T;
      // SQLite reads the level at COMMIT but refuses to change it inside a transaction: set around it (the
      // connection is this transaction's alone until the lock is released).
      if (deferred) this.#db.exec('PRAGMA synchronous = NORMAL');
      try {
        this.#db.exec('BEGIN IMMEDIATE');
        result = await this.#scope.within(frame, () => fn(this));
        frame.active = false;
        this.audit.beforeCommit();
        this.#db.exec('COMMIT');
      } catch (e) {
        frame.active = false;
        if (this.#db.inTransaction) this.#db.exec('ROLLBACK');
        this.audit.afterRollback();
        translateSqliteError(e, { kind: 'transaction' });
      } finally {
        if (deferred) this.#db.exec('PRAGMA synchronous = FULL');
      }
      this.audit.afterCommit(!deferred);
      this.#deferredSinceFull = deferred;
      if (deferred) this.#flusher?.schedule();
      return result;
    } finally {
      this.#scope.lock.release();
    }
  }

  /**
   * Resolves once every commit made so far is on disk, with the anchor and ledger files moved to it; rejects
   * ('unavailable') if the last write of either failed.
   */
  async flushed(): Promise<void> {
    await this.#flusher?.drain();
    await this.audit.anchorSettled();
    await this.audit.tree.ledgerSettled();
  }

  async #savepoint<T>(frame: { savepoints: number }, fn: (tx: Store) => Promise<T>): Promise<T> {
    const name = `berth_sp${++frame.savepoints}`;
    this.#db.exec(`SAVEPOINT ${name}`);
    try {
      const result = await fn(this);
      this.#db.exec(`RELEASE ${name}`);
      return result;
    } catch (e) {
      if (this.#db.inTransaction) {
        this.#db.exec(`ROLLBACK TO ${name}`);
        this.#db.exec(`RELEASE ${name}`);
        this.audit.afterSavepointRollback(); // it may have undone appends
      }
      throw e;
    }
  }

  /** Idempotent. Waits for a transaction in progress to end, and for deferred commits to reach the disk. */
  async close(): Promise<void> {
    await this.#flusher?.drain();
    await this.#scope.run(() => {
      if (this.#db.open) this.#db.close();
    });
    // A failed write of the anchor or ledger was logged; they lag, which the next open accepts.
    await this.flushed().catch(() => undefined);
  }
}
