/**
 * The decisions evaluate() makes on facts the engine gathers (an open breaker, paths the sandbox could not
 * resolve, the http allow-list, the plan step a call claims, the approval an operator's run holds). The
 * engine used to build these verdicts by hand; each test pins the verdict, the verdict trail and how the
 * breaker counts the call.
 */
import { describe, expect, it } from 'vitest';
import { argsDigest } from './approval.js';
import { initialBreakerState, resolveBreakerSettings } from './breaker.js';
import { builtinTool } from './builtin-tools.js';
import { PolicyEngine } from './cedar.js';
import { DEFAULT_POLICY_TEXT } from './default-policy.js';
import { evaluate, type EvaluateInput } from './gate.js';
import { initialPlanState, validatePlan } from './plan.js';
import type { ApprovalRecordLike, BreakerState, Decision } from './types.js';

const policy = PolicyEngine.compile(DEFAULT_POLICY_TEXT);
const settings = resolveBreakerSettings({ failures: 2, perMinute: 10 });
const NOW = Date.UTC(2025, 0, 1, 12, 0, 0);

function input(toolName: string, args: unknown, over: Partial<EvaluateInput> = {}): EvaluateInput {
  return {
    toolName,
    tool: builtinTool(toolName),
    args,
    session: { id: 'ses_1', tenantId: 'ten_1', metadata: {}, callsInSession: 0 },
    policy,
    breaker: { state: initialBreakerState(), settings },
    now: NOW,
    ...over,
  };
}

function deny(d: Decision): { stage: string; code: string } {
  if (d.effect !== 'deny') throw new Error(`expected deny, got ${d.effect}`);
  return { stage: d.stage, code: d.code };
}

const trail = (vs: { stage: string; verdict: string }[]) => vs.map((v) => `${v.stage}:${v.verdict}`);

describe('evaluate: a breaker already open', () => {
  const open: BreakerState = { ...initialBreakerState(), open: true, openedAt: NOW - 5, trip: 'rate', reason: 'more than 10 calls within 60 s' };

  it('refuses before any other stage, even an unknown tool or bad arguments', () => {
    for (const [tool, args] of [
      ['fs.read', { path: '/a' }],
      ['no.such', {}],
      ['fs.read', { path: 'not/canonical' }],
    ] as const) {
      const out = evaluate(input(tool, args, { breaker: { state: open, settings } }));
      expect(deny(out.decision), tool).toEqual({ stage: 'breaker', code: 'breaker_open' });
      expect(out.verdicts).toEqual([{ stage: 'breaker', verdict: 'deny', code: 'breaker_open', detail: 'breaker open: more than 10 calls within 60 s', data: { openedAt: NOW - 5 } }]);
    }
  });

  it('counts the call for the rate but not as a failure streak', () => {
    const out = evaluate(input('fs.read', { path: '/a' }, { breaker: { state: open, settings } }));
    expect(out.breakerNext).toMatchObject({ open: true, callsBySecond: [[Math.floor(NOW / 1000), 1]], streakFailures: 0 });
  });

  it('ignores an approval held for the call', () => {
    const a: ApprovalRecordLike = { id: 'apr_1', tool: 'fs.read', argsDigest: 'x', status: 'approved', expiresAt: null, decidedBy: 'op', decidedAt: NOW, usedAt: null };
    const out = evaluate(input('fs.read', { path: '/a' }, { breaker: { state: open, settings }, approval: a, runsOnApproval: true }));
    expect(deny(out.decision)).toEqual({ stage: 'breaker', code: 'breaker_open' });
  });
});

describe('evaluate: path arguments the sandbox could not resolve', () => {
  const unresolved = [{ arg: 'path', path: 'missing/x', code: 'not_found', message: 'no such file' }];

  it('refuses at the arguments stage, naming the argument and the error', () => {
    const out = evaluate(input('fs.list', { path: 'missing/x' }, { unresolvedPaths: unresolved }));
    expect(deny(out.decision)).toEqual({ stage: 'arguments', code: 'invalid_arguments' });
    expect(out.decision.effect === 'deny' && out.decision.reason).toContain('cannot be resolved inside the sandbox (no such file)');
    expect(out.verdicts).toEqual([
      { stage: 'arguments', verdict: 'deny', code: 'invalid_arguments', detail: 'path argument cannot be resolved', data: { argument: 'path', error: 'not_found' } },
    ]);
  });

  it('counts as a failure of that call: repeating it trips the breaker', () => {
    let state = initialBreakerState();
    for (let i = 0; i < 2; i++) state = evaluate(input('fs.list', { path: 'missing/x' }, { unresolvedPaths: unresolved, breaker: { state, settings }, now: NOW + i })).breakerNext;
    expect(state).toMatchObject({ open: true, trip: 'identical_failures', streakKey: argsDigest('fs.list', { path: 'missing/x' }) });
  });

  it('schema errors still come first', () => {
    expect(evaluate(input('fs.list', { path: 7 }, { unresolvedPaths: unresolved })).verdicts[0]?.detail).toBe('input schema refused the arguments');
  });
});

describe('evaluate: egress (http.request to allow-listed hosts only)', () => {
  const get = { method: 'GET', url: 'https://api.example.com/v1' };

  it('refuses a host off the list at the policy stage, before Cedar, after the arguments pass', () => {
    const out = evaluate(input('http.request', { method: 'GET', url: 'https://evil.example/x' }, { httpAllow: ['api.example.com'] }));
    expect(deny(out.decision)).toEqual({ stage: 'policy', code: 'policy_denied' });
    expect(trail(out.verdicts)).toEqual(['arguments:pass', 'policy:deny']);
    expect(out.verdicts[1]).toMatchObject({ detail: 'host not on the http allow-list', data: { host: 'evil.example' } });
    expect(out.breakerNext.streakFailures).toBe(1);
  });

  it('no allow-list given means no host may be reached', () => {
    expect(deny(evaluate(input('http.request', get)).decision)).toEqual({ stage: 'policy', code: 'policy_denied' });
  });

  it('an allowed host goes on to Cedar', () => {
    const out = evaluate(input('http.request', get, { httpAllow: ['api.example.com'] }));
    expect(out.decision.effect).toBe('allow');
    expect(trail(out.verdicts)).toEqual(['arguments:pass', 'policy:pass', 'plan:skip', 'approval:skip', 'breaker:pass']);
  });

  it('does not apply to other tools', () => {
    expect(evaluate(input('fs.read', { path: '/a' }, { httpAllow: [] })).decision.effect).toBe('allow');
  });
});

describe('evaluate: the plan step a call claims', () => {
  const plan = validatePlan({
    objective: 'look twice',
    steps: [
      { id: 'first', tool: 'fs.list', arguments: { type: 'object' }, repeatable: true },
      { id: 'second', tool: 'fs.list', arguments: { type: 'object' } },
    ],
  });

  it('refuses a call that matches another step than it claims', () => {
    const out = evaluate(input('fs.list', { path: '/a' }, { plan: { plan, state: initialPlanState() }, claimedStep: 'second' }));
    expect(deny(out.decision)).toEqual({ stage: 'plan', code: 'off_plan' });
    expect(out.planNext).toBeUndefined();
    expect(trail(out.verdicts)).toEqual(['arguments:pass', 'policy:pass', 'plan:deny']);
    expect(out.verdicts.at(-1)).toMatchObject({ detail: 'call is not the step it claims', data: { claimed: 'second', matched: 'first' } });
    expect(out.breakerNext.streakFailures).toBe(1);
  });

  it('allows it when the claim is right', () => {
    const out = evaluate(input('fs.list', { path: '/a' }, { plan: { plan, state: initialPlanState() }, claimedStep: 'first' }));
    expect(out.decision).toMatchObject({ effect: 'allow', planStepId: 'first' });
  });

  it('a claim means nothing without a plan', () => {
    expect(evaluate(input('fs.list', { path: '/a' }, { claimedStep: 'anything' })).decision.effect).toBe('allow');
  });

  it('a policy refusal still wins over a wrong claim', () => {
    const out = evaluate(input('fs.list', { path: '/a' }, { policy: PolicyEngine.compile(''), plan: { plan, state: initialPlanState() }, claimedStep: 'second' }));
    expect(deny(out.decision)).toEqual({ stage: 'policy', code: 'policy_denied' });
  });
});

describe("evaluate: a call run on an operator's approval", () => {
  const args = { method: 'POST', url: 'https://api.example.com/orders', body: '{"qty":1}' };
  const approval = (digest: string): ApprovalRecordLike => ({
    id: 'apr_9',
    tool: 'http.request',
    argsDigest: digest,
    status: 'approved',
    expiresAt: null,
    decidedBy: 'op_alice',
    decidedAt: NOW - 1,
    usedAt: null,
  });
  const base = { httpAllow: ['api.example.com'] };

  it('refuses when the arguments no longer have the approved digest (instead of asking anew)', () => {
    const out = evaluate(input('http.request', args, { ...base, approval: approval('f'.repeat(64)), runsOnApproval: true }));
    expect(deny(out.decision)).toEqual({ stage: 'arguments', code: 'invalid_arguments' });
    expect(out.verdicts).toEqual([
      { stage: 'arguments', verdict: 'deny', code: 'invalid_arguments', detail: 'arguments changed since approval', data: { approvalId: 'apr_9' } },
    ]);
  });

  it('the same mismatch from an agent repeating the call is parked for a new approval', () => {
    expect(evaluate(input('http.request', args, { ...base, approval: approval('f'.repeat(64)) })).decision.effect).toBe('ask');
  });

  it('runs when the digest matches', () => {
    const out = evaluate(input('http.request', args, { ...base, approval: approval(argsDigest('http.request', args)), runsOnApproval: true }));
    expect(out.decision).toMatchObject({ effect: 'allow', approvalId: 'apr_9' });
  });

  it('runsOnApproval without an approval is an engine bug', () => {
    expect(() => evaluate(input('http.request', args, { ...base, runsOnApproval: true }))).toThrow(expect.objectContaining({ code: 'invalid_state' }));
  });
});
