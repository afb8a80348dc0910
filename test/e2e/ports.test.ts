/**
 * Ports end to end (issue 9 §3) on real runsc: an HTTP server a program runs inside the sandbox (python3,
 * started as a background process) reached through the proxy route, a WebSocket through the same route,
 * the real `berth port-forward` CLI, and a request that wakes a hibernated session. Bad input: a port
 * outside 1-65535 is 400, nothing listening is 502 port_closed naming the port. Each connection is audited.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Session } from '../../src/sdk/index.js';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { portApp } from '../helpers/port-app.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('ports e2e', gvisorMissing());
const BIN = join(REPO, 'bin', 'berth');
const PORT = 8000;
const SERVER = portApp(PORT);

describe.skipIf(skip)('ports: proxy, WebSocket, port-forward and wake (real runsc)', () => {
  let t: TestServer;
  let s: Session;
  const auth = () => ({ authorization: `Bearer ${t.rootKey}` });
  const up = async () => {
    for (let i = 0; i < 200; i++) {
      if ((await fetch(s.ports.url(PORT), { headers: auth() })).status === 200) return;
      await new Promise((r) => setTimeout(r, 300)); // python3 is still starting
    }
    throw new Error(`the server inside ${s.id} never answered`);
  };

  beforeAll(async () => {
    t = await startTestServer();
    s = await t.client.sessions.create({});
    await s.files.write('/srv.py', SERVER);
    await s.exec(['python3', '/srv.py'], { background: true });
    await up();
  }, 240_000);
  afterAll(async () => {
    await t?.destroy();
  }, 120_000);

  it('proxies HTTP: prefix stripped, X-Forwarded-Prefix set, the token not passed on', async () => {
    const prefix = `/v1/sessions/${s.id}/ports/${PORT}`;
    expect(s.ports.url(PORT)).toBe(`${t.url}${prefix}/`);
    const r = await fetch(`${s.ports.url(PORT)}hello/there?x=1`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ path: '/hello/there?x=1', prefix, auth: null });
  }, 60_000);

  it('refuses without a token, a bad port with 400, and a closed port with 502 naming it', async () => {
    expect((await fetch(s.ports.url(PORT))).status).toBe(401);
    for (const bad of ['0', '65536', 'http']) {
      const r = await fetch(`${t.url}/v1/sessions/${s.id}/ports/${bad}/`, { headers: auth() });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('invalid_argument');
    }
    const r = await fetch(s.ports.url(8001), { headers: auth() });
    expect(r.status).toBe(502);
    const body = (await r.json()) as { error: { code: string; message: string; details: { port: number } } };
    expect(body.error.code).toBe('port_closed');
    expect(body.error.details.port).toBe(8001);
    expect(body.error.message).toContain('8001');
  }, 60_000);

  it('carries a WebSocket through the proxy', async () => {
    const ws = new WebSocket(s.ports.url(PORT).replace(/^http/, 'ws'), { headers: auth() });
    const reply = await new Promise<string>((resolve, reject) => {
      ws.once('open', () => ws.send('hello through berth'));
      ws.once('message', (d) => resolve(String(d)));
      ws.once('error', reject);
    });
    expect(reply).toBe('HELLO THROUGH BERTH');
    ws.terminate();
  }, 60_000);

  it('berth port-forward (the real CLI) serves the port locally until Ctrl-C', async () => {
    const child = spawn(process.execPath, [BIN, 'port-forward', s.id, `0:${PORT}`, '--json'], {
      env: { ...process.env, BERTH_URL: t.url, BERTH_TOKEN: t.rootKey },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    await expect.poll(() => out.includes('\n') || child.exitCode !== null, { timeout: 30_000 }).toBe(true);
    expect(child.exitCode, err).toBeNull();
    const { address } = JSON.parse(out) as { address: string };
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`http://${address}/via-forward/${i}`);
      expect(((await r.json()) as { path: string }).path).toBe(`/via-forward/${i}`);
    }
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  }, 90_000);

  it('audits each connection: open, and close with the bytes each way', async () => {
    await (await fetch(`${s.ports.url(PORT)}audited`, { headers: auth() })).text();
    await expect
      .poll(async () => (await t.client.audit.query({ sessionId: s.id, limit: 1000 })).filter((e) => e.action === 'session.port.close').length, { timeout: 20_000 })
      .toBeGreaterThan(0);
    const entries = await t.client.audit.query({ sessionId: s.id, limit: 1000 });
    const close = entries.filter((e) => e.action === 'session.port.close').at(-1) as unknown as { data: Record<string, number | string> };
    expect(close.data.port).toBe(PORT);
    expect(close.data.bytesToSandbox).toBeGreaterThan(0);
    expect(close.data.bytesFromSandbox).toBeGreaterThan(0);
    expect(entries.some((e) => e.action === 'session.port.open')).toBe(true);
  }, 60_000);

  it('a request to a hibernated session wakes it', async () => {
    await s.hibernate();
    expect((await s.refresh()).state).toBe('hibernated');
    // The listening server was checkpointed with the machine; the first request wakes it.
    const r = await fetch(`${s.ports.url(PORT)}after-wake`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(((await r.json()) as { path: string }).path).toBe('/after-wake');
    expect((await s.refresh()).state).toBe('running');
  }, 180_000);
});
