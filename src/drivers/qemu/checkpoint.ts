import { setTimeout as sleep } from 'node:timers/promises';
import { open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type SandboxIdentity, InvalidStateError, NotFoundError, SandboxError } from '../../core/index.js';
import { moveFile } from './host.js';
import type { MachineConfig } from './machine.js';
import type { QmpClient } from './qmp.js';

/**
 * A QEMU checkpoint's image directory: the migration stream (memory and device state), the disk layer as
 * it stood at that instant, and a manifest written last, after both are on disk. No manifest, no image.
 */
export const MANIFEST = 'berth-image.json';
export const MEMORY_FILE = 'memory.bin';
export const DISK_FILE = 'disk.qcow2';
/** Migration speed cap lifted: QEMU's default is 128 MiB/s, made for live migration over a network. */
export const MIGRATE_BANDWIDTH = 2 ** 40; // bytes per second

/** Written into a checkpoint's image directory: what a restore must reproduce. */
export interface ImageManifest {
  version: 1;
  backend: 'qemu';
  /** The exact machine the memory image belongs to; a restore starts QEMU with these flags. */
  config: MachineConfig;
  memoryFile: string;
  diskFile: string;
  /** The sandbox and identity the image was taken from (informational). */
  sandboxId: string;
  identity: SandboxIdentity;
  createdAt: string;
}

/**
 * Runs a migration (`migrate` out to a URI, or `migrate-incoming` from one) and waits for its end; a
 * failure carries QEMU's error-desc. On abort the migration is cancelled.
 */
export async function migrate(qmp: QmpClient, command: 'migrate' | 'migrate-incoming', uri: string, signal?: AbortSignal): Promise<void> {
  const end = qmp.waitEvent('MIGRATION', (e) => ['completed', 'failed', 'cancelled'].includes(String(e.data?.status)), { signal });
  end.catch(() => undefined);
  try {
    await qmp.execute(command, { uri });
    const ev = await end;
    if (ev.data?.status !== 'completed') {
      const info = await qmp.execute<{ 'error-desc'?: string }>('query-migrate').catch(() => ({}) as { 'error-desc'?: string });
      throw new SandboxError(`${command} ${String(ev.data?.status)}: ${info['error-desc'] ?? 'no detail'}`);
    }
  } catch (e) {
    if (signal?.aborted && command === 'migrate') await qmp.execute('migrate_cancel').catch(() => undefined);
    throw e;
  }
}

/**
 * Cancels an outgoing migration left running (a server killed mid-hibernate: QEMU and the `cat` writing the
 * image outlive it) and waits until it has stopped, so the machine can go on. The partial image is dropped
 * by whoever owns its directory. Does nothing when no migration runs.
 */
export async function cancelMigration(qmp: QmpClient, signal?: AbortSignal): Promise<void> {
  const status = async () => (await qmp.execute<{ status?: string }>('query-migrate', undefined, signal ? { signal } : {})).status;
  const busy = (s: string | undefined) => s === 'setup' || s === 'active' || s === 'pre-switchover' || s === 'device' || s === 'cancelling';
  if (!busy(await status())) return;
  await qmp.execute('migrate_cancel', undefined, signal ? { signal } : {});
  for (let i = 0; i < 200 && busy(await status()); i++) await sleep(50);
}

/**
 * `cont` after a migration. QEMU emits MIGRATION completed slightly before it leaves the finish-migrate
 * run state, and a `cont` in that window fails with "Migration is not finalized yet": retry it briefly.
 */
export async function contAfterMigration(qmp: QmpClient, signal?: AbortSignal): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      await qmp.execute('cont', undefined, signal ? { signal } : {});
      return;
    } catch (e) {
      if (i >= 100 || !/not finalized/i.test((e as Error).message)) throw e;
      await sleep(10);
    }
  }
}

export async function readManifest(imageDir: string): Promise<ImageManifest> {
  let m: ImageManifest;
  try {
    m = JSON.parse(await readFile(join(imageDir, MANIFEST), 'utf8')) as ImageManifest;
  } catch (e) {
    throw new NotFoundError('checkpoint image', imageDir, { cause: e });
  }
  if (m.backend !== 'qemu') throw new InvalidStateError(`image in ${imageDir} was made by the ${String(m.backend)} backend`);
  if (m.version !== 1) throw new InvalidStateError(`image in ${imageDir} has manifest version ${String(m.version)}`);
  return m;
}

export function manifestText(m: ImageManifest): string {
  return JSON.stringify(m, null, 2) + '\n';
}

export async function writeManifest(imageDir: string, text: string): Promise<void> {
  const tmp = join(imageDir, `${MANIFEST}.tmp`);
  await writeFile(tmp, text);
  await fsyncFile(tmp);
  await rename(tmp, join(imageDir, MANIFEST));
  await fsyncFile(imageDir, 'r'); // the renames themselves
}

/** fsync: an image the engine records as written must survive a host crash. */
export async function fsyncFile(path: string, flags = 'r+'): Promise<void> {
  const fh = await open(path, flags);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Written into a hibernate's image directory once its migration has completed, before QEMU quits: the
 * manifest to be, where the disk layer is until it moves in, and the host's boot id. A server killed from
 * then until the commit (ImageCommits) leaves an image that completeImage() finishes: the memory stream is
 * whole, and so is the disk layer, which QEMU no longer writes. Only on the same boot: after a host crash
 * the files may never have reached the disk, and an image without a manifest is then rightly lost.
 */
export const PENDING = 'berth-image.pending.json';

interface Pending {
  manifest: string;
  disk: string;
  bootId: string;
}

async function bootId(): Promise<string> {
  return (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
}

export async function writePending(imageDir: string, manifest: string, disk: string): Promise<void> {
  const tmp = join(imageDir, `${PENDING}.tmp`);
  await writeFile(tmp, JSON.stringify({ manifest, disk, bootId: await bootId() } satisfies Pending));
  await rename(tmp, join(imageDir, PENDING));
}

/** fsyncs the image's files, then writes its manifest (the commit mark) and drops the pending note. */
export async function commitImage(imageDir: string, manifest: string): Promise<void> {
  await Promise.all([fsyncFile(join(imageDir, MEMORY_FILE)), fsyncFile(join(imageDir, DISK_FILE))]);
  await writeManifest(imageDir, manifest);
  await rm(join(imageDir, PENDING), { force: true });
}

/**
 * The image's manifest; for an image a server stopped before committing (PENDING there, same boot), the
 * disk layer is moved in if it is not yet, and the image committed first.
 */
export async function completeImage(imageDir: string): Promise<ImageManifest> {
  if (!existsSync(join(imageDir, MANIFEST))) {
    const p = await readFile(join(imageDir, PENDING), 'utf8').then((t) => JSON.parse(t) as Pending, () => undefined);
    if (p && p.bootId === (await bootId())) {
      const disk = join(imageDir, DISK_FILE);
      // Still in the machine's directory: not moved, or copied (across filesystems) maybe only in part.
      if (existsSync(p.disk)) await moveFile(p.disk, disk);
      if (existsSync(disk)) await commitImage(imageDir, p.manifest);
    }
  }
  return readManifest(imageDir);
}

/**
 * Makes images durable after checkpoint() has returned: their files are fsynced, then the manifest is
 * written, last, as the commit mark. An image without a manifest is not one (restore says not_found), so
 * a crash before the commit loses the image but never leaves a torn one that restores into a corrupt
 * guest. This keeps the host's write-back of ~130 MB (~50 ms here) out of hibernate's latency; a restore
 * in this process uses the manifest held here meanwhile (the files are complete, only not yet durable),
 * and the driver's close() waits for pending commits (settled()).
 */
export class ImageCommits {
  private readonly entries = new Map<string, { manifest: ImageManifest; done: Promise<void> }>();

  constructor(private readonly log?: (line: string) => void) {}

  /** Queues the commit work of one image after any earlier one of the same directory. */
  add(imageDir: string, manifest: ImageManifest, work: () => Promise<void>): void {
    const key = resolve(imageDir);
    const prev = this.entries.get(key)?.done ?? Promise.resolve();
    const done = prev.then(work).catch((e: unknown) => this.log?.(`committing image ${imageDir} failed: ${(e as Error).message}`));
    const entry = { manifest, done };
    this.entries.set(key, entry);
    void done.finally(() => {
      if (this.entries.get(key) === entry) this.entries.delete(key);
    });
  }

  /** The manifest of an image still being committed, if it is one. */
  pending(imageDir: string): ImageManifest | undefined {
    return this.entries.get(resolve(imageDir))?.manifest;
  }

  /** Resolves once every queued commit has finished. */
  async settled(): Promise<void> {
    await Promise.all([...this.entries.values()].map((c) => c.done));
  }
}
