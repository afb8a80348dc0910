/**
 * Single-use tickets for browser WebSockets, which cannot send an Authorization header: the page asks for a
 * ticket over its authenticated session (POST …/tickets), then opens the socket with `?ticket=`. A ticket
 * stands for the principal that asked (and `via`, the console session it asked through: the control lease
 * names holders by both) on one target (a terminal, a session's desktop), for TICKET_TTL_MS, once.
 * Terminals and desktops share this one store; kept in memory (a restart voids them, as it should).
 */
import { randomBytes } from 'node:crypto';
import type { Principal } from '../core/index.js';

/** How long a ticket may wait for its WebSocket, ms. */
export const TICKET_TTL_MS = 60_000;

export interface Redeemed {
  principal: Principal;
  via: string | null;
}

interface Held extends Redeemed {
  target: string;
  expiresAt: number;
}

export class TicketStore {
  private readonly held = new Map<string, Held>();

  constructor(private readonly now: () => number) {}

  /** A new ticket for `target` (e.g. `ses_…/trm_…`, `ses_…/desktop`); the caller has authorized p on it. */
  issue(p: Principal, target: string, via: string | null): { ticket: string; expiresAt: number } {
    const now = this.now();
    for (const [k, t] of this.held) if (t.expiresAt <= now) this.held.delete(k);
    const ticket = `ttk_${randomBytes(24).toString('base64url')}`;
    const expiresAt = now + TICKET_TTL_MS;
    this.held.set(ticket, { principal: p, via, target, expiresAt });
    return { ticket, expiresAt };
  }

  /** The principal a ticket stands for, once; null when unknown, used, expired or for another target. */
  redeem(ticket: string, target: string): Redeemed | null {
    const t = this.held.get(ticket);
    if (!t) return null;
    this.held.delete(ticket); // single use, whatever happens next
    if (t.expiresAt <= this.now() || t.target !== target) return null;
    return { principal: t.principal, via: t.via };
  }
}
