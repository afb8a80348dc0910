/**
 * Issue 7 §4: SIGKILL of the server during `snapshot`. The checkpoint stops the sandbox and the driver
 * restores it right after; a server killed in between must not lose the session: the restarted server
 * finishes the job (waits for the checkpoint, restores the machine from its image) and the session runs
 * with its processes and files. Killed at several points into the snapshot.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, killDuring, orphans, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('snapshot-kill faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §4: SIGKILL during snapshot', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('the session survives a SIGKILL at any point of its snapshot', { timeout: 900_000 }, async () => {
    dataDir = await tempDataDir('snapkill');
    server = await startServerProcess({ dataDir });
    let berth = client(server);
    const s = await berth.sessions.create();
    await s.run(['sh', '-c', COUNTER]);
    await s.files.write('/root/keep.txt', 'kept');
    await s.run(['sh', '-c', 'head -c 50000000 /dev/urandom > /root/ballast']); // a checkpoint worth interrupting

    for (const afterMs of [100, 300, 600, 1000]) {
      const before = berth;
      server = await killDuring(server, dataDir, afterMs, () => before.sessions.get(s.id).then((x) => x.snapshot({ name: `at-${afterMs}` })));
      berth = client(server);
      const after = await berth.sessions.get(s.id);
      expect([after.info.state, after.info.failureReason], `killed ${afterMs} ms into the snapshot`).toEqual(['running', null]);
      expect(await counterRuns(after)).toBe(true);
      expect(await after.files.readText('/root/keep.txt')).toBe('kept');
      expect(await orphans(berth, dataDir)).toEqual([]);
    }
    await (await berth.sessions.get(s.id)).terminate();
    for (const snap of await berth.snapshots.list()) await berth.snapshots.delete(snap.id);
    await stopServerProcess(server);
    server = undefined;
  });
});
