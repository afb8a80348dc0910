/**
 * Issue 7 §12: what Node's HTTP parser rejects (a bad request line, two Content-Lengths, headers over the
 * limit) is answered with the documented `{"error":{code,message}}` body instead of an empty one; a policy
 * with a lone surrogate is a 400 naming the field, not a 500; a client that goes away in the middle of an
 * exec stream is one info line in the log, never an error with a stack. Against the real server process.
 */
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { client, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('malformed-HTTP faults', gvisorMissing());

/** Sends raw bytes and returns everything the server answers until it closes the connection. */
async function raw(url: string, bytes: string): Promise<{ status: number; headers: string; body: string }> {
  const { hostname, port } = new URL(url);
  const text = await new Promise<string>((resolve, reject) => {
    const s = connect({ host: hostname, port: Number(port) });
    let out = '';
    s.on('data', (b: Buffer) => (out += b.toString()));
    s.on('end', () => resolve(out));
    s.on('error', reject);
    s.end(bytes);
    setTimeout(() => s.destroy(new Error(`no answer; got ${JSON.stringify(out)}`)), 10_000).unref();
  });
  const [head = '', body = ''] = text.split('\r\n\r\n');
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]), headers: head, body };
}

describe.skipIf(skip)('issue 7 §12: malformed HTTP', () => {
  let dataDir = '';
  let server: ServerProcess;
  beforeAll(async () => {
    dataDir = await tempDataDir('http');
    server = await startServerProcess({ dataDir });
  });
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it.each([
    ['a bad request line', 'GARBAGE\r\n\r\n', 400, 'invalid_argument'],
    ['two Content-Lengths', 'POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab', 400, 'invalid_argument'],
    ['headers over the limit', `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'payload_too_large'],
  ])('%s gets the JSON error body', async (_what, bytes, status, code) => {
    const r = await raw(server.url, bytes);
    expect(r.status).toBe(status);
    expect(r.headers).toMatch(/content-type: application\/json/i);
    const body = JSON.parse(r.body) as { error: { code: string; message: string } };
    expect(body.error.code).toBe(code);
    expect(body.error.message.length).toBeGreaterThan(10);
    // The server is fine afterwards.
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  it('PUT /v1/policy with a lone surrogate is a 400 naming the field', async () => {
    const res = await fetch(`${server.url}/v1/policy`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${server.token}`, 'content-type': 'application/json' },
      body: '{"policy":"\\ud800"}',
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string; details: { field: string } } }).error).toMatchObject({ code: 'invalid_argument', details: { field: 'policy' } });
  });

  it('a client leaving an exec stream is one info line, never an error', { timeout: 120_000 }, async () => {
    const s = await client(server).sessions.create();
    const before = server.stdout().length;
    for (let i = 0; i < 5; i++) {
      const ac = new AbortController();
      const res = await fetch(`${server.url}/v1/sessions/${s.id}/exec`, {
        method: 'POST',
        headers: { authorization: `Bearer ${server.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ argv: ['sh', '-c', 'while :; do echo x; sleep 0.01; done'] }),
        signal: ac.signal,
      });
      const reader = res.body?.getReader();
      await reader?.read();
      await sleep(200 + 100 * i);
      ac.abort();
    }
    await sleep(1500);
    const lines = server.stdout().slice(before).trim().split('\n').map((l) => JSON.parse(l) as { level: string; msg: string; stack?: string });
    expect(lines.filter((l) => l.level === 'error' || l.stack)).toEqual([]);
    expect(lines.filter((l) => l.level === 'info' && /^exec client went away/.test(l.msg)).length).toBe(5);
    await s.terminate();
  });
});
