/**
 * Issue 7 §9: a paused session whose sandbox is killed on the host (kill -9, as the OOM killer or an
 * operator would) must show `failed` without anyone resuming it. A frozen sandbox cannot close its agent
 * channel and its SIGKILL stays pending, so only a look from the host sees it; another paused session
 * stays paused.
 */
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, leftovers, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('paused-death faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §9: death while paused', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('kill -9 of a paused sandbox shows failed within seconds; its neighbour stays paused', { timeout: 300_000 }, async () => {
    dataDir = await tempDataDir('pdeath');
    server = await startServerProcess({ dataDir });
    const berth = client(server);
    const victim = await berth.sessions.create();
    const neighbour = await berth.sessions.create();
    for (const s of [victim, neighbour]) {
      await s.run(['sh', '-c', COUNTER]);
      await s.pause();
    }
    const pids = readFileSync(`/sys/fs/cgroup/freezer/berth/${victim.id}-g1/cgroup.procs`, 'utf8').trim().split('\n').map(Number);
    expect(pids.length).toBeGreaterThanOrEqual(2);
    for (const pid of pids) process.kill(pid, 'SIGKILL');

    let state = '';
    let reason: string | null = null;
    for (let i = 0; i < 100 && state !== 'failed'; i++) {
      await sleep(100);
      ({ state, failureReason: reason } = (await berth.sessions.get(victim.id)).info);
    }
    expect(state).toBe('failed');
    expect(reason).toMatch(/killed while paused/);
    // Failing it reaped it: nothing of its sandbox is left on the host.
    expect(leftovers(dataDir, [`${victim.id}-g1`], (t) => t.includes(neighbour.id))).toEqual([]);

    const n = await berth.sessions.get(neighbour.id);
    expect(n.info.state).toBe('paused');
    await n.resume();
    expect(await counterRuns(n)).toBe(true);
    await n.terminate();
    await stopServerProcess(server);
    server = undefined;
  });
});
