/**
 * Issue 7 §8 (the part built): a sandbox the kernel kills at its memory limit fails with a reason that says
 * so (`out_of_memory`, with the limit), and the session's metering keeps the dead incarnation's peak.
 * The hog is a real python allocating past --memory inside a real runsc sandbox.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { client, leftovers, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('oom faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §8: a sandbox killed at its memory limit', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('python allocating past --memory: failed with out_of_memory and the limit, peak kept', { timeout: 300_000 }, async () => {
    dataDir = await tempDataDir('oom');
    server = await startServerProcess({ dataDir });
    const berth = client(server);
    const s = await berth.sessions.create({ memoryMb: 256 });
    // 16 MiB at a time, every page touched, until the kernel steps in.
    const hog = 'b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n    for i in range(0, 16 << 20, 4096): b[-1][i] = 1\n';
    await s.run(['python3', '-c', hog]).catch(() => undefined); // the agent channel closes under it
    let info = (await berth.sessions.get(s.id)).info;
    for (let i = 0; i < 300 && info.state !== 'failed'; i++) {
      await sleep(100);
      info = (await berth.sessions.get(s.id)).info;
    }
    expect(info.state).toBe('failed');
    expect(info.failureReason).toMatch(/^out_of_memory: .*256 MiB/);
    expect(info.metering.peakMemoryBytes).toBeGreaterThan(200 << 20);
    await stopServerProcess(server);
    server = undefined;
    expect(leftovers(dataDir)).toEqual([]);
  });
});
