/**
 * Issue 7 §2: many `DELETE /v1/sessions/:id` at once must each kill and reap their sandbox before they
 * answer: afterwards no runsc process, cgroup, runsc state or sandbox directory of any of them is left,
 * counted on the host (/proc, /sys/fs/cgroup, the data directory), not asked of Berth.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, leftovers, sandboxProcesses, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess, type Session } from './harness.js';

const skip = skipReason('concurrent-delete faults', gvisorMissing());
const SESSIONS = 24;

describe.skipIf(skip)('issue 7 §2: concurrent DELETE', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it(`${SESSIONS} sessions deleted at once leave no process, cgroup, state or directory`, { timeout: 900_000 }, async () => {
    dataDir = await tempDataDir('delete');
    server = await startServerProcess({ dataDir });
    const berth = client(server);
    const sessions: Session[] = [];
    while (sessions.length < SESSIONS) {
      const batch = await Promise.all(Array.from({ length: 4 }, () => berth.sessions.create({ memoryMb: 256 })));
      // Busy machines: a process that forks all the time is what makes a sandbox slow to stop.
      await Promise.all(batch.map((s) => s.run(['sh', '-c', COUNTER])));
      sessions.push(...batch);
    }
    // Some of them paused (a frozen sandbox must be thawed to die) and one hibernated.
    await Promise.all(sessions.slice(0, 4).map((s) => s.pause()));
    await sessions[4]?.hibernate();
    expect(sandboxProcesses(dataDir).length).toBeGreaterThanOrEqual(2 * (SESSIONS - 1));

    const results = await Promise.allSettled(sessions.map((s) => s.terminate()));
    expect(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);
    // Each DELETE answered only once its sandbox was gone: nothing may be left at this very moment.
    const sandboxIds = sessions.flatMap((s) => [`${s.id}-g1`, `${s.id}-g2`]);
    expect(leftovers(dataDir, sandboxIds)).toEqual([]);
    for (const s of sessions) expect((await berth.sessions.get(s.id)).info.state).toBe('terminated');
    await stopServerProcess(server);
    server = undefined;
  });
});
