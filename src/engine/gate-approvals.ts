/**
 * Approval bookkeeping: finding the approval a call holds, expiry (lazily on every read, and by the sweep),
 * operator decisions, and handing a stored answer to the agent's repeated call. Approvals live in the store,
 * so they survive a restart.
 *
 * Life of an approval: pending → approved → used (the call ran; `result` holds its answer), or pending →
 * denied, or pending → expired (nobody decided in time: a deny), or pending → cancelled (its session was
 * terminated first). The answer of a used or expired approval is
 * given once to the agent's identical call (`deliveredAt`); after that the same call asks anew. A denial
 * stands for that exact call.
 */
import {
  InvalidStateError,
  canonicalJson,
  sha256Hex,
  type ApprovalRecord,
  type ApprovalStatus,
  type Principal,
  type SessionRecord,
} from '../core/index.js';
import type { ApprovalRecordLike, DenyCode, Stage } from '../policy/index.js';
import type { CallResult } from './api.js';
import { SYSTEM, requireOperator, visibleApproval, visibleSession, who, type GateContext } from './gate-context.js';

export const deniedView = (d: { stage: Stage; code: DenyCode; reason: string; retryable?: true }): CallResult => ({ decision: 'deny', stage: d.stage, code: d.code, reason: d.reason, ...(d.retryable ? { retryable: true as const } : {}) });

export function digestOf(v: unknown): string | null {
  try {
    return sha256Hex(canonicalJson(v ?? null));
  } catch {
    return null;
  }
}

/** The gate's view of an approval for checkApproval(): 'used' is approved-and-spent, 'expired' a pending one past its time. */
export function approvalLike(a: ApprovalRecord): ApprovalRecordLike {
  const status = a.status === 'denied' || a.status === 'cancelled' ? 'denied' : a.status === 'approved' || a.status === 'used' ? 'approved' : 'pending';
  return { id: a.id, tool: a.tool, argsDigest: a.argsDigest, status, expiresAt: a.expiresAt, decidedBy: a.decidedBy, decidedAt: a.decidedAt, usedAt: a.usedAt };
}

/** A pending approval past its time becomes expired (a deny), audited as the system's act. */
export async function expireIfDue(c: GateContext, a: ApprovalRecord, now: number): Promise<ApprovalRecord> {
  if (a.status !== 'pending' || a.expiresAt === null || now < a.expiresAt) return a;
  const next: ApprovalRecord = {
    ...a,
    status: 'expired',
    result: deniedView({
      stage: 'approval',
      code: 'approval_expired',
      reason: `nobody decided on this ${a.tool} call before its approval expired at ${new Date(a.expiresAt).toISOString()}; call again to ask for a new approval`,
    }) as Record<string, unknown>,
  };
  await c.store.transaction(async () => {
    await c.store.approvals.put(next);
    await c.audit.append({ tenantId: a.tenantId, sessionId: a.sessionId, principal: SYSTEM, action: 'approval.expire', outcome: 'expired', data: { approvalId: a.id, tool: a.tool, argsDigest: a.argsDigest } });
  });
  return next;
}

/** Expires every pending approval past its time; returns their ids. */
export async function sweepExpired(c: GateContext): Promise<string[]> {
  const now = c.clock.now();
  const out: string[] = [];
  for (const a of await c.store.approvals.expiring(now)) out.push((await expireIfDue(c, a, now)).id);
  return out;
}

export const TERMINATED_REASON = 'session terminated';

/**
 * Closes the approvals of a session being terminated that still wait for a decision: each becomes cancelled
 * (decided by the system), audited one entry per approval. Pending ones already past their time expire as
 * usual instead. Meant to run inside the transaction that terminates the session; returns the cancelled ids.
 */
export async function cancelPending(c: GateContext, sessionId: string): Promise<string[]> {
  const now = c.clock.now();
  const pending: ApprovalRecord[] = [];
  for (const a0 of await c.store.approvals.list({ sessionId, statuses: ['pending'] })) {
    const a = await expireIfDue(c, a0, now);
    if (a.status === 'pending') pending.push(a);
  }
  await c.store.transaction(async () => {
    for (const a of pending) {
      await c.store.approvals.put({
        ...a,
        status: 'cancelled',
        decidedBy: who(SYSTEM),
        decidedAt: now,
        reason: TERMINATED_REASON,
        result: deniedView({ stage: 'approval', code: 'approval_denied', reason: `the session was terminated before anyone decided on this ${a.tool} call, so it will not run` }) as Record<string, unknown>,
      });
      await c.audit.append({
        tenantId: a.tenantId,
        sessionId: a.sessionId,
        principal: SYSTEM,
        action: 'approval.cancel',
        outcome: 'cancelled',
        data: { approvalId: a.id, tool: a.tool, argsDigest: a.argsDigest, decidedBy: who(SYSTEM), reason: TERMINATED_REASON },
      });
    }
  });
  return pending.map((a) => a.id);
}

/** The approval an agent's call holds: the newest for this exact call whose answer has not been handed out yet. */
export async function currentApproval(c: GateContext, sessionId: string, digest: string, now: number): Promise<ApprovalRecord | undefined> {
  const found = await c.store.approvals.latestFor(sessionId, digest);
  if (!found) return undefined;
  const a = await expireIfDue(c, found, now);
  // Once its answer was handed out the approval is spent, except a denial, which stands for this exact call.
  if (a.deliveredAt !== null && a.status !== 'denied') return undefined;
  return a;
}

/** The stored answer of an approved call, once, instead of running it again; pending while it still runs. */
export async function replay(c: GateContext, r: SessionRecord, p: Principal, a: ApprovalRecord, base: Record<string, unknown>): Promise<CallResult> {
  if (a.result === null) {
    await c.audit.append({ tenantId: r.tenantId, sessionId: r.id, principal: p, action: 'tool.replay', outcome: 'pending', data: { ...base, approvalId: a.id } });
    return { decision: 'pending', approvalId: a.id };
  }
  const now = c.clock.now();
  await c.store.transaction(async () => {
    await c.store.approvals.put({ ...a, deliveredAt: now });
    await c.audit.append({
      tenantId: r.tenantId,
      sessionId: r.id,
      principal: p,
      action: 'tool.replay',
      outcome: String(a.result?.decision ?? 'unknown'),
      data: { ...base, approvalId: a.id, resultDigest: digestOf(a.result) },
    });
  });
  return a.result as unknown as CallResult;
}

export async function listApprovals(c: GateContext, p: Principal, filter: { statuses?: ApprovalStatus[]; sessionId?: string }): Promise<ApprovalRecord[]> {
  if (filter.sessionId !== undefined) await visibleSession(c, p, filter.sessionId);
  requireOperator(p);
  await sweepExpired(c);
  return c.store.approvals.list({
    ...(p.kind === 'operator' ? { tenantId: p.tenantId as string } : {}),
    ...(filter.sessionId !== undefined ? { sessionId: filter.sessionId } : {}),
    ...(filter.statuses?.length ? { statuses: filter.statuses } : {}),
  });
}

/** An operator's decision on a pending approval, under the session's gate lock, audited with who decided. */
export async function decideApproval(c: GateContext, p: Principal, approvalId: string, decide: (a: ApprovalRecord, now: number) => ApprovalRecord): Promise<ApprovalRecord> {
  const a0 = await visibleApproval(c, p, approvalId);
  requireOperator(p);
  return c.lock.run(a0.sessionId, async () => {
    const now = c.clock.now();
    const a = await expireIfDue(c, (await c.store.approvals.get(approvalId)) as ApprovalRecord, now);
    if (a.status !== 'pending') throw new InvalidStateError(`approval ${approvalId} is ${a.status}, not pending`, { details: { status: a.status } });
    const next = decide(a, now);
    await c.store.transaction(async () => {
      await c.store.approvals.put(next);
      await c.audit.append({
        tenantId: a.tenantId,
        sessionId: a.sessionId,
        principal: p,
        action: 'approval.decide',
        outcome: next.status,
        data: { approvalId: a.id, tool: a.tool, argsDigest: a.argsDigest, decidedBy: next.decidedBy, ...(next.reason !== null ? { reason: next.reason } : {}) },
      });
    });
    return next;
  });
}

/**
 * The gate refused an approved call when the operator's approval ran it (off-plan by then, say): the
 * approval ends denied with that reason, so it cannot run later when the agent repeats the call. Under the
 * session's gate lock; a no-op if the approval is no longer 'approved' (the call ran, or was decided anew).
 */
export async function refuseApproved(c: GateContext, p: Principal, approvalId: string, refused: CallResult & { decision: 'deny' }): Promise<void> {
  const a0 = await c.store.approvals.get(approvalId);
  if (!a0) return;
  await c.lock.run(a0.sessionId, async () => {
    const a = await c.store.approvals.get(approvalId);
    if (!a || a.status !== 'approved') return;
    const reason = `approved by ${a.decidedBy ?? who(p)}, but refused when it ran: ${refused.reason}`;
    await c.store.transaction(async () => {
      await c.store.approvals.put({ ...a, status: 'denied', reason, result: deniedView({ stage: refused.stage as Stage, code: refused.code as DenyCode, reason: refused.reason }) as Record<string, unknown> });
      await c.audit.append({
        tenantId: a.tenantId,
        sessionId: a.sessionId,
        principal: p,
        action: 'approval.refused',
        outcome: 'denied',
        data: { approvalId: a.id, tool: a.tool, argsDigest: a.argsDigest, stage: refused.stage, code: refused.code, reason },
      });
    });
  });
}

/**
 * At start: an approved call that was running when the server stopped has no result and never will. It is
 * answered as a failed run (it may have had effects), so the agent is not left waiting.
 */
export async function settleInterrupted(c: GateContext): Promise<string[]> {
  const stuck = (await c.store.approvals.list({ statuses: ['used'] })).filter((a) => a.result === null);
  for (const a of stuck) {
    const result = deniedView({
      stage: 'result',
      code: 'result_invalid',
      reason: `the server stopped while this approved ${a.tool} call was running, so its result is unknown; check the sandbox before retrying: it may have had effects`,
    }) as Record<string, unknown>;
    await c.store.transaction(async () => {
      await c.store.approvals.put({ ...a, result });
      await c.audit.append({ tenantId: a.tenantId, sessionId: a.sessionId, principal: SYSTEM, action: 'approval.interrupted', outcome: 'deny', data: { approvalId: a.id, tool: a.tool } });
    });
  }
  return stuck.map((a) => a.id);
}
