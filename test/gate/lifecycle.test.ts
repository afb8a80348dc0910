/**
 * The gate across a session's lifecycle: fork branches inherit the gate configuration kept with their
 * snapshot (tools, settings, plan and its progress, as they stood when it was taken; not the breaker's
 * state, the call count or approvals), and terminating a session cancels its pending approvals. Real SQLite,
 * Cedar and gVisor.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CallResultView } from '../../src/sdk/index.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { TEST_POLICY, codeOf, destroyGateServer, newSession, newTenant, startGateServer, type GateServer, type SessionHandle, type TenantHandle } from './harness.js';

const skip = skipReason('gate lifecycle', gvisorMissing());

const denied = (r: CallResultView) => (r.decision === 'deny' ? { stage: r.stage, code: r.code } : { decision: r.decision });
const pendingId = (r: CallResultView): string => {
  expect(r.decision).toBe('pending');
  return (r as { approvalId: string }).approvalId;
};

const TOOLS = ['shell.exec', 'fs.read', 'fs.write', 'fs.list', 'http.request'];
const PLAN = {
  objective: 'write, then read the note',
  steps: [
    { id: 'write', tool: 'fs.write', arguments: { type: 'object', properties: { path: { const: '/workspace/note.txt' } } } },
    { id: 'read', tool: 'fs.read', arguments: { type: 'object', properties: { path: { const: '/workspace/note.txt' } } } },
  ],
};
const OTHER_PLAN = { objective: 'something else', steps: [{ id: 'list', tool: 'fs.list', arguments: { type: 'object' } }] };

describe.skipIf(skip)('the gate across snapshot, fork and terminate', () => {
  let s: GateServer;
  let t: TenantHandle;
  let a: SessionHandle;
  const call = (h: SessionHandle, tool: string, args: unknown, step?: string) => h.agent.tools.call(h.id, tool, args, step === undefined ? {} : { step });
  const snapshotGateRows = (snapshotId: string): number => {
    const db = new Database(join(s.dataDir, 'berth.db'), { readonly: true });
    try {
      return (db.prepare('SELECT count(*) AS n FROM snapshot_gate WHERE snapshot_id = ?').get(snapshotId) as { n: number }).n;
    } finally {
      db.close();
    }
  };

  beforeAll(async () => {
    s = await startGateServer();
    t = await newTenant(s, 'lifecycle');
    await t.op.policy.set(TEST_POLICY);
    a = await newSession(s, t.op);
    await (await t.op.sessions.get(a.id)).files.mkdir('/workspace', { parents: true });
  });
  afterAll(async () => destroyGateServer(s));

  let snap1 = '';

  it('a branch starts with the gate configuration and plan progress of snapshot time, not later changes', async () => {
    await t.op.tools.install(a.id, TOOLS);
    await t.op.gate.set(a.id, { httpAllow: ['example.invalid'], breaker: { failures: 2, perMinute: 50 }, approvalTtlS: 120 });
    // A pending approval of the parent (before the plan: a plan would refuse the POST first).
    const parked = pendingId(await call(a, 'http.request', { method: 'POST', url: 'http://example.invalid/x' }));
    await t.op.plans.set(a.id, PLAN);
    expect(await call(a, 'fs.write', { path: '/workspace/note.txt', content: 'v1' }, 'write')).toMatchObject({ decision: 'allow' });
    // One failing call: the parent's breaker counts it (a branch must not).
    expect(denied(await call(a, 'fs.list', { path: '/' }))).toEqual({ stage: 'plan', code: 'off_plan' });
    const parentGate = await t.op.gate.get(a.id);
    expect(parentGate.breaker).toMatchObject({ open: false, streakFailures: 1 });
    expect(parentGate.calls).toBeGreaterThan(0);

    snap1 = (await (await t.op.sessions.get(a.id)).snapshot({ name: 'after-write' })).snapshotId;
    expect(snapshotGateRows(snap1)).toBe(1);

    // The parent moves on before anyone forks: branches must not see this.
    await t.op.plans.set(a.id, OTHER_PLAN);
    await t.op.gate.set(a.id, { httpAllow: [], approvalTtlS: 600 });
    await t.op.tools.install(a.id, ['fs.list']);

    const [b1, b2] = (await t.op.snapshots.fork(snap1, { count: 2 })).map((x) => ({ id: x.id, agentToken: x.agentToken as string, agent: s.as(x.agentToken as string) }));
    if (!b1 || !b2) throw new Error('fork returned fewer branches');
    for (const b of [b1, b2]) {
      const g = await t.op.gate.get(b.id);
      expect(g).toMatchObject({ tools: TOOLS, httpAllow: ['example.invalid'], approvalTtlS: 120, pausedByBreaker: false, calls: 0 });
      expect(g.breaker).toMatchObject({ failures: 2, perMinute: 50, open: false, trip: null, streakFailures: 0 });
      const plan = await t.op.plans.get(b.id);
      expect(plan.plan?.objective).toBe(PLAN.objective);
      expect(plan.state).toEqual({ cursor: 1, consumed: { write: 1 } });
      expect(await t.op.approvals.list({ sessionId: b.id })).toEqual([]);
    }

    // The rollout continues from the same point: the consumed step is done, the next one runs.
    expect(denied(await call(b1, 'fs.write', { path: '/workspace/note.txt', content: 'v2' }, 'write'))).toEqual({ stage: 'plan', code: 'off_plan' });
    expect(await call(b1, 'fs.read', { path: '/workspace/note.txt' }, 'read')).toMatchObject({ decision: 'allow', result: { content: 'v1' } });
    expect((await t.op.plans.get(b1.id)).state).toEqual({ cursor: 2, consumed: { write: 1, read: 1 } });
    // Branches are independent of each other and of the parent.
    expect((await t.op.plans.get(b2.id)).state).toEqual({ cursor: 1, consumed: { write: 1 } });
    expect((await t.op.plans.get(a.id)).plan?.objective).toBe(OTHER_PLAN.objective);
    expect((await t.op.approvals.list({ sessionId: a.id, states: ['pending'] })).map((x) => x.id)).toEqual([parked]);

    const inherit = (await t.op.audit.query({ sessionId: a.id })).filter((e) => e.action === 'gate.inherit');
    expect(inherit).toHaveLength(1);
    expect(inherit[0]).toMatchObject({ outcome: 'ok', data: { snapshotId: snap1, sessions: [b1.id, b2.id], tools: TOOLS, plan: { steps: 2, cursor: 1 } } });
  });

  it("a branch starts with a closed breaker even when the parent's had tripped", async () => {
    // Two identical failing calls trip the parent's breaker (failures: 2), which pauses it.
    await t.op.tools.install(a.id, TOOLS);
    for (let i = 0; i < 2; i++) await call(a, 'shell.exec', { command: 'false' });
    const tripped = await t.op.gate.get(a.id);
    expect(tripped).toMatchObject({ pausedByBreaker: true, breaker: { open: true } });
    expect((await t.op.sessions.get(a.id)).state).toBe('paused');

    const snap2 = (await (await t.op.sessions.get(a.id)).snapshot({ name: 'tripped' })).snapshotId;
    const [b] = await t.op.snapshots.fork(snap2, { count: 1 });
    if (!b) throw new Error('fork returned no branch');
    const agent = s.as(b.agentToken as string);
    expect(b.state).toBe('running');
    expect(await t.op.gate.get(b.id)).toMatchObject({ pausedByBreaker: false, calls: 0, breaker: { open: false, failures: 2, streakFailures: 0 } });
    // The plan as it stood at the second snapshot.
    expect((await t.op.plans.get(b.id)).plan?.objective).toBe(OTHER_PLAN.objective);
    expect(await agent.tools.call(b.id, 'fs.list', { path: '/workspace' }, { step: 'list' })).toMatchObject({ decision: 'allow' });
    await t.op.gate.resetBreaker(a.id);
  });

  it('deleting a snapshot deletes its gate copy', async () => {
    expect(snapshotGateRows(snap1)).toBe(1);
    await t.op.snapshots.delete(snap1);
    expect(snapshotGateRows(snap1)).toBe(0);
    expect(await codeOf(t.op.snapshots.fork(snap1, { count: 1 }))).toBe('not_found');
  });

  it('terminating a session cancels its pending approvals; approving one is invalid_state', async () => {
    const c = await newSession(s, t.op);
    await t.op.gate.set(c.id, { httpAllow: ['example.invalid'] });
    const post = (path: string) => call(c, 'http.request', { method: 'POST', url: `http://example.invalid/${path}` });
    const p1 = pendingId(await post('one'));
    const p2 = pendingId(await post('two'));
    const refused = pendingId(await post('three'));
    await t.op.approvals.deny(refused, 'no');

    await (await t.op.sessions.get(c.id)).terminate();
    expect(await t.op.approvals.list({ sessionId: c.id, states: ['pending'] })).toEqual([]);
    const cancelled = await t.op.approvals.list({ sessionId: c.id, states: ['cancelled'] });
    expect(cancelled.map((x) => x.id)).toEqual([p1, p2]);
    for (const x of cancelled) expect(x).toMatchObject({ decidedBy: 'system:system', reason: 'session terminated', result: { decision: 'deny', code: 'approval_denied' } });
    // A decision already made stands.
    expect((await t.op.approvals.list({ sessionId: c.id, states: ['denied'] })).map((x) => x.id)).toEqual([refused]);

    expect(await codeOf(t.op.approvals.approve(p1))).toBe('invalid_state');
    expect(await codeOf(t.op.approvals.deny(p2, 'too late'))).toBe('invalid_state');
    expect((await t.op.approvals.list({ sessionId: c.id, states: ['cancelled'] })).map((x) => x.id)).toEqual([p1, p2]);

    const log = await t.op.audit.query({ sessionId: c.id });
    const cancels = log.filter((e) => e.action === 'approval.cancel');
    expect(cancels.map((e) => [e.outcome, e.data.approvalId, e.principal.kind])).toEqual([
      ['cancelled', p1, 'system'],
      ['cancelled', p2, 'system'],
    ]);
    // Cancelled before the session's last state change.
    const terminated = log.findIndex((e) => e.action === 'session.state' && e.data.to === 'terminated');
    expect(terminated).toBeGreaterThan(log.indexOf(cancels[1] as (typeof log)[number]));
    expect(await s.root.audit.verify()).toMatchObject({ ok: true });
  });
});
