/**
 * The host side of the egress proxy over plain loopback sockets: the real engine (SQLite, Cedar, gate) with
 * the in-memory driver; each accepted socket is handed to gate.egress.serve() as the agent's stream would be.
 * Upstream servers count their accepts, so "a refused host never receives a byte" is measured, not assumed.
 */
import { createServer as createHttpServer, request as httpRequest, type Server as HttpServer } from 'node:http';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_POLICY_TEXT } from '../../src/policy/index.js';
import { toSessionView } from '../../src/protocol/views.js';
import { createTestEngine, type TestEngine } from '../helpers/engine.js';

interface Counted {
  server: Server | HttpServer;
  port: number;
  accepts: number;
  seen: string[];
}

async function listen<T extends Server | HttpServer>(server: T): Promise<number> {
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return (server.address() as AddressInfo).port;
}

/** Sends raw bytes to the proxy and reads until the proxy closes (or `until` matches). */
function exchange(port: number, send: string | Buffer, until?: (text: string) => boolean): Promise<{ text: string; socket: Socket }> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port }, () => s.write(typeof send === 'string' ? Buffer.from(send, 'latin1') : send));
    let text = '';
    s.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (until?.(text)) resolve({ text, socket: s });
    });
    s.on('close', () => resolve({ text, socket: s }));
    s.on('error', reject);
  });
}

describe('egress proxy (host side)', () => {
  let t: TestEngine;
  let front: Server;
  let frontPort = 0;
  let sessionId = '';
  let echo: Counted;
  let web: Counted;

  beforeAll(async () => {
    t = await createTestEngine();
    const { session } = await t.engine.createSession(t.root, {});
    sessionId = session.id;
    front = createServer({ allowHalfOpen: true }, (s) => void t.engine.gate.egress.serve(sessionId, s));
    frontPort = await listen(front);
    echo = { server: createServer((s) => (echo.accepts++, s.pipe(s))), port: 0, accepts: 0, seen: [] };
    echo.port = await listen(echo.server);
    web = {
      server: createHttpServer((req, res) => {
        web.seen.push(`${req.method} ${req.url} host=${req.headers.host} connection=${req.headers.connection} proxy=${req.headers['proxy-connection'] ?? '-'}`);
        res.end(`hello ${req.url}`);
      }),
      port: 0,
      accepts: 0,
      seen: [],
    };
    web.server.on('connection', () => web.accepts++);
    web.port = await listen(web.server);
  });
  afterAll(async () => {
    front?.close();
    echo?.server.close();
    web?.server.close();
    await t?.close();
  });

  it('refuses everything by default: 403 naming the host, the rule and the fix; the host never sees a connection', async () => {
    const before = echo.accepts;
    const r = await exchange(frontPort, `CONNECT 127.0.0.1:${echo.port} HTTP/1.1\r\nHost: 127.0.0.1:${echo.port}\r\n\r\n`);
    expect(r.text).toMatch(/^HTTP\/1\.1 403 /);
    expect(r.text).toContain(`127.0.0.1:${echo.port}`);
    expect(r.text).toContain('X-Berth-Egress-Rule: allow-list');
    expect(r.text).toContain(`berth gate set ${sessionId} --egress-allow 127.0.0.1:${echo.port}`);
    expect(echo.accepts).toBe(before);
  });

  it('refuses a listed host in a restricted range until the operator allows the range', async () => {
    await t.engine.gate.setGate(t.root, sessionId, { egressAllow: [`127.0.0.1:${echo.port}`, `localhost:${web.port}`] });
    const before = echo.accepts;
    const r = await exchange(frontPort, `CONNECT 127.0.0.1:${echo.port} HTTP/1.1\r\n\r\n`);
    expect(r.text).toMatch(/^HTTP\/1\.1 403 /);
    expect(r.text).toContain('X-Berth-Egress-Rule: address-range');
    expect(r.text).toContain('--egress-allow-cidr 127.0.0.0/8');
    // A name is checked by the address it resolves to: localhost is loopback.
    const byName = await exchange(frontPort, `GET http://localhost:${web.port}/x HTTP/1.1\r\nHost: localhost:${web.port}\r\n\r\n`);
    expect(byName.text).toContain('X-Berth-Egress-Rule: address-range');
    expect([echo.accepts, web.accepts]).toEqual([before, 0]);
  });

  it('tunnels CONNECT byte for byte once allowed, and relays plain HTTP in origin form', async () => {
    await t.engine.gate.setGate(t.root, sessionId, { egressAllow: [`127.0.0.1:${echo.port}`, `localhost:${web.port}`], egressAllowCidr: ['127.0.0.0/8', '::1/128'] });
    const payload = Buffer.from([0x16, 0x03, 0x01, 0x00, 0xff, 0x00, 0x0d, 0x0a]).toString('latin1');
    const r = await exchange(frontPort, `CONNECT 127.0.0.1:${echo.port} HTTP/1.1\r\n\r\n${payload}`, (x) => x.endsWith(payload));
    expect(r.text).toBe(`HTTP/1.1 200 Connection established\r\n\r\n${payload}`);
    r.socket.end();
    const body = await new Promise<string>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: frontPort, path: `http://localhost:${web.port}/p?q=1`, headers: { host: `localhost:${web.port}`, 'proxy-connection': 'keep-alive' } }, (res) => {
        let b = '';
        res.on('data', (d: Buffer) => (b += d.toString()));
        res.on('end', () => resolve(`${res.statusCode} ${b}`));
      });
      req.on('error', reject);
      req.end();
    });
    expect(body).toBe('200 hello /p?q=1');
    expect(web.seen.at(-1)).toBe(`GET /p?q=1 host=localhost:${web.port} connection=close proxy=-`);
  });

  it('a Cedar forbid on net.connect wins over the allow-list', async () => {
    await t.engine.gate.setPolicy(
      t.root,
      `${DEFAULT_POLICY_TEXT}\n@id("no-echo")\n@reason("the echo service is off limits")\nforbid (principal, action == Action::"net.connect", resource) when { context.port == ${echo.port} };\n`,
    );
    const before = echo.accepts;
    const r = await exchange(frontPort, `CONNECT 127.0.0.1:${echo.port} HTTP/1.1\r\n\r\n`);
    expect(r.text).toContain('X-Berth-Egress-Rule: policy');
    expect(r.text).toContain('no-echo');
    expect(echo.accepts).toBe(before);
    await t.engine.gate.setPolicy(t.root, DEFAULT_POLICY_TEXT);
  });

  it('answers 400 to what is not a proxy request, and 502 when the host refuses', async () => {
    expect((await exchange(frontPort, 'GET /relative HTTP/1.1\r\n\r\n')).text).toMatch(/^HTTP\/1\.1 400 /);
    expect((await exchange(frontPort, 'CONNECT nohost HTTP/1.1\r\n\r\n')).text).toMatch(/^HTTP\/1\.1 400 /);
    await t.engine.gate.setGate(t.root, sessionId, { egressAllow: ['127.0.0.1:1'], egressAllowCidr: ['127.0.0.0/8'] });
    expect((await exchange(frontPort, 'CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n')).text).toMatch(/^HTTP\/1\.1 502 /);
  });

  it('audits every connection with host, port, bytes each way and duration, and meters the session', async () => {
    await t.engine.flush();
    const audit = (await t.engine.auditQuery(t.root, { sessionId, limit: 1000 })).filter((e) => e.action === 'egress.connect');
    const ok = audit.find((e) => e.outcome === 'ok' && e.data.method === 'CONNECT');
    expect(ok?.data).toMatchObject({ host: '127.0.0.1', port: echo.port, bytesOut: 8, bytesIn: 8, durationMs: expect.any(Number), entry: `127.0.0.1:${echo.port}` });
    expect(audit.filter((e) => e.outcome === 'denied').map((e) => e.data.rule)).toEqual(['allow-list', 'address-range', 'address-range', 'policy']);
    const m = toSessionView(await t.engine.getSession(t.root, sessionId), Date.now()).metering;
    expect(m).toMatchObject({ egressRefused: 4, egressConnections: 3, egressBytesOut: expect.any(Number), egressBytesIn: expect.any(Number) });
    expect(m.egressBytesIn).toBeGreaterThan(8);
  });

  it('refuses connections of a session that is not running', async () => {
    await t.engine.gate.setGate(t.root, sessionId, { egressAllow: [`127.0.0.1:${echo.port}`], egressAllowCidr: ['127.0.0.0/8'] });
    await t.engine.pause(t.root, sessionId);
    const before = echo.accepts;
    expect((await exchange(frontPort, `CONNECT 127.0.0.1:${echo.port} HTTP/1.1\r\n\r\n`)).text).toMatch(/^HTTP\/1\.1 403 /);
    expect(echo.accepts).toBe(before);
    await t.engine.resume(t.root, sessionId);
  });

  it('refuses bad allow-list entries at gate set, naming the field', async () => {
    await expect(t.engine.gate.setGate(t.root, sessionId, { egressAllow: ['http://x'] })).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'egressAllow' } });
    await expect(t.engine.gate.setGate(t.root, sessionId, { egressAllowCidr: ['10.0.0.1'] })).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'egressAllowCidr' } });
    await expect(t.engine.gate.setGate(t.root, sessionId, { egressAllow: ['a.test'], httpAllow: ['b.test'] })).rejects.toMatchObject({ code: 'invalid_argument' });
  });
});
