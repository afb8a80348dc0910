/**
 * First start: `berth serve` listens before its backends are ready. While the base image is being
 * prepared, /healthz answers `{ok: false, starting}` and /v1 answers 503 unavailable with the progress;
 * a terminal shows a live status line, then "ready". The slow part is real: the server waits on the image
 * cache's own build lock, held by this test, in a fresh cache holding every other cached image; when the
 * test puts the base image in place and releases the lock, the start completes. The server runs in tmux,
 * so its stderr is a real terminal.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_ROOTFS_RECIPE, rootfsKey } from '../src/drivers/image/rootfs.js';
import { IMAGE_CACHE, REPO, hasCommand, skipReason } from './helpers/env.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const base = `rootfs-${rootfsKey(DEFAULT_ROOTFS_RECIPE)}`;
let missing: string | undefined = hasCommand('tmux', ['-V']) ? undefined : 'tmux is not installed';
try {
  if (!missing && !readdirSync(IMAGE_CACHE).includes(base)) missing = `the base image is not built in ${IMAGE_CACHE} (npm run setup)`;
} catch {
  missing ??= `no image cache at ${IMAGE_CACHE} (npm run setup)`;
}

describe.skipIf(skipReason('first-start progress', missing))('first start', () => {
  it('listens at once; /healthz and /v1 report the progress until the backends are ready; the terminal shows it', async () => {
    // bin/berth runs the compiled sources (dist/, compiled once by test/global-setup.ts).
    const work = mkdtempSync(join(tmpdir(), 'berth-startup-'));
    dirs.push(work);
    const cache = join(work, 'images');
    mkdirSync(cache);
    for (const e of readdirSync(IMAGE_CACHE)) if (e !== base && !e.endsWith('.lock')) symlinkSync(join(IMAGE_CACHE, e), join(cache, e));
    // The build lock ensureRootfs takes: held by a live process (this one), so the server waits for it.
    mkdirSync(join(cache, `${base}.lock`));
    writeFileSync(join(cache, `${base}.lock`, 'pid'), String(process.pid));

    const socket = `berth-startup-${process.pid}`;
    const tmux = (...a: string[]) => spawnSync('tmux', ['-L', socket, ...a], { encoding: 'utf8' });
    const cmd = `env BERTH_PORT=0 BERTH_LOG_LEVEL=info ${process.execPath} ${join(REPO, 'bin', 'berth')} serve --data ${join(work, 'data')} --image-cache ${cache}`;
    expect(tmux('new-session', '-d', '-s', 's', '-x', '250', '-y', '50', cmd).status).toBe(0);
    const screen = () => tmux('capture-pane', '-p', '-J', '-t', 's').stdout;
    const until = async <T>(f: () => T | undefined | Promise<T | undefined>, what: string, ms = 60_000): Promise<T> => {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        const v = await f();
        if (v !== undefined) return v;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`waited for ${what}; screen:\n${screen()}`);
    };
    try {
      const url = await until(() => /"msg":"listening","url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(screen())?.[1], 'the listening line');
      expect(url).not.toMatch(/:7070$/); // BERTH_PORT=0 chose a free port

      const h = await fetch(`${url}/healthz`);
      expect(h.status).toBe(503);
      const hb = await h.json();
      expect(hb).toMatchObject({ ok: false, starting: { phase: 'gvisor', message: expect.stringContaining('base image'), elapsedS: expect.any(Number) } });

      const v1 = await fetch(`${url}/v1/sessions`, { headers: { authorization: 'Bearer whatever' } });
      expect(v1.status).toBe(503);
      const vb = await v1.json();
      expect(vb.error).toMatchObject({ code: 'unavailable', retryable: true, details: { starting: { phase: 'gvisor' } } });
      expect(vb.error.message).toMatch(/^Berth is starting/);
      // A second look: still starting, and the time moves on.
      await new Promise((r) => setTimeout(r, 1200));
      const later = await (await fetch(`${url}/healthz`)).json();
      expect(later.starting.elapsedS).toBeGreaterThan(hb.starting.elapsedS);
      await until(() => (/\[berth\] preparing the gVisor backend.*\(\d+ s\)/.test(screen()) ? true : undefined), 'the live status line');

      // The build "finishes": the image appears and the lock is released.
      symlinkSync(join(IMAGE_CACHE, base), join(cache, base));
      rmSync(join(cache, `${base}.lock`), { recursive: true, force: true });
      const ready = await until(async () => {
        const r = await (await fetch(`${url}/healthz`)).json();
        return r.starting === undefined ? r : undefined;
      }, 'the start to complete', 120_000);
      expect(ready.backends).toHaveProperty('gvisor');
      await until(() => (screen().includes(`[berth] ready on ${url}`) ? true : undefined), 'the ready line');
      // Now /v1 is the real API: a bad token is the API's 401, not a 503.
      expect((await fetch(`${url}/v1/sessions`, { headers: { authorization: 'Bearer whatever' } })).status).toBe(401);
    } finally {
      tmux('send-keys', '-t', 's', 'C-c');
      await new Promise((r) => setTimeout(r, 1000));
      tmux('kill-server');
    }
  }, 240_000);
});
