import { Hono } from 'hono';
import {
  ForkBodySchema,
  ListSnapshotsQuerySchema,
  SnapshotBodySchema,
  toCreatedSessionView,
  toSnapshotView,
  type ForkView,
  type OkView,
  type SnapshotListView,
} from '../../protocol/index.js';
import { callOpts, idParam, principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';

export function snapshotRoutes({ engine, clock }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/sessions/:id/snapshots', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, SnapshotBodySchema);
    const snap = await engine.snapshot(principal(c), id, { ...callOpts(c), name: body.name });
    return c.json(toSnapshotView(snap), 201);
  });

  r.get('/snapshots', async (c) => {
    const q = readQuery(c, ListSnapshotsQuerySchema);
    const list = await engine.listSnapshots(principal(c), q.sessionId ? { sessionId: q.sessionId } : {});
    return c.json<SnapshotListView>({ snapshots: list.map(toSnapshotView) });
  });

  r.get('/snapshots/:id', async (c) => {
    return c.json(toSnapshotView(await engine.getSnapshot(principal(c), idParam(c, 'snapshot'))));
  });

  r.delete('/snapshots/:id', async (c) => {
    await engine.deleteSnapshot(principal(c), idParam(c, 'snapshot'), callOpts(c));
    return c.json<OkView>({ ok: true });
  });

  r.post('/snapshots/:id/fork', async (c) => {
    const id = idParam(c, 'snapshot');
    const body = await readJson(c, ForkBodySchema);
    const branches = await engine.fork(principal(c), id, body.count ?? 1, callOpts(c));
    const now = clock.now();
    return c.json<ForkView>({ sessions: branches.map((b) => toCreatedSessionView(b.session, b.agentToken, now)) }, 201);
  });

  return r;
}
