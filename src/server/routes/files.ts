import { Hono } from 'hono';
import {
  FilePathQuerySchema,
  MkdirBodySchema,
  RemoveFileQuerySchema,
  WriteFileQuerySchema,
  type FileListView,
  type FileWriteView,
  type OkView,
} from '../../protocol/index.js';
import { bodyChunks, callOpts, idParam, principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';
import { byteStream } from '../streams.js';

export function fileRoutes({ engine, log }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  // The raw body goes to the engine chunk by chunk; it is never held whole.
  r.put('/sessions/:id/files', async (c) => {
    const id = idParam(c, 'session');
    const q = readQuery(c, WriteFileQuerySchema);
    const bytes = await engine.writeFile(principal(c), id, q.path, bodyChunks(c.req.raw), { ...callOpts(c), mode: q.mode });
    return c.json<FileWriteView>({ path: q.path, bytes });
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
