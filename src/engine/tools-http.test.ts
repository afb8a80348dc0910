import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkSettings, normalizeAllowList } from './gate-state.js';
import { httpRequest } from './tools-http.js';

describe('the egress allow-list in gate settings', () => {
  it('normalizes entries and refuses what is not a host, naming the field', () => {
    expect(normalizeAllowList([' API.Example.com ', 'api.example.com', '[::1]:80'])).toEqual(['api.example.com', '[::1]:80']);
    for (const bad of ['http://x.com', 'x.com/path', 'a b', 'x.com:0', 'x.com:70000', '*', '']) {
      expect(() => normalizeAllowList([bad]), bad).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    }
    expect(() => checkSettings({ breaker: { failures: 0, perMinute: 1 }, httpAllow: [], approvalTtlS: 0 })).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => checkSettings({ breaker: { failures: 1, perMinute: 1 }, httpAllow: [], approvalTtlS: -1 })).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => checkSettings({ breaker: { failures: 1, perMinute: 1 }, httpAllow: [], egressAllowCidr: ['nope'], approvalTtlS: 1 })).toThrow(
      expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field: 'egressAllowCidr' }) }),
    );
  });
});

describe('httpRequest', () => {
  let server: Server;
  let port = 0;
  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.url === '/redirect') {
        res.writeHead(302, { location: 'http://elsewhere.invalid/' });
        return res.end();
      }
      if (req.url === '/big') return res.end(Buffer.alloc(5000, 97));
      if (req.url === '/bin') return res.end(Buffer.from([0xff, 0xfe, 0x00]));
      res.setHeader('x-seen-host', String(req.headers.host));
      res.end(`${req.method} ${req.url}`);
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise((done) => server.close(done)));

  // Every name resolves to loopback here (as a rebinding name would); the loopback range is allowed.
  const opts = () => ({
    allow: [`127.0.0.1:${port}`, `rebind.test:${port}`, '127.0.0.1:1'],
    cidrs: ['127.0.0.0/8'],
    sessionId: 'session_t',
    resolve: async () => ['127.0.0.1'],
    timeoutMs: 5000,
    maxBytes: 1000,
  });

  it('returns status, headers and a text or base64 body; never follows a redirect', async () => {
    const base = `http://127.0.0.1:${port}`;
    expect(await httpRequest({ method: 'GET', url: `${base}/a`, headers: { host: 'spoofed.example' } }, opts())).toMatchObject({
      output: { status: 200, body: 'GET /a', truncated: false, headers: { 'x-seen-host': `127.0.0.1:${port}` } },
    });
    expect(await httpRequest({ method: 'GET', url: `${base}/redirect` }, opts())).toMatchObject({ output: { status: 302, headers: { location: 'http://elsewhere.invalid/' } } });
    expect(await httpRequest({ method: 'GET', url: `${base}/bin` }, opts())).toMatchObject({ output: { bodyBase64: Buffer.from([0xff, 0xfe, 0x00]).toString('base64') } });
    expect(await httpRequest({ method: 'POST', url: `${base}/p`, body: 'x' }, opts())).toMatchObject({ output: { status: 200, body: 'POST /p' } });
  });

  it('connects to the address that was checked, never to a new resolution of the name', async () => {
    // rebind.test resolves only through the checked resolver: the request can only arrive through the pin.
    expect(await httpRequest({ method: 'GET', url: `http://rebind.test:${port}/x` }, opts())).toMatchObject({
      output: { status: 200, body: 'GET /x', headers: { 'x-seen-host': `rebind.test:${port}` } },
    });
    // A name that resolves into a restricted range is refused before any connection.
    const metadata = { ...opts(), resolve: async () => ['169.254.169.254'] };
    expect(await httpRequest({ method: 'GET', url: `http://rebind.test:${port}/x` }, metadata)).toMatchObject({ outputError: expect.stringContaining('address-range') });
    expect(await httpRequest({ method: 'GET', url: `http://127.0.0.1:${port}/x` }, { ...opts(), cidrs: [] })).toMatchObject({ outputError: expect.stringContaining('--egress-allow-cidr 127.0.0.0/8') });
    expect(await httpRequest({ method: 'GET', url: `http://other.test:${port}/x` }, opts())).toMatchObject({ outputError: expect.stringContaining('allow-list') });
  });

  it('refuses a body past the cap, and reports a refused connection', async () => {
    expect(await httpRequest({ method: 'GET', url: `http://127.0.0.1:${port}/big` }, opts())).toMatchObject({ outputError: expect.stringContaining('truncated') });
    expect(await httpRequest({ method: 'GET', url: 'http://127.0.0.1:1/' }, opts())).toMatchObject({ outputError: expect.stringContaining('ECONNREFUSED') });
  });
});
