/**
 * Every request with its principal (issue 12 §2), over the real engine, gate, SQLite audit log and HTTP
 * layer (in-process): reads, stdin writes and kills leave an entry without file contents; refusals fold
 * into one entry per principal, reason and minute; an open breaker rate-limits with 429; gated calls are
 * not written twice.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AuditEntry } from '../core/index.js';
import { DEFAULT_REFUSALS_PER_SECOND } from '../engine/request-audit.js';
import { createApp } from './app.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let now = Date.UTC(2026, 11, 5, 9, 0, 0);
const clock = { now: () => now };
let t: TestEngine;
let app: ReturnType<typeof createApp>;

beforeEach(async () => {
  now = Date.UTC(2026, 11, 5, 9, 0, 0);
  t = await createTestEngine({ clock });
  app = createApp({ engine: t.engine, clock });
});
afterEach(async () => {
  await t.close();
});

async function call(token: string | null, method: string, path: string, body?: string | object, headers: Record<string, string> = {}) {
  const res = await app.request(path, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, res };
}

async function json(token: string, method: string, path: string, body?: object): Promise<any> {
  const { status, res } = await call(token, method, path, body);
  const text = await res.text();
  if (status >= 300) throw new Error(`${method} ${path}: ${status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

async function entries(): Promise<AuditEntry[]> {
  const out: AuditEntry[] = [];
  for await (const e of t.store.audit.scan()) out.push(e);
  return out;
}

describe('every request with its principal', () => {
  it('records reads with path and size (never contents), stdin writes and kills, each with principal, route and target', async () => {
    const s = await json(t.rootKey, 'POST', '/v1/sessions', {});
    const secretText = 'the-file-body-must-not-be-logged';
    await call(t.rootKey, 'PUT', `/v1/sessions/${s.id}/files?path=/tmp/f.txt`, secretText, { 'content-type': 'application/octet-stream' });
    const read = await call(t.rootKey, 'GET', `/v1/sessions/${s.id}/files?path=/tmp/f.txt`);
    expect(await read.res.text()).toBe(secretText);
    // The read's entry is written when its body has gone out.
    await expect.poll(async () => (await entries()).filter((e) => e.action === 'request' && e.data.method === 'GET').length).toBe(1);

    const exec = await call(t.rootKey, 'POST', `/v1/sessions/${s.id}/exec`, { argv: ['cat'], stdin: true });
    const reader = exec.res.body!.getReader();
    const first = JSON.parse(new TextDecoder().decode((await reader.read()).value).split('\n')[0]!);
    const execId = first.execId as string;
    expect(execId).toMatch(/^exe_/);
    const stdin = await call(t.rootKey, 'POST', `/v1/sessions/${s.id}/execs/${execId}/stdin`, 'hello', { 'content-type': 'application/octet-stream', 'content-length': '5' });
    expect(stdin.status).toBe(200);
    const kill = await call(t.rootKey, 'POST', `/v1/sessions/${s.id}/execs/${execId}/kill`, {});
    expect(kill.status).toBe(200);
    await reader.cancel();

    const all = await entries();
    const reqs = all.filter((e) => e.action === 'request');
    const fileRead = reqs.find((e) => e.data.method === 'GET' && e.data.route === '/v1/sessions/:session/files');
    expect(fileRead).toMatchObject({ principal: { kind: 'root' }, sessionId: s.id, outcome: 'ok', data: { target: { session: s.id, path: '/tmp/f.txt' }, status: 200, bytesOut: secretText.length } });
    expect(reqs.find((e) => e.data.route === '/v1/sessions/:session/execs/:exec/stdin')).toMatchObject({ data: { target: { session: s.id, exec: execId }, bytesIn: 5, status: 200 } });
    expect(reqs.find((e) => e.data.route === '/v1/sessions/:session/execs/:exec/kill')).toMatchObject({ data: { target: { session: s.id, exec: execId }, status: 200 } });
    // Requests the engine audits itself (create, write, exec) are not written twice.
    expect(reqs.filter((e) => e.data.method === 'POST' && e.data.route === '/v1/sessions')).toHaveLength(0);
    expect(all.filter((e) => e.action === 'session.exec')).toHaveLength(1);
    expect(reqs.filter((e) => e.data.route === '/v1/sessions/:session/files' && e.data.method === 'PUT')).toHaveLength(0);
    // No entry carries a file's contents.
    expect(JSON.stringify(all)).not.toContain(secretText);
    expect(JSON.stringify(all)).not.toContain('hello');
  });

  it('folds 100 refusals of one principal in one minute into one entry with count 100', async () => {
    const b = await json(t.rootKey, 'POST', '/v1/tenants', { name: 'b' });
    const s = await json(t.rootKey, 'POST', '/v1/sessions', {});
    const before = (await entries()).length;
    for (let i = 0; i < 100; i++) {
      now += 100; // 10 s in all, within the minute
      const r = await call(b.apiKey, 'GET', `/v1/sessions/${s.id}`);
      expect(r.status).toBe(404);
    }
    // Nothing yet: the minute is still open.
    expect((await entries()).length).toBe(before);
    // A refusal of another kind (no token) is its own entry.
    expect((await call(null, 'GET', `/v1/sessions/${s.id}`)).status).toBe(401);
    await t.engine.requests.flush();
    const refused = (await entries()).slice(before).filter((e) => e.action === 'request.refused');
    expect(refused).toHaveLength(2);
    const probe = refused.find((e) => e.principal.kind === 'operator')!;
    expect(probe).toMatchObject({ principal: { kind: 'operator', id: b.id }, outcome: 'deny', data: { reason: 'not_found', count: 100, statuses: { '404': 100 } } });
    expect(probe.data.requests).toEqual([{ method: 'GET', route: '/v1/sessions/:session', target: { session: s.id } }]);
    expect(refused.find((e) => e.principal.kind === 'anonymous')).toMatchObject({ data: { reason: 'unauthenticated', count: 1 } });

    // The next minute starts a new entry; the one before is written when the minute has passed.
    now += 60_000;
    expect((await call(b.apiKey, 'GET', `/v1/sessions/${s.id}`)).status).toBe(404);
    await t.engine.requests.flush(false);
    expect((await entries()).slice(before).filter((e) => e.action === 'request.refused')).toHaveLength(2);
    await t.engine.requests.flush();
    expect((await entries()).slice(before).filter((e) => e.action === 'request.refused')).toHaveLength(3);
  });

  it('while the breaker is open, more than N requests a second from that agent get 429 rate_limited', async () => {
    const s = await json(t.rootKey, 'POST', '/v1/sessions', {});
    await json(t.rootKey, 'PUT', `/v1/sessions/${s.id}/gate`, { breaker: { failures: 2 } });
    const agent = s.agentToken as string;
    // Two identical failing calls trip the breaker.
    for (let i = 0; i < 2; i++) await json(agent, 'POST', `/v1/sessions/${s.id}/calls`, { tool: 'shell.exec', args: { command: 'false' } });
    expect((await json(t.rootKey, 'GET', `/v1/sessions/${s.id}/gate`)).breaker.open).toBe(true);

    const gatedBefore = (await entries()).filter((e) => e.action === 'tool.breaker').length;
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) {
      const r = await call(agent, 'POST', `/v1/sessions/${s.id}/calls`, { tool: 'shell.exec', args: { command: 'true' } });
      statuses.push(r.status);
      if (r.status === 429) expect((await r.res.json()).error).toMatchObject({ code: 'rate_limited', details: { limit: DEFAULT_REFUSALS_PER_SECOND } });
    }
    // The first call meets the breaker and tells the limiter; then N a second pass, the rest are 429.
    expect(statuses.filter((x) => x === 200)).toHaveLength(DEFAULT_REFUSALS_PER_SECOND);
    expect(statuses.filter((x) => x === 429)).toHaveLength(30 - DEFAULT_REFUSALS_PER_SECOND);
    // Each call that reached the gate is audited once by the gate, not again as a request.
    const all = await entries();
    expect(all.filter((e) => e.action === 'tool.breaker').length - gatedBefore).toBe(DEFAULT_REFUSALS_PER_SECOND);
    expect(all.filter((e) => e.action === 'request' && e.data.route === '/v1/sessions/:session/calls')).toHaveLength(0);

    // The next second lets N through again; the 429s fold into one entry.
    now += 1000;
    expect((await call(agent, 'POST', `/v1/sessions/${s.id}/calls`, { tool: 'shell.exec', args: { command: 'true' } })).status).toBe(200);
    await t.engine.requests.flush();
    const limited = (await entries()).filter((e) => e.action === 'request.refused' && e.data.reason === 'rate_limited');
    expect(limited).toHaveLength(1);
    expect(limited[0]).toMatchObject({ principal: { kind: 'agent', id: s.id }, sessionId: s.id, data: { count: 30 - DEFAULT_REFUSALS_PER_SECOND, statuses: { '429': 30 - DEFAULT_REFUSALS_PER_SECOND } } });

    // After an operator resets the breaker, calls pass again at any rate.
    await json(t.rootKey, 'POST', `/v1/sessions/${s.id}/breaker/reset`, {});
    await json(t.rootKey, 'POST', `/v1/sessions/${s.id}/resume`, {}).catch(() => undefined);
    now += 10_000;
    for (let i = 0; i < DEFAULT_REFUSALS_PER_SECOND + 5; i++) {
      expect((await call(agent, 'GET', `/v1/sessions/${s.id}/tools`)).status).toBe(200);
    }
  });
});
