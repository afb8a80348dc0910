/**
 * ToolGate: no agent tool call runs until it is authorized. The decisions are src/policy's (pure
 * evaluate() and checkResult()); this file does what a pure function cannot: canonicalize path arguments in
 * the sandbox, load and persist plan, breaker and approval state, audit every verdict, run the executor,
 * and pause a session whose breaker trips.
 *
 * One call, under the session's gate lock where state is read and written:
 *   1. gather the facts (paths canonicalized in the sandbox, the approval held for this exact call) →
 *      evaluate → commitDecision (gate-commit.ts): breakerNext, calls, and on allow planNext and the
 *      approval marked used; on ask a new approval; one audit entry per verdict; one store transaction.
 *   2. (lock released) run exactly decision.args.
 *   3. finishCall: checkResult → breakerNext, the result on the approval, the result verdict.
 * A breaker that trips (in 1 or 3) writes an alert entry and pauses the session.
 *
 * Approvals: approve() records the decision, then runs the call at once through the same pipeline with the
 * approval held (waking a hibernated session), and stores the answer on the approval. The agent fetches it
 * (getApproval), or repeats the identical call and gets the stored answer once instead of a second run.
 */
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { ControlLeases, DEFAULT_CONTROL_IDLE_MS, type ControlInfo } from './gate-control.js';
import {
  AppError,
  ConfigError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  PathNotCanonicalError,
  isAppError,
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
import { COMPUTER, argsDigest, controlHeld, describeCall, evaluate, isCanonicalPath, prepareArgs, withCanonicalPaths, type Evaluation, type ToolDefinition, type UnresolvedPath } from '../policy/index.js';
import type {
  CallResult,
  GateInfo,
  GateService,
  GateSettingsInput,
  PlanInfo,
  PolicyValidation,
  TenantPolicyInfo,
  TenantScope,
  ToolCall,
  ToolDefinitionInfo,
  ToolView,
} from './api.js';
import * as admin from './gate-admin.js';
import * as approvals from './gate-approvals.js';
import { approvalLike, deniedView } from './gate-approvals.js';
import { abandonCall, commitDecision, finishCall, type AuditBase, type CallSpec, type Phase, type RunMode } from './gate-commit.js';
import { forbiddenForWatcher, operatorSession, requireOperator, viewSession, visibleApproval, visibleSession, who, type GateContext } from './gate-context.js';
import { GateState, HOME } from './gate-state.js';
import { KeyedMutex } from './lock.js';
import type { ExecLimits, ExecOutcome, SandboxAccess } from './executor.js';
import { runTool } from './tools-exec.js';
import { EgressProxy } from './egress.js';
import type { PendingCounts } from './metering.js';
import { ScreenshotStore, markedScreenshot } from './screenshots.js';

export interface ToolGateOptions {
  store: Store;
  audit: AuditLog;
  clock: Clock;
  sandboxes: SandboxAccess;
  log?: (line: string) => void;
  /** Executor limits; each defaults as in DEFAULT_EXEC_LIMITS. */
  limits?: Partial<ExecLimits>;
  /** Counts egress on the session's metering. Default: not counted. */
  meter?: (sessionId: string, f: Partial<PendingCounts>) => void;
  /** The tenant's egress quota, checked before each new egress connection (engine/quotas.ts). */
  egressQuota?: (sessionId: string) => Promise<void>;
  /** Name resolution for egress; default dns.lookup. */
  resolve?: (host: string) => Promise<string[]>;
  /** A control lease lapses after this long without activity by its holder, ms. Default DEFAULT_CONTROL_IDLE_MS (10 min). */
  controlIdleMs?: number;
  /** Where desktop screenshots are kept (engine/screenshots.ts). Default: a folder under the system's tmpdir. */
  screenshots?: ScreenshotStore;
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

/** A path argument made absolute (relative to the agent's home). */
function absolute(path: string): string {
  return path.startsWith('/') ? path : `${HOME}/${path}`;
}

/**
 * The paths as written, made absolute with `.`, `..` and repeated slashes folded: what realpath returns when
 * no symlink is on the way. Null when one does not fold to a canonical path (the paths are resolved first).
 */
function lexicalPaths(paths: readonly { arg: string; path: string }[]): Record<string, string> | null {
  const out: Record<string, string> = {};
  for (const { arg, path } of paths) {
    const p = posix.normalize(absolute(path));
    const folded = p.length > 1 && p.endsWith('/') ? p.slice(0, -1) : p;
    if (!isCanonicalPath(folded)) return null;
    out[arg] = folded;
  }
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export class ToolGate implements GateService {
  private readonly c: GateContext;
  private readonly limits: Readonly<ExecLimits>;
  private readonly resolve: ToolGateOptions['resolve'];
  /** The host side of every session's egress proxy (engine/egress.ts), deciding with this gate's state. */
  readonly egress: EgressProxy;
  /** Control leases ("Take control"); evaluate refuses agents' calls while one is held. */
  readonly control: ControlLeases;

  /** Desktop screenshots (engine/screenshots.ts). */
  readonly screenshots: ScreenshotStore;

  constructor(o: ToolGateOptions) {
    this.screenshots = o.screenshots ?? new ScreenshotStore(join(tmpdir(), 'berth-desktop'));
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
    this.resolve = o.resolve;
    this.egress = new EgressProxy({
      state: this.c.state,
      clock: o.clock,
      audit: o.audit,
      session: (id) => o.store.sessions.get(id),
      meter: o.meter ?? (() => undefined),
      log,
      ...(o.resolve ? { resolve: o.resolve } : {}),
      ...(o.egressQuota ? { quota: o.egressQuota } : {}),
    });
    const idle = o.controlIdleMs ?? DEFAULT_CONTROL_IDLE_MS;
    if (!Number.isSafeInteger(idle) || idle < 1) throw new ConfigError(`controlIdleMs: must be a positive integer, got ${idle}`, { details: { field: 'controlIdleMs' } });
    this.control = new ControlLeases(this.c, idle);
  }

  getControl(p: Principal, sessionId: string): Promise<ControlInfo> {
    return this.control.info(p, sessionId);
  }
  takeControl(p: Principal, sessionId: string, via: string | null = null): Promise<ControlInfo> {
    return this.control.take(p, sessionId, via);
  }
  releaseControl(p: Principal, sessionId: string, via: string | null = null, force = false): Promise<ControlInfo> {
    return this.control.release(p, sessionId, via, force);
  }

  /** At start, before the first call: answers approved calls a restart interrupted. */
  async start(): Promise<void> {
    for (const id of await approvals.settleInterrupted(this.c)) this.c.log(`approved call ${id} was interrupted by a restart; answered as failed`);
  }

  // ---- the agent's surface ------------------------------------------------------------------------------

  async listTools(p: Principal, sessionId: string): Promise<ToolView[]> {
    const r = await visibleSession(this.c, p, sessionId);
    if (p.kind === 'watcher') throw forbiddenForWatcher(); // a watch-only link neither lists nor calls tools
    const row = await this.c.state.row(r);
    // The computer tool is offered where there is a desktop to operate.
    const offered = [...(await this.c.state.installed(row)).values()].filter((t) => t.name !== COMPUTER.name || r.settings.desktop);
    return offered.map((t) => {
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
    if (p.kind === 'watcher') throw forbiddenForWatcher(); // a watch-only link neither lists nor calls tools
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
    if ('done' in phase) {
      if (phase.done.decision === 'pending' && spec.tool === COMPUTER.name) await this.screenForApproval(r, phase.done.approvalId, spec.args);
      return phase.done;
    }
    const a = phase.run;
    let out: ExecOutcome;
    try {
      out = await runTool(a.tool, a.args, {
        sessionId: r.id,
        sandboxes: this.c.sandboxes,
        limits: this.limits,
        screen: r.settings.desktop ?? null,
        keepScreenshot: (png) => this.screenshots.keep(r.id, png, this.c.clock.now()),
        httpAllow: a.httpAllow,
        egressAllowCidr: a.egressAllowCidr,
        ...(this.resolve ? { resolve: this.resolve } : {}),
        ...(mode.signal ? { signal: mode.signal } : {}),
        ...(a.guard ? { guard: a.guard } : {}),
      });
    } catch (e) {
      if (e instanceof PathNotCanonicalError && a.guard) {
        // Nothing ran: a path leads elsewhere (a symlink). Recorded, then decided again on where it leads.
        await this.c.lock.run(r.id, () => abandonCall(this.c, { sessionId: r.id, principal: p, allowed: a, reason: e.message }));
        return this.runCall(r, p, spec, { ...mode, resolve: true });
      }
      if (!isAppError(e)) this.c.log(`tool ${a.tool.name} in ${r.id} failed: ${(e as Error).stack ?? String(e)}`);
      out = { outputError: `${a.tool.name} could not run: ${isAppError(e) ? `${e.code}: ${e.message}` : 'internal error'}` };
    }
    return this.c.lock.run(r.id, () => finishCall(this.c, { sessionId: r.id, principal: p, allowed: a, outcome: out, mode }));
  }

  /**
   * Phase 1, under the lock: gathers the facts evaluate() decides on (paths resolved in the sandbox, the
   * approval held for this exact call), evaluates, and persists the decision. No verdict is made here.
   */
  private async decide(sessionId: string, p: Principal, spec: CallSpec, mode: RunMode): Promise<Phase> {
    const r = (await this.c.store.sessions.get(sessionId)) as SessionRecord;
    const g = await this.c.state.load(r);
    if (r.state === 'terminated' || r.state === 'failed' || r.state === 'creating') {
      throw new InvalidStateError(`session ${r.id} is ${r.state}; its tools cannot be called`, { details: { state: r.state } });
    }
    const tools = await this.c.state.installed(g.row);
    const tool = tools.get(spec.tool);
    const base: AuditBase = { callId: randomUUID(), tool: spec.tool, ...(spec.step !== undefined ? { step: spec.step } : {}), ...(mode.approvalId ? { approvalId: mode.approvalId } : {}) };
    // A person holds the session (control lease): evaluate refuses an agent's call at its first stage, so
    // nothing here touches the sandbox, and a session the person paused answers human_control, not "paused".
    const control = await this.control.current(r.id);
    const caller = p.kind === 'agent' ? 'agent' : 'operator';
    const held = controlHeld(control, caller, this.c.clock.now());
    if (r.state === 'paused' && !g.breaker.open && !held) {
      throw new InvalidStateError(`session ${r.id} is paused; an operator must resume it first`, { details: { state: r.state } });
    }

    // Paths: policy decides on the canonical path (symlinks followed), and that is what runs. Not while the
    // breaker is open or a person holds the session: evaluate refuses first.
    const pathArgs = tool && isObject(spec.args) && !g.breaker.open && !held ? prepareArgs(tool, spec.args).paths : [];
    // Fast path: decided on the paths as written (made absolute, `.` and `..` folded) and run under a guard
    // that they are canonical, checked in the call's own round trip (CallOptions.guard); a guard that fails
    // runs nothing and the call is decided again on where the paths lead (runCall). Only for a fresh call
    // with no plan set that the policy allows outright: anything else resolves the paths first.
    let guess = pathArgs.length > 0 && !mode.resolve && !mode.approvalId && g.plan === null ? lexicalPaths(pathArgs) : null;
    type Facts = { done: CallResult } | { resolveFirst: true } | { ev: Evaluation; approval: ApprovalRecord | undefined };
    const gather = async (): Promise<Facts> => {
      let args = spec.args;
      const unresolvedPaths: UnresolvedPath[] = [];
      if (guess) args = withCanonicalPaths(tool as ToolDefinition, args as Record<string, unknown>, guess);
      else if (pathArgs.length > 0) {
        const resolved: Record<string, string> = {};
        for (const { arg, path } of pathArgs) {
          try {
            resolved[arg] = await this.c.sandboxes.realpath(r.id, absolute(path), mode.signal ? { signal: mode.signal } : {});
          } catch (e) {
            if (!isAppError(e) || MACHINE_CODES.has(e.code)) throw e;
            unresolvedPaths.push({ arg, path, code: e.code, message: e.message });
          }
        }
        if (unresolvedPaths.length === 0) args = withCanonicalPaths(tool as ToolDefinition, args as Record<string, unknown>, resolved);
        // Resolving awaited the sandbox: the session may have been terminated meanwhile (and its approvals closed).
        const cur = (await this.c.store.sessions.get(r.id))?.state;
        if (cur === 'terminated' || cur === 'failed') throw new InvalidStateError(`session ${r.id} is ${cur}; its tools cannot be called`, { details: { state: cur } });
      }
      const now = this.c.clock.now();
      const digest = (() => {
        try {
          return argsDigest(spec.tool, args);
        } catch {
          return null;
        }
      })();
      if (!g.breaker.open) base.subject = describeCall(spec.tool, args);
      if (digest && !g.breaker.open) base.argsDigest = digest;

      // The approval held for this exact call: the operator's being run, or one the agent's repeat matches.
      let approval: ApprovalRecord | undefined;
      if (mode.approvalId) {
        approval = await this.c.store.approvals.get(mode.approvalId);
      } else if (digest && tool && !g.breaker.open && !held) {
        approval = await approvals.currentApproval(this.c, r.id, digest, now);
        if (approval && guess) return { resolveFirst: true };
        if (approval?.status === 'used') return { done: await approvals.replay(this.c, r, p, approval, base) };
      }

      const compiled = await this.c.state.policy(r.tenantId);
      const ev = evaluate({
        toolName: spec.tool,
        tool,
        args,
        session: { id: r.id, tenantId: r.tenantId, metadata: r.metadata, callsInSession: g.row.calls },
        policy: compiled.engine,
        plan: g.plan,
        breaker: { state: g.breaker, settings: g.breakerSettings },
        approval: approval ? approvalLike(approval) : null,
        runsOnApproval: mode.approvalId !== undefined && approval !== undefined,
        now,
        availableTools: [...tools.keys()],
        unresolvedPaths,
        httpAllow: g.row.settings.httpAllow,
        ...(spec.step !== undefined ? { claimedStep: spec.step } : {}),
        control,
        caller,
        screen: r.settings.desktop ?? null,
      });
      return { ev, approval };
    };
    let facts = await gather();
    if (guess && ('resolveFirst' in facts || ('ev' in facts && facts.ev.decision.effect !== 'allow'))) {
      guess = null; // not a plain allow: decided again on the resolved paths, before anything is committed
      facts = await gather();
    }
    if ('done' in facts) return facts;
    if ('resolveFirst' in facts) throw new AppError('internal', 'the gate resolved paths first and was asked to again');
    const { ev, approval } = facts;
    if (mode.approvalId && ev.decision.effect === 'ask') {
      throw new AppError('internal', `approval ${mode.approvalId} did not match its own call`, { details: { approvalId: mode.approvalId } });
    }
    const guard = guess ? Object.values(guess) : undefined;
    return commitDecision(this.c, { session: r, principal: p, gate: g, evaluation: ev, call: spec, mode, base, approval: approval ?? null, tool, ...(guard ? { guard } : {}) });
  }

  /**
   * A desktop action was parked: the screen as it is now, with the point the action would act on marked, is
   * kept with the approval (once), so the reviewer sees what would be clicked. Best effort: a screen that
   * cannot be taken leaves the approval without one, and says so in the log.
   */
  private async screenForApproval(r: SessionRecord, approvalId: string, args: unknown): Promise<void> {
    if (!r.settings.desktop || (await this.screenshots.hasApproval(r.id, approvalId))) return;
    try {
      const out = await runTool(COMPUTER, { action: 'screenshot' }, { sessionId: r.id, sandboxes: this.c.sandboxes, limits: this.limits, screen: r.settings.desktop, httpAllow: [] });
      const shot = (out.output as { screenshot?: { data: string } } | undefined)?.screenshot;
      if (!shot) throw new Error(out.outputError ?? 'no screenshot');
      await this.screenshots.putApproval(r.id, approvalId, markedScreenshot(Buffer.from(shot.data, 'base64'), args));
    } catch (e) {
      this.c.log(`approval ${approvalId}: the screen could not be kept: ${(e as Error).message}`);
    }
  }

  /** The screen kept when a desktop action was parked (PNG). Whoever may see the approval may see it. */
  async approvalScreenshot(p: Principal, approvalId: string): Promise<Buffer> {
    const a = await visibleApproval(this.c, p, approvalId);
    return this.screenshots.approval(a.sessionId, approvalId);
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
  validatePolicy(p: Principal, text: string, scope?: TenantScope): Promise<PolicyValidation> {
    return admin.validatePolicy(this.c, p, text, scope);
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
    return admin.planInfo(this.c, await viewSession(this.c, p, sessionId));
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

