/**
 * Control leases ("Take control" in the console): one person at a time holds a session; while they do,
 * policy.evaluate refuses the agent's calls with human_control (the decision is there, fed by what this
 * file keeps). A lease lapses after `idleMs` without activity by its holder (taking it again renews it),
 * so an abandoned takeover never strands an agent. Start and end are audited.
 *
 * Leases live in memory: a server restart hands every session back to its agent (the safe direction for
 * an unattended server: nobody is at the console any more to act on a held session).
 */
import { AppError, type Principal } from '../core/index.js';
import type { ControlLease } from '../policy/index.js';
import { operatorSession, viewSession, who, type GateContext } from './gate-context.js';

export const DEFAULT_CONTROL_IDLE_MS = 10 * 60_000;

export interface ControlInfo {
  sessionId: string;
  /** null when nobody holds the session. */
  lease: (ControlLease & { lastActivityAt: number }) | null;
}

interface Held extends ControlLease {
  sessionId: string;
  tenantId: string;
  lastActivityAt: number;
}

/** Told when a session's lease starts (the holder) or ends (null): terminals move input with it. */
export type LeaseListener = (sessionId: string, holder: string | null) => void;

export class ControlLeases {
  private readonly held = new Map<string, Held>();
  private readonly listeners = new Set<LeaseListener>();

  constructor(
    private readonly c: GateContext,
    readonly idleMs: number,
  ) {}

  /** Calls `fn` on every lease start and end; returns the unsubscribe. */
  onChange(fn: LeaseListener): () => void {
    this.listeners.add(fn);
    return () => void this.listeners.delete(fn);
  }

  private tell(sessionId: string, holder: string | null): void {
    for (const fn of this.listeners) fn(sessionId, holder);
  }

  /**
   * The holder of a session's live lease at this instant, or null, without waiting: for checks that cannot
   * (a desktop's input, message by message). A lapsed lease reads as none; current() and sweep() end it.
   */
  holderNow(sessionId: string): string | null {
    const h = this.held.get(sessionId);
    return h && this.c.clock.now() < h.expiresAt ? h.holder : null;
  }

  /** The live lease of a session, ending (and auditing) one that lapsed. For evaluate. */
  async current(sessionId: string): Promise<ControlLease | null> {
    const h = this.held.get(sessionId);
    if (!h) return null;
    if (this.c.clock.now() >= h.expiresAt) {
      this.held.delete(sessionId);
      this.tell(sessionId, null);
      await this.audit(h, 'control.end', { reason: 'expired', holder: h.holder, since: h.since });
      return null;
    }
    return { holder: h.holder, since: h.since, expiresAt: h.expiresAt };
  }

  async info(p: Principal, sessionId: string): Promise<ControlInfo> {
    await viewSession(this.c, p, sessionId); // a watcher sees who holds its session, too
    const l = await this.current(sessionId);
    const h = this.held.get(sessionId);
    return { sessionId, lease: l && h ? { ...l, lastActivityAt: h.lastActivityAt } : null };
  }

  /**
   * Takes the lease, or renews it when `p` (through `via`, e.g. one console session) already holds it.
   * Someone else's live lease: conflict, naming them.
   */
  async take(p: Principal, sessionId: string, via: string | null): Promise<ControlInfo> {
    const r = await operatorSession(this.c, p, sessionId);
    if (r.state === 'terminated' || r.state === 'failed') throw new AppError('invalid_state', `session ${sessionId} is ${r.state}; there is nothing to take control of`, { details: { state: r.state } });
    const holder = holderName(p, via);
    const now = this.c.clock.now();
    const cur = await this.current(sessionId);
    if (cur && cur.holder !== holder) {
      throw new AppError('conflict', `${cur.holder} has held control of session ${sessionId} since ${new Date(cur.since).toISOString()}`, {
        details: { holder: cur.holder, since: cur.since },
      });
    }
    const prev = this.held.get(sessionId);
    const h: Held = { sessionId, tenantId: r.tenantId, holder, since: prev?.since ?? now, lastActivityAt: now, expiresAt: now + this.idleMs };
    this.held.set(sessionId, h);
    if (!prev) {
      this.tell(sessionId, holder);
      await this.audit(h, 'control.start', { holder, via }, p);
    }
    return this.info(p, sessionId);
  }

  /** Hands back: the holder, or (force) any operator who may see the session. Idempotent when nobody holds it. */
  async release(p: Principal, sessionId: string, via: string | null, force = false): Promise<ControlInfo> {
    await operatorSession(this.c, p, sessionId);
    const cur = await this.current(sessionId);
    const h = this.held.get(sessionId);
    if (cur && h) {
      const holder = holderName(p, via);
      if (cur.holder !== holder && !force) {
        throw new AppError('conflict', `control of session ${sessionId} is held by ${cur.holder}, not by you; pass force to end it`, { details: { holder: cur.holder } });
      }
      this.held.delete(sessionId);
      this.tell(sessionId, null);
      await this.audit(h, 'control.end', { reason: cur.holder === holder ? 'handed_back' : 'forced', holder: cur.holder, since: cur.since, by: holder }, p);
    }
    return { sessionId, lease: null };
  }

  /** The session ended: its lease goes with it. */
  drop(sessionId: string): void {
    if (this.held.delete(sessionId)) this.tell(sessionId, null);
  }

  /** Ends (and audits) every lease that lapsed; the engine's background timer calls it. */
  async sweep(): Promise<void> {
    for (const id of [...this.held.keys()]) await this.current(id);
  }

  private async audit(h: Held, action: string, data: Record<string, unknown>, p?: Principal): Promise<void> {
    await this.c.audit.append({
      tenantId: h.tenantId,
      sessionId: h.sessionId,
      principal: p ?? { kind: 'system', id: 'system', tenantId: null },
      action,
      outcome: 'ok',
      data,
    });
  }
}

/** `operator:ten_…` or, through the console, `operator:ten_… (console cs_ab12cd34)`. */
export function holderName(p: Principal, via: string | null): string {
  return via ? `${who(p)} (${via})` : who(p);
}

/**
 * Where one client (of a terminal, of a desktop) stands with the session's control lease: `watcher` (a
 * watch-only link's viewer: never input), `holder` (it holds the lease), `free` (nobody does) or `excluded`
 * (someone else does). The one statement of it: terminals let input through for holder and free (then their
 * own controller decides), desktops only for holder (while nobody holds the lease, the agent drives).
 */
export type LeaseStanding = 'watcher' | 'holder' | 'free' | 'excluded';

export function leaseStanding(client: { watchOnly: boolean; holder: string }, lease: string | null): LeaseStanding {
  if (client.watchOnly) return 'watcher';
  if (lease === null) return 'free';
  return lease === client.holder ? 'holder' : 'excluded';
}
