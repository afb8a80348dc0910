/**
 * Idempotency-Key rows in SQLite (migration 8, `idempotency_keys`). The primary key is tenant, scope and
 * key; `created` is a JSON array of ids, `body` the stored answer's JSON text.
 */
import type BetterSqlite3 from 'better-sqlite3';
import type { IdempotencyRecord, IdempotencyRepo } from '../core/idempotency.js';
import type { Syncify } from './sqlite-tx.js';

export const V8_IDEMPOTENCY_KEYS = `
CREATE TABLE idempotency_keys (
  tenant_id TEXT NOT NULL,
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('started', 'done')),
  owner TEXT NOT NULL,
  created TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  status INTEGER,
  body TEXT,
  PRIMARY KEY (tenant_id, scope, key)
) STRICT;
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
`;

export interface IdempotencyRow {
  tenant_id: string;
  scope: string;
  key: string;
  fingerprint: string;
  state: string;
  owner: string;
  created: string;
  created_at: number | string;
  expires_at: number | string;
  status: number | null;
  body: string | null;
}

export const IDEMPOTENCY_COLS = 'tenant_id, scope, key, fingerprint, state, owner, created, created_at, expires_at, status, body';

export function idempotencyParams(r: IdempotencyRecord): unknown[] {
  return [r.tenantId, r.scope, r.key, r.fingerprint, r.state, r.owner, JSON.stringify(r.created), r.createdAt, r.expiresAt, r.status ?? null, r.body ?? null];
}

export function idempotencyFromRow(row: IdempotencyRow): IdempotencyRecord {
  return {
    tenantId: row.tenant_id,
    scope: row.scope,
    key: row.key,
    fingerprint: row.fingerprint,
    state: row.state === 'done' ? 'done' : 'started',
    owner: row.owner,
    created: JSON.parse(row.created) as string[],
    createdAt: Number(row.created_at),
    expiresAt: Number(row.expires_at),
    ...(row.status !== null ? { status: row.status } : {}),
    ...(row.body !== null ? { body: row.body } : {}),
  };
}

const WHERE = 'tenant_id = ? AND scope = ? AND key = ?';

export class SqliteIdempotencyRepo implements Syncify<IdempotencyRepo> {
  readonly #get: BetterSqlite3.Statement;
  readonly #insert: BetterSqlite3.Statement;
  readonly #dropExpired: BetterSqlite3.Statement;
  readonly #takeOver: BetterSqlite3.Statement;
  readonly #note: BetterSqlite3.Statement;
  readonly #complete: BetterSqlite3.Statement;
  readonly #release: BetterSqlite3.Statement;
  readonly #sweep: BetterSqlite3.Statement;

  constructor(db: BetterSqlite3.Database) {
    this.#get = db.prepare(`SELECT ${IDEMPOTENCY_COLS} FROM idempotency_keys WHERE ${WHERE}`);
    this.#insert = db.prepare(`INSERT INTO idempotency_keys (${IDEMPOTENCY_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`);
    this.#dropExpired = db.prepare(`DELETE FROM idempotency_keys WHERE ${WHERE} AND expires_at <= ?`);
    this.#takeOver = db.prepare(`UPDATE idempotency_keys SET owner = ? WHERE ${WHERE} AND state = 'started' AND owner = ?`);
    this.#note = db.prepare(`UPDATE idempotency_keys SET created = json_insert(created, '$[#]', ?) WHERE ${WHERE} AND state = 'started' AND owner = ?`);
    this.#complete = db.prepare(`UPDATE idempotency_keys SET state = 'done', status = ?, body = ? WHERE ${WHERE} AND state = 'started' AND owner = ?`);
    this.#release = db.prepare(`DELETE FROM idempotency_keys WHERE ${WHERE} AND state = 'started' AND owner = ?`);
    this.#sweep = db.prepare('DELETE FROM idempotency_keys WHERE expires_at <= ?');
  }

  // One connection: the three statements cannot interleave with another caller's.
  claim(r: IdempotencyRecord, now: number): IdempotencyRecord | undefined {
    this.#dropExpired.run(r.tenantId, r.scope, r.key, now);
    if (this.#insert.run(...idempotencyParams(r)).changes === 1) return undefined;
    return this.get(r.tenantId, r.scope, r.key);
  }

  get(tenantId: string, scope: string, key: string): IdempotencyRecord | undefined {
    const row = this.#get.get(tenantId, scope, key) as IdempotencyRow | undefined;
    return row && idempotencyFromRow(row);
  }

  takeOver(tenantId: string, scope: string, key: string, from: string, to: string): boolean {
    return this.#takeOver.run(to, tenantId, scope, key, from).changes === 1;
  }

  noteCreated(tenantId: string, scope: string, key: string, owner: string, id: string): void {
    this.#note.run(id, tenantId, scope, key, owner);
  }

  complete(tenantId: string, scope: string, key: string, owner: string, answer: { status: number; body: string }): void {
    this.#complete.run(answer.status, answer.body, tenantId, scope, key, owner);
  }

  release(tenantId: string, scope: string, key: string, owner: string): void {
    this.#release.run(tenantId, scope, key, owner);
  }

  deleteExpired(now: number): number {
    return this.#sweep.run(now).changes;
  }

  // One process has a SQLite data directory at a time (server/datalock.ts): any other owner is gone.
  holdOwner(owner: string): void {
    this.#owner = owner;
  }

  ownerAlive(owner: string): boolean {
    return owner === this.#owner;
  }

  #owner: string | undefined;
}
