/** The memory driver's own promises beyond the shared conformance suite: its shell and its fault injection. */
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SandboxError } from '../../core/index.js';
import { run, specFor } from '../../../test/conformance/driver-suite.js';
import { MemoryDriver } from './driver.js';

let d: MemoryDriver;
let id: string;
beforeEach(async () => {
  d = new MemoryDriver();
  const s = specFor('unit');
  await d.create(s);
  id = s.sandboxId;
});
afterEach(async () => {
  for (const x of await d.list()) await d.destroy(x);
});

describe('shell', () => {
  it('runs lists, && and ||, $?, assignments, quoting and redirections', async () => {
    const r = await run(d, id, ['sh', '-c', `A=1; false || echo "or $A"; false && echo no; echo "st=$?"; echo 'lit $A' > /tmp/f; echo more >> /tmp/f; cat < /tmp/f`]);
    expect(r).toMatchObject({ code: 0, stdout: 'or 1\nst=1\nlit $A\nmore\n', stderr: '' });
    const digest = createHash('sha256').update('x\n').digest('hex');
    expect((await run(d, id, ['sh', '-c', 'echo x | sha256sum | head -c 8'])).stdout).toBe(digest.slice(0, 8));
    expect((await run(d, id, ['sh', '-c', 'echo "unterminated'])).code).toBe(2);
    expect((await run(d, id, ['frobnicate'])).code).toBe(127);
  });
  it('kills by signal with 128+N, and writes to /dev/null vanish', async () => {
    const h = await d.exec(id, { argv: ['sleep', '30'] });
    await h.kill(15);
    expect(await h.wait()).toEqual({ code: 143, signal: 15, timedOut: false });
    await expect(h.writeStdin(new Uint8Array(1))).rejects.toMatchObject({ code: 'invalid_state' });
    expect(await d.writeFile(id, '/dev/null', (async function* () {
      yield new Uint8Array(10);
    })())).toBe(10);
    expect((await d.stat(id, '/dev/null')).size).toBe(0);
  });
});

describe('fault injection', () => {
  it('failNext fails the chosen call, after the given number of successes', async () => {
    const err = new SandboxError('injected');
    d.failNext('stat', err, { after: 1 });
    await d.stat(id, '/tmp');
    await expect(d.stat(id, '/tmp')).rejects.toBe(err);
    await d.stat(id, '/tmp');
    expect(() => d.failNext('stat', err, { midway: true })).toThrow(TypeError);
  });
  it('a midway checkpoint leaves a partial image without its manifest; a midway restore leaves the sandbox', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-mem-'));
    try {
      d.failNext('checkpoint', new SandboxError('half'), { midway: true });
      await expect(d.checkpoint(id, dir)).rejects.toMatchObject({ code: 'sandbox_failed' });
      expect(await readdir(dir)).toEqual(['memory-image.bin']);
      await d.checkpoint(id, dir);
      const b = specFor('b');
      d.failNext('restore', new SandboxError('half'), { midway: true });
      await expect(d.restore(b, dir)).rejects.toMatchObject({ code: 'sandbox_failed' });
      expect(d.has(b.sandboxId)).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
  it('crash ends the sandbox and tells onExit listeners', async () => {
    const seen: string[] = [];
    d.onExit((sid, reason) => seen.push(`${sid}:${reason}`));
    const h = await d.exec(id, { argv: ['sleep', '30'] });
    d.crash(id, 'oom');
    expect(seen).toEqual([`${id}:oom`]);
    expect((await h.wait()).signal).toBe(9);
    await expect(d.exec(id, { argv: ['true'] })).rejects.toMatchObject({ code: 'not_found' });
  });
});
