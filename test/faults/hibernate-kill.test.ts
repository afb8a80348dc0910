/**
 * Issue 7 §1/§4: SIGKILL of the server during `hibernate`. The checkpoint (runsc, in a session of its own)
 * outlives the server and stops the sandbox when it is done; the restarted server must then either finish
 * the hibernation (the image is whole: the session is hibernated and wakes with its processes and files)
 * or roll it back (the checkpoint had not succeeded: the sandbox still runs and is re-adopted). Never
 * `failed`, never an orphan. Killed at several points into the hibernate, on both backends.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, hasCommand, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, killDuring, orphans, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const BACKENDS = [
  { backend: 'gvisor' as const, missing: gvisorMissing() },
  // QEMU: the migration (and the `cat` writing the image) outlives the server; a restart cancels it and goes on.
  { backend: 'qemu' as const, missing: gvisorMissing() ?? (hasCommand('qemu-system-x86_64') ? undefined : 'qemu-system-x86_64 is not installed') },
];

describe.each(BACKENDS)('issue 7: SIGKILL during hibernate ($backend)', ({ backend, missing }) => {
  const skip = skipReason(`hibernate-kill faults on ${backend}`, missing);
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    if (dataDir) await scrub(dataDir);
  });

  it.skipIf(skip)('the session is hibernated or running after a SIGKILL at any point of its hibernate, and runs on', { timeout: 900_000 }, async () => {
    dataDir = await tempDataDir(`hibkill-${backend}`);
    server = await startServerProcess({ dataDir });
    let berth = client(server);
    const s = await berth.sessions.create({ backend });
    await s.run(['sh', '-c', COUNTER]);
    await s.files.write('/root/keep.txt', 'kept');
    await s.run(['sh', '-c', 'head -c 50000000 /dev/urandom > /root/ballast']); // a checkpoint worth interrupting

    const outcomes: string[] = [];
    for (const afterMs of [10, 50, 100, 200, 300, 400, 700, 1000, 1500]) {
      const before = berth;
      server = await killDuring(server, dataDir, afterMs, () => before.sessions.get(s.id).then((x) => x.hibernate()));
      berth = client(server);
      let after = await berth.sessions.get(s.id);
      const at = `killed ${afterMs} ms into the hibernate`;
      expect(after.info.failureReason, at).toBeNull();
      expect(['running', 'hibernated'], at).toContain(after.info.state);
      outcomes.push(`${afterMs} ms: ${after.info.state}`);
      if (after.info.state === 'hibernated') {
        await after.wake();
        after = await berth.sessions.get(s.id);
      }
      expect(after.info.state, at).toBe('running');
      expect(await counterRuns(after), at).toBe(true);
      expect(await after.files.readText('/root/keep.txt'), at).toBe('kept');
      expect(await orphans(berth, dataDir), at).toEqual([]);
    }
    console.log(`hibernate-kill outcomes on ${backend}: ${outcomes.join(', ')}`);
    await (await berth.sessions.get(s.id)).terminate();
    await stopServerProcess(server);
    server = undefined;
  });
});
