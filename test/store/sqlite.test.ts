/** The store conformance suite and the audit tree suite against the embedded SQLite store, on files (with their anchors). */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll } from 'vitest';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite.js';
import { auditTreeConformance } from './audit-tree-suite.js';
import { storeConformance, type StoreUnderTest } from './store-suite.js';

const dir = mkdtempSync(join(tmpdir(), 'berth-store-suite-'));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));
/**
 * Closed stores and connections are kept reachable: better-sqlite3 on Node 24 can abort the process when V8
 * finalizes a Statement from a GC inside a microtask checkpoint (`Assertion failed: (env) != nullptr`).
 */
const retained: unknown[] = [];

/** A statement on a connection of its own (as someone with access to the file runs it). */
function raw<T>(store: StoreUnderTest, fn: (db: Database.Database) => T): T {
  const db = new Database((store as SqliteStore).path, { timeout: 5000 });
  retained.push(db);
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

storeConformance('sqlite', {
  async open() {
    return openSqliteStore({ path: join(dir, `t${++n}.db`) });
  },
  async sql(store: StoreUnderTest, statement: string) {
    raw(store, (db) => db.exec(statement));
  },
});

auditTreeConformance('sqlite', {
  async open(clock) {
    const s = openSqliteStore({ path: join(dir, `tree${++n}.db`), clock });
    retained.push(s);
    return s;
  },
  async reopen(store, clock) {
    const s = openSqliteStore({ path: (store as unknown as SqliteStore).path, clock });
    retained.push(s);
    return s;
  },
  async sql(store, statement, params = []) {
    // The suite writes PostgreSQL's $1, $2 … in order; SQLite takes them as ? in the same order.
    let i = 0;
    const text = statement.replace(/\$(\d+)/g, (_, k: string) => {
      if (Number(k) !== ++i) throw new Error(`parameters out of order in ${statement}`);
      return '?';
    });
    return raw(store, (db) => {
      const st = db.prepare(text);
      if (st.reader) return st.all(...params) as Record<string, unknown>[];
      st.run(...params);
      return [];
    });
  },
  async dropGuards(store) {
    const triggers = ['audit_no_update', 'audit_no_delete', 'audit_seq_next', 'audit_tree_no_update', 'audit_tree_no_delete', 'audit_tree_no_replace'];
    raw(store, (db) => db.exec(triggers.map((t) => `DROP TRIGGER IF EXISTS ${t};`).join('\n')));
  },
  refusedOnTree: ['DELETE FROM audit_tree', "UPDATE audit_tree SET hash = x'00'", "INSERT OR REPLACE INTO audit_tree (level, idx, hash) VALUES (0, 0, x'00')"],
});
