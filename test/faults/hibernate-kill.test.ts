/**
 * Issue 7 §1/§4: SIGKILL of the server during `hibernate`. The checkpoint (runsc, in a session of its own)
 * outlives the server and stops the sandbox when it is done; the restarted server must then either finish
 * the hibernation (the image is whole: the session is hibernated and wakes with its processes and files)
 * or roll it back (the checkpoint had not succeeded: the sandbox still runs and is re-adopted). Never
 * `failed`, never an orphan. Killed at several points into the hibernate.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, exited, killGroup, orphans, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('hibernate-kill faults', gvisorMissing());

describe.skipIf(skip)('issue 7: SIGKILL during hibernate', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('the session is hibernated or running after a SIGKILL at any point of its hibernate, and runs on', { timeout: 900_000 }, async () => {
    dataDir = await tempDataDir('hibkill');
    server = await startServerProcess({ dataDir });
    let berth = client(server);
    const s = await berth.sessions.create();
    await s.run(['sh', '-c', COUNTER]);
    await s.files.write('/root/keep.txt', 'kept');
    await s.run(['sh', '-c', 'head -c 50000000 /dev/urandom > /root/ballast']); // a checkpoint worth interrupting

    const outcomes: string[] = [];
    for (const afterMs of [10, 50, 200, 400, 700, 1000, 1500]) {
      const hib = berth.sessions.get(s.id).then((x) => x.hibernate()).catch(() => undefined);
      await sleep(afterMs);
      killGroup(server.child, 'SIGKILL');
      await exited(server);
      await hib;
      server = await startServerProcess({ dataDir });
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
    console.log(`hibernate-kill outcomes: ${outcomes.join(', ')}`);
    await (await berth.sessions.get(s.id)).terminate();
    await stopServerProcess(server);
    server = undefined;
  });
});
