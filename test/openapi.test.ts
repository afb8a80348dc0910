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

    // tenant quotas (issue 12 §3)
    const tenantId = (await berth.tenants.list())[0]!.id;
    await berth.tenants.get(tenantId);
    await berth.tenants.setQuotas(tenantId, { maxSessions: 1000 });
    // templates: the build stream (every line checked), list, show, a session from it, remove
    await berth.templates.build('doc-tpl', { files: { '/tmp/doc.txt': 'doc' }, run: ['echo built'] });
    await berth.templates.list();
    await berth.templates.get('doc-tpl');
    const fromTpl = await berth.sessions.create({ template: 'doc-tpl' });
    await fromTpl.terminate();
    await berth.templates.delete('doc-tpl');

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
    // The SDK calls through POST /calls (it takes an Idempotency-Key); the by-name route stays.
    await raw(`/v1/sessions/${s.id}/tools/fs.read/call`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ args: { path: '/f.txt' } }) });
    // A replayed answer validates as the first did.
    const replay = { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'openapi-replay' }, body: JSON.stringify({ name: 'replayed' }) };
    await raw(`/v1/sessions/${s.id}/snapshots`, replay);
    expect((await raw(`/v1/sessions/${s.id}/snapshots`, replay)).headers.get('idempotent-replayed')).toBe('true');
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
    // A call that is not a desktop action kept no screen (the PNG itself: test/e2e/desktop.test.ts).
    expect((await raw(`/v1/approvals/${p2.approvalId}/screenshot`)).status).toBe(404);
    const policy = await berth.policy.get();
    await berth.policy.set(policy.text);
    await raw('/v1/policy', { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: policy.text });
    await berth.plans.set(s.id, { objective: 'read', steps: [{ id: 'r', tool: 'fs.read', arguments: { type: 'object' } }] });
    await berth.plans.get(s.id);
    await berth.plans.clear(s.id);
    await berth.gate.get(s.id);
    await berth.gate.set(s.id, { breaker: { failures: 5 } });
    await berth.gate.resetBreaker(s.id);

    // The console's routes: control lease, policy validation, events, sign-in link and exchange, the page.
    await berth.control.get(s.id);
    await berth.control.take(s.id);
    expect((await berth.tools.call(s.id, 'fs.read', { path: '/f.txt' })).decision).toBe('allow');
    await berth.control.release(s.id);
    expect((await berth.console.validatePolicy('permit (principal, action, resource) when { nonsense };')).ok).toBe(false);
    const wl = await berth.console.createWatchLink(s.id, { ttlS: 600, label: 'openapi' });
    expect((await berth.console.watchLinks(s.id)).map((l) => l.linkId)).toContain(wl.linkId);
    const watchIn = await raw('/console/signin', { method: 'POST', headers: { 'content-type': 'application/json', 'x-berth-csrf': '1' }, body: JSON.stringify({ watch: wl.url.split('#watch=')[1] }) }, null);
    expect(watchIn.status).toBe(200);
    await watchIn.text();
    expect((await berth.console.revokeWatchLink(s.id, wl.linkId)).state).toBe('revoked');
    const link = await berth.console.link();
    const code = link.url.split('#signin=')[1] as string;
    const signin = await raw('/console/signin', { method: 'POST', headers: { 'content-type': 'application/json', 'x-berth-csrf': '1' }, body: JSON.stringify({ code }) }, null);
    expect(signin.status).toBe(200);
    const cookie = (signin.headers.get('set-cookie') ?? '').split(';')[0] as string;
    expect((await raw('/v1/console/me', { headers: { cookie } }, null)).status).toBe(200);
    expect((await raw('/v1/console/signout', { method: 'POST', headers: { cookie, 'x-berth-csrf': '1' } }, null)).status).toBe(200);
    const ac = new AbortController();
    const events = await raw('/v1/events', { signal: ac.signal });
    expect(events.headers.get('content-type')).toMatch(/^text\/event-stream/);
    ac.abort();
    const consolePage = await raw('/', {}, null);
    const asset = /\/assets\/[A-Za-z0-9._-]+\.js/.exec(await consolePage.text())?.[0];
    expect((await raw(asset ?? '/assets/missing.js', {}, null)).status).toBe(200);

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

    // Terminals, the JSON side (the WebSocket side: test/e2e/terminals.test.ts).
    const terms = `/v1/sessions/${s.id}/terminals`;
    const jsonInit = (body: unknown): RequestInit => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const tv = (await (await raw(terms, jsonInit({ cols: 80, rows: 24, command: ['sh', '-c', 'echo hi'] }))).json()) as { termId: string };
    expect(tv.termId).toMatch(/^trm_/);
    await (await raw(terms)).json();
    await (await raw(`${terms}/${tv.termId}`)).json();
    await (await raw(`${terms}/${tv.termId}/tickets`, { method: 'POST' })).json();
    await (await raw(`${terms}/${tv.termId}/kill`, jsonInit({ signal: 9 }))).json();
    await (await raw(`${terms}/${tv.termId}/recording`)).text();

    // The desktop view's ticket (its WebSocket: src/server/desktop-ws.test.ts, test/console/desktop.test.ts).
    // The memory driver runs no desktop: without one, 409 no_desktop; a record given one gets its ticket.
    const noDesk = await raw(`/v1/sessions/${s.id}/desktop/tickets`, { method: 'POST' });
    expect([noDesk.status, ((await noDesk.json()) as { error: { details: { reason: string } } }).error.details.reason]).toEqual([409, 'no_desktop']);
    const deskRecord = (await t.store.sessions.get(s.id))!;
    await t.store.sessions.put({ ...deskRecord, settings: { ...deskRecord.settings, desktop: { width: 1280, height: 800 } } });
    expect((await (await raw(`/v1/sessions/${s.id}`)).json()).settings.desktop).toEqual({ width: 1280, height: 800 });
    expect((await (await raw(`/v1/sessions/${s.id}/desktop/tickets`, { method: 'POST' })).json()).ticket).toMatch(/^ttk_/);
    // The desktop's recording (ffmpeg itself: test/e2e/desktop-recording.test.ts). The memory driver has no
    // ffmpeg, so start answers 503 sandbox_failed; with no recording, stop is a no-op and the video is 404.
    const desk = `/v1/sessions/${s.id}/desktop`;
    expect((await (await raw(desk)).json()).recording).toMatchObject({ recording: false, execId: null });
    expect((await (await raw(`${desk}/recording/stop`, jsonInit({}))).json()).stopped).toBe(false);
    expect((await raw(`${desk}/recording`)).status).toBe(404);
    expect((await raw(`${desk}/recording/start`, jsonInit({ maxBytes: 4 << 20 }))).status).toBe(503);
    await t.store.sessions.put(deskRecord);

    // Port links through the SDK (the link's own traffic: test/port-links-http.test.ts, test/e2e/port-links.test.ts).
    const made = await s.ports.link(8000, { ttlS: 120, label: 'docs' });
    expect(made.url).toBe(`${url}${made.prefix}/`);
    expect((await s.ports.links()).map((l) => [l.linkId, l.state])).toEqual([[made.linkId, 'active']]);
    expect((await s.ports.revokeLink(made.linkId)).state).toBe('revoked');
    const deadLink = await fetch(made.url);
    expect([deadLink.status, ((await deadLink.json()) as { error: { code: string } }).error.code]).toEqual([404, 'not_found']);

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
