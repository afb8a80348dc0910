/**
 * Port links over real HTTP in this process (real engine and SQLite, the in-memory driver's TCP at the
 * port): the link reaches a listener inside the sandbox with no token, a dead link is refused with the same
 * 404 on the HTTP and the upgrade path, and the request log never shows the token. On real runsc (with a
 * WebSocket through a link): test/e2e/port-links.test.ts.
 */
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Berth, type Session } from '../src/sdk/index.js';
import { createApp } from '../src/server/app.js';
import type { Logger } from '../src/server/log.js';
import { startServer, type RunningServer } from '../src/server/serve.js';
import { upgradeHandlers } from '../src/server/upgrades.js';
import { createTestEngine, type TestEngine } from './helpers/engine.js';

let t: TestEngine;
let server: RunningServer;
let s: Session;
const logged: string[] = [];
const log: Logger = {
  debug: (m, f) => void logged.push(JSON.stringify({ m, ...f })),
  info: (m, f) => void logged.push(JSON.stringify({ m, ...f })),
  warn: (m, f) => void logged.push(JSON.stringify({ m, ...f })),
  error: (m, f) => void logged.push(JSON.stringify({ m, ...f })),
};

/** Port 8000 inside: answers each request with what it saw. */
function serve(sock: Duplex): void {
  let seen = '';
  sock.on('error', () => undefined);
  const onData = (c: Buffer) => {
    seen += c.toString('latin1');
    const end = seen.indexOf('\r\n\r\n');
    if (end < 0) return;
    const [line = '', ...hs] = seen.slice(0, end).split('\r\n');
    const h = (name: string) => hs.find((x) => x.toLowerCase().startsWith(`${name}:`))?.slice(name.length + 1).trim() ?? null;
    const body = JSON.stringify({ line, prefix: h('x-forwarded-prefix'), auth: h('authorization') });
    sock.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
  };
  sock.on('data', onData);
}

beforeAll(async () => {
  t = await createTestEngine();
  server = await startServer({ app: createApp({ engine: t.engine, log }), host: '127.0.0.1', port: 0, graceMs: 200, upgrades: { handlers: upgradeHandlers(t.engine, log) } });
  s = await new Berth({ url: server.url, token: t.rootKey }).sessions.create({});
  await t.driver.listenTcp((await t.engine.getSession(t.root, s.id)).sandboxId!, 8000, serve);
});
afterAll(async () => {
  await server?.close();
  await t?.close();
});

/** Sends a raw upgrade request; resolves with everything read until `until` appears (or the end). */
function upgrade(path: string, until: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = connect(server.port, '127.0.0.1');
    let got = '';
    c.on('data', (d) => {
      got += d.toString();
      if (got.includes(until)) {
        c.destroy();
        resolve(got);
      }
    });
    c.on('end', () => resolve(got));
    c.on('error', reject);
    c.write(`GET ${path} HTTP/1.1\r\nhost: x\r\nupgrade: echo\r\nconnection: Upgrade\r\n\r\n`);
  });
}

describe('a port link over HTTP', () => {
  it('reaches the port with no token, prefix stripped and sent as X-Forwarded-Prefix', async () => {
    const link = await s.ports.link(8000);
    const r = await fetch(`${link.url}a/b?c=1`, { headers: { authorization: 'Bearer not-passed-on' } });
    expect(await r.json()).toEqual({ line: 'GET /a/b?c=1 HTTP/1.1', prefix: link.prefix, auth: null });
    expect(await (await fetch(`${server.url}${link.prefix}`)).json()).toMatchObject({ line: 'GET / HTTP/1.1' });
  });

  it('refuses a dead link with one 404 on both paths, and logs never show a token', async () => {
    const link = await s.ports.link(8000);
    await s.ports.revokeLink(link.linkId);
    const token = link.prefix.slice(3);
    const plain = await fetch(`${link.url}x`);
    const unknown = await fetch(`${server.url}/p/${'B'.repeat(43)}/x`);
    expect([plain.status, unknown.status]).toEqual([404, 404]);
    expect(await plain.json()).toEqual(await unknown.json());
    const refused = await upgrade(`${link.prefix}/ws`, '}');
    expect(refused).toMatch(/^HTTP\/1\.1 404 /);
    expect(refused).toContain('"not_found"');
    expect(refused).not.toContain(s.id);
    expect(logged.some((l) => l.includes('/p/…'))).toBe(true);
    expect(logged.filter((l) => l.includes(token))).toEqual([]);
  });
});
