/**
 * Per-tenant quotas (issue 12 §3) over the real engine, SQLite and HTTP layer (in-process): root sets
 * them, a request over one answers 429 quota_exceeded naming the limit and the current use, and
 * `GET /v1/tenants/:id` reports the use.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createApp } from './app.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let t: TestEngine;
let app: ReturnType<typeof createApp>;

beforeEach(async () => {
  t = await createTestEngine({ driver: {} });
  app = createApp({ engine: t.engine });
});
afterEach(async () => {
  await t.close();
});

async function call(token: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

async function tenant(name: string): Promise<{ id: string; key: string }> {
  const r = await call(t.rootKey, 'POST', '/v1/tenants', { name });
  return { id: r.json.id, key: r.json.apiKey };
}

describe('tenant quotas', () => {
  it('only root sets them; an operator sees its own; defaults apply until set', async () => {
    const a = await tenant('a');
    const b = await tenant('b');
    const shown = await call(a.key, 'GET', `/v1/tenants/${a.id}`);
    expect(shown.status).toBe(200);
    expect(shown.json).toMatchObject({ id: a.id, name: 'a', quotas: { maxSessions: expect.any(Number), maxMemoryMb: expect.any(Number) }, usage: { sessions: 0, memoryMb: 0, snapshotBytes: 0, egressBytes: 0 } });
    expect((await call(b.key, 'GET', `/v1/tenants/${a.id}`)).status).toBe(404);
    expect((await call(a.key, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxSessions: 100 })).json.error.code).toBe('forbidden');
    expect((await call(b.key, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxSessions: 100 })).status).toBe(404);
    const bad = await call(t.rootKey, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxSessions: -1 });
    expect(bad.status).toBe(400);
    expect(bad.json.error.code).toBe('invalid_argument');
    const set = await call(t.rootKey, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxSessions: 2 });
    expect(set.json.quotas.maxSessions).toBe(2);
    expect(set.json.quotas.maxMemoryMb).toBe(shown.json.quotas.maxMemoryMb);
    // The change is audited with who made it.
    const log = (await call(t.rootKey, 'GET', '/v1/audit?limit=1000')).json.entries.filter((e: any) => e.action === 'tenant.quotas');
    expect(log).toMatchObject([{ principal: { kind: 'root' }, tenantId: a.id, data: { set: { maxSessions: 2 } } }]);
  });

  it('sessions: the one past maxSessions gets 429 quota_exceeded naming the limit and the use', async () => {
    const a = await tenant('a');
    await call(t.rootKey, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxSessions: 2 });
    const s1 = await call(a.key, 'POST', '/v1/sessions', { memoryMb: 256 });
    expect(s1.status).toBe(201);
    expect((await call(a.key, 'POST', '/v1/sessions', { memoryMb: 256 })).status).toBe(201);
    const over = await call(a.key, 'POST', '/v1/sessions', { memoryMb: 256 });
    expect(over.status).toBe(429);
    expect(over.json.error).toMatchObject({ code: 'quota_exceeded', details: { limit: 'maxSessions', max: 2, current: 2, requested: 1 } });
    expect((await call(a.key, 'GET', `/v1/tenants/${a.id}`)).json.usage).toMatchObject({ sessions: 2, memoryMb: 512 });
    // Another tenant is not affected; a terminated session frees its place.
    const b = await tenant('b');
    expect((await call(b.key, 'POST', '/v1/sessions', {})).status).toBe(201);
    await call(a.key, 'DELETE', `/v1/sessions/${s1.json.id}`);
    expect((await call(a.key, 'POST', '/v1/sessions', { memoryMb: 256 })).status).toBe(201);
    // Forks count too.
    const s3 = (await call(a.key, 'GET', '/v1/sessions')).json.sessions[0];
    const snap = await call(a.key, 'POST', `/v1/sessions/${s3.id}/snapshots`, { name: 'x' });
    const fork = await call(a.key, 'POST', `/v1/snapshots/${snap.json.snapshotId}/fork`, { count: 1 });
    expect(fork.status).toBe(429);
    expect(fork.json.error.details).toMatchObject({ limit: 'maxSessions', current: 2, requested: 1 });
  });

  it('memory: sessions holding a machine count; a hibernated one does not, and waking it is checked', async () => {
    const a = await tenant('a');
    await call(t.rootKey, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxMemoryMb: 1024 });
    const s1 = (await call(a.key, 'POST', '/v1/sessions', { memoryMb: 512 })).json;
    expect((await call(a.key, 'POST', '/v1/sessions', { memoryMb: 512 })).status).toBe(201);
    const over = await call(a.key, 'POST', '/v1/sessions', { memoryMb: 64 });
    expect(over.status).toBe(429);
    expect(over.json.error.details).toMatchObject({ limit: 'maxMemoryMb', max: 1024, current: 1024, requested: 64 });
    // Hibernating s1 frees its memory: a new session fits, and then s1 cannot wake.
    expect((await call(a.key, 'POST', `/v1/sessions/${s1.id}/hibernate`, {})).status).toBe(200);
    expect((await call(a.key, 'GET', `/v1/tenants/${a.id}`)).json.usage).toMatchObject({ sessions: 2, memoryMb: 512 });
    expect((await call(a.key, 'POST', '/v1/sessions', { memoryMb: 256 })).status).toBe(201);
    const wake = await call(a.key, 'POST', `/v1/sessions/${s1.id}/wake`, {});
    expect(wake.status).toBe(429);
    expect(wake.json.error.details).toMatchObject({ limit: 'maxMemoryMb', current: 768, requested: 512 });
    expect((await call(a.key, 'GET', `/v1/sessions/${s1.id}`)).json.state).toBe('hibernated');
  });

  it('snapshots: none is taken once the tenant has used maxSnapshotGb, and one that would pass it is dropped', async () => {
    const a = await tenant('a');
    const s = (await call(a.key, 'POST', '/v1/sessions', {})).json;
    await call(a.key, 'PUT', `/v1/sessions/${s.id}/files?path=/tmp/blob`, 'x'.repeat(100_000));
    const first = await call(a.key, 'POST', `/v1/sessions/${s.id}/snapshots`, { name: 'one' });
    expect(first.status).toBe(201);
    const used = (await call(a.key, 'GET', `/v1/tenants/${a.id}`)).json.usage.snapshotBytes as number;
    expect(used).toBeGreaterThan(0);
    // Room for less than one more: the next snapshot is taken, found too big, dropped.
    await call(t.rootKey, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxSnapshotGb: (used * 1.5) / 2 ** 30 });
    const second = await call(a.key, 'POST', `/v1/sessions/${s.id}/snapshots`, { name: 'two' });
    expect(second.status).toBe(429);
    expect(second.json.error.details).toMatchObject({ limit: 'maxSnapshotGb' });
    expect((await call(a.key, 'GET', '/v1/snapshots')).json.snapshots.map((x: any) => x.name)).toEqual(['one']);
    expect((await call(a.key, 'GET', `/v1/tenants/${a.id}`)).json.usage.snapshotBytes).toBe(used);
    // At the limit: refused before anything is taken.
    await call(t.rootKey, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxSnapshotGb: used / 2 ** 30 });
    const third = await call(a.key, 'POST', `/v1/sessions/${s.id}/snapshots`, {});
    expect(third.status).toBe(429);
    expect(third.json.error.details).toMatchObject({ limit: 'maxSnapshotGb', requested: expect.any(Number) });
  });

  it('egress: the hook refuses once the tenant used maxEgressGb (bytes as the egress proxy meters them)', async () => {
    const a = await tenant('a');
    const s = (await call(a.key, 'POST', '/v1/sessions', {})).json;
    await t.engine.checkEgressQuota(s.id);
    await call(t.rootKey, 'PUT', `/v1/tenants/${a.id}/quotas`, { maxEgressGb: 1 });
    const r = (await t.store.sessions.get(s.id))!;
    await t.store.sessions.put({ ...r, metering: { ...r.metering, egressBytesOut: 2 ** 29, egressBytesIn: 2 ** 29 } });
    await expect(t.engine.checkEgressQuota(s.id)).rejects.toMatchObject({ code: 'quota_exceeded', details: { limit: 'maxEgressGb', max: 1, current: 1 } });
    expect((await call(a.key, 'GET', `/v1/tenants/${a.id}`)).json.usage).toMatchObject({ egressGb: 1, egressBytes: 2 ** 30 });
  });
});
