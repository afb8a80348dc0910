/**
 * Another tenant's ids, and another session's ids under an agent token, are not found on every
 * session-scoped route (404, never 403 or an empty 200), over the real engine and HTTP layer (issue 12 §4).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createApp } from './app.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let t: TestEngine;
let app: ReturnType<typeof createApp>;

beforeEach(async () => {
  t = await createTestEngine();
  app = createApp({ engine: t.engine });
});
afterEach(async () => {
  await t.close();
});

async function call(token: string, method: string, path: string, body?: unknown) {
  const res = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as any) : undefined };
}

/** Every route that names a session, with a body it would accept from its owner. */
const SESSION_ROUTES: Array<[string, string, unknown?]> = [
  ['GET', ''],
  ['DELETE', ''],
  ['POST', '/pause', {}],
  ['POST', '/resume', {}],
  ['POST', '/hibernate', {}],
  ['POST', '/wake', {}],
  ['POST', '/exec', { argv: ['true'] }],
  ['POST', '/execs/exe_00000000000000000000/kill', {}],
  ['POST', '/execs/exe_00000000000000000000/stdin', {}],
  ['GET', '/files?path=/etc/hostname'],
  ['PUT', '/files?path=/tmp/x'],
  ['DELETE', '/files?path=/tmp/x'],
  ['GET', '/files/list?path=/'],
  ['GET', '/files/stat?path=/'],
  ['POST', '/files/mkdir', { path: '/tmp/d' }],
  ['POST', '/snapshots', {}],
  ['GET', '/gate'],
  ['PUT', '/gate', { approvalTtlS: 60 }],
  ['GET', '/plan'],
  ['PUT', '/plan', { objective: 'x', steps: [{ id: 'a', tool: 'fs.read' }] }],
  ['DELETE', '/plan'],
  ['GET', '/tools'],
  ['PUT', '/tools', { tools: ['fs.read'] }],
  ['POST', '/tools/fs.read/call', { args: { path: '/etc/hostname' } }],
  ['POST', '/calls', { tool: 'fs.read', args: { path: '/etc/hostname' } }],
  ['POST', '/breaker/reset', {}],
  ['GET', '/approvals/apr_00000000000000000000'],
];

describe('another tenant\'s or another session\'s ids', () => {
  it('answer 404 on every session route, for an operator of another tenant and for another session\'s agent', async () => {
    const a = await call(t.rootKey, 'POST', '/v1/tenants', { name: 'a' });
    const b = await call(t.rootKey, 'POST', '/v1/tenants', { name: 'b' });
    const keyA = a.json.apiKey as string;
    const keyB = b.json.apiKey as string;
    const sesB = (await call(keyB, 'POST', '/v1/sessions', {})).json;
    const sesA = (await call(keyA, 'POST', '/v1/sessions', {})).json;
    expect(sesB.id).toMatch(/^ses_/);
    const snap = await call(keyB, 'POST', `/v1/sessions/${sesB.id}/snapshots`, { name: 'keep' });
    expect(snap.status).toBe(201);

    for (const [who, token] of [['operator of another tenant', keyA], ["another session's agent", sesA.agentToken as string]] as const) {
      for (const [method, suffix, body] of SESSION_ROUTES) {
        const r = await call(token, method, `/v1/sessions/${sesB.id}${suffix}`, body);
        expect(r.status, `${who}: ${method} ${suffix || '/'}`).toBe(404);
        expect(r.json?.error?.code).toBe('not_found');
      }
      const list = await call(token, 'GET', `/v1/snapshots?sessionId=${sesB.id}`);
      expect(list.status, `${who}: GET /v1/snapshots?sessionId=`).toBe(404);
      expect((await call(token, 'GET', `/v1/snapshots/${snap.json.snapshotId}`)).status).toBe(404);
    }
    // Its owner still sees it, and a session id that never existed is not found for root either.
    const own = await call(keyB, 'GET', `/v1/snapshots?sessionId=${sesB.id}`);
    expect(own.status).toBe(200);
    expect(own.json.snapshots).toHaveLength(1);
    expect((await call(t.rootKey, 'GET', '/v1/snapshots?sessionId=ses_00000000000000000000')).status).toBe(404);
  });
});
