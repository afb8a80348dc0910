/**
 * The gate's repos over the tables of migrations 2 and 3 (gate-migration.ts): tenant policies, operator
 * tools, per-session gate rows, approvals and the gate copies of snapshots. Statements are prepared once, when the store opens.
 */
import type BetterSqlite3 from 'better-sqlite3';
import { AppError, NotFoundError } from '../core/errors.js';
import type { ApprovalRecord, SessionGateRecord, SnapshotGateRecord, TenantPolicyRecord, ToolDefinitionRecord } from '../core/records.js';
import type { ApprovalFilter, ApprovalRepo, PolicyRepo, SessionGateRepo, SnapshotGateRepo, ToolRepo } from '../core/store.js';
import { translateSqliteError } from './sqlite-errors.js';
import type { Syncify } from './sqlite-tx.js';

function parse<T>(raw: string, table: string, id: string): T {
  try {
    return JSON.parse(raw) as T;
  } catch (e) {
    throw new AppError('internal', `stored ${table} record is unreadable`, { details: { table, id }, cause: e });
  }
}

interface PolicyRow {
  tenant_id: string;
  text: string;
  version: number;
  updated_at: number;
  updated_by: string;
}

export class SqlitePolicyRepo implements Syncify<PolicyRepo> {
  readonly #get: BetterSqlite3.Statement<[string], PolicyRow>;
  readonly #put: BetterSqlite3.Statement<[PolicyRow]>;

  constructor(db: BetterSqlite3.Database) {
    this.#get = db.prepare('SELECT tenant_id, text, version, updated_at, updated_by FROM tenant_policies WHERE tenant_id = ?');
    this.#put = db.prepare(
      'INSERT OR REPLACE INTO tenant_policies (tenant_id, text, version, updated_at, updated_by) VALUES (@tenant_id, @text, @version, @updated_at, @updated_by)',
    );
  }

  get(tenantId: string): TenantPolicyRecord | undefined {
    const r = this.#get.get(tenantId);
    return r && { tenantId: r.tenant_id, text: r.text, version: r.version, updatedAt: r.updated_at, updatedBy: r.updated_by };
  }

  put(r: TenantPolicyRecord): void {
    try {
      this.#put.run({ tenant_id: r.tenantId, text: r.text, version: r.version, updated_at: r.updatedAt, updated_by: r.updatedBy });
    } catch (e) {
      translateSqliteError(e, { kind: 'policy', id: r.tenantId });
    }
  }
}

interface KeyedRow {
  tenant_id: string;
  name: string;
  data: string;
}

export class SqliteToolRepo implements Syncify<ToolRepo> {
  readonly #get: BetterSqlite3.Statement<[string, string], KeyedRow>;
  readonly #list: BetterSqlite3.Statement<[string], KeyedRow>;
  readonly #put: BetterSqlite3.Statement<[string, string, string]>;

  constructor(db: BetterSqlite3.Database) {
    this.#get = db.prepare('SELECT tenant_id, name, data FROM tool_definitions WHERE tenant_id = ? AND name = ?');
    this.#list = db.prepare('SELECT tenant_id, name, data FROM tool_definitions WHERE tenant_id = ? ORDER BY name');
    this.#put = db.prepare('INSERT OR REPLACE INTO tool_definitions (tenant_id, name, data) VALUES (?, ?, ?)');
  }

  static #decode(row: KeyedRow): ToolDefinitionRecord {
    const rest = parse<Omit<ToolDefinitionRecord, 'tenantId' | 'name'>>(row.data, 'tool_definitions', `${row.tenant_id}/${row.name}`);
    return { tenantId: row.tenant_id, name: row.name, ...rest };
  }

  get(tenantId: string, name: string): ToolDefinitionRecord | undefined {
    const row = this.#get.get(tenantId, name);
    return row && SqliteToolRepo.#decode(row);
  }

  list(tenantId: string): ToolDefinitionRecord[] {
    return this.#list.all(tenantId).map((r) => SqliteToolRepo.#decode(r));
  }

  put(r: ToolDefinitionRecord): void {
    const { tenantId, name, ...rest } = r;
    try {
      this.#put.run(tenantId, name, JSON.stringify(rest));
    } catch (e) {
      translateSqliteError(e, { kind: 'tool', id: name });
    }
  }
}

interface GateRow {
  session_id: string;
  tenant_id: string;
  data: string;
}

export class SqliteSessionGateRepo implements Syncify<SessionGateRepo> {
  readonly #get: BetterSqlite3.Statement<[string], GateRow>;
  readonly #put: BetterSqlite3.Statement<[string, string, string]>;

  constructor(db: BetterSqlite3.Database) {
    this.#get = db.prepare('SELECT session_id, tenant_id, data FROM session_gate WHERE session_id = ?');
    this.#put = db.prepare('INSERT OR REPLACE INTO session_gate (session_id, tenant_id, data) VALUES (?, ?, ?)');
  }

  get(sessionId: string): SessionGateRecord | undefined {
    const row = this.#get.get(sessionId);
    if (!row) return undefined;
    const rest = parse<Omit<SessionGateRecord, 'sessionId' | 'tenantId'>>(row.data, 'session_gate', row.session_id);
    return { sessionId: row.session_id, tenantId: row.tenant_id, ...rest };
  }

  put(r: SessionGateRecord): void {
    const { sessionId, tenantId, ...rest } = r;
    try {
      this.#put.run(sessionId, tenantId, JSON.stringify(rest));
    } catch (e) {
      translateSqliteError(e, { kind: 'session gate', id: sessionId });
    }
  }
}

interface SnapshotGateRow {
  snapshot_id: string;
  tenant_id: string;
  session_id: string;
  data: string;
}

/** Rows go with their snapshot: the snapshot_gate_follows_snapshot trigger deletes them. */
export class SqliteSnapshotGateRepo implements Syncify<SnapshotGateRepo> {
  readonly #get: BetterSqlite3.Statement<[string], SnapshotGateRow>;
  readonly #insert: BetterSqlite3.Statement<[string, string, string, string]>;

  constructor(db: BetterSqlite3.Database) {
    this.#get = db.prepare('SELECT snapshot_id, tenant_id, session_id, data FROM snapshot_gate WHERE snapshot_id = ?');
    this.#insert = db.prepare('INSERT INTO snapshot_gate (snapshot_id, tenant_id, session_id, data) VALUES (?, ?, ?, ?)');
  }

  get(snapshotId: string): SnapshotGateRecord | undefined {
    const row = this.#get.get(snapshotId);
    if (!row) return undefined;
    const rest = parse<Omit<SnapshotGateRecord, 'snapshotId' | 'tenantId' | 'sessionId'>>(row.data, 'snapshot_gate', row.snapshot_id);
    return { snapshotId: row.snapshot_id, tenantId: row.tenant_id, sessionId: row.session_id, ...rest };
  }

  insert(r: SnapshotGateRecord): void {
    const { snapshotId, tenantId, sessionId, ...rest } = r;
    try {
      this.#insert.run(snapshotId, tenantId, sessionId, JSON.stringify(rest));
    } catch (e) {
      translateSqliteError(e, { kind: 'snapshot gate', id: snapshotId });
    }
  }
}

interface ApprovalRow {
  id: string;
  tenant_id: string;
  session_id: string;
  tool: string;
  args_digest: string;
  status: string;
  created_at: number;
  expires_at: number | null;
  data: string;
}

type ApprovalData = Omit<ApprovalRecord, 'id' | 'tenantId' | 'sessionId' | 'tool' | 'argsDigest' | 'status' | 'createdAt' | 'expiresAt'>;
const APPROVAL_COLS = 'id, tenant_id, session_id, tool, args_digest, status, created_at, expires_at, data';

function approvalFromRow(row: ApprovalRow): ApprovalRecord {
  const rest = parse<ApprovalData>(row.data, 'approvals', row.id);
  return {
    id: row.id,
    tenantId: row.tenant_id,
    sessionId: row.session_id,
    tool: row.tool,
    argsDigest: row.args_digest,
    status: row.status as ApprovalRecord['status'],
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    ...rest,
  };
}

function approvalToRow(r: ApprovalRecord): ApprovalRow {
  const { id, tenantId, sessionId, tool, argsDigest, status, createdAt, expiresAt, ...rest } = r;
  return {
    id,
    tenant_id: tenantId,
    session_id: sessionId,
    tool,
    args_digest: argsDigest,
    status,
    created_at: createdAt,
    expires_at: expiresAt,
    data: JSON.stringify(rest),
  };
}

export class SqliteApprovalRepo implements Syncify<ApprovalRepo> {
  readonly #insert: BetterSqlite3.Statement<[ApprovalRow]>;
  readonly #put: BetterSqlite3.Statement<[ApprovalRow]>;
  readonly #get: BetterSqlite3.Statement<[string], ApprovalRow>;
  readonly #latest: BetterSqlite3.Statement<[string, string], ApprovalRow>;
  readonly #expiring: BetterSqlite3.Statement<[number], ApprovalRow>;
  readonly #list: BetterSqlite3.Statement<[Record<string, unknown>], ApprovalRow>;

  constructor(db: BetterSqlite3.Database) {
    const named = '@id, @tenant_id, @session_id, @tool, @args_digest, @status, @created_at, @expires_at, @data';
    this.#insert = db.prepare(`INSERT INTO approvals (${APPROVAL_COLS}) VALUES (${named})`);
    this.#put = db.prepare(
      'UPDATE approvals SET tenant_id = @tenant_id, session_id = @session_id, tool = @tool, args_digest = @args_digest, status = @status, ' +
        'created_at = @created_at, expires_at = @expires_at, data = @data WHERE id = @id',
    );
    this.#get = db.prepare(`SELECT ${APPROVAL_COLS} FROM approvals WHERE id = ?`);
    this.#latest = db.prepare(
      `SELECT ${APPROVAL_COLS} FROM approvals WHERE session_id = ? AND args_digest = ? ORDER BY created_at DESC, rowid DESC LIMIT 1`,
    );
    this.#expiring = db.prepare(
      `SELECT ${APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY created_at`,
    );
    // One statement for every filter combination: a NULL parameter means "any".
    this.#list = db.prepare(
      `SELECT ${APPROVAL_COLS} FROM approvals WHERE (@tenantId IS NULL OR tenant_id = @tenantId) AND (@sessionId IS NULL OR session_id = @sessionId) ` +
        'AND (@statuses IS NULL OR status IN (SELECT value FROM json_each(@statuses))) ORDER BY created_at, rowid',
    );
  }

  insert(r: ApprovalRecord): void {
    try {
      this.#insert.run(approvalToRow(r));
    } catch (e) {
      translateSqliteError(e, { kind: 'approval', id: r.id });
    }
  }

  get(id: string): ApprovalRecord | undefined {
    const row = this.#get.get(id);
    return row && approvalFromRow(row);
  }

  put(r: ApprovalRecord): void {
    let changes: number;
    try {
      changes = this.#put.run(approvalToRow(r)).changes;
    } catch (e) {
      translateSqliteError(e, { kind: 'approval', id: r.id });
    }
    if (changes === 0) throw new NotFoundError('approval', r.id);
  }

  list(filter: ApprovalFilter = {}): ApprovalRecord[] {
    if (filter.statuses !== undefined && filter.statuses.length === 0) return [];
    return this.#list
      .all({
        tenantId: filter.tenantId ?? null,
        sessionId: filter.sessionId ?? null,
        statuses: filter.statuses === undefined ? null : JSON.stringify(filter.statuses),
      })
      .map(approvalFromRow);
  }

  latestFor(sessionId: string, argsDigest: string): ApprovalRecord | undefined {
    const row = this.#latest.get(sessionId, argsDigest);
    return row && approvalFromRow(row);
  }

  expiring(now: number): ApprovalRecord[] {
    return this.#expiring.all(now).map(approvalFromRow);
  }
}
