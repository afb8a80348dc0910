/**
 * Every stage of the gate, allowed and refused, through the HTTP API with an agent token: real SQLite,
 * real Cedar, real gVisor sandboxes. Assertions are on decisions, stages and codes, never on reason text.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CallResultView } from '../../src/sdk/index.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { TEST_POLICY, codeOf, destroyGateServer, newSession, newTenant, startGateServer, type GateServer, type SessionHandle, type TenantHandle } from './harness.js';

const skip = skipReason('gate stages', gvisorMissing());

const denied = (r: CallResultView) => (r.decision === 'deny' ? { stage: r.stage, code: r.code } : { decision: r.decision });

describe.skipIf(skip)('gate stages over HTTP', () => {
  let s: GateServer;
  let t: TenantHandle;
  let a: SessionHandle;
  let web: Server;
  let webPort = 0;
  const call = (tool: string, args: unknown, step?: string) => a.agent.tools.call(a.id, tool, args, step === undefined ? {} : { step });

  beforeAll(async () => {
    web = createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ method: req.method, path: req.url, body }));
      });
    });
    await new Promise<void>((done) => web.listen(0, '127.0.0.1', done));
    webPort = (web.address() as AddressInfo).port;
    s = await startGateServer();
    t = await newTenant(s, 'stages');
    await t.op.policy.set(TEST_POLICY);
    a = await newSession(s, t.op);
    const op = await t.op.sessions.get(a.id);
    await op.files.mkdir('/workspace', { parents: true });
  });
  afterAll(async () => {
    await destroyGateServer(s);
    await new Promise((done) => web?.close(done));
  });

  it('lists exactly the installed tools to the agent', async () => {
    expect((await a.agent.tools.list(a.id)).map((x) => x.name)).toEqual(['shell.exec', 'fs.read', 'fs.write', 'fs.list', 'http.request']);
    const b = await newSession(s, t.op);
    await t.op.tools.install(b.id, ['fs.read', 'fs.list']);
    expect((await b.agent.tools.list(b.id)).map((x) => x.name)).toEqual(['fs.read', 'fs.list']);
    expect(denied(await b.agent.tools.call(b.id, 'shell.exec', { command: 'true' }))).toEqual({ stage: 'arguments', code: 'unknown_tool' });
    expect(await codeOf(t.op.tools.install(b.id, ['no.such-tool']))).toBe('invalid_argument');
  });

  it('stage 1, arguments: valid arguments run; invalid ones and unknown tools are refused', async () => {
    const w = await call('fs.write', { path: '/workspace/a.txt', content: 'hello' });
    expect(w).toMatchObject({ decision: 'allow', result: { path: '/workspace/a.txt', bytesWritten: 5 } });
    expect(denied(await call('fs.write', { path: '/workspace/a.txt' }))).toEqual({ stage: 'arguments', code: 'invalid_arguments' });
    expect(denied(await call('fs.read', { path: '/workspace/a.txt', extra: 1 }))).toEqual({ stage: 'arguments', code: 'invalid_arguments' });
    expect(denied(await call('fs.read', 'not an object'))).toEqual({ stage: 'arguments', code: 'invalid_arguments' });
    expect(denied(await call('no.such-tool', {}))).toEqual({ stage: 'arguments', code: 'unknown_tool' });
    // The same through POST /v1/sessions/:id/calls {tool, args}.
    const res = await fetch(`${s.url}/v1/sessions/${a.id}/calls`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.agentToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tool: 'fs.read', args: { path: '/workspace/a.txt' } }),
    });
    expect([res.status, await res.json()]).toEqual([200, expect.objectContaining({ decision: 'allow', result: expect.objectContaining({ content: 'hello' }) })]);
    // A path that cannot be resolved inside the sandbox (a file used as a directory).
    expect(denied(await call('fs.read', { path: '/workspace/a.txt/x' }))).toEqual({ stage: 'arguments', code: 'invalid_arguments' });
  });

  it('stage 1, paths: canonicalized in the sandbox; a symlink out of /workspace is refused by policy', async () => {
    expect(await call('fs.read', { path: '/workspace/a.txt' })).toMatchObject({ decision: 'allow', result: { content: 'hello' } });
    // Relative to the agent's home (/root), and with .. segments: the checked path is the resolved one.
    expect(await call('fs.read', { path: '../workspace/./a.txt' })).toMatchObject({ decision: 'allow', result: { path: '/workspace/a.txt' } });
    expect(await call('shell.exec', { command: 'ln -s /etc/passwd /workspace/x && ln -s /workspace /root/ws' })).toMatchObject({
      decision: 'allow',
      result: { exitCode: 0 },
    });
    expect(denied(await call('fs.read', { path: '/workspace/x' }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    // Decided first on the path as written (which the policy allows), run under a guard that it is canonical:
    // the agent refused to run it (nothing was read), and the call was decided again on /etc/passwd.
    const trail = (await t.op.audit.query({ sessionId: a.id })).filter((e) => e.action.startsWith('tool.')).slice(-8);
    expect(trail.map((e) => [e.action, e.outcome])).toEqual([
      ['tool.arguments', 'pass'],
      ['tool.policy', 'pass'],
      ['tool.plan', 'skip'],
      ['tool.approval', 'skip'],
      ['tool.breaker', 'pass'],
      ['tool.result', 'skip'],
      ['tool.arguments', 'pass'],
      ['tool.policy', 'deny'],
    ]);
    expect(trail[0]?.data.subject).toMatch(/\/workspace\/x/);
    expect(trail[5]?.data.detail).toMatch(/not run: \/workspace\/x is not canonical \(it resolves to \/etc\/passwd\); decided again/);
    expect(trail[6]?.data.subject).toMatch(/\/etc\/passwd/);
    expect(denied(await call('fs.read', { path: '/workspace/../etc/passwd' }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    // A symlink *into* the allowed directory resolves to it and is allowed.
    expect(await call('fs.read', { path: '/root/ws/a.txt' })).toMatchObject({ decision: 'allow', result: { path: '/workspace/a.txt' } });
  });

  it('stage 2, policy: default deny, permits, forbid wins; a bad policy is refused and the old one kept', async () => {
    expect(denied(await call('fs.read', { path: '/etc/hostname' }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    expect(await call('shell.exec', { command: 'echo fine' })).toMatchObject({ decision: 'allow', result: { stdout: 'fine\n' } });
    expect(denied(await call('shell.exec', { command: 'echo forbidden-word' }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    const before = await t.op.policy.get();
    const bad = await t.op.policy.set('permit (principal, action == Action::"fs.read", resource) when { context.args.nope == 1 };').catch((e: unknown) => e);
    expect(bad).toMatchObject({ code: 'invalid_argument' });
    expect(await codeOf(t.op.policy.set('this is not cedar'))).toBe('invalid_argument');
    expect(await t.op.policy.get()).toMatchObject({ version: before.version, digest: before.digest });
    expect(denied(await call('fs.read', { path: '/etc/hostname' }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    // PUT /v1/policy also takes the Cedar text itself (text/plain).
    const put = await fetch(`${s.url}/v1/policy`, { method: 'PUT', headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'text/plain' }, body: TEST_POLICY });
    expect([put.status, ((await put.json()) as { version: number }).version]).toEqual([200, before.version + 1]);
    const badPut = await fetch(`${s.url}/v1/policy`, { method: 'PUT', headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'text/plain' }, body: 'permit (' });
    expect([badPut.status, ((await badPut.json()) as { error: { code: string } }).error.code]).toEqual([400, 'invalid_argument']);
  });

  it('stage 2, egress: http.request reaches allow-listed hosts only; POST needs approval', async () => {
    const url = `http://127.0.0.1:${webPort}/hello`;
    expect(denied(await call('http.request', { method: 'GET', url }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    await t.op.gate.set(a.id, { httpAllow: [`127.0.0.1:${webPort}`], egressAllowCidr: ['127.0.0.0/8'] });
    const ok = await call('http.request', { method: 'GET', url, headers: { 'x-test': '1' } });
    expect(ok).toMatchObject({ decision: 'allow', result: { status: 200, truncated: false } });
    expect(JSON.parse((ok as { result: { body: string } }).result.body)).toMatchObject({ method: 'GET', path: '/hello' });
    expect(denied(await call('http.request', { method: 'GET', url: `http://127.0.0.1:${webPort + 1}/` }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    expect(denied(await call('http.request', { method: 'GET', url: 'http://localhost/' }))).toEqual({ stage: 'policy', code: 'policy_denied' });
    expect(await call('http.request', { method: 'POST', url, body: 'x' })).toMatchObject({ decision: 'pending', approvalId: expect.stringMatching(/^apr_/) });
    expect(await codeOf(t.op.gate.set(a.id, { httpAllow: ['not a host!'] }))).toBe('invalid_argument');
  });

  it('stage 3, plan: off-plan calls refused, steps in order, repeatable steps, claimed steps checked', async () => {
    await t.op.plans.set(a.id, {
      objective: 'read the workspace',
      steps: [
        { id: 'look', tool: 'fs.list', arguments: { type: 'object', properties: { path: { const: '/workspace' } } } },
        { id: 'read', tool: 'fs.read', arguments: { type: 'object' }, repeatable: true },
        { id: 'done', tool: 'shell.exec', arguments: { type: 'object', properties: { command: { const: 'echo done' } } } },
      ],
    });
    expect(denied(await call('fs.read', { path: '/workspace/a.txt' }))).toEqual({ stage: 'plan', code: 'off_plan' });
    expect(denied(await call('fs.list', { path: '/root' }))).toEqual({ stage: 'plan', code: 'off_plan' });
    expect(await call('fs.list', { path: '/workspace' }, 'look')).toMatchObject({ decision: 'allow' });
    expect(denied(await call('fs.read', { path: '/workspace/a.txt' }, 'done'))).toEqual({ stage: 'plan', code: 'off_plan' });
    expect(await call('fs.read', { path: '/workspace/a.txt' })).toMatchObject({ decision: 'allow' });
    expect(await call('fs.read', { path: '/workspace/a.txt' }, 'read')).toMatchObject({ decision: 'allow' });
    expect(denied(await call('shell.exec', { command: 'echo other' }))).toEqual({ stage: 'plan', code: 'off_plan' });
    expect(await call('shell.exec', { command: 'echo done' })).toMatchObject({ decision: 'allow' });
    expect(denied(await call('fs.read', { path: '/workspace/a.txt' }))).toEqual({ stage: 'plan', code: 'off_plan' });
    expect((await t.op.plans.get(a.id)).state).toEqual({ cursor: 3, consumed: { look: 1, read: 2, done: 1 } });
    // Setting a plan is an operator act; an agent is forbidden.
    expect(await codeOf(a.agent.plans.set(a.id, { objective: 'x', steps: [{ id: 'a', tool: 'fs.read', arguments: {} }] }))).toBe('forbidden');
    expect(await codeOf(t.op.plans.set(a.id, { objective: 'x', steps: [{ id: 'a', tool: 'no.such', arguments: {} }] }))).toBe('invalid_argument');
    await t.op.plans.clear(a.id);
    expect(await call('fs.read', { path: '/workspace/a.txt' })).toMatchObject({ decision: 'allow' });
    const log = await t.op.audit.query({ sessionId: a.id });
    expect(log.filter((e) => e.action === 'gate.plan').map((e) => e.outcome)).toEqual(['set', 'cleared']);
  });

  it('stage 6, result: a command tool printing non-JSON, or output past the cap, never reaches the agent as success', async () => {
    const def = (name: string, script: string, outputSchema: Record<string, unknown>) => ({
      name,
      description: `test tool ${name}`,
      risk: 'read',
      inputSchema: { type: 'object', properties: { n: { type: 'integer' } } },
      outputSchema,
      executor: { kind: 'command', argv: ['/bin/sh', '-c', script] },
    });
    await t.op.tools.define(def('test.good', 'cat', { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } }));
    await t.op.tools.define(def('test.garbage', 'cat >/dev/null; echo this is not json', { type: 'object' }));
    await t.op.tools.define(def('test.wrong-shape', 'cat >/dev/null; echo \'{"n":"seven"}\'', { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } }));
    await t.op.tools.define(def('test.fails', 'cat >/dev/null; echo oops >&2; exit 3', { type: 'object' }));
    expect(await codeOf(t.op.tools.define({ ...def('fs.read', 'true', {}) }))).toBe('invalid_argument');
    expect(await codeOf(t.op.tools.define({ ...def('test.builtin', 'true', {}), executor: { kind: 'builtin', name: 'fs.read' } }))).toBe('invalid_argument');
    expect(await codeOf(a.agent.tools.define(def('test.agent', 'true', {})))).toBe('forbidden');
    await t.op.tools.install(a.id, ['shell.exec', 'fs.read', 'fs.write', 'fs.list', 'http.request', 'test.good', 'test.garbage', 'test.wrong-shape', 'test.fails']);

    expect(await call('test.good', { n: 7 })).toEqual({ decision: 'allow', result: { n: 7 } });
    expect(denied(await call('test.garbage', {}))).toEqual({ stage: 'result', code: 'result_invalid' });
    expect(denied(await call('test.wrong-shape', {}))).toEqual({ stage: 'result', code: 'result_invalid' });
    expect(denied(await call('test.fails', {}))).toEqual({ stage: 'result', code: 'result_invalid' });
    // Output past the cap is no refusal for shell.exec: it keeps the first and last parts (test/gate/output.test.ts).
    expect(await call('shell.exec', { command: 'head -c 3000000 /dev/zero' })).toMatchObject({ decision: 'allow', result: { truncated: true, stdoutBytes: 3000000 } });
    // A non-zero exit of shell.exec is a result (and a failure for the breaker), not a refusal.
    expect(await call('shell.exec', { command: 'exit 4' })).toMatchObject({ decision: 'allow', result: { exitCode: 4 } });
  });

  it('stage 5, breaker: N identical failing calls trip it, pause the session and raise an alert; reset resumes', async () => {
    const b = await newSession(s, t.op);
    await t.op.gate.set(b.id, { breaker: { failures: 3 } });
    const fail = () => b.agent.tools.call(b.id, 'shell.exec', { command: 'exit 1' });
    expect(await fail()).toMatchObject({ decision: 'allow', result: { exitCode: 1 } });
    // A different call in between restarts the streak.
    expect(await b.agent.tools.call(b.id, 'shell.exec', { command: 'exit 2' })).toMatchObject({ decision: 'allow' });
    expect(await fail()).toMatchObject({ decision: 'allow' });
    expect(await fail()).toMatchObject({ decision: 'allow' });
    expect((await t.op.gate.get(b.id)).breaker.open).toBe(false);
    expect(await fail()).toMatchObject({ decision: 'allow', result: { exitCode: 1 } });
    const g = await t.op.gate.get(b.id);
    expect(g).toMatchObject({ pausedByBreaker: true, breaker: { open: true, trip: 'identical_failures' } });
    expect((await t.op.sessions.get(b.id)).state).toBe('paused');
    expect(denied(await b.agent.tools.call(b.id, 'fs.list', { path: '/' }))).toEqual({ stage: 'breaker', code: 'breaker_open' });
    const log = await t.op.audit.query({ sessionId: b.id });
    expect(log.some((e) => e.action === 'gate.breaker' && e.outcome === 'tripped' && e.data.alert === true)).toBe(true);

    expect(await codeOf(b.agent.gate.resetBreaker(b.id))).toBe('forbidden');
    expect(await t.op.gate.resetBreaker(b.id)).toMatchObject({ pausedByBreaker: false, breaker: { open: false } });
    expect((await t.op.sessions.get(b.id)).state).toBe('running');
    expect(await b.agent.tools.call(b.id, 'fs.list', { path: '/' })).toMatchObject({ decision: 'allow' });

    // More than M calls a minute trips it as well.
    await t.op.gate.set(b.id, { breaker: { perMinute: 3 } });
    for (let i = 0; i < 2; i++) expect(await b.agent.tools.call(b.id, 'fs.list', { path: '/' })).toMatchObject({ decision: 'allow' });
    expect(denied(await b.agent.tools.call(b.id, 'fs.list', { path: '/' }))).toEqual({ stage: 'breaker', code: 'breaker_open' });
    expect((await t.op.gate.get(b.id)).breaker).toMatchObject({ open: true, trip: 'rate' });
    await t.op.gate.resetBreaker(b.id);
    await t.op.gate.set(b.id, { breaker: { perMinute: 120 } });
    expect(await b.agent.tools.call(b.id, 'fs.list', { path: '/' })).toMatchObject({ decision: 'allow' });
  });

  it('audits one entry per verdict plus the result, and the chain verifies', async () => {
    const r = await call('fs.read', { path: '/workspace/a.txt' });
    expect(r.decision).toBe('allow');
    const log = await t.op.audit.query({ sessionId: a.id });
    const last = log.filter((e) => e.action.startsWith('tool.')).slice(-6);
    const callId = last[0]?.data.callId;
    expect(last.map((e) => [e.action, e.outcome])).toEqual([
      ['tool.arguments', 'pass'],
      ['tool.policy', 'pass'],
      ['tool.plan', 'skip'],
      ['tool.approval', 'skip'],
      ['tool.breaker', 'pass'],
      ['tool.result', 'pass'],
    ]);
    for (const e of last) {
      expect(e.data.callId).toBe(callId);
      expect(e.principal).toMatchObject({ kind: 'agent', id: a.id });
    }
    expect(last[5]?.data.resultDigest).toMatch(/^[0-9a-f]{64}$/);
    // A refusal: the verdicts up to the refusing stage, and no result entry.
    await call('fs.read', { path: '/etc/hostname' });
    const after = (await t.op.audit.query({ sessionId: a.id })).filter((e) => e.action.startsWith('tool.')).slice(-2);
    expect(after.map((e) => [e.action, e.outcome, e.data.code ?? null])).toEqual([
      ['tool.arguments', 'pass', null],
      ['tool.policy', 'deny', 'policy_denied'],
    ]);
    expect(await s.root.audit.verify()).toMatchObject({ ok: true });
  });
});
