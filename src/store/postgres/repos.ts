/**
 * The record repos over PostgreSQL: the same rows as the SQLite store (the columns a record is filtered on,
 * plus a JSON `data` column with the rest), in the same order (insertion order, via `ord`).
 */
import { AppError, NotFoundError } from '../../core/errors.js';
import type {
  ApprovalRecord,
  SessionGateRecord,
  SessionRecord,
  SnapshotGateRecord,
  SnapshotRecord,
  TenantPolicyRecord,
  TenantRecord,
  ToolDefinitionRecord,
} from '../../core/records.js';
import type {
  ApprovalFilter,
  ApprovalRepo,
  PolicyRepo,
  ReadOptions,
  SessionFilter,
  SessionGateRepo,
  SessionRepo,
  SnapshotGateRepo,
  SnapshotRepo,
  TenantRepo,
  ToolRepo,
} from '../../core/store.js';
import type { PgScope } from './scope.js';

function parse<T>(raw: string, table: string, id: string): T {
  try {
    return JSON.parse(raw) as T;
  } catch (e) {
    throw new AppError('internal', `stored ${table} record is unreadable`, { details: { table, id }, cause: e });
  }
}

/** `FOR UPDATE` only inside a transaction (outside one the lock would end with the statement anyway). */
function lockClause(scope: PgScope, opts: ReadOptions | undefined): string {
  return opts?.forUpdate && scope.current() ? ' FOR UPDATE' : '';
}

interface SessionRow {
  id: string;
  tenant_id: string;
  state: string;
  data: string;
}

function sessionFromRow(row: SessionRow): SessionRecord {
  const rest = parse<Omit<SessionRecord, 'id' | 'tenantId' | 'state'>>(row.data, 'sessions', row.id);
  return { id: row.id, tenantId: row.tenant_id, state: row.state as SessionRecord['state'], ...rest };
}

export class PgSessionRepo implements SessionRepo {
  constructor(private readonly s: PgScope) {}

  async insert(r: SessionRecord): Promise<void> {
    const { id, tenantId, state, ...rest } = r;
    await this.s.query('INSERT INTO sessions (id, tenant_id, state, data) VALUES ($1, $2, $3, $4)', [id, tenantId, state, JSON.stringify(rest)], { kind: 'session', id });
  }

  async get(id: string, opts?: ReadOptions): Promise<SessionRecord | undefined> {
    const res = await this.s.query<SessionRow>(`SELECT id, tenant_id, state, data FROM sessions WHERE id = $1${lockClause(this.s, opts)}`, [id], { kind: 'session', id });
    const row = res.rows[0];
    return row && sessionFromRow(row);
  }

  async list(filter: SessionFilter = {}): Promise<SessionRecord[]> {
    if (filter.states !== undefined && filter.states.length === 0) return [];
    const res = await this.s.query<SessionRow>(
      'SELECT id, tenant_id, state, data FROM sessions WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text[] IS NULL OR state = ANY($2)) ORDER BY ord',
      [filter.tenantId ?? null, filter.states ?? null],
      { kind: 'session' },
    );
    return res.rows.map(sessionFromRow);
  }

  async put(r: SessionRecord): Promise<void> {
    const { id, tenantId, state, ...rest } = r;
    const res = await this.s.query('UPDATE sessions SET tenant_id = $2, state = $3, data = $4 WHERE id = $1', [id, tenantId, state, JSON.stringify(rest)], { kind: 'session', id });
    if (res.rowCount === 0) throw new NotFoundError('session', id);
  }
}

interface SnapshotRow {
  id: string;
  tenant_id: string;
  session_id: string;
  kind: string;
  data: string;
}

function snapshotFromRow(row: SnapshotRow): SnapshotRecord {
  const rest = parse<Omit<SnapshotRecord, 'id' | 'tenantId' | 'sessionId' | 'kind'>>(row.data, 'snapshots', row.id);
  return { id: row.id, tenantId: row.tenant_id, sessionId: row.session_id, kind: row.kind as SnapshotRecord['kind'], ...rest };
}

const SNAPSHOT_COLS = 'id, tenant_id, session_id, kind, data';

export class PgSnapshotRepo implements SnapshotRepo {
  constructor(private readonly s: PgScope) {}

  async insert(r: SnapshotRecord): Promise<void> {
    const { id, tenantId, sessionId, kind, ...rest } = r;
    await this.s.query(`INSERT INTO snapshots (${SNAPSHOT_COLS}) VALUES ($1, $2, $3, $4, $5)`, [id, tenantId, sessionId, kind, JSON.stringify(rest)], { kind: 'snapshot', id });
  }

  async get(id: string): Promise<SnapshotRecord | undefined> {
    const row = (await this.s.query<SnapshotRow>(`SELECT ${SNAPSHOT_COLS} FROM snapshots WHERE id = $1`, [id], { kind: 'snapshot', id })).rows[0];
    return row && snapshotFromRow(row);
  }

  async list(filter: { tenantId?: string; sessionId?: string } = {}): Promise<SnapshotRecord[]> {
    const res = await this.s.query<SnapshotRow>(
      `SELECT ${SNAPSHOT_COLS} FROM snapshots WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR session_id = $2) ORDER BY ord`,
      [filter.tenantId ?? null, filter.sessionId ?? null],
      { kind: 'snapshot' },
    );
    return res.rows.map(snapshotFromRow);
  }

  /** Idempotent; the snapshot's gate copy goes with it (trigger). */
  async delete(id: string): Promise<void> {
    await this.s.query('DELETE FROM snapshots WHERE id = $1', [id], { kind: 'snapshot', id });
  }
}

interface TenantRow {
  id: string;
  api_key_hash: string;
  data: string;
}

function tenantFromRow(row: TenantRow): TenantRecord {
  return { id: row.id, apiKeyHash: row.api_key_hash, ...parse<Omit<TenantRecord, 'id' | 'apiKeyHash'>>(row.data, 'tenants', row.id) };
}

export class PgTenantRepo implements TenantRepo {
  constructor(private readonly s: PgScope) {}

  async insert(r: TenantRecord): Promise<void> {
    const { id, apiKeyHash, ...rest } = r;
    await this.s.query('INSERT INTO tenants (id, api_key_hash, data) VALUES ($1, $2, $3)', [id, apiKeyHash, JSON.stringify(rest)], { kind: 'tenant', id });
  }

  async get(id: string): Promise<TenantRecord | undefined> {
    const row = (await this.s.query<TenantRow>('SELECT id, api_key_hash, data FROM tenants WHERE id = $1', [id], { kind: 'tenant', id })).rows[0];
    return row && tenantFromRow(row);
  }

  async getByKeyHash(hash: string): Promise<TenantRecord | undefined> {
    const row = (await this.s.query<TenantRow>('SELECT id, api_key_hash, data FROM tenants WHERE api_key_hash = $1', [hash], { kind: 'tenant' })).rows[0];
    return row && tenantFromRow(row);
  }

  async list(): Promise<TenantRecord[]> {
    return (await this.s.query<TenantRow>('SELECT id, api_key_hash, data FROM tenants ORDER BY ord', [], { kind: 'tenant' })).rows.map(tenantFromRow);
  }

  async put(r: TenantRecord): Promise<void> {
    const { id, apiKeyHash: _key, ...rest } = r;
    const res = await this.s.query('UPDATE tenants SET data = $2 WHERE id = $1', [id, JSON.stringify(rest)], { kind: 'tenant', id });
    if (res.rowCount === 0) throw new NotFoundError('tenant', id);
  }
}

interface PolicyRow {
  tenant_id: string;
  text: string;
  version: number;
  updated_at: number;
  updated_by: string;
}

export class PgPolicyRepo implements PolicyRepo {
  constructor(private readonly s: PgScope) {}

  async get(tenantId: string): Promise<TenantPolicyRecord | undefined> {
    const r = (await this.s.query<PolicyRow>('SELECT tenant_id, text, version, updated_at, updated_by FROM tenant_policies WHERE tenant_id = $1', [tenantId], { kind: 'policy', id: tenantId })).rows[0];
    return r && { tenantId: r.tenant_id, text: r.text, version: r.version, updatedAt: r.updated_at, updatedBy: r.updated_by };
  }

  async put(r: TenantPolicyRecord): Promise<void> {
    await this.s.query(
      'INSERT INTO tenant_policies (tenant_id, text, version, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5) ' +
        'ON CONFLICT (tenant_id) DO UPDATE SET text = EXCLUDED.text, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by',
      [r.tenantId, r.text, r.version, r.updatedAt, r.updatedBy],
      { kind: 'policy', id: r.tenantId },
    );
  }
}

interface KeyedRow {
  tenant_id: string;
  name: string;
  data: string;
}

function toolFromRow(row: KeyedRow): ToolDefinitionRecord {
  return { tenantId: row.tenant_id, name: row.name, ...parse<Omit<ToolDefinitionRecord, 'tenantId' | 'name'>>(row.data, 'tool_definitions', `${row.tenant_id}/${row.name}`) };
}

export class PgToolRepo implements ToolRepo {
  constructor(private readonly s: PgScope) {}

  async get(tenantId: string, name: string): Promise<ToolDefinitionRecord | undefined> {
    const row = (await this.s.query<KeyedRow>('SELECT tenant_id, name, data FROM tool_definitions WHERE tenant_id = $1 AND name = $2', [tenantId, name], { kind: 'tool', id: name })).rows[0];
    return row && toolFromRow(row);
  }

  async list(tenantId: string): Promise<ToolDefinitionRecord[]> {
    // COLLATE "C": byte order, as SQLite's ORDER BY name gives it.
    const res = await this.s.query<KeyedRow>('SELECT tenant_id, name, data FROM tool_definitions WHERE tenant_id = $1 ORDER BY name COLLATE "C"', [tenantId], { kind: 'tool' });
    return res.rows.map(toolFromRow);
  }

  async put(r: ToolDefinitionRecord): Promise<void> {
    const { tenantId, name, ...rest } = r;
    await this.s.query(
      'INSERT INTO tool_definitions (tenant_id, name, data) VALUES ($1, $2, $3) ON CONFLICT (tenant_id, name) DO UPDATE SET data = EXCLUDED.data',
      [tenantId, name, JSON.stringify(rest)],
      { kind: 'tool', id: name },
    );
  }
}

interface GateRow {
  session_id: string;
  tenant_id: string;
  data: string;
}

export class PgSessionGateRepo implements SessionGateRepo {
  constructor(private readonly s: PgScope) {}

  async get(sessionId: string, opts?: ReadOptions): Promise<SessionGateRecord | undefined> {
    const sql = `SELECT session_id, tenant_id, data FROM session_gate WHERE session_id = $1${lockClause(this.s, opts)}`;
    const row = (await this.s.query<GateRow>(sql, [sessionId], { kind: 'session gate', id: sessionId })).rows[0];
    if (!row) return undefined;
    return { sessionId: row.session_id, tenantId: row.tenant_id, ...parse<Omit<SessionGateRecord, 'sessionId' | 'tenantId'>>(row.data, 'session_gate', row.session_id) };
  }

  async put(r: SessionGateRecord): Promise<void> {
    const { sessionId, tenantId, ...rest } = r;
    await this.s.query(
      'INSERT INTO session_gate (session_id, tenant_id, data) VALUES ($1, $2, $3) ON CONFLICT (session_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, data = EXCLUDED.data',
      [sessionId, tenantId, JSON.stringify(rest)],
      { kind: 'session gate', id: sessionId },
    );
  }
}

interface SnapshotGateRow {
  snapshot_id: string;
  tenant_id: string;
  session_id: string;
  data: string;
}

export class PgSnapshotGateRepo implements SnapshotGateRepo {
  constructor(private readonly s: PgScope) {}

  async get(snapshotId: string): Promise<SnapshotGateRecord | undefined> {
    const row = (await this.s.query<SnapshotGateRow>('SELECT snapshot_id, tenant_id, session_id, data FROM snapshot_gate WHERE snapshot_id = $1', [snapshotId], { kind: 'snapshot gate', id: snapshotId })).rows[0];
    if (!row) return undefined;
    const rest = parse<Omit<SnapshotGateRecord, 'snapshotId' | 'tenantId' | 'sessionId'>>(row.data, 'snapshot_gate', row.snapshot_id);
    return { snapshotId: row.snapshot_id, tenantId: row.tenant_id, sessionId: row.session_id, ...rest };
  }

  async insert(r: SnapshotGateRecord): Promise<void> {
    const { snapshotId, tenantId, sessionId, ...rest } = r;
    await this.s.query('INSERT INTO snapshot_gate (snapshot_id, tenant_id, session_id, data) VALUES ($1, $2, $3, $4)', [snapshotId, tenantId, sessionId, JSON.stringify(rest)], { kind: 'snapshot gate', id: snapshotId });
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

const APPROVAL_COLS = 'id, tenant_id, session_id, tool, args_digest, status, created_at, expires_at, data';

function approvalFromRow(row: ApprovalRow): ApprovalRecord {
  const rest = parse<Omit<ApprovalRecord, 'id' | 'tenantId' | 'sessionId' | 'tool' | 'argsDigest' | 'status' | 'createdAt' | 'expiresAt'>>(row.data, 'approvals', row.id);
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

function approvalParams(r: ApprovalRecord): unknown[] {
  const { id, tenantId, sessionId, tool, argsDigest, status, createdAt, expiresAt, ...rest } = r;
  return [id, tenantId, sessionId, tool, argsDigest, status, createdAt, expiresAt, JSON.stringify(rest)];
}

export class PgApprovalRepo implements ApprovalRepo {
  constructor(private readonly s: PgScope) {}

  async insert(r: ApprovalRecord): Promise<void> {
    await this.s.query(`INSERT INTO approvals (${APPROVAL_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, approvalParams(r), { kind: 'approval', id: r.id });
  }

  async get(id: string, opts?: ReadOptions): Promise<ApprovalRecord | undefined> {
    const row = (await this.s.query<ApprovalRow>(`SELECT ${APPROVAL_COLS} FROM approvals WHERE id = $1${lockClause(this.s, opts)}`, [id], { kind: 'approval', id })).rows[0];
    return row && approvalFromRow(row);
  }

  async put(r: ApprovalRecord): Promise<void> {
    const res = await this.s.query(
      'UPDATE approvals SET tenant_id = $2, session_id = $3, tool = $4, args_digest = $5, status = $6, created_at = $7, expires_at = $8, data = $9 WHERE id = $1',
      approvalParams(r),
      { kind: 'approval', id: r.id },
    );
    if (res.rowCount === 0) throw new NotFoundError('approval', r.id);
  }

  async list(filter: ApprovalFilter = {}): Promise<ApprovalRecord[]> {
    if (filter.statuses !== undefined && filter.statuses.length === 0) return [];
    const res = await this.s.query<ApprovalRow>(
      `SELECT ${APPROVAL_COLS} FROM approvals WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR session_id = $2) ` +
        'AND ($3::text[] IS NULL OR status = ANY($3)) ORDER BY created_at, ord',
      [filter.tenantId ?? null, filter.sessionId ?? null, filter.statuses ?? null],
      { kind: 'approval' },
    );
    return res.rows.map(approvalFromRow);
  }

  async latestFor(sessionId: string, argsDigest: string): Promise<ApprovalRecord | undefined> {
    const res = await this.s.query<ApprovalRow>(
      `SELECT ${APPROVAL_COLS} FROM approvals WHERE session_id = $1 AND args_digest = $2 ORDER BY created_at DESC, ord DESC LIMIT 1`,
      [sessionId, argsDigest],
      { kind: 'approval' },
    );
    const row = res.rows[0];
    return row && approvalFromRow(row);
  }

  async expiring(now: number): Promise<ApprovalRecord[]> {
    const res = await this.s.query<ApprovalRow>(
      `SELECT ${APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= $1 ORDER BY created_at, ord`,
      [now],
      { kind: 'approval' },
    );
    return res.rows.map(approvalFromRow);
  }
}
