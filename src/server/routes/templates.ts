import { Hono } from 'hono';
import type { BuildEvent } from '../../engine/api.js';
import {
  BuildTemplateBodySchema,
  EXEC_HEARTBEAT_MS,
  NDJSON,
  TemplateScopeQuerySchema,
  toTemplateView,
  toWireError,
  type OkView,
  type TemplateBuildLine,
  type TemplateListView,
} from '../../protocol/index.js';
import { callOpts, principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';

const enc = new TextEncoder();
const line = (l: TemplateBuildLine) => enc.encode(`${JSON.stringify(l)}\n`);
const b64 = (d: Uint8Array) => Buffer.from(d.buffer, d.byteOffset, d.byteLength).toString('base64');

function wire(ev: BuildEvent): TemplateBuildLine {
  switch (ev.type) {
    case 'stdout':
    case 'stderr':
      return { type: ev.type, step: ev.step, data: b64(ev.data) };
    case 'done':
      return { type: 'done', template: toTemplateView(ev.template) };
    case 'error':
      return { type: 'error', error: toWireError(ev.error), ...(ev.step !== undefined ? { step: ev.step } : {}) };
    default:
      return ev;
  }
}

export function templateRoutes({ engine, execHeartbeatMs }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  // Bad input (unknown recipe field, name in use, `from` missing) is an ordinary error response; once the
  // build starts, the answer is its NDJSON progress, ending in `done` or `error`.
  r.post('/templates', async (c) => {
    const body = await readJson(c, BuildTemplateBodySchema);
    // The build stops (and cleans up) when the client goes away: the request's signal, or the stream's cancel.
    const gone = new AbortController();
    const signal = AbortSignal.any([callOpts(c).signal, gone.signal]);
    const events = await engine.templates.build(principal(c), body, { signal });
    const it = events[Symbol.asyncIterator]();
    let pending: Promise<IteratorResult<BuildEvent>> | null = null;
    let finished = false;
    const stream = new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        if (finished) return;
        pending ??= it.next();
        let timer: NodeJS.Timeout | undefined;
        const beat = new Promise<'ping'>((res) => (timer = setTimeout(() => res('ping'), execHeartbeatMs ?? EXEC_HEARTBEAT_MS)));
        const next = await Promise.race([pending, beat]).finally(() => clearTimeout(timer));
        if (finished) return;
        if (next === 'ping') return ctrl.enqueue(line({ type: 'ping' }));
        pending = null;
        if (next.done) {
          finished = true;
          return ctrl.close();
        }
        ctrl.enqueue(line(wire(next.value)));
      },
      cancel() {
        finished = true;
        gone.abort();
      },
    });
    return new Response(stream, { status: 200, headers: { 'content-type': NDJSON, 'cache-control': 'no-store', 'x-accel-buffering': 'no' } });
  });

  r.get('/templates', async (c) => {
    const q = readQuery(c, TemplateScopeQuerySchema);
    const list = await engine.templates.list(principal(c), q);
    return c.json<TemplateListView>({ templates: list.map(toTemplateView) });
  });

  r.get('/templates/:name', async (c) => {
    const q = readQuery(c, TemplateScopeQuerySchema);
    return c.json(toTemplateView(await engine.templates.get(principal(c), c.req.param('name'), q)));
  });

  r.delete('/templates/:name', async (c) => {
    const q = readQuery(c, TemplateScopeQuerySchema);
    await engine.templates.delete(principal(c), c.req.param('name'), q);
    return c.json<OkView>({ ok: true });
  });

  return r;
}
