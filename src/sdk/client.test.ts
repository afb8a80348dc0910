import { Readable } from 'node:stream';
/**
 * The SDK against a real HTTP server over the real engine (gate, Cedar, SQLite in memory) and the
 * in-memory driver. A fresh engine per test sits behind one server through a forwarding proxy.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createApp } from '../server/app.js';
import { startServer, type RunningServer } from '../server/serve.js';
import type { SessionManager } from '../engine/manager.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';
import { AppError, Berth } from './index.js';

let t: TestEngine;
let server: RunningServer;
let berth: Berth;
/** Sees every chunk the driver's writeFile receives (set by a test). */
let onChunk: ((c: Uint8Array) => void) | null = null;

beforeAll(async () => {
  // The engine is swapped per test through this indirection; the server stays up.
  const app = createApp({
    engine: new Proxy({} as SessionManager, { get: (_t, k) => (t.engine as any)[k]?.bind?.(t.engine) ?? (t.engine as any)[k] }),
    execHeartbeatMs: 10,
  });
  server = await startServer({ app, host: '127.0.0.1', port: 0, graceMs: 500 });
});
afterAll(async () => {
  await server.close();
});
beforeEach(async () => {
  onChunk = null;
  t = await createTestEngine({ driver: { onWriteChunk: (_id, _path, c) => onChunk?.(c) } });
  berth = new Berth({ url: server.url, token: t.rootKey });
});
afterEach(async () => {
  await t.close();
});

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(AppError);
    return (e as AppError).code;
  }
  return 'no error';
}

describe('options', () => {
  it('rejects bad options instead of fixing them', () => {
    expect(() => new Berth({ url: 'not a url' })).toThrow(AppError);
    expect(() => new Berth({ url: 'ftp://x' })).toThrow(/http or https/);
    expect(() => new Berth({ timeoutMs: -1 })).toThrow(/timeoutMs/);
  });
});

describe('sessions', () => {
  it('create → Session with id, agentToken and info', async () => {
    const s = await berth.sessions.create({ objective: 'test', memoryMb: 256, env: { A: 'b' } });
    expect(s.id).toMatch(/^ses_/);
    expect(s.agentToken).toMatch(/^bta_/);
    expect(s.info).toMatchObject({ state: 'running', settings: { memoryMb: 256, env: ['A'] } });
    expect((s.info as any).agentToken).toBeUndefined();
    expect(s.toJSON()).toMatchObject({ id: s.id, agentToken: s.agentToken });
    const got = await berth.sessions.get(s.id);
    expect(got.agentToken).toBeNull();
    expect(got.info.id).toBe(s.id);
    expect((await berth.sessions.list()).map((x) => x.id)).toEqual([s.id]);
  });
  it('lifecycle verbs update info', async () => {
    const s = await berth.sessions.create();
    expect((await s.pause()).state).toBe('paused');
    expect(s.state).toBe('paused');
    await s.resume();
    await s.hibernate();
    expect(s.state).toBe('hibernated');
    await s.wake();
    expect((await s.refresh()).state).toBe('running');
    await s.terminate();
    expect(s.state).toBe('terminated');
  });
  it('HTTP errors become AppErrors with the server code', async () => {
    expect(await code(berth.sessions.get('ses_00000000000000000000'))).toBe('not_found');
    expect(await code(berth.sessions.create({ memoryMb: 1 }))).toBe('invalid_argument');
    const e = (await berth.sessions.create({ memoryMb: 1 }).catch((x) => x)) as AppError;
    expect(e.details?.field).toBe('memoryMb');
    expect(await code(new Berth({ url: server.url }).sessions.list())).toBe('unauthenticated');
    const s = await berth.sessions.create();
    await s.pause();
    expect(await code(s.pause())).toBe('invalid_state');
  });
  it('a server that is not there → unavailable', async () => {
    const dead = new Berth({ url: 'http://127.0.0.1:1', token: 'x' });
    const e = (await dead.sessions.list().catch((x) => x)) as AppError;
    expect(e.code).toBe('unavailable');
    expect(e.retryable).toBe(true);
  });
  it('an aborted signal → cancelled', async () => {
    const ac = new AbortController();
    ac.abort();
    expect(await code(berth.sessions.list({ signal: ac.signal }))).toBe('cancelled');
  });
  it('health needs no token', async () => {
    expect(await new Berth({ url: server.url }).health()).toMatchObject({ ok: true });
    await t.engine.close();
    expect(await new Berth({ url: server.url }).health()).toMatchObject({ ok: false });
  });
});

describe('exec', () => {
  it('streams output as an async iterable; wait() gives the exit', async () => {
    const s = await berth.sessions.create();
    const ex = await s.exec(['sh', '-c', 'echo tick 1; sleep 0.02; echo tick 2; sleep 0.02; echo tick 3']);
    expect(ex.execId).toMatch(/^exe_/);
    const seen: string[] = [];
    for await (const ev of ex) seen.push(`${ev.type}:${Buffer.from(ev.data).toString()}`);
    expect(seen).toEqual(['stdout:tick 1\n', 'stdout:tick 2\n', 'stdout:tick 3\n']);
    expect(await ex.wait()).toEqual({ code: 0, signal: null, timedOut: false });
  });
  it('run() collects stdout, stderr and the code', async () => {
    const s = await berth.sessions.create({ env: { X: 'from-session' } });
    expect(await s.run(['echo', 'hi', 'there'])).toMatchObject({ stdout: 'hi there\n', stderr: '', code: 0 });
    expect(await s.run(['sh', '-c', 'echo bye >&2; exit 7'])).toMatchObject({ stdout: '', stderr: 'bye\n', code: 7 });
    expect((await s.run(['sh', '-c', 'echo $X'])).stdout).toBe('from-session\n');
    expect((await s.run(['sh', '-c', 'echo $X'], { env: { X: 'override' } })).stdout).toBe('override\n');
    expect((await s.run(['pwd'], { cwd: '/tmp' })).stdout).toBe('/tmp\n');
  });
  it('heartbeats of a quiet command are invisible', async () => {
    const s = await berth.sessions.create();
    const ex = await s.exec(['sleep', '0.06']);
    const seen: unknown[] = [];
    for await (const ev of ex) seen.push(ev);
    expect(seen).toEqual([]);
    expect(await ex.wait()).toMatchObject({ code: 0 });
  });
  it('timeout reports timedOut', async () => {
    const s = await berth.sessions.create();
    expect(await s.run(['sleep', '10'], { timeoutMs: 30 })).toMatchObject({ timedOut: true, signal: 9 });
  });
  it('stdin from an async iterable, a Readable, or bytes', async () => {
    const s = await berth.sessions.create();
    async function* gen() {
      yield new TextEncoder().encode('one ');
      await new Promise((r) => setTimeout(r, 20));
      yield 'two';
    }
    expect((await s.run(['cat'], { stdin: gen() })).stdout).toBe('one two');
    expect((await s.run(['cat'], { stdin: Readable.from([Buffer.from('from '), Buffer.from('readable')]) })).stdout).toBe('from readable');
    const bin = new Uint8Array([0, 1, 2, 255, 10, 13]);
    expect(Array.from((await s.run(['cat'], { stdin: bin })).stdoutBytes)).toEqual(Array.from(bin));
  });
  it('kill() signals the command', async () => {
    const s = await berth.sessions.create();
    const ex = await s.exec(['sleep', '10']);
    expect(await ex.kill('SIGTERM')).toMatchObject({ signal: 15 });
    expect(await ex.wait()).toEqual({ code: 143, signal: 15, timedOut: false });
  });
  it('aborting the signal cancels and kills the command on the server', async () => {
    const s = await berth.sessions.create();
    const ac = new AbortController();
    const ex = await s.exec(['sleep', '10'], { signal: ac.signal });
    const handle = await t.engine.getExec(t.root, s.id, ex.execId);
    setTimeout(() => ac.abort(), 20);
    const e = (await ex.wait().catch((x) => x)) as AppError;
    expect(e.code).toBe('cancelled');
    await expect(handle.wait()).resolves.toMatchObject({ signal: 9 });
  });
  it('exec on an unknown session rejects at start', async () => {
    const s = await berth.sessions.create();
    await s.pause();
    expect(await code(s.exec(['ls']))).toBe('invalid_state');
    expect(await code(s.exec([]))).toBe('invalid_argument');
  });
});

describe('files', () => {
  it('write/read round-trip is binary-safe; list, stat, mkdir, rm', async () => {
    const s = await berth.sessions.create();
    const data = new Uint8Array(300_001).map((_, i) => (i * 31) & 255);
    expect(await s.files.write('/work/blob', data, { mode: 0o600 })).toEqual({ path: '/work/blob', bytes: 300_001 });
    expect(Buffer.compare(Buffer.from(await s.files.readBytes('/work/blob')), Buffer.from(data))).toBe(0);
    expect(await s.files.stat('/work/blob')).toMatchObject({ size: 300_001, mode: 0o600, type: 'file' });
    await s.files.write('/work/t.txt', 'héllo');
    expect(await s.files.readText('/work/t.txt')).toBe('héllo');
    await s.files.mkdir('/work/d/e', { parents: true });
    expect((await s.files.list('/work')).map((e) => e.name).sort()).toEqual(['blob', 'd', 't.txt']);
    await s.files.rm('/work/d', { recursive: true });
    expect(await code(s.files.stat('/work/d'))).toBe('not_found');
    expect(await code(s.files.readBytes('/missing'))).toBe('not_found');
  });
  it('a streamed upload reaches the engine while the client is still producing it', async () => {
    const s = await berth.sessions.create();
    const seen: number[] = [];
    let engineGotFirst!: () => void;
    const first = new Promise<void>((r) => (engineGotFirst = r));
    onChunk = (c) => {
      seen.push(c.byteLength);
      engineGotFirst();
    };
    let produced = 0;
    async function* source() {
      yield new Uint8Array(64 * 1024);
      produced++;
      await first; // the server must have handed the first chunk on before we produce the rest
      for (let i = 0; i < 15; i++) {
        yield new Uint8Array(64 * 1024);
        produced++;
      }
    }
    const r = await s.files.write('/stream', source());
    expect(r.bytes).toBe(16 * 64 * 1024);
    expect(produced).toBe(16);
    expect(seen.reduce((a, b) => a + b, 0)).toBe(16 * 64 * 1024);
  });
  it('read() streams chunks', async () => {
    const s = await berth.sessions.create();
    await s.files.write('/big', new Uint8Array(1024 * 1024).fill(7));
    let chunks = 0;
    let total = 0;
    for await (const c of s.files.read('/big')) {
      chunks++;
      total += c.byteLength;
    }
    expect(total).toBe(1024 * 1024);
    expect(chunks).toBeGreaterThan(1);
  });
});

describe('snapshots, tenants, audit', () => {
  it('snapshot and fork', async () => {
    const s = await berth.sessions.create();
    const snap = await s.snapshot({ name: 'base' });
    expect(snap.snapshotId).toMatch(/^snp_/);
    const branches = await berth.snapshots.fork(snap.snapshotId, { count: 2 });
    expect(branches).toHaveLength(2);
    expect(branches.every((b) => b.agentToken && b.info.parentSnapshotId === snap.snapshotId)).toBe(true);
    expect((await berth.snapshots.get(snap.snapshotId)).name).toBe('base');
    expect(await berth.snapshots.list()).toHaveLength(1);
    await berth.snapshots.delete(snap.snapshotId);
    expect(await code(berth.snapshots.get(snap.snapshotId))).toBe('not_found');
    expect(await code(berth.snapshots.fork('snp_00000000000000000000', { count: 2 }))).toBe('not_found');
    expect(await code(berth.snapshots.fork(snap.snapshotId, { count: 100 }))).toBe('invalid_argument');
  });
  it('tenants and audit', async () => {
    const acme = await berth.tenants.create('acme');
    expect(acme.apiKey).toBeTruthy();
    expect((await berth.tenants.list()).map((x) => x.name)).toEqual(['default', 'acme']);
    expect(await berth.tenants.list()).toContainEqual({ id: acme.id, name: 'acme', createdAt: acme.createdAt });
    const asTenant = new Berth({ url: server.url, token: acme.apiKey });
    expect(await asTenant.tenants.list()).toEqual([{ id: acme.id, name: 'acme', createdAt: acme.createdAt }]);
    const s = await asTenant.sessions.create();
    expect(s.info.tenantId).toBe(acme.id);
    expect(await code(asTenant.tenants.create('x'))).toBe('forbidden');
    const entries = await berth.audit.query({ afterSeq: 0, limit: 100 });
    // Reads (the tenant lists) are recorded as requests with their principal (issue 12 §2), and so is the refused create (at the end of its minute).
    expect(entries.filter((e) => e.action !== 'request').map((e) => e.action)).toEqual(['tenant.create', 'session.create', 'session.state']);
    expect(entries.filter((e) => e.action === 'request').map((e) => [e.principal.kind, e.data.route])).toEqual([
      ['root', '/v1/tenants'],
      ['root', '/v1/tenants'],
      ['operator', '/v1/tenants'],
    ]);
    expect(await berth.audit.verify()).toMatchObject({ ok: true, entries: entries.length + 1 });
    expect(await code(asTenant.audit.verify())).toBe('forbidden');
  });
});

describe('exec edge cases', () => {
  it('leaving the loop early kills the command and wait() rejects cancelled', async () => {
    const s = await berth.sessions.create();
    const ex = await s.exec(['sh', '-c', 'echo tick 1; sleep 30']);
    const handle = await t.engine.getExec(t.root, s.id, ex.execId);
    for await (const ev of ex) {
      expect(ev.type).toBe('stdout');
      break;
    }
    expect(await code(ex.wait())).toBe('cancelled');
    await expect(handle.wait()).resolves.toMatchObject({ signal: 9 });
  });
  it('wait() without iterating drains the output', async () => {
    const s = await berth.sessions.create();
    const ex = await s.exec(['sh', '-c', 'echo tick 1; sleep 0.005; echo tick 2; sleep 0.005; echo tick 3']);
    expect(await ex.wait()).toEqual({ code: 0, signal: null, timedOut: false });
    expect(await code((async () => { for await (const _ of ex) void _; })())).toBe('invalid_state');
  });
});
