/**
 * Who a WebSocket upgrade comes from (terminals, desktops): `Authorization: Bearer <token>` (the SDK in
 * Node, the CLI), or `?ticket=` from POST …/tickets (browsers, which cannot set headers on a WebSocket). A
 * ticket also carries the console session it was asked through (`via`): the control lease names holders by it.
 */
import type { IncomingMessage } from 'node:http';
import { AppError, type Principal } from '../core/index.js';
import type { Engine } from '../engine/api.js';

export interface UpgradeCaller {
  principal: Principal;
  /** The console session a ticket was asked through; null with a bearer token. */
  via: string | null;
}

export async function upgradeCaller(
  engine: Engine,
  req: IncomingMessage,
  o: {
    /** The `ticket` query parameter, if any. */
    ticket: string | undefined;
    /** Redeems it for this target; null when unknown, used or expired. Absent: tickets are not accepted here. */
    redeem?: (ticket: string) => UpgradeCaller | null;
    /** Where a new ticket comes from, for the error (e.g. 'POST …/terminals/:termId/tickets'). */
    ticketRoute: string;
  },
): Promise<UpgradeCaller> {
  const auth = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
  if (auth) return { principal: await engine.authenticate(auth[1]!), via: null };
  if (typeof o.ticket === 'string' && o.redeem) {
    const redeemed = o.redeem(o.ticket);
    if (!redeemed) throw new AppError('unauthenticated', `ticket unknown, used or expired: ask ${o.ticketRoute} for a new one`);
    return { principal: redeemed.principal, via: redeemed.via };
  }
  throw new AppError('unauthenticated', `this WebSocket needs Authorization: Bearer <token>, or ?ticket= from ${o.ticketRoute}`);
}
