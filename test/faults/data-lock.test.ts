/**
 * Issue 7 §7: two servers on one data directory. The second `berth serve --data DIR` must exit at once,
 * non-zero, naming the pid that holds the directory, and touch nothing (no recovery, no adoption). A lock
 * left by a SIGKILLed server is stale: the next server starts.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { IMAGE_CACHE, REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { COUNTER, client, counterRuns, exited, killGroup, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('data-directory lock faults', gvisorMissing());

describe.skipIf(skip)('issue 7 §7: one server per data directory', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('a second server exits at once naming the holder; a stale lock is taken over', { timeout: 300_000 }, async () => {
    dataDir = await tempDataDir('lock');
    server = await startServerProcess({ dataDir });
    const s = await client(server).sessions.create();
    await s.run(['sh', '-c', COUNTER]);
    const holder = JSON.parse(readFileSync(join(dataDir, 'serve.lock'), 'utf8')) as { pid: number };
    // The pid in the lock is the server itself (bin/berth may run it as a child of the launcher).
    expect(readFileSync(`/proc/${holder.pid}/cmdline`, 'utf8')).toContain('serve');

    const t0 = Date.now();
    const second = spawnSync(process.execPath, [join(REPO, 'bin', 'berth'), 'serve', '--port', '0', '--data', dataDir, '--image-cache', IMAGE_CACHE], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(second.status).toBe(1);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(second.stderr).toContain('berth: conflict:');
    expect(second.stderr).toContain(`pid ${holder.pid}`);
    expect(second.stdout).not.toContain('listening');

    // The first server and its session did not notice.
    const again = await client(server).sessions.get(s.id);
    expect(again.info.state).toBe('running');
    expect(await counterRuns(again)).toBe(true);

    // SIGKILL leaves the lock file behind; its pid is dead, so the next server takes it over.
    killGroup(server.child, 'SIGKILL');
    await exited(server);
    expect(JSON.parse(readFileSync(join(dataDir, 'serve.lock'), 'utf8')).pid).toBe(holder.pid);
    server = await startServerProcess({ dataDir });
    const after = await client(server).sessions.get(s.id);
    expect(after.info.state).toBe('running');
    expect(await counterRuns(after)).toBe(true);
    await after.terminate();
    await stopServerProcess(server);
    server = undefined;
    // A graceful stop removes the lock.
    expect(() => readFileSync(join(dataDir, 'serve.lock'))).toThrow();
  });
});
