/**
 * ToolGate over a real SQLite store and real Cedar, with a scripted stand-in for the sandbox (the gVisor
 * end-to-end suite is test/gate/). Covers what is awkward to reach over HTTP: concurrent approvals, a
 * restart in the middle of an approved run, and the audit trail of one call.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ExecEvent, ExecExit, ExecHandle, Principal } from '../core/index.js';
import { openSqliteStore, type SqliteStore } from '../store/sqlite.js';
import { ToolGate } from './gate.js';
import { newSessionRecord } from './records.js';
import type { SandboxAccess } from './executor.js';

const enc = new TextEncoder();

/** A command that prints `out` and exits 0, after `delayMs`. */
function fakeExec(out: string, delayMs = 0): ExecHandle {
  const exit: ExecExit = { code: 0, signal: null, timedOut: false };
  return {
    async *[Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
      await new Promise((r) => setTimeout(r, delayMs));
      yield { type: 'stdout', data: enc.encode(out) };
      yield { type: 'exit', exit };
    },
    writeStdin: async () => undefined,
    closeStdin: async () => undefined,
    kill: async () => undefined,
    wait: async () => exit,
  } as unknown as ExecHandle;
}

function sandboxes(runs: string[]): SandboxAccess {
  return {
    realpath: async (_id, p) => p,
    exec: async (_id, req) => {
      runs.push(req.argv.join(' '));
      return fakeExec('{"ok":true}', 20);
    },
    readFile: async () => (async function* () {})(),
    writeFile: async () => 0,
    listFiles: async () => [],
    stat: async (_id, path) => ({ path, name: 'x', type: 'file', size: 0, mode: 0o644, mtimeMs: 0 }),
    pauseForBreaker: async () => false,
    resume: async () => undefined,
  };
}

const DEPLOY = {
  name: 'ops.deploy',
  description: 'deploys',
  risk: 'irreversible',
  inputSchema: { type: 'object', required: ['target'], properties: { target: { type: 'string' } } },
  outputSchema: { type: 'object' },
  executor: { kind: 'command', argv: ['deploy'] },
};

describe('ToolGate', () => {
  let store: SqliteStore;
  let runs: string[];
  let gate: ToolGate;
  const tenantId = 'ten_00000000000000000001';
  const op: Principal = { kind: 'operator', id: tenantId, tenantId };
  let sessionId = '';
  let agent: Principal;
  const clock = { now: () => 1_900_000_000_000 };

  beforeEach(async () => {
    store = openSqliteStore({ path: ':memory:', clock });
    await store.tenants.insert({ id: tenantId, name: 't', apiKeyHash: 'a'.repeat(64), createdAt: 0 });
    const r = newSessionRecord({
      id: 'ses_0000000000000000000a', tenantId, backend: 'gvisor', settings: { memoryMb: 256, cpus: 1, idleTimeoutS: 0, env: {} },
      objective: null, metadata: {}, agentToken: 'bta_x', reason: 'create', parentSnapshotId: null, now: clock.now(),
    });
    await store.sessions.insert({ ...r, state: 'running' });
    sessionId = r.id;
    agent = { kind: 'agent', id: sessionId, tenantId };
    runs = [];
    gate = new ToolGate({ store, audit: store.audit, clock, sandboxes: sandboxes(runs) });
    await gate.start();
    await gate.defineTool(op, DEPLOY);
  });
  afterEach(() => store.close());

  const park = async () => {
    await gate.installTools(op, sessionId, ['ops.deploy']);
    const r = await gate.callTool(agent, sessionId, { tool: 'ops.deploy', args: { target: 'prod' } });
    expect(r.decision).toBe('pending');
    return (r as { approvalId: string }).approvalId;
  };

  it('two concurrent approvals of one call run it once', async () => {
    const id = await park();
    const [x, y] = await Promise.allSettled([gate.approve(op, id), gate.approve(op, id)]);
    expect([x.status, y.status].sort()).toEqual(['fulfilled', 'rejected']);
    expect(((x.status === 'rejected' ? x : y) as PromiseRejectedResult).reason).toMatchObject({ code: 'invalid_state' });
    expect(runs).toEqual(['deploy']);
    expect(await gate.getApproval(agent, sessionId, id)).toMatchObject({ status: 'used', result: { decision: 'allow', result: { ok: true } } });
  });

  it('an agent repeating the call while the approved run is still going waits on it', async () => {
    const id = await park();
    const running = gate.approve(op, id);
    await new Promise((r) => setTimeout(r, 5));
    expect(await gate.callTool(agent, sessionId, { tool: 'ops.deploy', args: { target: 'prod' } })).toEqual({ decision: 'pending', approvalId: id });
    await running;
    expect(await gate.callTool(agent, sessionId, { tool: 'ops.deploy', args: { target: 'prod' } })).toMatchObject({ decision: 'allow', approvalId: id });
    expect(runs).toEqual(['deploy']);
  });

  it('answers an approved run cut short by a restart as failed, instead of pending forever', async () => {
    const id = await park();
    const a = (await store.approvals.get(id))!;
    await store.approvals.put({ ...a, status: 'used', usedAt: clock.now(), decidedBy: 'operator:x', decidedAt: clock.now() });
    await new ToolGate({ store, audit: store.audit, clock, sandboxes: sandboxes(runs) }).start();
    expect(await gate.getApproval(agent, sessionId, id)).toMatchObject({ status: 'used', result: { decision: 'deny', stage: 'result' } });
    expect((await store.audit.query({ sessionId })).some((e) => e.action === 'approval.interrupted')).toBe(true);
  });

  it('refuses a tool definition the tenant policy would not validate with, keeping the old engine', async () => {
    await gate.setPolicy(op, 'permit (principal, action == Action::"ops.deploy", resource) when { context.args.target == "prod" };');
    const before = (await gate.getPolicy(op)).digest;
    await expect(gate.defineTool(op, { ...DEPLOY, inputSchema: { type: 'object', properties: { other: { type: 'string' } } } })).rejects.toThrow(
      expect.objectContaining({ code: 'invalid_argument' }),
    );
    expect((await gate.getPolicy(op)).digest).toBe(before);
  });
});
