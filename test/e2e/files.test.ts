/**
 * Files that behave like a user expects (issue 9 §4), on real gVisor sandboxes through a real server and
 * the real CLI: write makes missing parents (--no-parents refuses), mv, push/pull of a directory as a tar
 * stream (binary content, modes and symlinks kept), and watch as JSON lines.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, symlink, writeFile, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('files e2e', gvisorMissing());
const BIN = join(REPO, 'bin', 'berth');
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe.skipIf(skip)('files on real gVisor sandboxes through the CLI', () => {
  let t: TestServer;
  let local: string;
  // Asynchronous: the server runs in this process, so a synchronous spawn would block it.
  const cli = (args: string[], input?: Buffer) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, BERTH_URL: t.url, BERTH_TOKEN: t.rootKey }, timeout: 120_000 });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
      child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(input ?? Buffer.alloc(0));
    });
  beforeAll(async () => {
    t = await startTestServer();
    local = await mkdtemp(join(tmpdir(), 'berth-files-'));
  });
  afterAll(async () => {
    await t?.destroy();
    if (local) await rm(local, { recursive: true, force: true });
  });

  it('writes into missing parents (or refuses with --no-parents) and moves files', async () => {
    const s = await t.client.sessions.create();
    expect((await cli(['files', 'write', s.id, '/root/a/b/c.txt'], Buffer.from('deep'))).code).toBe(0);
    expect(await s.files.readText('/root/a/b/c.txt')).toBe('deep');
    const strict = await cli(['files', 'write', s.id, '/root/x/y.txt', '--no-parents'], Buffer.from('no'));
    expect(strict.code).toBe(1);
    expect(strict.stderr).toMatch(/^berth: not_found: /);
    expect((await cli(['files', 'mv', s.id, '/root/a/b/c.txt', '/root/moved.txt'])).code).toBe(0);
    expect(await s.files.readText('/root/moved.txt')).toBe('deep');
    const missing = await cli(['files', 'mv', s.id, '/root/nope', '/root/x']);
    expect([missing.code, missing.stderr]).toEqual([1, expect.stringMatching(/^berth: not_found: /)]);
    await s.terminate();
  }, 120_000);

  it('pushes and pulls a directory as a tar stream: binary content, modes and symlinks kept', async () => {
    const s = await t.client.sessions.create();
    const src = join(local, 'src');
    await mkdir(join(src, 'bin'), { recursive: true });
    await mkdir(join(src, 'data', 'deep'), { recursive: true });
    const blob = randomBytes(3 * 1024 * 1024 + 7);
    await writeFile(join(src, 'data', 'deep', 'blob.bin'), blob);
    await writeFile(join(src, 'bin', 'run.sh'), '#!/bin/sh\necho ran\n');
    await chmod(join(src, 'bin', 'run.sh'), 0o750);
    await symlink('data/deep/blob.bin', join(src, 'link'));
    const pushed = await cli(['files', 'push', s.id, src, '/srv/app', '--json']);
    expect(pushed.code, pushed.stderr).toBe(0);
    expect(JSON.parse(pushed.stdout)).toMatchObject({ path: '/srv/app', bytes: expect.any(Number) });
    // Inside the sandbox: the executable runs, the link is a link, the blob is intact.
    expect((await s.run(['/srv/app/bin/run.sh'])).stdout).toBe('ran\n');
    expect((await s.files.stat('/srv/app/bin/run.sh')).mode & 0o777).toBe(0o750);
    expect((await s.run(['readlink', '/srv/app/link'])).stdout.trim()).toBe('data/deep/blob.bin');
    expect((await s.run(['sha256sum', '/srv/app/data/deep/blob.bin'])).stdout.split(' ')[0]).toBe(sha(blob));

    await s.run(['sh', '-c', 'echo made-inside > /srv/app/inside.txt && ln -s inside.txt /srv/app/l2']);
    const dst = join(local, 'dst');
    const pulled = await cli(['files', 'pull', s.id, '/srv/app', dst]);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(sha(await readFile(join(dst, 'data', 'deep', 'blob.bin')))).toBe(sha(blob));
    expect((await lstat(join(dst, 'bin', 'run.sh'))).mode & 0o777).toBe(0o750);
    expect(await readlink(join(dst, 'l2'))).toBe('inside.txt');
    expect(await readFile(join(dst, 'inside.txt'), 'utf8')).toBe('made-inside\n');
    const none = await cli(['files', 'pull', s.id, '/srv/none', join(local, 'none')]);
    expect([none.code, none.stderr]).toEqual([1, expect.stringMatching(/^berth: not_found: /)]);
    await s.terminate();
  }, 180_000);

  it('watches a path: inotify events as JSON lines from the CLI', async () => {
    const s = await t.client.sessions.create();
    await s.files.mkdir('/w', { parents: true });
    const child = spawn(process.execPath, [BIN, 'files', 'watch', s.id, '/w', '--recursive'], { env: { ...process.env, BERTH_URL: t.url, BERTH_TOKEN: t.rootKey } });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    try {
      // The watch is in place once the CLI prints (it has nothing to print yet): poll with writes until one shows.
      for (let i = 0; !out.includes('/w/probe'); i++) {
        expect(i).toBeLessThan(100);
        await s.files.write(`/w/probe`, String(i));
        await new Promise((r) => setTimeout(r, 200));
      }
      await s.run(['sh', '-c', 'mkdir /w/d && sleep 0.3 && echo x > /w/d/f && rm /w/d/f']);
      for (let i = 0; !out.includes('"/w/d/f"') || !out.includes('"delete"'); i++) {
        expect(i, out).toBeLessThan(100);
        await new Promise((r) => setTimeout(r, 100));
      }
      const events = out.trim().split('\n').map((l) => JSON.parse(l) as { type: string; path: string; isDir: boolean });
      expect(events).toContainEqual({ type: 'create', path: '/w/d', isDir: true });
      expect(events).toContainEqual({ type: 'create', path: '/w/d/f', isDir: false });
      expect(events).toContainEqual({ type: 'delete', path: '/w/d/f', isDir: false });
    } finally {
      child.kill('SIGINT');
    }
    await s.terminate();
  }, 120_000);
});
