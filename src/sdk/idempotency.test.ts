/**
 * The SDK's Idempotency-Key (issue 7 §11) against the real server behind a front that loses the first
 * answer: the request reaches the server and runs, then the connection is cut before the answer gets
 * back. The SDK retries once with the same key and gets the first answer; nothing runs twice. HTTP
 * errors are not retried.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createApp } from '../server/app.js';
import { startServer, type RunningServer } from '../server/serve.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';
import { Berth } from './index.js';

let t: TestEngine;
let server: RunningServer;
let front: Server;
let frontUrl: string;
/** Method, path and Idempotency-Key of every request the front saw. */
let seen: Array<{ method: string; path: string; key: string | undefined }>;
/** How many answers the front still loses (it forwards the request first). */
let drop = 0;

async function body(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

beforeEach(async () => {
  t = await createTestEngine();
  server = await startServer({ app: createApp({ engine: t.engine }), host: '127.0.0.1', port: 0, graceMs: 200 });
  seen = [];
  drop = 0;
  front = createServer(async (req, res) => {
    const b = await body(req);
    const key = req.headers['idempotency-key'];
    seen.push({ method: req.method ?? '', path: req.url ?? '', key: typeof key === 'string' ? key : undefined });
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host' && k !== 'content-length') headers[k] = v;
    const r = await fetch(`${server.url}${req.url}`, { method: req.method, headers, ...(b.length ? { body: new Uint8Array(b) } : {}) });
    const text = await r.text();
    if (req.method === 'POST' && drop > 0) {
      drop--;
      req.socket.destroy(); // it ran; the answer is lost
      return;
    }
    res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json', ...(r.headers.get('idempotent-replayed') ? { 'idempotent-replayed': 'true' } : {}) });
    res.end(text);
  });
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
  frontUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}`;
});
afterEach(async () => {
  front.closeAllConnections();
  await new Promise((r) => front.close(r));
  await server.close();
  await t.close();
});

const posts = () => seen.filter((s) => s.method === 'POST');

describe('SDK Idempotency-Key', () => {
  it('sessions.create: a lost answer is retried once with the same key; one session exists', async () => {
    const berth = new Berth({ url: frontUrl, token: t.rootKey });
    drop = 1;
    const s = await berth.sessions.create({ memoryMb: 256 });
    expect(posts()).toHaveLength(2);
    const [a, b] = posts();
    expect(a?.key).toMatch(/^[0-9a-f-]{36}$/);
    expect(b?.key).toBe(a?.key);
    expect((await t.store.sessions.list()).map((x) => x.id)).toEqual([s.id]);
    // The replay carries the agent token the first attempt made.
    expect(s.agentToken).toEqual(expect.any(String));
    // Each call has its own key.
    await berth.sessions.create({ memoryMb: 256 });
    expect(posts()[2]?.key).not.toBe(a?.key ?? null);
  });

  it('snapshot, fork and tool calls send a key and survive one lost answer', async () => {
    const berth = new Berth({ url: frontUrl, token: t.rootKey });
    const s = await berth.sessions.create({ memoryMb: 256 });
    drop = 1;
    const snap = await s.snapshot({ name: 'x' });
    expect((await t.store.snapshots.list({})).map((x) => x.id)).toEqual([snap.id]);
    drop = 1;
    const branches = await berth.snapshots.fork(snap.id, { count: 2 });
    expect(branches).toHaveLength(2);
    expect(await t.store.sessions.list()).toHaveLength(3);
    const put = await fetch(`${server.url}/v1/sessions/${s.id}/tools`, { method: 'PUT', headers: { authorization: `Bearer ${t.rootKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ tools: ['fs.read'] }) });
    expect(put.status).toBe(200);
    const agent = new Berth({ url: frontUrl, token: s.agentToken as string });
    drop = 1;
    const r = await agent.tools.call(s.id, 'fs.read', { path: '/etc/hostname' });
    expect(r).toBeDefined();
    const ran = (await t.engine.requests.log.query({})).filter((e) => e.action === 'tool.result');
    expect(ran).toHaveLength(1);
    // Every POST went out with a key, and each retry with its first attempt's.
    const p = posts();
    expect(p.every((x) => typeof x.key === 'string')).toBe(true);
    expect(p.map((x) => x.path)).toEqual([
      '/v1/sessions', `/v1/sessions/${s.id}/snapshots`, `/v1/sessions/${s.id}/snapshots`, `/v1/snapshots/${snap.id}/fork`, `/v1/snapshots/${snap.id}/fork`, `/v1/sessions/${s.id}/calls`, `/v1/sessions/${s.id}/calls`,
    ]);
    for (const i of [1, 3, 5]) expect(p[i]?.key).toBe(p[i + 1]?.key);
  });

  it('two lost answers: the error is unavailable (one retry only); HTTP errors are not retried', async () => {
    const berth = new Berth({ url: frontUrl, token: t.rootKey });
    drop = 2;
    await expect(berth.sessions.create({ memoryMb: 256 })).rejects.toMatchObject({ code: 'unavailable' });
    expect(posts()).toHaveLength(2);
    expect(await t.store.sessions.list()).toHaveLength(1);
    seen = [];
    await expect(berth.sessions.create({ memoryMb: -1 })).rejects.toMatchObject({ code: 'invalid_argument' });
    expect(posts()).toHaveLength(1);
  });
});
