/**
 * Schema migrations for PostgreSQL. Version N here is the schema of version N in ../migrations.ts (the
 * SQLite list): same tables, same columns, same guarantees, written in PostgreSQL's SQL. The two lists
 * must name the same versions (a test compares them), so a database of either kind at version N holds
 * the same records. Each record table has an `ord` identity column: list order is insertion order, as
 * SQLite's rowid gives it.
 */
import type pg from 'pg';
import { ConfigError } from '../../core/errors.js';
import { PG_V6_PORT_LINKS } from './port-links.js';
import { PG_V7_WATCH_LINKS } from './watch-links.js';
import { V8_IDEMPOTENCY_KEYS } from './idempotency.js';
import { PG_V9_AUDIT_TREE } from './audit-tree.js';

export interface PgMigration {
  readonly version: number;
  readonly name: string;
  readonly up: string;
}

const V1_CORE_RECORDS = `
CREATE TABLE tenants (
  ord BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  api_key_hash TEXT NOT NULL UNIQUE,
  data TEXT NOT NULL
);

CREATE TABLE sessions (
  ord BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  state TEXT NOT NULL,
  data TEXT NOT NULL
);
CREATE INDEX sessions_by_tenant_state ON sessions (tenant_id, state);
CREATE INDEX sessions_by_state ON sessions (state);

CREATE TABLE snapshots (
  ord BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  data TEXT NOT NULL
);
CREATE INDEX snapshots_by_tenant ON snapshots (tenant_id);
CREATE INDEX snapshots_by_session ON snapshots (session_id);

-- principal and data hold canonical JSON, exactly the bytes hashEntry() hashed (TEXT, not JSONB, which
-- would reorder keys).
CREATE TABLE audit (
  seq BIGINT PRIMARY KEY,
  ts BIGINT NOT NULL,
  tenant_id TEXT,
  session_id TEXT,
  principal TEXT NOT NULL,
  action TEXT NOT NULL,
  outcome TEXT NOT NULL,
  data TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  hash TEXT NOT NULL
);
CREATE INDEX audit_by_tenant ON audit (tenant_id, seq);
CREATE INDEX audit_by_session ON audit (session_id, seq);

-- Append-only: UPDATE (also INSERT … ON CONFLICT DO UPDATE), DELETE and TRUNCATE are refused, and seq is
-- gapless at the database level.
CREATE FUNCTION berth_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit is append-only' USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER audit_no_update BEFORE UPDATE OR DELETE ON audit FOR EACH ROW EXECUTE FUNCTION berth_audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit FOR EACH STATEMENT EXECUTE FUNCTION berth_audit_append_only();
CREATE FUNCTION berth_audit_seq_next() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.seq IS DISTINCT FROM (SELECT coalesce(max(seq), 0) + 1 FROM audit) THEN
    RAISE EXCEPTION 'audit seq must be the previous seq + 1' USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER audit_seq_next BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION berth_audit_seq_next();
`;

const V2_GATE = `
CREATE TABLE tenant_policies (
  tenant_id TEXT PRIMARY KEY,
  text TEXT NOT NULL,
  version INTEGER NOT NULL,
  updated_at BIGINT NOT NULL,
  updated_by TEXT NOT NULL
);

CREATE TABLE tool_definitions (
  tenant_id TEXT NOT NULL,
  name TEXT NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (tenant_id, name)
);

CREATE TABLE session_gate (
  session_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  data TEXT NOT NULL
);

CREATE TABLE approvals (
  ord BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  tool TEXT NOT NULL,
  args_digest TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT,
  data TEXT NOT NULL
);
CREATE INDEX approvals_by_tenant_status ON approvals (tenant_id, status, created_at);
CREATE INDEX approvals_by_session_call ON approvals (session_id, args_digest, created_at);
CREATE INDEX approvals_pending_expiry ON approvals (status, expires_at);
`;

const V3_SNAPSHOT_GATE = `
CREATE TABLE snapshot_gate (
  snapshot_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  data TEXT NOT NULL
);

CREATE FUNCTION berth_snapshot_gate_follows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM snapshot_gate WHERE snapshot_id = OLD.id;
  RETURN OLD;
END $$;
CREATE TRIGGER snapshot_gate_follows_snapshot AFTER DELETE ON snapshots FOR EACH ROW EXECUTE FUNCTION berth_snapshot_gate_follows();
`;

/** As SQLite's v5 (../gate-migration.ts): `settings.breakerFailures|breakerPerMinute` → `settings.breaker.{failures,perMinute}`. */
const V5_GATE_BREAKER_SETTINGS = ['session_gate', 'snapshot_gate']
  .map(
    (t) => `
UPDATE ${t} SET data = jsonb_set(
  (data::jsonb #- '{settings,breakerFailures}') #- '{settings,breakerPerMinute}',
  '{settings,breaker}',
  jsonb_build_object('failures', data::jsonb #> '{settings,breakerFailures}', 'perMinute', data::jsonb #> '{settings,breakerPerMinute}')
)::text WHERE data::jsonb #> '{settings,breakerFailures}' IS NOT NULL;`,
  )
  .join('\n');

/** Append only, in step with ../migrations.ts: version N here and there is one schema. */
export const PG_MIGRATIONS: readonly PgMigration[] = Object.freeze([
  { version: 1, name: 'core_records', up: V1_CORE_RECORDS },
  { version: 2, name: 'tool_gate', up: V2_GATE },
  { version: 3, name: 'snapshot_gate', up: V3_SNAPSHOT_GATE },
  // SQLite's v4 adds the signed Merkle tree over the audit log. The PostgreSQL store had the hash chain only
  // when v4 shipped, so v4 here creates nothing (databases already at v4 must keep running it as it was);
  // the tree came with v9 below. v4 exists so that a version number names one point in the schema's history.
  { version: 4, name: 'audit_tree', up: '' },
  { version: 5, name: 'gate_breaker_settings', up: V5_GATE_BREAKER_SETTINGS },
  { version: 6, name: 'port_links', up: PG_V6_PORT_LINKS },
  { version: 7, name: 'watch_links', up: PG_V7_WATCH_LINKS },
  { version: 8, name: 'idempotency_keys', up: V8_IDEMPOTENCY_KEYS },
  // The signed Merkle tree (SQLite's since v4, where v9 is a no-op). A database with entries gets its
  // tree built when the store opens (PgAuditTree.open), in the same run that migrated it.
  { version: 9, name: 'audit_tree_postgres', up: PG_V9_AUDIT_TREE },
]);

/** Any number will do, as long as it is only Berth's: every migrating process waits on this lock. */
const MIGRATION_LOCK = 0x6265_7274; // 'bert'

/**
 * Brings the database up to the newest migration in one transaction, under an advisory lock, so two servers
 * starting on one new database cannot both migrate it. Refuses (ConfigError) a database whose history is
 * newer than, or differs from, this code's list.
 */
export async function applyPgMigrations(client: pg.ClientBase, list: readonly PgMigration[] = PG_MIGRATIONS, now: () => number = Date.now): Promise<{ from: number; to: number }> {
  await client.query('BEGIN');
  try {
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)');
    const applied = (await client.query<{ version: number; name: string }>('SELECT version, name FROM schema_migrations ORDER BY version')).rows;
    applied.forEach((row, i) => {
      const known = list[row.version - 1];
      if (row.version > list.length) {
        throw new ConfigError(`database schema version ${row.version} is newer than this code knows (${list.length})`, {
          details: { dbVersion: row.version, codeVersion: list.length },
        });
      }
      if (row.version !== i + 1 || known === undefined || known.name !== row.name) {
        throw new ConfigError(`database schema history differs from this code at version ${row.version}`, {
          details: { version: row.version, dbName: row.name, codeName: known?.name ?? null },
        });
      }
    });
    for (const m of list.slice(applied.length)) {
      await client.query(m.up);
      await client.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [m.version, m.name, now()]);
    }
    await client.query('COMMIT');
    return { from: applied.length, to: list.length };
  } catch (e) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw e;
  }
}
