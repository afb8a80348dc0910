/**
 * Who may see what: the engine's one statement of visibility and tenant scope. Another tenant's objects,
 * and another session's under a token bound to one session, are not found (never forbidden: a caller must
 * not learn that an id exists); an agent or a watcher on an operator route is forbidden.
 * The gate (gate-context.ts), terminals and templates use these same functions: there is no second copy.
 */
import { AppError, NotFoundError, type ApprovalRecord, type Principal, type SessionRecord, type SnapshotRecord, type Store } from '../core/index.js';
import { DEFAULT_TENANT_ID } from './tenants.js';

/** True for principals bound to one session (agents, watchers): `p.id` is that session. */
export function boundToSession(p: Principal): boolean {
  return p.kind === 'agent' || p.kind === 'watcher';
}

export function forbiddenForAgent(): AppError {
  return new AppError('forbidden', "an agent token may only list and call its own session's tools");
}

/** A watch-only link's viewer (engine/watch-links.ts) asking for anything but a read of its session's view. */
export function forbiddenForWatcher(): AppError {
  return new AppError('forbidden', 'a watch-only link may only look at its session, not change anything', { details: { reason: 'watch_only' } });
}

/**
 * Operator routes refuse agent tokens. With a session id, visibility comes first: an agent naming another
 * session gets not_found (as for any id it cannot see), its own session forbidden.
 */
export function requireOperator(p: Principal, sessionId?: string): void {
  if (p.kind !== 'agent' && p.kind !== 'watcher') return;
  if (sessionId !== undefined && sessionId !== p.id) throw new NotFoundError('session', sessionId);
  if (p.kind === 'watcher') throw forbiddenForWatcher();
  throw forbiddenForAgent();
}

/** Root and the system see every tenant; everyone else only their own. */
export function seesTenant(p: Principal, tenantId: string): boolean {
  return p.kind === 'root' || p.kind === 'system' || p.tenantId === tenantId;
}

/**
 * The store filter of a listing: an operator's or a watcher's own tenant, nothing for root and the system.
 * Callers refuse agents before they list.
 */
export function tenantFilter(p: Principal): { tenantId?: string } {
  return p.kind === 'operator' || p.kind === 'watcher' ? { tenantId: p.tenantId as string } : {};
}

/** The session as this principal may see it; another tenant's session is simply not found. */
export async function visibleSession(store: Store, p: Principal, id: string): Promise<SessionRecord> {
  const r = await store.sessions.get(id);
  if (!r || !seesTenant(p, r.tenantId) || (boundToSession(p) && p.id !== id)) throw new NotFoundError('session', id);
  return r;
}

/** A named snapshot as this principal may see it: its tenant's, and under an agent token its own session's. */
export async function visibleSnapshot(store: Store, p: Principal, snapshotId: string): Promise<SnapshotRecord> {
  const s = await store.snapshots.get(snapshotId);
  if (!s || s.kind !== 'named' || !seesTenant(p, s.tenantId) || (p.kind === 'agent' && p.id !== s.sessionId)) throw new NotFoundError('snapshot', snapshotId);
  return s;
}

/** The tenant a new session belongs to. Root and the system name one (default: the default tenant); others get their own. */
export async function tenantFor(store: Store, p: Principal, requested: string | undefined): Promise<string> {
  if (p.kind === 'root' || p.kind === 'system') {
    if (requested === undefined) return DEFAULT_TENANT_ID;
    if (!(await store.tenants.get(requested))) throw new NotFoundError('tenant', requested);
    return requested;
  }
  if (requested !== undefined && requested !== p.tenantId) throw new NotFoundError('tenant', requested);
  return p.tenantId as string;
}

/** An approval as this principal may see it: its tenant's, and under a session-bound token its own session's. */
export async function visibleApproval(store: Store, p: Principal, id: string): Promise<ApprovalRecord> {
  const a = await store.approvals.get(id);
  if (!a || !seesTenant(p, a.tenantId) || (boundToSession(p) && p.id !== a.sessionId)) throw new NotFoundError('approval', id);
  return a;
}

/** The tenant a tenant-scoped operator call acts on. Root and the system name one (default: the default tenant, which must exist). */
export async function tenantScope(store: Store, p: Principal, requested: string | undefined): Promise<string> {
  requireOperator(p);
  const t = await tenantFor(store, p, requested);
  if (requested === undefined && (p.kind === 'root' || p.kind === 'system') && !(await store.tenants.get(t))) throw new NotFoundError('tenant', t);
  return t;
}
