/**
 * ToolGate: no agent tool call runs until it is authorized. The decisions are src/policy's (pure
 * evaluate() and checkResult()); this file does what a pure function cannot: canonicalize path arguments in
 * the sandbox, load and persist plan, breaker and approval state, audit every verdict, run the executor,
 * and pause a session whose breaker trips.
 *
 * One call, under the session's gate lock where state is read and written:
 *   1. canonicalize paths (realpath in the sandbox) → egress allow-list → find the approval held for this
 *      exact call → evaluate → commit: breakerNext, calls, and on allow planNext and the approval marked
 *      used; on ask a new approval; one audit entry per verdict; all in one store transaction.
 *   2. (lock released) run exactly decision.args.
 *   3. checkResult → commit breakerNext, the result on the approval, the result verdict.
 * A breaker that trips (in 1 or 3) writes an alert entry and pauses the session.
 *
 * Approvals: approve() records the decision, then runs the call at once through the same pipeline with the
 * approval held (waking a hibernated session), and stores the answer on the approval. The agent fetches it
 * (getApproval), or repeats the identical call and gets the stored answer once instead of a second run.
 */
import { randomUUID } from 'node:crypto';
import {
  AppError,
  ConfigError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  isAppError,
  newId,
  type ApprovalRecord,
  type ApprovalStatus,
  type AuditLog,
  type CallOptions,
  type Clock,
  type Principal,
  type SessionRecord,
  type SnapshotRecord,
  type Store,
} from '../core/index.js';
import {
  argsDigest,
  checkResult,
  describeCall,
  evaluate,
  matchPlan,
  prepareArgs,
  recordCall,
  recordOutcome,
  validateArgs,
  withCanonicalPaths,
  type DenyCode,
  type Evaluation,
  type Stage,
  type StageVerdict,
  type ToolDefinition,
} from '../policy/index.js';
import type {
  CallResult,
  GateInfo,
  GateService,
  GateSettingsInput,
  PlanInfo,
  TenantPolicyInfo,
  TenantScope,
  ToolCall,
  ToolDefinitionInfo,
  ToolView,
} from './api.js';
import * as admin from './gate-admin.js';
import * as approvals from './gate-approvals.js';
import { approvalLike, deniedView, digestOf } from './gate-approvals.js';
import { operatorSession, requireOperator, visibleApproval, visibleSession, who, type GateContext } from './gate-context.js';
import { GateState, HOME, type LoadedGate } from './gate-state.js';
import { KeyedMutex } from './lock.js';
import { runTool, type ExecLimits, type ExecOutcome, type SandboxAccess } from './tools-exec.js';
import { checkHost } from './tools-http.js';

export interface ToolGateOptions {
  store: Store;
  audit: AuditLog;
  clock: Clock;
  sandboxes: SandboxAccess;
  log?: (line: string) => void;
  /** Executor limits; each defaults as in DEFAULT_EXEC_LIMITS. */
  limits?: Partial<ExecLimits>;
}

export const DEFAULT_EXEC_LIMITS: Readonly<ExecLimits> = Object.freeze({
  outputCapBytes: 1024 * 1024,
  listCap: 10_000,
  defaultTimeoutMs: 600_000,
  httpTimeoutMs: 30_000,
  httpMaxBytes: 1024 * 1024,
});

function resolveLimits(l: Partial<ExecLimits> = {}): Readonly<ExecLimits> {
  const out = { ...DEFAULT_EXEC_LIMITS, ...l };
  for (const [k, v] of Object.entries(out)) {
    if (!Number.isSafeInteger(v) || v < 1) throw new ConfigError(`gate limits.${k}: must be a positive integer, got ${String(v)}`, { details: { field: k } });
  }
  return Object.freeze(out);
}

/** Errors of the machine rather than of the call: they surface as errors, not as refusals. */
const MACHINE_CODES: ReadonlySet<string> = new Set(['invalid_state', 'sandbox_failed', 'unavailable', 'cancelled', 'timeout', 'internal']);
const MAX_TOOL_NAME = 128;
const MAX_STEP_ID = 128;
const MAX_REASON = 4096;

interface CallSpec {
  tool: string;
  args: unknown;
  step?: string;
}

interface RunMode {
  /** Set when an operator's approval runs the call: that approval is held, and nothing new is parked. */
  approvalId?: string;
  signal?: AbortSignal;
}

interface Allowed {
  tool: ToolDefinition;
  args: Record<string, unknown>;
  argsDigest: string;
  approvalId?: string;
  callId: string;
  httpAllow: readonly string[];
}

type Phase = { done: CallResult } | { run: Allowed };

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export class ToolGate implements GateService {
  private readonly c: GateContext;
  private readonly limits: Readonly<ExecLimits>;

  constructor(o: ToolGateOptions) {
    const log = o.log ?? (() => undefined);
    this.limits = resolveLimits(o.limits);
    this.c = {
      store: o.store,
      audit: o.audit,
      clock: o.clock,
      sandboxes: o.sandboxes,
      lock: new KeyedMutex(),
      log,
      state: new GateState({ store: o.store, clock: o.clock, log }),
    };
  }

  /** At start, before the first call: answers approved calls a restart interrupted. */
  async start(): Promise<void> {
    for (const id of await approvals.settleInterrupted(this.c)) this.c.log(`approved call ${id} was interrupted by a restart; answered as failed`);
  }

  // ---- the agent's surface ------------------------------------------------------------------------------

  async listTools(p: Principal, sessionId: string): Promise<ToolView[]> {
    const r = await visibleSession(this.c, p, sessionId);
    const row = await this.c.state.row(r);
    return [...(await this.c.state.installed(row)).values()].map((t) => {
      let description = t.description;
      if (t.executor.kind === 'builtin' && t.executor.name === 'http.request') {
        const hosts = row.settings.httpAllow;
        description += hosts.length ? ` Allowed hosts: ${hosts.join(', ')}.` : ' No host is allowed for this session yet.';
      }
      return { name: t.name, description, inputSchema: t.inputSchema, outputSchema: t.outputSchema, risk: t.risk };
    });
  }

  async callTool(p: Principal, sessionId: string, call: ToolCall, opts: CallOptions = {}): Promise<CallResult> {
    const r = await visibleSession(this.c, p, sessionId);
    if (!isObject(call) || typeof call.tool !== 'string' || call.tool === '' || call.tool.length > MAX_TOOL_NAME) {
      throw new InvalidArgumentError('tool: must be a tool name', { details: { field: 'tool' } });
    }
    if (call.step !== undefined && (typeof call.step !== 'string' || call.step === '' || call.step.length > MAX_STEP_ID)) {
      throw new InvalidArgumentError(`step: must be a plan step id of at most ${MAX_STEP_ID} characters`, { details: { field: 'step' } });
    }
    const spec: CallSpec = { tool: call.tool, args: call.args === undefined ? {} : call.args, ...(call.step !== undefined ? { step: call.step } : {}) };
    return this.runCall(r, p, spec, opts.signal ? { signal: opts.signal } : {});
  }

  async getApproval(p: Principal, sessionId: string, approvalId: string): Promise<ApprovalRecord> {
    await visibleSession(this.c, p, sessionId);
    const a = await visibleApproval(this.c, p, approvalId);
    if (a.sessionId !== sessionId) throw new NotFoundError('approval', approvalId);
    return approvals.expireIfDue(this.c, a, this.c.clock.now());
  }

  // ---- the pipeline -------------------------------------------------------------------------------------

  private async runCall(r: SessionRecord, p: Principal, spec: CallSpec, mode: RunMode): Promise<CallResult> {
    const phase = await this.c.lock.run(r.id, () => this.decide(r.id, p, spec, mode));
    if ('done' in phase) return phase.done;
    const a = phase.run;
    let out: ExecOutcome;
    try {
      out = await runTool(a.tool, a.args, { sessionId: r.id, sandboxes: this.c.sandboxes, limits: this.limits, httpAllow: a.httpAllow, ...(mode.signal ? { signal: mode.signal } : {}) });
    } catch (e) {
      if (!isAppError(e)) this.c.log(`tool ${a.tool.name} in ${r.id} failed: ${(e as Error).stack ?? String(e)}`);
      out = { outputError: `${a.tool.name} could not run: ${isAppError(e) ? `${e.code}: ${e.message}` : 'internal error'}` };
    }
    return this.c.lock.run(r.id, () => this.finish(r.id, p, a, out, mode));
  }

  /** Phase 1, under the lock: everything up to and including the decision, persisted. */
  private async decide(sessionId: string, p: Principal, spec: CallSpec, mode: RunMode): Promise<Phase> {
    const r = (await this.c.store.sessions.get(sessionId)) as SessionRecord;
    const g = await this.c.state.load(r);
    if (r.state === 'terminated' || r.state === 'failed' || r.state === 'creating') {
      throw new InvalidStateError(`session ${r.id} is ${r.state}; its tools cannot be called`, { details: { state: r.state } });
    }
    if (r.state === 'paused' && !g.breaker.open) {
      throw new InvalidStateError(`session ${r.id} is paused; an operator must resume it first`, { details: { state: r.state } });
    }
    const tools = await this.c.state.installed(g.row);
    const tool = tools.get(spec.tool);
    const base: Record<string, unknown> = { callId: randomUUID(), tool: spec.tool, ...(spec.step !== undefined ? { step: spec.step } : {}), ...(mode.approvalId ? { approvalId: mode.approvalId } : {}) };
    const refuse = (stage: Stage, code: DenyCode, reason: string, detail: string, before: StageVerdict[] = [], data?: Record<string, unknown>): Promise<Phase> =>
      this.commit(r, p, g, this.refusal(g, spec.tool, spec.args, { stage, code, reason, detail, before, data }), spec, mode, base, null);

    // An open breaker refuses before anything touches the sandbox (a paused machine cannot even resolve paths).
    if (g.breaker.open) {
      return refuse(
        'breaker',
        'breaker_open',
        `the circuit breaker of this session is open (${g.breaker.reason ?? 'tripped'}), so no tool call runs until an operator resets it; stop and report what you were doing`,
        `breaker open: ${g.breaker.reason ?? 'tripped'}`,
        [],
        { openedAt: g.breaker.openedAt },
      );
    }

    // 1a. Paths: resolved in the sandbox (symlinks followed); the resolved path is what policy sees and what runs.
    let args = spec.args;
    if (tool && isObject(args)) {
      const { paths } = prepareArgs(tool, args);
      if (paths.length > 0) {
        const resolved: Record<string, string> = {};
        for (const { arg, path } of paths) {
          try {
            resolved[arg] = await this.c.sandboxes.realpath(r.id, path.startsWith('/') ? path : `${HOME}/${path}`, mode.signal ? { signal: mode.signal } : {});
          } catch (e) {
            if (!isAppError(e) || MACHINE_CODES.has(e.code)) throw e;
            return refuse(
              'arguments',
              'invalid_arguments',
              `the ${arg} argument of ${tool.name} (${JSON.stringify(path)}) cannot be resolved inside the sandbox (${e.message}), so the call was not run`,
              'path argument cannot be resolved',
              [],
              { argument: arg, error: e.code },
            );
          }
        }
        args = withCanonicalPaths(tool, args, resolved);
        // Resolving awaited the sandbox: the session may have been terminated meanwhile (and its approvals closed).
        const cur = (await this.c.store.sessions.get(r.id))?.state;
        if (cur === 'terminated' || cur === 'failed') throw new InvalidStateError(`session ${r.id} is ${cur}; its tools cannot be called`, { details: { state: cur } });
      }
    }
    const now = this.c.clock.now();
    const digest = (() => {
      try {
        return argsDigest(spec.tool, args);
      } catch {
        return null;
      }
    })();
    const subject = describeCall(spec.tool, args);
    base.subject = subject;
    if (digest) base.argsDigest = digest;
    const argsPass: StageVerdict = { stage: 'arguments', verdict: 'pass', detail: 'arguments valid', ...(digest ? { data: { argsDigest: digest } } : {}) };

    // 1b. Egress: http.request only to the session's allow-listed hosts.
    if (tool && tool.executor.kind === 'builtin' && tool.executor.name === 'http.request' && isObject(args) && validateArgs(tool, args).ok) {
      const hc = checkHost(args.url as string, g.row.settings.httpAllow);
      if (!hc.ok) {
        return refuse('policy', 'policy_denied', `${subject} was not run: ${hc.reason}`, 'host not on the http allow-list', [argsPass], { host: hc.host });
      }
    }

    // 1c. The approval held for this exact call.
    let approval: ApprovalRecord | undefined;
    if (mode.approvalId) {
      approval = await this.c.store.approvals.get(mode.approvalId);
      if (approval && digest !== approval.argsDigest) {
        return refuse(
          'arguments',
          'invalid_arguments',
          `${subject} no longer resolves to the arguments that were approved (a path now points elsewhere), so the approved call was not run; call again to ask for a new approval`,
          'arguments changed since approval',
          [],
          { approvalId: approval.id },
        );
      }
    } else if (digest && tool) {
      approval = await approvals.currentApproval(this.c, r.id, digest, now);
      if (approval?.status === 'used') return { done: await approvals.replay(this.c, r, p, approval, base) };
    }

    // 1d. The decision.
    const compiled = await this.c.state.policy(r.tenantId);
    let ev = evaluate({
      toolName: spec.tool,
      tool,
      args,
      session: { id: r.id, tenantId: r.tenantId, metadata: r.metadata, callsInSession: g.row.calls },
      policy: compiled.engine,
      plan: g.plan,
      breaker: { state: g.breaker, settings: g.breakerSettings },
      approval: approval ? approvalLike(approval) : null,
      now,
      availableTools: [...tools.keys()],
    });
    ev = this.claimedStep(ev, spec, g, tool, args, now);
    if (mode.approvalId && ev.decision.effect === 'ask') {
      throw new AppError('internal', `approval ${mode.approvalId} did not match its own call`, { details: { approvalId: mode.approvalId } });
    }
    return this.commit(r, p, g, ev, spec, mode, base, approval ?? null, tool);
  }

  /** A refusal the gate makes itself (breaker already open, path not resolvable, host not allowed), counted like evaluate's. */
  private refusal(
    g: LoadedGate,
    tool: string,
    args: unknown,
    x: { stage: Stage; code: DenyCode; reason: string; detail: string; before: StageVerdict[]; data?: Record<string, unknown> },
  ): Evaluation {
    const now = this.c.clock.now();
    let digest: string | null = null;
    try {
      digest = argsDigest(tool, args);
    } catch {
      digest = null;
    }
    const counted = recordCall(g.breaker, g.breakerSettings, now);
    const breakerNext = x.stage === 'breaker' ? counted : recordOutcome(counted, g.breakerSettings, { callKey: digest ?? `${tool}:unencodable`, tool, failed: true }, now);
    return {
      decision: { effect: 'deny', stage: x.stage, code: x.code, reason: x.reason },
      verdicts: [...x.before, { stage: x.stage, verdict: 'deny', code: x.code, detail: x.detail, ...(x.data ? { data: x.data } : {}) }],
      argsDigest: digest,
      breakerNext,
    };
  }

  /** A call that names a plan step must be that step. */
  private claimedStep(ev: Evaluation, spec: CallSpec, g: LoadedGate, tool: ToolDefinition | undefined, args: unknown, now: number): Evaluation {
    if (spec.step === undefined || !g.plan || !tool || ev.decision.effect === 'deny') return ev;
    const m = matchPlan(g.plan.plan, g.plan.state, tool.name, args);
    if (!m.ok || m.stepId === spec.step) return ev;
    const at = ev.verdicts.findIndex((v) => v.stage === 'plan');
    const reason = `this ${tool.name} call is step ${JSON.stringify(m.stepId)} of the plan, not ${JSON.stringify(spec.step)} as claimed, so it was not run`;
    return {
      decision: { effect: 'deny', stage: 'plan', code: 'off_plan', reason },
      verdicts: [...ev.verdicts.slice(0, at), { stage: 'plan', verdict: 'deny', code: 'off_plan', detail: 'call is not the step it claims', data: { claimed: spec.step, matched: m.stepId } }],
      argsDigest: ev.argsDigest,
      breakerNext: recordOutcome(ev.breakerNext, g.breakerSettings, { callKey: ev.argsDigest ?? tool.name, tool: tool.name, failed: true }, now),
    };
  }

  /** Persists what one evaluation decided and audits its verdicts, in one transaction. */
  private async commit(
    r: SessionRecord,
    p: Principal,
    g: LoadedGate,
    ev: Evaluation,
    spec: CallSpec,
    mode: RunMode,
    base: Record<string, unknown>,
    held: ApprovalRecord | null,
    tool?: ToolDefinition,
  ): Promise<Phase> {
    const now = this.c.clock.now();
    // A run on an operator's approval records its answer on that approval, whatever refused it.
    const approval = held ?? (mode.approvalId ? ((await this.c.store.approvals.get(mode.approvalId)) ?? null) : null);
    const row = g.row;
    const d = ev.decision;
    const tripped = ev.breakerNext.open && !g.breaker.open;
    row.breaker = ev.breakerNext as unknown as Record<string, unknown>;
    if (!mode.approvalId) row.calls += 1;
    let phase!: Phase;
    await this.c.store.transaction(async () => {
      await this.auditVerdicts(r, p, base, ev.verdicts);
      if (d.effect === 'allow') {
        if (ev.planNext) row.planState = ev.planNext as unknown as Record<string, unknown>;
        if (d.approvalId && approval) await this.c.store.approvals.put({ ...approval, status: 'used', usedAt: now });
        phase = {
          run: {
            tool: tool as ToolDefinition,
            args: d.args,
            argsDigest: d.argsDigest,
            callId: base.callId as string,
            httpAllow: row.settings.httpAllow,
            ...(d.approvalId ? { approvalId: d.approvalId } : {}),
          },
        };
      } else if (d.effect === 'ask') {
        if (d.approvalId) {
          phase = { done: { decision: 'pending', approvalId: d.approvalId } };
        } else {
          const ttl = row.settings.approvalTtlS;
          const a: ApprovalRecord = {
            id: newId('approval'),
            tenantId: r.tenantId,
            sessionId: r.id,
            tool: spec.tool,
            args: d.args,
            argsDigest: d.argsDigest,
            step: spec.step ?? null,
            status: 'pending',
            policyIds: d.policyIds,
            requestedBy: who(p),
            createdAt: now,
            expiresAt: ttl > 0 ? now + ttl * 1000 : null,
            decidedBy: null,
            decidedAt: null,
            reason: null,
            usedAt: null,
            result: null,
            deliveredAt: null,
          };
          await this.c.store.approvals.insert(a);
          await this.c.audit.append({
            tenantId: r.tenantId,
            sessionId: r.id,
            principal: p,
            action: 'approval.request',
            outcome: 'pending',
            data: { approvalId: a.id, callId: base.callId, tool: a.tool, argsDigest: a.argsDigest, subject: base.subject ?? null, policyIds: a.policyIds, expiresAt: a.expiresAt },
          });
          phase = { done: { decision: 'pending', approvalId: a.id } };
        }
      } else {
        const view = deniedView(d);
        if (approval && mode.approvalId) await this.c.store.approvals.put({ ...approval, result: view as Record<string, unknown> });
        else if (approval && d.code === 'approval_expired') await this.c.store.approvals.put({ ...approval, deliveredAt: now });
        phase = { done: view };
      }
      if (tripped) await this.auditTrip(r, p, row.breaker, base);
      await this.c.state.save(row);
    });
    if (tripped) await this.pauseForBreaker(r.id, g);
    return phase;
  }

  /** Phase 3, under the lock: the result stage, persisted. */
  private async finish(sessionId: string, p: Principal, a: Allowed, out: ExecOutcome, mode: RunMode): Promise<CallResult> {
    const r = (await this.c.store.sessions.get(sessionId)) as SessionRecord;
    const g = await this.c.state.load(r);
    const now = this.c.clock.now();
    const res = checkResult({
      tool: a.tool,
      argsDigest: a.argsDigest,
      output: out.output,
      ...(out.outputError !== undefined ? { outputError: out.outputError } : {}),
      breaker: { state: g.breaker, settings: g.breakerSettings },
      now,
    });
    const result: CallResult = res.ok ? { decision: 'allow', result: res.result, ...(a.approvalId ? { approvalId: a.approvalId } : {}) } : deniedView(res.decision);
    const tripped = res.breakerNext.open && !g.breaker.open;
    g.row.breaker = res.breakerNext as unknown as Record<string, unknown>;
    const base = { callId: a.callId, tool: a.tool.name, argsDigest: a.argsDigest, ...(a.approvalId ? { approvalId: a.approvalId } : {}) };
    await this.c.store.transaction(async () => {
      const v = res.verdict;
      await this.c.audit.append({
        tenantId: r.tenantId,
        sessionId: r.id,
        principal: p,
        action: 'tool.result',
        outcome: v.verdict,
        data: { ...base, ...(v.code ? { code: v.code } : {}), detail: v.detail, ...(v.data ? { data: v.data } : {}), resultDigest: digestOf(res.ok ? res.result : out.output) },
      });
      if (a.approvalId) {
        const cur = await this.c.store.approvals.get(a.approvalId);
        if (cur) await this.c.store.approvals.put({ ...cur, result: result as Record<string, unknown>, deliveredAt: mode.approvalId ? null : now });
      }
      if (tripped) await this.auditTrip(r, p, g.row.breaker, base);
      await this.c.state.save(g.row);
    });
    if (tripped) await this.pauseForBreaker(r.id, g);
    return result;
  }

  private async auditVerdicts(r: SessionRecord, p: Principal, base: Record<string, unknown>, verdicts: readonly StageVerdict[]): Promise<void> {
    for (const [i, v] of verdicts.entries()) {
      const shared = i === 0 ? base : { callId: base.callId, tool: base.tool, ...(base.argsDigest ? { argsDigest: base.argsDigest } : {}) };
      await this.c.audit.append({
        tenantId: r.tenantId,
        sessionId: r.id,
        principal: p,
        action: `tool.${v.stage}`,
        outcome: v.verdict,
        data: { ...shared, ...(v.code ? { code: v.code } : {}), detail: v.detail, ...(v.data ? { data: v.data } : {}) },
      });
    }
  }

  private async auditTrip(r: SessionRecord, p: Principal, breaker: Record<string, unknown>, base: Record<string, unknown>): Promise<void> {
    await this.c.audit.append({
      tenantId: r.tenantId,
      sessionId: r.id,
      principal: p,
      action: 'gate.breaker',
      outcome: 'tripped',
      data: { alert: true, callId: base.callId ?? null, tool: base.tool ?? null, trip: breaker.trip ?? null, reason: breaker.reason ?? null },
    });
  }

  private async pauseForBreaker(sessionId: string, g: LoadedGate): Promise<void> {
    const paused = await this.c.sandboxes.pauseForBreaker(sessionId).catch((e: unknown) => {
      this.c.log(`breaker of ${sessionId} tripped but the session could not be paused: ${(e as Error).message}`);
      return false;
    });
    if (paused) {
      g.row.pausedByBreaker = true;
      await this.c.state.save(g.row);
    }
  }

  // ---- approvals ----------------------------------------------------------------------------------------

  sweepExpired(): Promise<string[]> {
    return approvals.sweepExpired(this.c);
  }

  /** Cancels the session's pending approvals; the engine calls it in the transaction that terminates the session. */
  cancelPendingApprovals(sessionId: string): Promise<string[]> {
    return approvals.cancelPending(this.c, sessionId);
  }

  listApprovals(p: Principal, filter: { statuses?: ApprovalStatus[]; sessionId?: string } = {}): Promise<ApprovalRecord[]> {
    return approvals.listApprovals(this.c, p, filter);
  }

  async approve(p: Principal, approvalId: string): Promise<ApprovalRecord> {
    const a0 = await visibleApproval(this.c, p, approvalId);
    requireOperator(p);
    const s = await this.c.store.sessions.get(a0.sessionId);
    if (!s || s.state === 'terminated' || s.state === 'failed') {
      throw new InvalidStateError(`session ${a0.sessionId} is ${s?.state ?? 'gone'}; its calls can no longer be approved`, { details: { state: s?.state ?? null } });
    }
    const a = await approvals.decideApproval(this.c, p, approvalId, (cur, now) => ({ ...cur, status: 'approved', decidedBy: who(p), decidedAt: now }));
    try {
      const res = await this.runCall(s, p, { tool: a.tool, args: a.args, ...(a.step !== null ? { step: a.step } : {}) }, { approvalId });
      // Refused before it ran (off-plan by now, policy changed, breaker open): the approval ends denied.
      if (res.decision === 'deny') await approvals.refuseApproved(this.c, p, approvalId, res);
    } catch (e) {
      // The decision stands; the call runs when the agent repeats it.
      this.c.log(`approved call ${approvalId} could not run now: ${(e as Error).message}`);
      await this.c.audit.append({
        tenantId: a.tenantId,
        sessionId: a.sessionId,
        principal: p,
        action: 'approval.run',
        outcome: 'error',
        data: { approvalId, code: isAppError(e) ? e.code : 'internal', message: isAppError(e) ? e.message : 'internal error' },
      });
    }
    return (await this.c.store.approvals.get(approvalId)) as ApprovalRecord;
  }

  async deny(p: Principal, approvalId: string, reason: string): Promise<ApprovalRecord> {
    if (typeof reason !== 'string' || reason.trim() === '' || reason.length > MAX_REASON) {
      throw new InvalidArgumentError(`reason: must be a non-empty string of at most ${MAX_REASON} characters`, { details: { field: 'reason' } });
    }
    return approvals.decideApproval(this.c, p, approvalId, (cur, now) => ({
      ...cur,
      status: 'denied',
      decidedBy: who(p),
      decidedAt: now,
      reason,
      result: deniedView({ stage: 'approval', code: 'approval_denied', reason: `${describeCall(cur.tool, cur.args)} was refused by ${who(p)}: ${reason}; do not retry it unchanged` }) as Record<string, unknown>,
    }));
  }

  // ---- operator configuration (gate-admin.ts) -----------------------------------------------------------

  getPolicy(p: Principal, scope?: TenantScope): Promise<TenantPolicyInfo> {
    return admin.getPolicy(this.c, p, scope);
  }
  setPolicy(p: Principal, text: string, scope?: TenantScope): Promise<TenantPolicyInfo> {
    return admin.setPolicy(this.c, p, text, scope);
  }
  defineTool(p: Principal, definition: unknown, scope?: TenantScope): Promise<ToolDefinitionInfo> {
    return admin.defineTenantTool(this.c, p, definition, scope);
  }
  listToolDefinitions(p: Principal, scope?: TenantScope): Promise<ToolDefinitionInfo[]> {
    return admin.listToolDefinitions(this.c, p, scope);
  }
  async getGate(p: Principal, sessionId: string): Promise<GateInfo> {
    return admin.gateInfo(this.c, await operatorSession(this.c, p, sessionId));
  }
  setGate(p: Principal, sessionId: string, input: GateSettingsInput): Promise<GateInfo> {
    return admin.setGate(this.c, p, sessionId, input);
  }
  installTools(p: Principal, sessionId: string, tools: string[]): Promise<GateInfo> {
    return admin.installTools(this.c, p, sessionId, tools);
  }
  resetBreaker(p: Principal, sessionId: string): Promise<GateInfo> {
    return admin.resetSessionBreaker(this.c, p, sessionId);
  }
  async getPlan(p: Principal, sessionId: string): Promise<PlanInfo> {
    return admin.planInfo(this.c, await operatorSession(this.c, p, sessionId));
  }
  setPlan(p: Principal, sessionId: string, plan: unknown): Promise<PlanInfo> {
    return admin.setPlan(this.c, p, sessionId, plan);
  }
  clearPlan(p: Principal, sessionId: string): Promise<PlanInfo> {
    return admin.setPlan(this.c, p, sessionId, null);
  }

  // ---- snapshots and fork (called by the engine) --------------------------------------------------------

  /** Keeps the session's gate configuration with a snapshot; call in the transaction that inserts the snapshot. */
  async keepForSnapshot(r: SessionRecord, snapshotId: string): Promise<void> {
    await this.c.store.snapshotGates.insert(await admin.snapshotGate(this.c, r, snapshotId));
  }

  /** Gives fork branches (not yet running) the configuration kept with their snapshot. */
  inheritSnapshot(p: Principal, snap: SnapshotRecord, branches: readonly SessionRecord[]): Promise<void> {
    return admin.inheritGate(this.c, p, snap, branches);
  }
}

