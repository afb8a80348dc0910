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
  ['POST', '/desktop/tickets', {}],
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
    // Every probe left an audit entry (issue 12 §2): the refusals of each prober fold into one entry per
    // reason and minute that lists every route and target it tried.
    await t.engine.requests.flush();
    const refused: any[] = [];
    for await (const e of t.store.audit.scan()) if (e.action === 'request.refused') refused.push(e);
    for (const [who, p] of [['operator of another tenant', { kind: 'operator', id: a.json.id }], ["another session's agent", { kind: 'agent', id: sesA.id }]] as const) {
      const mine = refused.filter((e) => e.principal.kind === p.kind && e.principal.id === p.id && e.data.reason === 'not_found');
      // One entry, or two when the probes straddled a minute (the system clock runs here).
      expect(mine.length, who).toBeGreaterThanOrEqual(1);
      expect(mine.length, who).toBeLessThanOrEqual(2);
      expect(mine.reduce((n, e) => n + (e.data.count as number), 0), who).toBe(SESSION_ROUTES.length + 2);
      const tried = new Set(mine.flatMap((e) => e.data.requests as Array<{ method: string; route: string; target: Record<string, string> }>).map((r) => `${r.method} ${r.route} ${r.target.session ?? r.target.snapshot}`));
      for (const [method, suffix] of SESSION_ROUTES) {
        const route = `/v1/sessions/:session${suffix.split('?')[0]!.replace(/exe_0+/, ':exec').replace(/apr_0+/, ':approval')}`;
        expect(tried.has(`${method} ${route} ${sesB.id}`), `${who}: ${method} ${route}`).toBe(true);
      }
      expect(tried.has(`GET /v1/snapshots ${sesB.id}`), who).toBe(true);
      expect(tried.has(`GET /v1/snapshots/:snapshot ${snap.json.snapshotId}`), who).toBe(true);
    }

    // Its owner still sees it, and a session id that never existed is not found for root either.
    const own = await call(keyB, 'GET', `/v1/snapshots?sessionId=${sesB.id}`);
    expect(own.status).toBe(200);
    expect(own.json.snapshots).toHaveLength(1);
    expect((await call(t.rootKey, 'GET', '/v1/snapshots?sessionId=ses_00000000000000000000')).status).toBe(404);
  });
});
