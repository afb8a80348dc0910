/**
 * Watch-only links (issue 10) in SQLite: migration 7's table and its repo. The columns a link is looked up
 * or listed by are columns; label and creator ride in `data`.
 */
import type BetterSqlite3 from 'better-sqlite3';
import { AppError, NotFoundError } from '../core/errors.js';
import type { WatchLinkRecord } from '../core/records.js';
import type { WatchLinkRepo } from '../core/store.js';
import { translateSqliteError } from './sqlite-errors.js';
import type { Syncify } from './sqlite-tx.js';

export const V7_WATCH_LINKS = `
CREATE TABLE watch_links (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  token_hash TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  revoked_at INTEGER,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX watch_links_by_session ON watch_links (session_id, created_at);
`;

export const WATCH_LINK_COLS = 'id, tenant_id, session_id, token_hash, created_at, expires_at, revoked_at, data';

export interface WatchLinkRow {
  id: string;
  tenant_id: string;
  session_id: string;
  token_hash: string;
  created_at: number;
  expires_at: number;
  revoked_at: number | null;
  data: string;
}

/** Shared with the PostgreSQL repo: the row a record is stored as, and back. */
export function watchLinkToRow(r: WatchLinkRecord): WatchLinkRow {
  return {
    id: r.id,
    tenant_id: r.tenantId,
    session_id: r.sessionId,
    token_hash: r.tokenHash,
    created_at: r.createdAt,
    expires_at: r.expiresAt,
    revoked_at: r.revokedAt,
    data: JSON.stringify({ label: r.label, createdBy: r.createdBy }),
  };
}

export function watchLinkFromRow(row: WatchLinkRow): WatchLinkRecord {
  let rest: { label: string | null; createdBy: string };
  try {
    rest = JSON.parse(row.data) as typeof rest;
  } catch (e) {
    throw new AppError('internal', 'stored watch_links record is unreadable', { details: { table: 'watch_links', id: row.id }, cause: e });
  }
  return {
    id: row.id,
    tenantId: row.tenant_id,
    sessionId: row.session_id,
    tokenHash: row.token_hash,
    label: rest.label ?? null,
    createdBy: rest.createdBy,
    createdAt: Number(row.created_at),
    expiresAt: Number(row.expires_at),
    revokedAt: row.revoked_at === null ? null : Number(row.revoked_at),
  };
}

export class SqliteWatchLinkRepo implements Syncify<WatchLinkRepo> {
  readonly #insert: BetterSqlite3.Statement<[WatchLinkRow]>;
  readonly #put: BetterSqlite3.Statement<[WatchLinkRow]>;
  readonly #get: BetterSqlite3.Statement<[string], WatchLinkRow>;
  readonly #byHash: BetterSqlite3.Statement<[string], WatchLinkRow>;
  readonly #bySession: BetterSqlite3.Statement<[string], WatchLinkRow>;

  constructor(db: BetterSqlite3.Database) {
    this.#insert = db.prepare(`INSERT INTO watch_links (${WATCH_LINK_COLS}) VALUES (@id, @tenant_id, @session_id, @token_hash, @created_at, @expires_at, @revoked_at, @data)`);
    this.#put = db.prepare(
      'UPDATE watch_links SET tenant_id = @tenant_id, session_id = @session_id, token_hash = @token_hash, created_at = @created_at, ' +
        'expires_at = @expires_at, revoked_at = @revoked_at, data = @data WHERE id = @id',
    );
    this.#get = db.prepare(`SELECT ${WATCH_LINK_COLS} FROM watch_links WHERE id = ?`);
    this.#byHash = db.prepare(`SELECT ${WATCH_LINK_COLS} FROM watch_links WHERE token_hash = ?`);
    this.#bySession = db.prepare(`SELECT ${WATCH_LINK_COLS} FROM watch_links WHERE session_id = ? ORDER BY created_at, rowid`);
  }

  insert(r: WatchLinkRecord): void {
    try {
      this.#insert.run(watchLinkToRow(r));
    } catch (e) {
      translateSqliteError(e, { kind: 'watch link', id: r.id });
    }
  }

  get(id: string): WatchLinkRecord | undefined {
    const row = this.#get.get(id);
    return row && watchLinkFromRow(row);
  }

  getByTokenHash(hash: string): WatchLinkRecord | undefined {
    const row = this.#byHash.get(hash);
    return row && watchLinkFromRow(row);
  }

  listBySession(sessionId: string): WatchLinkRecord[] {
    return this.#bySession.all(sessionId).map(watchLinkFromRow);
  }

  put(r: WatchLinkRecord): void {
    if (this.#put.run(watchLinkToRow(r)).changes === 0) throw new NotFoundError('watch link', r.id);
  }
}
