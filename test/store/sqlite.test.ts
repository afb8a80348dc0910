/** The store conformance suite against the embedded SQLite store, on a file (with its anchor). */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll } from 'vitest';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite.js';
import { storeConformance, type StoreUnderTest } from './store-suite.js';

const dir = mkdtempSync(join(tmpdir(), 'berth-store-suite-'));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

storeConformance('sqlite', {
  async open() {
    return openSqliteStore({ path: join(dir, `t${++n}.db`) });
  },
  async sql(store: StoreUnderTest, statement: string) {
    const raw = new Database((store as SqliteStore).path, { timeout: 5000 });
    try {
      raw.exec(statement);
    } finally {
      raw.close();
    }
  },
});
