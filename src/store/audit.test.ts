import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GENESIS_HASH, hashEntry, type AuditEntry, type AuditInput } from '../core/audit.js';
import { UNREADABLE, readAnchor, verifyAudit } from './audit.js';
import { openSqliteStore, type SqliteStore } from './sqlite.js';

let dir: string;
let dbPath: string;
let anchorPath: string;
let t: number;
const clock = { now: () => (t += 1000) };
const open: SqliteStore[] = [];

function openStore(path = dbPath): SqliteStore {
  const s = openSqliteStore({ path, clock });
  open.push(s);
  return s;
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'berth-audit-'));
  dbPath = join(dir, 'berth.db');
  anchorPath = `${dbPath}.audit-head`;
  t = 1_700_000_000_000;
});
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
  rmSync(dir, { recursive: true, force: true });
});

function input(n: number, over: Partial<AuditInput> = {}): AuditInput {
  return {
    tenantId: 'ten_a',
    sessionId: 'ses_1',
    principal: { kind: 'operator', id: 'ten_a', tenantId: 'ten_a' },
    action: 'tool.call',
    outcome: 'ok',
    data: { n, argv: ['ls', '-la'], nested: { deep: [1, { x: null }] } },
    ...over,
  };
}

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

/** A store holding `n` entries. */
async function filled(n: number): Promise<SqliteStore> {
  const s = openStore();
  for (let i = 1; i <= n; i++) await s.audit.append(input(i));
  await s.flushed(); // the anchor follows in the background; the attacks below come after it
  return s;
}

/** What someone with write access to the file does: drop the guards, run SQL. The store must be closed. */
function attack(...sql: string[]): void {
  const raw = new Database(dbPath);
  raw.exec('DROP TRIGGER IF EXISTS audit_no_update; DROP TRIGGER IF EXISTS audit_no_delete; DROP TRIGGER IF EXISTS audit_seq_next;');
  for (const q of sql) raw.exec(q);
  raw.close();
}

async function reopenAfter(s: SqliteStore, ...sql: string[]): Promise<SqliteStore> {
  await s.close();
  attack(...sql);
  return openStore();
}

describe('append', () => {
  it('numbers entries 1, 2, 3, takes ts from the clock and links each hash to the previous one', async () => {
    const s = openStore();
    t = 1_700_000_000_000;
    const a = await s.audit.append(input(1));
    const b = await s.audit.append(input(2, { tenantId: null, sessionId: null, principal: { kind: 'system', id: 'system', tenantId: null } }));
    const c = await s.audit.append(input(3));
    expect([a.seq, b.seq, c.seq]).toEqual([1, 2, 3]);
    expect([a.ts, b.ts, c.ts]).toEqual([1_700_000_001_000, 1_700_000_002_000, 1_700_000_003_000]);
    expect(a.prevHash).toBe(GENESIS_HASH);
    expect(b.prevHash).toBe(a.hash);
    expect(c.prevHash).toBe(b.hash);
    for (const e of [a, b, c]) {
      const { hash, ...rest } = e;
      expect(hashEntry(rest)).toBe(hash);
    }
    expect(await s.audit.query()).toEqual([a, b, c]);
  });

  it('continues the chain after a reopen', async () => {
    const s = await filled(2);
    const head = s.audit.head();
    await s.close();
    const e = await openStore().audit.append(input(3));
    expect(e.seq).toBe(3);
    expect(e.prevHash).toBe(head.hash);
  });

  it('refuses input it cannot store faithfully, appending nothing', async () => {
    const s = openStore();
    await expect(s.audit.append(input(1, { action: '' }))).rejects.toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    await expect(s.audit.append(input(1, { data: { x: Number.POSITIVE_INFINITY } }))).rejects.toThrow(
      expect.objectContaining({ code: 'invalid_argument' }),
    );
    await expect(s.audit.append(input(1, { data: [] as unknown as Record<string, unknown> }))).rejects.toThrow(
      expect.objectContaining({ code: 'invalid_argument' }),
    );
    expect(await s.audit.query()).toEqual([]);
  });

  it('stores what it hashed: a Date in data still verifies after a reopen', async () => {
    const s = openStore();
    await s.audit.append(input(1, { data: { when: new Date(0), skip: undefined } }));
    await s.close();
    expect(await verifyAudit(openStore())).toMatchObject({ ok: true, entries: 1 });
  });

  it('refuses a clock that returns a non-integer time', async () => {
    const s = openSqliteStore({ path: ':memory:', clock: { now: () => 1.5 } });
    open.push(s);
    await expect(s.audit.append(input(1))).rejects.toThrow(expect.objectContaining({ code: 'config' }));
    expect(await s.audit.query()).toEqual([]);
  });
});

describe('query and scan', () => {
  it('filters on tenant, session, afterSeq and limit, in seq order', async () => {
    const s = openStore();
    await s.audit.append(input(1, { tenantId: 'ten_a', sessionId: 'ses_1' }));
    await s.audit.append(input(2, { tenantId: 'ten_b', sessionId: 'ses_2' }));
    await s.audit.append(input(3, { tenantId: 'ten_a', sessionId: null }));
    await s.audit.append(input(4, { tenantId: 'ten_a', sessionId: 'ses_1' }));
    await s.audit.append(input(5, { tenantId: 'ten_b', sessionId: 'ses_2' }));
    const seqs = (es: AuditEntry[]) => es.map((e) => e.seq);
    expect(seqs(await s.audit.query({ tenantId: 'ten_a' }))).toEqual([1, 3, 4]);
    expect(seqs(await s.audit.query({ sessionId: 'ses_2' }))).toEqual([2, 5]);
    expect(seqs(await s.audit.query({ tenantId: 'ten_a', sessionId: 'ses_1' }))).toEqual([1, 4]);
    expect(seqs(await s.audit.query({ tenantId: 'ten_b', sessionId: 'ses_1' }))).toEqual([]);
    expect(seqs(await s.audit.query({ afterSeq: 2 }))).toEqual([3, 4, 5]);
    expect(seqs(await s.audit.query({ afterSeq: 1, limit: 2 }))).toEqual([2, 3]);
    expect(seqs(await s.audit.query({ tenantId: 'ten_a', afterSeq: 1, limit: 1 }))).toEqual([3]);
  });

  it('rejects a bad limit or afterSeq', async () => {
    const s = openStore();
    await expect(s.audit.query({ limit: 0 })).rejects.toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    await expect(s.audit.query({ limit: 1.5 })).rejects.toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    await expect(s.audit.query({ afterSeq: -1 })).rejects.toThrow(expect.objectContaining({ code: 'invalid_argument' }));
  });

  it('scan streams every entry in seq order and can be stopped early', async () => {
    const s = await filled(5);
    expect((await all(s.audit.scan())).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    expect((await all(s.audit.scan()))).toEqual(await s.audit.query());
    for await (const e of s.audit.scan()) if (e.seq === 2) break;
    expect((await s.audit.append(input(6))).seq).toBe(6); // the connection is free again
  });
});

describe('append-only triggers', () => {
  it('refuse UPDATE, DELETE and INSERT OR REPLACE through SQL, and any seq but the next', async () => {
    await (await filled(3)).close();
    const raw = new Database(dbPath);
    const code = (sql: string): string | undefined => {
      try {
        raw.exec(sql);
        return undefined;
      } catch (e) {
        return (e as { code?: string }).code;
      }
    };
    expect(code("UPDATE audit SET outcome = 'deny' WHERE seq = 2")).toBe('SQLITE_CONSTRAINT_TRIGGER');
    expect(code('DELETE FROM audit WHERE seq = 3')).toBe('SQLITE_CONSTRAINT_TRIGGER');
    expect(code('DELETE FROM audit')).toBe('SQLITE_CONSTRAINT_TRIGGER');
    expect(code("INSERT OR REPLACE INTO audit SELECT seq, ts, tenant_id, session_id, principal, action, 'deny', data, prev_hash, hash FROM audit WHERE seq = 2")).toBe(
      'SQLITE_CONSTRAINT_TRIGGER',
    );
    expect(code("INSERT INTO audit SELECT 9, ts, tenant_id, session_id, principal, action, outcome, data, prev_hash, hash FROM audit WHERE seq = 3")).toBe(
      'SQLITE_CONSTRAINT_TRIGGER',
    );
    expect(raw.prepare("SELECT count(*) AS n FROM audit WHERE outcome = 'ok'").get()).toEqual({ n: 3 });
    raw.close();
    expect(await verifyAudit(openStore())).toMatchObject({ ok: true, entries: 3, anchor: 'matched' });
  });
});

describe('the head anchor', () => {
  it('exists from the first open and follows every append', async () => {
    const s = openStore();
    expect(readAnchor(anchorPath)).toEqual({ status: 'ok', anchor: { seq: 0, hash: GENESIS_HASH } });
    const e = await s.audit.append(input(1));
    await s.flushed(); // written in the background after the commit
    expect(readAnchor(anchorPath)).toEqual({ status: 'ok', anchor: { seq: 1, hash: e.hash } });
    expect(await verifyAudit(s)).toEqual({ ok: true, entries: 1, headHash: e.hash, anchor: 'matched' });
  });

  it('inside store.transaction() moves only when the outer transaction commits', async () => {
    const s = await filled(1);
    const before = readFileSync(anchorPath, 'utf8');
    await expect(
      s.transaction(async () => {
        await s.audit.append(input(2));
        throw new Error('rolled back');
      }),
    ).rejects.toThrow();
    expect(await s.audit.query()).toHaveLength(1);
    await s.flushed();
    expect(readFileSync(anchorPath, 'utf8')).toBe(before);

    const e = await s.transaction(async () => {
      const x = await s.audit.append(input(2));
      expect(readFileSync(anchorPath, 'utf8')).toBe(before);
      return x;
    });
    expect(e.seq).toBe(2);
    await s.flushed();
    expect(readAnchor(anchorPath)).toEqual({ status: 'ok', anchor: { seq: 2, hash: e.hash } });
    expect(await verifyAudit(s)).toMatchObject({ ok: true, anchor: 'matched' });
  });

  it("after a 'deferred' commit moves only once the store's flush has fsynced it; a full commit carries it", async () => {
    const s = await filled(1);
    const before = readFileSync(anchorPath, 'utf8');
    const e2 = await s.transaction(() => s.audit.append(input(2)), { durability: 'deferred' });
    // Committed and readable now; on disk only after the background fsync, and the anchor waits for it.
    expect((await s.audit.query()).map((x) => x.seq)).toEqual([1, 2]);
    expect(readFileSync(anchorPath, 'utf8')).toBe(before);
    await s.flushed();
    expect(readAnchor(anchorPath)).toEqual({ status: 'ok', anchor: { seq: 2, hash: e2.hash } });

    await s.transaction(() => s.audit.append(input(3)), { durability: 'deferred' });
    const e4 = await s.audit.append(input(4)); // its own full commit fsyncs the WAL with entry 3 in it
    await s.flushed();
    expect(readAnchor(anchorPath)).toEqual({ status: 'ok', anchor: { seq: 4, hash: e4.hash } });
    await s.flushed(); // the late flush of entry 3 never moves the anchor back
    expect(readAnchor(anchorPath)).toEqual({ status: 'ok', anchor: { seq: 4, hash: e4.hash } });
    expect(await verifyAudit(s)).toMatchObject({ ok: true, entries: 4, anchor: 'matched' });
  });

  it('a lagging anchor (crash between COMMIT and the anchor write) is accepted and caught up on open', async () => {
    const s = await filled(3);
    const second = (await s.audit.query({ afterSeq: 1, limit: 1 }))[0] as AuditEntry;
    writeFileSync(anchorPath, JSON.stringify({ seq: 2, hash: second.hash }));
    expect(await verifyAudit(s)).toMatchObject({ ok: true, entries: 3, anchor: 'behind' });
    await s.close();
    const s2 = openStore();
    expect(s2.audit.anchorFrozen).toBe(false);
    expect(await verifyAudit(s2)).toMatchObject({ ok: true, entries: 3, anchor: 'matched' });
  });

  it('in memory there is none', async () => {
    const s = openSqliteStore({ path: ':memory:', clock });
    open.push(s);
    await s.audit.append(input(1));
    expect(await verifyAudit(s)).toMatchObject({ ok: true, entries: 1, anchor: 'none' });
  });
});

describe('verifyAudit detects', () => {
  it('nothing on an intact log', async () => {
    const s = await filled(5);
    expect(await verifyAudit(s)).toEqual({ ok: true, entries: 5, headHash: s.audit.head().hash, anchor: 'matched' });
  });

  it('an edited row (data changed to other valid JSON)', async () => {
    const s = await reopenAfter(await filled(5), `UPDATE audit SET data = json_set(data, '$.argv[0]', 'rm') WHERE seq = 3`);
    expect((await s.audit.query({ afterSeq: 2, limit: 1 }))[0]?.data.argv).toEqual(['rm', '-la']);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 3, problem: 'edited' });
  });

  it('an edited row whose JSON no longer parses, without throwing on read', async () => {
    const s = await reopenAfter(await filled(4), `UPDATE audit SET data = '{"n": 2, broken' WHERE seq = 2`, `UPDATE audit SET principal = 'nope' WHERE seq = 3`);
    const rows = await s.audit.query();
    expect(rows[1]?.data).toEqual({ [UNREADABLE]: '{"n": 2, broken' });
    expect(rows[2]?.principal).toEqual({ [UNREADABLE]: 'nope' });
    expect((await all(s.audit.scan()))).toHaveLength(4);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 2, problem: 'edited' });
  });

  it('an edited row holding a number canonical JSON refuses (1e999), without throwing', async () => {
    const s = await reopenAfter(await filled(3), `UPDATE audit SET data = '{"n":1e999}' WHERE seq = 2`);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 2, problem: 'edited' });
  });

  it('an edited row whose hash was recomputed: the next link breaks', async () => {
    const s0 = await filled(4);
    const row = (await s0.audit.query({ afterSeq: 1, limit: 1 }))[0] as AuditEntry;
    const { hash: _old, ...rest } = row;
    const forged = { ...rest, outcome: 'deny' };
    const s = await reopenAfter(s0, `UPDATE audit SET outcome = 'deny', hash = '${hashEntry(forged)}' WHERE seq = 2`);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 3, problem: 'broken_link' });
  });

  it('a removed middle row', async () => {
    const s = await reopenAfter(await filled(5), 'DELETE FROM audit WHERE seq = 3');
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 3, problem: 'removed' });
  });

  it('a reordered pair (seq values swapped), adjacent or not', async () => {
    const swap = (a: number, b: number) => [
      `UPDATE audit SET seq = -1 WHERE seq = ${a}`,
      `UPDATE audit SET seq = ${a} WHERE seq = ${b}`,
      `UPDATE audit SET seq = ${b} WHERE seq = -1`,
    ];
    const s = await reopenAfter(await filled(5), ...swap(2, 3));
    expect((await all(s.audit.scan())).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 2, problem: 'reordered' });
    const s2 = await reopenAfter(s, ...swap(2, 3), ...swap(2, 5));
    expect(await verifyAudit(s2)).toMatchObject({ ok: false, firstBadSeq: 2, problem: 'reordered' });
  });

  it('a truncated tail, through the anchor, even after more appends', async () => {
    const s = await reopenAfter(await filled(6), 'DELETE FROM audit WHERE seq > 4');
    expect(s.audit.anchorFrozen).toBe(true);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, entries: 4, firstBadSeq: 5, problem: 'removed', anchor: 'ahead' });
    // New entries 5, 6, 7 must not launder the cut: the anchor keeps naming the old entry 6.
    for (let i = 0; i < 3; i++) await s.audit.append(input(100 + i));
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 6, problem: 'edited', anchor: 'mismatch' });
  });

  it('a tail cut while the store is open, at the next append', async () => {
    const s = await filled(4);
    attack('DELETE FROM audit WHERE seq > 2'); // a second connection, store still open
    await s.audit.append(input(5));
    expect(s.audit.anchorFrozen).toBe(true);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, entries: 3, firstBadSeq: 4, problem: 'removed', anchor: 'ahead' });
  });

  it('a rewritten tail (last entry replaced by a valid forgery): the anchor hash differs', async () => {
    const s0 = await filled(3);
    const last = (await s0.audit.query({ afterSeq: 2 }))[0] as AuditEntry;
    const { hash: _h, ...rest } = last;
    const forged = { ...rest, outcome: 'deny' };
    const s = await reopenAfter(s0, `UPDATE audit SET outcome = 'deny', hash = '${hashEntry(forged)}' WHERE seq = 3`);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 3, problem: 'edited', anchor: 'mismatch' });
  });

  it('a deleted or garbled anchor, failing closed', async () => {
    const s = await filled(2);
    rmSync(anchorPath);
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 3, problem: 'removed', anchor: 'missing' });
    writeFileSync(anchorPath, 'garbage');
    expect(await verifyAudit(s)).toMatchObject({ ok: false, firstBadSeq: 3, problem: 'removed', anchor: 'invalid' });
    await s.close();
    const s2 = openStore();
    expect(s2.audit.anchorFrozen).toBe(true);
    expect(await s2.audit.reanchor()).toEqual(s2.audit.head()); // the operator accepts the current head
    expect(await verifyAudit(s2)).toMatchObject({ ok: true, anchor: 'matched' });
  });

  it('against an anchor copy kept elsewhere', async () => {
    const s = await filled(3);
    const copy = join(dir, 'offsite-head');
    writeFileSync(copy, readFileSync(anchorPath));
    await s.audit.append(input(4));
    expect(await verifyAudit(s, { anchorPath: copy })).toMatchObject({ ok: true, entries: 4, anchor: 'behind' });
  });
});
