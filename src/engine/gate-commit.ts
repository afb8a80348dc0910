/**
 * The gate's two writes per call, each one store transaction under the session's gate lock:
 *   commitDecision  what evaluate() decided, before anything runs: breaker, call count, plan progress, the
 *                   approval spent or parked, one audit entry per stage verdict; on disk (fsynced) before
 *                   the call runs;
 *   finishCall      what the run answered: checkResult(), breaker, the answer kept on its approval, the
 *                   result verdict; committed before it is answered, fsynced in the background ('deferred').
 * A breaker that trips in either writes an alert entry and pauses the session once the transaction is in.
 */
import {
  AppError,
  newId,
  type ApprovalRecord,
  type BreakerState,
  type Principal,
  type SessionRecord,
} from '../core/index.js';
import { checkResult, type Evaluation, type StageVerdict, type ToolDefinition } from '../policy/index.js';
import type { CallResult } from './api.js';
import { deniedView, digestOf } from './gate-approvals.js';
import { who, type GateContext } from './gate-context.js';
import type { LoadedGate } from './gate-state.js';
import type { ExecOutcome } from './executor.js';

/** One call as the agent (or an approval being run) asked for it. */
export interface CallSpec {
  tool: string;
  args: unknown;
  step?: string;
}

export interface RunMode {
  /** Set when an operator's approval runs the call: that approval is held, and nothing new is parked. */
  approvalId?: string;
  signal?: AbortSignal;
  /** Resolve the path arguments in the sandbox before deciding (no guarded fast path: gate.ts decide). */
  resolve?: boolean;
}

/** What an allowed call runs with: exactly the decided arguments. */
export interface Allowed {
  tool: ToolDefinition;
  args: Record<string, unknown>;
  argsDigest: string;
  approvalId?: string;
  callId: string;
  httpAllow: readonly string[];
  /** Restricted ranges the session may reach anyway (policy/egress.ts). */
  egressAllowCidr: readonly string[];
  /** Decided on the paths as written: they must still be canonical when the call runs (CallOptions.guard). */
  guard?: readonly string[];
}

/** After the decision: answered already (refused, parked, replayed), or to be run. */
export type Phase = { done: CallResult } | { run: Allowed };

/** Fields every audit entry of one call carries: callId, tool, and (first entry) step, approvalId, subject, argsDigest. */
export type AuditBase = Record<string, unknown>;

export interface CommitOptions {
  session: SessionRecord;
  principal: Principal;
  /** The gate row and state the decision was made on (loaded under the lock). */
  gate: LoadedGate;
  evaluation: Evaluation;
  call: CallSpec;
  mode: RunMode;
  base: AuditBase;
  /** The approval the decision was made with, if any. */
  approval: ApprovalRecord | null;
  /** The tool's definition; required when the decision is allow. */
  tool?: ToolDefinition | undefined;
  /** The paths decided on as written (Allowed.guard). */
  guard?: readonly string[];
}

/** Persists what one evaluation decided and audits its verdicts, in one transaction. */
export async function commitDecision(c: GateContext, o: CommitOptions): Promise<Phase> {
  const { session: r, principal: p, gate: g, evaluation: ev, call, mode, base } = o;
  const now = c.clock.now();
  // A run on an operator's approval records its answer on that approval, whatever refused it.
  const approval = o.approval ?? (mode.approvalId ? ((await c.store.approvals.get(mode.approvalId)) ?? null) : null);
  const row = g.row;
  const d = ev.decision;
  const tripped = ev.breakerNext.open && !g.breaker.open;
  row.breaker = ev.breakerNext;
  if (!mode.approvalId) row.calls += 1;
  if (d.effect === 'allow' && !o.tool) throw new AppError('internal', `allowed call to ${call.tool} without its definition`);
  let phase!: Phase;
  await c.store.transaction(async () => {
    await auditVerdicts(c, r, p, base, ev.verdicts);
    if (d.effect === 'allow') {
      if (ev.planNext) row.planState = ev.planNext;
      if (d.approvalId && approval) await c.store.approvals.put({ ...approval, status: 'used', usedAt: now });
      phase = {
        run: {
          tool: o.tool as ToolDefinition,
          args: d.args,
          argsDigest: d.argsDigest,
          callId: base.callId as string,
          httpAllow: row.settings.httpAllow,
          egressAllowCidr: row.settings.egressAllowCidr ?? [],
          ...(d.approvalId ? { approvalId: d.approvalId } : {}),
          ...(o.guard ? { guard: o.guard } : {}),
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
          tool: call.tool,
          args: d.args,
          argsDigest: d.argsDigest,
          step: call.step ?? null,
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
        await c.store.approvals.insert(a);
        await c.audit.append({
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
      if (approval && mode.approvalId) await c.store.approvals.put({ ...approval, result: view as Record<string, unknown> });
      else if (approval && d.code === 'approval_expired') await c.store.approvals.put({ ...approval, deliveredAt: now });
      phase = { done: view };
    }
    if (tripped) await auditTrip(c, r, p, row.breaker, base);
    await c.state.save(row);
  });
  if (tripped) await pauseForBreaker(c, r.id, g);
  return phase;
}

export interface FinishOptions {
  sessionId: string;
  principal: Principal;
  allowed: Allowed;
  outcome: ExecOutcome;
  mode: RunMode;
}

/** The result stage, persisted (reloads the gate row: other calls may have moved the breaker meanwhile). */
export async function finishCall(c: GateContext, o: FinishOptions): Promise<CallResult> {
  const { principal: p, allowed: a, outcome: out, mode } = o;
  const r = (await c.store.sessions.get(o.sessionId)) as SessionRecord;
  const g = await c.state.load(r);
  const now = c.clock.now();
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
  g.row.breaker = res.breakerNext;
  const base = { callId: a.callId, tool: a.tool.name, argsDigest: a.argsDigest, ...(a.approvalId ? { approvalId: a.approvalId } : {}) };
  // Deferred durability: the decision was on disk before the call ran; the result is committed before it is
  // answered and reaches the disk in the store's background flush (a power cut in those milliseconds can
  // leave a decision without its result, never a call without its decision).
  await c.store.transaction(async () => {
    const v = res.verdict;
    await c.audit.append({
      tenantId: r.tenantId,
      sessionId: r.id,
      principal: p,
      action: 'tool.result',
      outcome: v.verdict,
      data: {
        ...base,
        ...(v.code ? { code: v.code } : {}),
        detail: v.detail,
        ...(v.data ? { data: v.data } : {}),
        resultDigest: digestOf(res.ok ? res.result : out.output),
        ...imageDigests(a.tool, res.ok ? res.result : undefined),
      },
    });
    if (a.approvalId) {
      const cur = await c.store.approvals.get(a.approvalId);
      if (cur) await c.store.approvals.put({ ...cur, result: result as Record<string, unknown>, deliveredAt: mode.approvalId ? null : now });
    }
    if (tripped) await auditTrip(c, r, p, g.row.breaker, base);
    await c.state.save(g.row);
  }, { durability: tripped ? 'full' : 'deferred' });
  if (tripped) await pauseForBreaker(c, r.id, g);
  return result;
}

/**
 * An allowed call whose guard failed (a path it was decided on leads elsewhere): nothing ran. Its result
 * entry says so; the gate then decides the call again on where the paths lead. The breaker and the plan
 * are left as the decision put them (the guarded path is taken only with no plan set).
 */
export async function abandonCall(c: GateContext, o: { sessionId: string; principal: Principal; allowed: Allowed; reason: string }): Promise<void> {
  const r = (await c.store.sessions.get(o.sessionId)) as SessionRecord;
  const a = o.allowed;
  await c.store.transaction(async () => {
    await c.audit.append({
      tenantId: r.tenantId,
      sessionId: r.id,
      principal: o.principal,
      action: 'tool.result',
      outcome: 'skip',
      data: { callId: a.callId, tool: a.tool.name, argsDigest: a.argsDigest, detail: `${o.reason}; decided again on the resolved path` },
    });
  }, { durability: 'deferred' });
}

async function auditVerdicts(c: GateContext, r: SessionRecord, p: Principal, base: AuditBase, verdicts: readonly StageVerdict[]): Promise<void> {
  for (const [i, v] of verdicts.entries()) {
    const shared = i === 0 ? base : { callId: base.callId, tool: base.tool, ...(base.argsDigest ? { argsDigest: base.argsDigest } : {}) };
    await c.audit.append({
      tenantId: r.tenantId,
      sessionId: r.id,
      principal: p,
      action: `tool.${v.stage}`,
      outcome: v.verdict,
      data: { ...shared, ...(v.code ? { code: v.code } : {}), detail: v.detail, ...(v.data ? { data: v.data } : {}) },
    });
  }
}

async function auditTrip(c: GateContext, r: SessionRecord, p: Principal, breaker: BreakerState, base: AuditBase): Promise<void> {
  await c.audit.append({
    tenantId: r.tenantId,
    sessionId: r.id,
    principal: p,
    action: 'gate.breaker',
    outcome: 'tripped',
    data: { alert: true, callId: base.callId ?? null, tool: base.tool ?? null, trip: breaker.trip ?? null, reason: breaker.reason ?? null },
  });
}

async function pauseForBreaker(c: GateContext, sessionId: string, g: LoadedGate): Promise<void> {
  const paused = await c.sandboxes.pauseForBreaker(sessionId).catch((e: unknown) => {
    c.log(`breaker of ${sessionId} tripped but the session could not be paused: ${(e as Error).message}`);
    return false;
  });
  if (paused) {
    g.row.pausedByBreaker = true;
    await c.state.save(g.row);
  }
}

/** The SHA-256 of each image a result carries (the computer tool's screenshot): the audit keeps these, never the image. */
function imageDigests(tool: ToolDefinition, result: unknown): { imageSha256?: Record<string, string> } {
  const out: Record<string, string> = {};
  for (const f of tool.imageResults ?? []) {
    const img = (result as Record<string, unknown> | undefined)?.[f] as { sha256?: unknown } | undefined;
    if (typeof img?.sha256 === 'string') out[f] = img.sha256;
  }
  return Object.keys(out).length ? { imageSha256: out } : {};
}
