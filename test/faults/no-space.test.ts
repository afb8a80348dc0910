/**
 * Issue 7 §3: a hibernate or snapshot that cannot fit on the disk must leave the session as it was
 * (running, files and processes intact), remove any partial image and fail with `no_space`. The snapshot
 * directory is a 200 MB tmpfs and the session holds 300 MB of written data; once the snapshot
 * directory grows the same hibernate succeeds and wakes the same processes.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isAppError } from '../../src/sdk/index.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('no-space faults', gvisorMissing());

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return isAppError(e) ? e.code : String(e);
  }
}

describe.skipIf(skip)('issue 7 §3: no space for a checkpoint image', () => {
  let dataDir = '';
  let snapDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    if (snapDir) spawnSync('umount', [snapDir]);
    await scrub(dataDir);
  });

  it('hibernate and snapshot fail with no_space and the session carries on; with room again it hibernates', { timeout: 600_000 }, async () => {
    dataDir = await tempDataDir('nospace');
    snapDir = join(dataDir, 'snapshots');
    mkdirSync(snapDir);
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=200m', 'tmpfs', snapDir]).status).toBe(0);
    server = await startServerProcess({ dataDir });
    const berth = client(server);
    const s = await berth.sessions.create({ memoryMb: 1024 });
    await s.run(['sh', '-c', COUNTER]);
    await s.files.write('/root/keep.txt', 'kept');
    expect((await s.run(['sh', '-c', 'head -c 300000000 /dev/urandom > /root/big && echo ok'])).stdout.toString().trim()).toBe('ok');

    expect(await code(s.hibernate())).toBe('no_space');
    expect(await code(s.snapshot({ name: 'full' }))).toBe('no_space');
    const after = await berth.sessions.get(s.id);
    expect([after.info.state, after.info.failureReason]).toEqual(['running', null]);
    expect(await counterRuns(after)).toBe(true);
    expect(await after.files.readText('/root/keep.txt')).toBe('kept');
    expect(readdirSync(snapDir).filter((d) => !d.startsWith('.'))).toEqual([]);
    expect(await berth.snapshots.list()).toEqual([]);

    // Room again (the operator grew the disk): the same hibernate goes through and wakes the same machine.
    expect(spawnSync('mount', ['-o', 'remount,size=1g', snapDir]).status).toBe(0);
    await after.hibernate();
    expect((await berth.sessions.get(s.id)).info.state).toBe('hibernated');
    await after.wake();
    expect(await counterRuns(after)).toBe(true);
    expect(await after.files.readText('/root/keep.txt')).toBe('kept');
    await after.terminate();
    await stopServerProcess(server);
    server = undefined;
  });
});
