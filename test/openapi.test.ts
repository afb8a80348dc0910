/**
 * GET /openapi.json: the document is valid OpenAPI 3.1 (checked by an OpenAPI schema validator), names
 * exactly the routes of the server's routing table, and the real responses of every route (through the
 * SDK over real HTTP, real engine, in-memory driver) validate against it with ajv (JSON Schema 2020-12).
 */
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROUTES } from '../src/protocol/openapi-routes.js';
import { openApiPath } from '../src/protocol/openapi.js';
import { Berth } from '../src/sdk/index.js';
import { createApp } from '../src/server/app.js';
import { startServer, type RunningServer } from '../src/server/serve.js';
import { createTestEngine, type TestEngine } from './helpers/engine.js';
import { responseChecker, type ResponseChecker } from './helpers/openapi.js';

let t: TestEngine;
let server: RunningServer;
let checker: ResponseChecker;
let berth: Berth;

beforeAll(async () => {
  t = await createTestEngine();
  checker = responseChecker();
  server = await startServer({ app: checker.wrap(createApp({ engine: t.engine })), host: '127.0.0.1', port: 0, graceMs: 200 });
  berth = new Berth({ url: server.url, token: t.rootKey });
});
afterAll(async () => {
  await server?.close();
  await t?.close();
});

const key = (method: string, path: string) => `${method.toUpperCase()} ${openApiPath(path)}`;

describe('the OpenAPI document', () => {
  it('documents every route of the routing table, and no route the server lacks', () => {
    const app = createApp({ engine: t.engine });
    // Hono lists middleware too (method ALL); the routes are the rest.
    const served = new Set(app.routes.filter((r) => r.method !== 'ALL').map((r) => key(r.method, r.path)));
    const documented = new Set(ROUTES.map((r) => key(r.method, r.path)));
    expect(served.size).toBeGreaterThan(40);
    expect([...served].filter((k) => !documented.has(k)), 'served but undocumented').toEqual([]);
    expect([...documented].filter((k) => !served.has(k)), 'documented but not served').toEqual([]);
  });

  it('is served at /openapi.json without a token and is valid OpenAPI 3.1', async () => {
    const res = await fetch(`${server.url}/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const doc = await res.json();
    expect(doc.openapi).toBe('3.1.0');
    const v = new Validator();
    const r = await v.validate(doc);
    expect(r.errors ?? [], JSON.stringify(r.errors, null, 1)?.slice(0, 3000)).toEqual([]);
    expect(r.valid).toBe(true);
    expect(doc.paths['/v1/sessions/{id}/exec'].post.responses['200'].content['application/x-ndjson']).toBeDefined();
    expect(doc.paths['/v1/sessions'].get.parameters.map((p: any) => p.name)).toEqual(expect.arrayContaining(['state', 'metadata', 'limit', 'after']));
  });

  it('rejects what does not match it: the validator sees an extra field and a missing one', async () => {
    const c = responseChecker();
    const served = { fetch: async () => new Response(JSON.stringify({ id: 'ses_x', state: 'terminated', extra: 1 }), { headers: { 'content-type': 'application/json' } }) };
    await c.wrap(served).fetch(new Request('http://x/v1/sessions/ses_00000000000000000000', { method: 'DELETE' }));
    const missing = { fetch: async () => new Response(JSON.stringify({ ok: true, entries: 1 }), { headers: { 'content-type': 'application/json' } }) };
    await c.wrap(missing).fetch(new Request('http://x/v1/audit/verify'));
    await c.settle();
    expect(c.violations.map((v) => v.route)).toEqual(['DELETE /v1/sessions/{id}', 'GET /v1/audit/verify']);
  });

  it('every route’s real responses validate against it', async () => {
    const url = server.url;
    const raw = (path: string, init: RequestInit = {}, token: string | null = t.rootKey) =>
      fetch(`${url}${path}`, { ...init, headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(init.headers as Record<string, string>) } });

    expect((await berth.health()).ok).toBe(true);
    await raw('/openapi.json', {}, null);
    await berth.tenants.create('acme');
    await berth.tenants.list();

    const s = await berth.sessions.create({ objective: 'doc', metadata: { suite: 'openapi' } });
    await berth.sessions.create({ metadata: { suite: 'openapi' } });
    const page = await berth.sessions.page({ metadata: { suite: 'openapi' }, limit: 1 });
    expect(page.nextCursor).not.toBeNull();
    await berth.sessions.page({ metadata: { suite: 'openapi' }, after: page.nextCursor! });
    await berth.sessions.get(s.id);

    expect((await s.run(['sh', '-c', 'echo out; echo err >&2; exit 2'])).code).toBe(2);
    expect((await s.run(['cat'], { stdin: 'piped' })).stdout).toBe('piped');
    const sleeper = await s.exec(['sleep', '30']);
    await sleeper.kill('TERM');
    await sleeper.wait();

    await s.files.write('/f.txt', 'hello');
    expect(await s.files.readText('/f.txt')).toBe('hello');
    await s.files.mkdir('/d/e', { parents: true });
    await s.files.list('/');
    await s.files.stat('/f.txt');
    await s.files.rm('/d', { recursive: true });
    await s.files.write('/deep/er/g.txt', 'made parents');
    await s.files.move('/deep/er/g.txt', '/deep/h.txt');

    // Background processes: started at once (JSON), listed, shown, replayed and followed (NDJSON), killed.
    const bg = await s.exec(['sh', '-c', 'echo out; echo err >&2; exit 3'], { background: true });
    expect((await bg.wait()).code).toBe(3);
    const replayed: string[] = [];
    for await (const ev of bg.output()) if (ev.type !== 'exit') replayed.push(ev.type);
    expect(replayed.sort()).toEqual(['stderr', 'stdout']);
    expect((await s.processes.list()).map((p) => p.execId)).toContain(bg.execId);
    expect((await bg.info()).exitCode).toBe(3);
    const bgSleeper = await s.exec(['sleep', '30'], { background: true });
    expect((await bgSleeper.kill({ signal: 'TERM' })).signalled).toBe(true);

    // Directory trees as tar: the memory sandbox has no tar, so these answer the documented 503.
    expect((await raw(`/v1/sessions/${s.id}/files/tar?path=/deep`)).status).toBe(503);
    expect((await raw(`/v1/sessions/${s.id}/files/tar?path=/deep`, { method: 'PUT', headers: { 'content-type': 'application/x-tar' }, body: new Uint8Array(1024) })).status).toBe(503);

    // A watch: ready, then an event; the client leaving ends it (its lines are checked as they pass).
    const watch = await raw(`/v1/sessions/${s.id}/files/watch?path=/deep&recursive=true`);
    expect(watch.status).toBe(200);
    const wr = watch.body!.getReader();
    let got = '';
    while (!got.includes('\n')) got += new TextDecoder().decode((await wr.read()).value);
    expect(JSON.parse(got.split('\n')[0]!)).toEqual({ type: 'ready' });
    await s.files.write('/deep/new.txt', 'x');
    while (!got.includes('"event"')) got += new TextDecoder().decode((await wr.read()).value);
    await wr.cancel();

    await s.pause();
    await s.resume();
    await s.hibernate();
    await s.wake();
    const snap = await s.snapshot({ name: 'doc' });
    await berth.snapshots.list();
    await berth.snapshots.get(snap.snapshotId);
    const [branch] = await berth.snapshots.fork(snap.snapshotId, { count: 1 });
    await berth.snapshots.delete(snap.snapshotId);

    await berth.audit.query({ limit: 5 });
    await berth.audit.verify();
    await berth.audit.key();
    const head = await berth.audit.checkpoint();
    await berth.audit.prove(1);
    await berth.audit.consistency(1);
    expect((await berth.audit.verify({ checkpoints: [head] })).ok).toBe(true);

    // The gate: tools, calls, policy, plan, approvals, gate settings, breaker.
    await berth.tools.list(s.id);
    await berth.tools.call(s.id, 'fs.read', { path: '/f.txt' });
    await raw(`/v1/sessions/${s.id}/calls`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tool: 'fs.read', args: { path: '/nope' } }) });
    await berth.tools.define({
      name: 'acme.echo',
      description: 'Echoes its arguments; irreversible for the test.',
      risk: 'irreversible',
      inputSchema: { type: 'object', properties: { n: { type: 'integer' } } },
      outputSchema: { type: 'object' },
      executor: { kind: 'command', argv: ['cat'] },
    });
    await berth.tools.definitions();
    await berth.tools.install(s.id, ['fs.read', 'fs.write', 'acme.echo']);
    const p1 = await berth.tools.call(s.id, 'acme.echo', { n: 1 });
    const p2 = await berth.tools.call(s.id, 'acme.echo', { n: 2 });
    expect(p1.decision).toBe('pending');
    if (p1.decision !== 'pending' || p2.decision !== 'pending') throw new Error('expected pending calls');
    await berth.approvals.list({ states: ['pending'] });
    await berth.approvals.get(s.id, p1.approvalId);
    expect((await berth.approvals.approve(p1.approvalId)).status).toBe('used');
    await berth.approvals.deny(p2.approvalId, 'not this one');
    const policy = await berth.policy.get();
    await berth.policy.set(policy.text);
    await raw('/v1/policy', { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: policy.text });
    await berth.plans.set(s.id, { objective: 'read', steps: [{ id: 'r', tool: 'fs.read', arguments: { type: 'object' } }] });
    await berth.plans.get(s.id);
    await berth.plans.clear(s.id);
    await berth.gate.get(s.id);
    await berth.gate.set(s.id, { breaker: { failures: 5 } });
    await berth.gate.resetBreaker(s.id);

    // MCP with the agent token: initialize, and the two verbs the stateless transport refuses.
    const mcp = `/v1/sessions/${s.id}/mcp`;
    const init = await raw(mcp, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
    }, s.agentToken);
    expect(init.status).toBe(200);
    await init.text();
    expect((await raw(mcp, {}, s.agentToken)).status).toBe(405);
    expect((await raw(mcp, { method: 'DELETE' }, s.agentToken)).status).toBe(405);

    // Errors have the documented shape too.
    expect((await raw('/v1/sessions/ses_00000000000000000000')).status).toBe(404);
    expect((await raw('/v1/sessions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"memoryMb": 1}' })).status).toBe(400);
    expect((await raw('/v1/sessions', {}, null)).status).toBe(401);
    expect((await raw('/v1/nowhere')).status).toBe(404);

    await branch!.terminate();
    await s.terminate();
    await checker.settle();

    expect(checker.violations).toEqual([]);
    const unseen = ROUTES.map((r) => key(r.method, r.path)).filter((k) => !checker.seen.has(k));
    expect(unseen, 'documented routes no response of this test checked').toEqual([]);
  }, 60_000);
});
