/** Watch-only links (issue 10) over PostgreSQL: the same rows as the SQLite repo (../watch-links.ts). */
import { NotFoundError } from '../../core/errors.js';
import type { WatchLinkRecord } from '../../core/records.js';
import type { WatchLinkRepo } from '../../core/store.js';
import { WATCH_LINK_COLS, watchLinkFromRow, watchLinkToRow, type WatchLinkRow } from '../watch-links.js';
import type { PgScope } from './scope.js';

export const PG_V7_WATCH_LINKS = `
CREATE TABLE watch_links (
  ord BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  token_hash TEXT NOT NULL UNIQUE,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  revoked_at BIGINT,
  data TEXT NOT NULL
);
CREATE INDEX watch_links_by_session ON watch_links (session_id, created_at);
`;

function params(r: WatchLinkRecord): unknown[] {
  const w = watchLinkToRow(r);
  return [w.id, w.tenant_id, w.session_id, w.token_hash, w.created_at, w.expires_at, w.revoked_at, w.data];
}

export class PgWatchLinkRepo implements WatchLinkRepo {
  constructor(private readonly s: PgScope) {}

  async insert(r: WatchLinkRecord): Promise<void> {
    await this.s.query(`INSERT INTO watch_links (${WATCH_LINK_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, params(r), { kind: 'watch link', id: r.id });
  }

  async get(id: string): Promise<WatchLinkRecord | undefined> {
    const row = (await this.s.query<WatchLinkRow>(`SELECT ${WATCH_LINK_COLS} FROM watch_links WHERE id = $1`, [id], { kind: 'watch link', id })).rows[0];
    return row && watchLinkFromRow(row);
  }

  async getByTokenHash(hash: string): Promise<WatchLinkRecord | undefined> {
    const row = (await this.s.query<WatchLinkRow>(`SELECT ${WATCH_LINK_COLS} FROM watch_links WHERE token_hash = $1`, [hash], { kind: 'watch link' })).rows[0];
    return row && watchLinkFromRow(row);
  }

  async listBySession(sessionId: string): Promise<WatchLinkRecord[]> {
    return (await this.s.query<WatchLinkRow>(`SELECT ${WATCH_LINK_COLS} FROM watch_links WHERE session_id = $1 ORDER BY created_at, ord`, [sessionId], { kind: 'watch link' })).rows.map(watchLinkFromRow);
  }

  async put(r: WatchLinkRecord): Promise<void> {
    const res = await this.s.query(
      'UPDATE watch_links SET tenant_id = $2, session_id = $3, token_hash = $4, created_at = $5, expires_at = $6, revoked_at = $7, data = $8 WHERE id = $1',
      params(r),
      { kind: 'watch link', id: r.id },
    );
    if (res.rowCount === 0) throw new NotFoundError('watch link', r.id);
  }
}
