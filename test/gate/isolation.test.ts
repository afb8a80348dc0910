/**
 * Who may do what: a tenant's key sees only its own objects (another tenant's ids are 404, never 403); an
 * agent token may list and call its own session's tools and read its own approvals, nothing else (operator
 * routes 403, another session's ids 404). Keys and tokens are stored hashed. Then the CLI verbs, run
 * in-process with BERTH_TOKEN set to each kind of credential.
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import type { Io } from '../../src/cli/common.js';
import type { Berth } from '../../src/sdk/index.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { TEST_POLICY, codeOf, destroyGateServer, newSession, newTenant, startGateServer, type GateServer, type SessionHandle, type TenantHandle } from './harness.js';

const skip = skipReason('gate isolation', gvisorMissing());

describe.skipIf(skip)('isolation and the CLI', () => {
  let s: GateServer;
  let ta: TenantHandle;
  let tb: TenantHandle;
  let a1: SessionHandle;
  let a2: SessionHandle;
  let b1: SessionHandle;
  let b1Approval = '';
  let a1Approval = '';

  beforeAll(async () => {
    s = await startGateServer();
    ta = await newTenant(s, 'alpha');
    tb = await newTenant(s, 'beta');
    await ta.op.policy.set(TEST_POLICY);
    a1 = await newSession(s, ta.op);
    a2 = await newSession(s, ta.op);
    b1 = await newSession(s, tb.op);
    // Parked calls to have approvals on both sides (the default policy sends a POST to approval).
    for (const [h, op] of [
      [a1, ta.op],
      [b1, tb.op],
    ] as const) {
      await op.gate.set(h.id, { httpAllow: ['example.invalid'] });
      const r = await h.agent.tools.call(h.id, 'http.request', { method: 'POST', url: 'http://example.invalid/x' });
      expect(r.decision).toBe('pending');
      if (h === a1) a1Approval = (r as { approvalId: string }).approvalId;
      else b1Approval = (r as { approvalId: string }).approvalId;
    }
  });
  afterAll(async () => destroyGateServer(s));

  it("another tenant's ids are not found, never forbidden", async () => {
    const b = tb.op;
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['session', () => b.sessions.get(a1.id)],
      ['tools', () => b.tools.list(a1.id)],
      ['call', () => b.tools.call(a1.id, 'fs.list', { path: '/' })],
      ['approval', () => b.approvals.get(a1.id, a1Approval)],
      ['approve', () => b.approvals.approve(a1Approval)],
      ['deny', () => b.approvals.deny(a1Approval, 'x')],
      ['plan', () => b.plans.set(a1.id, { objective: 'x', steps: [{ id: 's', tool: 'fs.read', arguments: {} }] })],
      ['plan show', () => b.plans.get(a1.id)],
      ['gate', () => b.gate.get(a1.id)],
      ['gate set', () => b.gate.set(a1.id, { httpAllow: [] })],
      ['install', () => b.tools.install(a1.id, ['fs.read'])],
      ['reset', () => b.gate.resetBreaker(a1.id)],
      ['audit', () => b.audit.query({ sessionId: a1.id })],
      ['policy of a', () => b.policy.get({ tenantId: ta.id })],
    ];
    for (const [what, p] of calls) expect([what, await codeOf(p())]).toEqual([what, 'not_found']);
    expect((await b.approvals.list()).map((x) => x.id)).toEqual([b1Approval]);
    expect((await ta.op.approvals.list()).map((x) => x.id)).toEqual([a1Approval]);
    expect((await s.root.approvals.list()).map((x) => x.id).sort()).toEqual([a1Approval, b1Approval].sort());
    // Policies are per tenant: beta still has the default.
    expect(await b.policy.get()).toMatchObject({ isDefault: true, version: 0 });
    expect(await ta.op.policy.get()).toMatchObject({ isDefault: false, version: 1 });
    expect((await b.audit.query()).every((e) => e.tenantId === tb.id)).toBe(true);
  });

  it('an agent token lists and calls its own tools only: operator routes 403, other sessions 404', async () => {
    const ag: Berth = a1.agent;
    expect((await ag.tools.list(a1.id)).length).toBe(5);
    expect(await ag.tools.call(a1.id, 'fs.list', { path: '/' })).toMatchObject({ decision: 'allow' });
    expect(await ag.approvals.get(a1.id, a1Approval)).toMatchObject({ status: 'pending' });

    const forbidden: Array<[string, () => Promise<unknown>]> = [
      ['session', () => ag.sessions.get(a1.id)],
      ['list sessions', () => ag.sessions.list()],
      ['create session', () => ag.sessions.create()],
      ['plan', () => ag.plans.set(a1.id, { objective: 'x', steps: [{ id: 's', tool: 'fs.read', arguments: {} }] })],
      ['plan show', () => ag.plans.get(a1.id)],
      ['gate', () => ag.gate.get(a1.id)],
      ['install', () => ag.tools.install(a1.id, ['fs.read'])],
      ['reset', () => ag.gate.resetBreaker(a1.id)],
      ['approvals', () => ag.approvals.list()],
      ['approve own', () => ag.approvals.approve(a1Approval)],
      ['policy', () => ag.policy.get()],
      ['policy set', () => ag.policy.set(TEST_POLICY)],
      ['tool defs', () => ag.tools.definitions()],
      ['audit', () => ag.audit.query({ sessionId: a1.id })],
      ['tenants', () => ag.tenants.list()],
    ];
    for (const [what, p] of forbidden) expect([what, await codeOf(p())]).toEqual([what, 'forbidden']);

    const elsewhere: Array<[string, () => Promise<unknown>]> = [
      ['sibling tools', () => ag.tools.list(a2.id)],
      ['sibling call', () => ag.tools.call(a2.id, 'fs.list', { path: '/' })],
      ['sibling session', () => ag.sessions.get(a2.id)],
      ['sibling plan', () => ag.plans.get(a2.id)],
      ['sibling gate', () => ag.gate.get(a2.id)],
      ['sibling audit', () => ag.audit.query({ sessionId: a2.id })],
      ['other tenant tools', () => ag.tools.list(b1.id)],
      ['other approval', () => ag.approvals.get(b1.id, b1Approval)],
      ['own session, other approval', () => ag.approvals.get(a1.id, b1Approval)],
      ['other approve', () => ag.approvals.approve(b1Approval)],
    ];
    for (const [what, p] of elsewhere) expect([what, await codeOf(p())]).toEqual([what, 'not_found']);
  });

  it('stores keys and tokens only as hashes', () => {
    const files = readdirSync(s.dataDir).filter((f) => f.startsWith('berth.db'));
    expect(files.length).toBeGreaterThan(0);
    const blob = Buffer.concat(files.map((f) => readFileSync(join(s.dataDir, f))));
    for (const secret of [ta.apiKey, tb.apiKey, a1.agentToken, b1.agentToken]) expect(blob.includes(Buffer.from(secret))).toBe(false);
  });

  describe('CLI verbs', () => {
    const run = async (token: string, argv: string[]): Promise<{ code: number; out: string; err: string }> => {
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      let out = '';
      let err = '';
      stdout.on('data', (d: Buffer) => (out += d.toString()));
      stderr.on('data', (d: Buffer) => (err += d.toString()));
      const saved = { url: process.env.BERTH_URL, token: process.env.BERTH_TOKEN };
      process.env.BERTH_URL = s.url;
      process.env.BERTH_TOKEN = token;
      try {
        const io = { stdout, stderr, stdin: new PassThrough() } as unknown as Io;
        const code = await main(argv, io);
        return { code, out, err };
      } finally {
        process.env.BERTH_URL = saved.url;
        process.env.BERTH_TOKEN = saved.token;
        if (saved.url === undefined) delete process.env.BERTH_URL;
        if (saved.token === undefined) delete process.env.BERTH_TOKEN;
      }
    };

    it('tools and call with an agent token: exit 0 allow, 3 deny, 4 pending', async () => {
      const tools = await run(a1.agentToken, ['tools', a1.id, '--json']);
      expect(tools.code).toBe(0);
      expect((JSON.parse(tools.out) as { tools: Array<{ name: string }> }).tools.map((x) => x.name)).toContain('fs.read');
      const allow = await run(a1.agentToken, ['call', a1.id, 'shell.exec', '--args', '{"command":"echo hi"}', '--json']);
      expect([allow.code, JSON.parse(allow.out)]).toEqual([0, { decision: 'allow', result: expect.objectContaining({ stdout: 'hi\n' }) }]);
      const deny = await run(a1.agentToken, ['call', a1.id, 'fs.read', '--args', '{"path":"/etc/hostname"}', '--json']);
      expect([deny.code, JSON.parse(deny.out)]).toEqual([3, expect.objectContaining({ decision: 'deny', stage: 'policy', code: 'policy_denied' })]);
      const pending = await run(a1.agentToken, ['call', a1.id, 'http.request', '--args', '{"method":"POST","url":"http://example.invalid/y"}', '--json']);
      expect([pending.code, JSON.parse(pending.out).decision]).toEqual([4, 'pending']);
      expect((await run(a1.agentToken, ['call', a1.id, 'fs.read', '--args', 'not json'])).code).toBe(2);
      expect((await run(a1.agentToken, ['approvals', 'list', '--json'])).code).toBe(1);
      expect((await run(a1.agentToken, ['tools', a2.id, '--json'])).code).toBe(1);
    });

    it('policy, plan, gate, approvals, breaker with an operator key', async () => {
      const dir = s.dataDir;
      writeFileSync(join(dir, 'bad.cedar'), 'permit (principal, action == Action::"nope", resource);');
      const before = await ta.op.policy.get();
      const bad = await run(ta.apiKey, ['policy', 'set', join(dir, 'bad.cedar')]);
      expect(bad.code).toBe(1);
      expect(bad.err).toMatch(/^berth: invalid_argument: /);
      expect((await ta.op.policy.get()).version).toBe(before.version);
      writeFileSync(join(dir, 'good.cedar'), TEST_POLICY);
      expect((await run(ta.apiKey, ['policy', 'set', join(dir, 'good.cedar'), '--json'])).code).toBe(0);
      expect(JSON.parse((await run(ta.apiKey, ['policy', 'show', '--json'])).out)).toMatchObject({ version: before.version + 1 });

      writeFileSync(join(dir, 'plan.json'), JSON.stringify({ objective: 'list', steps: [{ id: 'ls', tool: 'fs.list', arguments: { type: 'object' }, repeatable: true }] }));
      expect((await run(ta.apiKey, ['plan', 'set', a2.id, join(dir, 'plan.json')])).code).toBe(0);
      expect(JSON.parse((await run(ta.apiKey, ['plan', 'show', a2.id, '--json'])).out)).toMatchObject({ plan: { objective: 'list' }, state: { cursor: 0 } });
      expect((await run(a2.agentToken, ['call', a2.id, 'shell.exec', '--args', '{"command":"true"}'])).code).toBe(3);
      expect((await run(a2.agentToken, ['call', a2.id, 'fs.list', '--args', '{"path":"/"}', '--step', 'ls'])).code).toBe(0);

      const g = await run(ta.apiKey, ['gate', 'set', a2.id, '--http-allow', 'api.example.com', '--http-allow', '127.0.0.1:9', '--breaker-failures', '4', '--breaker-per-minute', '50', '--json']);
      expect([g.code, JSON.parse(g.out)]).toEqual([0, expect.objectContaining({ httpAllow: ['api.example.com', '127.0.0.1:9'], breaker: expect.objectContaining({ failures: 4, perMinute: 50 }) })]);
      expect((await run(ta.apiKey, ['breaker', 'reset', a2.id])).code).toBe(0);

      writeFileSync(join(dir, 'tool.json'), JSON.stringify({
        name: 'cli.echo', description: 'echoes', risk: 'read', inputSchema: { type: 'object' }, outputSchema: { type: 'object' },
        executor: { kind: 'command', argv: ['cat'] },
      }));
      expect((await run(ta.apiKey, ['tool', 'define', join(dir, 'tool.json'), '--json'])).code).toBe(0);

      const list = await run(ta.apiKey, ['approvals', 'list', '--json']);
      const pending = (JSON.parse(list.out) as { approvals: Array<{ id: string; status: string }> }).approvals.filter((x) => x.status === 'pending');
      expect(pending.length).toBeGreaterThanOrEqual(2);
      const denied = await run(ta.apiKey, ['deny', pending[0]!.id, '--reason', 'no network today', '--json']);
      expect([denied.code, JSON.parse(denied.out).status]).toEqual([0, 'denied']);
      expect((await run(ta.apiKey, ['deny', pending[1]!.id])).code).toBe(2);
      // Approving runs the POST; example.invalid does not resolve, so the call ran and failed at the result stage.
      const approved = await run(ta.apiKey, ['approve', pending[1]!.id, '--json']);
      expect([approved.code, JSON.parse(approved.out)]).toEqual([0, expect.objectContaining({ status: 'used', result: expect.objectContaining({ stage: 'result' }) })]);
    });

    it('audit verify passes and audit export writes JSON Lines', async () => {
      const v = await run(s.side.rootKey, ['audit', 'verify', '--json']);
      expect([v.code, JSON.parse(v.out).ok]).toEqual([0, true]);
      const x = await run(ta.apiKey, ['audit', 'export', '--session', a1.id]);
      expect(x.code).toBe(0);
      const lines = x.out.trimEnd().split('\n').map((l) => JSON.parse(l) as { seq: number; sessionId: string; action: string });
      expect(lines.length).toBeGreaterThan(10);
      expect(lines.every((e) => e.sessionId === a1.id)).toBe(true);
      expect(lines.map((e) => e.seq)).toEqual([...lines.map((e) => e.seq)].sort((p, q) => p - q));
      expect(lines.some((e) => e.action === 'tool.policy')).toBe(true);
    });

    it('audit verify exits non-zero naming the first edited entry (runs last: it breaks the chain)', async () => {
      const db = new Database(join(s.dataDir, 'berth.db'));
      try {
        const seq = (db.prepare("SELECT seq FROM audit WHERE action = 'tool.policy' ORDER BY seq LIMIT 1").get() as { seq: number }).seq;
        db.exec('DROP TRIGGER audit_no_update');
        db.prepare("UPDATE audit SET outcome = 'tampered' WHERE seq = ?").run(seq);
        const v = await run(s.side.rootKey, ['audit', 'verify', '--json']);
        expect([v.code, JSON.parse(v.out)]).toEqual([1, expect.objectContaining({ ok: false, firstBadSeq: seq, problem: 'edited' })]);
        expect(v.err).toContain(`seq ${seq}`);
      } finally {
        db.close();
      }
    });
  });
});
