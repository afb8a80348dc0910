import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkSettings, normalizeAllowList } from './gate-state.js';
import { checkHost, httpRequest } from './tools-http.js';

describe('the http allow-list', () => {
  it('matches host (default port only), host:port and *.domain', () => {
    const allow = ['api.example.com', '127.0.0.1:8080', '*.internal.test'];
    expect(checkHost('https://api.example.com/v1', allow).ok).toBe(true);
    expect(checkHost('http://api.example.com/', allow).ok).toBe(true);
    expect(checkHost('https://API.example.com/', allow).ok).toBe(true);
    expect(checkHost('https://api.example.com:8443/', allow).ok).toBe(false);
    expect(checkHost('https://evil.api.example.com/', allow).ok).toBe(false);
    expect(checkHost('https://api.example.com.evil.net/', allow).ok).toBe(false);
    expect(checkHost('http://127.0.0.1:8080/x', allow).ok).toBe(true);
    expect(checkHost('http://127.0.0.1/x', allow).ok).toBe(false);
    expect(checkHost('http://a.internal.test/', allow).ok).toBe(true);
    expect(checkHost('http://internal.test/', allow).ok).toBe(false);
    expect(checkHost('http://user:pw@api.example.com/', allow).ok).toBe(true);
    expect(checkHost('ftp://api.example.com/', allow).ok).toBe(false);
    expect(checkHost('http://api.example.com/', []).ok).toBe(false);
  });

  it('normalizes entries and refuses what is not a host', () => {
    expect(normalizeAllowList([' API.Example.com ', 'api.example.com', '[::1]:80'])).toEqual(['api.example.com', '[::1]:80']);
    for (const bad of ['http://x.com', 'x.com/path', 'a b', 'x.com:0', 'x.com:70000', '*', '']) {
      expect(() => normalizeAllowList([bad]), bad).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    }
    expect(() => checkSettings({ breakerFailures: 0, breakerPerMinute: 1, httpAllow: [], approvalTtlS: 0 })).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => checkSettings({ breakerFailures: 1, breakerPerMinute: 1, httpAllow: [], approvalTtlS: -1 })).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
  });
});

describe('httpRequest', () => {
  let server: Server;
  let base = '';
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
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((done) => server.close(done)));

  const opts = () => ({ allow: [new URL(base).host], timeoutMs: 5000, maxBytes: 1000 });

  it('returns status, headers and a text or base64 body; never follows a redirect', async () => {
    expect(await httpRequest({ method: 'GET', url: `${base}/a`, headers: { host: 'spoofed.example' } }, opts())).toMatchObject({
      output: { status: 200, body: 'GET /a', truncated: false, headers: { 'x-seen-host': new URL(base).host } },
    });
    expect(await httpRequest({ method: 'GET', url: `${base}/redirect` }, opts())).toMatchObject({ output: { status: 302, headers: { location: 'http://elsewhere.invalid/' } } });
    expect(await httpRequest({ method: 'GET', url: `${base}/bin` }, opts())).toMatchObject({ output: { bodyBase64: Buffer.from([0xff, 0xfe, 0x00]).toString('base64') } });
  });

  it('refuses a body past the cap, a host off the list, and reports a refused connection', async () => {
    expect(await httpRequest({ method: 'GET', url: `${base}/big` }, opts())).toMatchObject({ outputError: expect.stringContaining('truncated') });
    expect(await httpRequest({ method: 'GET', url: 'http://127.0.0.2:1/' }, opts())).toMatchObject({ outputError: expect.any(String) });
    expect(await httpRequest({ method: 'GET', url: 'http://127.0.0.1:1/' }, { ...opts(), allow: ['127.0.0.1:1'] })).toMatchObject({ outputError: expect.any(String) });
  });
});
