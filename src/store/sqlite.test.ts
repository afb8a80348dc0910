import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newId, newMachineId } from '../core/ids.js';
import { emptyMetering } from '../core/records.js';
import type { SessionRecord, SnapshotGateRecord, SnapshotRecord, TenantRecord } from '../core/records.js';
import { openSqliteStore, type SqliteStore } from './sqlite.js';

let dir: string;
let dbPath: string;
const open: SqliteStore[] = [];

function openStore(path = dbPath): SqliteStore {
  const s = openSqliteStore({ path });
  open.push(s);
  return s;
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'berth-store-'));
  dbPath = join(dir, 'berth.db');
});
afterEach(() => {
  for (const s of open.splice(0)) s.close();
  rmSync(dir, { recursive: true, force: true });
});

function session(over: Partial<SessionRecord> = {}): SessionRecord {
  const id = newId('session');
  return {
    id,
    tenantId: 'ten_a',
    backend: 'gvisor',
    state: 'running',
    objective: 'fix the build',
    settings: { memoryMb: 512, cpus: 1, idleTimeoutS: 0, env: { PATH: '/usr/bin', 'WEIRD KEY': 'ü "quoted"\n' } },
    metadata: { ticket: 'BER-1' },
    sandboxId: `sbx-${id}`,
    identity: { hostname: 'h1', machineId: newMachineId(), generation: 3, reason: 'wake' },
    hibernationSnapshotId: null,
    parentSnapshotId: null,
    failureReason: null,
    agentTokenHash: 'a'.repeat(64),
    createdAt: 1_700_000_000_000,
    updatedAt: 1_700_000_000_500,
    stateSince: 1_700_000_000_400,
    lastActivityAt: 1_700_000_000_450,
    metering: { ...emptyMetering(), cpuSeconds: 1.25, stateSeconds: { creating: 0.5, running: 12.75 } },
    ...over,
  };
}

function snapshot(over: Partial<SnapshotRecord> = {}): SnapshotRecord {
  return {
    id: newId('snapshot'),
    tenantId: 'ten_a',
    sessionId: 'ses_x',
    kind: 'named',
    name: 'before-migration',
    backend: 'qemu',
    settings: { memoryMb: 1024, cpus: 2, idleTimeoutS: 60, env: {} },
    sizeBytes: 123_456_789,
    createdAt: 1_700_000_000_000,
    ...over,
  };
}

function tenant(over: Partial<TenantRecord> = {}): TenantRecord {
  return { id: newId('tenant'), name: 'acme', apiKeyHash: newMachineId() + newMachineId(), createdAt: 1_700_000_000_000, ...over };
}

describe('opening', () => {
  it('uses WAL on a file database', () => {
    openStore().close();
    const raw = new Database(dbPath);
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
  });

  it('refuses a path in a directory that does not exist, or an empty path', () => {
    expect(() => openSqliteStore({ path: join(dir, 'nope', 'x.db') })).toThrow(expect.objectContaining({ code: 'config' }));
    expect(() => openSqliteStore({ path: '' })).toThrow(expect.objectContaining({ code: 'config' }));
  });

  it('refuses a file that is not a database', () => {
    writeFileSync(dbPath, 'this is not sqlite '.repeat(100));
    expect(() => openSqliteStore({ path: dbPath })).toThrow(expect.objectContaining({ code: 'config' }));
  });

  it('works in memory', () => {
    const s = openStore(':memory:');
    const r = session();
    s.sessions.insert(r);
    expect(s.sessions.get(r.id)).toEqual(r);
    expect(s.audit.anchorPath).toBeUndefined();
  });
});

describe('sessions', () => {
  it('insert, get, put, and unknown ids', () => {
    const s = openStore();
    const r = session();
    s.sessions.insert(r);
    expect(s.sessions.get(r.id)).toEqual(r);
    expect(s.sessions.get(newId('session'))).toBeUndefined();

    const next: SessionRecord = { ...r, state: 'hibernated', sandboxId: null, hibernationSnapshotId: newId('snapshot'), updatedAt: r.updatedAt + 1 };
    s.sessions.put(next);
    expect(s.sessions.get(r.id)).toEqual(next);
    expect(s.sessions.list({ states: ['running'] })).toEqual([]);
  });

  it('put of an absent record throws not_found and writes nothing', () => {
    const s = openStore();
    expect(() => s.sessions.put(session())).toThrow(expect.objectContaining({ code: 'not_found' }));
    expect(s.sessions.list()).toEqual([]);
  });

  it('a duplicate insert throws conflict', () => {
    const s = openStore();
    const r = session();
    s.sessions.insert(r);
    expect(() => s.sessions.insert({ ...r, objective: 'other' })).toThrow(expect.objectContaining({ code: 'conflict' }));
    expect(s.sessions.get(r.id)?.objective).toBe(r.objective);
  });

  it('list filters on tenant and states, in insertion order', () => {
    const s = openStore();
    const a1 = session({ tenantId: 'ten_a', state: 'running' });
    const b1 = session({ tenantId: 'ten_b', state: 'paused' });
    const a2 = session({ tenantId: 'ten_a', state: 'hibernated' });
    const a3 = session({ tenantId: 'ten_a', state: 'paused' });
    for (const r of [a1, b1, a2, a3]) s.sessions.insert(r);
    const ids = (rs: SessionRecord[]) => rs.map((r) => r.id);
    expect(ids(s.sessions.list())).toEqual([a1.id, b1.id, a2.id, a3.id]);
    expect(ids(s.sessions.list({ tenantId: 'ten_a' }))).toEqual([a1.id, a2.id, a3.id]);
    expect(ids(s.sessions.list({ states: ['paused', 'running'] }))).toEqual([a1.id, b1.id, a3.id]);
    expect(ids(s.sessions.list({ tenantId: 'ten_a', states: ['paused'] }))).toEqual([a3.id]);
    expect(s.sessions.list({ states: [] })).toEqual([]);
    expect(s.sessions.list({ tenantId: 'ten_none' })).toEqual([]);
  });

  it('nested records survive a close and reopen unchanged', () => {
    const r = session();
    const s1 = openStore();
    s1.sessions.insert(r);
    s1.close();
    const got = openStore().sessions.get(r.id);
    expect(got).toEqual(r);
    expect(got?.settings.env['WEIRD KEY']).toBe('ü "quoted"\n');
    expect(got?.metering.stateSeconds).toEqual({ creating: 0.5, running: 12.75 });
  });

  it('keeps the filtered fields in columns and the rest in the JSON column', () => {
    const r = session();
    openStore().sessions.insert(r);
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
  it('insert, get, list by tenant and session, delete (idempotent)', () => {
    const s = openStore();
    const x = snapshot({ tenantId: 'ten_a', sessionId: 'ses_1', kind: 'hibernation', name: null });
    const y = snapshot({ tenantId: 'ten_a', sessionId: 'ses_2' });
    const z = snapshot({ tenantId: 'ten_b', sessionId: 'ses_3' });
    for (const r of [x, y, z]) s.snapshots.insert(r);
    expect(s.snapshots.get(x.id)).toEqual(x);
    expect(s.snapshots.get(newId('snapshot'))).toBeUndefined();
    expect(s.snapshots.list().map((r) => r.id)).toEqual([x.id, y.id, z.id]);
    expect(s.snapshots.list({ tenantId: 'ten_a' }).map((r) => r.id)).toEqual([x.id, y.id]);
    expect(s.snapshots.list({ sessionId: 'ses_3' })).toEqual([z]);
    expect(s.snapshots.list({ tenantId: 'ten_a', sessionId: 'ses_3' })).toEqual([]);
    expect(() => s.snapshots.insert(x)).toThrow(expect.objectContaining({ code: 'conflict' }));

    s.snapshots.delete(y.id);
    s.snapshots.delete(y.id);
    expect(s.snapshots.get(y.id)).toBeUndefined();
    expect(s.snapshots.list().map((r) => r.id)).toEqual([x.id, z.id]);
  });

  it('keeps a gate copy per snapshot, deleted with its snapshot', () => {
    const s = openStore();
    const x = snapshot();
    const y = snapshot();
    const copy = (snapshotId: string): SnapshotGateRecord => ({
      snapshotId,
      tenantId: x.tenantId,
      sessionId: x.sessionId,
      tools: ['fs.read'],
      settings: { breakerFailures: 3, breakerPerMinute: 60, httpAllow: ['example.com'], approvalTtlS: 0 },
      plan: { objective: 'o', steps: [{ id: 'a', tool: 'fs.read', arguments: {} }] },
      planState: { cursor: 1, consumed: { a: 1 } },
      planSetAt: 5,
      planSetBy: 'root:root',
      createdAt: 7,
    });
    for (const r of [x, y]) {
      s.snapshots.insert(r);
      s.snapshotGates.insert(copy(r.id));
    }
    expect(s.snapshotGates.get(x.id)).toEqual(copy(x.id));
    expect(() => s.snapshotGates.insert(copy(x.id))).toThrow(expect.objectContaining({ code: 'conflict' }));
    s.snapshots.delete(x.id);
    expect(s.snapshotGates.get(x.id)).toBeUndefined();
    expect(s.snapshotGates.get(y.id)).toEqual(copy(y.id));
  });
});

describe('tenants', () => {
  it('insert, get, getByKeyHash, list, and duplicates', () => {
    const s = openStore();
    const a = tenant({ name: 'a' });
    const b = tenant({ name: 'b' });
    s.tenants.insert(a);
    s.tenants.insert(b);
    expect(s.tenants.get(a.id)).toEqual(a);
    expect(s.tenants.get(newId('tenant'))).toBeUndefined();
    expect(s.tenants.getByKeyHash(b.apiKeyHash)).toEqual(b);
    expect(s.tenants.getByKeyHash('f'.repeat(64))).toBeUndefined();
    expect(s.tenants.list()).toEqual([a, b]);
    expect(() => s.tenants.insert({ ...a, apiKeyHash: 'e'.repeat(64) })).toThrow(expect.objectContaining({ code: 'conflict' }));
    expect(() => s.tenants.insert(tenant({ apiKeyHash: a.apiKeyHash }))).toThrow(expect.objectContaining({ code: 'conflict' }));
    expect(s.tenants.list()).toHaveLength(2);
  });
});

describe('transaction', () => {
  it('returns the result and commits', () => {
    const s = openStore();
    const r = session();
    expect(s.transaction(() => (s.sessions.insert(r), 42))).toBe(42);
    expect(s.sessions.get(r.id)).toEqual(r);
  });

  it('rolls every repo back when fn throws, and rethrows the error', () => {
    const s = openStore();
    const r = session();
    const snap = snapshot();
    const err = new Error('boom');
    expect(() =>
      s.transaction(() => {
        s.sessions.insert(r);
        s.snapshots.insert(snap);
        s.tenants.insert(tenant());
        throw err;
      }),
    ).toThrow(err);
    expect(s.sessions.get(r.id)).toBeUndefined();
    expect(s.snapshots.get(snap.id)).toBeUndefined();
    expect(s.tenants.list()).toEqual([]);
  });

  it('a nested call joins the outer transaction; its own failure undoes only its changes', () => {
    const s = openStore();
    const outer = session();
    const inner = session();
    const kept = session();
    s.transaction(() => {
      s.sessions.insert(outer);
      expect(() =>
        s.transaction(() => {
          s.sessions.insert(inner);
          s.sessions.put(session()); // absent: not_found
        }),
      ).toThrow(expect.objectContaining({ code: 'not_found' }));
      s.transaction(() => s.sessions.insert(kept));
    });
    expect(s.sessions.get(outer.id)).toBeDefined();
    expect(s.sessions.get(inner.id)).toBeUndefined();
    expect(s.sessions.get(kept.id)).toBeDefined();

    const lost = session();
    expect(() =>
      s.transaction(() => {
        s.transaction(() => s.sessions.insert(lost));
        throw new Error('outer fails');
      }),
    ).toThrow();
    expect(s.sessions.get(lost.id)).toBeUndefined();
  });

  it('a second connection sees nothing until commit, everything after', () => {
    const s = openStore();
    const r = session();
    const other = new Database(dbPath, { readonly: true });
    const count = () => (other.prepare('SELECT count(*) AS n FROM sessions').get() as { n: number }).n;
    s.transaction(() => {
      s.sessions.insert(r);
      expect(count()).toBe(0);
    });
    expect(count()).toBe(1);
    other.close();
  });
});

describe('close', () => {
  it('is idempotent', () => {
    const s = openStore();
    s.close();
    s.close();
  });
});
