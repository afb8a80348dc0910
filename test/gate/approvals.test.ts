/**
 * Stage 4, approvals, end to end: park, restart the server, approve, exactly-once, changed arguments, denial,
 * expiry on a fake clock, and a hibernated session that wakes to run its approved call. Real SQLite, Cedar and
 * gVisor; the server is built twice on the same data directory.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CallResultView } from '../../src/sdk/index.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { FakeClock, TEST_POLICY, codeOf, destroyGateServer, newSession, newTenant, startGateServer, type GateServer, type SessionHandle, type TenantHandle } from './harness.js';

const skip = skipReason('gate approvals', gvisorMissing());

const DEPLOY = {
  name: 'ops.deploy',
  description: 'Deploys to a target (appends a line to /root/deploys.log).',
  risk: 'irreversible',
  inputSchema: { type: 'object', additionalProperties: false, required: ['target'], properties: { target: { type: 'string' } } },
  outputSchema: { type: 'object', required: ['deployed'], properties: { deployed: { type: 'string' } } },
  executor: { kind: 'command', argv: ['/bin/sh', '-c', 'read -r line; echo "$line" >> /root/deploys.log; printf \'{"deployed":%s}\' "$(echo "$line" | sed \'s/.*"target":\\("[^"]*"\\).*/\\1/\')"'] },
};

const pendingId = (r: CallResultView): string => {
  expect(r.decision).toBe('pending');
  return (r as { approvalId: string }).approvalId;
};

describe.skipIf(skip)('approvals', () => {
  const clock = new FakeClock();
  let s: GateServer;
  let t: TenantHandle;
  let a: SessionHandle;
  const deploy = (target: string) => a.agent.tools.call(a.id, 'ops.deploy', { target });
  const deployLog = async () => {
    const r = await t.op.tools.call(a.id, 'shell.exec', { command: 'cat /root/deploys.log 2>/dev/null | wc -l' });
    return Number((r as { result: { stdout: string } }).result.stdout.trim());
  };

  beforeAll(async () => {
    s = await startGateServer({ clock });
    t = await newTenant(s, 'approvals');
    await t.op.policy.set(TEST_POLICY);
    await t.op.tools.define(DEPLOY);
    a = await newSession(s, t.op);
    await t.op.tools.install(a.id, ['shell.exec', 'fs.read', 'ops.deploy']);
  });
  afterAll(async () => destroyGateServer(s));

  let first = '';

  it('parks a call that needs approval; repeating it waits on the same approval', async () => {
    first = pendingId(await deploy('prod'));
    expect(pendingId(await deploy('prod'))).toBe(first);
    expect(await a.agent.approvals.get(a.id, first)).toMatchObject({ status: 'pending', tool: 'ops.deploy', args: { target: 'prod' }, result: null });
    const list = await t.op.approvals.list({ states: ['pending'] });
    expect(list.map((x) => x.id)).toEqual([first]);
    expect(await deployLog()).toBe(0);
  });

  it('survives a server restart, then runs the approved arguments exactly once', async () => {
    await s.stop();
    s = await startGateServer({ dataDir: s.dataDir, clock });
    t = { ...t, op: s.as(t.apiKey) };
    a = { ...a, agent: s.as(a.agentToken) };
    expect((await t.op.approvals.list({ states: ['pending'] })).map((x) => x.id)).toEqual([first]);

    expect(await codeOf(a.agent.approvals.approve(first))).toBe('forbidden');
    const done = await t.op.approvals.approve(first);
    expect(done).toMatchObject({ status: 'used', decidedBy: `operator:${t.id}`, result: { decision: 'allow', result: { deployed: 'prod' }, approvalId: first } });
    expect(await deployLog()).toBe(1);
    expect(await codeOf(t.op.approvals.approve(first))).toBe('invalid_state');
    expect(await a.agent.approvals.get(a.id, first)).toMatchObject({ status: 'used', result: { decision: 'allow' } });

    // The agent repeats its call: it gets the stored result, and nothing runs again.
    expect(await deploy('prod')).toEqual({ decision: 'allow', result: { deployed: 'prod' }, approvalId: first });
    expect(await deployLog()).toBe(1);
    // After that the same call needs a new approval: an approval runs once.
    const again = pendingId(await deploy('prod'));
    expect(again).not.toBe(first);
    await t.op.approvals.deny(again, 'once is enough');

    const log = await t.op.audit.query({ sessionId: a.id });
    const decide = log.find((e) => e.action === 'approval.decide' && e.data.approvalId === first);
    expect(decide).toMatchObject({ outcome: 'approved', principal: { kind: 'operator', id: t.id } });
  });

  it('changed arguments need a new approval; a denial stands', async () => {
    const staging = pendingId(await deploy('staging'));
    expect(staging).not.toBe(first);
    expect(await codeOf(a.agent.approvals.deny(staging, 'no'))).toBe('forbidden');
    expect(await t.op.approvals.deny(staging, 'not today')).toMatchObject({ status: 'denied', reason: 'not today', decidedBy: `operator:${t.id}` });
    expect(await deploy('staging')).toMatchObject({ decision: 'deny', stage: 'approval', code: 'approval_denied' });
    expect(await deploy('staging')).toMatchObject({ decision: 'deny', stage: 'approval', code: 'approval_denied' });
    expect(await a.agent.approvals.get(a.id, staging)).toMatchObject({ status: 'denied', result: { decision: 'deny', code: 'approval_denied' } });
    expect(await deployLog()).toBe(1);
  });

  it('expires: a pending approval past its time counts as a deny', async () => {
    await t.op.gate.set(a.id, { approvalTtlS: 60 });
    const dev = pendingId(await deploy('dev'));
    expect((await a.agent.approvals.get(a.id, dev)).expiresAt).toBe(new Date(clock.now() + 60_000).toISOString());
    clock.advance(61_000);
    expect(await codeOf(t.op.approvals.approve(dev))).toBe('invalid_state');
    expect((await t.op.approvals.list({ states: ['expired'] })).map((x) => x.id)).toContain(dev);
    expect(await deploy('dev')).toMatchObject({ decision: 'deny', stage: 'approval', code: 'approval_expired' });
    // Having been told, the agent may ask again.
    const anew = pendingId(await deploy('dev'));
    expect(anew).not.toBe(dev);
    // The sweep expires what nobody reads.
    clock.advance(61_000);
    expect(await s.side.manager.gate.sweepExpired()).toEqual([anew]);
    expect(await a.agent.approvals.get(a.id, anew)).toMatchObject({ status: 'expired' });
    expect(await deployLog()).toBe(1);
  });

  it('a session waiting only on an approval may hibernate; approving wakes it to run the call', async () => {
    const qa = pendingId(await deploy('qa'));
    await t.op.sessions.get(a.id).then((x) => x.hibernate());
    expect((await t.op.sessions.get(a.id)).state).toBe('hibernated');
    const done = await t.op.approvals.approve(qa);
    expect(done).toMatchObject({ status: 'used', result: { decision: 'allow', result: { deployed: 'qa' } } });
    expect((await t.op.sessions.get(a.id)).state).toBe('running');
    expect(await deployLog()).toBe(2);
  });

  it('an http POST waits for approval, then goes out once', async () => {
    const hits: string[] = [];
    const web = createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        hits.push(`${req.method} ${body}`);
        res.end('stored');
      });
    });
    await new Promise<void>((done) => web.listen(0, '127.0.0.1', done));
    try {
      const port = (web.address() as AddressInfo).port;
      await t.op.tools.install(a.id, ['shell.exec', 'fs.read', 'ops.deploy', 'http.request']);
      await t.op.gate.set(a.id, { httpAllow: [`127.0.0.1:${port}`], egressAllowCidr: ['127.0.0.0/8'] });
      const post = { method: 'POST', url: `http://127.0.0.1:${port}/items`, body: 'item-1' };
      const id = pendingId(await a.agent.tools.call(a.id, 'http.request', post));
      expect(hits).toEqual([]);
      expect(await t.op.approvals.approve(id)).toMatchObject({ status: 'used', result: { decision: 'allow', result: { status: 200, body: 'stored' } } });
      expect(hits).toEqual(['POST item-1']);
      expect(await a.agent.tools.call(a.id, 'http.request', post)).toMatchObject({ decision: 'allow', approvalId: id });
      expect(hits).toEqual(['POST item-1']);
    } finally {
      await new Promise((done) => web.close(done));
    }
    expect(await s.root.audit.verify()).toMatchObject({ ok: true });
  });
});
