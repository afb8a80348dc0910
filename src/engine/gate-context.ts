/**
 * What the gate's parts share: the ports and the per-session gate lock; and the engine's visibility rules
 * (visibility.ts, the one statement of them) bound to the gate's store.
 */
import {
  type ApprovalRecord,
  type AuditLog,
  type Clock,
  type Principal,
  type SessionRecord,
  type Store,
} from '../core/index.js';
import * as vis from './visibility.js';
import { requireOperator } from './visibility.js';

export { boundToSession, forbiddenForAgent, forbiddenForWatcher, requireOperator } from './visibility.js';
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

/** The session as `p` may see it (visibility.ts): another tenant's, or another than a bound token's own, is not found. */
export function visibleSession(ctx: GateContext, p: Principal, id: string): Promise<SessionRecord> {
  return vis.visibleSession(ctx.store, p, id);
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

export function visibleApproval(ctx: GateContext, p: Principal, id: string): Promise<ApprovalRecord> {
  return vis.visibleApproval(ctx.store, p, id);
}

/** The tenant a tenant-scoped operator call acts on (visibility.ts). */
export function tenantScope(ctx: GateContext, p: Principal, requested: string | undefined): Promise<string> {
  return vis.tenantScope(ctx.store, p, requested);
}
