/** Idempotency-Key rows in PostgreSQL: the same table and rules as ../idempotency.ts (SQLite). */
import type { IdempotencyRecord, IdempotencyRepo } from '../../core/idempotency.js';
import { IDEMPOTENCY_COLS, idempotencyFromRow, idempotencyParams, type IdempotencyRow } from '../idempotency.js';
import type pg from 'pg';
import type { PgScope } from './scope.js';

export const V8_IDEMPOTENCY_KEYS = `
CREATE TABLE idempotency_keys (
  tenant_id TEXT NOT NULL,
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('started', 'done')),
  owner TEXT NOT NULL,
  created TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  status INTEGER,
  body TEXT,
  PRIMARY KEY (tenant_id, scope, key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
`;

const WHERE = 'tenant_id = $1 AND scope = $2 AND key = $3';
const SUBJECT = { kind: 'idempotency key' };

export class PgIdempotencyRepo implements IdempotencyRepo {
  /** The connection holding this process's advisory lock, for as long as the store is open. */
  #held: { owner: string; client: pg.PoolClient } | undefined;
  #holding: Promise<void> | undefined;

  constructor(private readonly s: PgScope) {}

  // Several servers may share one database: a process is alive while its session-level advisory lock on
  // its owner name is held, and PostgreSQL drops the lock when that process's connection goes.
  holdOwner(owner: string): Promise<void> {
    this.#holding ??= (async () => {
      const client = await this.s.pool.connect();
      try {
        await client.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [`berth-idem:${owner}`]);
      } catch (e) {
        client.release(true);
        this.#holding = undefined;
        throw e;
      }
      this.#held = { owner, client };
    })();
    return this.#holding;
  }

  async ownerAlive(owner: string): Promise<boolean> {
    if (this.#held?.owner === owner) return true;
    const client = await this.s.pool.connect();
    try {
      const got = (await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS ok', [`berth-idem:${owner}`])).rows[0]?.ok === true;
      if (got) await client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [`berth-idem:${owner}`]);
      return !got;
    } finally {
      client.release();
    }
  }

  /** Waits for a holdOwner() under way (its failure is the caller's of holdOwner). */
  async holding(): Promise<void> {
    await this.#holding?.catch(() => undefined);
  }

  /** Lets the held connection go (the store's close calls it before ending the pool). The lock is released
   *  explicitly first: PostgreSQL drops it only once the backend notices the closed socket, so another
   *  server asking right after close could still see this one alive. */
  async releaseHeld(): Promise<void> {
    const held = this.#held;
    this.#held = undefined;
    if (!held) return;
    try {
      await held.client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [`berth-idem:${held.owner}`]);
    } catch {
      // The connection is gone already: its locks went with it.
    } finally {
      held.client.release(true);
    }
  }

  // Concurrent claims of one key: the INSERT lets one through; the other reads the winner's row.
  async claim(r: IdempotencyRecord, now: number): Promise<IdempotencyRecord | undefined> {
    await this.s.query(`DELETE FROM idempotency_keys WHERE ${WHERE} AND expires_at <= $4`, [r.tenantId, r.scope, r.key, now], SUBJECT);
    const ins = await this.s.query(
      `INSERT INTO idempotency_keys (${IDEMPOTENCY_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING`,
      idempotencyParams(r),
      SUBJECT,
    );
    if (ins.rowCount === 1) return undefined;
    return this.get(r.tenantId, r.scope, r.key);
  }

  async get(tenantId: string, scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const row = (await this.s.query<IdempotencyRow>(`SELECT ${IDEMPOTENCY_COLS} FROM idempotency_keys WHERE ${WHERE}`, [tenantId, scope, key], SUBJECT)).rows[0];
    return row && idempotencyFromRow(row);
  }

  async takeOver(tenantId: string, scope: string, key: string, from: string, to: string): Promise<boolean> {
    const res = await this.s.query(`UPDATE idempotency_keys SET owner = $5 WHERE ${WHERE} AND state = 'started' AND owner = $4`, [tenantId, scope, key, from, to], SUBJECT);
    return res.rowCount === 1;
  }

  async noteCreated(tenantId: string, scope: string, key: string, owner: string, id: string): Promise<void> {
    await this.s.query(
      `UPDATE idempotency_keys SET created = (created::jsonb || to_jsonb($5::text))::text WHERE ${WHERE} AND state = 'started' AND owner = $4`,
      [tenantId, scope, key, owner, id],
      SUBJECT,
    );
  }

  async complete(tenantId: string, scope: string, key: string, owner: string, answer: { status: number; body: string }): Promise<void> {
    await this.s.query(
      `UPDATE idempotency_keys SET state = 'done', status = $5, body = $6 WHERE ${WHERE} AND state = 'started' AND owner = $4`,
      [tenantId, scope, key, owner, answer.status, answer.body],
      SUBJECT,
    );
  }

  async release(tenantId: string, scope: string, key: string, owner: string): Promise<void> {
    await this.s.query(`DELETE FROM idempotency_keys WHERE ${WHERE} AND state = 'started' AND owner = $4`, [tenantId, scope, key, owner], SUBJECT);
  }

  async deleteExpired(now: number): Promise<number> {
    return (await this.s.query('DELETE FROM idempotency_keys WHERE expires_at <= $1', [now], SUBJECT)).rowCount ?? 0;
  }
}
