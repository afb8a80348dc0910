import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MIGRATIONS, applyMigrations, checkMigrations, type Migration } from './migrations.js';
import { openSqliteStore } from './sqlite.js';

let dir: string;
let dbPath: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'berth-migrations-'));
  dbPath = join(dir, 'berth.db');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function recorded(path = dbPath): { version: number; name: string; applied_at: number }[] {
  const raw = new Database(path, { readonly: true });
  try {
    return raw.prepare('SELECT version, name, applied_at FROM schema_migrations ORDER BY version').all() as {
      version: number;
      name: string;
      applied_at: number;
    }[];
  } finally {
    raw.close();
  }
}

function tables(db: Database.Database): string[] {
  return (db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map((r) => r.name);
}

const extra = (version: number, name: string, up: string): Migration => ({ version, name, up });

describe('the MIGRATIONS list', () => {
  it('is numbered 1..n without gaps', () => {
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
  });

  it('checkMigrations refuses gaps, wrong order and duplicate names', () => {
    const one = extra(1, 'a', 'SELECT 1');
    expect(() => checkMigrations([one, extra(3, 'b', '')])).toThrow(expect.objectContaining({ code: 'config' }));
    expect(() => checkMigrations([extra(2, 'b', ''), one])).toThrow(expect.objectContaining({ code: 'config' }));
    expect(() => checkMigrations([one, extra(2, 'a', '')])).toThrow(expect.objectContaining({ code: 'config' }));
    expect(() => checkMigrations([extra(1, 'Bad Name', '')])).toThrow(expect.objectContaining({ code: 'config' }));
  });
});

describe('applying', () => {
  it('records every migration on a new file, and is idempotent on reopen', async () => {
    let t = 1000;
    const clock = { now: () => t++ };
    const s1 = openSqliteStore({ path: dbPath, clock });
    expect(s1.schemaVersion).toBe(MIGRATIONS.length);
    await s1.close();
    const first = recorded();
    expect(first.map((r) => [r.version, r.name])).toEqual(MIGRATIONS.map((m) => [m.version, m.name]));

    await openSqliteStore({ path: dbPath, clock }).close();
    await openSqliteStore({ path: dbPath, clock }).close();
    expect(recorded()).toEqual(first); // same rows, same applied_at
  });

  it('applies only the pending migrations, in order, when the list grows', () => {
    const db = new Database(dbPath);
    expect(applyMigrations(db)).toEqual({ from: 0, to: MIGRATIONS.length });
    const n = MIGRATIONS.length;
    const longer = [
      ...MIGRATIONS,
      extra(n + 1, 'tools', 'CREATE TABLE tools (id TEXT PRIMARY KEY) STRICT'),
      extra(n + 2, 'tools_name', 'ALTER TABLE tools ADD COLUMN name TEXT'),
    ];
    expect(applyMigrations(db, { migrations: longer })).toEqual({ from: n, to: n + 2 });
    expect(applyMigrations(db, { migrations: longer })).toEqual({ from: n + 2, to: n + 2 });
    expect(tables(db)).toContain('tools');
    db.close();
  });

  it('runs all pending migrations in one transaction: a failing one leaves none applied', () => {
    const db = new Database(dbPath);
    const n = MIGRATIONS.length;
    const broken = [...MIGRATIONS, extra(n + 1, 'good', 'CREATE TABLE good (x INTEGER) STRICT'), extra(n + 2, 'bad', 'CREATE TABLE (')];
    expect(() => applyMigrations(db, { migrations: broken })).toThrow();
    expect(tables(db)).not.toContain('good');
    expect(tables(db)).not.toContain('sessions');
    expect(db.prepare('SELECT count(*) AS n FROM schema_migrations').get()).toEqual({ n: 0 });
    db.close();
  });

  it('function migrations run inside the transaction too', () => {
    const db = new Database(dbPath);
    const n = MIGRATIONS.length;
    const seeded = [
      ...MIGRATIONS,
      {
        version: n + 1,
        name: 'seed',
        up: (d: Database.Database) => {
          d.exec('CREATE TABLE seeded (x INTEGER) STRICT');
          d.prepare('INSERT INTO seeded VALUES (?)').run(7);
        },
      },
    ];
    applyMigrations(db, { migrations: seeded });
    expect(db.prepare('SELECT x FROM seeded').get()).toEqual({ x: 7 });
    db.close();
  });
});

describe('v5: the breaker settings get their wire names', () => {
  it('rewrites settings.breakerFailures/breakerPerMinute to settings.breaker.{failures,perMinute} in both gate tables', async () => {
    const db = new Database(dbPath);
    applyMigrations(db, { migrations: MIGRATIONS.slice(0, 4) });
    const old = { tools: null, settings: { breakerFailures: 3, breakerPerMinute: 60, httpAllow: ['example.com'], approvalTtlS: 5 }, plan: null, planState: null, planSetAt: null, planSetBy: null };
    db.prepare('INSERT INTO session_gate (session_id, tenant_id, data) VALUES (?, ?, ?)').run('ses_1', 'ten_a', JSON.stringify({ ...old, breaker: { open: false }, pausedByBreaker: false, calls: 2, updatedAt: 1 }));
    db.prepare('INSERT INTO snapshot_gate (snapshot_id, tenant_id, session_id, data) VALUES (?, ?, ?, ?)').run('snap_1', 'ten_a', 'ses_1', JSON.stringify({ ...old, createdAt: 1 }));
    db.close();
    const s = openSqliteStore({ path: dbPath });
    try {
      const want = { breaker: { failures: 3, perMinute: 60 }, httpAllow: ['example.com'], approvalTtlS: 5 };
      expect((await s.gates.get('ses_1'))?.settings).toEqual(want);
      expect((await s.snapshotGates.get('snap_1'))?.settings).toEqual(want);
      expect((await s.gates.get('ses_1'))?.calls).toBe(2);
    } finally {
      await s.close();
    }
  });
});

describe('refusing', () => {
  it('a file with a newer schema than this code knows', () => {
    const db = new Database(dbPath);
    const n = MIGRATIONS.length;
    applyMigrations(db, { migrations: [...MIGRATIONS, extra(n + 1, 'from_the_future', 'CREATE TABLE future (x INTEGER) STRICT')] });
    db.close();
    expect(() => openSqliteStore({ path: dbPath })).toThrow(expect.objectContaining({ code: 'config', details: expect.objectContaining({ dbVersion: n + 1 }) }));
    // and the refusal changed nothing
    expect(recorded().map((r) => r.version)).toEqual([...MIGRATIONS.map((m) => m.version), n + 1]);
  });

  it('a file whose history names a different migration', async () => {
    await openSqliteStore({ path: dbPath }).close();
    const raw = new Database(dbPath);
    raw.prepare("UPDATE schema_migrations SET name = 'something_else' WHERE version = 1").run();
    raw.close();
    expect(() => openSqliteStore({ path: dbPath })).toThrow(expect.objectContaining({ code: 'config' }));
  });

  it('a file with a gap in its history', () => {
    const db = new Database(dbPath);
    const n = MIGRATIONS.length;
    applyMigrations(db, { migrations: [...MIGRATIONS, extra(n + 1, 'x', 'SELECT 1'), extra(n + 2, 'y', 'SELECT 1')] });
    db.prepare('DELETE FROM schema_migrations WHERE version = ?').run(n + 1);
    expect(() => applyMigrations(db, { migrations: [...MIGRATIONS, extra(n + 1, 'x', 'SELECT 1'), extra(n + 2, 'y', 'SELECT 1')] })).toThrow(
      expect.objectContaining({ code: 'config' }),
    );
    db.close();
  });
});
