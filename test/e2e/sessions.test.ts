/**
 * Session machines end to end: the HTTP API and SDK over a real server, real SQLite and real gVisor
 * sandboxes. Nothing is mocked.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Berth } from '../../src/sdk/index.js';
import { pidsMatching } from '../../bench/memory.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('session e2e', gvisorMissing());
/** Host processes (runsc sandbox, gofer) whose command line names the session; waits up to 3 s for them to go. */
async function sandboxProcesses(sessionId: string): Promise<number[]> {
  let pids: number[] = [];
  for (let i = 0; i < 30; i++) {
    pids = await pidsMatching(sessionId);
    if (pids.length === 0) return [];
    await sleep(100);
  }
  return pids;
}
// Written to a temporary file and renamed, so a reader never sees the file empty between truncate and write.
const COUNTER = "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.w; mv /tmp/n.w /tmp/n; sleep 0.05; done' >/dev/null 2>&1 &";

describe.skipIf(skip)('sessions over HTTP with real gVisor sandboxes', () => {
  let t: TestServer;
  let fakeNow = Date.now();
  const clock = { now: () => fakeNow };

  beforeAll(async () => {
    t = await startTestServer({ clock });
  });
  afterAll(async () => {
    await t?.destroy();
  });

  const readN = async (s: Awaited<ReturnType<Berth['sessions']['create']>>) => Number((await s.run(['cat', '/tmp/n'])).stdout.toString());

  it('creates a running session and reports it with metering', async () => {
    const s = await t.client.sessions.create({ objective: 'e2e', memoryMb: 256, cpus: 1, env: { GREETING: 'hi' } });
    expect(s.state).toBe('running');
    expect(s.agentToken).toMatch(/^bta_/);
    const r = await s.run(['sh', '-c', 'echo $GREETING; echo oops >&2; exit 3']);
    expect(r.code).toBe(3);
    expect(r.stdout.toString()).toBe('hi\n');
    expect(r.stderr.toString()).toBe('oops\n');
    const v = await s.refresh();
    expect(v).toMatchObject({ id: s.id, state: 'running', backend: 'gvisor', objective: 'e2e' });
    expect(v.metering.execCount).toBe(1);
    expect(v.metering.bytesOut).toBe(8);
    expect(v.metering.stateSeconds.running).toBeGreaterThanOrEqual(0);
    expect(Date.parse(v.createdAt)).toBeGreaterThan(0);
    const listed = await t.client.sessions.list();
    expect(listed.map((x) => x.id)).toContain(s.id);
    await s.terminate();
  });

  it('streams files both ways, binary-safe', async () => {
    const s = await t.client.sessions.create({ memoryMb: 512 });
    const data = randomBytes(24 * 1024 * 1024 + 3);
    await s.files.mkdir('/work/in', { parents: true });
    expect((await s.files.write('/work/in/blob.bin', data)).bytes).toBe(data.length);
    const back = await s.files.readBytes('/work/in/blob.bin');
    expect(createHash('sha256').update(back).digest('hex')).toBe(createHash('sha256').update(data).digest('hex'));
    expect((await s.files.list('/work/in')).map((e) => e.name)).toEqual(['blob.bin']);
    await s.files.rm('/work/in', { recursive: true });
    await expect(s.files.stat('/work/in')).rejects.toMatchObject({ code: 'not_found' });
    const v = await s.refresh();
    expect(v.metering.bytesIn).toBeGreaterThanOrEqual(data.length);
    expect(v.metering.bytesOut).toBeGreaterThanOrEqual(data.length);
    await s.terminate();
  });

  it('streams a 200 MB file in and out without holding it whole in memory', async () => {
    const s = await t.client.sessions.create({ memoryMb: 1024 });
    const MB = 1024 * 1024;
    const chunk = randomBytes(MB);
    const hash = createHash('sha256');
    async function* source(): AsyncIterable<Uint8Array> {
      for (let i = 0; i < 200; i++) {
        hash.update(chunk);
        yield chunk;
      }
    }
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
    try {
      expect((await s.files.write('/root/big.bin', source())).bytes).toBe(200 * MB);
      const back = createHash('sha256');
      let n = 0;
      for await (const c of s.files.read('/root/big.bin')) {
        back.update(c);
        n += c.byteLength;
      }
      expect(n).toBe(200 * MB);
      expect(back.digest('hex')).toBe(hash.digest('hex'));
    } finally {
      clearInterval(sampler);
    }
    // Client and server share this process: holding the file whole on either side would add >= 200 MB.
    console.log(`200 MB round trip: peak RSS growth ${((peak - before) / MB).toFixed(1)} MB`);
    expect((peak - before) / MB).toBeLessThan(150);
    await s.terminate();
  }, 120_000);

  it('pauses and resumes; a command on a paused session is refused with invalid_state', async () => {
    const s = await t.client.sessions.create();
    await s.run(['sh', '-c', COUNTER]);
    await sleep(300);
    expect((await s.pause()).state).toBe('paused');
    await expect(s.run(['true'])).rejects.toMatchObject({ code: 'invalid_state' });
    await expect(s.pause()).rejects.toMatchObject({ code: 'invalid_state' });
    expect((await s.resume()).state).toBe('running');
    const a = await readN(s);
    await sleep(400);
    expect(await readN(s)).toBeGreaterThan(a);
    await s.terminate();
  });

  it('hibernates, releasing the sandbox, and a call wakes it where it stopped', async () => {
    const s = await t.client.sessions.create();
    await s.run(['sh', '-c', COUNTER]);
    await s.files.write('/root/note', 'kept across hibernation');
    await sleep(500);
    const before = await readN(s);
    const h = await s.hibernate();
    expect(h.state).toBe('hibernated');
    expect(await sandboxProcesses(s.id)).toEqual([]); // RAM and CPU released: no process of it remains
    // Transparent wake: an exec on a hibernated session just works.
    const after = await readN(s);
    expect(after).toBeGreaterThanOrEqual(before);
    expect(after).toBeLessThan(before + 40); // it continued, it did not run while hibernated
    expect((await s.refresh()).state).toBe('running');
    await sleep(300);
    expect(await readN(s)).toBeGreaterThan(after);
    expect(await s.files.readText('/root/note')).toBe('kept across hibernation');
    const resume = JSON.parse(await s.files.readText('/run/berth/resume')) as { reason: string; generation: number };
    expect(resume).toMatchObject({ reason: 'wake', generation: 2 });
    await s.hibernate();
    expect((await s.wake()).state).toBe('running');
    await s.terminate();
  });

  it('snapshots a running session and forks it into independent branches with their own identity', async () => {
    const parent = await t.client.sessions.create();
    await parent.files.write('/root/shared.txt', 'prefix');
    await parent.run(['sh', '-c', COUNTER]);
    while (!((await readN(parent)) > 0)) await sleep(50); // the loop has counted before the snapshot is taken
    const snap = await parent.snapshot({ name: 'prefix-1' });
    expect(snap.snapshotId).toMatch(/^snp_/);
    expect((await parent.refresh()).state).toBe('running');
    const branches = await t.client.snapshots.fork(snap.snapshotId, { count: 3 });
    expect(branches).toHaveLength(3);
    const ids = new Set(branches.map((b) => b.id));
    expect(ids.size).toBe(3);
    const facts = await Promise.all(
      branches.map(async (b) => ({
        host: (await b.run(['hostname'])).stdout.toString().trim(),
        mid: (await b.files.readText('/etc/machine-id')).trim(),
        rnd: (await b.run(['sh', '-c', 'head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n"'])).stdout.toString(),
        shared: await b.files.readText('/root/shared.txt'),
        n: await readN(b),
      })),
    );
    for (const k of ['host', 'mid', 'rnd'] as const) expect(new Set(facts.map((f) => f[k])).size).toBe(3);
    for (const f of facts) {
      expect(f.shared).toBe('prefix');
      expect(f.n).toBeGreaterThan(0); // the counting process came along
    }
    await branches[0]!.files.write('/root/shared.txt', 'branch-0');
    expect(await branches[1]!.files.readText('/root/shared.txt')).toBe('prefix');
    expect(await parent.files.readText('/root/shared.txt')).toBe('prefix');
    const v = await branches[0]!.refresh();
    expect(v.parentSnapshotId).toBe(snap.snapshotId);
    for (const b of branches) await b.terminate();
    await parent.terminate();
    // A named snapshot outlives its session, for more forks, until it is deleted.
    expect((await t.client.snapshots.get(snap.snapshotId)).snapshotId).toBe(snap.snapshotId);
    await t.client.snapshots.delete(snap.snapshotId);
    await expect(t.client.snapshots.get(snap.snapshotId)).rejects.toMatchObject({ code: 'not_found' });
  });

  it('wipes a terminated session: nothing it wrote remains under the data directory', async () => {
    const s = await t.client.sessions.create();
    const marker = `berth-marker-${randomBytes(12).toString('hex')}`;
    await s.files.write('/root/secret.txt', marker.repeat(100));
    // The audit log keeps every command line (who ran what), so the marker travels only as file data.
    await s.run(['sh', '-c', 'cp /root/secret.txt /tmp/m; setsid sleep 1000 >/dev/null 2>&1 &']);
    await s.snapshot(); // unnamed: goes with the session
    await s.hibernate();
    await s.terminate();
    expect((await s.refresh()).state).toBe('terminated');
    const grep = spawnSync('grep', ['-rl', '--binary-files=text', marker, t.dataDir], { encoding: 'utf8' });
    expect(grep.stdout).toBe('');
    expect(readdirSync(join(t.dataDir, 'gvisor', 'sandboxes')).filter((d) => d.startsWith(s.id))).toEqual([]);
    expect(await t.client.snapshots.list({ sessionId: s.id })).toEqual([]);
    const snaps = existsSync(join(t.dataDir, 'snapshots')) ? readdirSync(join(t.dataDir, 'snapshots')) : [];
    expect(snaps).toEqual([]);
    expect(await sandboxProcesses(s.id)).toEqual([]);
  });

  it('hibernates an idle session by itself after its idle timeout', async () => {
    const s = await t.client.sessions.create({ idleTimeoutS: 60 });
    expect(await t.side.manager.sweepIdle()).not.toContain(s.id);
    fakeNow += 61_000;
    expect(await t.side.manager.sweepIdle()).toContain(s.id);
    expect((await s.refresh()).state).toBe('hibernated');
    expect((await s.run(['echo', 'back'])).stdout.toString()).toBe('back\n');
    await s.terminate();
  });

  it('shows a sandbox that dies as failed, with its reason', async () => {
    const s = await t.client.sessions.create();
    const pids = await pidsMatching(s.id);
    expect(pids.length).toBeGreaterThan(0);
    for (const p of pids) process.kill(p, 'SIGKILL');
    let v = await s.refresh();
    for (let i = 0; i < 50 && v.state !== 'failed'; i++) {
      await sleep(100);
      v = await s.refresh();
    }
    expect(v.state).toBe('failed');
    expect(v.failureReason).toBeTruthy();
    await expect(s.run(['true'])).rejects.toMatchObject({ code: 'invalid_state' });
    await s.terminate();
  });

  it('keeps tenants apart: another tenant\'s ids are not found, and agent tokens are not operators', async () => {
    const mine = await t.client.sessions.create();
    const other = await t.client.tenants.create(`t${Date.now()}`);
    const theirs = new Berth({ url: t.url, token: other.apiKey });
    await expect(theirs.sessions.get(mine.id)).rejects.toMatchObject({ code: 'not_found' });
    expect((await theirs.sessions.list()).map((s) => s.id)).not.toContain(mine.id);
    const agent = new Berth({ url: t.url, token: mine.agentToken as string });
    await expect(agent.sessions.list()).rejects.toMatchObject({ code: 'forbidden' });
    await mine.terminate();
  });

  it('answers bad input with 4xx JSON errors that name the field, never a stack', async () => {
    const auth = { authorization: `Bearer ${t.rootKey}`, 'content-type': 'application/json' };
    const cases: Array<[string, RequestInit, number, string]> = [
      ['/v1/sessions', { method: 'GET' }, 401, 'unauthenticated'],
      ['/v1/sessions', { method: 'POST', headers: auth, body: '{"memoryMb": 1}' }, 400, 'invalid_argument'],
      ['/v1/sessions', { method: 'POST', headers: auth, body: '{"memoryMb": "big"}' }, 400, 'invalid_argument'],
      ['/v1/sessions', { method: 'POST', headers: auth, body: '{not json' }, 400, 'invalid_argument'],
      ['/v1/sessions/ses_00000000000000000000', { headers: auth }, 404, 'not_found'],
      ['/v1/sessions/nonsense', { headers: auth }, 404, 'not_found'],
      ['/v1/snapshots/snp_00000000000000000000/fork', { method: 'POST', headers: auth, body: '{"count": 2}' }, 404, 'not_found'],
    ];
    for (const [path, init, status, code] of cases) {
      const res = await fetch(t.url + path, init);
      const body = (await res.json()) as { error: { code: string; message: string; details?: { field?: string } } };
      expect([path, res.status]).toEqual([path, status]);
      expect(body.error.code).toBe(code);
      expect(JSON.stringify(body)).not.toMatch(/\n\s+at /);
    }
    const bad = await fetch(t.url + '/v1/sessions', { method: 'POST', headers: auth, body: '{"memoryMb": 1}' });
    expect(((await bad.json()) as { error: { details: { field: string } } }).error.details.field).toBe('memoryMb');
  });
});
