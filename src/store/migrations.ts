import type BetterSqlite3 from 'better-sqlite3';
import { ConfigError } from '../core/errors.js';
import { V2_GATE, V3_SNAPSHOT_GATE, V5_GATE_BREAKER_SETTINGS } from './gate-migration.js';
import { V4_AUDIT_TREE } from './audit-tree.js';
import { V6_PORT_LINKS } from './port-links.js';
import { V7_WATCH_LINKS } from './watch-links.js';
import { V8_IDEMPOTENCY_KEYS } from './idempotency.js';

/**
 * Schema migrations for the embedded store: one ordered list, applied in order inside one IMMEDIATE
 * transaction and recorded in `schema_migrations`. A database whose recorded schema is newer than (or
 * different from) this list is refused with ConfigError, never "repaired".
 */
export interface Migration {
  /** 1, 2, 3 … with no gaps: the entry's position in MIGRATIONS. */
  readonly version: number;
  /** snake_case; recorded beside the version. A different name on open means the file came from other code. */
  readonly name: string;
  /**
   * SQL run with `db.exec()`, or a function for data migrations. Runs inside the migration transaction, so
   * it must not change PRAGMAs that SQLite ignores in a transaction (journal_mode, foreign_keys).
   */
  readonly up: string | ((db: BetterSqlite3.Database) => void);
}

const V1_CORE_RECORDS = `
CREATE TABLE tenants (
  id TEXT PRIMARY KEY,
  api_key_hash TEXT NOT NULL UNIQUE,
  data TEXT NOT NULL
) STRICT;

CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  state TEXT NOT NULL,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX sessions_by_tenant_state ON sessions (tenant_id, state);
CREATE INDEX sessions_by_state ON sessions (state);

CREATE TABLE snapshots (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX snapshots_by_tenant ON snapshots (tenant_id);
CREATE INDEX snapshots_by_session ON snapshots (session_id);

-- principal and data hold canonical JSON, exactly the bytes hashEntry() hashed.
CREATE TABLE audit (
  seq INTEGER PRIMARY KEY,
  ts INTEGER NOT NULL,
  tenant_id TEXT,
  session_id TEXT,
  principal TEXT NOT NULL,
  action TEXT NOT NULL,
  outcome TEXT NOT NULL,
  data TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  hash TEXT NOT NULL
) STRICT;
CREATE INDEX audit_by_tenant ON audit (tenant_id, seq);
CREATE INDEX audit_by_session ON audit (session_id, seq);

-- Append-only. The INSERT trigger also stops INSERT OR REPLACE, whose implicit delete fires no DELETE
-- trigger unless recursive_triggers is on, and keeps seq gapless at the database level.
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
CREATE TRIGGER audit_seq_next BEFORE INSERT ON audit
WHEN NEW.seq IS NOT coalesce((SELECT max(seq) FROM audit), 0) + 1
BEGIN SELECT RAISE(ABORT, 'audit seq must be the previous seq + 1'); END;
`;

/**
 * Validates an ordered list (versions 1..n, no gaps, unique snake_case names) and freezes it.
 * Throws ConfigError, so a bad merge of two branches that both added "version 7" fails on load and in tests.
 */
export function checkMigrations(list: readonly Migration[]): readonly Migration[] {
  const names = new Set<string>();
  list.forEach((m, i) => {
    if (m.version !== i + 1) {
      throw new ConfigError(`migration at position ${i + 1} has version ${m.version}`, {
        details: { position: i + 1, version: m.version },
      });
    }
    if (!/^[a-z][a-z0-9_]*$/.test(m.name) || names.has(m.name)) {
      throw new ConfigError(`migration ${m.version} has a bad or duplicate name`, { details: { version: m.version, name: m.name } });
    }
    names.add(m.name);
  });
  return Object.freeze(list.map((m) => Object.freeze({ ...m })));
}

/**
 * THE ordered list. To add tables (tools, plans, approvals, policies, api keys, …) append
 * `{ version: <last + 1>, name, up }` at the end; the SQL may live in your own file under src/store and be
 * imported here. Never edit, remove or reorder an entry that has shipped: write a new one.
 */
export const MIGRATIONS: readonly Migration[] = checkMigrations([
  { version: 1, name: 'core_records', up: V1_CORE_RECORDS },
  { version: 2, name: 'tool_gate', up: V2_GATE },
  { version: 3, name: 'snapshot_gate', up: V3_SNAPSHOT_GATE },
  { version: 4, name: 'audit_tree', up: V4_AUDIT_TREE },
  { version: 5, name: 'gate_breaker_settings', up: V5_GATE_BREAKER_SETTINGS },
  { version: 6, name: 'port_links', up: V6_PORT_LINKS },
  { version: 7, name: 'watch_links', up: V7_WATCH_LINKS },
  { version: 8, name: 'idempotency_keys', up: V8_IDEMPOTENCY_KEYS },
  // PostgreSQL's v4 was an empty placeholder (its store then had no Merkle tree); v9 creates the tree there
  // (postgres/audit-tree.ts). Here the tree has existed since v4, so v9 changes nothing: it exists so that
  // version N names the same schema on both stores (postgres/migrations.ts; a test compares the lists).
  { version: 9, name: 'audit_tree_postgres', up: '' },
]);

export interface MigrationResult {
  /** Schema version before (0 for a new file). */
  from: number;
  /** Schema version after. */
  to: number;
}

export interface ApplyMigrationsOptions {
  /** Default MIGRATIONS. Tests pass longer lists to simulate newer code. */
  migrations?: readonly Migration[];
  /** Milliseconds since the epoch, recorded as applied_at. Default Date.now(). */
  now?: () => number;
}

/**
 * Brings the database up to the newest migration, all pending steps in one IMMEDIATE transaction (so two
 * processes opening one new file cannot both migrate it). Idempotent. Throws ConfigError when the file
 * records a version this code does not know, or a name that differs from this code's migration.
 */
export function applyMigrations(db: BetterSqlite3.Database, opts: ApplyMigrationsOptions = {}): MigrationResult {
  const list = opts.migrations ? checkMigrations(opts.migrations) : MIGRATIONS;
  const now = opts.now ?? Date.now;
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at INTEGER NOT NULL
  ) STRICT`);
  // BEGIN/COMMIT by exec(), not db.transaction(): see KEPT_STATEMENTS in sqlite.ts.
  const run = (): MigrationResult => {
    const applied = db.prepare('SELECT version, name FROM schema_migrations ORDER BY version').all() as {
      version: number;
      name: string;
    }[];
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
    const insert = db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)');
    for (const m of list.slice(applied.length)) {
      if (typeof m.up === 'string') db.exec(m.up);
      else m.up(db);
      insert.run(m.version, m.name, now());
    }
    return { from: applied.length, to: list.length };
  };
  db.exec('BEGIN IMMEDIATE');
  try {
    const result = run();
    db.exec('COMMIT');
    return result;
  } catch (e) {
    if (db.inTransaction) db.exec('ROLLBACK');
    throw e;
  }
}
