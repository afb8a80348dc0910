/**
 * Issue 7 §6: a fork interrupted by SIGKILL of the server leaves sandboxes that no state file or directory
 * records (runsc was still restoring them). Every sandbox process of a data directory carries its runsc root
 * on its command line; the restarted server's recovery finds them by it and reclaims every one no session
 * owns. Checked on the host after each restart, at several points into the fork.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, killDuring, leftovers, orphans, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('orphan faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §6: orphans of an interrupted fork', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterEach(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    server = undefined;
    await scrub(dataDir);
  });

  // The parent, which the fork does not touch, must come back running after every restart. It once came back
  // `failed` in about 1 full run in 4: a `runsc state` of it failed once during recovery and was read as "gone"
  // (fixed in Runsc.state and adopt). On failure the server's recovery lines are printed with the assertion.
  it('SIGKILL at several points of a 4-branch fork: after restart nothing is left that no session owns', { timeout: 900_000 }, async () => {
    dataDir = await tempDataDir('orphans');
    server = await startServerProcess({ dataDir });
    let berth = client(server);
    const parent = await berth.sessions.create();
    await parent.run(['sh', '-c', COUNTER]);
    const snap = await parent.snapshot({ name: 'base' });

    for (const afterMs of [150, 400, 800, 1300]) {
      const before = berth;
      server = await killDuring(server, dataDir, afterMs, () => before.snapshots.fork(snap.id, { count: 4 }));
      berth = client(server);
      expect(await orphans(berth, dataDir), `killed ${afterMs} ms into the fork`).toEqual([]);
      const p = await berth.sessions.get(parent.id);
      const said = server.stdout().split('\n').filter((l) => /adopt|recovery/.test(l)).join('\n');
      expect(p.info.state, `parent after a kill ${afterMs} ms into the fork: ${p.info.failureReason ?? ''}\n${said}`).toBe('running');
      expect(await counterRuns(p)).toBe(true);
    }

    for (const s of await berth.sessions.list({ states: ['running', 'paused', 'creating', 'failed'] })) await s.terminate();
    await berth.snapshots.delete(snap.id);
    await stopServerProcess(server);
    server = undefined;
    expect(leftovers(dataDir)).toEqual([]);
  });
});
