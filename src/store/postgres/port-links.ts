/** Port links over PostgreSQL: the rows of ../port-links.ts, in insertion order (`ord`). */
import { NotFoundError } from '../../core/errors.js';
import type { PortLinkRecord } from '../../core/records.js';
import type { PortLinkRepo } from '../../core/store.js';
import { PORT_LINK_COLS, portLinkFromRow, portLinkToRow, type PortLinkRow } from '../port-links.js';
import type { PgScope } from './scope.js';

export const PG_V6_PORT_LINKS = `
CREATE TABLE port_links (
  ord BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  token_hash TEXT NOT NULL UNIQUE,
  expires_at BIGINT NOT NULL,
  revoked_at BIGINT,
  data TEXT NOT NULL
);
CREATE INDEX port_links_by_session ON port_links (session_id);
`;

const params = (r: PortLinkRecord): unknown[] => {
  const row = portLinkToRow(r);
  return [row.id, row.tenant_id, row.session_id, row.token_hash, row.expires_at, row.revoked_at, row.data];
};

export class PgPortLinkRepo implements PortLinkRepo {
  constructor(private readonly s: PgScope) {}

  async insert(r: PortLinkRecord): Promise<void> {
    await this.s.query(`INSERT INTO port_links (${PORT_LINK_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7)`, params(r), { kind: 'port link', id: r.id });
  }

  async get(id: string): Promise<PortLinkRecord | undefined> {
    const row = (await this.s.query<PortLinkRow>(`SELECT ${PORT_LINK_COLS} FROM port_links WHERE id = $1`, [id], { kind: 'port link', id })).rows[0];
    return row && portLinkFromRow(row);
  }

  async getByTokenHash(tokenHash: string): Promise<PortLinkRecord | undefined> {
    const row = (await this.s.query<PortLinkRow>(`SELECT ${PORT_LINK_COLS} FROM port_links WHERE token_hash = $1`, [tokenHash], { kind: 'port link', id: 'by token' })).rows[0];
    return row && portLinkFromRow(row);
  }

  async list(sessionId: string): Promise<PortLinkRecord[]> {
    return (await this.s.query<PortLinkRow>(`SELECT ${PORT_LINK_COLS} FROM port_links WHERE session_id = $1 ORDER BY ord`, [sessionId], { kind: 'port link', id: sessionId })).rows.map(portLinkFromRow);
  }

  async put(r: PortLinkRecord): Promise<void> {
    const res = await this.s.query(
      'UPDATE port_links SET tenant_id = $2, session_id = $3, token_hash = $4, expires_at = $5, revoked_at = $6, data = $7 WHERE id = $1',
      params(r),
      { kind: 'port link', id: r.id },
    );
    if (res.rowCount === 0) throw new NotFoundError('port link', r.id);
  }
}
