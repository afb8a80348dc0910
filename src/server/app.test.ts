/**
 * The HTTP layer over the real engine (gate, Cedar, SQLite in memory) and the in-memory driver: every
 * status asserted here is what the server answers in production for the same engine behaviour.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createApp } from './app.js';
import { base64ToBytes, type ExecStreamLine } from '../protocol/index.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let AUTH: Record<string, string>;
let JSON_AUTH: Record<string, string>;

let t: TestEngine;
let app: ReturnType<typeof createApp>;
let now = 1_700_000_000_000;
/** Sees every chunk the driver's writeFile receives (set by a test). */
let onChunk: ((c: Uint8Array) => void) | null = null;

beforeEach(async () => {
  now = 1_700_000_000_000;
  onChunk = null;
  const clock = { now: () => now };
  t = await createTestEngine({ clock, driver: { onWriteChunk: (_id, _path, c) => onChunk?.(c) } });
  app = createApp({ engine: t.engine, clock });
  AUTH = { authorization: `Bearer ${t.rootKey}` };
  JSON_AUTH = { ...AUTH, 'content-type': 'application/json' };
});
afterEach(async () => {
  await t.close();
});

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = JSON_AUTH) {
  const res = await app.request(path, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}

async function createSession(body: unknown = {}) {
  const r = await call('POST', '/v1/sessions', body);
  expect(r.status).toBe(201);
  return r.json as { id: string; agentToken: string };
}

function expectErrorBody(r: { json: any; text: string }, code: string) {
  expect(r.json?.error?.code).toBe(code);
  expect(typeof r.json.error.message).toBe('string');
  expect(r.text).not.toMatch(/\bat .+\(.*:\d+:\d+\)|node_modules|\.ts:\d+/);
}

describe('auth', () => {
  it('401 without a token, with a JSON body', async () => {
    const r = await call('GET', '/v1/sessions', undefined, {});
    expect(r.status).toBe(401);
    expectErrorBody(r, 'unauthenticated');
    expect(r.headers.get('www-authenticate')).toBe('Bearer');
  });
  it('401 for an unknown token and for a malformed header', async () => {
    expectErrorBody(await call('GET', '/v1/sessions', undefined, { authorization: 'Bearer nope' }), 'unauthenticated');
    const r = await call('GET', '/v1/sessions', undefined, { authorization: 'Basic abc' });
    expect(r.status).toBe(401);
  });
  it('401 even for unknown /v1 routes without a token', async () => {
    expect((await call('GET', '/v1/nowhere', undefined, {})).status).toBe(401);
  });
  it('/healthz needs no token', async () => {
    const r = await call('GET', '/healthz', undefined, {});
    expect(r.status).toBe(200);
    expect(r.json.ok).toBe(true);
    await t.engine.close();
    expect((await call('GET', '/healthz', undefined, {})).status).toBe(503);
  });
  it('an agent token may not use operator routes: its own session is forbidden, another is not found', async () => {
    const a = await createSession();
    const b = await createSession();
    const h = { authorization: `Bearer ${a.agentToken}` };
    expectErrorBody(await call('GET', `/v1/sessions/${a.id}`, undefined, h), 'forbidden');
    expect((await call('GET', `/v1/sessions/${a.id}`, undefined, h)).status).toBe(403);
    expect((await call('GET', `/v1/sessions/${b.id}`, undefined, h)).status).toBe(404);
    expect((await call('GET', '/v1/sessions', undefined, h)).status).toBe(403);
    expect((await call('GET', `/v1/sessions/${a.id}/tools`, undefined, h)).status).toBe(200);
  });
});

describe('sessions', () => {
  it('create returns the created view with the agent token and no secrets', async () => {
    const r = await call('POST', '/v1/sessions', { objective: 'x', memoryMb: 1024, cpus: 0.5, env: { FOO: 'bar' }, metadata: { k: 'v' } });
    expect(r.status).toBe(201);
    expect(r.json).toMatchObject({ state: 'running', backend: 'gvisor', objective: 'x', settings: { memoryMb: 1024, cpus: 0.5, env: ['FOO'] } });
    expect(JSON.stringify(r.json)).not.toContain('bar');
    expect(r.json.id).toMatch(/^ses_/);
    expect(r.json.agentToken).toMatch(/^bta_/);
    expect(r.text).not.toMatch(/agentTokenHash|sandboxId|-g1\b/);
    expect(r.json.createdAt).toBe(new Date(now).toISOString());
  });
  it('an empty body creates with defaults', async () => {
    const r = await call('POST', '/v1/sessions', '');
    expect(r.status).toBe(201);
    expect(r.json.settings.memoryMb).toBe(512);
  });
  it('show includes the time spent in the current state', async () => {
    const s = await createSession();
    now += 2500;
    const r = await call('GET', `/v1/sessions/${s.id}`);
    expect(r.status).toBe(200);
    expect(r.json.metering.stateSeconds.running).toBe(2.5);
    expect(r.json.agentToken).toBeUndefined();
    expect(r.json.stateSince).toBe(new Date(now - 2500).toISOString());
  });
  it('lists, filters by state and terminates', async () => {
    const a = await createSession();
    await createSession();
    expect((await call('POST', `/v1/sessions/${a.id}/pause`)).json.state).toBe('paused');
    const all = await call('GET', '/v1/sessions');
    expect(all.json.sessions).toHaveLength(2);
    const paused = await call('GET', '/v1/sessions?state=paused');
    expect(paused.json.sessions.map((s: any) => s.id)).toEqual([a.id]);
    const rm = await call('DELETE', `/v1/sessions/${a.id}`);
    expect(rm.json).toEqual({ id: a.id, state: 'terminated' });
  });
  it('pause/resume/hibernate/wake go through the engine; illegal moves are 409', async () => {
    const s = await createSession();
    expect((await call('POST', `/v1/sessions/${s.id}/hibernate`)).json.state).toBe('hibernated');
    const bad = await call('POST', `/v1/sessions/${s.id}/pause`);
    expect(bad.status).toBe(409);
    expectErrorBody(bad, 'invalid_state');
    expect((await call('POST', `/v1/sessions/${s.id}/wake`)).json.state).toBe('running');
    now += 1000;
    const v = await call('GET', `/v1/sessions/${s.id}`);
    expect(v.json.metering.stateSeconds.running).toBe(1);
  });
  it('an engine error that is no AppError is a generic 500 without a stack', async () => {
    const s = await createSession();
    t.driver.failNext('listFiles', new Error('database exploded at /secret/path'));
    const r = await call('GET', `/v1/sessions/${s.id}/files/list?path=/`);
    expect(r.status).toBe(500);
    expectErrorBody(r, 'internal');
    expect(r.text).not.toContain('exploded');
    expect(r.text).not.toContain('/secret/path');
  });
});

describe('bad input', () => {
  const cases: [string, unknown, string][] = [
    ['memory too small', { memoryMb: 10 }, 'memoryMb'],
    ['memory too big', { memoryMb: 16385 }, 'memoryMb'],
    ['memory not an integer', { memoryMb: 100.5 }, 'memoryMb'],
    ['memory a string', { memoryMb: '512' }, 'memoryMb'],
    ['cpus too small', { cpus: 0.05 }, 'cpus'],
    ['cpus too big', { cpus: 65 }, 'cpus'],
    ['idle timeout negative', { idleTimeoutS: -1 }, 'idleTimeoutS'],
    ['idle timeout too big', { idleTimeoutS: 604801 }, 'idleTimeoutS'],
    ['env key', { env: { '1BAD': 'x' } }, 'env.1BAD'],
    ['env value type', { env: { OK: 1 } }, 'env.OK'],
    ['env not an object', { env: ['A=b'] }, 'env'],
    ['backend', { backend: 'docker' }, 'backend'],
    ['objective too long', { objective: 'x'.repeat(4097) }, 'objective'],
    ['metadata too many', { metadata: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata'],
    ['metadata value type', { metadata: { k: 1 } }, 'metadata.k'],
    ['unknown field', { memoryMB: 512 }, 'memoryMB'],
    ['not an object', [1, 2], 'body'],
  ];
  for (const [name, body, field] of cases) {
    it(`create: ${name} → 400 naming ${field}`, async () => {
      const r = await call('POST', '/v1/sessions', body);
      expect(r.status).toBe(400);
      expectErrorBody(r, 'invalid_argument');
      expect(r.json.error.details.field).toBe(field);
      expect(r.json.error.message.startsWith(`${field}: `)).toBe(true);
    });
  }
  it('names the bound in the message', async () => {
    const r = await call('POST', '/v1/sessions', { memoryMb: 10 });
    expect(r.json.error.message).toBe('memoryMb: must be ≥ 64');
  });
  it('malformed JSON → 400 invalid_argument', async () => {
    const r = await call('POST', '/v1/sessions', '{"memoryMb": ');
    expect(r.status).toBe(400);
    expectErrorBody(r, 'invalid_argument');
    expect(r.json.error.details.field).toBe('body');
  });
  it('a JSON body over 1 MiB → 413', async () => {
    const r = await call('POST', '/v1/sessions', JSON.stringify({ objective: 'x'.repeat(1024 * 1024 + 10) }));
    expect(r.status).toBe(413);
    expectErrorBody(r, 'payload_too_large');
  });

  const execCases: [string, unknown, string][] = [
    ['argv missing', {}, 'argv'],
    ['argv empty', { argv: [] }, 'argv'],
    ['argv a string', { argv: 'ls -l' }, 'argv'],
    ['argv item type', { argv: ['ls', 3] }, 'argv.1'],
    ['argv[0] empty', { argv: [''] }, 'argv.0'],
    ['timeout negative', { argv: ['ls'], timeoutMs: -5 }, 'timeoutMs'],
    ['timeout too big', { argv: ['ls'], timeoutMs: 86_400_001 }, 'timeoutMs'],
    ['timeout not an integer', { argv: ['ls'], timeoutMs: 1.5 }, 'timeoutMs'],
    ['cwd relative', { argv: ['ls'], cwd: 'tmp' }, 'cwd'],
    ['env key', { argv: ['ls'], env: { 'A-B': 'x' } }, 'env.A-B'],
  ];
  for (const [name, body, field] of execCases) {
    it(`exec: ${name} → 400 naming ${field}`, async () => {
      const s = await createSession();
      const r = await call('POST', `/v1/sessions/${s.id}/exec`, body);
      expect(r.status).toBe(400);
      expectErrorBody(r, 'invalid_argument');
      expect(r.json.error.details.field).toBe(field);
    });
  }
  for (const [count, ok] of [[0, false], [65, false], [1.5, false], ['2', false], [64, true]] as const) {
    it(`fork count ${JSON.stringify(count)} → ${ok ? 201 : 400}`, async () => {
      const s = await createSession();
      // 64 branches of 512 MiB may be more than this host's memory, the default quota (issue 12 §3).
      await call('PUT', `/v1/tenants/${(s as unknown as { tenantId: string }).tenantId}/quotas`, { maxMemoryMb: 1 << 20 });
      const snap = await call('POST', `/v1/sessions/${s.id}/snapshots`, {});
      const r = await call('POST', `/v1/snapshots/${snap.json.snapshotId}/fork`, { count });
      expect(r.status).toBe(ok ? 201 : 400);
      if (!ok) expect(r.json.error.details.field).toBe('count');
    });
  }
  it('file routes require an absolute path query parameter', async () => {
    const s = await createSession();
    for (const q of ['', '?path=', '?path=relative/x']) {
      const r = await call('GET', `/v1/sessions/${s.id}/files${q}`);
      expect(r.status).toBe(400);
      expect(r.json.error.code).toBe('invalid_argument');
      expect(r.json.error.details.field).toBe('path');
    }
  });
  it('query values are checked too', async () => {
    expect((await call('GET', '/v1/audit?limit=abc')).json.error.details.field).toBe('limit');
    expect((await call('GET', '/v1/sessions?state=sleeping')).status).toBe(400);
  });
});

describe('not found', () => {
  it('unknown routes → 404 JSON', async () => {
    const r = await call('GET', '/v1/nowhere');
    expect(r.status).toBe(404);
    expectErrorBody(r, 'not_found');
    expect((await call('GET', '/nowhere', undefined, {})).status).toBe(404);
  });
  it('unknown and malformed ids → 404', async () => {
    for (const path of [
      '/v1/sessions/ses_00000000000000000000',
      '/v1/sessions/nope',
      '/v1/snapshots/snp_00000000000000000000',
      '/v1/snapshots/ses_00000000000000000000',
    ]) {
      const r = await call('GET', path);
      expect(r.status, path).toBe(404);
      expectErrorBody(r, 'not_found');
    }
    expect((await call('POST', '/v1/sessions/ses_00000000000000000000/exec', { argv: ['ls'] })).status).toBe(404);
    expect((await call('DELETE', '/v1/sessions/ses_00000000000000000000')).status).toBe(404);
  });
  it('a missing file → 404', async () => {
    const s = await createSession();
    const r = await call('GET', `/v1/sessions/${s.id}/files?path=/nope`);
    expect(r.status).toBe(404);
    expectErrorBody(r, 'not_found');
  });
});

function parseNdjson(text: string): ExecStreamLine[] {
  expect(text.endsWith('\n')).toBe(true);
  return text
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as ExecStreamLine);
}

describe('exec', () => {
  it('streams NDJSON: started, output (base64), exit', async () => {
    const s = await createSession();
    const res = await app.request(`/v1/sessions/${s.id}/exec`, { method: 'POST', headers: JSON_AUTH, body: JSON.stringify({ argv: ['sh', '-c', 'echo bye >&2; exit 3'] }) });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/x-ndjson');
    const lines = parseNdjson(await res.text());
    expect(lines[0]).toMatchObject({ type: 'started', execId: expect.stringMatching(/^exe_/) });
    expect(lines[1]).toEqual({ type: 'stderr', data: Buffer.from('bye\n').toString('base64') });
    expect(lines.at(-1)).toEqual({ type: 'exit', code: 3, signal: null, timedOut: false });
  });
  it('each event is its own line as it happens', async () => {
    const s = await createSession();
    const res = await app.request(`/v1/sessions/${s.id}/exec`, { method: 'POST', headers: JSON_AUTH, body: JSON.stringify({ argv: ['sh', '-c', 'echo tick 1; sleep 0.03; echo tick 2; sleep 0.03; echo tick 3'] }) });
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    const first = dec.decode((await reader.read()).value);
    expect(JSON.parse(first).type).toBe('started');
    const t0 = Date.now();
    const second = JSON.parse(dec.decode((await reader.read()).value));
    expect(second.type).toBe('stdout');
    expect(Buffer.from(base64ToBytes(second.data)).toString()).toBe('tick 1\n');
    expect(Date.now() - t0).toBeLessThan(1000);
    await reader.cancel();
  });
  it('a quiet command gets ping lines, so idle timeouts never cut it', async () => {
    const s = await createSession();
    const quiet = createApp({ engine: t.engine, execHeartbeatMs: 15 });
    const res = await quiet.request(`/v1/sessions/${s.id}/exec`, { method: 'POST', headers: JSON_AUTH, body: JSON.stringify({ argv: ['sleep', '0.08'] }) });
    const lines = parseNdjson(await res.text());
    expect(lines.filter((l) => l.type === 'ping').length).toBeGreaterThanOrEqual(2);
    expect(lines.at(-1)).toEqual({ type: 'exit', code: 0, signal: null, timedOut: false });
    expect(() => createApp({ engine: t.engine, execHeartbeatMs: 0 })).toThrow(/execHeartbeatMs/);
  });
  it('a timeout ends with timedOut', async () => {
    const s = await createSession();
    const r = await call('POST', `/v1/sessions/${s.id}/exec`, { argv: ['sleep', '5'], timeoutMs: 20 });
    expect(parseNdjson(r.text).at(-1)).toEqual({ type: 'exit', code: 137, signal: 9, timedOut: true });
  });
  it('stdin is streamed by a second request; close=true ends it', async () => {
    const s = await createSession();
    const res = await app.request(`/v1/sessions/${s.id}/exec`, { method: 'POST', headers: JSON_AUTH, body: JSON.stringify({ argv: ['cat'], stdin: true }) });
    const reader = res.body!.getReader();
    const started = JSON.parse(new TextDecoder().decode((await reader.read()).value));
    const r = await call('POST', `/v1/sessions/${s.id}/execs/${started.execId}/stdin?close=true`, 'hello', AUTH);
    expect(r.json).toEqual({ bytes: 5, closed: true });
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    const lines = parseNdjson(rest);
    const out = lines.filter((l) => l.type === 'stdout').map((l) => Buffer.from((l as any).data, 'base64').toString());
    expect(out.join('')).toBe('hello');
    expect(lines.at(-1)).toMatchObject({ type: 'exit', code: 0 });
  });
  it('kill takes a signal name or number', async () => {
    const s = await createSession();
    const res = await app.request(`/v1/sessions/${s.id}/exec`, { method: 'POST', headers: JSON_AUTH, body: JSON.stringify({ argv: ['sleep', '10'] }) });
    const reader = res.body!.getReader();
    const started = JSON.parse(new TextDecoder().decode((await reader.read()).value));
    const bad = await call('POST', `/v1/sessions/${s.id}/execs/${started.execId}/kill`, { signal: 'SIGNOPE' });
    expect(bad.status).toBe(400);
    expect(bad.json.error.details.field).toBe('signal');
    const k = await call('POST', `/v1/sessions/${s.id}/execs/${started.execId}/kill`, { signal: 'TERM' });
    expect(k.json).toEqual({ execId: started.execId, signal: 15 });
    const { value } = await reader.read();
    expect(JSON.parse(new TextDecoder().decode(value))).toEqual({ type: 'exit', code: 143, signal: 15, timedOut: false });
  });
  it('the client going away kills the command', async () => {
    const s = await createSession();
    const res = await app.request(`/v1/sessions/${s.id}/exec`, { method: 'POST', headers: JSON_AUTH, body: JSON.stringify({ argv: ['sleep', '10'] }) });
    const reader = res.body!.getReader();
    const started = JSON.parse(new TextDecoder().decode((await reader.read()).value));
    const handle = await t.engine.getExec(t.root, s.id, started.execId);
    await reader.cancel();
    await expect(handle.wait()).resolves.toMatchObject({ signal: 9 });
  });
  it('unknown exec ids → 404; a non-running session → 409', async () => {
    const s = await createSession();
    expect((await call('POST', `/v1/sessions/${s.id}/execs/exe_00000000000000000000/kill`, {})).status).toBe(404);
    await call('POST', `/v1/sessions/${s.id}/pause`);
    const r = await call('POST', `/v1/sessions/${s.id}/exec`, { argv: ['ls'] });
    expect(r.status).toBe(409);
    expectErrorBody(r, 'invalid_state');
  });
});

describe('files', () => {
  it('write, read (binary-safe), stat, list, mkdir, rm', async () => {
    const s = await createSession();
    const bytes = new Uint8Array(200_000).map((_, i) => (i * 7) & 255);
    const put = await app.request(`/v1/sessions/${s.id}/files?path=/work/data.bin`, { method: 'PUT', headers: AUTH, body: bytes });
    expect(await put.json()).toEqual({ path: '/work/data.bin', bytes: 200_000 });
    const get = await app.request(`/v1/sessions/${s.id}/files?path=/work/data.bin`, { headers: AUTH });
    expect(get.headers.get('content-type')).toBe('application/octet-stream');
    expect(Buffer.compare(Buffer.from(await get.arrayBuffer()), Buffer.from(bytes))).toBe(0);
    expect((await call('GET', `/v1/sessions/${s.id}/files/stat?path=/work/data.bin`)).json).toMatchObject({ path: '/work/data.bin', type: 'file', size: 200_000 });
    expect((await call('POST', `/v1/sessions/${s.id}/files/mkdir`, { path: '/work/a/b', parents: true })).json).toEqual({ ok: true });
    const mk = await call('POST', `/v1/sessions/${s.id}/files/mkdir`, { path: 'a' });
    expect(mk.json.error.details.field).toBe('path');
    const list = await call('GET', `/v1/sessions/${s.id}/files/list?path=/work`);
    expect(list.json.path).toBe('/work');
    expect(list.json.entries.map((e: any) => e.name).sort()).toEqual(['a', 'data.bin']);
    expect((await call('DELETE', `/v1/sessions/${s.id}/files?path=/work/a`)).status).toBe(409);
    expect((await call('DELETE', `/v1/sessions/${s.id}/files?path=/work/a&recursive=true`)).json).toEqual({ ok: true });
    expect((await call('GET', `/v1/sessions/${s.id}/files/stat?path=/work/a/b`)).status).toBe(404);
  });
  it('an upload reaches the engine chunk by chunk, before the body ends', async () => {
    const s = await createSession();
    const received: number[] = [];
    let release!: () => void;
    const firstArrived = new Promise<void>((r) => (release = r));
    onChunk = (c) => {
      received.push(c.byteLength);
      release();
    };
    let ctrl!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({ start: (c) => void (ctrl = c) });
    const pending = app.request(`/v1/sessions/${s.id}/files?path=/work/big`, { method: 'PUT', headers: AUTH, body, duplex: 'half' } as RequestInit);
    ctrl.enqueue(new Uint8Array(1000).fill(1));
    await firstArrived; // the body is still open: the engine saw the first chunk before the end
    expect(received).toEqual([1000]);
    ctrl.enqueue(new Uint8Array(500).fill(2));
    ctrl.close();
    const res = await pending;
    expect(await res.json()).toEqual({ path: '/work/big', bytes: 1500 });
    expect(received).toEqual([1000, 500]);
  });
});

describe('snapshots, tenants, audit', () => {
  it('snapshot → view with snapshotId; fork → sessions with tokens', async () => {
    const s = await createSession();
    const snap = await call('POST', `/v1/sessions/${s.id}/snapshots`, { name: 'base' });
    expect(snap.status).toBe(201);
    expect(snap.json).toMatchObject({ snapshotId: expect.stringMatching(/^snp_/), sessionId: s.id, name: 'base', kind: 'named' });
    expect(snap.json.id).toBe(snap.json.snapshotId);
    const fork = await call('POST', `/v1/snapshots/${snap.json.snapshotId}/fork`, { count: 3 });
    expect(fork.status).toBe(201);
    expect(fork.json.sessions).toHaveLength(3);
    for (const b of fork.json.sessions) {
      expect(b).toMatchObject({ id: expect.stringMatching(/^ses_/), state: 'running', parentSnapshotId: snap.json.snapshotId });
      expect(b.agentToken).toMatch(/^bta_/);
    }
    expect((await call('GET', '/v1/snapshots')).json.snapshots).toHaveLength(1);
    expect((await call('GET', `/v1/snapshots/${snap.json.snapshotId}`)).json.snapshotId).toBe(snap.json.snapshotId);
    expect((await call('DELETE', `/v1/snapshots/${snap.json.snapshotId}`)).json).toEqual({ ok: true });
    expect((await call('GET', `/v1/snapshots/${snap.json.snapshotId}`)).status).toBe(404);
  });
  it('tenants: create returns the key once; list (with the default tenant) does not', async () => {
    const t = await call('POST', '/v1/tenants', { name: 'acme' });
    expect(t.status).toBe(201);
    expect(t.json).toMatchObject({ id: expect.stringMatching(/^ten_/), name: 'acme', apiKey: expect.any(String) });
    const list = await call('GET', '/v1/tenants');
    expect(list.json.tenants).toEqual([
      { id: 'ten_00000000000000000000', name: 'default', createdAt: expect.any(String) },
      { id: t.json.id, name: 'acme', createdAt: t.json.createdAt },
    ]);
    expect((await call('POST', '/v1/tenants', { name: '' })).json.error.details.field).toBe('name');
    const asTenant = await call('POST', '/v1/tenants', { name: 'x' }, { ...JSON_AUTH, authorization: `Bearer ${t.json.apiKey}` });
    expect(asTenant.status).toBe(403);
    expectErrorBody(asTenant, 'forbidden');
  });
  it('what the old fake engine got wrong: terminated sessions are not listed, exec wakes a hibernated session', async () => {
    const a = await createSession();
    const b = await createSession();
    await call('DELETE', `/v1/sessions/${a.id}`);
    expect((await call('GET', '/v1/sessions')).json.sessions.map((x: any) => x.id)).toEqual([b.id]);
    expect((await call('GET', '/v1/sessions?state=terminated')).json.sessions.map((x: any) => x.id)).toEqual([a.id]);
    await call('POST', `/v1/sessions/${b.id}/hibernate`);
    const r = await call('POST', `/v1/sessions/${b.id}/exec`, { argv: ['echo', 'awake'] });
    expect(r.status).toBe(200);
    expect(parseNdjson(r.text).at(-1)).toMatchObject({ type: 'exit', code: 0 });
    expect((await call('GET', `/v1/sessions/${b.id}`)).json.state).toBe('running');
  });
  it('a tenant operator sees only its own tenant, sessions and snapshots, and may not verify the whole chain', async () => {
    const mk = async (name: string) => {
      const t = (await call('POST', '/v1/tenants', { name })).json;
      return { ...JSON_AUTH, authorization: `Bearer ${t.apiKey}`, id: t.id as string };
    };
    const acme = await mk('acme');
    const other = await mk('other');
    const s = (await call('POST', '/v1/sessions', {}, acme)).json;
    await call('POST', `/v1/sessions/${s.id}/snapshots`, { name: 'mine' }, acme);
    expect((await call('GET', '/v1/tenants', undefined, other)).json.tenants.map((x: any) => x.name)).toEqual(['other']);
    expect((await call('GET', '/v1/snapshots', undefined, other)).json.snapshots).toEqual([]);
    expect((await call('GET', '/v1/snapshots', undefined, acme)).json.snapshots).toHaveLength(1);
    expect((await call('GET', '/v1/sessions', undefined, other)).json.sessions).toEqual([]);
    expect((await call('GET', `/v1/sessions/${s.id}`, undefined, other)).status).toBe(404);
    const v = await call('GET', '/v1/audit/verify', undefined, acme);
    expect(v.status).toBe(403);
    expectErrorBody(v, 'forbidden');
  });
  it('audit query and verify', async () => {
    const s = await createSession();
    await createSession();
    // Each create writes two entries: the request (by root) and the move to running (by the system).
    const q = await call('GET', `/v1/audit?sessionId=${s.id}`);
    expect(q.json.entries.map((e: any) => [e.seq, e.action, e.principal.kind])).toEqual([[1, 'session.create', 'root'], [2, 'session.state', 'system']]);
    expect(q.json.entries[0]).toMatchObject({ ts: expect.any(String), tsMs: now });
    expect((await call('GET', '/v1/audit?afterSeq=1&limit=2')).json.entries.map((e: any) => e.seq)).toEqual([2, 3]);
    // Reads are recorded too (issue 12 §2): the two queries above are entries 5 and 6.
    const reads = (await call('GET', '/v1/audit?afterSeq=4')).json.entries;
    expect(reads.map((e: any) => [e.action, e.data.route, e.data.target])).toEqual([
      ['request', '/v1/audit', { session: s.id }],
      ['request', '/v1/audit', {}],
    ]);
    expect((await call('GET', '/v1/audit/verify')).json).toMatchObject({ ok: true, entries: 7 });
  });
});
