/**
 * Port links end to end (issue 9 §3) on real runsc: a python3 HTTP server inside the sandbox reached
 * through a link with plain fetch and no token (prefix stripped, X-Forwarded-Prefix the link's, a page's
 * relative link resolving under the link), a POST, a WebSocket through the link, the real `berth
 * port-link` CLI, and the ends of a link: revoked, expired (on the server's clock, moved forward) and the
 * session terminated, each the same 404 that names no session. Each connection is audited with the link.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Session } from '../../src/sdk/index.js';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { portApp } from '../helpers/port-app.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('port links e2e', gvisorMissing());
const BIN = join(REPO, 'bin', 'berth');
const PORT = 8000;

/** The server's clock: real time plus a shift the expiry test moves forward. */
let shiftMs = 0;
const clock = { now: () => Date.now() + shiftMs };

function run(args: string[], t: TestServer): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, BERTH_URL: t.url, BERTH_TOKEN: t.rootKey }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  return new Promise((r) => child.once('close', (code) => r({ code, out, err })));
}

async function refused(url: string): Promise<{ status: number; body: string }> {
  const r = await fetch(url);
  return { status: r.status, body: await r.text() };
}

describe.skipIf(skip)('port links: a browser URL with no token (real runsc)', () => {
  let t: TestServer;
  let s: Session;

  beforeAll(async () => {
    t = await startTestServer({ clock });
    s = await t.client.sessions.create({});
    await s.files.write('/srv.py', portApp(PORT));
    await s.exec(['python3', '/srv.py'], { background: true });
    const auth = { authorization: `Bearer ${t.rootKey}` };
    for (let i = 0; ; i++) {
      if ((await fetch(s.ports.url(PORT), { headers: auth }).catch(() => undefined))?.status === 200) break;
      if (i > 200) throw new Error(`the server inside ${s.id} never answered`);
      await new Promise((r) => setTimeout(r, 300)); // python3 is still starting
    }
  }, 240_000);
  afterAll(async () => {
    await t?.destroy();
  }, 120_000);

  it('serves the port to plain fetch: prefix stripped, X-Forwarded-Prefix the link, relative links stay under it', async () => {
    const link = await s.ports.link(PORT, { label: 'e2e' });
    expect(link.url).toBe(`${t.url}${link.prefix}/`);
    expect(link.prefix).toMatch(/^\/p\/[A-Za-z0-9_-]{43}$/);
    const r = await fetch(`${link.url}hello/there?x=1`);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ path: '/hello/there?x=1', prefix: link.prefix, auth: null });

    const page = await fetch(`${link.url}docs/page`);
    expect(page.headers.get('content-type')).toBe('text/html');
    const href = /href="([^"]+)"/.exec(await page.text())![1]!;
    const next = new URL(href, `${link.url}docs/page`); // what a browser does with the relative link
    expect(next.pathname).toBe(`${link.prefix}/docs/next`);
    expect(((await (await fetch(next)).json()) as { path: string }).path).toBe('/docs/next');

    const posted = await fetch(`${link.url}form`, { method: 'POST', body: 'a=1&b=2', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(await posted.json()).toEqual({ path: '/form', method: 'POST', body: 'a=1&b=2' });

    await expect
      .poll(async () => (await t.client.audit.query({ sessionId: s.id, limit: 1000 })).filter((e) => e.action === 'session.port.close' && e.data.linkId === link.linkId).length, { timeout: 20_000 })
      .toBeGreaterThanOrEqual(4);
    const entries = await t.client.audit.query({ sessionId: s.id, limit: 1000 });
    expect(entries.find((e) => e.action === 'session.port.open' && e.data.linkId === link.linkId)?.data).toMatchObject({ via: 'link', port: PORT });
    expect(entries.find((e) => e.action === 'session.port_link.create')?.data).toMatchObject({ linkId: link.linkId, port: PORT, label: 'e2e' });
  }, 90_000);

  it('carries a WebSocket through the link, with no token', async () => {
    const link = await s.ports.link(PORT);
    const ws = new WebSocket(link.url.replace(/^http/, 'ws'));
    const reply = await new Promise<string>((resolve, reject) => {
      ws.once('open', () => ws.send('hello through a link'));
      ws.once('message', (d) => resolve(String(d)));
      ws.once('error', reject);
    });
    expect(reply).toBe('HELLO THROUGH A LINK');
    ws.terminate();
  }, 60_000);

  it('a revoked link, an expired one and an unknown one answer the same 404, naming no session', async () => {
    const revoked = await s.ports.link(PORT);
    const expiring = await s.ports.link(PORT, { ttlS: 60 });
    expect((await fetch(revoked.url)).status).toBe(200);
    expect((await fetch(expiring.url)).status).toBe(200);
    await s.ports.revokeLink(revoked.linkId);
    shiftMs += 61_000;
    const unknown = await refused(`${t.url}/p/${'A'.repeat(43)}/`);
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.body).error.code).toBe('not_found');
    for (const url of [revoked.url, expiring.url, `${revoked.url}deeper/path`]) {
      const r = await refused(url);
      expect(r).toEqual(unknown);
      expect(r.body).not.toContain(s.id);
    }
    // The upgrade path refuses the same way.
    const ws = new WebSocket(revoked.url.replace(/^http/, 'ws'));
    const status = await new Promise<number>((resolve) => ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
    expect(status).toBe(404);
    const states = Object.fromEntries((await s.ports.links()).map((l) => [l.linkId, l.state]));
    expect([states[revoked.linkId], states[expiring.linkId]]).toEqual(['revoked', 'expired']);
  }, 60_000);

  it('berth port-link (the real CLI): prints a working URL; list and revoke; bad input exits 2', async () => {
    const made = await run(['port-link', s.id, String(PORT), '--ttl', '1h', '--label', 'cli'], t);
    expect(made.code, made.err).toBe(0);
    const url = made.out.trim();
    expect(((await (await fetch(`${url}via-cli`)).json()) as { path: string }).path).toBe('/via-cli');
    const list = await run(['port-link', 'list', s.id, '--json'], t);
    const cli = (JSON.parse(list.out) as { links: Array<{ linkId: string; label: string | null; state: string }> }).links.find((l) => l.label === 'cli')!;
    expect(cli.state).toBe('active');
    expect((await run(['port-link', 'revoke', s.id, cli.linkId], t)).code).toBe(0);
    expect((await fetch(url)).status).toBe(404);
    expect((await run(['port-link', s.id, String(PORT), '--ttl', '8d'], t)).code).toBe(2);
    expect((await run(['port-link', s.id, '70000'], t)).code).toBe(2);
  }, 90_000);

  it('links end with their session', async () => {
    const link = await s.ports.link(PORT);
    expect((await fetch(link.url)).status).toBe(200);
    await s.terminate();
    expect((await fetch(link.url)).status).toBe(404);
    expect((await s.ports.links()).find((l) => l.linkId === link.linkId)?.state).toBe('ended');
  }, 90_000);
});
