/**
 * Idempotency-Key (issue 7 §11) over the real engine, SQLite, gate and HTTP layer (in-process): replay,
 * mismatch, a retry while the first runs, tenant scoping, expiry on the engine's clock, what a retry
 * finds after the first attempt's server died, and the request audit marking replays.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IDEMPOTENCY_TTL_MS, canonicalJson, sha256Hex } from '../core/index.js';

/** What the row is keyed by: the key's hash, never the key. */
const hashed = (key: string) => sha256Hex(`berth-idempotency-key\n${key}`);
import { createApp } from './app.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let now = Date.UTC(2026, 11, 5, 12);
const clock = { now: () => now };
let t: TestEngine;
let app: ReturnType<typeof createApp>;

beforeEach(async () => {
  now = Date.UTC(2026, 11, 5, 12);
  t = await createTestEngine({ clock });
  app = createApp({ engine: t.engine, clock });
});
afterEach(async () => {
  await t.close();
});

interface Res {
  status: number;
  json: any;
  headers: Headers;
}
async function call(token: string, method: string, path: string, body?: unknown, key?: string): Promise<Res> {
  const res = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...(key !== undefined ? { 'idempotency-key': key } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined, headers: res.headers };
}
async function tenant(name: string): Promise<string> {
  return (await call(t.rootKey, 'POST', '/v1/tenants', { name })).json.apiKey;
}
async function sessionCount(): Promise<number> {
  return (await t.store.sessions.list()).length;
}

describe('Idempotency-Key', () => {
  it('a retry of POST /v1/sessions gets the first answer, agent token included, and creates nothing more', async () => {
    const key = await tenant('a');
    const first = await call(key, 'POST', '/v1/sessions', { memoryMb: 256, metadata: { run: '1' } }, 'create-1');
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    // The same body in another key order is the same request.
    const again = await call(key, 'POST', '/v1/sessions', { metadata: { run: '1' }, memoryMb: 256 }, 'create-1');
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.json).toEqual(first.json);
    expect(await sessionCount()).toBe(1);
    // At rest: neither the key nor the answer (it holds the agent token) is readable in the database.
    const tenantId = (await t.engine.authenticate(key)).tenantId as string;
    const row = await t.store.idempotency.get(tenantId, 'POST /v1/sessions', hashed('create-1'));
    expect(row?.state).toBe('done');
    expect(row?.body).not.toContain(first.json.agentToken);
    expect(row?.body).not.toContain(first.json.id);
    // Without a key, or with another, it runs.
    expect((await call(key, 'POST', '/v1/sessions', { memoryMb: 256 }, 'create-2')).status).toBe(201);
    expect(await sessionCount()).toBe(2);
    // The replay is in the request audit, marked (a create that ran is audited as session.create instead).
    const entries = (await call(t.rootKey, 'GET', '/v1/audit?limit=1000')).json.entries.filter((e: any) => e.action === 'request' && e.data.route === '/v1/sessions' && e.data.method === 'POST');
    expect(entries.map((e: any) => e.data.idempotency ?? null)).toEqual(['replayed']);
  });

  it('the same key with another body, path or method is 422 idempotency_mismatch', async () => {
    const key = await tenant('a');
    expect((await call(key, 'POST', '/v1/sessions', { memoryMb: 256 }, 'k')).status).toBe(201);
    const other = await call(key, 'POST', '/v1/sessions', { memoryMb: 512 }, 'k');
    expect(other.status).toBe(422);
    expect(other.json.error.code).toBe('idempotency_mismatch');
    const s = (await call(key, 'POST', '/v1/sessions', {}, 'k2')).json;
    const s2 = (await call(key, 'POST', '/v1/sessions', {}, 'k3')).json;
    expect((await call(key, 'POST', `/v1/sessions/${s.id}/snapshots`, {}, 'snap')).status).toBe(201);
    // One route, another session: another request under the same key.
    expect((await call(key, 'POST', `/v1/sessions/${s2.id}/snapshots`, {}, 'snap')).json.error.code).toBe('idempotency_mismatch');
    expect(await sessionCount()).toBe(3);
  });

  it('rejects a key that is empty, too long or not printable ASCII', async () => {
    const key = await tenant('a');
    for (const bad of ['x'.repeat(256), 'tab\there', 'é']) {
      const r = await call(key, 'POST', '/v1/sessions', {}, bad).catch(() => ({ status: 400, json: { error: { code: 'invalid_argument' } } }) as Res);
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.json.error.code).toBe('invalid_argument');
    }
    expect((await call(key, 'POST', '/v1/sessions', {}, '')).status).toBe(400);
    expect((await call(key, 'POST', '/v1/sessions', {}, 'x'.repeat(255))).status).toBe(201);
    expect(await sessionCount()).toBe(1);
  });

  it('a retry while the first still runs is 409 conflict, retryable; after it ends, the answer', async () => {
    const key = await tenant('a');
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const create = t.driver.create.bind(t.driver);
    t.driver.create = async (...a) => {
      await held;
      return create(...a);
    };
    const first = call(key, 'POST', '/v1/sessions', {}, 'slow');
    await new Promise((r) => setTimeout(r, 50));
    const during = await call(key, 'POST', '/v1/sessions', {}, 'slow');
    expect(during.status).toBe(409);
    expect(during.json.error).toMatchObject({ code: 'conflict', retryable: true, details: { state: 'in_progress' } });
    release();
    const done = await first;
    expect(done.status).toBe(201);
    const after = await call(key, 'POST', '/v1/sessions', {}, 'slow');
    expect(after.json.id).toBe(done.json.id);
    expect(await sessionCount()).toBe(1);
  });

  it('keys are per tenant: another tenant with the same key gets its own session', async () => {
    const a = await tenant('a');
    const b = await tenant('b');
    const ra = await call(a, 'POST', '/v1/sessions', {}, 'shared');
    const rb = await call(b, 'POST', '/v1/sessions', {}, 'shared');
    expect(rb.status).toBe(201);
    expect(rb.headers.get('idempotent-replayed')).toBeNull();
    expect(rb.json.id).not.toBe(ra.json.id);
    expect(await sessionCount()).toBe(2);
  });

  it('a key is kept 24 h on the engine clock, then a retry runs afresh', async () => {
    const key = await tenant('a');
    const first = await call(key, 'POST', '/v1/sessions', {}, 'day');
    now += IDEMPOTENCY_TTL_MS - 1;
    expect((await call(key, 'POST', '/v1/sessions', {}, 'day')).json.id).toBe(first.json.id);
    now += 1;
    const later = await call(key, 'POST', '/v1/sessions', {}, 'day');
    expect(later.status).toBe(201);
    expect(later.json.id).not.toBe(first.json.id);
    // Expired rows are swept.
    now += IDEMPOTENCY_TTL_MS + 60 * 60 * 1000;
    await call(key, 'POST', '/v1/sessions', {}, 'other');
    await new Promise((r) => setTimeout(r, 10));
    const tenantId = (await t.engine.authenticate(key)).tenantId as string;
    expect(await t.store.idempotency.get(tenantId, 'POST /v1/sessions', hashed('other'))).toBeDefined();
    expect(await t.store.idempotency.get(tenantId, 'POST /v1/sessions', hashed('day'))).toBeUndefined();
  });

  it('a request that did not run frees its key (validation, not found, quota); one that ran keeps even a refusal', async () => {
    const a = await tenant('a');
    const bad = await call(a, 'POST', '/v1/sessions', { memoryMb: -1 }, 'v');
    expect(bad.status).toBe(400);
    // Not kept: the same key with a corrected body runs.
    expect((await call(a, 'POST', '/v1/sessions', { memoryMb: 256 }, 'v')).status).toBe(201);
    const missing = await call(a, 'POST', '/v1/snapshots/snp_00000000000000000000/fork', { count: 1 }, 'f');
    expect(missing.status).toBe(404);
    expect(missing.headers.get('idempotent-replayed')).toBeNull();
  });

  it('a create that ran and failed keeps its answer: the retry gets the same error, replayed, and no second session', async () => {
    const key = await tenant('a');
    t.driver.failNext('create', new Error('the backend fell over'));
    const first = await call(key, 'POST', '/v1/sessions', {}, 'fails');
    expect(first.status).toBeGreaterThanOrEqual(500);
    expect(await sessionCount()).toBe(1); // the failed session is the record it created
    const again = await call(key, 'POST', '/v1/sessions', {}, 'fails');
    expect(again.status).toBe(first.status);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.json).toEqual(first.json);
    expect(await sessionCount()).toBe(1);
    // The replayed refusal is audited under a reason of its own.
    await t.engine.requests.flush();
    const refused = (await call(t.rootKey, 'GET', '/v1/audit?limit=1000')).json.entries.filter((e: any) => e.action === 'request.refused');
    expect(refused.map((e: any) => e.data.reason)).toContainEqual(expect.stringMatching(/:replayed$/));
  });

  it('snapshot and fork replay their first answer', async () => {
    const key = await tenant('a');
    const s = (await call(key, 'POST', '/v1/sessions', {})).json;
    const snap = await call(key, 'POST', `/v1/sessions/${s.id}/snapshots`, { name: 'x' }, 'snap-1');
    expect(snap.status).toBe(201);
    const snap2 = await call(key, 'POST', `/v1/sessions/${s.id}/snapshots`, { name: 'x' }, 'snap-1');
    expect(snap2.json).toEqual(snap.json);
    expect((await t.store.snapshots.list({})).filter((x) => x.sessionId === s.id)).toHaveLength(1);
    const fork = await call(key, 'POST', `/v1/snapshots/${snap.json.id}/fork`, { count: 2 }, 'fork-1');
    expect(fork.status).toBe(201);
    const fork2 = await call(key, 'POST', `/v1/snapshots/${snap.json.id}/fork`, { count: 2 }, 'fork-1');
    expect(fork2.headers.get('idempotent-replayed')).toBe('true');
    expect(fork2.json).toEqual(fork.json);
    expect(await sessionCount()).toBe(3);
  });

  it('a tool call is replayed, not run twice', async () => {
    const key = await tenant('a');
    const s = (await call(key, 'POST', '/v1/sessions', {})).json;
    expect((await call(key, 'PUT', `/v1/sessions/${s.id}/tools`, { tools: ['fs.read'] })).status).toBe(200);
    const body = { tool: 'fs.read', args: { path: '/etc/hostname' } };
    const first = await call(s.agentToken, 'POST', `/v1/sessions/${s.id}/calls`, body, 'call-1');
    expect(first.status).toBe(200);
    const again = await call(s.agentToken, 'POST', `/v1/sessions/${s.id}/calls`, body, 'call-1');
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.json).toEqual(first.json);
    const calls = (await call(t.rootKey, 'GET', '/v1/audit?limit=1000')).json.entries.filter((e: any) => e.action === 'tool.result');
    expect(calls).toHaveLength(1);
  });
});

describe('the answer is kept after it is sent', () => {
  it('a retry that arrives before the answer is kept waits for it and gets the replay, not a 409', async () => {
    const idem = t.engine.idempotency;
    const principal = { kind: 'operator' as const, id: 'ten_x', tenantId: 'ten_x' };
    const req = { principal, key: 'k-held', scope: 'POST /v1/sessions/:session/calls', method: 'POST', path: '/v1/sessions/ses_x/calls', body: '{"tool":"fs.read"}' };
    const first = await idem.begin(req);
    expect(first.kind).toBe('run');
    // The server has sent its answer; the text it keeps is not read yet.
    let answer!: (a: { status: number; body: string }) => void;
    idem.finishAfter((first as { ticket: Parameters<typeof idem.finishAfter>[0] }).ticket, new Promise((r) => (answer = r)));
    let settled = false;
    const retry = idem.begin(req).finally(() => (settled = true));
    try {
      await new Promise((r) => setTimeout(r, 50));
      expect(settled).toBe(false); // neither a 409 nor a second run: it waits
    } finally {
      answer({ status: 200, body: '{"decision":"allow"}' }); // also lets the engine's close drain on a failure
    }
    expect(await retry).toEqual({ kind: 'replay', status: 200, body: '{"decision":"allow"}' });
    await idem.drain();
  });
});

describe('after the first attempt\'s server died (a `started` key of another process)', () => {
  async function started(tenantId: string, scope: string, key: string, body: unknown, path: string, created: string[]): Promise<void> {
    // What a killed server leaves: the row it wrote before running, with the ids it noted.
    await t.store.idempotency.claim(
      { tenantId, scope, key: hashed(key), fingerprint: sha256Hex(`POST\n${path}\n${canonicalJson(body)}`), state: 'started', owner: 'a-dead-process', created, createdAt: now, expiresAt: now + IDEMPOTENCY_TTL_MS },
      now,
    );
  }

  it('answers with the session it created (without the agent token), marked recovered', async () => {
    const key = await tenant('a');
    const s = (await call(key, 'POST', '/v1/sessions', {})).json;
    await started(s.tenantId, 'POST /v1/sessions', 'crash-1', {}, '/v1/sessions', [s.id]);
    const r = await call(key, 'POST', '/v1/sessions', {}, 'crash-1');
    expect(r.status).toBe(200);
    expect(r.headers.get('idempotency-recovered')).toBe('true');
    expect(r.json.id).toBe(s.id);
    expect(r.json.agentToken).toBeUndefined();
    expect(await sessionCount()).toBe(1);
    const entries = (await call(t.rootKey, 'GET', '/v1/audit?limit=1000')).json.entries.filter((e: any) => e.data?.idempotency === 'recovered');
    expect(entries).toHaveLength(1);
  });

  it('runs afresh when it had created nothing (or only noted an id it never wrote)', async () => {
    const key = await tenant('a');
    const tenantId = (await t.engine.authenticate(key)).tenantId as string;
    await started(tenantId, 'POST /v1/sessions', 'crash-2', {}, '/v1/sessions', ['ses_00000000000000000000']);
    const r = await call(key, 'POST', '/v1/sessions', {}, 'crash-2');
    expect(r.status).toBe(201);
    expect(r.json.agentToken).toEqual(expect.any(String));
    expect((await call(key, 'POST', '/v1/sessions', {}, 'crash-2')).json.id).toBe(r.json.id);
    expect(await sessionCount()).toBe(1);
  });

  it('a tool call: 409 interrupted, not retryable (whether it ran is not known)', async () => {
    const key = await tenant('a');
    const s = (await call(key, 'POST', '/v1/sessions', {})).json;
    const body = { tool: 'fs.read', args: { path: '/etc/hostname' } };
    await started(s.tenantId, 'POST /v1/sessions/:session/calls', 'crash-3', body, `/v1/sessions/${s.id}/calls`, []);
    const r = await call(s.agentToken, 'POST', `/v1/sessions/${s.id}/calls`, body, 'crash-3');
    expect(r.status).toBe(409);
    expect(r.json.error.code).toBe('conflict');
    expect(r.json.error.retryable).toBeUndefined();
    expect(r.json.error.details.state).toBe('interrupted');
  });
});
