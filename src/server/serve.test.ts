import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../core/index.js';
import { createApp } from './app.js';
import { parseServeArgs } from './main.js';
import { startServer } from './serve.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let t: TestEngine;
beforeAll(async () => {
  t = await createTestEngine();
});
afterAll(async () => {
  await t.close();
});

describe('startServer', () => {
  it('serves on a free port and closes gracefully', async () => {
    const s = await startServer({ app: createApp({ engine: t.engine }), port: 0 });
    expect(s.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const r = await fetch(`${s.url}/healthz`);
    expect(r.status).toBe(200);
    expect(r.headers.get('connection')).not.toBe('close');
    await s.close();
    await expect(fetch(`${s.url}/healthz`)).rejects.toThrow();
  });
  it('cuts connections still streaming after the grace period', async () => {
    const engine = t.engine;
    const s = await startServer({ app: createApp({ engine }), port: 0, graceMs: 100 });
    const h = { authorization: `Bearer ${t.rootKey}`, 'content-type': 'application/json' };
    const created = await (await fetch(`${s.url}/v1/sessions`, { method: 'POST', headers: h, body: '{}' })).json();
    const ex = await fetch(`${s.url}/v1/sessions/${created.id}/exec`, { method: 'POST', headers: h, body: JSON.stringify({ argv: ['sleep', '60'] }) });
    const reader = ex.body!.getReader();
    await reader.read(); // started
    const t0 = Date.now();
    await s.close();
    expect(Date.now() - t0).toBeLessThan(5000);
    await expect(reader.read()).rejects.toThrow();
  });
  it('an address in use is unavailable; a bad port is config', async () => {
    const a = await startServer({ app: createApp({ engine: t.engine }), port: 0 });
    const err = await startServer({ app: createApp({ engine: t.engine }), port: a.port }).catch((e) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err.code).toBe('unavailable');
    await a.close();
    expect((await startServer({ app: createApp({ engine: t.engine }), port: 70000 }).catch((e) => e)).code).toBe('config');
  });
  it('closes when its signal aborts', async () => {
    const ac = new AbortController();
    const s = await startServer({ app: createApp({ engine: t.engine }), port: 0, signal: ac.signal });
    ac.abort();
    await s.close();
    await expect(fetch(`${s.url}/healthz`)).rejects.toThrow();
  });
});

describe('serve options', () => {
  it('flag > BERTH_DATA > ./.berth', () => {
    expect(parseServeArgs([], {}, '/w')).toEqual({ port: 7070, host: '127.0.0.1', dataDir: '/w/.berth', imageCacheDir: '/w/.berth/images', logLevel: 'info', auditKeyPath: '/w/.berth/audit.key', acceptAuditRollback: false });
    expect(parseServeArgs(['--image-cache', 'c'], { BERTH_IMAGE_CACHE: '/e' }, '/w').imageCacheDir).toBe('/w/c');
    expect(parseServeArgs([], { BERTH_IMAGE_CACHE: '/e' }, '/w').imageCacheDir).toBe('/e');
    expect(parseServeArgs([], { BERTH_DATA: 'd' }, '/w').dataDir).toBe('/w/d');
    expect(parseServeArgs(['--data', '/x', '--port', '0', '--host', '0.0.0.0'], { BERTH_DATA: 'd' }, '/w')).toMatchObject({ dataDir: '/x', port: 0, host: '0.0.0.0' });
  });
  it('--database > BERTH_DATABASE > the SQLite file; only postgres URLs', () => {
    expect(parseServeArgs([], { BERTH_DATABASE: 'postgres://e@h/db' }, '/w').database).toBe('postgres://e@h/db');
    expect(parseServeArgs(['--database', 'postgresql://f@h/db'], { BERTH_DATABASE: 'postgres://e@h/db' }, '/w').database).toBe('postgresql://f@h/db');
    expect(parseServeArgs([], { BERTH_DATABASE: '' }, '/w').database).toBeUndefined();
    expect(() => parseServeArgs(['--database', '/tmp/x.db'], {}, '/w')).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
  });
  it('bad flags are usage errors', () => {
    for (const argv of [['--port', 'x'], ['--port', '99999'], ['--nope'], ['extra'], ['--host', '']]) {
      let e: AppError | undefined;
      try {
        parseServeArgs(argv, {}, '/w');
      } catch (x) {
        e = x as AppError;
      }
      expect(e?.code, argv.join(' ')).toBe('invalid_argument');
      expect(typeof e?.details?.usage).toBe('string');
    }
    expect(() => parseServeArgs([], { BERTH_LOG_LEVEL: 'loud' }, '/w')).toThrow(AppError);
  });
});
