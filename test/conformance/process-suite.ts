/**
 * Conformance cases for background processes and rename (issue 9 §1, §4), run against every driver like
 * driver-suite.ts. The commands use only what the memory driver's built-in userland has (sh -c, echo, cat,
 * sleep), so every case runs on every driver; `liveMemory` decides what a checkpoint must carry.
 */
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ExecExit, ProcessOutputEvent, SandboxDriver, WatchEvent } from '../../src/core/index.js';
import { specFor, useConformanceTarget, type ConformanceTarget } from './driver-suite.js';

async function* once(b: Buffer): AsyncIterable<Uint8Array> {
  yield b;
}

/** Everything an output stream gives, per stream, checking that offsets are contiguous. */
export async function drain(src: AsyncIterable<ProcessOutputEvent>, from = { stdout: 0, stderr: 0 }) {
  const got = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const next = { ...from };
  const first: { stdout?: number; stderr?: number } = {};
  let exit: ExecExit | null = null;
  for await (const ev of src) {
    if (ev.type === 'exit') {
      exit = ev.exit;
      continue;
    }
    first[ev.type] ??= ev.offset;
    if (first[ev.type] !== ev.offset) expect(ev.offset).toBe(next[ev.type]); // no gap, no repeat
    next[ev.type] = ev.offset + ev.data.byteLength;
    got[ev.type].push(Buffer.from(ev.data));
  }
  return { stdout: Buffer.concat(got.stdout), stderr: Buffer.concat(got.stderr), exit, first, next };
}

export function processConformance(name: string, make: () => Promise<ConformanceTarget>, opts: { timeoutMs?: number } = {}): void {
  const T = opts.timeoutMs ?? 60_000;
  describe(`driver conformance (background processes, rename): ${name}`, () => {
    const fx = useConformanceTarget(name, 'proc', make);
    let d: SandboxDriver;
    let images: string;
    beforeAll(() => {
      d = fx.driver;
      images = fx.images;
    });
    const start = async (tag: string) => (await fx.start(tag)).sandboxId;

    it('runs a command in the background: listed, its output replayed and followed, its exit kept; survives a checkpoint', async () => {
      const id = await start('bg');
      expect(d.capabilities.processRingBytes).toBe(1 << 20);
      const { pid } = await d.startProcess(id, 'exe_one', { argv: ['sh', '-c', 'echo hello; echo oops >&2; sleep 3; echo done; exit 3'], env: { X: '1' } });
      expect(pid).toBeGreaterThan(0);
      const [running] = await d.listProcesses(id);
      expect(running).toMatchObject({ execId: 'exe_one', pid, state: 'running', exit: null, endedAt: null, argv: ['sh', '-c', expect.stringContaining('echo hello')] });
      await expect(d.startProcess(id, 'exe_one', { argv: ['true'] })).rejects.toMatchObject({ code: 'conflict' });
      // Without follow: what is there now, and no exit yet.
      // Wait for the first line by the record's byte count (no fixed sleep: TCG under load is slow).
      for (let i = 0; (await d.listProcesses(id))[0]!.stdoutBytes < 6; i++) {
        expect(i).toBeLessThan(300);
        await new Promise((r) => setTimeout(r, 50));
      }
      const now = await drain(await d.processOutput(id, 'exe_one'));
      expect(now.stdout.toString()).toBe('hello\n');
      expect(now.exit).toBeNull();
      if (d.capabilities.liveMemory) {
        // The process and its ring are machine memory: a checkpoint-and-restore carries both, mid-run.
        const img = join(images, `bg-${Date.now()}`);
        await mkdir(img);
        await d.checkpoint(id, img);
        const b = specFor('bg-back', { identity: { hostname: 'back', machineId: 'a'.repeat(32), generation: 2, reason: 'wake' } });
        await d.restore(b, img);
        fx.own(b.sandboxId);
        const all = await drain(await d.processOutput(b.sandboxId, 'exe_one', { follow: true }));
        expect(all.stdout.toString()).toBe('hello\ndone\n');
        expect(all.stderr.toString()).toBe('oops\n');
        expect(all.exit).toEqual({ code: 3, signal: null, timedOut: false });
        const [ended] = await d.listProcesses(b.sandboxId);
        expect(ended).toMatchObject({ execId: 'exe_one', state: 'exited', exit: { code: 3 }, stdoutBytes: 11, stderrBytes: 5 });
        expect(ended!.endedAt).toBeGreaterThanOrEqual(ended!.startedAt);
        return;
      }
      const all = await drain(await d.processOutput(id, 'exe_one', { follow: true }));
      expect(all.stdout.toString()).toBe('hello\ndone\n');
      expect(all.stderr.toString()).toBe('oops\n');
      expect(all.exit).toEqual({ code: 3, signal: null, timedOut: false });
      expect((await d.listProcesses(id))[0]).toMatchObject({ state: 'exited', exit: { code: 3 }, stdoutBytes: 11, stderrBytes: 5 });
      // Without live memory a checkpoint still carries the finished record and its output.
      const img = join(images, `bg-${Date.now()}`);
      await mkdir(img);
      await d.checkpoint(id, img);
      const b = specFor('bg-back');
      await d.restore(b, img);
      fx.own(b.sandboxId);
      expect((await drain(await d.processOutput(b.sandboxId, 'exe_one'))).stdout.toString()).toBe('hello\ndone\n');
    }, T * 2);

    it('keeps the last 1 MiB of each stream: the ring wraps, offsets keep counting', async () => {
      const id = await start('ring');
      const big = randomBytes(3 * (1 << 20) + 12345);
      await d.writeFile(id, '/tmp/big', once(big));
      await d.startProcess(id, 'exe_ring', { argv: ['sh', '-c', 'cat /tmp/big; cat /tmp/big >&2'] });
      // Read once it has ended: a live follower more than a ring behind skips ahead (the offsets show it).
      for (let i = 0; (await d.listProcesses(id))[0]!.state === 'running'; i++) {
        expect(i).toBeLessThan(200);
        await new Promise((r) => setTimeout(r, 50));
      }
      const r = await drain(await d.processOutput(id, 'exe_ring', { follow: true }));
      expect(r.exit?.code).toBe(0);
      expect(r.first.stdout).toBe(big.length - (1 << 20));
      expect(r.stdout.equals(big.subarray(big.length - (1 << 20)))).toBe(true);
      expect(r.stderr.equals(big.subarray(big.length - (1 << 20)))).toBe(true);
      // Asking for an offset inside the ring gives exactly the rest.
      const tail = await drain(await d.processOutput(id, 'exe_ring', { stdoutOffset: big.length - 100, stderrOffset: big.length }), { stdout: big.length - 100, stderr: big.length });
      expect(tail.stdout.equals(big.subarray(big.length - 100))).toBe(true);
      expect(tail.stderr.length).toBe(0);
      expect((await d.listProcesses(id))[0]).toMatchObject({ stdoutBytes: big.length, stderrBytes: big.length });
    }, T);

    it('follows from an offset across a detach: nothing lost or repeated, and detaching never stops the command', async () => {
      const id = await start('follow');
      const parts = [randomBytes(200_000), randomBytes(150_000), randomBytes(100_000)];
      for (const [i, p] of parts.entries()) await d.writeFile(id, `/tmp/p${i}`, once(p));
      await d.startProcess(id, 'exe_f', { argv: ['sh', '-c', 'cat /tmp/p0; sleep 0.6; cat /tmp/p1; sleep 0.6; cat /tmp/p2'] });
      const got: Buffer[] = [];
      let offset = 0;
      // Detach three times mid-stream, each time resuming from the last offset seen.
      for (let round = 0; ; round++) {
        let ended = false;
        let n = 0;
        for await (const ev of await d.processOutput(id, 'exe_f', { follow: true, stdoutOffset: offset })) {
          if (ev.type === 'exit') {
            ended = true;
            expect(ev.exit.code).toBe(0);
            break;
          }
          if (ev.type !== 'stdout') continue;
          expect(ev.offset).toBe(offset);
          got.push(Buffer.from(ev.data));
          offset += ev.data.byteLength;
          if (round < 3 && ++n >= 2) break; // detach
        }
        if (ended) break;
        expect(round).toBeLessThan(50);
      }
      expect(Buffer.concat(got).equals(Buffer.concat(parts))).toBe(true);
    }, T);

    it('kills by signal; unknown execIds are not_found', async () => {
      const id = await start('kill');
      await d.startProcess(id, 'exe_k', { argv: ['sleep', '30'] });
      expect(await d.killProcess(id, 'exe_k', { signalNumber: 15 })).toBe(true);
      const r = await drain(await d.processOutput(id, 'exe_k', { follow: true }));
      expect(r.exit).toEqual({ code: 143, signal: 15, timedOut: false });
      expect(await d.killProcess(id, 'exe_k')).toBe(false);
      await expect(d.processOutput(id, 'exe_nope')).rejects.toMatchObject({ code: 'not_found' });
      await expect(d.killProcess(id, 'exe_nope')).rejects.toMatchObject({ code: 'not_found' });
      await expect(d.startProcess(id, 'exe_in', { argv: ['cat'], stdin: true })).rejects.toMatchObject({ code: 'invalid_argument' });
    }, T);

    it('watches a tree: creates, moves and deletes below it, new directories included', async () => {
      const id = await start('watch');
      await d.mkdir(id, '/w', { parents: true });
      await expect(d.watchFiles(id, '/missing')).rejects.toMatchObject({ code: 'not_found' });
      const ac = new AbortController();
      const seen: WatchEvent[] = [];
      const wake = { poke: null as (() => void) | null };
      const src = await d.watchFiles(id, '/w', { recursive: true, signal: ac.signal });
      const reading = (async () => {
        try {
          for await (const ev of src) {
            seen.push(ev);
            wake.poke?.();
          }
        } catch (e) {
          if (!ac.signal.aborted) throw e;
        }
      })();
      const until = async (ok: (e: WatchEvent) => boolean) => {
        for (let i = 0; !seen.some(ok); i++) {
          expect(i, JSON.stringify(seen)).toBeLessThan(100);
          await new Promise<void>((r) => ((wake.poke = r), setTimeout(r, 100)));
        }
      };
      await d.mkdir(id, '/w/sub');
      await until((e) => e.type === 'create' && e.path === '/w/sub' && e.isDir);
      await d.writeFile(id, '/w/sub/f', once(Buffer.from('data')));
      await until((e) => e.path === '/w/sub/f' && e.type !== 'delete');
      await d.rename(id, '/w/sub/f', '/w/g');
      await until((e) => e.type === 'move_to' && e.path === '/w/g');
      await d.remove(id, '/w/g');
      await until((e) => e.type === 'delete' && e.path === '/w/g');
      expect(seen.some((e) => e.type === 'move_from' && e.path === '/w/sub/f')).toBe(true);
      ac.abort();
      await reading;
    }, T);

    it('renames files and directories atomically; refuses what rename(2) refuses', async () => {
      const id = await start('mv');
      await d.mkdir(id, '/w/a', { parents: true });
      await d.writeFile(id, '/w/a/f', once(Buffer.from('x')));
      await d.rename(id, '/w/a/f', '/w/g');
      expect((await d.stat(id, '/w/g')).size).toBe(1);
      await expect(d.stat(id, '/w/a/f')).rejects.toMatchObject({ code: 'not_found' });
      await d.rename(id, '/w/a', '/w/b');
      expect((await d.stat(id, '/w/b')).type).toBe('dir');
      await expect(d.rename(id, '/w/missing', '/w/x')).rejects.toMatchObject({ code: 'not_found' });
      await expect(d.rename(id, '/w/g', '/w/b')).rejects.toMatchObject({ code: 'invalid_argument' }); // EISDIR
      await expect(d.rename(id, '/w/b', '/w/b/inside')).rejects.toMatchObject({ code: 'invalid_argument' }); // EINVAL
    }, T);
  });
}
