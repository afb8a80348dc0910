/**
 * The Idempotency-Key header (issue 7 §11) on the four creating routes. The rules and what they guarantee
 * are in engine/idempotency.ts; this middleware reads the key and body, asks the engine whether to run,
 * replay or recover, and hands the answer back to be kept. Runs after requestAudit (it needs the principal),
 * and marks replays on the context so the request audit records them as such.
 */
import type { MiddlewareHandler } from 'hono';
import { isAppError, type SessionRecord, type SnapshotRecord } from '../core/index.js';
import type { Engine } from '../engine/api.js';
import { toSessionView, toSnapshotView } from '../protocol/index.js';
import { readText, type Env } from './context.js';
import { routeAndTarget } from './middleware.js';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAYED_HEADER = 'idempotent-replayed';

type Render = (r: { sessions: SessionRecord[]; snapshots: SnapshotRecord[] }, now: number) => unknown;

/** The routes that take a key (method + route template), and how each answers with what a dead first attempt created. */
export const IDEMPOTENT_ROUTES: ReadonlyMap<string, Render> = new Map<string, Render>([
  ['POST /v1/sessions', (r, now) => (r.sessions[0] ? toSessionView(r.sessions[0], now) : {})],
  ['POST /v1/snapshots/:snapshot/fork', (r, now) => ({ sessions: r.sessions.map((s) => toSessionView(s, now)) })],
  ['POST /v1/sessions/:session/snapshots', (r) => (r.snapshots[0] ? toSnapshotView(r.snapshots[0]) : {})],
  ['POST /v1/sessions/:session/calls', () => ({})],
]);

export function idempotencyKeys(engine: Engine, now: () => number): MiddlewareHandler<Env> {
  return async function idempotencyKeys(c, next) {
    const key = c.req.header(IDEMPOTENCY_HEADER);
    if (key === undefined || c.req.method !== 'POST') return next();
    const scope = `${c.req.method} ${routeAndTarget(c.req.path, {}).route}`;
    const render = IDEMPOTENT_ROUTES.get(scope);
    if (!render) return next();
    const body = await readText(c);
    c.set('bodyText', body); // the stream is read: the route's readJson takes this

    const start = await engine.idempotency.begin({ principal: c.get('principal'), key, scope, method: c.req.method, path: c.req.path, body });
    if (start.kind === 'replay') {
      c.set('idempotency', 'replayed');
      return c.body(start.body, start.status as 200, { 'content-type': 'application/json', [REPLAYED_HEADER]: 'true' });
    }
    if (start.kind === 'recovered') {
      // The first attempt's server died; these are the records it created, as they are now.
      c.set('idempotency', 'recovered');
      return c.json(render(start, now()) as object, 200, { [REPLAYED_HEADER]: 'true', 'idempotency-recovered': 'true' });
    }
    try {
      await engine.idempotency.run(start.ticket, () => next());
    } catch (e) {
      await engine.idempotency.finish(start.ticket, { status: 500, code: 'internal', body: '' });
      throw e;
    }
    const err = c.error;
    const status = c.res.status;
    // The answer goes out now; it is kept from a copy once read (a retry meanwhile waits for it).
    const sent = c.get('answerText');
    const text = sent !== undefined && status < 300 ? Promise.resolve(sent) : c.res.clone().text();
    engine.idempotency.finishAfter(start.ticket, text.then((body) => ({ status, body, ...(isAppError(err) ? { code: err.code } : {}) })));
  };
}
