import { Hono } from 'hono';
import {
  FilePathQuerySchema,
  MkdirBodySchema,
  RemoveFileQuerySchema,
  WriteFileQuerySchema,
  MoveBodySchema,
  TarQuerySchema,
  TAR,
  NDJSON,
  WatchQuerySchema,
  toWireError,
  type WatchLine,
  type TarPushView,
  type FileListView,
  type FileWriteView,
  type OkView,
} from '../../protocol/index.js';
import { bodyChunks, callOpts, idParam, principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';
import type { WatchEvent } from '../../core/index.js';
import { byteStream } from '../streams.js';

export function fileRoutes({ engine, log, execHeartbeatMs }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  // The raw body goes to the engine chunk by chunk; it is never held whole.
  r.put('/sessions/:id/files', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, WriteFileQuerySchema);
    const bytes = await engine.writeFile(principal(c), id, q.path, bodyChunks(c.req.raw), { ...callOpts(c), mode: q.mode, parents: q.parents ?? true });
    return c.json<FileWriteView>({ path: q.path, bytes });
  });

  r.post('/sessions/:id/files/move', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, MoveBodySchema);
    await engine.files.move(principal(c), id, body.from, body.to, callOpts(c));
    return c.json<OkView>({ ok: true });
  });

  // A directory in and out as a tar stream; neither side is held whole.
  r.put('/sessions/:id/files/tar', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, TarQuerySchema);
    const bytes = await engine.files.pushTar(principal(c), id, q.path, bodyChunks(c.req.raw), callOpts(c));
    return c.json<TarPushView>({ path: q.path, bytes });
  });

  r.get('/sessions/:id/files/tar', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, TarQuerySchema);
    const body = await byteStream(await engine.files.pullTar(principal(c), id, q.path, callOpts(c)), { log, what: 'tar pull' });
    return new Response(body, { status: 200, headers: { 'content-type': TAR, 'cache-control': 'no-store' } });
  });

  // File system events as NDJSON: `ready` once the watch is in place, then one line per event.
  r.get('/sessions/:id/files/watch', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, WatchQuerySchema);
    const src = await engine.files.watch(principal(c), id, q.path, { ...callOpts(c), recursive: q.recursive ?? false });
    return new Response(watchStream(src, execHeartbeatMs), { status: 200, headers: { 'content-type': NDJSON, 'cache-control': 'no-store', 'x-accel-buffering': 'no' } });
  });

  r.get('/sessions/:id/files', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, FilePathQuerySchema);
    const source = await engine.readFile(principal(c), id, q.path, callOpts(c));
    const body = await byteStream(source, { log, what: 'file read' });
    return new Response(body, { status: 200, headers: { 'content-type': 'application/octet-stream', 'cache-control': 'no-store' } });
  });

  r.get('/sessions/:id/files/list', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, FilePathQuerySchema);
    const entries = await engine.listFiles(principal(c), id, q.path, callOpts(c));
    return c.json<FileListView>({ path: q.path, entries });
  });

  r.get('/sessions/:id/files/stat', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, FilePathQuerySchema);
    return c.json(await engine.statFile(principal(c), id, q.path, callOpts(c)));
  });

  r.post('/sessions/:id/files/mkdir', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, MkdirBodySchema);
    await engine.mkdir(principal(c), id, body.path, { ...callOpts(c), parents: body.parents ?? false });
    return c.json<OkView>({ ok: true });
  });

  r.delete('/sessions/:id/files', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, RemoveFileQuerySchema);
    await engine.removeFile(principal(c), id, q.path, { ...callOpts(c), recursive: q.recursive ?? false });
    return c.json<OkView>({ ok: true });
  });

  return r;
}

const line = (l: WatchLine) => new TextEncoder().encode(`${JSON.stringify(l)}\n`);

/** ready, then events as they come (a ping line when quiet); the client leaving ends the watch. */
function watchStream(src: AsyncIterable<WatchEvent>, heartbeatMs: number): ReadableStream<Uint8Array> {
  const it = src[Symbol.asyncIterator]();
  let pending: Promise<IteratorResult<WatchEvent>> | null = null;
  let finished = false;
  return new ReadableStream<Uint8Array>({
    start(ctrl) {
      ctrl.enqueue(line({ type: 'ready' }));
    },
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
          return ctrl.close();
        }
        ctrl.enqueue(line({ type: 'event', event: r.value.type, path: r.value.path, isDir: r.value.isDir }));
      } catch (e) {
        finished = true;
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
