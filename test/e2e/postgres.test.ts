/**
 * The whole server side on PostgreSQL: the real engine, gate and HTTP app over a PostgresStore (the
 * in-memory driver stands in for gVisor), a gated call, a restart over the same database and data
 * directory, the audit chain verified through the API, anchor included, and the signed tree's routes
 * (key, checkpoint, proofs, verify against a checkpoint) answering as on SQLite, with the restart refused
 * once the table behind a signed head is cut.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePublicKey, verifyHeadSignature, type ConsistencyDocument, type InclusionDocument, type SignedHead } from '../../src/core/index.js';
import { createApp } from '../../src/server/app.js';
import { openPostgresStore } from '../../src/store/postgres/store.js';
import { createTestEngine } from '../helpers/engine.js';
import { skipReason } from '../helpers/env.js';
import { checkConsistency, checkInclusion, leaf } from '../helpers/merkle-verifier.js';
import { postgresMissing, startPostgres, type PgCluster } from '../helpers/postgres.js';

const skip = skipReason('PostgreSQL end-to-end test', postgresMissing());

describe.skipIf(skip)('the server on PostgreSQL', () => {
  let cluster: PgCluster;
  let dataDir: string;
  beforeAll(async () => {
    cluster = await startPostgres();
    dataDir = await mkdtemp(join(tmpdir(), 'berth-e2e-pg-'));
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('records a gated call, survives a restart, and the audit chain verifies', async () => {
    const url = await cluster.newDatabase();
    const anchorPath = join(dataDir, 'audit-head');
    const open = async () => createTestEngine({ dataDir, store: await openPostgresStore({ url, anchorPath }) });

    const t1 = await open();
    const app1 = createApp({ engine: t1.engine });
    const auth = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });
    const created = await app1.request('/v1/sessions', { method: 'POST', headers: auth(t1.rootKey), body: JSON.stringify({ objective: 'pg e2e' }) });
    expect(created.status).toBe(201);
    const { id, agentToken } = (await created.json()) as { id: string; agentToken: string };
    const call = await app1.request(`/v1/sessions/${id}/calls`, { method: 'POST', headers: auth(agentToken), body: JSON.stringify({ tool: 'fs.write', args: { path: '/work/note', content: 'hi' } }) });
    expect(await call.json()).toMatchObject({ decision: 'allow' });
    const denied = await app1.request(`/v1/sessions/${id}/calls`, { method: 'POST', headers: auth(agentToken), body: JSON.stringify({ tool: 'fs.write', args: { path: '/proc/x', content: 'x' } }) });
    expect(await denied.json()).toMatchObject({ decision: 'deny', stage: 'policy' });
    const before = (await t1.engine.auditQuery(t1.root, { sessionId: id })).map((e) => e.action);
    expect(before).toEqual(expect.arrayContaining(['session.create', 'tool.arguments', 'tool.policy', 'tool.result']));
    await t1.close();

    // A new server process over the same database and data directory (root key is per engine here).
    const t2 = await open();
    try {
      const app2 = createApp({ engine: t2.engine });
      const s = (await (await app2.request(`/v1/sessions/${id}`, { headers: auth(t2.rootKey) })).json()) as { state: string; objective: string };
      // The memory driver's machines did not survive the restart: recovery recorded that, in the audit too.
      expect(s).toMatchObject({ objective: 'pg e2e', state: 'failed' });
      const verify = await app2.request('/v1/audit/verify', { headers: auth(t2.rootKey) });
      expect(verify.status).toBe(200);
      const v = (await verify.json()) as { ok: boolean; entries: number };
      expect(v.ok).toBe(true);
      expect(v.entries).toBeGreaterThan(before.length);
      expect(await t2.engine.auditVerify(t2.root)).toMatchObject({ ok: true, anchor: 'matched' });
    } finally {
      await t2.close();
    }
  });

  it('Idempotency-Key: the answer is durable across a restart, per tenant; another body is 422', async () => {
    const url = await cluster.newDatabase();
    // A data directory of its own: the audit key's ledger there remembers the other test's database.
    const dir = await mkdtemp(join(dataDir, 'idem-'));
    const open = async () => createTestEngine({ dataDir: dir, store: await openPostgresStore({ url, anchorPath: join(dir, 'audit-head') }) });
    const headers = (token: string, key: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': key });
    const t1 = await open();
    const app1 = createApp({ engine: t1.engine });
    const first = await app1.request('/v1/sessions', { method: 'POST', headers: headers(t1.rootKey, 'pg-key'), body: JSON.stringify({ objective: 'idem' }) });
    expect(first.status).toBe(201);
    const body = (await first.json()) as { id: string; agentToken: string };
    await t1.close();

    const t2 = await open();
    try {
      const app2 = createApp({ engine: t2.engine });
      // The root key is per engine here, but root's tenant scope ('') is the same.
      const again = await app2.request('/v1/sessions', { method: 'POST', headers: headers(t2.rootKey, 'pg-key'), body: JSON.stringify({ objective: 'idem' }) });
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.json()).toEqual(body);
      const other = await app2.request('/v1/sessions', { method: 'POST', headers: headers(t2.rootKey, 'pg-key'), body: JSON.stringify({ objective: 'else' }) });
      expect(other.status).toBe(422);
      expect(((await other.json()) as { error: { code: string } }).error.code).toBe('idempotency_mismatch');
      expect((await t2.store.sessions.list()).map((x) => x.id)).toEqual([body.id]);
    } finally {
      await t2.close();
    }
  });

  it('audit proofs over HTTP: key, checkpoint, inclusion and consistency proofs, verify against the checkpoint; a cut tail refuses the restart', async () => {
    const url = await cluster.newDatabase();
    const dir = await mkdtemp(join(dataDir, 'proofs-'));
    const open = async () => createTestEngine({ dataDir: dir, store: await openPostgresStore({ url, anchorPath: join(dir, 'audit-head') }) });
    const auth = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });
    const t1 = await open();
    let head: SignedHead;
    try {
      const app = createApp({ engine: t1.engine });
      const get = async <T>(path: string, init: RequestInit = {}): Promise<T> => {
        const r = await app.request(path, { headers: auth(t1.rootKey), ...init });
        expect(r.status, path).toBe(200);
        return (await r.json()) as T;
      };
      for (const name of ['a', 'b', 'c']) await t1.engine.createTenant(t1.root, name);
      const key = parsePublicKey((await get<{ publicKey: string }>('/v1/audit/key')).publicKey);
      head = await get<SignedHead>('/v1/audit/checkpoints', { method: 'POST' });
      expect(head.treeSize).toBeGreaterThanOrEqual(3);
      expect(verifyHeadSignature(key, head)).toBe(true);
      const inc = await get<InclusionDocument>(`/v1/audit/proofs/inclusion/2?treeSize=${head.treeSize}`);
      expect(inc.head).toMatchObject({ treeSize: head.treeSize, rootHash: head.rootHash });
      const root = Buffer.from(head.rootHash, 'hex');
      expect(checkInclusion(Buffer.from(inc.entry, 'utf8'), 1, head.treeSize, inc.proof.map((h) => Buffer.from(h, 'hex')), root)).toBe(true);
      const first = await get<InclusionDocument>('/v1/audit/proofs/inclusion/1?treeSize=1');
      const cons = await get<ConsistencyDocument>(`/v1/audit/proofs/consistency?from=1&to=${head.treeSize}`);
      expect(checkConsistency(1, head.treeSize, leaf(Buffer.from(first.entry, 'utf8')), root, cons.proof.map((h) => Buffer.from(h, 'hex')))).toBe(true);
    } finally {
      await t1.close();
    }

    // A restart with the same key and ledger starts, and the log verifies against the published head.
    const t2 = await open();
    try {
      const app = createApp({ engine: t2.engine });
      const r = await app.request('/v1/audit/verify', { method: 'POST', headers: auth(t2.rootKey), body: JSON.stringify({ checkpoints: [head] }) });
      expect(await r.json()).toMatchObject({ ok: true, tree: { latestSigned: { ok: true }, checkpoints: [{ ok: true, treeSize: head.treeSize }] } });
    } finally {
      await t2.close();
    }

    // Someone with database access cuts the tail (guards lifted): the next start is refused.
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query('ALTER TABLE audit DISABLE TRIGGER USER; DELETE FROM audit WHERE seq > 2; ALTER TABLE audit ENABLE TRIGGER USER');
    } finally {
      await c.end();
    }
    await expect(open()).rejects.toMatchObject({ code: 'invalid_state' });
  });
});
