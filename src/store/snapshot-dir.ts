import { lstatSync } from 'node:fs';
import { lstat, mkdir, readdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { AppError, ConfigError, InvalidArgumentError, NotFoundError } from '../core/errors.js';
import { isId } from '../core/ids.js';
import type { SnapshotStore } from '../core/snapshots.js';

export interface LocalSnapshotStoreOptions {
  /**
   * Directory holding one subdirectory per image, `<root>/<snapshotId>/`. Created (mode 0700: images hold
   * guest memory) by the first create(). A relative path is resolved against the working directory now.
   */
  root: string;
}

function isErrno(e: unknown, code: string): boolean {
  return (e as NodeJS.ErrnoException | null)?.code === code;
}

/** Apparent size (st_size) of every regular file below dir; symlinks are not followed. */
async function sumFiles(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      total += await sumFiles(p);
    } else if (e.isFile()) {
      try {
        total += (await lstat(p)).size;
      } catch (err) {
        if (!isErrno(err, 'ENOENT')) throw err;
      }
    }
  }
  return total;
}

/**
 * The default SnapshotStore: checkpoint images as directories on the local disk. Every method validates
 * the id with isId('snapshot', …) before touching a path, so no id can name anything outside the root.
 */
export class LocalSnapshotStore implements SnapshotStore {
  /** Absolute. */
  readonly root: string;

  /** A string is shorthand for `{ root }`. */
  constructor(opts: LocalSnapshotStoreOptions | string) {
    const root = typeof opts === 'string' ? opts : opts.root;
    if (typeof root !== 'string' || root === '') {
      throw new ConfigError('snapshot root must be a directory path', { details: { field: 'root' } });
    }
    this.root = resolve(root);
  }

  #path(snapshotId: string): string {
    if (typeof snapshotId !== 'string' || !isId('snapshot', snapshotId)) {
      throw new InvalidArgumentError('not a snapshot id', { details: { field: 'snapshotId' } });
    }
    return join(this.root, snapshotId);
  }

  /** Throws 'conflict' when the directory already exists. */
  async create(snapshotId: string): Promise<string> {
    const p = this.#path(snapshotId);
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    try {
      await mkdir(p, { mode: 0o700 });
    } catch (e) {
      if (isErrno(e, 'EEXIST')) {
        throw new AppError('conflict', 'snapshot directory already exists', { details: { kind: 'snapshot', id: snapshotId } });
      }
      throw e;
    }
    return p;
  }

  dir(snapshotId: string): string {
    const p = this.#path(snapshotId);
    try {
      if (lstatSync(p).isDirectory()) return p;
    } catch (e) {
      if (!isErrno(e, 'ENOENT')) throw e;
    }
    throw new NotFoundError('snapshot', snapshotId);
  }

  /** Bytes: the apparent sizes of the image's regular files, summed recursively. */
  async sizeBytes(snapshotId: string): Promise<number> {
    return sumFiles(this.dir(snapshotId));
  }

  /** rm -rf; deleting an absent image does nothing. */
  async delete(snapshotId: string): Promise<void> {
    await rm(this.#path(snapshotId), { recursive: true, force: true });
  }

  /** Ids of the images present, sorted; other names in the root (temporary files, say) are ignored. */
  async list(): Promise<string[]> {
    let entries;
    try {
      entries = await readdir(this.root, { withFileTypes: true });
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return [];
      throw e;
    }
    return entries
      .filter((e) => e.isDirectory() && isId('snapshot', e.name))
      .map((e) => e.name)
      .sort();
  }
}
