import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newId } from '../core/ids.js';
import { LocalSnapshotStore } from './snapshot-dir.js';

let dir: string;
let root: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'berth-snapdir-'));
  root = join(dir, 'snapshots'); // not created yet: the first create() makes it
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('LocalSnapshotStore', () => {
  it('creates an empty private directory per image under the root', async () => {
    const s = new LocalSnapshotStore({ root });
    const id = newId('snapshot');
    const d = await s.create(id);
    expect(d).toBe(join(root, id));
    expect(readdirSync(d)).toEqual([]);
    expect(statSync(d).mode & 0o777).toBe(0o700);
    expect(s.dir(id)).toBe(d);
    await expect(s.create(id)).rejects.toMatchObject({ code: 'conflict' });
  });

  it('dir() of an unknown image throws not_found', () => {
    const s = new LocalSnapshotStore(root);
    expect(() => s.dir(newId('snapshot'))).toThrow(expect.objectContaining({ code: 'not_found' }));
  });

  it('sizeBytes sums regular files recursively, without following symlinks', async () => {
    const s = new LocalSnapshotStore({ root });
    const id = newId('snapshot');
    const d = await s.create(id);
    writeFileSync(join(d, 'pages.img'), Buffer.alloc(10_000));
    mkdirSync(join(d, 'rootfs', 'etc'), { recursive: true });
    writeFileSync(join(d, 'rootfs', 'etc', 'hostname'), 'abc\n');
    writeFileSync(join(d, 'rootfs', 'empty'), '');
    const outside = join(dir, 'big');
    writeFileSync(outside, Buffer.alloc(1_000_000));
    symlinkSync(outside, join(d, 'link'));
    expect(await s.sizeBytes(id)).toBe(10_004);
    await expect(s.sizeBytes(newId('snapshot'))).rejects.toMatchObject({ code: 'not_found' });
  });

  it('delete is rm -rf and idempotent; it does not follow a symlink out of the image', async () => {
    const s = new LocalSnapshotStore({ root });
    const id = newId('snapshot');
    const d = await s.create(id);
    mkdirSync(join(d, 'a', 'b'), { recursive: true });
    writeFileSync(join(d, 'a', 'b', 'f'), 'x');
    const outside = join(dir, 'keep');
    mkdirSync(outside);
    writeFileSync(join(outside, 'precious'), 'x');
    symlinkSync(outside, join(d, 'escape'));
    await s.delete(id);
    expect(existsSync(d)).toBe(false);
    expect(existsSync(join(outside, 'precious'))).toBe(true);
    await s.delete(id);
    await s.delete(newId('snapshot'));
  });

  it('lists the images present, ignoring other names and a missing root', async () => {
    const s = new LocalSnapshotStore({ root });
    expect(await s.list()).toEqual([]);
    const ids = [newId('snapshot'), newId('snapshot'), newId('snapshot')];
    for (const id of ids) await s.create(id);
    writeFileSync(join(root, 'stray.tmp'), '');
    mkdirSync(join(root, 'not-an-id'));
    expect(await s.list()).toEqual([...ids].sort());
    await s.delete(ids[1] as string);
    expect(await s.list()).toEqual([ids[0], ids[2]].sort());
  });

  it('refuses anything but a snapshot id on every method, so no path escapes the root', async () => {
    const s = new LocalSnapshotStore({ root });
    writeFileSync(join(dir, 'victim'), 'x');
    const bad = ['../victim', '..', '.', '', 'snp_../../victim', `${newId('snapshot')}/../../victim`, newId('session'), '/etc', 'SNP_0123456789abcdefghjk'];
    for (const id of bad) {
      await expect(s.create(id)).rejects.toMatchObject({ code: 'invalid_argument' });
      expect(() => s.dir(id)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
      await expect(s.sizeBytes(id)).rejects.toMatchObject({ code: 'invalid_argument' });
      await expect(s.delete(id)).rejects.toMatchObject({ code: 'invalid_argument' });
    }
    expect(existsSync(join(dir, 'victim'))).toBe(true);
    expect(existsSync(root)).toBe(false);
  });

  it('refuses an empty root', () => {
    expect(() => new LocalSnapshotStore({ root: '' })).toThrow(expect.objectContaining({ code: 'config' }));
  });
});
