/**
 * Port links in the engine (real SessionManager, SQLite, in-memory driver): who may create, list and
 * revoke them (operators of the session's tenant; agent tokens refused, another tenant's session not
 * found), input checks, the audit, and when a link stops working (expiry on a fake clock, revoke, the
 * session's end), each refused with the same not_found. A link survives a restart over the same file.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sha256Hex, type AppError, type Principal } from '../core/index.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let now = Date.UTC(2026, 11, 5, 12);
const clock = { now: () => now };
let t: TestEngine;
beforeEach(async () => {
  now = Date.UTC(2026, 11, 5, 12);
  t = await createTestEngine({ clock });
});
afterEach(async () => {
  await t.close();
});

const codeOf = (p: Promise<unknown>) => p.then(() => 'resolved', (e: AppError) => e.code ?? 'no-code');

/** A session whose port 8000 answers "hi from <n>" to each connection and closes. */
async function serving(): Promise<string> {
  const { session } = await t.engine.createSession(t.root, {});
  let n = 0;
  await t.driver.listenTcp(session.sandboxId!, 8000, (sock) => {
    sock.on('error', () => undefined); // reset when the session ends
    sock.end(`hi from ${++n}`);
  });
  return session.id;
}

/** Reads the connection to its end, then closes our side (as the proxy does). */
async function readAll(s: import('node:stream').Duplex): Promise<string> {
  let out = '';
  for await (const c of s) out += String(c);
  s.destroy();
  return out;
}

describe('port links in the engine', () => {
  it('creates a link whose token is kept only as its hash, opens the port through it and audits both', async () => {
    const id = await serving();
    const { link, token } = await t.engine.portLinks.create(t.root, id, { port: 8000, label: 'docs' });
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(link).toMatchObject({ sessionId: id, port: 8000, label: 'docs', state: 'active', tokenHash: sha256Hex(token), expiresAt: now + 3_600_000 });
    expect(JSON.stringify(await t.store.portLinks.get(link.id))).not.toContain(token);
    const c = await t.engine.portLinks.open(token);
    expect(c.link.id).toBe(link.id);
    expect(await readAll(c.socket)).toBe('hi from 1');
    const audit = await t.engine.auditQuery(t.root, { sessionId: id });
    expect(audit.find((e) => e.action === 'session.port_link.create')).toMatchObject({ principal: { kind: 'root' }, data: { linkId: link.id, port: 8000, ttlS: 3600 } });
    expect(audit.find((e) => e.action === 'session.port.open')?.data).toMatchObject({ via: 'link', linkId: link.id, port: 8000 });
  });

  it('refuses bad input: ttl outside 1 s..7 days or not whole seconds, port outside 1-65535, a bad label', async () => {
    const id = await serving();
    for (const ttlS of [0, -1, 604_801, 1.5, '1h']) expect(await codeOf(t.engine.portLinks.create(t.root, id, { port: 8000, ttlS }))).toBe('invalid_argument');
    for (const port of [0, 65536, 80.5, '80']) expect(await codeOf(t.engine.portLinks.create(t.root, id, { port }))).toBe('invalid_argument');
    expect(await codeOf(t.engine.portLinks.create(t.root, id, { port: 8000, label: 'x'.repeat(201) }))).toBe('invalid_argument');
    const week = await t.engine.portLinks.create(t.root, id, { port: 8000, ttlS: 604_800 });
    expect(week.link.expiresAt).toBe(now + 604_800_000);
  });

  it('is for operators of the session tenant: an agent token is refused, another tenant sees no session', async () => {
    const { session, agentToken } = await t.engine.createSession(t.root, {});
    const agent = await t.engine.authenticate(agentToken);
    expect(await codeOf(t.engine.portLinks.create(agent, session.id, { port: 8000 }))).toBe('forbidden');
    expect(await codeOf(t.engine.portLinks.list(agent, session.id))).toBe('forbidden');
    const other = (await t.engine.createSession(t.root, {})).session.id;
    expect(await codeOf(t.engine.portLinks.create(agent, other, { port: 8000 }))).toBe('not_found');

    const { apiKey } = await t.engine.createTenant(t.root, 'acme');
    const acme: Principal = await t.engine.authenticate(apiKey);
    const { link } = await t.engine.portLinks.create(t.root, session.id, { port: 8000 });
    expect(await codeOf(t.engine.portLinks.create(acme, session.id, { port: 8000 }))).toBe('not_found');
    expect(await codeOf(t.engine.portLinks.list(acme, session.id))).toBe('not_found');
    expect(await codeOf(t.engine.portLinks.revoke(acme, session.id, link.id))).toBe('not_found');

    const mine = (await t.engine.createSession(acme, {})).session.id;
    const made = await t.engine.portLinks.create(acme, mine, { port: 8000 });
    expect(made.link.createdBy).toEqual({ kind: 'operator', id: acme.id, tenantId: acme.tenantId });
    expect((await t.engine.portLinks.list(acme, mine)).map((l) => l.id)).toEqual([made.link.id]);
    // A link id of another session is not found through this one.
    expect(await codeOf(t.engine.portLinks.revoke(t.root, mine, link.id))).toBe('not_found');
  });

  it('stops working once expired, revoked or the session ended, each the same not_found', async () => {
    const id = await serving();
    const short = await t.engine.portLinks.create(t.root, id, { port: 8000, ttlS: 60 });
    const revoked = await t.engine.portLinks.create(t.root, id, { port: 8000 });
    const kept = await t.engine.portLinks.create(t.root, id, { port: 8000, ttlS: 7200 });
    expect(await codeOf(t.engine.portLinks.open('A'.repeat(43)))).toBe('not_found');
    expect(await codeOf(t.engine.portLinks.open('not a token'))).toBe('not_found');

    now += 60_000;
    const dead = await t.engine.portLinks.open(short.token).catch((e: AppError) => e);
    expect(dead).toMatchObject({ code: 'not_found' });
    expect((dead as AppError).details).not.toHaveProperty('sessionId');
    expect(JSON.stringify(dead)).not.toContain(id);

    const r = await t.engine.portLinks.revoke(t.root, id, revoked.link.id);
    expect(r).toMatchObject({ state: 'revoked', revokedAt: now, revokedBy: { kind: 'root', id: 'root' } });
    expect((await t.engine.portLinks.revoke(t.root, id, revoked.link.id)).revokedAt).toBe(now); // idempotent
    expect(await codeOf(t.engine.portLinks.open(revoked.token))).toBe('not_found');
    expect((await t.engine.auditQuery(t.root, { sessionId: id })).filter((e) => e.action === 'session.port_link.revoke')).toHaveLength(1);

    await readAll((await t.engine.portLinks.open(kept.token)).socket);
    expect((await t.engine.portLinks.list(t.root, id)).map((l) => l.state)).toEqual(['expired', 'revoked', 'active']);

    await t.engine.terminateSession(t.root, id);
    expect(await codeOf(t.engine.portLinks.open(kept.token))).toBe('not_found');
    expect((await t.engine.portLinks.list(t.root, id)).map((l) => l.state)).toEqual(['ended', 'revoked', 'ended']);
    expect(await codeOf(t.engine.portLinks.create(t.root, id, { port: 8000 }))).toBe('not_found');
  });
});

describe('port links across a restart', () => {
  it('are kept in the store: the same link is listed and found by its token after reopening the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-port-links-'));
    try {
      const dbPath = join(dir, 'berth.db');
      const a = await createTestEngine({ clock, dbPath, dataDir: dir });
      const { session } = await a.engine.createSession(a.root, {});
      const { link, token } = await a.engine.portLinks.create(a.root, session.id, { port: 8000, label: 'kept' });
      await a.close();
      const b = await createTestEngine({ clock, dbPath, dataDir: dir });
      try {
        expect((await b.engine.portLinks.list(b.root, session.id)).map((l) => [l.id, l.label])).toEqual([[link.id, 'kept']]);
        expect((await b.store.portLinks.getByTokenHash(sha256Hex(token)))?.id).toBe(link.id);
      } finally {
        await b.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
