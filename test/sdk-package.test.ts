/**
 * The TypeScript SDK outside this checkout: `npm pack` makes the package; unpacked into a directory outside
 * the repository (with no dependencies installed: the SDK entries need none), a Node script imports
 * `berth/sdk` and `berth/sdk/node` and drives a real server (real engine, in-memory driver). The browser
 * entry is bundled with vite for the browser; the bundle has no node: import, no Buffer and no process, and
 * it runs in a bare JavaScript context given only web-platform globals, against the same server.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/server/app.js';
import { startServer, type RunningServer } from '../src/server/serve.js';
import { createTestEngine, type TestEngine } from './helpers/engine.js';
import { REPO } from './helpers/env.js';

let t: TestEngine;
let server: RunningServer;
let work = '';
let app = '';
let files: string[] = [];

beforeAll(async () => {
  // dist/ (what npm pack packs) is compiled once, by test/global-setup.ts.
  work = mkdtempSync(join(tmpdir(), 'berth-pack-'));
  const pack = spawnSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: REPO, encoding: 'utf8' });
  expect(pack.status, pack.stderr).toBe(0);
  const [info] = JSON.parse(pack.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  files = info!.files.map((f) => f.path);
  app = join(work, 'app');
  const pkgDir = join(app, 'node_modules', 'berth');
  mkdirSync(pkgDir, { recursive: true });
  expect(spawnSync('tar', ['-xzf', join(work, info!.filename), '-C', pkgDir, '--strip-components=1']).status).toBe(0);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'outside', private: true, type: 'module' }));
  t = await createTestEngine();
  server = await startServer({ app: createApp({ engine: t.engine }), host: '127.0.0.1', port: 0, graceMs: 200 });
}, 400_000);
afterAll(async () => {
  await server?.close();
  await t?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

function run(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const child = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d));
  child.stderr.on('data', (d: Buffer) => (stderr += d));
  return new Promise((done) => child.on('close', (status) => done({ status, stdout, stderr })));
}

describe('the packed package', () => {
  it('holds the compiled SDK with its types, and neither sources nor tests', () => {
    for (const f of ['package.json', 'bin/berth', 'dist/bundle/berth.js', 'dist/src/sdk/index.js', 'dist/src/sdk/index.d.ts', 'dist/src/sdk/node.js', 'dist/src/sdk/node.d.ts', 'dist/src/protocol/openapi.js']) expect(files).toContain(f);
    expect(files.filter((f) => /\.test\.|^test\/|^src\/|^\.berth/.test(f))).toEqual([]);
  });

  it('berth/sdk and berth/sdk/node work from a Node script outside the repository', async () => {
    writeFileSync(
      join(app, 'main.mjs'),
      `import { Berth } from 'berth/sdk';
import { Berth as NodeBerth, fromEnv } from 'berth/sdk/node';
const berth = new Berth({ url: process.env.BERTH_URL, token: process.env.BERTH_TOKEN });
const s = await berth.sessions.create({ objective: 'outside', metadata: { from: 'pack' } });
const r = await s.run(['sh', '-c', 'echo hi; echo there >&2; exit 3']);
await s.files.write('/x.txt', 'bytes');
const fromEnvList = await NodeBerth.fromEnv().sessions.list({ metadata: { from: 'pack' } });
const viaFn = await fromEnv().sessions.get(s.id);
await s.terminate();
console.log(JSON.stringify({ code: r.code, stdout: r.stdout, stderr: r.stderr, text: await viaFn.files.readText('/x.txt').catch((e) => e.code), listed: fromEnvList.map((x) => x.id), id: s.id, noFromEnv: typeof Berth.fromEnv }));
`,
    );
    // Spawned asynchronously: the server runs in this process and must keep answering.
    const r = await run(process.execPath, ['main.mjs'], { cwd: app, env: { PATH: process.env.PATH, BERTH_URL: server.url, BERTH_TOKEN: t.rootKey } });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({ code: 3, stdout: 'hi\n', stderr: 'there\n', listed: [out.id], noFromEnv: 'undefined' });
    // Reading after terminate: the server's own error code comes through.
    expect(out.text).toBe('invalid_state'); // reading a terminated session: the server's own code comes through
  });

  it('berth/sdk bundles for the browser with no Node built-ins, and runs with only web-platform globals', async () => {
    writeFileSync(join(app, 'entry.js'), `export { Berth, isAppError } from 'berth/sdk';\n`);
    const { build } = await import('vite');
    await build({
      root: app,
      configFile: false,
      logLevel: 'silent',
      build: { outDir: join(app, 'out'), minify: false, lib: { entry: join(app, 'entry.js'), formats: ['iife'], name: 'BerthSDK', fileName: () => 'sdk.js' } },
    });
    const code = readFileSync(join(app, 'out', 'sdk.js'), 'utf8');
    expect(code.length).toBeGreaterThan(5000);
    expect(code).not.toMatch(/["']node:/);
    expect(code).not.toMatch(/\bBuffer\b/);
    expect(code).not.toMatch(/\bprocess\./);
    expect(code).not.toMatch(/\brequire\(/);

    // A context with the web platform's globals and nothing of Node's (no process, Buffer, require).
    const web = { fetch, Request, Response, Headers, URL, URLSearchParams, TextEncoder, TextDecoder, ReadableStream, WritableStream, TransformStream, AbortController, AbortSignal, atob, btoa, setTimeout, clearTimeout, queueMicrotask, structuredClone, console, DOMException, Event, EventTarget,
      // Web Crypto as a page served over plain http has it: getRandomValues, no randomUUID (secure contexts only).
      crypto: { getRandomValues: <T extends ArrayBufferView>(a: T) => globalThis.crypto.getRandomValues(a) } };
    const ctx: Record<string, unknown> = { ...web };
    ctx.globalThis = ctx;
    runInNewContext(code, ctx);
    const { Berth, isAppError } = ctx.BerthSDK as typeof import('../src/sdk/index.js');
    const berth = new Berth({ url: server.url, token: t.rootKey });
    const s = await berth.sessions.create({ objective: 'browser' });
    await s.files.write('/b.bin', new Uint8Array([255, 0, 120, 10]));
    const r = await s.run(['sh', '-c', 'cat /b.bin; echo err >&2']);
    expect([...r.stdoutBytes]).toEqual([255, 0, 120, 10]);
    expect(r.stderr).toBe('err\n');
    expect([...(await s.files.readBytes('/b.bin'))]).toEqual([255, 0, 120, 10]);
    await s.terminate();
    const e = await berth.sessions.get('ses_00000000000000000000').catch((x: unknown) => x);
    expect(isAppError(e) && e.code).toBe('not_found');
  }, 120_000);
});
