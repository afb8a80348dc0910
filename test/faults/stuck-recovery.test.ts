/**
 * Issue 7 §5: one sandbox recovery cannot bring back must not stop the server. While the server is down,
 * one sandbox's freezer is made unwritable (a read-only file bound over its freezer.state, as a stuck or
 * broken cgroup behaves); the restarted server retries it, marks that session `failed` with the reason,
 * and starts, with the other session re-adopted and its processes running.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, exited, killGroup, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('stuck-recovery faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §5: recovery never stops the server', () => {
  let dataDir = '';
  let target = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    if (target) spawnSync('umount', [target]);
    await scrub(dataDir);
  });

  it('a sandbox whose freezer cannot be written is failed with its reason; the server starts', { timeout: 600_000 }, async () => {
    dataDir = await tempDataDir('stuck');
    server = await startServerProcess({ dataDir });
    let berth = client(server);
    const stuck = await berth.sessions.create();
    const healthy = await berth.sessions.create();
    for (const s of [stuck, healthy]) await s.run(['sh', '-c', COUNTER]);
    killGroup(server.child, 'SIGKILL');
    await exited(server);

    target = `/sys/fs/cgroup/freezer/berth/${stuck.id}-g1/freezer.state`;
    const fake = join(dataDir, 'freezer.state.ro');
    writeFileSync(fake, 'THAWED\n');
    expect(spawnSync('mount', ['--bind', fake, target]).status).toBe(0);
    expect(spawnSync('mount', ['-o', 'remount,ro,bind', target]).status).toBe(0);

    server = await startServerProcess({ dataDir });
    berth = client(server);
    const s = await berth.sessions.get(stuck.id);
    expect(s.info.state).toBe('failed');
    expect(s.info.failureReason).toMatch(/recovery could not re-adopt the sandbox.*THAWED/);
    const h = await berth.sessions.get(healthy.id);
    expect(h.info.state).toBe('running');
    expect(await counterRuns(h)).toBe(true);
    expect(server.stdout()).toMatch(/"recovered".*"failed":\["[^"]*"\]/);
    await h.terminate();
  });
});
