/**
 * The agent is the component under test: it is built from source and run as a plain child process on the
 * host, connected to an AgentChannel by pipes (runsc is tested with the gVisor driver). Exec, files and the
 * channel here; connection, lifetime, device mode and identity in channel-lifecycle.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { PathNotCanonicalError } from '../../core/errors.js';
import { AgentChannel } from './channel.js';
import { type Agent, agentBin, chunksOf, codeOf, collect, readAll, run, sha256, startAgent, stop, strayPids, useAgentHarness, work } from '../../../test/helpers/agent-harness.js';

useAgentHarness();

describe('berth-agent over AgentChannel', () => {
  let a: Agent;
  beforeAll(async () => {
    a = await startAgent();
  });

  describe('exec', () => {
    it('reports stdout, stderr and the exit code', async () => {
      const r = await run(a.ch, { argv: ['sh', '-c', 'echo out; echo err >&2; exit 3'] });
      expect(r).toEqual({ stdout: 'out\n', stderr: 'err\n', code: 3, signal: null, timedOut: false });
    });

    it('reports death by signal with the shell convention', async () => {
      const r = await run(a.ch, { argv: ['sh', '-c', 'kill -TERM $$'] });
      expect(r).toMatchObject({ code: 143, signal: 15, timedOut: false });
    });

    it('applies cwd and merges env over the base environment', async () => {
      const r = await run(a.ch, { argv: ['sh', '-c', 'pwd; echo "$FOO"; test -n "$PATH" && echo path'], cwd: work, env: { FOO: 'bar baz' } });
      expect(r.stdout).toBe(`${work}\nbar baz\npath\n`);
    });

    it('finds argv[0] in the PATH given by the request', async () => {
      const dir = join(work, 'pathbin');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'berth-hello'), '#!/bin/sh\necho hello from path\n', { mode: 0o755 });
      const r = await run(a.ch, { argv: ['berth-hello'], env: { PATH: `${dir}:/usr/bin:/bin` } });
      expect(r).toMatchObject({ code: 0, stdout: 'hello from path\n' });
    });

    it('reports a missing binary as exit 127 with the error on stderr', async () => {
      const r = await run(a.ch, { argv: ['/nonexistent/berth-no-such-binary'] });
      expect(r.code).toBe(127);
      expect(r.signal).toBeNull();
      expect(r.stderr.length).toBeGreaterThan(0);
    });

    it('reports a missing cwd as exit 127', async () => {
      const r = await run(a.ch, { argv: ['true'], cwd: '/nonexistent-berth-dir' });
      expect(r.code).toBe(127);
    });

    it('passes stdin through, with flow control for large inputs', async () => {
      const h = await a.ch.exec({ argv: ['sh', '-c', 'cat; echo done >&2'], stdin: true });
      const out = collect(h);
      await h.writeStdin(Buffer.from('hello '));
      await h.writeStdin(Buffer.from('world'));
      await h.closeStdin();
      expect(await out).toMatchObject({ code: 0, stdout: 'hello world', stderr: 'done\n' });

      const big = randomBytes(3 << 20);
      const wc = await a.ch.exec({ argv: ['sha256sum'], stdin: true });
      const res = collect(wc);
      await wc.writeStdin(big);
      await wc.closeStdin();
      expect((await res).stdout.split(' ')[0]).toBe(sha256(big));
    });

    it('streams stdin and stdout at the same time (full duplex, no deadlock)', async () => {
      const data = randomBytes(16 << 20);
      const h = await a.ch.exec({ argv: ['cat'], stdin: true });
      const hash = createHash('sha256');
      const reading = (async () => {
        for await (const ev of h) if (ev.type === 'stdout') hash.update(ev.data);
      })();
      for (let off = 0; off < data.length; off += 1 << 20) await h.writeStdin(data.subarray(off, off + (1 << 20)));
      await h.closeStdin();
      await reading;
      expect(hash.digest('hex')).toBe(sha256(data));
      expect((await h.wait()).code).toBe(0);
    });

    it('gives a command without stdin an empty one, and refuses writes to it', async () => {
      const h = await a.ch.exec({ argv: ['cat'] });
      expect(await codeOf(h.writeStdin(Buffer.from('x')))).toBe('invalid_state');
      expect(await collect(h)).toMatchObject({ code: 0, stdout: '' });
    });

    it('kills the process group on timeout and reports timedOut', async () => {
      const t0 = Date.now();
      const r = await run(a.ch, { argv: ['sh', '-c', 'sleep 10 & sleep 10; echo never'], timeoutMs: 200 });
      expect(r).toMatchObject({ code: 137, signal: 9, timedOut: true, stdout: '' });
      expect(Date.now() - t0).toBeLessThan(3000);
    });

    it('kill() signals the process group; aborting the signal kills it too', async () => {
      const h = await a.ch.exec({ argv: ['sleep', '10'] });
      await h.kill(15);
      expect(await h.wait()).toMatchObject({ code: 143, signal: 15, timedOut: false });

      const ac = new AbortController();
      const h2 = await a.ch.exec({ argv: ['sleep', '10'] }, { signal: ac.signal });
      ac.abort();
      expect(await h2.wait()).toMatchObject({ signal: 9, timedOut: false });
    });

    it('does not wait for background processes that keep running', async () => {
      const t0 = Date.now();
      const r = await run(a.ch, { argv: ['sh', '-c', 'setsid sleep 30 >/dev/null 2>&1 & echo started $!'] });
      expect(r.stdout).toMatch(/^started \d+\n$/);
      strayPids.push(Number(r.stdout.split(' ')[1]));
      // Harder: the background process holds the output pipes and stays in the command's group.
      const r2 = await run(a.ch, { argv: ['sh', '-c', 'sleep 30 & echo started $!'] });
      strayPids.push(Number(r2.stdout.split(' ')[1]));
      expect(r2).toMatchObject({ code: 0 });
      expect(Date.now() - t0).toBeLessThan(2000);
    });

    it('runs concurrent commands independently', async () => {
      const t0 = Date.now();
      const results = await Promise.all(
        Array.from({ length: 24 }, (_, i) => run(a.ch, { argv: ['sh', '-c', `sleep 0.2; echo out$0; echo err$0 >&2; exit $(($0 % 7))`, String(i)] })),
      );
      results.forEach((r, i) => expect(r).toMatchObject({ stdout: `out${i}\n`, stderr: `err${i}\n`, code: i % 7 }));
      expect(Date.now() - t0).toBeLessThan(3000);
    });

    it('carries large outputs intact', async () => {
      const r = await a.ch.exec({ argv: ['sh', '-c', 'head -c 8000000 /dev/zero | tr "\\0" "a"'] });
      let n = 0;
      for await (const ev of r) if (ev.type === 'stdout') n += ev.data.length;
      expect(n).toBe(8_000_000);
      expect((await r.wait()).code).toBe(0);
    });

    it('applies back-pressure to a slow consumer without losing output', async () => {
      const h = await a.ch.exec({ argv: ['head', '-c', '24000000', '/dev/zero'] });
      let n = 0;
      let events = 0;
      for await (const ev of h) {
        if (ev.type !== 'stdout') continue;
        n += ev.data.length;
        if (++events % 64 === 0) await new Promise((r) => setTimeout(r, 2));
      }
      expect(n).toBe(24_000_000);
    });

    it('bounds the output kept for a handle nobody iterates', async () => {
      const b = await startAgent();
      b.ch.close(); // hand the agent over to a channel with a small bound
      const small = await AgentChannel.connect({ input: b.proc.stdout, output: b.proc.stdin, maxUnconsumedBytes: 1 << 20 });
      const h = await small.exec({ argv: ['head', '-c', '5000000', '/dev/zero'] });
      expect((await h.wait()).code).toBe(0);
      let n = 0;
      for await (const ev of h) if (ev.type === 'stdout') n += ev.data.length;
      expect(n).toBeLessThanOrEqual(1 << 20);
      expect(n).toBeGreaterThan(0);
      small.close();
    });

    it('allows wait() without iterating, and iterating only once', async () => {
      const h = await a.ch.exec({ argv: ['sh', '-c', 'echo late'] });
      expect((await h.wait()).code).toBe(0);
      expect((await collect(h)).stdout).toBe('late\n');
      expect(() => h[Symbol.asyncIterator]()).toThrow();
    });

    it('measures the exec round trip', async () => {
      const times: number[] = [];
      for (let i = 0; i < 200; i++) {
        const t0 = performance.now();
        const h = await a.ch.exec({ argv: ['true'] });
        await h.wait();
        times.push(performance.now() - t0);
      }
      times.sort((x, y) => x - y);
      const p50 = times[100]!;
      const p99 = times[198]!;
      const shell = spawnSync('sh', ['-c', 'for i in $(seq 200); do /bin/true; done']);
      expect(shell.status).toBe(0);
      console.info(`exec round trip of \`true\` over 200 runs: p50 ${p50.toFixed(3)} ms, p99 ${p99.toFixed(3)} ms`);
      const pings: number[] = [];
      for (let i = 0; i < 300; i++) pings.push(await a.ch.ping());
      pings.sort((x, y) => x - y);
      console.info(`ping p50: ${pings[150]!.toFixed(3)} ms`);
      expect(p50).toBeLessThan(20);
    });
  });

  describe('files', () => {
    it('round-trips a 20 MB binary file', async () => {
      const data = randomBytes(20 << 20);
      const path = join(work, 'big.bin');
      expect(await a.ch.writeFile(path, chunksOf(data, 1 << 20), { mode: 0o600 })).toBe(data.length);
      expect(sha256(readFileSync(path))).toBe(sha256(data));
      const hash = createHash('sha256');
      let chunks = 0;
      for await (const c of await a.ch.readFile(path)) {
        hash.update(c);
        chunks++;
      }
      expect(hash.digest('hex')).toBe(sha256(data));
      expect(chunks).toBeGreaterThan(400); // streamed in 48 KiB pieces, never held whole
      expect((await a.ch.stat(path)).mode).toBe(0o600);
    }, 20_000);

    it('writes atomically: an aborted write leaves neither the file nor a temporary one', async () => {
      const dir = join(work, 'atomic');
      mkdirSync(dir);
      const ac = new AbortController();
      async function* slow(): AsyncGenerator<Uint8Array> {
        yield randomBytes(100_000);
        setTimeout(() => ac.abort(), 20);
        await new Promise((r) => setTimeout(r, 5000));
        yield randomBytes(10);
      }
      expect(await codeOf(a.ch.writeFile(join(dir, 'f'), slow(), { signal: ac.signal }))).toBe('cancelled');
      expect(readdirSync(dir)).toEqual([]);

      // A failing source aborts too, and an existing file keeps its old content.
      writeFileSync(join(dir, 'g'), 'old');
      async function* failing(): AsyncGenerator<Uint8Array> {
        yield Buffer.from('new content');
        throw new Error('source failed');
      }
      await expect(a.ch.writeFile(join(dir, 'g'), failing())).rejects.toThrow('source failed');
      expect(readdirSync(dir)).toEqual(['g']);
      expect(readFileSync(join(dir, 'g'), 'utf8')).toBe('old');

      // An empty write creates an empty file.
      expect(await a.ch.writeFile(join(dir, 'empty'), chunksOf(Buffer.alloc(0), 1))).toBe(0);
      expect(await readAll(a.ch, join(dir, 'empty'))).toEqual(Buffer.alloc(0));
    });

    it('stops a read early without leaking the file in the agent', async () => {
      const path = join(work, 'big.bin');
      const fds = () => readdirSync(`/proc/${a.proc.pid}/fd`).length;
      const before = fds();
      for (let i = 0; i < 5; i++) {
        for await (const c of await a.ch.readFile(path)) {
          expect(c.length).toBeGreaterThan(0);
          break;
        }
      }
      await a.ch.ping();
      expect(fds()).toBe(before);
    });

    it('lists, stats, resolves, creates and removes', async () => {
      const base = join(work, 'tree');
      await a.ch.mkdir(join(base, 'a/b/c'), { parents: true });
      await a.ch.mkdir(join(base, 'a/b/c'), { parents: true }); // -p accepts an existing directory
      await a.ch.writeFile(join(base, 'a/b/c/file.txt'), chunksOf(Buffer.from('hello'), 2));
      symlinkSync('a/b', join(base, 'link'));

      const entries = await a.ch.list(join(base, 'a/b/c'));
      expect(entries).toEqual([{ name: 'file.txt', type: 'file', size: 5, mode: 0o644, mtimeMs: expect.any(Number) }]);
      expect(Math.abs(entries[0]!.mtimeMs - Date.now())).toBeLessThan(60_000);
      expect((await a.ch.list(base)).map((e) => [e.name, e.type])).toEqual([['a', 'dir'], ['link', 'symlink']]);

      expect(await a.ch.stat(join(base, 'link'))).toMatchObject({ type: 'symlink', name: 'link', path: join(base, 'link') });
      expect(await a.ch.stat(join(base, 'a/b/c/file.txt'))).toMatchObject({ type: 'file', size: 5 });

      expect(await a.ch.realpath(join(base, 'link/c/file.txt'))).toBe(join(base, 'a/b/c/file.txt'));
      expect(await a.ch.realpath(join(base, 'link/new/../x/y'))).toBe(join(base, 'a/b/x/y'));
      expect(await a.ch.realpath(join(base, 'missing/../link/c'))).toBe(join(base, 'a/b/c'));
      expect(await a.ch.realpath('/')).toBe('/');

      await a.ch.remove(join(base, 'link'));
      expect(existsSync(join(base, 'a'))).toBe(true); // the link went, not its target
      await a.ch.remove(join(base, 'a'), { recursive: true });
      expect(readdirSync(base)).toEqual([]);
      await a.ch.remove(base);
      expect(existsSync(base)).toBe(false);
    });

    it('runs an operation under a guard only while its paths are canonical (protocol 2)', async () => {
      const base = join(work, 'guard');
      mkdirSync(join(base, 'real'), { recursive: true });
      symlinkSync('real', join(base, 'link'));
      writeFileSync(join(base, 'real/a'), 'a');
      expect(a.ch.info.version).toBe(2);
      // Canonical: the operation runs, in the same round trip as the check.
      expect((await a.ch.guarded([join(base, 'real')], () => a.ch.list(join(base, 'real')))).map((e) => e.name)).toEqual(['a']);
      const fresh = join(base, 'real/new.txt'); // not there yet: its canonical form is itself
      expect(await a.ch.guarded([fresh], () => a.ch.writeFile(fresh, chunksOf(Buffer.from('ok'), 2)))).toBe(2);
      expect(readFileSync(fresh, 'utf8')).toBe('ok');
      // Through a symlink: refused with where it leads, and nothing ran.
      const viaLink = join(base, 'link/b');
      const e = await a.ch.guarded([viaLink], () => a.ch.writeFile(viaLink, chunksOf(Buffer.from('no'), 2))).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(PathNotCanonicalError);
      expect(e).toMatchObject({ code: 'conflict', path: viaLink, canonical: join(base, 'real/b') });
      expect(existsSync(join(base, 'real/b'))).toBe(false);
      // Two guards, the second failing: the command does not run; one that cannot be resolved fails too.
      const marker = join(base, 'ran');
      const two = a.ch.guarded([join(base, 'real'), join(base, 'link')], () => a.ch.exec({ argv: ['/bin/touch', marker] }));
      expect(await two.catch((x: unknown) => x)).toMatchObject({ path: join(base, 'link'), canonical: join(base, 'real') });
      const bad = join(base, 'real/a/x'); // through a file: ENOTDIR
      expect(await a.ch.guarded([bad], () => a.ch.exec({ argv: ['/bin/touch', marker] })).catch((x: unknown) => x)).toMatchObject({ path: bad, canonical: null });
      expect(existsSync(marker)).toBe(false);
      // The guard covers only the next request: the channel goes on as before.
      expect(await a.ch.realpath(viaLink)).toBe(join(base, 'real/b'));
      expect((await a.ch.list(join(base, 'link'))).map((x) => x.name)).toEqual(['a', 'new.txt']);
    });

    it('maps agent errnos to error codes', async () => {
      const dir = join(work, 'errs');
      mkdirSync(join(dir, 'full'), { recursive: true });
      writeFileSync(join(dir, 'full/f'), 'x');
      const none = join(dir, 'none');
      expect(await codeOf(a.ch.stat(none))).toBe('not_found');
      expect(await codeOf(a.ch.readFile(none))).toBe('not_found');
      expect(await codeOf(a.ch.list(none))).toBe('not_found');
      expect(await codeOf(a.ch.remove(none))).toBe('not_found');
      expect(await codeOf(a.ch.writeFile(join(none, 'f'), chunksOf(Buffer.from('x'), 1)))).toBe('not_found');
      expect(await codeOf(a.ch.mkdir(join(none, 'x/y')))).toBe('not_found');
      expect(await codeOf(a.ch.mkdir(join(dir, 'full')))).toBe('conflict');
      expect(await codeOf(a.ch.mkdir(join(dir, 'full/f'), { parents: true }))).toBe('conflict');
      expect(await codeOf(a.ch.readFile(dir))).toBe('invalid_argument'); // EISDIR
      expect(await codeOf(a.ch.list(join(dir, 'full/f')))).toBe('invalid_argument'); // ENOTDIR
      expect(await codeOf(a.ch.realpath(join(dir, 'full/f/x')))).toBe('invalid_argument');
      expect(await codeOf(a.ch.writeFile(join(dir, 'full'), chunksOf(Buffer.from('x'), 1)))).toBe('invalid_argument');
      expect(await codeOf(a.ch.stat(`/${'x'.repeat(300)}`))).toBe('invalid_argument'); // ENAMETOOLONG
      expect(await codeOf(a.ch.remove(join(dir, 'full')))).toBe('invalid_state'); // ENOTEMPTY
      expect(await codeOf(a.ch.remove('/'))).toBe('forbidden');
      expect(await codeOf(a.ch.stat('relative/path'))).toBe('invalid_argument');
      const e = (await a.ch.stat(none).then(() => null, (x: unknown) => x)) as { details?: Record<string, unknown> } | null;
      expect(e?.details).toMatchObject({ errno: 'ENOENT', path: none });
    });

    it('reports forbidden for a read-only file system', async () => {
      const ro = spawnSync('unshare', ['--mount', 'sh', '-c', 'exit 0']);
      if (ro.status !== 0) return; // no mount namespaces here
      const b = await startAgent({ argv: ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', `mount --bind ${work} ${work} && mount -o remount,bind,ro ${work} && exec ${agentBin}`] });
      try {
        expect(await codeOf(b.ch.mkdir(join(work, 'ro-dir')))).toBe('forbidden');
      } finally {
        stop(b);
      }
    });
  });

  describe('channel', () => {
    it('pings, and quiesces until the next line', async () => {
      expect(await a.ch.ping()).toBeGreaterThan(0);
      const ticker = await a.ch.exec({ argv: ['sh', '-c', 'while :; do echo tick; sleep 0.02; done'] });
      let ticks = 0;
      const counting = (async () => {
        for await (const ev of ticker) if (ev.type === 'stdout') ticks += Buffer.from(ev.data).toString().split('tick').length - 1;
      })();
      await new Promise((r) => setTimeout(r, 100));
      await a.ch.quiesce();
      const frozen = ticks;
      await new Promise((r) => setTimeout(r, 200));
      expect(ticks).toBe(frozen); // nothing written while quiesced
      await a.ch.ping(); // any line ends the quiesce
      await new Promise((r) => setTimeout(r, 100));
      expect(ticks).toBeGreaterThan(frozen);
      await ticker.kill();
      await counting;
      expect((await run(a.ch, { argv: ['echo', 'after quiesce'] })).stdout).toBe('after quiesce\n');
    });
  });
});
