import { setTimeout as sleep } from 'node:timers/promises';
import { open, readFile, rename, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { type SandboxIdentity, InvalidStateError, NotFoundError, SandboxError } from '../../core/index.js';
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
