/**
 * The Store and AuditLog conformance suite: what every store behind the ports must do, run by
 * sqlite.test.ts and postgres.test.ts against real databases. It covers every repo method, transactions
 * (commit, rollback on throw, nested calls joining the outer one), the audit chain (append, query, scan,
 * verify; UPDATE and DELETE refused by the database itself) and two writers racing on one row.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GENESIS_HASH, verifyChainAsync, type AuditInput, type AuditLog } from '../../src/core/audit.js';
import { newId } from '../../src/core/ids.js';
import { emptyMetering, type ApprovalRecord, type PortLinkRecord, type SessionGateRecord, type SessionRecord, type WatchLinkRecord } from '../../src/core/records.js';
import type { Store } from '../../src/core/store.js';
import { verifyAudit, type VerifiableAuditLog } from '../../src/store/audit.js';
import { session, snapshot, tenant } from '../helpers/records.js';
import { idempotencyCases } from './idempotency-suite.js';

export type StoreUnderTest = Store & { readonly audit: AuditLog & VerifiableAuditLog };

export interface StoreHarness {
  /** A store over a fresh, empty database. */
  open(): Promise<StoreUnderTest>;
  /** Runs SQL on the store's database through a separate connection (as someone with database access would). */
  sql(store: StoreUnderTest, statement: string): Promise<void>;
}

export { session };

function gateRow(sessionId: string, over: Partial<SessionGateRecord> = {}): SessionGateRecord {
  return {
    sessionId,
    tenantId: 'ten_a',
    tools: ['fs.read'],
    settings: { breaker: { failures: 3, perMinute: 60 }, httpAllow: ['example.com'], approvalTtlS: 0 },
    plan: null,
    planState: null,
    planSetAt: null,
    planSetBy: null,
    breaker: { open: false, openedAt: null, trip: null, reason: null, callsBySecond: [], streakKey: null, streakTool: null, streakFailures: 0 },
    pausedByBreaker: false,
    calls: 0,
    updatedAt: 1,
    ...over,
  };
}

function approval(over: Partial<ApprovalRecord> = {}): ApprovalRecord {
  return {
    id: newId('approval'),
    tenantId: 'ten_a',
    sessionId: 'ses_1',
    tool: 'ops.deploy',
    args: { target: 'prod' },
    argsDigest: 'd1',
    step: null,
    status: 'pending',
    policyIds: ['p1'],
    requestedBy: 'agent:ses_1',
    createdAt: 100,
    expiresAt: null,
    decidedBy: null,
    decidedAt: null,
    reason: null,
    usedAt: null,
    result: null,
    deliveredAt: null,
    ...over,
  };
}

function input(n: number, over: Partial<AuditInput> = {}): AuditInput {
  return { tenantId: 'ten_a', sessionId: 'ses_1', principal: { kind: 'operator', id: 'ten_a', tenantId: 'ten_a' }, action: 'session.exec', outcome: 'ok', data: { n, nested: { deep: [1, { x: null }] } }, ...over };
}

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

const code = (c: string) => expect.objectContaining({ code: c });

export function storeConformance(name: string, h: StoreHarness): void {
  describe(`${name} store conformance`, () => {
    let s: StoreUnderTest;
    beforeEach(async () => {
      s = await h.open();
    });
    afterEach(async () => {
      await s.close();
    });

    describe('idempotency keys', () => idempotencyCases(() => s));

    describe('sessions', () => {
      it('insert, get, put, list by tenant and states in insertion order, conflict and not_found', async () => {
        const a1 = session({ tenantId: 'ten_a', state: 'running' });
        const b1 = session({ tenantId: 'ten_b', state: 'paused' });
        const a2 = session({ tenantId: 'ten_a', state: 'hibernated' });
        for (const r of [a1, b1, a2]) await s.sessions.insert(r);
        expect(await s.sessions.get(a1.id)).toEqual(a1);
        expect(await s.sessions.get(newId('session'))).toBeUndefined();
        const ids = (rs: SessionRecord[]) => rs.map((r) => r.id);
        expect(ids(await s.sessions.list())).toEqual([a1.id, b1.id, a2.id]);
        expect(ids(await s.sessions.list({ tenantId: 'ten_a' }))).toEqual([a1.id, a2.id]);
        expect(ids(await s.sessions.list({ states: ['paused', 'running'] }))).toEqual([a1.id, b1.id]);
        expect(ids(await s.sessions.list({ tenantId: 'ten_a', states: ['hibernated'] }))).toEqual([a2.id]);
        expect(await s.sessions.list({ states: [] })).toEqual([]);

        const next: SessionRecord = { ...a1, state: 'hibernated', sandboxId: null, updatedAt: a1.updatedAt + 1 };
        await s.sessions.put(next);
        expect(await s.sessions.get(a1.id)).toEqual(next);
        expect(ids(await s.sessions.list())).toEqual([a1.id, b1.id, a2.id]); // put keeps the order
        await expect(s.sessions.put(session())).rejects.toThrow(code('not_found'));
        await expect(s.sessions.insert({ ...a2, objective: 'other' })).rejects.toThrow(code('conflict'));
        expect((await s.sessions.get(a2.id))?.objective).toBe(a2.objective);
        expect((await s.sessions.get(a2.id))?.settings.env['WEIRD KEY']).toBe('ü "quoted"\n');
      });
    });

    describe('snapshots and their gate copies', () => {
      it('insert, get, list by tenant and session, idempotent delete that takes the gate copy along', async () => {
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
        await expect(s.snapshots.insert(x)).rejects.toThrow(code('conflict'));

        const copy = { snapshotId: y.id, tenantId: y.tenantId, sessionId: y.sessionId, tools: null, settings: gateRow('s').settings, plan: { objective: 'o', steps: [] }, planState: { cursor: 1, consumed: { a: 1 } }, planSetAt: 5, planSetBy: 'root:root', createdAt: 7 };
        await s.snapshotGates.insert(copy);
        expect(await s.snapshotGates.get(y.id)).toEqual(copy);
        expect(await s.snapshotGates.get(x.id)).toBeUndefined();
        await expect(s.snapshotGates.insert(copy)).rejects.toThrow(code('conflict'));
        await s.snapshots.delete(y.id);
        await s.snapshots.delete(y.id);
        expect(await s.snapshots.get(y.id)).toBeUndefined();
        expect(await s.snapshotGates.get(y.id)).toBeUndefined();
        expect((await s.snapshots.list()).map((r) => r.id)).toEqual([x.id, z.id]);
      });
    });

    describe('tenants, policies, tools, session gate rows', () => {
      it('tenants: insert, get, getByKeyHash, list in order, duplicate id or key refused', async () => {
        const a = tenant({ name: 'a' });
        const b = tenant({ name: 'b' });
        await s.tenants.insert(a);
        await s.tenants.insert(b);
        expect(await s.tenants.get(a.id)).toEqual(a);
        expect(await s.tenants.get(newId('tenant'))).toBeUndefined();
        expect(await s.tenants.getByKeyHash(b.apiKeyHash)).toEqual(b);
        expect(await s.tenants.getByKeyHash('f'.repeat(64))).toBeUndefined();
        expect(await s.tenants.list()).toEqual([a, b]);
        await expect(s.tenants.insert({ ...a, apiKeyHash: 'e'.repeat(64) })).rejects.toThrow(code('conflict'));
        await expect(s.tenants.insert(tenant({ apiKeyHash: a.apiKeyHash }))).rejects.toThrow(code('conflict'));
        expect(await s.tenants.list()).toHaveLength(2);
      });

      it('policies and tools: get, list by name, put inserts or replaces', async () => {
        expect(await s.policies.get('ten_a')).toBeUndefined();
        const p1 = { tenantId: 'ten_a', text: 'permit (principal, action, resource);', version: 1, updatedAt: 10, updatedBy: 'root:root' };
        await s.policies.put(p1);
        await s.policies.put({ ...p1, version: 2, text: 'forbid (principal, action, resource);' });
        expect(await s.policies.get('ten_a')).toEqual({ ...p1, version: 2, text: 'forbid (principal, action, resource);' });

        const tool = (name: string, updatedAt = 1) => ({ tenantId: 'ten_a', name, definition: { name, risk: 'read' }, createdAt: 1, updatedAt, updatedBy: 'root:root' });
        await s.tools.put(tool('zeta'));
        await s.tools.put(tool('Alpha'));
        await s.tools.put(tool('alpha'));
        await s.tools.put(tool('zeta', 2));
        await s.tools.put({ ...tool('other'), tenantId: 'ten_b' });
        expect(await s.tools.get('ten_a', 'zeta')).toEqual(tool('zeta', 2));
        expect(await s.tools.get('ten_b', 'zeta')).toBeUndefined();
        expect((await s.tools.list('ten_a')).map((t) => t.name)).toEqual(['Alpha', 'alpha', 'zeta']);
      });

      it('session gate rows: get, put inserts or replaces', async () => {
        expect(await s.gates.get('ses_1')).toBeUndefined();
        await s.gates.put(gateRow('ses_1'));
        await s.gates.put(gateRow('ses_1', { calls: 5, breaker: { ...gateRow('ses_1').breaker, open: true, openedAt: 4, trip: 'rate', reason: 'x' } }));
        expect(await s.gates.get('ses_1')).toEqual(gateRow('ses_1', { calls: 5, breaker: { ...gateRow('ses_1').breaker, open: true, openedAt: 4, trip: 'rate', reason: 'x' } }));
      });
    });

    describe('port links', () => {
      const link = (over: Partial<PortLinkRecord> = {}): PortLinkRecord => ({
        id: newId('portLink'),
        tenantId: 'ten_a',
        sessionId: 'ses_1',
        port: 8000,
        tokenHash: newId('portLink').padEnd(64, '0'),
        label: null,
        createdAt: 100,
        expiresAt: 3_600_100,
        createdBy: { kind: 'operator', id: 'ten_a', tenantId: 'ten_a' },
        revokedAt: null,
        revokedBy: null,
        ...over,
      });
      it('insert, get, by token hash, list per session in insertion order, revoke by put, conflict and not_found', async () => {
        const a = link({ label: 'docs' });
        const b = link({ sessionId: 'ses_2' });
        const c = link({ port: 3000 });
        for (const r of [a, b, c]) await s.portLinks.insert(r);
        expect(await s.portLinks.get(a.id)).toEqual(a);
        expect(await s.portLinks.get(newId('portLink'))).toBeUndefined();
        expect(await s.portLinks.getByTokenHash(c.tokenHash)).toEqual(c);
        expect(await s.portLinks.getByTokenHash('f'.repeat(64))).toBeUndefined();
        expect((await s.portLinks.list('ses_1')).map((r) => r.id)).toEqual([a.id, c.id]);
        expect(await s.portLinks.list('ses_none')).toEqual([]);
        await expect(s.portLinks.insert(a)).rejects.toThrow(code('conflict'));
        await expect(s.portLinks.insert({ ...link(), tokenHash: a.tokenHash })).rejects.toThrow(code('conflict'));
        const revoked = { ...a, revokedAt: 200, revokedBy: { kind: 'root', id: 'root' } };
        await s.portLinks.put(revoked);
        expect(await s.portLinks.get(a.id)).toEqual(revoked);
        await expect(s.portLinks.put(link())).rejects.toThrow(code('not_found'));
      });
    });

    describe('approvals', () => {
      it('insert, get, put, list by tenant, session and statuses, latestFor, expiring', async () => {
        const a = approval({ createdAt: 100, argsDigest: 'd1', expiresAt: 500 });
        const b = approval({ createdAt: 200, argsDigest: 'd1', tenantId: 'ten_b', sessionId: 'ses_2', status: 'denied' });
        const c = approval({ createdAt: 300, argsDigest: 'd1', expiresAt: 400 });
        const d = approval({ createdAt: 300, argsDigest: 'd2' });
        for (const r of [a, b, c, d]) await s.approvals.insert(r);
        expect(await s.approvals.get(a.id)).toEqual(a);
        expect(await s.approvals.get(newId('approval'))).toBeUndefined();
        await expect(s.approvals.insert(a)).rejects.toThrow(code('conflict'));
        const ids = (rs: ApprovalRecord[]) => rs.map((r) => r.id);
        expect(ids(await s.approvals.list())).toEqual([a.id, b.id, c.id, d.id]);
        expect(ids(await s.approvals.list({ tenantId: 'ten_a' }))).toEqual([a.id, c.id, d.id]);
        expect(ids(await s.approvals.list({ sessionId: 'ses_2' }))).toEqual([b.id]);
        expect(ids(await s.approvals.list({ statuses: ['denied', 'used'] }))).toEqual([b.id]);
        expect(await s.approvals.list({ statuses: [] })).toEqual([]);
        expect((await s.approvals.latestFor('ses_1', 'd1'))?.id).toBe(c.id);
        expect(await s.approvals.latestFor('ses_1', 'nope')).toBeUndefined();
        expect(ids(await s.approvals.expiring(450))).toEqual([c.id]);
        expect(ids(await s.approvals.expiring(500))).toEqual([a.id, c.id]);

        const used = { ...a, status: 'used' as const, usedAt: 600, result: { decision: 'allow', result: { ok: true } } };
        await s.approvals.put(used);
        expect(await s.approvals.get(a.id)).toEqual(used);
        expect(ids(await s.approvals.expiring(10_000))).toEqual([c.id]);
        await expect(s.approvals.put(approval())).rejects.toThrow(code('not_found'));
      });
    });

    describe('watch links', () => {
      it('insert, get, by token hash, list by session, put (revoke); duplicates conflict', async () => {
        const link = (o: Partial<WatchLinkRecord> = {}): WatchLinkRecord => ({
          id: newId('watchLink'), tenantId: 'ten_a', sessionId: 'ses_1', tokenHash: newId('token'), label: null, createdBy: 'operator:ten_a', createdAt: 100, expiresAt: 3_700_000, revokedAt: null, ...o,
        });
        const a = link({ label: 'for the on-call' });
        const b = link({ createdAt: 200 });
        const c = link({ sessionId: 'ses_2' });
        for (const r of [a, b, c]) await s.watchLinks.insert(r);
        expect(await s.watchLinks.get(a.id)).toEqual(a);
        expect(await s.watchLinks.get(newId('watchLink'))).toBeUndefined();
        expect(await s.watchLinks.getByTokenHash(b.tokenHash)).toEqual(b);
        expect(await s.watchLinks.getByTokenHash('nope')).toBeUndefined();
        expect((await s.watchLinks.listBySession('ses_1')).map((r) => r.id)).toEqual([a.id, b.id]);
        await expect(s.watchLinks.insert(a)).rejects.toThrow(code('conflict'));
        await expect(s.watchLinks.insert(link({ tokenHash: a.tokenHash }))).rejects.toThrow(code('conflict'));
        await s.watchLinks.put({ ...a, revokedAt: 900 });
        expect(await s.watchLinks.get(a.id)).toEqual({ ...a, revokedAt: 900 });
        await expect(s.watchLinks.put(link())).rejects.toThrow(code('not_found'));
      });
    });

    describe('transactions', () => {
      it('commit and return the result', async () => {
        const r = session();
        expect(await s.transaction(async (tx) => (await tx.sessions.insert(r), 42))).toBe(42);
        expect(await s.sessions.get(r.id)).toEqual(r);
      });

      it('roll every repo and the audit log back when fn throws, and rethrow', async () => {
        const r = session();
        const err = new Error('boom');
        await expect(
          s.transaction(async () => {
            await s.sessions.insert(r);
            await s.snapshots.insert(snapshot());
            await s.tenants.insert(tenant());
            await s.approvals.insert(approval());
            await s.audit.append(input(1));
            throw err;
          }),
        ).rejects.toBe(err);
        expect(await s.sessions.get(r.id)).toBeUndefined();
        expect(await s.snapshots.list()).toEqual([]);
        expect(await s.tenants.list()).toEqual([]);
        expect(await s.approvals.list()).toEqual([]);
        expect(await s.audit.query()).toEqual([]);
        expect((await s.audit.append(input(2))).seq).toBe(1); // the rolled-back entry left no gap
      });

      it('a nested call joins the outer one; its own failure undoes only its writes', async () => {
        const outer = session();
        const inner = session();
        const kept = session();
        await s.transaction(async () => {
          await s.sessions.insert(outer);
          await expect(
            s.transaction(async () => {
              await s.sessions.insert(inner);
              await s.audit.append(input(1));
              throw new Error('inner fails');
            }),
          ).rejects.toThrow('inner fails');
          await s.transaction(async () => {
            await s.sessions.insert(kept);
            await s.audit.append(input(2));
          });
        });
        expect(await s.sessions.get(outer.id)).toBeDefined();
        expect(await s.sessions.get(inner.id)).toBeUndefined();
        expect(await s.sessions.get(kept.id)).toBeDefined();
        expect((await s.audit.query()).map((e) => [e.seq, e.data.n])).toEqual([[1, 2]]);

        const lost = session();
        await expect(
          s.transaction(async () => {
            await s.transaction(() => s.sessions.insert(lost));
            throw new Error('outer fails');
          }),
        ).rejects.toThrow('outer fails');
        expect(await s.sessions.get(lost.id)).toBeUndefined();
      });

      it('a call from outside an open transaction does not see its writes and is not rolled back with it', async () => {
        const inTx = session();
        const outside = session();
        let release!: () => void;
        const held = new Promise<void>((r) => (release = r));
        let wrote!: () => void;
        const written = new Promise<void>((r) => (wrote = r));
        const tx = s.transaction(async () => {
          await s.sessions.insert(inTx);
          wrote();
          await held;
          throw new Error('roll back');
        });
        await written;
        const write = s.sessions.insert(outside);
        const read = s.sessions.get(inTx.id);
        release();
        await expect(tx).rejects.toThrow('roll back');
        await write;
        expect(await read).toBeUndefined();
        expect(await s.sessions.get(outside.id)).toEqual(outside);
      });

      it('two writers racing on one session lose no update when they read it forUpdate', async () => {
        const r = session({ metering: emptyMetering() });
        await s.sessions.insert(r);
        const bump = () =>
          s.transaction(async (tx) => {
            const cur = (await tx.sessions.get(r.id, { forUpdate: true })) as SessionRecord;
            await new Promise((done) => setTimeout(done, 20)); // the other writer tries meanwhile
            await tx.sessions.put({ ...cur, metering: { ...cur.metering, execCount: cur.metering.execCount + 1 } });
          });
        await Promise.all([bump(), bump(), bump()]);
        expect((await s.sessions.get(r.id))?.metering.execCount).toBe(3);
      });

      it('concurrent appends from separate transactions make one gapless chain', async () => {
        await Promise.all(Array.from({ length: 12 }, (_, i) => s.transaction(async () => {
          await s.sessions.insert(session());
          await s.audit.append(input(i));
        })));
        const entries = await s.audit.query();
        expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
        expect(await verifyChainAsync(s.audit.scan())).toMatchObject({ ok: true, entries: 12 });
      });
    });

    describe('the audit chain', () => {
      it('append links each entry to the one before; query filters and pages; scan streams in order', async () => {
        const a = await s.audit.append(input(1, { tenantId: 'ten_a', sessionId: 'ses_1' }));
        const b = await s.audit.append(input(2, { tenantId: 'ten_b', sessionId: 'ses_2', principal: { kind: 'system', id: 'system', tenantId: null } }));
        const c = await s.audit.append(input(3, { tenantId: null, sessionId: null }));
        expect([a.seq, b.seq, c.seq]).toEqual([1, 2, 3]);
        expect(a.prevHash).toBe(GENESIS_HASH);
        expect(b.prevHash).toBe(a.hash);
        expect(c.prevHash).toBe(b.hash);
        expect(await s.audit.query()).toEqual([a, b, c]);
        expect(await s.audit.query({ tenantId: 'ten_b' })).toEqual([b]);
        expect(await s.audit.query({ sessionId: 'ses_1' })).toEqual([a]);
        expect(await s.audit.query({ afterSeq: 1, limit: 1 })).toEqual([b]);
        await expect(s.audit.query({ limit: 0 })).rejects.toThrow(code('invalid_argument'));
        await expect(s.audit.query({ afterSeq: -1 })).rejects.toThrow(code('invalid_argument'));
        await expect(s.audit.append(input(4, { action: '' }))).rejects.toThrow(code('invalid_argument'));
        expect(await all(s.audit.scan())).toEqual([a, b, c]);
        expect(await s.audit.entryByHash(b.hash)).toEqual(b);
      });

      it('scan pages through a long chain, and verify passes', async () => {
        await s.transaction(async () => {
          for (let i = 0; i < 1100; i++) await s.audit.append(input(i));
        });
        const seqs = (await all(s.audit.scan())).map((e) => e.seq);
        expect(seqs).toHaveLength(1100);
        expect(seqs.every((q, i) => q === i + 1)).toBe(true);
        expect(await verifyAudit(s)).toMatchObject({ ok: true, entries: 1100 });
      });

      it('is append-only in the database itself: UPDATE, DELETE and a skipped seq are refused', async () => {
        for (let i = 1; i <= 3; i++) await s.audit.append(input(i));
        const before = await s.audit.query();
        await expect(h.sql(s, `UPDATE audit SET outcome = 'deny' WHERE seq = 2`)).rejects.toThrow(/append-only/);
        await expect(h.sql(s, 'DELETE FROM audit WHERE seq = 3')).rejects.toThrow(/append-only/);
        await expect(h.sql(s, 'DELETE FROM audit')).rejects.toThrow(/append-only/);
        await expect(
          h.sql(s, `INSERT INTO audit (seq, ts, tenant_id, session_id, principal, action, outcome, data, prev_hash, hash) VALUES (9, 0, NULL, NULL, '{}', 'x', 'ok', '{}', 'p', 'h')`),
        ).rejects.toThrow(/seq must be the previous seq \+ 1/);
        expect(await s.audit.query()).toEqual(before);
        expect(await verifyAudit(s)).toMatchObject({ ok: true, entries: 3 });
      });
    });
  });
}
