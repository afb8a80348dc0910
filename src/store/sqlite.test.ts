import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newId } from '../core/ids.js';
import type { SessionRecord, SnapshotGateRecord } from '../core/records.js';
import { session, snapshot, tenant } from '../../test/helpers/records.js';
import { openSqliteStore, type SqliteStore } from './sqlite.js';

let dir: string;
let dbPath: string;
const open: SqliteStore[] = [];

function openStore(path = dbPath): SqliteStore {
  const s = openSqliteStore({ path });
  open.push(s);
  return s;
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'berth-store-'));
  dbPath = join(dir, 'berth.db');
});
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
  rmSync(dir, { recursive: true, force: true });
});


describe('opening', () => {
  it('uses WAL on a file database', async () => {
    await openStore().close();
    const raw = new Database(dbPath);
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
  });

  it('refuses a path in a directory that does not exist, or an empty path', async () => {
    expect(() => openSqliteStore({ path: join(dir, 'nope', 'x.db') })).toThrow(expect.objectContaining({ code: 'config' }));
    expect(() => openSqliteStore({ path: '' })).toThrow(expect.objectContaining({ code: 'config' }));
  });

  it('refuses a file that is not a database', async () => {
    writeFileSync(dbPath, 'this is not sqlite '.repeat(100));
    expect(() => openSqliteStore({ path: dbPath })).toThrow(expect.objectContaining({ code: 'config' }));
  });

  it('works in memory', async () => {
    const s = openStore(':memory:');
    const r = session();
    await s.sessions.insert(r);
    expect(await s.sessions.get(r.id)).toEqual(r);
    expect(s.audit.anchorPath).toBeUndefined();
  });
});

describe('sessions', () => {
  it('insert, get, put, and unknown ids', async () => {
    const s = openStore();
    const r = session();
    await s.sessions.insert(r);
    expect(await s.sessions.get(r.id)).toEqual(r);
    expect(await s.sessions.get(newId('session'))).toBeUndefined();

    const next: SessionRecord = { ...r, state: 'hibernated', sandboxId: null, hibernationSnapshotId: newId('snapshot'), updatedAt: r.updatedAt + 1 };
    await s.sessions.put(next);
    expect(await s.sessions.get(r.id)).toEqual(next);
    expect(await s.sessions.list({ states: ['running'] })).toEqual([]);
  });

  it('put of an absent record throws not_found and writes nothing', async () => {
    const s = openStore();
    await expect(s.sessions.put(session())).rejects.toThrow(expect.objectContaining({ code: 'not_found' }));
    expect(await s.sessions.list()).toEqual([]);
  });

  it('a duplicate insert throws conflict', async () => {
    const s = openStore();
    const r = session();
    await s.sessions.insert(r);
    await expect(s.sessions.insert({ ...r, objective: 'other' })).rejects.toThrow(expect.objectContaining({ code: 'conflict' }));
    expect((await s.sessions.get(r.id))?.objective).toBe(r.objective);
  });

  it('list filters on tenant and states, in insertion order', async () => {
    const s = openStore();
    const a1 = session({ tenantId: 'ten_a', state: 'running' });
    const b1 = session({ tenantId: 'ten_b', state: 'paused' });
    const a2 = session({ tenantId: 'ten_a', state: 'hibernated' });
    const a3 = session({ tenantId: 'ten_a', state: 'paused' });
    for (const r of [a1, b1, a2, a3]) await s.sessions.insert(r);
    const ids = (rs: SessionRecord[]) => rs.map((r) => r.id);
    expect(ids(await s.sessions.list())).toEqual([a1.id, b1.id, a2.id, a3.id]);
    expect(ids(await s.sessions.list({ tenantId: 'ten_a' }))).toEqual([a1.id, a2.id, a3.id]);
    expect(ids(await s.sessions.list({ states: ['paused', 'running'] }))).toEqual([a1.id, b1.id, a3.id]);
    expect(ids(await s.sessions.list({ tenantId: 'ten_a', states: ['paused'] }))).toEqual([a3.id]);
    expect(await s.sessions.list({ states: [] })).toEqual([]);
    expect(await s.sessions.list({ tenantId: 'ten_none' })).toEqual([]);
  });

  it('nested records survive a close and reopen unchanged', async () => {
    const r = session();
    const s1 = openStore();
    await s1.sessions.insert(r);
    await s1.close();
    const got = await openStore().sessions.get(r.id);
    expect(got).toEqual(r);
    expect(got?.settings.env['WEIRD KEY']).toBe('ü "quoted"\n');
    expect(got?.metering.stateSeconds).toEqual({ creating: 0.5, running: 12.75 });
  });

  it('keeps the filtered fields in columns and the rest in the JSON column', async () => {
    const r = session();
    await openStore().sessions.insert(r);
    const raw = new Database(dbPath, { readonly: true });
    const row = raw.prepare('SELECT id, tenant_id, state, data FROM sessions').get() as Record<string, string>;
    raw.close();
    expect(row).toMatchObject({ id: r.id, tenant_id: r.tenantId, state: r.state });
    const data = JSON.parse(row.data ?? '') as Record<string, unknown>;
    expect(data).not.toHaveProperty('id');
    expect(data.identity).toEqual(r.identity);
  });
});

describe('snapshots', () => {
  it('insert, get, list by tenant and session, delete (idempotent)', async () => {
    const s = openStore();
    const x = snapshot({ tenantId: 'ten_a', sessionId: 'ses_1', kind: 'hibernation', name: null });
    const y = snapshot({ tenantId: 'ten_a', sessionId: 'ses_2' });
    const z = snapshot({ tenantId: 'ten_b', sessionId: 'ses_3' });
    for (const r of [x, y, z]) await s.snapshots.insert(r);
    expect(await s.snapshots.get(x.id)).toEqual(x);
    expect(await s.snapshots.get(newId('snapshot'))).toBeUndefined();
    expect((await s.snapshots.list()).map((r) => r.id)).toEqual([x.id, y.id, z.id]);
    expect((await s.snapshots.list({ tenantId: 'ten_a' })).map((r) => r.id)).toEqual([x.id, y.id]);
    expect(await s.snapshots.list({ sessionId: 'ses_3' })).toEqual([z]);
    expect(await s.snapshots.list({ tenantId: 'ten_a', sessionId: 'ses_3' })).toEqual([]);
    await expect(s.snapshots.insert(x)).rejects.toThrow(expect.objectContaining({ code: 'conflict' }));

    await s.snapshots.delete(y.id);
    await s.snapshots.delete(y.id);
    expect(await s.snapshots.get(y.id)).toBeUndefined();
    expect((await s.snapshots.list()).map((r) => r.id)).toEqual([x.id, z.id]);
  });

  it('keeps a gate copy per snapshot, deleted with its snapshot', async () => {
    const s = openStore();
    const x = snapshot();
    const y = snapshot();
    const copy = (snapshotId: string): SnapshotGateRecord => ({
      snapshotId,
      tenantId: x.tenantId,
      sessionId: x.sessionId,
      tools: ['fs.read'],
      settings: { breaker: { failures: 3, perMinute: 60 }, httpAllow: ['example.com'], approvalTtlS: 0 },
      plan: { objective: 'o', steps: [{ id: 'a', tool: 'fs.read', arguments: {} }] },
      planState: { cursor: 1, consumed: { a: 1 } },
      planSetAt: 5,
      planSetBy: 'root:root',
      createdAt: 7,
    });
    for (const r of [x, y]) {
      await s.snapshots.insert(r);
      await s.snapshotGates.insert(copy(r.id));
    }
    expect(await s.snapshotGates.get(x.id)).toEqual(copy(x.id));
    await expect(s.snapshotGates.insert(copy(x.id))).rejects.toThrow(expect.objectContaining({ code: 'conflict' }));
    await s.snapshots.delete(x.id);
    expect(await s.snapshotGates.get(x.id)).toBeUndefined();
    expect(await s.snapshotGates.get(y.id)).toEqual(copy(y.id));
  });
});

describe('tenants', () => {
  it('insert, get, getByKeyHash, list, and duplicates', async () => {
    const s = openStore();
    const a = tenant({ name: 'a' });
    const b = tenant({ name: 'b' });
    await s.tenants.insert(a);
    await s.tenants.insert(b);
    expect(await s.tenants.get(a.id)).toEqual(a);
    expect(await s.tenants.get(newId('tenant'))).toBeUndefined();
    expect(await s.tenants.getByKeyHash(b.apiKeyHash)).toEqual(b);
    expect(await s.tenants.getByKeyHash('f'.repeat(64))).toBeUndefined();
    expect(await s.tenants.list()).toEqual([a, b]);
    await expect(s.tenants.insert({ ...a, apiKeyHash: 'e'.repeat(64) })).rejects.toThrow(expect.objectContaining({ code: 'conflict' }));
    await expect(s.tenants.insert(tenant({ apiKeyHash: a.apiKeyHash }))).rejects.toThrow(expect.objectContaining({ code: 'conflict' }));
    expect(await s.tenants.list()).toHaveLength(2);
  });
});

describe('transaction', () => {
  it('returns the result and commits', async () => {
    const s = openStore();
    const r = session();
    expect(await s.transaction(async () => (await s.sessions.insert(r), 42))).toBe(42);
    expect(await s.sessions.get(r.id)).toEqual(r);
  });

  it('rolls every repo back when fn throws, and rethrows the error', async () => {
    const s = openStore();
    const r = session();
    const snap = snapshot();
    const err = new Error('boom');
    await expect(
      s.transaction(async () => {
        await s.sessions.insert(r);
        await s.snapshots.insert(snap);
        await s.tenants.insert(tenant());
        throw err;
      }),
    ).rejects.toThrow(err);
    expect(await s.sessions.get(r.id)).toBeUndefined();
    expect(await s.snapshots.get(snap.id)).toBeUndefined();
    expect(await s.tenants.list()).toEqual([]);
  });

  it('a nested call joins the outer transaction; its own failure undoes only its changes', async () => {
    const s = openStore();
    const outer = session();
    const inner = session();
    const kept = session();
    await s.transaction(async () => {
      await s.sessions.insert(outer);
      await expect(
        s.transaction(async () => {
          await s.sessions.insert(inner);
          await s.sessions.put(session()); // absent: not_found
        }),
      ).rejects.toThrow(expect.objectContaining({ code: 'not_found' }));
      await s.transaction(() => s.sessions.insert(kept));
    });
    expect(await s.sessions.get(outer.id)).toBeDefined();
    expect(await s.sessions.get(inner.id)).toBeUndefined();
    expect(await s.sessions.get(kept.id)).toBeDefined();

    const lost = session();
    await expect(
      s.transaction(async () => {
        await s.transaction(() => s.sessions.insert(lost));
        throw new Error('outer fails');
      }),
    ).rejects.toThrow();
    expect(await s.sessions.get(lost.id)).toBeUndefined();
  });

  it('a second connection sees nothing until commit, everything after', async () => {
    const s = openStore();
    const r = session();
    const other = new Database(dbPath, { readonly: true });
    const count = () => (other.prepare('SELECT count(*) AS n FROM sessions').get() as { n: number }).n;
    await s.transaction(async () => {
      await s.sessions.insert(r);
      expect(count()).toBe(0);
    });
    expect(count()).toBe(1);
    other.close();
  });

  it('a call from outside an open transaction waits for it and is not part of it', async () => {
    const s = openStore();
    const inTx = session();
    const outside = session();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const tx = s.transaction(async () => {
      await s.sessions.insert(inTx);
      await held;
      throw new Error('roll back');
    });
    const write = s.sessions.insert(outside);
    const read = s.sessions.get(inTx.id);
    release();
    await expect(tx).rejects.toThrow('roll back');
    await write;
    expect(await read).toBeUndefined(); // ran after the rollback, never saw the uncommitted row
    expect(await s.sessions.get(outside.id)).toEqual(outside); // not rolled back with the transaction
  });
});

describe('close', () => {
  it('is idempotent', async () => {
    const s = openStore();
    await s.close();
    await s.close();
  });
});
