import { Hono } from 'hono';
import { isAppError, type ProcessOutputEvent } from '../../core/index.js';
import {
  EXEC_HEARTBEAT_MS,
  KillBodySchema,
  NDJSON,
  ProcessOutputQuerySchema,
  SIGNALS,
  bytesToBase64,
  formatCursor,
  toProcessView,
  toWireError,
  type ProcessKillView,
  type ProcessListView,
  type ProcessOutputLine,
  type ProcessView,
} from '../../protocol/index.js';
import { callOpts, idParam, principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';
import type { Logger } from '../log.js';

/** Background processes (issue 9 §1); started by POST …/exec with background: true (routes/exec.ts). */
export function processRoutes({ engine, log, execHeartbeatMs }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.get('/sessions/:id/processes', async (c) => {
    const id = idParam(c, 'session');
    const list = await engine.processes.list(principal(c), id, callOpts(c));
    return c.json<ProcessListView>({ processes: list.map(toProcessView) });
  });

  r.get('/sessions/:id/processes/:execId', async (c) => {
    const id = idParam(c, 'session');
    const execId = idParam(c, 'exec', 'execId');
    return c.json<ProcessView>(toProcessView(await engine.processes.get(principal(c), id, execId, callOpts(c))));
  });

  r.get('/sessions/:id/processes/:execId/output', async (c) => {
    const id = idParam(c, 'session');
    const execId = idParam(c, 'exec', 'execId');
    const q = readQuery(c, ProcessOutputQuerySchema);
    const from = q.offset ?? { stdout: 0, stderr: 0 };
    const src = await engine.processes.output(principal(c), id, execId, {
      ...callOpts(c),
      follow: q.follow ?? false,
      stdoutOffset: from.stdout,
      stderrOffset: from.stderr,
    });
    return new Response(outputStream({ src, from, log, execId, heartbeatMs: execHeartbeatMs }), {
      status: 200,
      headers: { 'content-type': NDJSON, 'cache-control': 'no-store', 'x-accel-buffering': 'no' },
    });
  });

  r.post('/sessions/:id/processes/:execId/kill', async (c) => {
    const id = idParam(c, 'session');
    const execId = idParam(c, 'exec', 'execId');
    const body = await readJson(c, KillBodySchema);
    const signal = body.signal ?? SIGNALS.SIGTERM!;
    const { signalled } = await engine.processes.kill(principal(c), id, execId, { ...callOpts(c), signalNumber: signal });
    return c.json<ProcessKillView>({ execId, signal, signalled });
  });

  return r;
}

const enc = new TextEncoder();
const line = (l: ProcessOutputLine) => enc.encode(`${JSON.stringify(l)}\n`);

/**
 * Output lines as they come; the cursor after each is where a reconnecting client resumes. Ends with
 * `exit` once the command has ended, or `end` (no follow, still running). A client going away stops only
 * this reader: the command runs on.
 */
function outputStream(o: {
  src: AsyncIterable<ProcessOutputEvent>;
  from: { stdout: number; stderr: number };
  log: Logger;
  execId: string;
  heartbeatMs?: number;
}): ReadableStream<Uint8Array> {
  const it = o.src[Symbol.asyncIterator]();
  const cursor = { ...o.from };
  const heartbeatMs = o.heartbeatMs ?? EXEC_HEARTBEAT_MS;
  let pending: Promise<IteratorResult<ProcessOutputEvent>> | null = null;
  let finished = false;
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      if (finished) return;
      try {
        pending ??= it.next();
        let timer: NodeJS.Timeout | undefined;
        const beat = new Promise<'beat'>((res) => (timer = setTimeout(() => res('beat'), heartbeatMs)));
        const r = await Promise.race([pending, beat]).finally(() => clearTimeout(timer));
        if (r === 'beat') return ctrl.enqueue(line({ type: 'ping' }));
        pending = null;
        if (r.done) {
          finished = true;
          ctrl.enqueue(line({ type: 'end', cursor: formatCursor(cursor) }));
          return ctrl.close();
        }
        const ev = r.value;
        if (ev.type === 'exit') {
          finished = true;
          ctrl.enqueue(line({ type: 'exit', code: ev.exit.code, signal: ev.exit.signal, timedOut: ev.exit.timedOut }));
          ctrl.close();
          void it.return?.().catch(() => undefined);
          return;
        }
        cursor[ev.type] = ev.offset + ev.data.byteLength;
        ctrl.enqueue(line({ type: ev.type, offset: ev.offset, data: bytesToBase64(ev.data), cursor: formatCursor(cursor) }));
      } catch (e) {
        finished = true;
        if (!isAppError(e)) o.log.error('process output stream failed', { execId: o.execId, message: (e as Error).message });
        ctrl.enqueue(line({ type: 'error', error: toWireError(e) }));
        ctrl.close();
      }
    },
    cancel() {
      finished = true;
      void it.return?.().catch(() => undefined);
    },
  });
}
