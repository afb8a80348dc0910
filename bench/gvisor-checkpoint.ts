/**
 * `npm run bench -- --only checkpoint`: raw `runsc checkpoint` / `runsc restore` with each checkpoint flag
 * of runsc 0.0~20240729 against the same commands without it, side by side in one run, on three kinds of
 * dirty memory: 64 MB from /dev/urandom (incompressible), 54 MB of base64 text (compressible to 3/4) and
 * 64 MB of zeros (committed zero pages). A flag
 * is used by the driver (drivers/gvisor/driver.ts) only where these rows show it faster.
 *
 * A flag the installed runsc does not know (an older runsc) gives a row noting it, not a failure.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newMachineId } from '../src/core/index.js';
import { CHECKPOINT_FLAGS, RESTORE_FLAGS } from '../src/drivers/gvisor/driver.js';
import { Runsc } from '../src/drivers/gvisor/runsc.js';
import { rootfsImagePath } from '../src/drivers/image/rootfs.js';
import { ociSpec } from '../src/drivers/gvisor/spec.js';
import { dirBytes } from './memory.js';
import { row, time, type Row } from './stats.js';

interface Variant {
  name: string;
  checkpoint: readonly string[];
  restore: readonly string[];
}

/** Each new flag alone, then what the driver uses; every one against runsc's defaults (no flag). */
const VARIANTS: readonly Variant[] = [
  { name: '--compression=none', checkpoint: ['--compression=none'], restore: [] },
  { name: '--exclude-committed-zero-pages', checkpoint: ['--exclude-committed-zero-pages'], restore: [] },
  { name: '--direct (checkpoint and restore)', checkpoint: ['--direct'], restore: ['--direct'] },
  // With no flags of its own the driver's row compares runsc with itself: the spread of that ratio is the noise.
  { name: `driver's (${[...CHECKPOINT_FLAGS, ...RESTORE_FLAGS].join(' ') || 'none: noise check'})`, checkpoint: CHECKPOINT_FLAGS, restore: RESTORE_FLAGS },
];

// /dev/shm holds 64 MiB (spec.ts): the text is 40 MiB of random bytes in base64, 54 MiB.
const WORKLOADS = {
  'random 64 MB': 'head -c 64M /dev/urandom > /dev/shm/dirty',
  'text 54 MB': 'head -c 40M /dev/urandom | base64 > /dev/shm/dirty',
  'zeros 64 MB': 'head -c 64M /dev/zero > /dev/shm/dirty',
} as const;

export async function benchCheckpointFlags(o: { rootfs: string; agentDir: string; quick: boolean; runscPath?: string; log: (s: string) => void }): Promise<Row[]> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-bench-ckpt-'));
  const runsc = new Runsc({ binary: o.runscPath ?? 'runsc', root: join(dir, 'runsc'), platform: 'ptrace' });
  let n = 0;
  const bundle = async (id: string) => {
    const b = join(dir, id);
    await mkdir(b, { recursive: true });
    const spec = ociSpec(
      { sandboxId: id, limits: { memoryMb: 512, cpus: 1 }, env: {}, identity: { hostname: id, machineId: newMachineId(), generation: 1, reason: 'create' }, network: 'none', image: 'base' },
      { rootfs: o.rootfs, agentDir: o.agentDir, rootfsImage: rootfsImagePath(o.rootfs) },
    ) as { process: { args: string[] } };
    spec.process.args = ['sleep', 'infinity'];
    await writeFile(join(b, 'config.json'), JSON.stringify(spec));
    return b;
  };
  const kill = async (id: string) => {
    await runsc.run(['kill', id, 'KILL'], { allowFail: true });
    await runsc.run(['delete', '--force', id], { allowFail: true });
  };
  /** One checkpoint and one restore of a fresh sandbox with `dirty` run in it; ms, ms, image bytes. */
  const once = async (dirty: string, ck: readonly string[], rs: readonly string[]) => {
    const id = `ck-${process.pid}-${n++}`;
    await runsc.run(['run', '--detach', `--bundle=${await bundle(id)}`, id]);
    await runsc.run(['exec', id, 'sh', '-c', dirty]);
    const img = join(dir, `img-${id}`);
    await mkdir(img);
    try {
      const [ckMs] = await time(() => runsc.run(['checkpoint', ...ck, `--image-path=${img}`, id]));
      await runsc.run(['delete', '--force', id], { allowFail: true });
      const bytes = await dirBytes(img);
      const id2 = `ck-${process.pid}-${n++}`;
      const b2 = await bundle(id2);
      const [rsMs] = await time(() => runsc.run(['restore', '--detach', ...rs, `--image-path=${img}`, `--bundle=${b2}`, id2]));
      await kill(id2);
      return { ckMs, rsMs, bytes };
    } finally {
      await kill(id);
      await rm(img, { recursive: true, force: true });
    }
  };

  const rows: Row[] = [];
  const R = o.quick ? 3 : 6;
  try {
    for (const [wname, dirty] of Object.entries(WORKLOADS)) {
      for (const v of VARIANTS) {
        o.log(`checkpoint flags: ${v.name}, ${wname}`);
        const base = { ck: [] as number[], rs: [] as number[], bytes: 0 };
        const flag = { ck: [] as number[], rs: [] as number[], bytes: 0 };
        let unsupported = '';
        // Interleaved, and in alternating order, so load from other work on the machine falls on both alike.
        const plain = async () => {
          const a = await once(dirty, [], []);
          base.ck.push(a.ckMs);
          base.rs.push(a.rsMs);
          base.bytes = a.bytes;
        };
        const flagged = async () => {
          const b = await once(dirty, v.checkpoint, v.restore).catch((e: unknown) => {
            unsupported = (e as Error).message.slice(0, 80);
            return undefined;
          });
          if (!b) return;
          flag.ck.push(b.ckMs);
          flag.rs.push(b.rsMs);
          flag.bytes = b.bytes;
        };
        for (let i = 0; i < R && !unsupported; i++) {
          if (i % 2 === 0) await plain().then(flagged);
          else await flagged().then(plain);
        }
        const mb = (x: number) => `${Math.round(x / 1048576)} MB`;
        if (unsupported) {
          rows.push({ ...row(`checkpoint ${v.name}, ${wname} (raw: no flag)`, 'gvisor', [Number.NaN], base.ck, ''), note: `unsupported here: ${unsupported}` });
          continue;
        }
        rows.push({ ...row(`checkpoint ${v.name}, ${wname} (raw: no flag)`, 'gvisor', flag.ck, base.ck, 'use only if < 1x'), note: `image ${mb(flag.bytes)} vs ${mb(base.bytes)}` });
        rows.push(row(`restore after checkpoint ${v.name}, ${wname} (raw: no flag)`, 'gvisor', flag.rs, base.rs, 'use only if < 1x'));
      }
    }
  } finally {
    for (const x of await runsc.list().catch(() => [])) await kill(x.id);
    await rm(dir, { recursive: true, force: true });
  }
  return rows;
}
