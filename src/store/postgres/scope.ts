/**
 * Transactions over a pg Pool. A transaction takes one pooled client from BEGIN to COMMIT; AsyncLocalStorage
 * carries it through the awaits of fn, so every store and audit call made inside runs on that client, and
 * every call made elsewhere runs on another (in its own implicit transaction). Unlike the SQLite store,
 * transactions really run side by side here: rows two writers could race on are read with forUpdate.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import pg from 'pg';
import { AppError } from '../../core/errors.js';

export interface PgFrame {
  client: pg.PoolClient;
  active: boolean;
  savepoints: number;
  /**
   * Run on the transaction's connection after fn, just before the outermost COMMIT (the audit tree signs
   * its head once per transaction); keyed so each runs once. A hook set inside a savepoint that rolled back
   * still runs: hooks read the database rather than trust what fn saw.
   */
  beforeCommit: Map<string, () => Promise<void>>;
  /** Run after the outermost COMMIT, in order (the audit anchor, the signed-head ledger); keyed so each runs once. */
  afterCommit: Map<string, () => Promise<void>>;
}

/** Turns a pg error into an AppError a caller can act on; anything else is rethrown unchanged. */
export function translatePgError(e: unknown, subject: { kind: string; id?: string }): never {
  if (e instanceof AppError) throw e;
  const code = (e as { code?: unknown } | null)?.code;
  if (e instanceof pg.DatabaseError && typeof code === 'string') {
    const details: Record<string, unknown> = { ...subject, pgCode: code };
    if (code === '23505') throw new AppError('conflict', `${subject.kind} already exists`, { details, cause: e });
    if (code === '40001' || code === '40P01' || code === '55P03') {
      throw new AppError('unavailable', 'the database refused a concurrent write; retry', { details, retryable: true, cause: e });
    }
    if (code.startsWith('08') || code.startsWith('53') || code.startsWith('57') || code === '25006') {
      throw new AppError('unavailable', `the database cannot be written (${code})`, { details, retryable: true, cause: e });
    }
  } else if (typeof code === 'string' && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|ETIMEDOUT|EPIPE|ENOENT)$/.test(code)) {
    throw new AppError('unavailable', `the database cannot be reached (${code})`, { details: { ...subject }, retryable: true, cause: e });
  }
  throw e;
}

export class PgScope {
  readonly #als = new AsyncLocalStorage<PgFrame>();
  constructor(readonly pool: pg.Pool) {}

  current(): PgFrame | undefined {
    const f = this.#als.getStore();
    return f?.active ? f : undefined;
  }

  /** One statement, on the transaction's client when called inside one, else on any pooled client. */
  async query<R extends pg.QueryResultRow>(sql: string, params: unknown[], subject: { kind: string; id?: string }): Promise<pg.QueryResult<R>> {
    const f = this.current();
    try {
      return await (f ? f.client : this.pool).query<R>(sql, params);
    } catch (e) {
      translatePgError(e, subject);
    }
  }

  async transaction<T>(fn: () => Promise<T>): Promise<T> {
    const open = this.current();
    if (open) return this.#savepoint(open, fn);
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      translatePgError(e, { kind: 'transaction' });
    }
    const frame: PgFrame = { client, active: true, savepoints: 0, beforeCommit: new Map(), afterCommit: new Map() };
    let broken: Error | undefined;
    let released = false;
    try {
      let result: T;
      try {
        await client.query('BEGIN');
        result = await this.#als.run(frame, async () => {
          const r = await fn();
          for (const f of frame.beforeCommit.values()) await f();
          return r;
        });
        frame.active = false;
        await client.query('COMMIT');
      } catch (e) {
        frame.active = false;
        await client.query('ROLLBACK').catch((r: unknown) => (broken = r as Error));
        translatePgError(e, { kind: 'transaction' });
      }
      client.release();
      released = true;
      for (const f of frame.afterCommit.values()) await f();
      return result;
    } finally {
      if (!released) client.release(broken);
    }
  }

  async #savepoint<T>(frame: PgFrame, fn: () => Promise<T>): Promise<T> {
    const name = `berth_sp${++frame.savepoints}`;
    await frame.client.query(`SAVEPOINT ${name}`);
    try {
      const result = await fn();
      await frame.client.query(`RELEASE SAVEPOINT ${name}`);
      return result;
    } catch (e) {
      await frame.client.query(`ROLLBACK TO SAVEPOINT ${name}`).catch(() => undefined);
      throw e;
    }
  }
}
