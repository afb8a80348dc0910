import { Hono } from 'hono';
import {
  CreateSessionBodySchema,
  EmptyBodySchema,
  ListSessionsQuerySchema,
  toCreatedSessionView,
  toSessionView,
  type SessionListView,
  type TerminatedView,
} from '../../protocol/index.js';
import { callOpts, idParam, principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';

export function sessionRoutes({ engine, clock }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/sessions', async (c) => {
    const body = await readJson(c, CreateSessionBodySchema);
    const { session, agentToken } = await engine.createSession(principal(c), body, callOpts(c));
    return c.json(toCreatedSessionView(session, agentToken, clock.now()), 201);
  });

  r.get('/sessions', async (c) => {
    const q = readQuery(c, ListSessionsQuerySchema);
    const list = await engine.listSessions(principal(c), q.state ? { states: q.state } : {});
    const now = clock.now();
    return c.json<SessionListView>({ sessions: list.map((s) => toSessionView(s, now)) });
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
