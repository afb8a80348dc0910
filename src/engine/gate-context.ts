/**
 * What the gate's parts share: the ports, the per-session gate lock, and the visibility rules for principals
 * (another tenant's objects and another session's ids are not found; an agent on an operator route is
 * forbidden).
 */
import {
  AppError,
  NotFoundError,
  type ApprovalRecord,
  type AuditLog,
  type Clock,
  type Principal,
  type SessionRecord,
  type Store,
} from '../core/index.js';
import { DEFAULT_TENANT_ID } from './tenants.js';
import type { GateState } from './gate-state.js';
import { KeyedMutex } from './lock.js';
import type { SandboxAccess } from './executor.js';

export const SYSTEM: Principal = { kind: 'system', id: 'system', tenantId: null };

export interface GateContext {
  store: Store;
  audit: AuditLog;
  clock: Clock;
  state: GateState;
  sandboxes: SandboxAccess;
  /**
   * Gate state of one session (breaker, plan progress, approvals) is read-modify-written under this lock.
   * Taken before the session's lifecycle lock, never after it.
   */
  lock: KeyedMutex;
  log: (line: string) => void;
}

/** `operator:ten_…`, `root:root`, `agent:ses_…`: who did something, as stored in records. */
export function who(p: Principal): string {
  return `${p.kind}:${p.id}`;
}

export function forbiddenForAgent(): AppError {
  return new AppError('forbidden', "an agent token may only list and call its own session's tools");
}

/** A watch-only link's viewer (engine/watch-links.ts) asking for anything but a read of its session's view. */
export function forbiddenForWatcher(): AppError {
  return new AppError('forbidden', 'a watch-only link may only look at its session, not change anything', { details: { reason: 'watch_only' } });
}

export function requireOperator(p: Principal): void {
  if (p.kind === 'agent') throw forbiddenForAgent();
  if (p.kind === 'watcher') throw forbiddenForWatcher();
}

/** True for principals bound to one session (agents, watchers): `p.id` is that session. */
export function boundToSession(p: Principal): boolean {
  return p.kind === 'agent' || p.kind === 'watcher';
}

/** The session as `p` may see it: another tenant's session, or another session than an agent's or watcher's own, is not found. */
export async function visibleSession(ctx: GateContext, p: Principal, id: string): Promise<SessionRecord> {
  const r = await ctx.store.sessions.get(id);
  if (!r || ((p.kind === 'operator' || p.kind === 'watcher') && p.tenantId !== r.tenantId) || (boundToSession(p) && p.id !== id)) throw new NotFoundError('session', id);
  return r;
}

/** A read of the session's console view (record, plan, control lease): operators, and the session's watchers. */
export async function viewSession(ctx: GateContext, p: Principal, id: string): Promise<SessionRecord> {
  const r = await visibleSession(ctx, p, id);
  if (p.kind !== 'watcher') requireOperator(p);
  return r;
}

/** An operator act on a session: not found first (an agent on another session's id), then forbidden. */
export async function operatorSession(ctx: GateContext, p: Principal, id: string): Promise<SessionRecord> {
  const r = await visibleSession(ctx, p, id);
  requireOperator(p);
  return r;
}

export async function visibleApproval(ctx: GateContext, p: Principal, id: string): Promise<ApprovalRecord> {
  const a = await ctx.store.approvals.get(id);
  if (!a || ((p.kind === 'operator' || p.kind === 'watcher') && p.tenantId !== a.tenantId) || (boundToSession(p) && p.id !== a.sessionId)) throw new NotFoundError('approval', id);
  return a;
}

/** The tenant a tenant-scoped operator call acts on. Root names one (default: the default tenant). */
export async function tenantScope(ctx: GateContext, p: Principal, requested: string | undefined): Promise<string> {
  requireOperator(p);
  if (p.kind === 'root' || p.kind === 'system') {
    const t = requested ?? DEFAULT_TENANT_ID;
    if (!(await ctx.store.tenants.get(t))) throw new NotFoundError('tenant', t);
    return t;
  }
  if (requested !== undefined && requested !== p.tenantId) throw new NotFoundError('tenant', requested);
  return p.tenantId as string;
}
