/**
 * Persistence: `berth serve` is killed with SIGKILL and started again on the same data directory. Every
 * session must still be reachable (running ones re-adopted with their processes, paused ones still
 * paused, hibernated ones wakeable), none lost, and no runsc sandbox left that no session owns.
 */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { Berth } from '../../src/sdk/index.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { freePort, runscIds, serveProcess } from '../helpers/serve-process.js';

const skip = skipReason('restart e2e', gvisorMissing());
const COUNTER = "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.w; mv /tmp/n.w /tmp/n; sleep 0.05; done' >/dev/null 2>&1 &";

describe.skipIf(skip)('server restart after SIGKILL', () => {
  let dataDir = '';
  let child: ChildProcess | undefined;
  afterAll(async () => {
    child?.kill('SIGKILL');
    if (dataDir) {
      for (const id of runscIds(dataDir)) {
        spawnSync('sh', ['-c', `echo THAWED > /sys/fs/cgroup/freezer/berth/${id}/freezer.state`]);
        spawnSync('runsc', [`--root=${join(dataDir, 'gvisor', 'runsc')}`, 'delete', '--force', id], { timeout: 30_000 });
      }
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('re-adopts running and paused sessions, keeps hibernated ones, cleans what no session owns', async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'berth-restart-'));
    const port = await freePort();
    child = await serveProcess(dataDir, port, { timeoutMs: 60_000 });
    const token = (await readFile(join(dataDir, 'root.key'), 'utf8')).trim();
    const berth = new Berth({ url: `http://127.0.0.1:${port}`, token });

    const running = await berth.sessions.create();
    await running.run(['sh', '-c', COUNTER]);
    await running.files.write('/root/f', 'survives');
    const paused = await berth.sessions.create();
    await paused.run(['sh', '-c', COUNTER]);
    await paused.pause();
    const hib = await berth.sessions.create();
    await hib.files.write('/root/h', 'hibernated data');
    await hib.hibernate();
    // A create in flight when the server dies: its sandbox must not outlive it as an orphan.
    const inflight = berth.sessions.create().catch((e: unknown) => e);
    await sleep(60);
    await sleep(500);
    const nBefore = Number((await running.run(['cat', '/tmp/n'])).stdout.toString());

    child.kill('SIGKILL');
    await new Promise((r) => child?.once('exit', r));
    await inflight;
    await sleep(500);
    child = await serveProcess(dataDir, port, { timeoutMs: 60_000 });

    const all = await berth.sessions.list({ states: ['creating', 'running', 'paused', 'hibernated', 'failed', 'terminated'] });
    const byId = new Map(all.map((s) => [s.id, s]));
    expect(byId.get(running.id)?.state).toBe('running');
    expect(byId.get(paused.id)?.state).toBe('paused');
    expect(byId.get(hib.id)?.state).toBe('hibernated');

    const r2 = await berth.sessions.get(running.id);
    const nAfter = Number((await r2.run(['cat', '/tmp/n'])).stdout.toString());
    expect(nAfter).toBeGreaterThan(nBefore); // the same processes kept counting through the restart
    expect(await r2.files.readText('/root/f')).toBe('survives');

    const p2 = await berth.sessions.get(paused.id);
    await p2.resume();
    const pn = Number((await p2.run(['cat', '/tmp/n'])).stdout.toString());
    await sleep(300);
    expect(Number((await p2.run(['cat', '/tmp/n'])).stdout.toString())).toBeGreaterThan(pn);

    const h2 = await berth.sessions.get(hib.id);
    expect(await h2.files.readText('/root/h')).toBe('hibernated data');

    // Every runsc sandbox left belongs to a live session.
    const live = (await berth.sessions.list({ states: ['running', 'paused'] })).map((s) => s.id);
    for (const id of runscIds(dataDir)) expect(live.some((s) => id.startsWith(s))).toBe(true);
    for (const s of await berth.sessions.list()) await s.terminate();
    expect(runscIds(dataDir)).toEqual([]);
  }, 180_000);
});
