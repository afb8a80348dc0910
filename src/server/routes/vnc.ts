import { Hono } from 'hono';
import { iso, type DesktopTicketView } from '../../protocol/index.js';
import { callOpts, idParam, principal, type Env, type RouteDeps } from '../context.js';

/**
 * The desktop's live view (issue 11), its plain JSON side: a single-use ticket for the browser's WebSocket.
 * The WebSocket itself (`GET …/desktop/vnc` with Upgrade) is server/desktop-ws.ts.
 */
export function vncRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/sessions/:id/desktop/tickets', async (c) => {
    const id = idParam(c, 'session');
    // Through the console, the ticket carries its console session: the lease names holders by it.
    const t = await engine.vnc.ticket(principal(c), id, { ...callOpts(c), via: c.get('consoleHandle') ?? null });
    return c.json<DesktopTicketView>({ ticket: t.ticket, expiresAt: iso(t.expiresAt) }, 201);
  });

  return r;
}
