/**
 * Issue 7 §8: a gVisor session's files live in its memory, so they get a room of their own (`diskMb`, default
 * half of `memoryMb`): a writer past it gets ENOSPC and the machine runs on, instead of the sandbox being
 * OOM-killed at the memory limit (which is what 600 MB of `dd` did to a 256 MB session before). Real server
 * process, real runsc; the room is the agent's overlay (agent/c/disk.c), so it must also hold across
 * hibernate, wake and a fork, and /tmp must be inside it.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, leftovers, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('disk limit faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §8: the writable layer has its own size', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('600 MB of dd in a 256 MB session: ENOSPC at 128 MB, the machine and its processes run on, across hibernate, wake and fork', { timeout: 300_000 }, async () => {
    dataDir = await tempDataDir('disk');
    server = await startServerProcess({ dataDir });
    const berth = client(server);
    const s = await berth.sessions.create({ memoryMb: 256 });
    expect(s.info.settings.diskMb).toBe(128);
    await s.run(['sh', '-c', COUNTER]);
    await s.files.write('/root/keep.txt', 'kept\n');
    // What df reports is the room itself (KiB blocks).
    const df = (await s.run(['df', '-k', '/'])).stdout.trim().split('\n').pop()!.split(/\s+/);
    expect(Number(df[1])).toBe(128 * 1024);

    const dd = await s.run(['dd', 'if=/dev/zero', 'of=/root/big', 'bs=1M', 'count=600']);
    expect(dd.code).not.toBe(0);
    expect(dd.stderr).toMatch(/No space left on device/);
    expect((await berth.sessions.get(s.id)).info.state).toBe('running');
    expect(await counterRuns(s)).toBe(true);
    // /tmp is inside the same room.
    const tmp = await s.run(['dd', 'if=/dev/zero', 'of=/tmp/more', 'bs=1M', 'count=8']);
    expect(tmp.stderr).toMatch(/No space left on device/);

    // Freed room is room again; the machine's own files are where they were.
    await s.run(['rm', '/root/big']);
    await s.run(['dd', 'if=/dev/zero', 'of=/root/mid', 'bs=1M', 'count=40']);
    expect(await s.files.readText('/root/keep.txt')).toBe('kept\n');
    // The agent's directory stays read-only inside the overlay.
    expect((await s.run(['touch', '/opt/berth/bin/x'])).code).not.toBe(0);

    await s.hibernate();
    expect(await counterRuns(s)).toBe(true); // a call wakes it
    const again = await s.run(['dd', 'if=/dev/zero', 'of=/root/big2', 'bs=1M', 'count=600']);
    expect(again.stderr).toMatch(/No space left on device/);
    await s.run(['rm', '/root/big2']);

    const snap = await s.snapshot();
    const [b] = await berth.snapshots.fork(snap.id, { count: 1 });
    expect(b!.info.settings.diskMb).toBe(128);
    expect(await b!.files.readText('/root/keep.txt')).toBe('kept\n');
    const inBranch = await b!.run(['dd', 'if=/dev/zero', 'of=/root/big3', 'bs=1M', 'count=600']);
    expect(inBranch.stderr).toMatch(/No space left on device/);
    expect((await berth.sessions.get(b!.id)).info.state).toBe('running');
    // The branch's writes are its own.
    expect((await s.run(['test', '-e', '/root/big3'])).code).not.toBe(0);

    await b!.terminate();
    await s.terminate();
    await stopServerProcess(server);
    server = undefined;
    expect(leftovers(dataDir)).toEqual([]);
  });

  it('an explicit diskMb is the room; one past memoryMb is refused with the field named', { timeout: 120_000 }, async () => {
    dataDir ||= await tempDataDir('disk');
    server ??= await startServerProcess({ dataDir });
    const berth = client(server);
    const err = (await berth.sessions.create({ memoryMb: 256, diskMb: 300 }).catch((e: unknown) => e)) as Error;
    expect(err).toMatchObject({ code: 'invalid_argument', details: { field: 'diskMb' } });
    expect(err.message).toMatch(/diskMb: at most memoryMb \(256 MiB\)/);
    const s = await berth.sessions.create({ memoryMb: 256, diskMb: 48 });
    const df = (await s.run(['df', '-k', '/'])).stdout.trim().split('\n').pop()!.split(/\s+/);
    expect(Number(df[1])).toBe(48 * 1024);
    const dd = await s.run(['dd', 'if=/dev/zero', 'of=/root/big', 'bs=1M', 'count=100']);
    expect(dd.stderr).toMatch(/No space left on device/);
    await s.terminate();
  });
});
