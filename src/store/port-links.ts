/**
 * Migration 6 and the repo of port links (issue 9 §3): one row per link, looked up by id, by the SHA-256
 * of its token (unique), and listed per session. Like the other tables, the columns a row is found by,
 * plus a JSON `data` column for the rest.
 */
import type BetterSqlite3 from 'better-sqlite3';
import { AppError, NotFoundError } from '../core/errors.js';
import type { PortLinkRecord } from '../core/records.js';
import type { PortLinkRepo } from '../core/store.js';
import { translateSqliteError } from './sqlite-errors.js';
import type { Syncify } from './sqlite-tx.js';

export const V6_PORT_LINKS = `
CREATE TABLE port_links (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  token_hash TEXT NOT NULL UNIQUE,
  expires_at INTEGER NOT NULL,
  revoked_at INTEGER,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX port_links_by_session ON port_links (session_id);
`;

export interface PortLinkRow {
  id: string;
  tenant_id: string;
  session_id: string;
  token_hash: string;
  expires_at: number;
  revoked_at: number | null;
  data: string;
}

export const PORT_LINK_COLS = 'id, tenant_id, session_id, token_hash, expires_at, revoked_at, data';

type PortLinkData = Omit<PortLinkRecord, 'id' | 'tenantId' | 'sessionId' | 'tokenHash' | 'expiresAt' | 'revokedAt'>;

/** Shared with the PostgreSQL repo: one row shape on both stores. */
export function portLinkFromRow(row: PortLinkRow): PortLinkRecord {
  let rest: PortLinkData;
  try {
    rest = JSON.parse(row.data) as PortLinkData;
  } catch (e) {
    throw new AppError('internal', 'stored port_links record is unreadable', { details: { table: 'port_links', id: row.id }, cause: e });
  }
  return { id: row.id, tenantId: row.tenant_id, sessionId: row.session_id, tokenHash: row.token_hash, expiresAt: row.expires_at, revokedAt: row.revoked_at, ...rest };
}

export function portLinkToRow(r: PortLinkRecord): PortLinkRow {
  const { id, tenantId, sessionId, tokenHash, expiresAt, revokedAt, ...rest } = r;
  return { id, tenant_id: tenantId, session_id: sessionId, token_hash: tokenHash, expires_at: expiresAt, revoked_at: revokedAt, data: JSON.stringify(rest) };
}

export class SqlitePortLinkRepo implements Syncify<PortLinkRepo> {
  readonly #insert: BetterSqlite3.Statement<[PortLinkRow]>;
  readonly #put: BetterSqlite3.Statement<[PortLinkRow]>;
  readonly #get: BetterSqlite3.Statement<[string], PortLinkRow>;
  readonly #byHash: BetterSqlite3.Statement<[string], PortLinkRow>;
  readonly #list: BetterSqlite3.Statement<[string], PortLinkRow>;

  constructor(db: BetterSqlite3.Database) {
    this.#insert = db.prepare(`INSERT INTO port_links (${PORT_LINK_COLS}) VALUES (@id, @tenant_id, @session_id, @token_hash, @expires_at, @revoked_at, @data)`);
    this.#put = db.prepare(
      'UPDATE port_links SET tenant_id = @tenant_id, session_id = @session_id, token_hash = @token_hash, expires_at = @expires_at, revoked_at = @revoked_at, data = @data WHERE id = @id',
    );
    this.#get = db.prepare(`SELECT ${PORT_LINK_COLS} FROM port_links WHERE id = ?`);
    this.#byHash = db.prepare(`SELECT ${PORT_LINK_COLS} FROM port_links WHERE token_hash = ?`);
    this.#list = db.prepare(`SELECT ${PORT_LINK_COLS} FROM port_links WHERE session_id = ? ORDER BY rowid`);
  }

  insert(r: PortLinkRecord): void {
    try {
      this.#insert.run(portLinkToRow(r));
    } catch (e) {
      translateSqliteError(e, { kind: 'port link', id: r.id });
    }
  }

  get(id: string): PortLinkRecord | undefined {
    const row = this.#get.get(id);
    return row && portLinkFromRow(row);
  }

  getByTokenHash(tokenHash: string): PortLinkRecord | undefined {
    const row = this.#byHash.get(tokenHash);
    return row && portLinkFromRow(row);
  }

  list(sessionId: string): PortLinkRecord[] {
    return this.#list.all(sessionId).map(portLinkFromRow);
  }

  put(r: PortLinkRecord): void {
    let changes: number;
    try {
      changes = this.#put.run(portLinkToRow(r)).changes;
    } catch (e) {
      translateSqliteError(e, { kind: 'port link', id: r.id });
    }
    if (changes === 0) throw new NotFoundError('port link', r.id);
  }
}
