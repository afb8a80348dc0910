/**
 * QEMU rows: raw QEMU against Berth's QemuDriver for the same operations, in one run, on the same guest
 * image and the same QEMU command line (machine.ts's qemuArgv). The raw side drives QEMU directly: QMP for
 * stop/cont/migration and the agent's line protocol on the virtio-serial socket for exec, with none of the
 * driver's work (identity, quiescing, clock sync, fsync, self-contained image directories).
 *
 * Guest: 256 MiB RAM, 1 vCPU; hibernate, wake and fork use a guest with 64 MiB of its memory dirtied.
 * Targets under TCG (issue): boot to first exec <= 3 s, wake <= 1 s, hibernate and wake <= 1.2x raw.
 */
import { copyFile, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { newMachineId, type SandboxSpec } from '../src/core/index.js';
import { ensureGuestImage, withAgent } from '../src/drivers/image/guest.js';
import { QemuDriver, defaultAgentPath } from '../src/drivers/qemu/driver.js';
import { MIGRATE_BANDWIDTH } from '../src/drivers/qemu/checkpoint.js';
import { createLayer, isOurQemu, spawnDetached, waitGone } from '../src/drivers/qemu/host.js';
import { type MachineConfig, machineConfig, machinePaths, qemuArgv, shellQuote, type MachinePaths } from '../src/drivers/qemu/machine.js';
import { probeAccel } from '../src/drivers/qemu/probe.js';
import { QmpClient } from '../src/drivers/qemu/qmp.js';
import { percentile, round, row, type Row } from './stats.js';

export interface BenchQemuOptions {
  /** Image cache (shared with the server and the tests). Required. */
  cacheDir: string;
  /** berth-agent binary. Default: the driver's default (dist/agent/berth-agent). */
  agentPath?: string;
  /** Fewer samples. Default false. */
  quick?: boolean;
  log?: (line: string) => void;
}

export interface QemuBenchRow {
  op: string;
  berthP50Ms: number;
  rawP50Ms: number;
  berthP95Ms: number;
  rawP95Ms: number;
  /** berth p50 / raw p50. */
  ratio: number;
  n: number;
  /** 'ms' for timings; 'MiB' for the snapshot size row, whose *Ms fields then hold MiB. */
  unit: 'ms' | 'MiB';
  note?: string;
}

const DIRTY = 'head -c 64M /dev/urandom > /dev/shm/dirty';

export async function benchQemu(o: BenchQemuOptions): Promise<QemuBenchRow[]> {
  const log = o.log ?? (() => undefined);
  const work = await mkdtemp(join(tmpdir(), 'bq-'));
  const stateDir = join(work, 's');
  const driver = new QemuDriver({ stateDir, cacheDir: o.cacheDir, agentPath: o.agentPath, log });
  await driver.probe();
  const image = await ensureGuestImage({ cacheDir: o.cacheDir });
  const initrd = await withAgent(image, o.agentPath ?? defaultAgentPath());
  const { accel } = await probeAccel({ image, initrd });
  const cfg = machineConfig({
    accel,
    memoryMb: 256,
    cpus: 1,
    image: { key: image.key, buildId: image.buildId, kernel: image.kernel, initrd, baseDisk: image.baseDisk },
  });
  const B = o.quick ? 3 : 8;
  const E = o.quick ? 30 : 100;
  const P = o.quick ? 10 : 30;
  const H = o.quick ? 3 : 6;
  const F = o.quick ? 1 : 3;
  const rows: QemuBenchRow[] = [];
  const raws: RawGuest[] = [];
  let n = 0;
  const rawDir = async () => {
    const d = join(work, `r${n++}`);
    await mkdir(d);
    return machinePaths(d);
  };
  const spec = (tag: string, reason: 'create' | 'wake' | 'fork' = 'create', generation = 1): SandboxSpec => ({
    sandboxId: `${tag}-${n++}`,
    limits: { memoryMb: 256, cpus: 1 },
    env: {},
    identity: { hostname: tag, machineId: newMachineId(), generation, reason },
    network: 'none', image: 'base',
  });
  const run = async (id: string, argv: string[]) => (await driver.exec(id, { argv })).wait();
  try {
    log(`qemu: ${accel}, boot to first exec x${B}`);
    const rawBoot: number[] = [];
    const berthBoot: number[] = [];
    let raw: RawGuest | undefined;
    let id = '';
    for (let i = 0; i < B; i++) {
      // Alternate, so drift in the host's load hits both sides alike; keep one machine of each side.
      let g: RawGuest | undefined;
      const paths = await rawDir();
      rawBoot.push(
        await timed(async () => {
          g = await RawGuest.boot(cfg, paths, image.baseDisk);
          await g.exec(['echo', 'hi']);
        }),
      );
      raws.push(g!);
      const s = spec('boot');
      berthBoot.push(
        await timed(async () => {
          await driver.create(s);
          await run(s.sandboxId, ['echo', 'hi']);
        }),
      );
      if (i === 0) {
        raw = g;
        id = s.sandboxId;
      } else {
        await g!.kill();
        await driver.destroy(s.sandboxId);
      }
    }
    rows.push(mkRow('boot to first exec', berthBoot, rawBoot));

    log(`qemu: exec round trip x${E}`);
    const r0 = raw!;
    rows.push(mkRow('exec true (round trip)', await sample(E, () => run(id, ['true'])), await sample(E, () => r0.exec(['true']))));

    log(`qemu: pause/resume x${P}`);
    const bp: number[] = [];
    const br: number[] = [];
    const rp: number[] = [];
    const rr: number[] = [];
    for (let i = 0; i < P; i++) {
      rp.push(await timed(() => r0.qmp.execute('stop')));
      rr.push(await timed(() => r0.qmp.execute('cont')));
      bp.push(await timed(() => driver.pause(id)));
      br.push(await timed(() => driver.resume(id)));
    }
    rows.push(mkRow('pause', bp, rp));
    rows.push(mkRow('resume', br, rr, 'berth then resyncs the guest clock in the background; the next command waits for it'));

    log(`qemu: hibernate/wake (64 MiB dirty) x${H}`);
    const bh: number[] = [];
    const bw: number[] = [];
    const rh: number[] = [];
    const rw: number[] = [];
    const bwx: number[] = [];
    const rwx: number[] = [];
    let berthBytes = 0;
    let rawBytes = 0;
    let r = r0;
    for (let i = 0; i < H; i++) {
      await r.exec(['sh', '-c', DIRTY]);
      const mem = join(work, `raw-mem-${i}`);
      rh.push(await timed(() => r.hibernate(mem)));
      rawBytes = (await stat(mem)).size + (await stat(r.paths.disk)).size;
      let woke: RawGuest | undefined;
      const paths = r.paths;
      rw.push(await timed(async () => (woke = await RawGuest.wake(cfg, paths, mem))));
      r = woke!;
      raws.push(r);
      rwx.push(rw[rw.length - 1]! + (await timed(() => r.exec(['true']))));
      await rm(mem, { force: true });

      await run(id, ['sh', '-c', DIRTY]);
      const img = join(work, `img-${i}`);
      await mkdir(img);
      bh.push(await timed(async () => (berthBytes = (await driver.checkpoint(id, img)).bytes)));
      const w = spec('wake', 'wake', 2);
      bw.push(await timed(() => driver.restore(w, img)));
      bwx.push(bw[bw.length - 1]! + (await timed(() => run(w.sandboxId, ['true']))));
      id = w.sandboxId;
      if (i < H - 1) await rm(img, { recursive: true, force: true });
    }
    rows.push(mkRow('hibernate (256 MiB guest, 64 MiB dirty)', bh, rh, 'berth adds quiesce and moves the disk layer into the image; its fsync and manifest follow in the background'));
    rows.push(mkRow('wake (256 MiB guest, 64 MiB dirty)', bw, rw, 'berth adds the disk layer copy and the identity step (N)'));
    rows.push(mkRow('wake + first exec', bwx, rwx, 'berth\'s first command also waits for the clock resync'));
    rows.push({ ...mkRow('snapshot size on disk', [berthBytes / 2 ** 20], [rawBytes / 2 ** 20]), unit: 'MiB', note: 'memory image + disk layer (+ manifest)' });

    log(`qemu: fork x4 x${F}`);
    const img = join(work, `img-${H - 1}`);
    const rawImg = join(work, 'raw-fork');
    await mkdir(rawImg);
    await r.exec(['sh', '-c', DIRTY]);
    await r.hibernate(join(rawImg, 'mem'));
    await copyFile(r.paths.disk, join(rawImg, 'disk.qcow2'));
    const bf: number[] = [];
    const rf: number[] = [];
    for (let i = 0; i < F; i++) {
      const branches: RawGuest[] = [];
      rf.push(
        await timed(async () => {
          await Promise.all(
            [0, 1, 2, 3].map(async () => {
              const p = await rawDir();
              await copyFile(join(rawImg, 'disk.qcow2'), p.disk);
              branches.push(await RawGuest.wake(cfg, p, join(rawImg, 'mem')));
            }),
          );
        }),
      );
      for (const b of branches) await b.kill();
      raws.push(...branches);
      const specs = [0, 1, 2, 3].map(() => spec('fork', 'fork', 3));
      bf.push(await timed(() => Promise.all(specs.map((s) => driver.restore(s, img)))));
      for (const s of specs) await driver.destroy(s.sandboxId);
    }
    rows.push(mkRow('fork x4 (64 MiB-dirty snapshot), total', bf, rf));
  } finally {
    for (const r of raws) await r.kill().catch(() => undefined);
    for (const id of await driver.list()) await driver.destroy(id).catch(() => undefined);
    await driver.close();
    await rm(work, { recursive: true, force: true });
  }
  return rows;
}

/** The rows in the shared bench table's shape (bench/main.ts). */
export async function benchQemuRows(o: { cacheDir: string; quick: boolean; log: (s: string) => void; agentPath?: string }): Promise<Row[]> {
  const targets: Record<string, string> = {
    'boot to first exec': '<= 3000 ms (TCG)',
    'wake (256 MiB guest, 64 MiB dirty)': '<= 1000 ms (TCG), <= 1.2x raw',
    'hibernate (256 MiB guest, 64 MiB dirty)': '<= 1.2x raw',
  };
  return (await benchQemu(o)).map((r) => ({
    op: r.op,
    backend: 'qemu',
    n: r.n,
    berthP50Ms: r.berthP50Ms,
    berthP95Ms: r.berthP95Ms,
    rawP50Ms: r.rawP50Ms,
    rawP95Ms: r.rawP95Ms,
    ratio: r.ratio,
    target: targets[r.op] ?? '',
    ...(r.unit === 'MiB' ? { unit: 'MB' as const } : {}),
    note: ['driver level', r.note ?? ''].filter(Boolean).join('; '),
  }));
}

// ---- raw QEMU ------------------------------------------------------------------------------------

/** A QEMU started with the driver's exact flags, driven over QMP and the agent socket by hand. */
class RawGuest {
  private buf = '';
  private waiters: Array<(line: string) => boolean> = [];
  private nextId = 1;

  private constructor(
    readonly paths: MachinePaths,
    readonly pid: number,
    readonly qmp: QmpClient,
    private readonly sock: Socket,
  ) {
    sock.setEncoding('latin1');
    sock.on('data', (d: string) => {
      this.buf += d;
      let i: number;
      while ((i = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 1);
        this.waiters = this.waiters.filter((w) => !w(line));
      }
    });
  }

  static async boot(cfg: MachineConfig, paths: MachinePaths, baseDisk: string): Promise<RawGuest> {
    await createLayer(baseDisk, paths.disk);
    const g = await RawGuest.start(cfg, paths, false);
    await g.hello();
    return g;
  }

  static async wake(cfg: MachineConfig, paths: MachinePaths, memory: string): Promise<RawGuest> {
    const g = await RawGuest.start(cfg, paths, true);
    const done = g.qmp.waitEvent('MIGRATION', (e) => e.data?.status === 'completed' || e.data?.status === 'failed');
    await g.qmp.execute('migrate-incoming', { uri: `exec:cat ${shellQuote(memory)}` });
    await done;
    await g.qmp.execute('cont');
    await g.hello();
    return g;
  }

  private static async start(cfg: MachineConfig, paths: MachinePaths, incoming: boolean): Promise<RawGuest> {
    const p = spawnDetached(qemuArgv(cfg, paths, { incoming, name: 'raw' }), join(paths.dir, 'qemu.log'));
    const qmp = await QmpClient.connect({ path: paths.qmpSocket, timeoutMs: 30_000 });
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'events', state: true }] });
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': MIGRATE_BANDWIDTH });
    const sock = await new Promise<Socket>((resolve, reject) => {
      const s = connect(paths.agentSocket);
      s.once('connect', () => resolve(s));
      s.once('error', reject);
    });
    return new RawGuest(paths, p.pid, qmp, sock);
  }

  private wait(pred: (line: string) => boolean): Promise<string> {
    return new Promise((resolve) => {
      this.waiters.push((l) => {
        if (!pred(l)) return false;
        resolve(l);
        return true;
      });
    });
  }

  async hello(): Promise<void> {
    const nonce = Math.random().toString(36).slice(2, 10);
    const got = this.wait((l) => l.startsWith(`h ${nonce} `));
    const t = setInterval(() => this.sock.write(`H ${nonce}\n`), 50);
    this.sock.write(`H ${nonce}\n`);
    await got;
    clearInterval(t);
  }

  async exec(argv: string[]): Promise<void> {
    const id = 1_000_000 + this.nextId++;
    const done = this.wait((l) => l.startsWith(`x ${id} `));
    this.sock.write(`X ${id} 0 0 - ${argv.length} ${argv.map((a) => Buffer.from(a).toString('base64')).join(' ')} 0\n`);
    await done;
  }

  async hibernate(memory: string): Promise<void> {
    await this.qmp.execute('stop');
    const done = this.qmp.waitEvent('MIGRATION', (e) => e.data?.status === 'completed' || e.data?.status === 'failed');
    await this.qmp.execute('migrate', { uri: `exec:cat > ${shellQuote(memory)}` });
    await done;
    await this.qmp.execute('quit').catch(() => undefined);
    await waitGone(this.pid, this.paths.qmpSocket, 10_000);
    this.sock.destroy();
    this.qmp.close();
  }

  async kill(): Promise<void> {
    this.sock.destroy();
    this.qmp.close();
    if (!(await isOurQemu(this.pid, this.paths.qmpSocket))) return; // gone already; the pid may be reused
    process.kill(this.pid, 'SIGKILL');
    await waitGone(this.pid, this.paths.qmpSocket, 10_000);
  }
}

// ---- helpers ---------------------------------------------------------------------------------------

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function sample(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await timed(fn));
  return out;
}

function mkRow(op: string, berth: number[], raw: number[], note?: string): QemuBenchRow {
  const r = row(op, 'qemu', berth, raw, '', note);
  const b50 = percentile(berth, 50);
  const r50 = percentile(raw, 50);
  return {
    op,
    berthP50Ms: r.berthP50Ms,
    rawP50Ms: r.rawP50Ms ?? round(r50),
    berthP95Ms: r.berthP95Ms,
    rawP95Ms: r.rawP95Ms ?? round(percentile(raw, 95)),
    ratio: r50 > 0 ? round(b50 / r50, 2) : 0,
    n: berth.length,
    unit: 'ms',
    ...(note ? { note } : {}),
  };
}
