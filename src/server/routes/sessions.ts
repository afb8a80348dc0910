import { Hono } from 'hono';
import {
  CreateSessionBodySchema,
  EmptyBodySchema,
  ListSessionsQuerySchema,
  toCreatedSessionView,
  toSessionView,
  parseInput,
  type SessionListView,
  type TerminatedView,
} from '../../protocol/index.js';
import { InvalidArgumentError } from '../../core/index.js';
import { callOpts, idParam, principal, readJson, type Env, type RouteDeps } from '../context.js';

const encodeCursor = (s: { createdAt: number; id: string }) => Buffer.from(`${s.createdAt}.${s.id}`).toString('base64url');

function decodeCursor(text: string): { createdAt: number; id: string } {
  const m = /^(\d+)\.([a-z]{3}_[0-9a-z]{20})$/.exec(Buffer.from(text, 'base64url').toString());
  if (!m) throw new InvalidArgumentError('after: not a cursor this server gave out (use nextCursor)', { details: { field: 'after', source: 'query' } });
  return { createdAt: Number(m[1]), id: m[2]! };
}

export function sessionRoutes({ engine, clock }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/sessions', async (c) => {
    const body = await readJson(c, CreateSessionBodySchema);
    const { session, agentToken } = await engine.createSession(principal(c), body, callOpts(c));
    return c.json(toCreatedSessionView(session, agentToken, clock.now()), 201);
  });

  // Oldest first (createdAt, then id); `after` is an opaque cursor naming the last session of a page.
  r.get('/sessions', async (c) => {
    const metadata = c.req.queries('metadata');
    const q = parseInput(ListSessionsQuerySchema, { ...c.req.query(), ...(metadata ? { metadata } : {}) }, 'query');
    const after = q.after === undefined ? undefined : decodeCursor(q.after);
    const list = (await engine.listSessions(principal(c), q.state ? { states: q.state } : {}))
      .filter((s) => Object.entries(q.metadata ?? {}).every(([k, v]) => s.metadata[k] === v))
      .sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .filter((s) => !after || s.createdAt > after.createdAt || (s.createdAt === after.createdAt && s.id > after.id));
    const page = q.limit === undefined ? list : list.slice(0, q.limit);
    const last = page[page.length - 1];
    const nextCursor = last && page.length < list.length ? encodeCursor(last) : null;
    const now = clock.now();
    return c.json<SessionListView>({ sessions: page.map((s) => toSessionView(s, now)), nextCursor });
  });

  r.get('/sessions/:id', async (c) => {
    const s = await engine.getSession(principal(c), idParam(c, 'session'));
    return c.json(toSessionView(s, clock.now()));
  });

  r.delete('/sessions/:id', async (c) => {
    const id = idParam(c, 'session');
    await engine.terminateSession(principal(c), id, callOpts(c));
    return c.json<TerminatedView>({ id, state: 'terminated' });
  });

  for (const verb of ['pause', 'resume', 'hibernate', 'wake'] as const) {
    r.post(`/sessions/:id/${verb}`, async (c) => {
      const id = idParam(c, 'session');
      await readJson(c, EmptyBodySchema);
      const s = await engine[verb](principal(c), id, callOpts(c));
      return c.json(toSessionView(s, clock.now()));
    });
  }

  return r;
}
