/**
 * Issue 7 §1: stopping the server by its process group (Ctrl-C in the terminal where `npm start` runs, a
 * supervisor signalling the group) must not reach the sandboxes. Every sandbox process lives in a session
 * and process group of its own, so after SIGINT or SIGKILL of the server's whole group the sandboxes still
 * run, and the restarted server re-adopts them with their processes.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import {
  COUNTER, client, counterRuns, exited, killGroup, leftovers, sandboxProcesses, scrub, startServerProcess, stopServerProcess, tempDataDir,
  type ServerProcess,
} from './harness.js';

const skip = skipReason('process-group faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §1: the server\'s process group is signalled', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('SIGINT then SIGKILL of the whole group: sandboxes keep running and are re-adopted with their processes', { timeout: 600_000 }, async () => {
    dataDir = await tempDataDir('pgroup');
    server = await startServerProcess({ dataDir });
    let berth = client(server);
    const running = await berth.sessions.create();
    await running.run(['sh', '-c', COUNTER]);
    const paused = await berth.sessions.create();
    await paused.run(['sh', '-c', COUNTER]);
    await paused.pause();
    const ids = [running.id, paused.id];

    // Nothing the sandboxes run may share the server's group or session: that is what a group signal hits.
    const pgid = server.child.pid as number;
    const procs = sandboxProcesses(dataDir);
    expect(procs.length).toBeGreaterThanOrEqual(4); // a sandbox and a gofer per session
    expect(procs.filter((p) => p.pgid === pgid || p.sid === pgid).map((p) => p.args.slice(0, 80))).toEqual([]);

    for (const signal of ['SIGINT', 'SIGKILL'] as const) {
      const before = sandboxProcesses(dataDir).map((p) => p.pid).sort();
      killGroup(server.child, signal);
      await exited(server);
      expect(sandboxProcesses(dataDir).map((p) => p.pid).sort()).toEqual(before);

      server = await startServerProcess({ dataDir });
      berth = client(server);
      const r = await berth.sessions.get(running.id);
      const p = await berth.sessions.get(paused.id);
      expect([r.info.state, r.info.failureReason]).toEqual(['running', null]);
      expect([p.info.state, p.info.failureReason]).toEqual(['paused', null]);
      expect(await counterRuns(r)).toBe(true);
      await p.resume();
      expect(await counterRuns(p)).toBe(true);
      await p.pause();
    }

    for (const id of ids) await (await berth.sessions.get(id)).terminate();
    await stopServerProcess(server);
    server = undefined;
    expect(leftovers(dataDir, ids.map((id) => `${id}-g1`))).toEqual([]);
  });
});
