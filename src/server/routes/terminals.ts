import { Hono } from 'hono';
import {
  ASCIICAST,
  TerminalCreateBodySchema,
  TerminalKillBodySchema,
  iso,
  toTerminalView,
  type TerminalKillView,
  type TerminalListView,
  type TerminalTicketView,
  type TerminalView as TerminalWireView,
} from '../../protocol/index.js';
import { callOpts, idParam, principal, readJson, type Env, type RouteDeps } from '../context.js';

/**
 * Terminals (issue 9 §2), the plain JSON side: create, list, get, kill, tickets, the recording. The
 * WebSocket side (create-and-attach, attach) is server/terminal-ws.ts: @hono/node-server hands upgrades
 * to the HTTP server, not to this router.
 */
export function terminalRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.get('/sessions/:id/terminals', async (c) => {
    const id = idParam(c, 'session');
    const list = await engine.terminals.list(principal(c), id, callOpts(c));
    return c.json<TerminalListView>({ terminals: list.map(toTerminalView) });
  });

  r.post('/sessions/:id/terminals', async (c) => {
    const id = idParam(c, 'session');
    const b = await readJson(c, TerminalCreateBodySchema);
    const t = await engine.terminals.open(principal(c), id, { cols: b.cols ?? 80, rows: b.rows ?? 24, ...(b.cwd ? { cwd: b.cwd } : {}), ...(b.env ? { env: b.env } : {}), ...(b.command ? { argv: b.command } : {}) }, callOpts(c));
    return c.json<TerminalWireView>(toTerminalView(t), 201);
  });

  r.get('/sessions/:id/terminals/:termId', async (c) => {
    const id = idParam(c, 'session');
    const termId = idParam(c, 'terminal', 'termId');
    return c.json<TerminalWireView>(toTerminalView(await engine.terminals.get(principal(c), id, termId, callOpts(c))));
  });

  r.post('/sessions/:id/terminals/:termId/kill', async (c) => {
    const id = idParam(c, 'session');
    const termId = idParam(c, 'terminal', 'termId');
    const body = await readJson(c, TerminalKillBodySchema);
    const signal = body.signal ?? 15;
    const { signalled } = await engine.terminals.kill(principal(c), id, termId, { ...callOpts(c), signalNumber: signal });
    return c.json<TerminalKillView>({ termId, signal, signalled });
  });

  r.post('/sessions/:id/terminals/:termId/tickets', async (c) => {
    const id = idParam(c, 'session');
    const termId = idParam(c, 'terminal', 'termId');
    // Through the console, the ticket carries its console session: the lease names holders by it.
    const t = await engine.terminals.ticket(principal(c), id, termId, { ...callOpts(c), via: c.get('consoleHandle') ?? null });
    return c.json<TerminalTicketView>({ ticket: t.ticket, expiresAt: iso(t.expiresAt) }, 201);
  });

  r.get('/sessions/:id/terminals/:termId/recording', async (c) => {
    const id = idParam(c, 'session');
    const termId = idParam(c, 'terminal', 'termId');
    const text = await engine.terminals.recording(principal(c), id, termId, callOpts(c));
    return c.body(text, 200, { 'content-type': ASCIICAST, 'content-disposition': `attachment; filename="${termId}.cast"` });
  });

  return r;
}
