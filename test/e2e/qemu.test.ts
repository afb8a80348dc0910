/**
 * The microVM backend through the same API as gVisor: create, exec, a gated tool call, hibernate with a
 * transparent wake, fork with fresh identity, a server restart that re-adopts the guest, and terminate.
 * Real QEMU guests (TCG here), real SQLite, real Cedar.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Berth } from '../../src/sdk/index.js';
import { hasCommand, skipReason } from '../helpers/env.js';
import { startTestServer, useTestServer } from '../helpers/server.js';
import { pidsMatching } from '../../bench/memory.js';

const skip = skipReason('QEMU e2e', hasCommand('qemu-system-x86_64') ? undefined : 'qemu-system-x86_64 is not installed');
const COUNTER = "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.w; mv /tmp/n.w /tmp/n; sleep 0.05; done' >/dev/null 2>&1 &";

describe.skipIf(skip)('the qemu backend through the API', () => {
  const srv = useTestServer();

  it('runs a session end to end: exec, gate, hibernate, fork, restart, terminate', async () => {
    const s = await srv.t.client.sessions.create({ backend: 'qemu', memoryMb: 256 });
    expect(s.state).toBe('running');
    expect((await s.refresh()).backend).toBe('qemu');
    expect((await s.run(['uname', '-s'])).stdout.toString()).toBe('Linux\n');
    await s.run(['sh', '-c', COUNTER]);

    // The gate is the same for both backends.
    const agent = new Berth({ url: srv.t.url, token: s.agentToken as string });
    const w = await agent.tools.call(s.id, 'fs.write', { path: '/root/g.txt', content: 'through the gate' });
    expect(w.decision).toBe('allow');
    const r = await agent.tools.call(s.id, 'fs.read', { path: '/root/g.txt' });
    expect(r).toMatchObject({ decision: 'allow' });
    expect(JSON.stringify(r)).toContain('through the gate');
    await expect(agent.sessions.list()).rejects.toMatchObject({ code: 'forbidden' });

    // Hibernate releases the VM; a call wakes it and the loop goes on from where it was.
    await sleep(500);
    await s.hibernate();
    expect((await s.refresh()).state).toBe('hibernated');
    expect(await pidsMatching(s.id)).toEqual([]);
    const n1 = Number((await s.run(['cat', '/tmp/n'])).stdout.toString());
    expect(n1).toBeGreaterThan(0);
    await sleep(500);
    expect(Number((await s.run(['cat', '/tmp/n'])).stdout.toString())).toBeGreaterThan(n1);

    // Fork: the snapshot's files and processes, each branch its own identity.
    const snap = await s.snapshot({ name: 'qemu-prefix' });
    const branches = await srv.t.client.snapshots.fork(snap.snapshotId, { count: 2 });
    const hosts = await Promise.all(branches.map(async (b) => (await b.run(['hostname'])).stdout.toString().trim()));
    const mids = await Promise.all(branches.map((b) => b.files.readText('/etc/machine-id')));
    expect(new Set(hosts).size).toBe(2);
    expect(new Set(mids).size).toBe(2);
    for (const b of branches) expect(await b.files.readText('/root/g.txt')).toBe('through the gate');
    await branches[0]!.files.write('/root/g.txt', 'branch 0');
    expect(await branches[1]!.files.readText('/root/g.txt')).toBe('through the gate');

    // Restart the server in-process: the guest keeps running and is re-adopted.
    await srv.t.stop();
    srv.t = await startTestServer({ dataDir: srv.t.dataDir });
    const again = await srv.t.client.sessions.get(s.id);
    expect(again.state).toBe('running');
    const n2 = Number((await again.run(['cat', '/tmp/n'])).stdout.toString());
    await sleep(400);
    expect(Number((await again.run(['cat', '/tmp/n'])).stdout.toString())).toBeGreaterThan(n2);

    // Terminate wipes the guest's disk layer, memory images and sockets.
    for (const b of await srv.t.client.sessions.list()) await b.terminate();
    await srv.t.client.snapshots.delete(snap.snapshotId);
    const qdir = join(srv.t.dataDir, 'qemu');
    expect(existsSync(qdir) ? readdirSync(qdir).filter((d) => d.startsWith('ses_')) : []).toEqual([]);
    expect(readdirSync(join(srv.t.dataDir, 'snapshots'))).toEqual([]);
    expect(await pidsMatching(s.id)).toEqual([]);
  }, 300_000);

  it('grows the machine\'s disk to diskMb: the guest sees the room, keeps it across hibernate; less than the image has is refused', async () => {
    const c = srv.t.client;
    // Free MiB for root, as every session process is (df's Avail leaves out ext4's 5% reserved for root).
    const avail = async (x: { run: (a: string[]) => Promise<{ stdout: string }> }) => {
      const [blocks, size] = (await x.run(['stat', '-f', '-c', '%f %S', '/'])).stdout.trim().split(' ').map(Number);
      return Math.floor((blocks! * size!) / (1024 * 1024));
    };
    const plain = await c.sessions.create({ backend: 'qemu', memoryMb: 256 });
    expect(plain.info.settings.diskMb).toBeNull();
    const imageRoom = await avail(plain);
    await plain.terminate();
    const small = (await c.sessions.create({ backend: 'qemu', memoryMb: 256, diskMb: 1000 }).catch((e: unknown) => e)) as Error & { code?: string; details?: { field?: string } };
    expect(small).toMatchObject({ code: 'invalid_argument', details: { field: 'diskMb' } });
    expect(small.message).toMatch(/at least its image's free room/);

    const want = imageRoom + 2048;
    const s = await c.sessions.create({ backend: 'qemu', memoryMb: 256, diskMb: want });
    expect(s.info.settings.diskMb).toBe(want);
    const grown = await avail(s);
    expect(grown).toBeGreaterThanOrEqual(want - 8);
    expect(grown).toBeLessThan(want + 128);
    await s.run(['dd', 'if=/dev/zero', 'of=/root/f', 'bs=1M', 'count=64', 'conv=fsync']);
    await s.hibernate();
    expect(await avail(s)).toBeGreaterThanOrEqual(want - 8 - 64); // the wake restores the grown disk
    await s.terminate();
  }, 300_000);
});
