/**
 * gVisor rows: raw `runsc` against Berth's HTTP API (through the SDK) for the same operations, in one run.
 * The raw side uses the same runsc flags (checkpoint and restore flags too) and base image, with `sleep` as its init instead of the agent.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CHECKPOINT_FLAGS, RESTORE_FLAGS } from '../src/drivers/gvisor/driver.js';
import { Runsc } from '../src/drivers/gvisor/runsc.js';
import { rootfsImagePath } from '../src/drivers/image/rootfs.js';
import { ociSpec } from '../src/drivers/gvisor/spec.js';
import { newMachineId } from '../src/core/index.js';
import type { Berth as BerthClient } from '../src/sdk/index.js';
import { dirBytes, hostMemory } from './memory.js';
import { gateRow, row, sample, samplePair, time, type Row } from './stats.js';

const DIRTY = 'head -c 64M /dev/urandom > /dev/shm/dirty';

interface RawCtx {
  runsc: Runsc;
  dir: string;
  rootfs: string;
  agentDir: string;
  n: number;
}

async function rawBundle(c: RawCtx, id: string, init: string[]): Promise<string> {
  const b = join(c.dir, id);
  await mkdir(b, { recursive: true });
  const spec = ociSpec(
    { sandboxId: id, limits: { memoryMb: 512, cpus: 1 }, env: {}, identity: { hostname: id, machineId: newMachineId(), generation: 1, reason: 'create' }, network: 'none', image: 'base' },
    { rootfs: c.rootfs, agentDir: c.agentDir, rootfsImage: rootfsImagePath(c.rootfs) },
  ) as { process: { args: string[] } };
  spec.process.args = init;
  await writeFile(join(b, 'config.json'), JSON.stringify(spec));
  return b;
}

const rawRun = async (c: RawCtx, id: string) => c.runsc.run(['run', '--detach', `--bundle=${await rawBundle(c, id, ['sleep', 'infinity'])}`, id]);
const rawExec = (c: RawCtx, id: string, argv: string[]) => c.runsc.run(['exec', id, ...argv]);
const rawKill = async (c: RawCtx, id: string) => {
  await c.runsc.run(['kill', id, 'KILL'], { allowFail: true });
  await c.runsc.run(['delete', '--force', id], { allowFail: true });
};

export async function benchGvisor(o: { berth: BerthClient; rootfs: string; agentDir: string; quick: boolean; snapshotsDir: string; log: (s: string) => void }): Promise<Row[]> {
  const rows: Row[] = [];
  const dir = await mkdtemp(join(tmpdir(), 'berth-bench-raw-'));
  const c: RawCtx = { runsc: new Runsc({ binary: 'runsc', root: join(dir, 'runsc'), platform: 'ptrace' }), dir, rootfs: o.rootfs, agentDir: o.agentDir, n: 0 };
  const rid = () => `raw-${process.pid}-${c.n++}`;
  const N = o.quick ? 5 : 15;
  const berth = o.berth;
  try {
    // create
    o.log('gvisor: create');
    const rawIds: string[] = [];
    const rawCreate = await sample(N, async () => {
      const id = rid();
      rawIds.push(id);
      await rawRun(c, id);
    });
    const sessions: Array<Awaited<ReturnType<BerthClient['sessions']['create']>>> = [];
    const berthCreate = await sample(N, async () => {
      sessions.push(await berth.sessions.create({ memoryMb: 512 }));
    });
    rows.push(row('create', 'gvisor', berthCreate, rawCreate, '<= 1.3x raw runsc run'));

    // exec of `true`
    o.log('gvisor: exec');
    const s0 = sessions[0]!;
    const r0 = rawIds[0]!;
    const E = o.quick ? 30 : 100;
    const rawExecT = await sample(E, () => rawExec(c, r0, ['true']));
    await s0.run(['true']);
    const berthExecT = await sample(E, () => s0.run(['true']));
    rows.push(row('exec true (round trip)', 'gvisor', berthExecT, rawExecT, 'p50 <= 20 ms'));

    // A gated tool call against the same work without the gate: what authorization costs per call.
    o.log('gvisor: gated tool call');
    await berth.tools.call(s0.id, 'fs.list', { path: '/root' });
    const [gated, ungated] = await samplePair(E, () => berth.tools.call(s0.id, 'fs.list', { path: '/root' }), () => s0.files.list('/root'));
    rows.push(gateRow('fs.list through the gate (raw: ungated files/list route)', 'gvisor', gated, ungated));

    // pause / resume
    o.log('gvisor: pause/resume');
    const rawPause: number[] = [];
    const rawResume: number[] = [];
    for (let i = 0; i < N; i++) {
      rawPause.push((await time(() => c.runsc.run(['pause', r0])))[0]);
      rawResume.push((await time(() => c.runsc.run(['resume', r0])))[0]);
    }
    const bPause: number[] = [];
    const bResume: number[] = [];
    for (let i = 0; i < N; i++) {
      bPause.push((await time(() => s0.pause()))[0]);
      bResume.push((await time(() => s0.resume()))[0]);
    }
    rows.push(row('pause', 'gvisor', bPause, rawPause, 'p50 <= 5 ms'));
    rows.push(row('resume', 'gvisor', bResume, rawResume, 'p50 <= 5 ms'));

    // idle memory: 20 running sessions (the N already made plus more)
    o.log('gvisor: memory of 20 idle sessions');
    while (sessions.length < 20) sessions.push(await berth.sessions.create({ memoryMb: 512 }));
    while (rawIds.length < 20) {
      const id = rid();
      rawIds.push(id);
      await rawRun(c, id);
    }
    await new Promise((r) => setTimeout(r, 2000));
    const berthMem = await hostMemory(sessions.slice(0, 20).map((s) => s.id));
    const rawMem = await hostMemory(rawIds.slice(0, 20));
    const mb = (b: number) => Math.round((b / 20 / 1048576) * 10) / 10;
    rows.push({ ...row('idle running session, host memory (PSS) each', 'gvisor', [mb(berthMem)], [mb(rawMem)], '<= 20 MB each'), unit: 'MB', note: 'raw: runsc with sleep as init' });
    for (const id of rawIds.slice(1)) await rawKill(c, id);

    // hibernate / wake with 64 MB dirty
    o.log('gvisor: hibernate/wake (64 MB dirty)');
    // Interleaved, one raw and one Berth sample a round, so a host that slows down mid-run slows both sides;
    // n = 12: a single checkpoint of 64 MB ranges from ~130 to ~350 ms on a quiet host here.
    const H = o.quick ? 3 : 12;
    const rawHib: number[] = [];
    const rawWake: number[] = [];
    const bHib: number[] = [];
    const bWake: number[] = [];
    let snapBytes = 0;
    for (let i = 0; i < H; i++) {
      const id = rid();
      await rawRun(c, id);
      await rawExec(c, id, ['sh', '-c', DIRTY]);
      const img = join(dir, `img-${id}`);
      await mkdir(img);
      rawHib.push((await time(() => c.runsc.run(['checkpoint', ...CHECKPOINT_FLAGS, `--image-path=${img}`, id])))[0]);
      await c.runsc.run(['delete', '--force', id], { allowFail: true });
      const id2 = rid();
      const b = await rawBundle(c, id2, ['sleep', 'infinity']);
      rawWake.push((await time(() => c.runsc.run(['restore', '--detach', ...RESTORE_FLAGS, `--image-path=${img}`, `--bundle=${b}`, id2])))[0]);
      await rawKill(c, id2);
      await rm(img, { recursive: true, force: true });

      const s = sessions[1 + (i % (sessions.length - 1))]!;
      await s.run(['sh', '-c', DIRTY]);
      bHib.push((await time(() => s.hibernate()))[0]);
      bWake.push((await time(() => s.wake()))[0]);
    }
    rows.push(row('hibernate (64 MB dirty)', 'gvisor', bHib, rawHib, '<= 1.2x raw checkpoint'));
    rows.push(row('wake (64 MB dirty)', 'gvisor', bWake, rawWake, '<= 1.2x raw restore'));

    // 20 hibernated sessions: no RAM, disk ≈ dirty memory
    o.log('gvisor: 20 hibernated sessions');
    const hib = sessions.slice(0, 20);
    for (const s of hib) await s.hibernate();
    await new Promise((r) => setTimeout(r, 3000)); // let the background removal of stopped sandboxes finish
    const hibMem = await hostMemory(hib.map((s) => s.id));
    const totalDisk = await dirBytes(o.snapshotsDir);
    rows.push({
      ...row('hibernated session, host memory each', 'gvisor', [mb(hibMem)], null, '0 MB'),
      unit: 'MB',
      note: `disk for all 20 snapshots: ${Math.round(totalDisk / 1048576)} MB`,
    });

    // fork ×8 from a 64 MB-dirty snapshot
    o.log('gvisor: fork x8');
    const src = sessions[0]!;
    await src.wake();
    await src.run(['sh', '-c', DIRTY]);
    const snap = await src.snapshot();
    snapBytes = snap.sizeBytes;
    const F = o.quick ? 1 : 3;
    const bFork: number[] = [];
    for (let i = 0; i < F; i++) {
      const [ms, res] = await time(() => berth.snapshots.fork(snap.snapshotId, { count: 8 }));
      bFork.push(ms);
      for (const b of res) await berth.sessions.get(b.id).then((x) => x.terminate());
    }
    const rawImg = join(dir, 'fork-img');
    {
      const id = rid();
      await rawRun(c, id);
      await rawExec(c, id, ['sh', '-c', DIRTY]);
      await mkdir(rawImg);
      await c.runsc.run(['checkpoint', ...CHECKPOINT_FLAGS, `--image-path=${rawImg}`, id]);
      await c.runsc.run(['delete', '--force', id], { allowFail: true });
    }
    const rFork: number[] = [];
    for (let i = 0; i < F; i++) {
      const ids = Array.from({ length: 8 }, rid);
      const [ms] = await time(async () => {
        // Same concurrency as the engine's default (4 restores in flight).
        for (let k = 0; k < 8; k += 4) {
          await Promise.all(ids.slice(k, k + 4).map(async (id) => c.runsc.run(['restore', '--detach', ...RESTORE_FLAGS, `--image-path=${rawImg}`, `--bundle=${await rawBundle(c, id, ['sleep', 'infinity'])}`, id])));
        }
      });
      rFork.push(ms);
      for (const id of ids) await rawKill(c, id);
    }
    rows.push({ ...row('fork x8 (64 MB-dirty snapshot), total', 'gvisor', bFork, rFork, '<= 3000 ms'), note: `snapshot ${Math.round(snapBytes / 1048576)} MB` });

    for (const s of sessions) await s.terminate().catch(() => undefined);
    await berth.snapshots.delete(snap.snapshotId).catch(() => undefined);
  } finally {
    for (const x of await c.runsc.list().catch(() => [])) await rawKill(c, x.id);
    await rm(dir, { recursive: true, force: true });
  }
  return rows;
}

