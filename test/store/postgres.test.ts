/**
 * The store conformance and audit tree suites against PostgreSQL 15, in a private cluster this file starts
 * and stops, and what only PostgreSQL needs showing: the migrations mean what SQLite's mean (a database from
 * before the tree gets it), a second server on the same database continues one chain and one signed tree,
 * and the race that forUpdate prevents is real there.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HeadSigner, canonicalJson, type Clock } from '../../src/core/index.js';
import { emptyMetering, type SessionRecord } from '../../src/core/records.js';
import { verifyAudit } from '../../src/store/audit.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { PG_MIGRATIONS, applyPgMigrations } from '../../src/store/postgres/migrations.js';
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres/store.js';
import { skipReason } from '../helpers/env.js';
import { postgresMissing, startPostgres, type PgCluster } from '../helpers/postgres.js';
import { session, storeConformance, type StoreUnderTest } from './store-suite.js';
import { auditTreeConformance } from './audit-tree-suite.js';
import { mth } from '../helpers/merkle-verifier.js';

const skip = skipReason('PostgreSQL store tests', postgresMissing());
let cluster: PgCluster;
const urls = new WeakMap<object, string>();
const dir = mkdtempSync(join(tmpdir(), 'berth-pg-anchor-'));

async function sql(url: string, statement: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(statement);
  } finally {
    await c.end();
  }
}

/** Rows of one statement on a connection of its own, int8 read as numbers (as the store reads them). */
async function rowsOf(url: string, statement: string, params: unknown[] = []): Promise<Record<string, unknown>[]> {
  const c = new pg.Client({ connectionString: url, types: { getTypeParser: ((oid: number, f?: 'text' | 'binary') => (oid === 20 ? Number : pg.types.getTypeParser(oid, f ?? 'text'))) as pg.CustomTypesConfig['getTypeParser'] } });
  await c.connect();
  try {
    return (await c.query(statement, params)).rows;
  } finally {
    await c.end();
  }
}

async function open(url?: string, anchorPath?: string, clock?: Clock): Promise<PostgresStore> {
  const u = url ?? (await cluster.newDatabase());
  const s = await openPostgresStore({ url: u, ...(anchorPath ? { anchorPath } : {}), ...(clock ? { clock } : {}) });
  urls.set(s, u);
  return s;
}

describe.skipIf(skip)('postgres', () => {
  beforeAll(async () => {
    cluster = await startPostgres();
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  storeConformance('postgres', {
    open: () => open(),
    sql: (store: StoreUnderTest, statement: string) => sql(urls.get(store) as string, statement),
  });

  auditTreeConformance('postgres', {
    open: (clock) => open(undefined, undefined, clock),
    reopen: (store, clock) => open(urls.get(store), undefined, clock),
    sql: (store, statement, params) => rowsOf(urls.get(store) as string, statement, params),
    async dropGuards(store) {
      for (const t of ['audit', 'audit_tree']) await rowsOf(urls.get(store) as string, `ALTER TABLE ${t} DISABLE TRIGGER USER`);
    },
    refusedOnTree: [
      'DELETE FROM audit_tree',
      'TRUNCATE audit_tree',
      "UPDATE audit_tree SET hash = '\\x00'",
      "INSERT INTO audit_tree (level, idx, hash) VALUES (0, 0, '\\x00')",
      "INSERT INTO audit_tree (level, idx, hash) VALUES (0, 0, '\\x00') ON CONFLICT (level, idx) DO UPDATE SET hash = excluded.hash",
      "INSERT INTO audit_tree (level, idx, hash) VALUES (0, 0, '\\x00') ON CONFLICT DO NOTHING",
    ],
  });

  describe('postgres only', () => {
    it('a database from before the tree (schema 8) with entries gets its tree when the store opens, from the rows\' bytes', async () => {
      const s = await open();
      const url = urls.get(s) as string;
      for (let i = 0; i < 5; i++) await s.audit.append({ tenantId: null, sessionId: null, principal: { kind: 'system', id: 'system', tenantId: null }, action: 'x.y', outcome: 'ok', data: { i, s: 'ü' } });
      await s.close();
      // Back to schema 8: no tree tables, v9 not recorded.
      await sql(url, `DROP TABLE audit_tree, audit_signed_head; DROP FUNCTION berth_audit_tree_append_only, berth_audit_tree_no_replace;
        DELETE FROM schema_migrations WHERE version = 9`);
      const again = await open(url);
      try {
        expect(again.schemaVersion).toBe(9);
        const texts = (await again.audit.query()).map((e) => Buffer.from(canonicalJson(e), 'utf8'));
        expect(await again.audit.tree.head()).toEqual({ treeSize: 5, rootHash: mth(texts).toString('hex') });
        const signer = HeadSigner.fromPem(HeadSigner.generatePem());
        await again.audit.tree.attachSigner(signer);
        await again.audit.tree.signNow(Date.now());
        expect(await again.audit.tree.verify([], signer.publicKey)).toMatchObject({ ok: true, treeSize: 5, latestSigned: { ok: true } });
      } finally {
        await again.close();
      }
    });

    it('two servers with one key on one database keep one signed tree: each signs over the other\'s appends', async () => {
      const signer = HeadSigner.fromPem(HeadSigner.generatePem());
      const a = await open();
      const b = await open(urls.get(a));
      try {
        await a.audit.tree.attachSigner(signer);
        await b.audit.tree.attachSigner(signer);
        await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 ? a : b).audit.append({ tenantId: null, sessionId: null, principal: { kind: 'system', id: 'system', tenantId: null }, action: 'x.y', outcome: 'ok', data: { i } })));
        const v = await b.audit.tree.verify([await a.audit.tree.signNow(Date.now())], signer.publicKey);
        expect(v).toMatchObject({ ok: true, treeSize: 12, latestSigned: { ok: true, treeSize: 12 }, checkpoints: [{ ok: true }] });
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('migrations name the same versions as SQLite\'s, and a reopen changes nothing', async () => {
      expect(PG_MIGRATIONS.map((m) => [m.version, m.name])).toEqual(MIGRATIONS.map((m) => [m.version, m.name]));
      const s = await open();
      expect(s.schemaVersion).toBe(MIGRATIONS.length);
      const url = urls.get(s) as string;
      await s.close();
      const again = await open(url);
      expect(again.schemaVersion).toBe(MIGRATIONS.length);
      await again.close();
      await sql(url, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (${MIGRATIONS.length + 1}, 'from_the_future', 0)`);
      await expect(openPostgresStore({ url })).rejects.toMatchObject({ code: 'config' });
    });

    it('v5 gives the stored breaker settings their wire names, as SQLite\'s v5 does', async () => {
      const url = await cluster.newDatabase();
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        await applyPgMigrations(c, PG_MIGRATIONS.slice(0, 4));
        const old = { tools: null, settings: { breakerFailures: 3, breakerPerMinute: 60, httpAllow: ['example.com'], approvalTtlS: 5 }, plan: null, planState: null, planSetAt: null, planSetBy: null };
        await c.query('INSERT INTO session_gate (session_id, tenant_id, data) VALUES ($1, $2, $3)', ['ses_1', 'ten_a', JSON.stringify({ ...old, breaker: { open: false }, pausedByBreaker: false, calls: 2, updatedAt: 1 })]);
        await c.query('INSERT INTO snapshot_gate (snapshot_id, tenant_id, session_id, data) VALUES ($1, $2, $3, $4)', ['snap_1', 'ten_a', 'ses_1', JSON.stringify({ ...old, createdAt: 1 })]);
      } finally {
        await c.end();
      }
      const s = await open(url);
      try {
        const want = { breaker: { failures: 3, perMinute: 60 }, httpAllow: ['example.com'], approvalTtlS: 5 };
        expect((await s.gates.get('ses_1'))?.settings).toEqual(want);
        expect((await s.snapshotGates.get('snap_1'))?.settings).toEqual(want);
      } finally {
        await s.close();
      }
    });

    it('refuses a bad URL and a database it cannot reach, as config errors', async () => {
      await expect(openPostgresStore({ url: 'mysql://x' })).rejects.toMatchObject({ code: 'config', details: { field: 'database' } });
      await expect(openPostgresStore({ url: `postgres://berth@127.0.0.1:${cluster.port}/no_such_db` })).rejects.toMatchObject({ code: 'config' });
    });

    it('idempotency owners: a server sharing the database is alive while its store is open, gone once closed', async () => {
      const a = await open();
      const b = await open(urls.get(a));
      try {
        await a.idempotency.holdOwner('server-a');
        await a.idempotency.holdOwner('server-a');
        expect(await b.idempotency.ownerAlive('server-a')).toBe(true);
        expect(await b.idempotency.ownerAlive('server-a')).toBe(true); // asking does not take it
        expect(await b.idempotency.ownerAlive('server-gone')).toBe(false);
        await a.close();
        expect(await b.idempotency.ownerAlive('server-a')).toBe(false);
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('two stores on one database (two servers) continue one chain and see each other\'s records', async () => {
      const a = await open();
      const b = await open(urls.get(a));
      try {
        await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).audit.append({ tenantId: null, sessionId: null, principal: { kind: 'system', id: 'system', tenantId: null }, action: 'x.y', outcome: 'ok', data: { i } })));
        expect((await a.audit.query()).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        expect(await verifyAudit(b)).toMatchObject({ ok: true, entries: 10 });
        const r = session();
        await a.sessions.insert(r);
        expect(await b.sessions.get(r.id)).toEqual(r);
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('without forUpdate, two racing read-modify-writes lose one (the race forUpdate closes is real)', async () => {
      const s = await open();
      try {
        const r = session({ metering: emptyMetering() });
        await s.sessions.insert(r);
        let reads = 0;
        let bothRead!: () => void;
        const barrier = new Promise<void>((done) => (bothRead = done));
        const bump = () =>
          s.transaction(async (tx) => {
            const cur = (await tx.sessions.get(r.id)) as SessionRecord;
            if (++reads === 2) bothRead();
            await barrier;
            await tx.sessions.put({ ...cur, metering: { ...cur.metering, execCount: cur.metering.execCount + 1 } });
          });
        await Promise.all([bump(), bump()]);
        expect((await s.sessions.get(r.id))?.metering.execCount).toBe(1);
      } finally {
        await s.close();
      }
    });

    it('keeps a head anchor file: follows commits, not rollbacks; a cut tail is caught by verify', async () => {
      const anchor = join(dir, 'audit-head');
      const s = await open(undefined, anchor);
      const url = urls.get(s) as string;
      const e1 = await s.audit.append({ tenantId: null, sessionId: null, principal: { kind: 'root', id: 'root', tenantId: null }, action: 'a.b', outcome: 'ok', data: {} });
      await expect(
        s.transaction(async () => {
          await s.audit.append({ tenantId: null, sessionId: null, principal: { kind: 'root', id: 'root', tenantId: null }, action: 'a.c', outcome: 'ok', data: {} });
          throw new Error('rolled back');
        }),
      ).rejects.toThrow('rolled back');
      for (let i = 0; i < 3; i++) await s.audit.append({ tenantId: null, sessionId: null, principal: { kind: 'root', id: 'root', tenantId: null }, action: 'a.d', outcome: 'ok', data: { i } });
      expect(e1.seq).toBe(1);
      expect(await verifyAudit(s)).toMatchObject({ ok: true, entries: 4, anchor: 'matched' });
      await s.close();
      // Someone with database access removes the last entry (dropping the guard first).
      await sql(url, 'ALTER TABLE audit DISABLE TRIGGER USER; DELETE FROM audit WHERE seq = 4; ALTER TABLE audit ENABLE TRIGGER USER');
      const s2 = await open(url, anchor);
      try {
        expect(s2.audit.anchorFrozen).toBe(true);
        expect(await verifyAudit(s2)).toMatchObject({ ok: false, problem: 'removed', anchor: 'ahead' });
      } finally {
        await s2.close();
      }
    });
  });
});
