import { Hono } from 'hono';
import { isAppError, type ExecEvent, type ExecExit, type ExecHandle } from '../../core/index.js';
import {
  EXEC_HEARTBEAT_MS,
  ExecBodySchema,
  KillBodySchema,
  NDJSON,
  SIGNALS,
  StdinQuerySchema,
  encodeExecLine,
  toWireError,
  type BackgroundExecView,
  type ExecStreamLine,
  type KillView,
  type StdinView,
} from '../../protocol/index.js';
import { bodyChunks, callOpts, idParam, principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';
import type { Logger } from '../log.js';

export function execRoutes({ engine, log, execHeartbeatMs }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/sessions/:id/exec', async (c) => {
    const sessionId = idParam(c, 'session');
    const { background, ...body } = await readJson(c, ExecBodySchema);
    if (background) {
      // Runs on without this request: the answer is at once, the output stays in the sandbox (routes/processes.ts).
      return c.json<BackgroundExecView>(await engine.processes.start(principal(c), sessionId, body, callOpts(c)));
    }
    const { execId, handle } = await engine.exec(principal(c), sessionId, body, callOpts(c));
    return new Response(execStream({ sessionId, execId, handle, log, heartbeatMs: execHeartbeatMs }), {
      status: 200,
      headers: { 'content-type': NDJSON, 'cache-control': 'no-store', 'x-accel-buffering': 'no' },
    });
  });

  r.post('/sessions/:id/execs/:execId/stdin', async (c) => {
    const sessionId = idParam(c, 'session');
    const execId = idParam(c, 'exec', 'execId');
    const q = readQuery(c, StdinQuerySchema);
    const handle = await engine.getExec(principal(c), sessionId, execId);
    let bytes = 0;
    for await (const chunk of bodyChunks(c.req.raw)) {
      await handle.writeStdin(chunk);
      bytes += chunk.byteLength;
    }
    if (q.close) await handle.closeStdin();
    return c.json<StdinView>({ bytes, closed: q.close ?? false });
  });

  r.post('/sessions/:id/execs/:execId/kill', async (c) => {
    const sessionId = idParam(c, 'session');
    const execId = idParam(c, 'exec', 'execId');
    const body = await readJson(c, KillBodySchema);
    const signal = body.signal ?? SIGNALS.SIGKILL!;
    await (await engine.getExec(principal(c), sessionId, execId)).kill(signal);
    return c.json<KillView>({ execId, signal });
  });

  return r;
}

const HEARTBEAT = Symbol('heartbeat');

function raceHeartbeat<T>(p: Promise<T>, ms: number): Promise<T | typeof HEARTBEAT> {
  let timer: NodeJS.Timeout | undefined;
  const beat = new Promise<typeof HEARTBEAT>((resolve) => (timer = setTimeout(() => resolve(HEARTBEAT), ms)));
  return Promise.race([p, beat]).finally(() => clearTimeout(timer));
}

const enc = new TextEncoder();
/** Node's encoder: exec output is the hot path (protocol's bytesToBase64 is the portable one). */
const bytesToBase64 = (d: Uint8Array) => Buffer.from(d.buffer, d.byteOffset, d.byteLength).toString('base64');
const line = (l: ExecStreamLine) => enc.encode(encodeExecLine(l));
const exitLine = (x: ExecExit) => line({ type: 'exit', code: x.code, signal: x.signal, timedOut: x.timedOut });

/**
 * The exec response: `started`, then one line per output event as it happens, then `exit` (or `error`).
 * Each pull waits for one event, so every line is written (and flushed) on its own. When the client goes
 * away before the exit, the command is killed.
 */
function execStream(o: { sessionId: string; execId: string; handle: ExecHandle; log: Logger; heartbeatMs?: number }): ReadableStream<Uint8Array> {
  const it = o.handle[Symbol.asyncIterator]();
  const heartbeatMs = o.heartbeatMs ?? EXEC_HEARTBEAT_MS;
  let finished = false;
  // The next event, kept across pulls when a heartbeat wins the race.
  let pending: Promise<IteratorResult<ExecEvent>> | null = null;
  return new ReadableStream<Uint8Array>({
    start(ctrl) {
      ctrl.enqueue(line({ type: 'started', execId: o.execId, sessionId: o.sessionId }));
    },
    async pull(ctrl) {
      if (finished) return;
      try {
        pending ??= it.next();
        const r = await raceHeartbeat(pending, heartbeatMs);
        // The client went away while we waited (cancel() ran): the stream is closed, nothing more to write.
        if (finished) return;
        if (r === HEARTBEAT) {
          ctrl.enqueue(line({ type: 'ping' }));
          return;
        }
        pending = null;
        const ev = r.done ? null : r.value;
        if (ev === null || ev.type === 'exit') {
          const exit = ev === null ? await o.handle.wait() : ev.exit;
          finished = true;
          ctrl.enqueue(exitLine(exit));
          ctrl.close();
          if (ev) void it.return?.().catch(() => undefined);
          return;
        }
        ctrl.enqueue(line({ type: ev.type, data: bytesToBase64(ev.data) }));
      } catch (e) {
        if (finished) return; // cancelled meanwhile: cancel() logged the disconnect
        finished = true;
        if (!isAppError(e)) o.log.error('exec stream failed', { execId: o.execId, message: (e as Error).message, stack: (e as Error).stack });
        ctrl.enqueue(line({ type: 'error', error: toWireError(e) }));
        ctrl.close();
      }
    },
    cancel() {
      if (finished) return;
      finished = true;
      o.log.info('exec client went away; killing the command', { sessionId: o.sessionId, execId: o.execId });
      void o.handle.kill().catch(() => undefined);
      void it.return?.().catch(() => undefined);
    },
  });
}
