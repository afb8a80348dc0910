/**
 * The wipe guarantee on the installed runsc (issue 8 §1), through a real server, real SQLite and real gVisor:
 * a file written in a session that was snapshotted (named and unnamed), hibernated, woken and forked, with
 * its forks hibernated in turn, is found nowhere under the data directory once all of them ended and the
 * named snapshot was deleted. Before that, the same search finds it in the images (inflating runsc's
 * compressed state files), so the search sees through them: it would prove nothing if the format hid it.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { filesContaining } from '../helpers/find-bytes.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('wipe e2e', gvisorMissing());

/** Files under dir holding the marker: grep's view (binary files as text) and inside compressed images. */
async function filesWith(dir: string, marker: string): Promise<string[]> {
  const r = spawnSync('grep', ['-rl', '--binary-files=text', marker, dir], { encoding: 'utf8' });
  if (r.status === 2) throw new Error(`grep failed: ${r.stderr}`);
  return [...new Set([...r.stdout.split('\n').filter(Boolean), ...(await filesContaining(dir, marker))])].sort();
}

describe.skipIf(skip)('wipe after snapshot, hibernate and fork, on gVisor', () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer();
  }, 120_000);
  afterAll(async () => {
    await t?.destroy();
  }, 120_000);

  it('leaves no byte of a session\'s file under the data directory once it, its forks and its snapshots are gone', async () => {
    const marker = `berth-wipe-${randomBytes(16).toString('hex')}`;
    const a = await t.client.sessions.create();
    // The marker travels only as file data: the audit log keeps command lines, and it may keep those.
    await a.files.write('/root/secret.txt', marker.repeat(64));
    await a.run(['sh', '-c', 'cp /root/secret.txt /tmp/copy; cat /root/secret.txt > /dev/shm/copy; setsid sh -c "v=$(cat /root/secret.txt); sleep 1000" >/dev/null 2>&1 &']);
    const named = await a.snapshot({ name: `wipe-${randomBytes(4).toString('hex')}` });
    await a.snapshot(); // unnamed: it goes with the session
    // Positive control: the search finds the marker inside the images, so an empty result below means gone.
    const inImages = (await filesWith(t.dataDir, marker));
    expect(inImages.some((f) => f.includes(named.snapshotId))).toBe(true);

    await a.hibernate();
    expect(await a.files.readText('/root/secret.txt')).toBe(marker.repeat(64)); // wakes it
    const forks = await t.client.snapshots.fork(named.snapshotId, { count: 2 });
    for (const f of forks) expect(await f.files.readText('/tmp/copy')).toBe(marker.repeat(64));
    await forks[0]!.hibernate();
    await forks[1]!.snapshot();
    const [grandchild] = await t.client.snapshots.fork((await forks[1]!.snapshot({ name: `wipe-g-${randomBytes(4).toString('hex')}` })).snapshotId, { count: 1 });
    expect(await grandchild!.files.readText('/dev/shm/copy')).toBe(marker.repeat(64));

    // The parent goes first, while its forks still run (one hibernated): nothing of it may wait on them.
    for (const s of [a, forks[0]!, grandchild!, forks[1]!]) await s.terminate();
    for (const snap of await t.client.snapshots.list()) await t.client.snapshots.delete(snap.snapshotId);
    for (const s of [...forks, grandchild!, a]) expect((await s.refresh()).state).toBe('terminated');

    expect((await filesWith(t.dataDir, marker))).toEqual([]);
    const snaps = join(t.dataDir, 'snapshots');
    expect(existsSync(snaps) ? readdirSync(snaps) : []).toEqual([]);
    const sandboxes = join(t.dataDir, 'gvisor', 'sandboxes');
    expect(existsSync(sandboxes) ? readdirSync(sandboxes) : []).toEqual([]);
  }, 300_000);
});
